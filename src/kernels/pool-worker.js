// A compute thread of the WebAssembly kernels pool (plain JS: tsx's loader does not reach
// worker threads). It instantiates the kernels module on each shared memory it is sent, then
// loops: wait for a job (spin briefly, then sleep on the sequence word), run its share, count
// itself done. Layout of the control words: see pool.ts.
/* global WebAssembly */
import { workerData, receiveMessageOnPort } from 'node:worker_threads';

const SEQ = 0;
const DONE = 1;
const OP = 2;
const ARENA = 3;
const ARGC = 4;
const ERROR = 5;
const QUIT = -1;

const { module, control, port, tid, nt, names, spin, native } = workerData;
const ctrl = new Int32Array(control);
const args = new Float64Array(control, 64, 32);
const fns = [];

// Native twins (native-lib.ts) replace wasm exports of the same name; they take the memory's address first.
let nativeFns;
let addr;
if (native) {
  const { default: koffi } = await import('koffi');
  const lib = koffi.load(native.path);
  addr = lib.func('uintptr_t tk_addr(uint8_t *p)');
  nativeFns = Object.fromEntries(
    Object.entries(native.prototypes).map(([name, proto]) => [name, lib.func(proto)]),
  );
}

function fnsFor(arena) {
  while (fns.length <= arena) {
    const msg = receiveMessageOnPort(port);
    if (!msg) throw new Error(`kernels worker ${tid}: no memory for arena ${arena}`);
    const memory = msg.message.memory;
    const instance = new WebAssembly.Instance(module, { env: { memory } });
    const base = nativeFns ? addr(new Uint8Array(memory.buffer)) : 0;
    fns.push(
      names.map((name) => {
        const f = nativeFns && nativeFns[name];
        return f ? (...a) => f(base, ...a) : instance.exports[name];
      }),
    );
  }
  return fns[arena];
}

let seen = 0;
for (;;) {
  let spins = 0;
  while (Atomics.load(ctrl, SEQ) === seen) {
    if (++spins > spin) Atomics.wait(ctrl, SEQ, seen, 1000);
  }
  seen = Atomics.load(ctrl, SEQ);
  const op = ctrl[OP];
  if (op === QUIT) break;
  try {
    const fn = fnsFor(ctrl[ARENA])[op];
    const a = args;
    switch (ctrl[ARGC]) {
      case 10:
        fn(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], tid, nt);
        break;
      case 11:
        fn(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], tid, nt);
        break;
      case 13:
        fn(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], tid, nt);
        break;
      default:
        fn(...Array.from(args.subarray(0, ctrl[ARGC])), tid, nt);
    }
  } catch (err) {
    Atomics.store(ctrl, ERROR, tid);
    port.postMessage({ tid, message: String(err && err.stack ? err.stack : err) });
  }
  if (Atomics.add(ctrl, DONE, 1) === nt - 2) Atomics.notify(ctrl, DONE);
}
