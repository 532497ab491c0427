#!/usr/bin/env bash
# Boots two soft-RoCE guests (run-guest.sh) joined by one Ethernet link (qemu's socket network:
# the first guest listens on a local TCP port, the second connects; each has one virtio NIC,
# eth0) and runs JOB_A in the first and JOB_B in the second. Each guest's console goes to
# stdout with its prefix; exits non-zero unless both jobs exit 0. Linux 6.1's rxe carries no
# traffic between network namespaces of one guest, so two hosts need two guests.
#   test/rdma/run-two-guests.sh test/rdma/two-hosts-a.sh test/rdma/two-hosts-b.sh
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
"$HERE/build-guest.sh" >/dev/null || exit 2
PORT="${TANDEM_GUEST_LINK_PORT:-$((20000 + RANDOM % 20000))}"
export TANDEM_GUEST_SMP="${TANDEM_GUEST_CPUS:-1}"
TANDEM_GUEST_CPUS=$TANDEM_GUEST_SMP TANDEM_GUEST_NET="socket,listen=127.0.0.1:$PORT" \
  TANDEM_GUEST_MAC=52:54:00:7a:00:01 "$HERE/run-guest.sh" "$1" 2>&1 | sed -u 's/^/[a] /' &
A=$!
# The listening side must exist before the other connects (looked up with ss: a test
# connection would be taken for the other guest).
for _ in $(seq 100); do
  ss -ltnH "sport = :$PORT" | grep -q . && break
  sleep 0.2
done
TANDEM_GUEST_CPUS=$TANDEM_GUEST_SMP TANDEM_GUEST_NET="socket,connect=127.0.0.1:$PORT" \
  TANDEM_GUEST_MAC=52:54:00:7a:00:02 "$HERE/run-guest.sh" "$2" 2>&1 | sed -u 's/^/[b] /' &
B=$!
wait $A; ra=$?
wait $B; rb=$?
echo "run-two-guests: guest a exited $ra, guest b $rb"
[[ $ra == 0 && $rb == 0 ]]
