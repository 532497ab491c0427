#!/usr/bin/env bash
# Prepares, on this (GPU-less) machine, what bench/gpu-device.sh needs on a lent GPU machine
# (the `device` tool: a bare x86-64 Linux image with the NVIDIA driver, no Node, no network,
# at most 64 MiB carried per call). Writes into .device/ (ignored through .git/info/exclude):
#
#   .device/core/core.tar.xz    node itself and the runtime node_modules tandem needs for
#                               `bench model --kernels webgpu` (tsx, webgpu for linux-x64, ...)
#   .device/llama/llama.tar.xz  node-llama-cpp and its prebuilt Vulkan binary (the anchor)
#   .device/gl/*.deb            the Vulkan loader (libvulkan1 and the GL/EGL dispatch libraries)
#
# Each part stays under the 64 MiB a call carries; gpu-device.sh says how to send them.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >>"$exclude"
mkdir -p .device/core .device/llama .device/gl
nm="$(readlink -f node_modules)"

# the dependency closure of the named packages inside node_modules
closure() {
  node -e '
    const { readFileSync, existsSync } = require("node:fs");
    const [root, ...start] = process.argv.slice(1);
    const seen = new Set();
    const stack = [...start];
    while (stack.length) {
      const n = stack.pop();
      if (seen.has(n) || !existsSync(`${root}/${n}/package.json`)) continue;
      seen.add(n);
      const j = JSON.parse(readFileSync(`${root}/${n}/package.json`, "utf8"));
      stack.push(...Object.keys({ ...j.dependencies, ...j.optionalDependencies }));
    }
    console.log([...seen].join("\n"));' "$nm" "$@"
}

# assemblyscript/binaryen build the wasm kernels, carried prebuilt in build/ instead
closure tsx webgpu pino pino-pretty prom-client koffi @huggingface/jinja |
  grep -vx 'binaryen\|assemblyscript' >.device/core/packages.txt
tar -cf - -C "$nm" --exclude='webgpu/dist/darwin-*' --exclude='webgpu/dist/win32-*' \
  --exclude='webgpu/dist/linux-arm64' -T .device/core/packages.txt \
  -C "$(dirname "$(readlink -f "$(command -v node)")")" node | xz -T0 -6 >.device/core/core.tar.xz

closure node-llama-cpp | grep -v '^@node-llama-cpp/' >.device/llama/packages.txt
echo '@node-llama-cpp/linux-x64-vulkan' >>.device/llama/packages.txt
tar -cf - -C "$nm" --exclude='node-llama-cpp/llama/llama.cpp' -T .device/llama/packages.txt |
  xz -T0 -6 >.device/llama/llama.tar.xz

o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
mkdir -p /tmp/amd64/partial
# shellcheck disable=SC2086
apt-get $o update -q >/dev/null
# shellcheck disable=SC2086
(cd .device/gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
du -sh .device/core .device/llama .device/gl
