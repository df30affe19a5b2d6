// Picking the next token from a language model's logits, as tinyweb.models.gemma.Gemma.generate_ids does: temperature 0
// is greedy (the most likely token; the first of equals), else a draw from softmax(logits / temperature), over the topK
// most likely tokens when topK > 0. The draws come from SplitMix32 seeded with `seed` (not Python's generator: a page
// and Python draw differently for the same seed), so a page repeats itself for a seed.
import { splitmix32 } from "./diffuse_sampler.js";

export function pickToken(temperature: number, topK: number, seed: number): (logits: Float32Array) => number {
  if (!(temperature >= 0) || !(Number.isInteger(topK) && topK >= 0))
    throw new Error(`temperature (${temperature}) and top-k (${topK}) must be >= 0 (top-k a whole number)`);
  const next = splitmix32(seed);
  return (logits) => {
    if (temperature === 0) return argmax(logits);
    const candidates = topK > 0 && topK < logits.length ? largest(logits, topK) : Array.from(logits.keys());
    const top = candidates.reduce((m, i) => Math.max(m, logits[i]), -Infinity);
    const weights = candidates.map((i) => Math.exp((logits[i] - top) / temperature));
    let u = (next() / 2 ** 32) * weights.reduce((a, b) => a + b, 0);
    for (let k = 0; k < candidates.length; k++) if ((u -= weights[k]) < 0) return candidates[k];
    return candidates[candidates.length - 1];   // (rounding)
  };
}

export function argmax(a: Float32Array): number {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
}

/** The indices of the k largest values, largest first (of equals, the first index first). */
function largest(a: Float32Array, k: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < a.length; i++) {
    if (out.length === k && !(a[i] > a[out[k - 1]])) continue;
    let j = out.length;
    while (j > 0 && a[out[j - 1]] < a[i]) j--;
    out.splice(j, 0, i);
    if (out.length > k) out.pop();
  }
  return out;
}
