#!/usr/bin/env bash
# Boots the soft-RoCE guest (build-guest.sh, cached) and runs JOB (a shell script inside the
# project) in it; the project and its node_modules are shared read-write over 9p at their own
# paths. Prints the guest's console; exits with the job's status (124 when the guest did not
# finish within TANDEM_GUEST_TIMEOUT seconds, default 3600).
# The accelerator is KVM where /dev/kvm runs unmodified guests, else qemu's software emulation
# (guest-accel.sh says which and why; TANDEM_GUEST_ACCEL=kvm|tcg forces one). When KVM was
# chosen by the probe and qemu stops without the job's status (it refused the host's CPU
# model, say), the guest boots again under TCG.
# Without a network card, unless TANDEM_GUEST_NET gives qemu's -netdev (e.g.
# socket,listen=127.0.0.1:PORT): then one virtio NIC on it, with the MAC TANDEM_GUEST_MAC
# (run-two-guests.sh joins two guests so). The kernel skips its IO-APIC timer check
# (no_timer_check): on a loaded host the emulated timer failed it and the kernel panicked. It
# keeps the TSC as its clock (tsc=reliable): qemu derives every vCPU's TSC from the host's
# clock, but on a loaded host the clock-source watchdog took the stalls of a vCPU for TSC skew
# and fell back to the emulated HPET, which makes every clock read a system call and a device
# access (docs/fabric.md: Node reads the clock in every wait and event-loop turn).
# TANDEM_GUEST_APPEND adds kernel arguments.
#   test/rdma/run-guest.sh test/rdma/guest-job.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
JOB="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
GUEST="$("$HERE/build-guest.sh")"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
SHARES=(-virtfs "local,path=$ROOT,mount_tag=project,security_model=none")
LIST="project:$ROOT"
if [[ -L "$ROOT/node_modules" ]]; then
  NM="$(readlink -f "$ROOT/node_modules")"
  SHARES+=(-virtfs "local,path=$NM,mount_tag=modules,security_model=none")
  LIST+=",modules:$NM"
fi
NET=(-nic none)
if [[ -n "${TANDEM_GUEST_NET:-}" ]]; then
  NET=(-netdev "$TANDEM_GUEST_NET,id=n0" -device "virtio-net-pci,netdev=n0,mac=${TANDEM_GUEST_MAC:-52:54:00:12:34:56}")
fi
command -v qemu-system-x86_64 >/dev/null || { echo "run-guest: qemu-system-x86_64 is missing (apt-get install qemu-system-x86)" >&2; exit 2; }
. "$HERE/guest-accel.sh"
guest_accel_choose || exit 2
boot() {
  echo "run-guest: $ACCEL_WHY" >&2
  timeout --foreground "${TANDEM_GUEST_TIMEOUT:-3600}" qemu-system-x86_64 \
    "${ACCEL_ARGS[@]}" -smp "${TANDEM_GUEST_CPUS:-2}" -m "${TANDEM_GUEST_MEM:-2048}" \
    -nographic -no-reboot "${NET[@]}" \
    -kernel "$GUEST/vmlinuz" -initrd "$GUEST/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1 no_timer_check tsc=reliable ${TANDEM_GUEST_APPEND:-} tandem.shares=$LIST tandem.job=$JOB" \
    -virtfs "local,path=$GUEST/rootfs,mount_tag=root,security_model=none" \
    -virtfs "local,path=$OUT,mount_tag=out,security_model=none" \
    "${SHARES[@]}" </dev/null
}
rc=0
boot || rc=$?
if [[ ! -f "$OUT/rc" && $GUEST_ACCEL == kvm && -z "${TANDEM_GUEST_ACCEL:-}" && $rc != 124 ]]; then
  echo "run-guest: qemu exited $rc under KVM without the job's status; booting again" >&2
  guest_accel_tcg "KVM failed (qemu exited $rc)"
  rc=0
  boot || rc=$?
fi
[[ $rc == 124 ]] && { echo "run-guest: the guest did not finish in time" >&2; exit 124; }
[[ -f "$OUT/rc" ]] || { echo "run-guest: the guest stopped without the job's status (qemu exited $rc)" >&2; exit "$((rc == 0 ? 1 : rc))"; }
exit "$(cat "$OUT/rc")"
