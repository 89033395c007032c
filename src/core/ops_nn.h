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
/* tg_layernorm_forward whose output goes to FP8: y8 (x's shape, E4M3 or E5M2)
 * = the codes of tg_layernorm_forward's output (rounded to x's dtype as that op
 * stores it) times scale, amax and scale_inv as tg_fp8_cast (flags:
 * TG_FP8_AMAX_ACCUMULATE); mean, rstd saved as there. Bit for bit that op
 * then tg_fp8_cast, without the high-precision output. */
tg_status tg_layernorm_forward_fp8(tg_tensor *y8, tg_tensor *mean, tg_tensor *rstd, const tg_tensor *x,
                                   const tg_tensor *gamma, const tg_tensor *beta, double eps, const tg_tensor *scale,
                                   tg_tensor *amax, tg_tensor *scale_inv, int flags);
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
/* Attention of new positions over a key/value cache (incremental decoding): qkv (B, Tn, 3C) holds the
 * projections of positions pos .. pos+Tn-1; their keys and values are written to rows pos.. of kcache and
 * vcache (B, Tmax, C), then out (B, Tn, C) gets each new query's causal attention over cache rows 0 .. its
 * position. pos + Tn <= Tmax. Same dtype and device throughout. */
tg_status tg_attention_kv(tg_tensor *out, tg_tensor *kcache, tg_tensor *vcache, const tg_tensor *qkv, int64_t pos,
                          int n_head);
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
 * count read on the device from loss[1]. dlogits may alias logits. Targets outside [0, V) other
 * than ignore_index fail as in tg_cross_entropy_forward. */
tg_status tg_cross_entropy_backward(tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets,
                                    const tg_tensor *loss, double dloss, int ignore_index);
/* Forward and backward of rows at once (a chunk of a larger batch): losses (N) f32 as
 * tg_cross_entropy_forward's and, when dlogits is not NULL, dlogits as tg_cross_entropy_backward's
 * with the count read from loss[1] (the whole batch's, from tg_cross_entropy_mean). dlogits may
 * alias logits. Each row is read once. Targets outside [0, V) other than ignore_index fail as in
 * tg_cross_entropy_forward. */
tg_status tg_cross_entropy_fused(tg_tensor *losses, tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets,
                                 const tg_tensor *loss, double dloss, int ignore_index);
/* The two above for callers that checked the targets themselves (the LM head, over all its rows before
 * its chunks): no second check, whose rows would count from the chunk's start. */
tg_status tg_cross_entropy_backward_prechecked(tg_tensor *dlogits, const tg_tensor *logits, const tg_tensor *targets,
                                               const tg_tensor *loss, double dloss, int ignore_index);
tg_status tg_cross_entropy_fused_prechecked(tg_tensor *losses, tg_tensor *dlogits, const tg_tensor *logits,
                                            const tg_tensor *targets, const tg_tensor *loss, double dloss,
                                            int ignore_index);
/* loss (2) f32 = [mean of losses over the targets that are not ignore_index (0 if none), their
 * count]; losses NULL: [0, count] (the count a fused backward needs before the losses exist).
 * Targets outside [0, vocab) other than ignore_index fail as in tg_cross_entropy_forward. */
tg_status tg_cross_entropy_mean(tg_tensor *loss, const tg_tensor *losses, const tg_tensor *targets, int64_t vocab,
                                int ignore_index);

/* tg_gemm_ex with the C that beta scales read from c_in (C's shape, dtype and
 * device; NULL: C itself): c = alpha op(a) op(b) + beta c_in (+ epilogue).
 * With beta = 1 a residual is added by the GEMM that makes a block's output. */
/* tg_fp8_gemm with the C that beta scales read from c (D's shape, dtype and
 * device, apart from D; NULL: D itself): D = alpha sa sb A B^T + beta c
 * (+ epilogue), the residual add of a block's FP8 output GEMM. */
tg_status tg_fp8_gemm_in(tg_tensor *d, const tg_tensor *c, const tg_tensor *a, int trans_a, const tg_tensor *a_scale_inv,
                         const tg_tensor *b, int trans_b, const tg_tensor *b_scale_inv, double alpha, double beta,
                         tg_gemm_epilogue epi, const tg_tensor *bias, tg_tensor *aux, tg_tensor *amax_d, int flags);
tg_status tg_gemm_in(tg_tensor *c, const tg_tensor *c_in, const tg_tensor *a, int trans_a, const tg_tensor *b,
                     int trans_b, double alpha, double beta, tg_gemm_epilogue epi, const tg_tensor *bias, tg_tensor *aux,
                     tg_tensor *bgrad, double bgrad_accumulate);

#endif
