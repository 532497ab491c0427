export { Router, SENT, type RouterOptions } from './router.js';
export { linkBufferBytes, type LinkSpec } from './link.js';
export type { Message, Settled, Sink } from './mailboxes.js';
export { nextTurn } from './pump.js';
