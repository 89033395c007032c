/* ops_optim.h — internal op layer for the optimizer kernels (AdamW, multi-tensor sum of squares and zeroing): checks, then issues on the current stream. */
#ifndef TG_OPS_OPTIM_H
#define TG_OPS_OPTIM_H

#include "core/core.h"

/* AdamW on f32 master weights (decoupled weight decay):
 * g' = grad_scale * g; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 * p -= lr * (m / (1-b1^step) / (sqrt(v / (1-b2^step)) + eps) + weight_decay * p);
 * p, m, v (n) f32; g (n) f32 or bf16; p_lowp (n) bf16 or NULL: set to round(p). */
tg_status tg_adamw_step(tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m, tg_tensor *v, double lr,
                        double beta1, double beta2, double eps, double weight_decay, int64_t step, double grad_scale);

/* One parameter of tg_adamw_multi: the tensors of tg_adamw_step and its weight decay. */
struct tg_adamw_param {
    tg_tensor *p;          /* (n) f32 master weights */
    tg_tensor *p_lowp;     /* (n) bf16 copy set to round(p), or NULL */
    const tg_tensor *g;    /* (n) f32 or bf16 */
    tg_tensor *m, *v;      /* (n) f32 */
    double weight_decay;
};
/* tg_adamw_step on n parameters with shared hyperparameters, in one kernel
 * launch per group of parameters (CUDA) and no host sync, so it captures.
 * Bit-identical to tg_adamw_step per parameter with the same grad_scale.
 * clip_sumsq: NULL, or a (1) f32 tensor on the same device holding the sum of
 * squares of the gradients (tg_sumsq_multi), read on the device when the
 * kernel runs: the gradient scale becomes grad_scale * f, f the factor of
 * optim.clip_factor (1 when sqrt(sumsq) <= max_norm, else
 * max_norm / (norm + 1e-6)); a non-finite norm skips the update (p, p_lowp, m
 * and v unchanged). Errors name the parameter ("adamw_multi: param 3: ...").
 * All tensors on one device; the table is copied (params may be freed after). */
tg_status tg_adamw_multi(const struct tg_adamw_param *params, int n, double lr, double beta1, double beta2, double eps,
                         int64_t step, double grad_scale, const tg_tensor *clip_sumsq, double max_norm);

/* Capturable AdamW (optim.AdamW{capturable = true}): tg_adamw_step and
 * tg_adamw_multi with lr (1) f32 and step (1) i32 on the parameters' device,
 * read by the kernel when it runs, so a captured update replayed later uses
 * the lr and step count of the replay (bias corrections computed on the
 * device). The values are those the host variants would get from (float)lr
 * and step: the same bits on the CPU backend; on CUDA the bias corrections
 * come from the device's pow, which may differ from the host's in the last
 * bit. Call tg_adamw_count(step) once per optimizer step, before the updates;
 * a count still below 1 when the kernel runs leaves everything unchanged (its
 * bias correction would be 0). */
tg_status tg_adamw_step_dev(tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m, tg_tensor *v,
                            const tg_tensor *lr, const tg_tensor *step, double beta1, double beta2, double eps,
                            double weight_decay, double grad_scale);
tg_status tg_adamw_multi_dev(const struct tg_adamw_param *params, int n, const tg_tensor *lr, const tg_tensor *step,
                             double beta1, double beta2, double eps, double grad_scale, const tg_tensor *clip_sumsq,
                             double max_norm);
/* step (1) i32 += 1 on the device (a one-thread kernel: capturable, no host sync). */
tg_status tg_adamw_count(tg_tensor *step);

/* out (1) f32 = sum of the squares of every element of ts[0..n-1] (f32 or
 * bf16, on out's device), accumulated in f64 in a fixed order (deterministic),
 * on the device: no host sync, capturable. */
tg_status tg_sumsq_multi(tg_tensor *out, const tg_tensor *const *ts, int n);

/* Zeroes every element of ts[0..n-1] (any dtypes, one device) in one call
 * (CUDA: one launch per 512 tensors, 96 before CUDA 12.1); capturable. */
tg_status tg_zero_multi(tg_tensor *const *ts, int n);
/* dst[i] = src[i] for every pair, in one call on dst[0]'s stream: same device, same element count, f32 or bf16
 * either side (f32 -> bf16 rounds to nearest even as tg_copy; the same dtype copies the bits). */
tg_status tg_copy_multi(tg_tensor *const *dst, const tg_tensor *const *src, int n);

/* Sum of squares of t into *out (host, blocking), for global-norm clipping. */
tg_status tg_sumsq(const tg_tensor *t, double *out);

#endif
