#!/usr/bin/env bash
# Everything a fresh Debian/Ubuntu machine needs before tandem runs: system packages (when root
# with apt), the npm dependencies from the lockfile, the kernels build, and `tandem` on the PATH
# (a link to this checkout's bin/tandem.js in npm's global bin directory), so that every
# command in the docs works as written from any directory.
# `bin/setup.sh --path-only` does the last step alone.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout="$(pwd)"

# Links npm's global bin/tandem to this checkout (what `npm link` does, without npm reinstalling
# the checkout's dependencies); says where, and what to do when that directory is not writable
# or not on the PATH.
put_on_path() {
  local prefix bindir
  prefix="$(npm prefix -g)"
  bindir="$prefix/bin"
  if mkdir -p "$bindir" 2>/dev/null && [ -w "$bindir" ]; then
    echo "setup: putting tandem on the PATH: linking $bindir/tandem -> $checkout/bin/tandem.js" >&2
    ln -sfn "$checkout/bin/tandem.js" "$bindir/tandem"
  else
    echo "setup: cannot write $bindir; to put tandem on the PATH run \`sudo ln -sfn $checkout/bin/tandem.js $bindir/tandem\`, or add $checkout/bin to PATH and call it as tandem.js" >&2
    return 0
  fi
  case ":$PATH:" in
    *":$bindir:"*) ;;
    *) echo "setup: $bindir is not on your PATH; add it (e.g. export PATH=\"$bindir:\$PATH\" in ~/.profile)" >&2 ;;
  esac
}

if [ "${1:-}" = --path-only ]; then
  put_on_path
  exit 0
fi

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# A C compiler builds the optional native kernels (AVX2/AVX-512); without one the WebAssembly kernels run.
command -v cc >/dev/null 2>&1 || missing+=(gcc)
# `npm run test:arm64` checks the arm64 (NEON) kernels here: a cross compiler builds them, qemu-user runs an arm64 Node.
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || missing+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || missing+=(qemu-user)
# Debian's chromium runs the dashboard's browser test (playwright-core drives it; no browser is downloaded).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# The WebGPU kernels (Dawn) need a Vulkan driver; on a machine without a GPU that is Mesa's
# lavapipe, which Dawn accepts from Mesa 25 on: Debian 12 has 22.3, bookworm-backports has 25.
backports=()
if grep -q '^VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null &&
  ! dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | grep -q '^2[5-9]'; then
  backports=(mesa-vulkan-drivers libvulkan1)
fi
if [ ${#missing[@]} -gt 0 ] || [ ${#backports[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    if [ ${#backports[@]} -gt 0 ] && ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo 'deb http://deb.debian.org/debian bookworm-backports main' >/etc/apt/sources.list.d/bookworm-backports.list
    fi
    echo "setup: installing ${missing[*]} ${backports[*]}" >&2
    apt-get update -q >/dev/null
    if [ ${#missing[@]} -gt 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
    fi
    if [ ${#backports[@]} -gt 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t bookworm-backports "${backports[@]}" >/dev/null
    fi
  else
    echo "setup: missing system packages: ${missing[*]} ${backports[*]} (install them; some tests will be skipped)" >&2
  fi
fi
npm ci --no-audit --no-fund
# The arm64 Node and koffi binary for test:arm64 (test/arm64/package.json); --force since npm
# otherwise refuses packages built for another CPU.
npm ci --force --no-audit --no-fund --prefix test/arm64
npm run build
put_on_path
