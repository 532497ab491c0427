#!/bin/busybox sh
# PID 1 of the soft-RoCE guest (the initramfs that build-guest.sh makes). Mounts the root
# file system and the host's shares over 9p, runs the job in it, writes its exit status to
# /out/rc and powers off. Kernel command line: tandem.shares=TAG:PATH,... (each host folder
# is mounted at the same absolute path, so the project's absolute symlinks still resolve),
# tandem.job=PATH (a shell script, run from its folder).
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /mod/order); do insmod "/mod/$m"; done
# cache=loose: the shares do not change while the guest runs, and page faults of mapped
# programs (node) are served from the guest's page cache instead of one 9p read each.
P9=trans=virtio,version=9p2000.L,msize=262144,cache=loose
mount -t 9p -o $P9 root /newroot || { echo "guest: no root share"; poweroff -f; }
R=/newroot
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mount -t tmpfs tmp $R/tmp
mount -t tmpfs run $R/run
mkdir -p $R/dev/shm
mount -t tmpfs shm $R/dev/shm
mount -t 9p -o $P9 out $R/out
JOB=
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    tandem.shares=*)
      for share in $(echo "${arg#tandem.shares=}" | tr ',' ' '); do
        mkdir -p "$R${share#*:}"
        mount -t 9p -o $P9 "${share%%:*}" "$R${share#*:}"
      done ;;
    tandem.job=*) JOB="${arg#tandem.job=}" ;;
  esac
done
echo "guest: up after $(cut -d' ' -f1 /proc/uptime) s"
chroot $R /bin/sh -c "cd \"\$(dirname '$JOB')\" && HOME=/root PATH=/usr/local/bin:/usr/bin:/usr/sbin exec /bin/sh '$JOB'" 2>&1
echo $? > $R/out/rc
sync
poweroff -f
