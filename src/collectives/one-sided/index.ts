export { BOARD_MAX } from './board.js';
export { DirectExchange, type DirectExchangeOptions, type PiecesSum } from './direct-exchange.js';
export { exchangeBufferBytes, usesDirectExchange } from './exchange-connect.js';
export { exactF32, type PartCodec, type SlotViews } from './part-codec.js';
