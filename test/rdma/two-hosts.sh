# Sourced by two-hosts-a.sh and two-hosts-b.sh (IDX=1 or 2) inside the two guests that
# run-two-guests.sh joins: eth0 at 10.78.0.IDX with an rxe device on it, then on both hosts the
# cross-host tests (test/rdma/rdma-two-hosts.test.ts), then a 2-node tensor-parallel
# `tandem run --hosts` with one `tandem node` on each host, over rdma and over tcp, against the
# single-node tokens (host a coordinates and compares; host b serves its node until a is done).
# Reference kernels: qemu's default CPU model has no WebAssembly SIMD, and the host's native
# kernels are built for the host's CPU.
set -u
cd "$(dirname "$0")/../.."
ME=10.78.0.$IDX
A=10.78.0.1
B=10.78.0.2
modprobe -a crc32_generic virtio_net rdma_rxe ib_uverbs || exit 3
ip link set lo up
ip link set eth0 up
ip addr add "$ME/24" dev eth0
rdma link add rxe0 type rxe netdev eth0 || exit 3
export TANDEM_RDMA_DEVICE=rxe0 TANDEM_TWO_HOSTS=$SIDE TANDEM_SECRET=rdma-two-hosts-secret-0123456789
# The host's -march=native C kernels SIGILL under qemu's emulated CPU: WebAssembly.
export TANDEM_NATIVE_REDUCE=0 TANDEM_NATIVE_COPY=0
# Emulation stalls a process for seconds: the cluster's silence limit (2.5 s) ended host b's
# node's session while host a's coordinator shared its one vCPU (see guest-rxe.sh).
export TANDEM_CLUSTER_SILENCE_MS=60000 TANDEM_NODE_START_MS=600000
up() { cut -d. -f1 /proc/uptime; }
for _ in $(seq 120); do ping -c 1 -W 1 "$([ "$IDX" = 1 ] && echo $B || echo $A)" >/dev/null 2>&1 && break; sleep 1; done
echo "== two hosts ($SIDE, $ME): rxe0 on eth0; the cross-host tests"
node --import tsx --test --test-concurrency=1 --test-timeout=1800000 --test-reporter=spec \
  test/rdma/rdma-two-hosts.test.ts
status=$?
echo "== two hosts ($SIDE): tests rc $status at $(up) s"

# Whether a TCP port answers (node: dash has no /dev/tcp, and busybox nc has no -z).
answers() {
  node -e "require('net').connect($2, '$1').on('connect', () => process.exit(0)).on('error', () => process.exit(1))"
}
ARGS="--threads 1 --temperature 0 --prompt-tokens 1,450,2996 --max-tokens 6 --json"
if [ "$IDX" = 2 ]; then
  # Bounded by the guest's own deadline (run-guest.sh): a shorter bound here ended this node
  # while host a, slower under load, still ran over it.
  timeout 7200 node bin/tandem.js node --listen $B:7100 --threads 1 --speed 1 --kernels reference &
  node_pid=$!
  # host a says when its runs are done; then this node ends
  timeout 7200 nc -l -p 7399 >/dev/null
  kill $node_pid 2>/dev/null
  exit $status
fi
# Whatever happens below, host b's node is told to end.
trap 'echo done | nc $B 7399' EXIT
M=/tmp/two-hosts.gguf
node bin/tandem.js make-model $M --seed 11 --json || exit 4
timeout 7200 node bin/tandem.js node --listen $A:7100 --threads 1 --speed 1 --kernels reference &
node_pid=$!
printf '%s\n%s\n' "$A:7100" "$B:7100" > /tmp/hosts.txt
for _ in $(seq 120); do answers $A 7100 && answers $B 7100 && break; sleep 5; done
tokens() { grep -o '"tokens":\[[0-9,]*\]' "$1"; }
timeout 900 node bin/tandem.js run $M --kernels reference $ARGS > /tmp/single.json || status=1
echo "single node: $(tokens /tmp/single.json)"
for p in tcp rdma; do
  s=$(up)
  timeout 900 node bin/tandem.js run $M --hosts /tmp/hosts.txt --parallel tp --provider $p $ARGS > /tmp/$p.json || status=1
  echo "2 hosts over $p: $(tokens /tmp/$p.json) in $(( $(up) - s )) s"
  [ -n "$(tokens /tmp/$p.json)" ] && [ "$(tokens /tmp/$p.json)" = "$(tokens /tmp/single.json)" ] || { echo "2 hosts over $p: not the single node's tokens"; cat /tmp/$p.json; status=1; }
done
kill $node_pid 2>/dev/null
echo "== two hosts ($SIDE): rc $status"
exit $status
