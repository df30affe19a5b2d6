// The diffuse page's sampler (web/diffuse.ts, its worker web/diffuse-worker.ts): pure functions, no GPU, so that a test can
// call them. The model is adaptive-terrain-diffusion's UNet (MIT; its package's terrain_diffusion/generator.py is where
// these settings come from): a consistency model distilled from an EDM teacher (sigma_min 0.002, sigma_max 80,
// sigma_data 0.5), whose authors sample in one step: noise times sigma_max, denoised once. More steps are consistency
// sampling (Song et al. 2023, "Consistency Models", Algorithm 1): after each denoising, the map is noised again to the
// next, lower level of Karras et al.'s schedule (rho 7) and denoised again. The first step is the authors' own sample.
//
// The noise is seeded: SplitMix32 (a Weyl sequence with the golden-ratio increment, mixed by MurmurHash3's 32-bit
// finalizer) gives uniform numbers, the Box-Muller transform turns each pair into two standard normal ones. The same seed
// gives the same numbers in every browser (only 32-bit integer arithmetic and Math.log/cos/sin, which may differ in the
// last bit).

export const SIGMA_MIN = 0.002, SIGMA_MAX = 80, RHO = 7;
// the authors' difficulty labels are whole numbers 1..100, given to the model as (label - 1) / 99
export const DIFFICULTY_LEVELS = 100;
// the model's output lies in [-1, 1]; the authors map it to metres through an asinh scale
const HEIGHT_RANGE = 22.16864013671875, ASINH_SCALE = 0.1;

/** The noise level of each of `steps` steps: Karras et al.'s schedule from sigmaMax to sigmaMin in `steps` intervals,
 * without its last point (sigmaMin itself, where the map is already clean). One step: [sigmaMax]. */
export function sigmas(steps: number, sigmaMin = SIGMA_MIN, sigmaMax = SIGMA_MAX, rho = RHO): number[] {
  if (!Number.isInteger(steps) || steps < 1) throw new RangeError(`steps must be a whole number >= 1, got ${steps}`);
  const hi = sigmaMax ** (1 / rho), lo = sigmaMin ** (1 / rho);
  return Array.from({ length: steps }, (_, i) => (hi + (i / steps) * (lo - hi)) ** rho);
}

/** SplitMix32: `next()` gives uniform 32-bit unsigned integers from a 32-bit seed. */
export function splitmix32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** A source of standard normal numbers: `normal(n)` gives the next n (as float32). Box-Muller on SplitMix32's numbers:
 * u1 = (a + 1) / 2^32 in (0, 1] (so its log is finite), u2 = b / 2^32; r = sqrt(-2 ln u1) gives r cos(2 pi u2) and
 * r sin(2 pi u2), in that order. */
export function gaussian(seed: number): (n: number) => Float32Array {
  const next = splitmix32(seed);
  let spare: number | null = null;
  return (n) => {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      if (spare !== null) { out[i] = spare; spare = null; continue; }
      const r = Math.sqrt(-2 * Math.log((next() + 1) / 2 ** 32)), angle = 2 * Math.PI * (next() / 2 ** 32);
      out[i] = r * Math.cos(angle);
      spare = r * Math.sin(angle);
    }
    return out;
  };
}

/** The model's input at noise level `sigma`: the first step's is pure noise, sigma * z; a later step's is the previous
 * denoised map with noise added up to that level, denoised + sqrt(sigma^2 - sigmaMin^2) * z (Algorithm 1). */
export function noised(denoised: Float32Array | null, sigma: number, z: Float32Array, sigmaMin = SIGMA_MIN): Float32Array {
  if (denoised === null) return z.map((v) => sigma * v);
  if (denoised.length !== z.length) throw new RangeError(`the map has ${denoised.length} values, the noise ${z.length}`);
  const scale = Math.sqrt(sigma * sigma - sigmaMin * sigmaMin);
  return denoised.map((v, i) => v + scale * z[i]);
}

/** A difficulty label (1..100, the authors' scale) as the model's input (0..1). */
export function difficultyInput(label: number): number {
  if (!(label >= 1 && label <= DIFFICULTY_LEVELS)) throw new RangeError(`difficulty must be 1..${DIFFICULTY_LEVELS}, got ${label}`);
  return (label - 1) / (DIFFICULTY_LEVELS - 1);
}

/** The model's output (-1..1) as heights in metres above the map's lowest point (the authors' asinh scale: 0..22.2 m). */
export function heights(denoised: Float32Array): Float32Array {
  const norm = Math.asinh(HEIGHT_RANGE / ASINH_SCALE);
  const h = denoised.map((v) => Math.min(HEIGHT_RANGE, ASINH_SCALE * Math.sinh(Math.min(1, Math.max(0, (v + 1) / 2)) * norm)));
  let low = Infinity;
  for (const v of h) low = Math.min(low, v);
  return h.map((v) => v - low);
}
