export { Tokenizer, type EncodeOptions, type DecodeOptions } from './tokenizer.js';
export { StreamDecoder } from './decode.js';
export { TokenType, tokenizerMetadataFromGguf, type TokenizerMetadata } from './metadata.js';
export { Vocab, type VocabKind } from './vocab.js';
