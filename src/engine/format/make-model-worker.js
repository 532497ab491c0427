// A make-model worker thread: generates and quantizes chunks of random weights. Plain JS that
// registers tsx itself, because tsx's loader on the main thread does not reach workers.
import { parentPort } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
const { chunkBytes } = await import('./random-weights.ts');

parentPort.on('message', (job) => {
  const bytes = chunkBytes(job);
  parentPort.postMessage(bytes, [bytes.buffer]);
});
