# Runs inside the soft-RoCE guest (run-guest.sh), alone or after another job: the 8 B latency as
# one boot's figures. For each clock source in CLOCKS that the kernel offers, ib_write_lat, then
# test/rdma/latency-probe.ts (where the time of our ping-pong goes); then the verbs layer alone
# (verbs-bench.ts). The clock source matters under emulation: perftest times with rdtsc, Node
# reads CLOCK_MONOTONIC, which is a system call and an emulated HPET read when the source is hpet.
#   test/rdma/run-guest.sh test/rdma/latency-job.sh
set -u
[ -e /sys/class/infiniband/rxe0 ] || . "$(dirname "$0")/guest-rxe.sh"
status=0
CS=/sys/devices/system/clocksource/clocksource0
echo "== clock: $(cat $CS/current_clocksource) of $(cat $CS/available_clocksource)"
dmesg | grep -i -E 'clocksource|tsc' | tail -3
lat() {
  timeout 120 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 >/tmp/lat.server 2>&1 &
  sleep 2
  timeout 120 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 10.77.0.1 >/tmp/lat.client 2>&1
  wait
  awk -v cs="$1" '$1 == 8 && NF >= 5 {printf "{\"anchor\":\"ib_write_lat\",\"bytes\":8,\"latency_us_p50\":%s,\"clock\":\"%s\"}\n", $5, cs}' /tmp/lat.client
}
for cs in ${CLOCKS:-hpet tsc}; do
  grep -qw "$cs" $CS/available_clocksource || { echo "== no clock source $cs"; continue; }
  echo "$cs" > $CS/current_clocksource
  echo "== latency with clock source $(cat $CS/current_clocksource): ib_write_lat; ours"
  lat "$cs"
  timeout 600 node --import tsx test/rdma/latency-probe.ts rdma 300 || status=1
done
echo "== latency: the verbs layer alone"
TANDEM_BENCH_WRITES=4 timeout 300 node --import tsx test/rdma/verbs-bench.ts || status=1
exit $(( status | ${rc:-0} ))
