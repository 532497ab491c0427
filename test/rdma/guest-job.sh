# Runs inside the soft-RoCE guest (run-guest.sh): one rxe device on a veth end (guest-rxe.sh),
# then the tests and benchmarks that need it. Linux 6.1's rxe only carries traffic in the initial
# network namespace, so both ends of every test are processes (or queue pairs) on rxe0.
set -u
. "$(dirname "$0")/guest-rxe.sh"
# each stage's start, in seconds since the guest booted (the job's time is the sum of its stages)
at() { echo "   (at $(cut -d' ' -f1 /proc/uptime) s)"; }
echo "== rdma: verbs tests (loopback, peer loss); the rdma provider: conformance (RC, UC), peer loss,"
echo "   a 2-rank all-reduce against tcp's bits, doctor's port check, --provider rdma through the commands"
at
node --import tsx --test --test-concurrency=1 --test-timeout=2700000 \
  test/rdma/verbs-loopback.test.ts test/rdma/verbs-peer-loss.test.ts \
  test/rdma/rdma-conformance.test.ts test/rdma/rdma-peer-loss.test.ts \
  test/rdma/rdma-all-reduce.test.ts test/rdma/rdma-shared-cq.test.ts test/rdma/rdma-port-check.test.ts \
  test/rdma/rdma-commands.test.ts
status=$?
echo "== rdma: tandem devinfo; tandem doctor --mode rdma"
at
node bin/tandem.js devinfo
# About a minute here: loading the CLI under emulation, then the port check (each bounded at 60 s).
timeout 300 node bin/tandem.js doctor --mode rdma || status=1
echo "== rdma: perftest anchors (JSON lines)"
at
# ib_write_lat's t_typical is its median; ib_write_bw's BW average is in perftest's MB/s.
timeout 300 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 >/tmp/lat.server 2>&1 &
sleep 2
timeout 300 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 10.77.0.1 >/tmp/lat.client 2>&1
wait
awk '$1 == 8 && NF >= 5 {printf "{\"anchor\":\"ib_write_lat\",\"bytes\":8,\"latency_us_p50\":%s}\n", $5}' /tmp/lat.client
timeout 300 ib_write_bw -d rxe0 -x 1 -s 4194304 -n 20 >/tmp/bw.server 2>&1 &
sleep 2
timeout 300 ib_write_bw -d rxe0 -x 1 -s 4194304 -n 20 10.77.0.1 >/tmp/bw.client 2>&1
wait
awk '$1 == 4194304 && NF >= 4 {printf "{\"anchor\":\"ib_write_bw\",\"bytes\":4194304,\"bandwidth_MBps\":%s}\n", $4}' /tmp/bw.client
echo "== rdma: tandem bench fabric --provider rdma (JSON lines)"
at
# Two invocations: one size each, with round trips and writes sized for software emulation
# (the default --iterations would move gigabytes at 4 MiB, hours at rxe's emulated speed):
# 8 B with 1000 timed round trips (ib_write_lat -n 1000), 4 MiB with 5 round trips and 40 writes.
timeout 600 node bin/tandem.js bench fabric --provider rdma --sizes 8 --iterations 1000 --json || status=1
timeout 600 node bin/tandem.js bench fabric --provider rdma --sizes 4194304 --iterations 2 --json || status=1
echo "== rdma: the verbs layer's own figures (JSON lines)"
at
timeout 300 node --import tsx test/rdma/verbs-bench.ts || status=1
echo "== rdma: done"
at
exit $status
