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

#ifdef __cplusplus
}
#endif
#endif
