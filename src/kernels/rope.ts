/**
 * Llama 3 RoPE scaling as per-frequency divisors (what llama.cpp reads from the
 * `rope_freqs.weight` tensor when a GGUF has one): wavelengths shorter than
 * originalContext / highFreqFactor keep their frequency, longer than
 * originalContext / lowFreqFactor are divided by `factor`, and the band between is smoothed.
 */
export interface Llama3Scaling {
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalContext: number;
}

// returns: [ropeDim / 2]
export function llama3FreqFactors(ropeDim: number, freqBase: number, s: Llama3Scaling): Float32Array {
  const out = new Float32Array(ropeDim / 2);
  const lowWavelen = s.originalContext / s.lowFreqFactor;
  const highWavelen = s.originalContext / s.highFreqFactor;
  for (let i = 0; i < ropeDim / 2; i++) {
    const freq = 1 / Math.pow(freqBase, (2 * i) / ropeDim);
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < highWavelen) out[i] = 1;
    else if (wavelen > lowWavelen) out[i] = s.factor;
    else {
      const smooth = (s.originalContext / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      out[i] = 1 / ((1 - smooth) / s.factor + smooth);
    }
  }
  return out;
}
