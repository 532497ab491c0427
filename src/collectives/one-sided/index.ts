export { BOARD_MAX } from './board.js';
export {
  DirectExchange,
  exchangeBufferBytes,
  usesDirectExchange,
  type DirectExchangeOptions,
  type PiecesSum,
} from './direct-exchange.js';
export { exactF32, type PartCodec, type SlotViews } from './part-codec.js';
