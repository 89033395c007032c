/* kernels.h — C-callable launchers of the CUDA kernels in kernels/ (one op per .cu file). */
#ifndef TG_KERNELS_H
#define TG_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "tegraph.h" /* tg_dtype, tg_binop (C++-safe) */

#ifdef __cplusplus
extern "C" {
#endif

/* Every launcher enqueues its kernel(s) on `st` (nothing when n == 0) and
 * returns cudaGetLastError() after the launch; the caller (src/backend/cuda.c)
 * turns a failure into TG_EDEVICE. Dtypes are validated by the caller. */

/* Codes shared with backend.h (tg_reduce_op, tg_rand_dist); cuda.c checks
 * they agree, since backend.h is C-only. */
enum { TGK_REDUCE_SUM = 0, TGK_REDUCE_MAX_ABS, TGK_REDUCE_MAX_ABS_DIFF, TGK_REDUCE_SUMSQ };
enum { TGK_RAND_UNIFORM = 0, TGK_RAND_NORMAL };

/* Partials of the two-pass reduction: the scratch passed to tg_cuda_reduce
 * holds this many doubles. */
#define TGK_REDUCE_BLOCKS 1024

/* dst[i] = bits (the element's bit pattern, computed on the host so every
 * backend rounds the fill value the same way); elem_size 2 or 4. */
cudaError_t tg_cuda_fill(void *dst, size_t elem_size, uint32_t bits, int64_t n, cudaStream_t st);

/* dst[i] = convert(src[i]) between f32, bf16, i32 and u16 (same dtype: copy).
 * Floats to bf16 round to nearest even (NaN stays a quiet NaN), as
 * tg_f32_to_bf16 does; integers go through f32 to floats, floats truncate
 * to integers. */
cudaError_t tg_cuda_cast(const void *src, tg_dtype src_dt, void *dst, tg_dtype dst_dt, int64_t n,
                         cudaStream_t st);

/* out[i] = a[i] op b[i] in f32 (bf16 rounded on store); out may alias a or b. */
cudaError_t tg_cuda_binary(tg_binop op, const void *a, const void *b, void *out, tg_dtype dt, int64_t n,
                           cudaStream_t st);

/* y[i] = alpha * x[i] + beta * y[i] in f32; beta == 0 overwrites (y not read). */
cudaError_t tg_cuda_axpby(const void *x, void *y, tg_dtype dt, int64_t n, float alpha, float beta,
                          cudaStream_t st);
/* c[b][r][j] *= beta for batch x rows x cols elements of a strided row-major
 * matrix (ld, stride in elements); beta == 0 writes zeros. The k == 0 GEMM. */
cudaError_t tg_cuda_scale_strided(void *c, tg_dtype dt, int64_t batch, int64_t rows, int64_t cols, int64_t ld,
                                  int64_t stride, float beta, cudaStream_t st);

/* *out = reduce(a) (or of |a - b| for MAX_ABS_DIFF), accumulated in f64 in a
 * fixed order (deterministic for a given n), stored as one f32. scratch:
 * TGK_REDUCE_BLOCKS doubles of device memory, reused by the next call on st. */
cudaError_t tg_cuda_reduce(int op, const void *a, const void *b, tg_dtype dt, int64_t n, float *out,
                           double *scratch, cudaStream_t st);

/* The Philox4x32-10 fill of struct tg_rand_args (backend.h): element i from
 * word i % 4 of counter offset + i / 4 under key seed. */
cudaError_t tg_cuda_rand(void *dst, tg_dtype dt, int64_t n, int dist, double a, double b, uint64_t seed,
                         uint64_t offset, cudaStream_t st);

/* ------------------------------------------------------------------ FP8 (struct tg_fp8_*_args in backend.h)
 * amax words hold f32 bits compared as unsigned integers; !accumulate zeroes
 * the word first (a memset on st). */

/* y (may be NULL) = fp8(g * scale) and yt (may be NULL) its (cols, rows) transpose; g = x, or with gelu_x
 * x_dt(x * gelu'(gelu_x)); scale, amax, scale_inv as tg_fp8_cast (NULL scale: 1); dbias_part (may be NULL,
 * (dbias_chunks, cols) f32): the column sums of g over each chunk's 64-row tiles (tile t in chunk t % chunks). */
cudaError_t tg_cuda_fp8_cast(const void *x, tg_dtype x_dt, const void *gelu_x, void *y, void *yt, tg_dtype y_dt,
                             int64_t rows, int64_t cols, const float *scale, float *amax, float *scale_inv,
                             int accumulate, float *dbias_part, int64_t dbias_chunks, cudaStream_t st);
/* y and/or yt as tg_cuda_fp8_cast of g = h_dt(gelu(h)) (tg_gelu_forward's formula and rounding). */
cudaError_t tg_cuda_fp8_cast_gelu(const void *h, tg_dtype h_dt, void *y, void *yt, tg_dtype y_dt, int64_t rows,
                                  int64_t cols, const float *scale, float *amax, float *scale_inv, int accumulate,
                                  cudaStream_t st);
/* y8 (n, c) y8_dt = the codes of tg_cuda_layernorm_forward's output (as stored in dt) times scale; amax, scale_inv
 * as tg_cuda_fp8_cast; mean, rstd as there. */
cudaError_t tg_cuda_layernorm_forward_fp8(uint8_t *y8, tg_dtype y8_dt, float *mean, float *rstd, const void *x,
                                          const void *gamma, const void *beta, tg_dtype dt, int64_t n, int64_t c,
                                          float eps, const float *scale, float *amax, float *scale_inv, int accumulate,
                                          cudaStream_t st);
/* dbias (c) dw_dt = accumulate * dbias + the sum of part's chunk rows in double (colsum.cuh's fixed order), rounded
 * once. */
cudaError_t tg_cuda_fp8_dbias(const float *part, int64_t chunks, int64_t c, void *dbias, tg_dtype dw_dt,
                              float accumulate, cudaStream_t st);
/* yt (cols, rows) = x^T, bytes. */
cudaError_t tg_cuda_fp8_transpose(const uint8_t *x, uint8_t *yt, int64_t rows, int64_t cols, cudaStream_t st);
/* y = value(x) * scale_inv (NULL: 1), rounded once to y_dt (f32 or bf16). */
cudaError_t tg_cuda_fp8_dequantize(const uint8_t *x, tg_dtype x_dt, void *y, tg_dtype y_dt, int64_t n,
                                   const float *scale_inv, cudaStream_t st);
/* *amax = max|x| (x f32 or bf16), or max(*amax, that) when accumulate. */
cudaError_t tg_cuda_fp8_amax(const void *x, tg_dtype dt, int64_t n, float *amax, int accumulate, cudaStream_t st);

/* ------------------------------------------------------------------ transformer kernels
 * Semantics of struct tg_*_args in src/backend/backend.h (the CPU reference
 * in src/backend/cpu_nn.c); every one deterministic (no float atomics: sums
 * over rows run in two stages in a fixed order). `scratch` is per-stream
 * device memory (tg_cuda_nn_scratch), reused by the next call on the stream;
 * a call whose partial sums do not fit returns cudaErrorInvalidValue. */

cudaError_t tg_cuda_layernorm_forward(void *y, float *mean, float *rstd, const void *x, const void *gamma,
                                      const void *beta, tg_dtype dt, int64_t n, int64_t c, float eps, cudaStream_t st);
/* dres: NULL, or a residual gradient added to dx (in f32, rounded once); see the backward args in backend.h. */
cudaError_t tg_cuda_layernorm_backward(void *dx, const void *dy, const void *dres, const void *x, const void *gamma,
                                       const float *mean, const float *rstd, tg_dtype dt, int64_t n, int64_t c,
                                       cudaStream_t st);
cudaError_t tg_cuda_layernorm_backward_dw(void *dgamma, void *dbeta, const void *dy, const void *x, const float *mean,
                                          const float *rstd, tg_dtype dt, tg_dtype dw_dt, int64_t n, int64_t c,
                                          float accumulate, float *scratch, size_t scratch_bytes, cudaStream_t st);

cudaError_t tg_cuda_rmsnorm_forward(void *y, float *rstd, const void *x, const void *gamma, tg_dtype dt, int64_t n,
                                    int64_t c, float eps, cudaStream_t st);
cudaError_t tg_cuda_rmsnorm_backward(void *dx, const void *dy, const void *dres, const void *x, const void *gamma,
                                     const float *rstd, tg_dtype dt, int64_t n, int64_t c, cudaStream_t st);
cudaError_t tg_cuda_rmsnorm_backward_dw(void *dgamma, const void *dy, const void *x, const float *rstd, tg_dtype dt,
                                        tg_dtype dw_dt, int64_t n, int64_t c, float accumulate, float *scratch,
                                        size_t scratch_bytes, cudaStream_t st);

cudaError_t tg_cuda_gelu_forward(void *y, const void *x, tg_dtype dt, int64_t n, cudaStream_t st);
cudaError_t tg_cuda_gelu_backward(void *dx, const void *dy, const void *x, tg_dtype dt, int64_t n, cudaStream_t st);
cudaError_t tg_cuda_swiglu_forward(void *y, const void *x, tg_dtype dt, int64_t n, int64_t h, cudaStream_t st);
cudaError_t tg_cuda_swiglu_backward(void *dx, const void *dy, const void *x, tg_dtype dt, int64_t n, int64_t h,
                                    cudaStream_t st);

cudaError_t tg_cuda_bias_add(void *y, const void *bias, tg_dtype dt, int64_t n, int64_t c, cudaStream_t st);
cudaError_t tg_cuda_bias_backward_dw(void *dbias, const void *dy, tg_dtype dt, tg_dtype dw_dt, int64_t n, int64_t c,
                                     float accumulate, float *scratch, size_t scratch_bytes, cudaStream_t st);
/* bgrad[i] = acc * bgrad[i] + sum_p op(A)[i][p] (i < m, p < k): the bias grad of a GEMM
 * operand when cuBLASLt's epilogue cannot do it; deterministic column sums in scratch. */
cudaError_t tg_cuda_gemm_bgrad(void *bgrad, tg_dtype bgrad_dt, const void *a, tg_dtype a_dt, int trans_a, int64_t lda,
                               int64_t m, int64_t k, float accumulate, float *scratch, size_t scratch_bytes,
                               cudaStream_t st);
/* out[i] = acc * out[i] + part[i], as the wgrads store (acc 0 overwrites, in double, rounded once). */
cudaError_t tg_cuda_bias_accumulate(void *out, tg_dtype out_dt, const void *part, tg_dtype part_dt, int64_t n,
                                    float accumulate, cudaStream_t st);

/* Causal attention. bf16 with head dim 16/32/64/128 and 16-byte aligned
 * buffers runs on the tensor cores (mma.sync, blocks sized per head dim; the
 * forward at head dim 64 and 128 on wgmma where tg_cuda_attention_wgmma says so);
 * f32, other head dims up to 256 and unaligned buffers run one warp per row.
 * Backward keeps rowsum(dout * out) of the (b, h, t) rows in scratch (4 bytes each). */
cudaError_t tg_cuda_attention_forward(void *out, float *lse, const void *qkv, tg_dtype dt, int64_t b, int64_t t,
                                      int64_t c, int n_head, cudaStream_t st);
/* Whether the forward runs its wgmma kernels on the current device (the build has the sm_90a image, the
 * device is of compute capability 9.0, the debug switch attention_mma_sync is off). */
int tg_cuda_attention_wgmma(void);
/* Incremental decoding over a key/value cache (tg_attention_kv_args): copies the new keys and values into
 * the caches, then one block per (batch, head, new position); scores in shared memory (4 * (pos + tn) bytes,
 * cudaErrorInvalidValue past the device's limit). */
cudaError_t tg_cuda_attention_kv(void *out, void *kcache, void *vcache, const void *qkv, tg_dtype dt, int64_t b,
                                 int64_t tn, int64_t tmax, int64_t pos, int64_t c, int n_head, cudaStream_t st);
cudaError_t tg_cuda_attention_backward(void *dqkv, const void *dout, const void *out, const void *qkv,
                                       const float *lse, tg_dtype dt, int64_t b, int64_t t, int64_t c, int n_head,
                                       float *scratch, size_t scratch_bytes, cudaStream_t st);

cudaError_t tg_cuda_embedding_forward(void *out, const int32_t *idx, const void *wte, const void *wpe, tg_dtype dt,
                                      int64_t b, int64_t t, int64_t c, int64_t v, cudaStream_t st);
/* Stable radix sort of (id, position) in scratch (16 bytes a token plus the sort's workspace), then the
 * sums of runs of one id longer than 64 tokens in chunks (the rest of the scratch; longer chunks when short). */
cudaError_t tg_cuda_embedding_backward_dw(void *dwte, void *dwpe, const void *dout, const int32_t *idx, tg_dtype dt,
                                          tg_dtype dwte_dt, tg_dtype dwpe_dt, int64_t b, int64_t t, int64_t c,
                                          int64_t v, int64_t tmax, float accumulate, void *scratch,
                                          size_t scratch_bytes, cudaStream_t st);

/* Notes the first of the n ids outside [0, v) (other than ignore_index when has_ignore) in *first / *limit
 * (struct tg_index_check, src/backend/backend.h): atomicMin of position << 32 | id. */
/* Notes the first of the n values of src (f32, bf16 or i32) that is not an integer of the integer dtype dst_dt's
 * range in *first / *limit (TG_INDEX_CAST of struct tg_index_check): atomicMin of position << 32 | the value's
 * f32 or i32 bits; *limit = src_dt << 8 | dst_dt by the writer that lowered *first. */
cudaError_t tg_cuda_cast_check(unsigned long long *first, long long *limit, const void *src, tg_dtype src_dt,
                               tg_dtype dst_dt, int64_t n, cudaStream_t st);

cudaError_t tg_cuda_index_check(unsigned long long *first, long long *limit, const int32_t *ids, int64_t n, int64_t v,
                                int has_ignore, int ignore_index, cudaStream_t st);

cudaError_t tg_cuda_cross_entropy_forward(float *loss, float *losses, const void *logits, const int32_t *targets,
                                          tg_dtype dt, int64_t n, int64_t v, int ignore_index, cudaStream_t st);
cudaError_t tg_cuda_cross_entropy_backward(void *dlogits, const void *logits, const int32_t *targets,
                                           const float *loss, tg_dtype dt, int64_t n, int64_t v, float dloss,
                                           int ignore_index, cudaStream_t st);
cudaError_t tg_cuda_cross_entropy_fused(float *losses, void *dlogits, const void *logits, const int32_t *targets,
                                        const float *loss, tg_dtype dt, int64_t n, int64_t v, float dloss,
                                        int ignore_index, cudaStream_t st);
cudaError_t tg_cuda_cross_entropy_mean(float *loss, const float *losses, const int32_t *targets, int64_t n,
                                       int ignore_index, cudaStream_t st);

/* lr_dev, step_dev: NULL, or the capturable optimizer's (1) f32 lr and (1) i32
 * step count read on the device (lr and step are then unused). */
cudaError_t tg_cuda_adamw(float *p, float *m, float *v, uint16_t *p_lowp, const void *g, tg_dtype g_dt, int64_t n,
                          float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                          int64_t step, const float *lr_dev, const int32_t *step_dev, cudaStream_t st);
/* *step += 1 on the device (one thread). */
cudaError_t tg_cuda_adamw_count(int32_t *step, unsigned long long *first, cudaStream_t st);

/* ------------------------------------------------------------------ multi-tensor kernels
 * Table entries with the layout of backend.h's tg_adamw_multi_tensor and
 * tg_sumsq_multi_tensor (cuda.c checks). The launchers split the list into
 * groups whose table fits in the kernel parameters (passed by value: no device
 * allocation or copy, so legal under stream capture), one launch per group. */
struct tgk_adamw_tensor {
    float *p, *m, *v;
    uint16_t *p_lowp;
    const void *g;
    int64_t n;
    tg_dtype g_dt;
    float weight_decay;
};
struct tgk_sumsq_tensor {
    const void *x;
    int64_t n;
    tg_dtype dt;
};

/* A buffer of tg_cuda_zero_multi (layout of backend.h's tg_zero_multi_buf). */
struct tgk_zero_buf {
    void *p;
    int64_t bytes;
};
/* Zeroes every buffer of t (any alignment): one launch per group of buffers. */
cudaError_t tg_cuda_zero_multi(const struct tgk_zero_buf *t, int n, cudaStream_t st);

/* A pair of tg_cuda_copy_multi (layout of backend.h's tg_copy_multi_pair). */
struct tgk_copy_pair {
    void *dst;
    const void *src;
    int64_t n;
    tg_dtype dst_dt, src_dt;
};
/* dst = src for every pair of t (f32 / bf16 either side): one launch per group of pairs. */
cudaError_t tg_cuda_copy_multi(const struct tgk_copy_pair *t, int n, cudaStream_t st);

/* tg_cuda_adamw on every tensor of t; clip_sumsq (device, may be NULL) as struct
 * tg_adamw_multi_args: the scale and the skip on a non-finite norm are decided
 * on the device; lr_dev / step_dev as tg_cuda_adamw. */
cudaError_t tg_cuda_adamw_multi(const struct tgk_adamw_tensor *t, int ntensors, float lr, float beta1, float beta2,
                                float eps, float grad_scale, int64_t step, const float *clip_sumsq, double max_norm,
                                const float *lr_dev, const int32_t *step_dev, cudaStream_t st);
/* *out = sum of squares of all the tensors, in f64 in a fixed order (per-block
 * partials, then one block folds them), stored as one f32. scratch: the
 * TGK_REDUCE_BLOCKS doubles of tg_cuda_reduce. */
cudaError_t tg_cuda_sumsq_multi(const struct tgk_sumsq_tensor *t, int ntensors, float *out, double *scratch,
                                cudaStream_t st);

/* FP8 delayed-scaling update of n <= TGK_FP8_MAX_ROLES roles (backend.h's
 * tg_fp8_scale_update_args; fp8_max is a host array of n values). */
#define TGK_FP8_MAX_ROLES 8
struct tgk_fp8_max {
    float v[TGK_FP8_MAX_ROLES];
};
cudaError_t tg_cuda_fp8_scale_update(float *history, float *scale, float *scale_inv, int64_t len, int n, int most_recent,
                                     float margin_div, const float *fp8_max, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
