// Loaded with --import into every arm64 Node that `npm run test:arm64` starts under
// qemu-aarch64 (bin/test-arm64.js): makes that emulated Node behave as on an arm64 machine.
// - koffi finds its arm64 binary (the @koromix/koffi-linux-arm64 package beside this file,
//   installed by bin/setup.sh) through process.resourcesPath, one of the places it looks
//   (bin/test-arm64.js links build/arm64/koffi to it);
// - a child Node (spawn of process.execPath: the llama.cpp oracle's child; fork:
//   node-llama-cpp's binary test) starts through node-arm64.sh, i.e. qemu-aarch64 with this
//   file preloaded again, since the host kernel cannot run an arm64 binary by itself.
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
process.resourcesPath = join(here, '..', '..', 'build', 'arm64');

const require = createRequire(import.meta.url);
const cp = require('node:child_process');
const wrapper = join(here, 'node-arm64.sh');

// spawn(process.execPath, args, options) -> spawn(node-arm64.sh, args, options)
const spawn = cp.spawn;
cp.spawn = function (cmd, ...rest) {
  return spawn.call(this, cmd === process.execPath ? wrapper : cmd, ...rest);
};
// fork(module, args, options): a Node child through node-arm64.sh unless options name another
const fork = cp.fork;
cp.fork = function (modulePath, args, options) {
  if (!Array.isArray(args)) return fork.call(this, modulePath, [], { execPath: wrapper, ...args });
  return fork.call(this, modulePath, args, { execPath: wrapper, ...options });
};
syncBuiltinESMExports();
