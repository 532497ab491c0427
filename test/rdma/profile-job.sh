# Runs inside the soft-RoCE guest (run-guest.sh): a CPU profile of the rdma provider's 8 B
# ping-pong between two queue pairs of one process (latency-probe.ts's "one process" row,
# 3000 round trips), written to .cache/rdma-profile/ in the project, which the
# host sees (open it in Chrome's DevTools, or read the samples' self time per function).
#   test/rdma/run-guest.sh test/rdma/profile-job.sh
set -u
. "$(dirname "$0")/guest-rxe.sh"
mkdir -p .cache/rdma-profile
timeout 600 node --cpu-prof --cpu-prof-dir=.cache/rdma-profile --cpu-prof-interval 200 \
  --import tsx test/rdma/latency-probe.ts rdma 3000 one
