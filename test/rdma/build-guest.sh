#!/usr/bin/env bash
# Builds the soft-RoCE guest once, from Debian packages only, under
# ${TANDEM_CACHE_DIR:-~/.cache/tandem}/rdma-guest (prints that directory on stdout):
#   vmlinuz      Debian's linux-image-amd64 kernel (its modules include rdma_rxe)
#   initrd.gz    busybox-static and the modules that mount the root over 9p (virtio)
#   rootfs/      the userland the job runs in: rdma-core, libibverbs1, ibverbs-providers,
#                ibverbs-utils, perftest, iproute2, kmod, dash and their dependencies, unpacked
#                (no maintainer scripts run), the kernel's modules, and this host's node binary
# Needs apt-get (bookworm main reachable), dpkg-deb, depmod/modprobe (kmod), cpio, ldconfig.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${TANDEM_CACHE_DIR:-$HOME/.cache/tandem}/rdma-guest"
PKGS=(dash libibverbs1 ibverbs-providers ibverbs-utils perftest iproute2 kmod libstdc++6)
# Unpacked without their dependencies: rdma-core's daemons and udev rules are not needed to
# run verbs, and busybox-static is the guest's shell and init.
EXTRA=(rdma-core busybox-static)
NODE_BIN="$(command -v node)"
STAMP="v4 $(sha1sum "$HERE/guest-init.sh" | cut -c1-12) $(uname -m) $("$NODE_BIN" --version) ${PKGS[*]} ${EXTRA[*]}"

if [[ -f "$CACHE/ready" && "$(cat "$CACHE/ready")" == "$STAMP" ]]; then
  echo "$CACHE"
  exit 0
fi

for tool in apt-get apt-cache dpkg-deb depmod modprobe cpio ldconfig gzip; do
  command -v "$tool" >/dev/null || { echo "build-guest: $tool is missing (bin/setup.sh installs it)" >&2; exit 2; }
done

rm -rf "$CACHE.tmp"
mkdir -p "$CACHE.tmp/debs" "$CACHE.tmp/rootfs"
cd "$CACHE.tmp"

KPKG="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')"
KVER="${KPKG#linux-image-}"
mapfile -t DEPS < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${PKGS[@]}" 2>/dev/null | grep '^[a-z0-9]' | sort -u)
(cd debs && apt-get download -qq "${DEPS[@]}" "${EXTRA[@]}" "$KPKG" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
[[ -n "$(ls debs/"$KPKG"_*.deb 2>/dev/null)" ]] || { echo "build-guest: could not download $KPKG" >&2; exit 2; }

# bookworm's packages still ship some files under /bin and /lib: keep the merged-/usr layout.
R=rootfs
mkdir -p $R/usr/bin $R/usr/sbin $R/usr/lib $R/usr/lib64
for d in bin sbin lib lib64; do ln -sfn usr/$d $R/$d; done
for deb in debs/*.deb; do
  dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C $R
done
mv $R/boot/vmlinuz-"$KVER" vmlinuz
rm -rf $R/boot $R/usr/share/doc $R/usr/share/man $R/usr/share/locale
depmod -b $R "$KVER"
ldconfig -r $R
cp "$NODE_BIN" $R/usr/bin/node
# dash is /bin/sh (busybox-static's own shell runs its applets before any program on PATH).
ln -sfn dash $R/usr/bin/sh
# busybox's applets (sh, cat, sleep, ...) where no package put a program of that name.
for applet in $($R/usr/bin/busybox --list-full); do
  [[ -e $R/$applet || -L $R/$applet ]] || ln -s /usr/bin/busybox $R/$applet
done
mkdir -p $R/proc $R/sys $R/dev $R/tmp $R/run $R/work $R/out $R/var/tmp $R/root $R/etc
echo "root:x:0:0:root:/root:/bin/sh" > $R/etc/passwd
echo "root:x:0:" > $R/etc/group
echo "127.0.0.1 localhost" > $R/etc/hosts

# initramfs: busybox and the modules (in load order) that mount the root file system over 9p.
I=initrd
mkdir -p $I/bin $I/mod $I/newroot $I/proc $I/sys $I/dev
cp $R/usr/bin/busybox $I/bin/busybox
modprobe -d $R -S "$KVER" --show-depends -a virtio_pci 9pnet_virtio 9p \
  | awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' > modules.order
while read -r ko; do
  cp "$ko" $I/mod/
  echo "$(basename "$ko")" >> $I/mod/order
done < modules.order
cp "$HERE/guest-init.sh" $I/init
chmod +x $I/init
(cd $I && find . | cpio -o -H newc --quiet | gzip -1) > initrd.gz
rm -rf $I debs modules.order

echo "$STAMP" > ready
cd /
rm -rf "$CACHE"
mv "$CACHE.tmp" "$CACHE"
echo "$CACHE"
