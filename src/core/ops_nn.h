/* ops_nn.h — internal op layer for the transformer kernels: checks, then issues on the current stream. */
#ifndef TG_OPS_NN_H
#define TG_OPS_NN_H

#include "core/core.h"

/* Conventions
 * - Every op checks shapes, dtypes and devices and fails with TG_EINVAL and a
 *   message naming the op and the shapes ("layernorm_forward: x [4,7] vs
 *   gamma [8]"), then issues one backend kernel on the current stream of the
 *   tensors' device (so it is recorded while that stream captures).
 * - "Rows": a tensor of shape (..., C) is treated as (N, C), N = numel / C.
 * - Activations are f32 or bf16; bf16 is computed in f32 and rounded on store.
 *   Statistics (mean, rstd, lse, losses) are always f32.
 * - dgrad ops ("_backward") overwrite their outputs. wgrad ops ("_backward_dw")
 *   compute out = accumulate * out + grad, with accumulate 0 (overwrite; NaN in
 *   out ignored) or 1; their outputs are f32 (main_grad) or the param dtype.
 */

/* y (N, C) = (x - mean) * rstd * gamma + beta; mean, rstd (N) f32 saved.
 * beta may be NULL (no bias). */
tg_status tg_layernorm_forward(tg_tensor *y, tg_tensor *mean, tg_tensor *rstd, const tg_tensor *x,
                               const tg_tensor *gamma, const tg_tensor *beta, double eps);
/* dx (N, C) from dy (N, C), x, gamma, mean, rstd. */
tg_status tg_layernorm_backward(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *x, const tg_tensor *gamma,
                                const tg_tensor *mean, const tg_tensor *rstd);
/* The same plus a residual gradient: dx = dres + dgrad(dy), the sum formed in
 * f32 and rounded once (bf16: one rounding where backward + tg_binary(TG_ADD)
 * rounds twice; f32: bit-identical to that pair). dres (N, C) like x, or NULL;
 * dx may alias dy or dres. */
tg_status tg_layernorm_backward_res(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *dres, const tg_tensor *x,
                                    const tg_tensor *gamma, const tg_tensor *mean, const tg_tensor *rstd);
/* dgamma (C) = acc * dgamma + sum_n dy * xhat; dbeta (C) = acc * dbeta + sum_n dy (dbeta may be NULL). */
tg_status tg_layernorm_backward_dw(tg_tensor *dgamma, tg_tensor *dbeta, const tg_tensor *dy, const tg_tensor *x,
                                   const tg_tensor *mean, const tg_tensor *rstd, double accumulate);

/* y (N, C) = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps) (N) f32 saved. */
tg_status tg_rmsnorm_forward(tg_tensor *y, tg_tensor *rstd, const tg_tensor *x, const tg_tensor *gamma, double eps);
tg_status tg_rmsnorm_backward(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *x, const tg_tensor *gamma,
                              const tg_tensor *rstd);
/* With a residual gradient, as tg_layernorm_backward_res. */
tg_status tg_rmsnorm_backward_res(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *dres, const tg_tensor *x,
                                  const tg_tensor *gamma, const tg_tensor *rstd);
tg_status tg_rmsnorm_backward_dw(tg_tensor *dgamma, const tg_tensor *dy, const tg_tensor *x, const tg_tensor *rstd,
                                 double accumulate);

/* GELU, tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Same shapes. */
tg_status tg_gelu_forward(tg_tensor *y, const tg_tensor *x);
tg_status tg_gelu_backward(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *x);

/* SwiGLU: x (N, 2H) = [a | b] per row; y (N, H) = silu(a) * b, silu(a) = a / (1 + exp(-a)). */
tg_status tg_swiglu_forward(tg_tensor *y, const tg_tensor *x);
tg_status tg_swiglu_backward(tg_tensor *dx, const tg_tensor *dy, const tg_tensor *x);

/* y (N, C) += bias (C), in place. */
tg_status tg_bias_add(tg_tensor *y, const tg_tensor *bias);
/* dbias (C) = acc * dbias + sum_n dy (N, C). */
tg_status tg_bias_backward_dw(tg_tensor *dbias, const tg_tensor *dy, double accumulate);

/* Causal multi-head self-attention over packed projections.
 * qkv (B, T, 3C): per token [q | k | v], each C = n_head * D, head h at [h*D, (h+1)*D).
 * out (B, T, C) = softmax(q k^T / sqrt(D), causal) v per head; lse (B, n_head, T) f32 =
 * log-sum-exp of each row of scaled scores, saved so backward can recompute the
 * probabilities (flash-attention style). */
tg_status tg_attention_forward(tg_tensor *out, tg_tensor *lse, const tg_tensor *qkv, int n_head);
/* dqkv (B, T, 3C) from dout (B, T, C), qkv, out, lse. */
tg_status tg_attention_backward(tg_tensor *dqkv, const tg_tensor *dout, const tg_tensor *qkv, const tg_tensor *out,
                                const tg_tensor *lse, int n_head);

/* out (B, T, C) = wte[idx[b,t]] + wpe[t] (wpe may be NULL). idx (B, T) i32; wte (V, C);
 * wpe (Tmax >= T, C). Ids outside [0, V) give zero rows (callers validate ids: the
 * data loader does). */
tg_status tg_embedding_forward(tg_tensor *out, const tg_tensor *idx, const tg_tensor *wte, const tg_tensor *wpe);
/* dwte (V, C) = acc * dwte + scatter-add of dout rows by idx; dwpe (Tmax, C) rows [0, T) =
 * acc * dwpe + sum over b of dout[b] (rows >= T: acc * dwpe). Either may be NULL.
 * Deterministic (same order every run). */
tg_status tg_embedding_backward_dw(tg_tensor *dwte, tg_tensor *dwpe, const tg_tensor *dout, const tg_tensor *idx,
                                   double accumulate);

/* Softmax cross-entropy. logits (N, V) f32/bf16, targets (N) i32 (ignore_index rows are
 * ignored). losses (N) f32 = per-row loss (0 when ignored); loss (2) f32 =
 * [mean over valid rows, number of valid rows], all on the device (capturable). */
tg_status tg_cross_entropy_forward(tg_tensor *loss, tg_tensor *losses, const tg_tensor *logits, const tg_tensor *targets,
                                   int ignore_index);
/* dlogits (N, V) = dloss / count * (softmax(logits) - onehot(target)), 0 rows for ignored;
 * count read on the device from loss[1]. dlogits may alias logits. */
tg_status tg_cross_entropy_backward(tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets,
                                    const tg_tensor *loss, double dloss, int ignore_index);

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

/* Sum of squares of t into *out (host, blocking), for global-norm clipping. */
tg_status tg_sumsq(const tg_tensor *t, double *out);

/* tg_gemm_ex with the C that beta scales read from c_in (C's shape, dtype and
 * device; NULL: C itself): c = alpha op(a) op(b) + beta c_in (+ epilogue).
 * With beta = 1 a residual is added by the GEMM that makes a block's output. */
tg_status tg_gemm_in(tg_tensor *c, const tg_tensor *c_in, const tg_tensor *a, int trans_a, const tg_tensor *b,
                     int trans_b, double alpha, double beta, tg_gemm_epilogue epi, const tg_tensor *bias, tg_tensor *aux,
                     tg_tensor *bgrad, double bgrad_accumulate);

#endif
