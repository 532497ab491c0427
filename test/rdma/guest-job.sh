# Runs inside the soft-RoCE guest (run-guest.sh): one rxe device on a veth end, then the
# tests and benchmarks that need it. Linux 6.1's rxe only carries traffic in the initial
# network namespace, so both ends of every test are processes (or queue pairs) on rxe0.
set -u
cd "$(dirname "$0")/../.."
modprobe -a crc32_generic rdma_rxe veth ib_uverbs
ip link add va type veth peer name vb
ip addr add 10.77.0.1/24 dev va
ip link set lo up; ip link set va up; ip link set vb up
rdma link add rxe0 type rxe netdev va || exit 3
export TANDEM_RDMA_DEVICE=rxe0 TANDEM_RDMA_IPV4=10.77.0.1
echo "== rdma: verbs loopback tests"
node --import tsx --test --test-timeout=120000 test/rdma/verbs-loopback.test.ts
