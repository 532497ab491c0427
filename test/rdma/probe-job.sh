modprobe crc32_generic; modprobe rdma_rxe; modprobe veth; modprobe ib_uverbs
ip link add va type veth peer name vb
ip addr add 10.77.0.1/24 dev va; ip addr add 10.77.0.2/24 dev vb
ip link set lo up; ip link set va up; ip link set vb up
rdma link add rxe0 type rxe netdev va
echo "== one device, loopback"
timeout 30 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 >/tmp/s1 2>&1 &
sleep 2
timeout 30 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 10.77.0.1 >/tmp/c1 2>&1; echo "client rc $?"
wait; tail -4 /tmp/c1
timeout 60 ib_write_bw -d rxe0 -x 1 -s 4194304 -n 50 >/tmp/s2 2>&1 &
sleep 2
timeout 60 ib_write_bw -d rxe0 -x 1 -s 4194304 -n 50 10.77.0.1 >/tmp/c2 2>&1; echo "client rc $?"
wait; tail -4 /tmp/c2
echo "== two devices"
rdma link add rxe1 type rxe netdev vb
timeout 20 ib_write_lat -d rxe1 -x 1 -s 8 -n 200 >/tmp/s3 2>&1 &
sleep 2
timeout 20 ib_write_lat -d rxe0 -x 1 -s 8 -n 200 10.77.0.2 >/tmp/c3 2>&1; echo "client rc $?"
wait; tail -4 /tmp/c3
