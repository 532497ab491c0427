#!/usr/bin/env bash
# Everything a fresh Debian/Ubuntu machine needs before tandem runs: system packages (when root
# with apt), then the npm dependencies from the lockfile.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# A C compiler builds the optional native kernels (AVX2/AVX-512); without one the WebAssembly kernels run.
command -v cc >/dev/null 2>&1 || missing+=(gcc)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${missing[*]}" >&2
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
  else
    echo "setup: missing system packages: ${missing[*]} (install them; some tests will be skipped)" >&2
  fi
fi
npm ci --no-audit --no-fund
npm run build
