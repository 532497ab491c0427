#!/usr/bin/env bash
# CI's soft-RoCE step (.ci/run, after npm test): the rdma provider on a real kernel verbs stack.
# Installs what the guest needs from Debian packages where it may (root with apt-get:
# qemu-system-x86, cpio, kmod), builds the guest (build-guest.sh: Debian packages only, cached)
# and runs the reduced case set in it (quick-job.sh, `npm run test:rdma:quick`: the verbs tests,
# conformance on RC and UC, peer loss, the 2-rank all-reduce), under KVM where /dev/kvm runs
# unmodified guests and under TCG otherwise (guest-accel.sh).
# A machine that cannot run the guest at all (not x86_64, no qemu and no way to install it, no
# Debian mirror for the guest's packages) skips with the reason and exits 0; a failed test, or
# a guest that does not finish within TANDEM_CI_RDMA_TIMEOUT seconds (default 900), fails.
# TANDEM_CI_RDMA=0 skips; TANDEM_CI_RDMA=full runs the whole of guest-job.sh (npm run test:rdma).
#   bash test/rdma/ci.sh
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
skip() {
  echo "rdma ci: skipped: $1" >&2
  exit 0
}
mode="${TANDEM_CI_RDMA:-quick}"
case "$mode" in
  0) skip "TANDEM_CI_RDMA=0" ;;
  quick) JOB="$HERE/quick-job.sh" ;;
  full) JOB="$HERE/guest-job.sh" ;;
  *)
    echo "rdma ci: TANDEM_CI_RDMA must be 0, quick or full, not '$mode'" >&2
    exit 2
    ;;
esac
[[ "$(uname -m)" == x86_64 ]] || skip "the guest is Debian amd64 with this host's node binary; this host is $(uname -m)"
start=$(date +%s)
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
if [[ ${#need[@]} -gt 0 ]]; then
  [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null || skip "missing ${need[*]}, and not root with apt-get to install them"
  echo "rdma ci: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; } ||
    skip "apt-get could not install ${need[*]}"
fi
# The guest's packages are looked up in apt's lists: a machine that never ran apt-get update has none.
if ! apt-cache show linux-image-amd64 >/dev/null 2>&1 && [[ "$(id -u)" == 0 ]]; then
  apt-get update -q >/dev/null || skip "apt-get update failed"
fi
"$HERE/build-guest.sh" >/dev/null
built=$?
# build-guest.sh exits 2 when a tool or the Debian packages could not be had; anything else is a fault.
[[ $built == 2 ]] && skip "the guest could not be built from Debian packages (above)"
[[ $built == 0 ]] || exit $built
echo "rdma ci: guest ready after $(($(date +%s) - start)) s; running $(basename "$JOB")" >&2
TANDEM_GUEST_TIMEOUT="${TANDEM_CI_RDMA_TIMEOUT:-900}" "$HERE/run-guest.sh" "$JOB"
rc=$?
echo "rdma ci: $(basename "$JOB") exited $rc after $(($(date +%s) - start)) s in all" >&2
exit $rc
