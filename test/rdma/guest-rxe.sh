# Sourced by the one-guest jobs (guest-job.sh, latency-job.sh, commands-job.sh) inside the
# soft-RoCE guest: the project's root as the working directory, one rxe device on a veth end
# (Linux 6.1's rxe only carries traffic in the initial network namespace, so both ends of every
# test are processes or queue pairs on rxe0), and the environment every job runs with.
cd "$(dirname "$0")/../.."
modprobe -a crc32_generic rdma_rxe veth ib_uverbs
ip link add va type veth peer name vb
ip addr add 10.77.0.1/24 dev va
ip link set lo up; ip link set va up; ip link set vb up
rdma link add rxe0 type rxe netdev va || exit 3
export TANDEM_RDMA_DEVICE=rxe0 TANDEM_RDMA_IPV4=10.77.0.1
# The reductions' and copies' C kernels are built with -march=native for the host and cached
# where the guest sees them; qemu's emulated CPU lacks those instructions (SIGILL): WebAssembly.
export TANDEM_NATIVE_REDUCE=0 TANDEM_NATIVE_COPY=0
# Under emulation a process stalls for seconds at a time (a CLI starts in ~45 s): the cluster's
# silence limit (2.5 s) would declare a busy coordinator or node lost, and --nodes would give up
# on a node still starting (60 s). Set here for every process of the job.
export TANDEM_CLUSTER_SILENCE_MS=60000 TANDEM_NODE_START_MS=600000
