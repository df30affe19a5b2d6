// The diffuse page's Stable Diffusion sampler (its worker web/sd-worker.ts runs it around the exported UNet): Euler's
// method with classifier-free guidance, as tinyweb.models.stable_diffusion.StableDiffusionPipeline runs its
// EulerDiscreteScheduler. The schedule is not computed here: scheduler.json, which the export writes beside the model,
// holds the scheduler's plan for each step count offered (EulerDiscreteScheduler.plan: the numbers its steps use, in
// float32), so these functions only apply them, each operation rounded to float32 as the tensors' arithmetic is. Pure
// functions, no GPU, so that a test can call them.

/** One step count's numbers (EulerDiscreteScheduler.plan's fields). */
export interface EulerPlan {
  init_noise_sigma: number; timesteps: number[]; input_scales: number[]; sample_scales: number[]; output_scales: number[]; deltas: number[];
}
export interface EulerPlans { format: "tinyweb-euler-plans"; scheduler: string; config: Record<string, unknown>; plans: Record<string, EulerPlan> }

const f = Math.fround;

/** The plan of `steps` steps, or an Error naming the step counts there are. */
export function planFor(plans: EulerPlans, steps: number): EulerPlan {
  const plan = plans.plans[String(steps)];
  if (!plan) throw new RangeError(`steps must be a whole number from 1 to ${maxSteps(plans)}, got ${steps}`);
  return plan;
}
export const maxSteps = (plans: EulerPlans) => Math.max(...Object.keys(plans.plans).map(Number));

/** The first sample: the standard normal latents times the plan's init_noise_sigma. */
export function startSample(latents: Float32Array, plan: EulerPlan): Float32Array {
  return latents.map((v) => f(v * plan.init_noise_sigma));
}

/** The UNet's input at step i: the sample scaled by the step's input scale, twice (the negative prompt's half and the
 * prompt's, which classifier-free guidance runs as one batch of 2). */
export function unetInput(sample: Float32Array, plan: EulerPlan, i: number): Float32Array {
  const out = new Float32Array(2 * sample.length), scale = plan.input_scales[i];
  for (let k = 0; k < sample.length; k++) out[k] = out[k + sample.length] = f(sample[k] * scale);
  return out;
}

/** The noise to step with from the UNet's batch of 2 (negative half, prompt half): uncond + scale * (cond - uncond);
 * with a scale of 1 or less (no guidance, as the pipeline decides) the prompt's half alone. */
export function guided(noise: Float32Array, scale: number): Float32Array {
  const n = noise.length / 2, uncond = noise.subarray(0, n), cond = noise.subarray(n);
  if (scale <= 1) return cond.slice();
  const g = f(scale);
  return uncond.map((u, k) => f(u + f(g * f(cond[k] - u))));
}

/** Step i from the sample and the guided noise: the predicted clean latents x0 = sample * p + noise * q, and the next
 * sample = sample + (sample - x0) * d (p, q, d: the plan's sample scale, output scale and delta). */
export function eulerStep(sample: Float32Array, noise: Float32Array, plan: EulerPlan, i: number): { next: Float32Array; x0: Float32Array } {
  const p = plan.sample_scales[i], q = plan.output_scales[i], d = plan.deltas[i];
  const x0 = sample.map((x, k) => f(f(x * p) + f(noise[k] * q)));
  return { next: sample.map((x, k) => f(x + f(f(x - x0[k]) * d))), x0 };
}

/** An image of the VAE decoder (height x width x 3 floats in [0, 1]) as RGBA bytes for a canvas. */
export function rgba(image: Float32Array): Uint8ClampedArray {
  const n = image.length / 3, out = new Uint8ClampedArray(n * 4);
  for (let k = 0; k < n; k++) out.set([image[3 * k] * 255, image[3 * k + 1] * 255, image[3 * k + 2] * 255, 255], 4 * k);
  return out;
}
