# Runs inside the soft-RoCE guest (run-guest.sh): the 2-node tensor-parallel `tandem run --hosts`
# over rdma and tcp against one node's tokens, and `bench collectives --provider rdma`
# (rdma-commands.test.ts) alone, then latency-job.sh's figures.
#   test/rdma/run-guest.sh test/rdma/commands-job.sh
set -u
. "$(dirname "$0")/guest-rxe.sh"
s=$(cut -d. -f1 /proc/uptime)
node --import tsx --test --test-concurrency=1 --test-timeout=2700000 --test-reporter=spec test/rdma/rdma-commands.test.ts
rc=$?
echo "== commands: rc $rc in $(( $(cut -d. -f1 /proc/uptime) - s )) s"
. "$(dirname "$0")/latency-job.sh"
