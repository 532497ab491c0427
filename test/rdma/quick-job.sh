# Runs inside the soft-RoCE guest (run-guest.sh): the reduced case set, for a CI that has the
# minutes for a guest but not for the whole of guest-job.sh: the verbs tests and the rdma
# provider's conformance (RC, UC), peer loss and 2-rank all-reduce, without the commands (each
# CLI process takes up to a minute to start under emulation), doctor and the benchmarks.
#   test/rdma/run-guest.sh test/rdma/quick-job.sh   (npm run test:rdma:quick)
set -u
. "$(dirname "$0")/guest-rxe.sh"
s=$(cut -d. -f1 /proc/uptime)
node --import tsx --test --test-concurrency=1 --test-timeout=1200000 \
  test/rdma/verbs-loopback.test.ts test/rdma/rdma-conformance.test.ts \
  test/rdma/rdma-peer-loss.test.ts test/rdma/rdma-all-reduce.test.ts \
  test/rdma/rdma-shared-cq.test.ts
status=$?
echo "== rdma quick: rc $status in $(( $(cut -d. -f1 /proc/uptime) - s )) s after boot"
exit $status
