/* cross_entropy.cu — softmax cross-entropy: per-row losses, their mean and count on the device, and dlogits (alone or with the losses in one pass, the fused LM head's); a row is read from memory once. */
#include "common.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CE_THREADS 512 /* the multi-pass kernels */

/* Block-wide reductions in a fixed tree (deterministic); every thread gets the result. */
template <class T, class Op> static __device__ T ce_block_reduce(T v, Op op, T *buf)
{
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + w]);
        __syncthreads();
    }
    T r = buf[0];
    __syncthreads(); /* buf is reused by the next reduction */
    return r;
}

struct ce_max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct ce_sum {
    __device__ double operator()(double a, double b) const { return a + b; }
};

/* max of row o, and sum of exp(x - max) (f32 exp, summed in double). */
static __device__ void ce_row_stats(const void *logits, tg_dtype dt, int64_t o, int64_t v, float *mx, double *sum)
{
    __shared__ float fbuf[CE_THREADS];
    __shared__ double dbuf[CE_THREADS];
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, tgk_load(logits, dt, o + j));
    m = ce_block_reduce(m, ce_max(), fbuf);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += expf(tgk_load(logits, dt, o + j) - m);
    *sum = ce_block_reduce(s, ce_sum(), dbuf);
    *mx = m;
}

static __global__ void ce_forward_rows(float *losses, const void *logits, const int32_t *targets, tg_dtype dt,
                                       int64_t n, int64_t v, int ignore_index)
{
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const int32_t tgt = targets[r];
        if (tgt == ignore_index) {
            if (threadIdx.x == 0) losses[r] = 0.0f;
        } else if (tgt < 0 || tgt >= v) {
            if (threadIdx.x == 0) losses[r] = NAN;
        } else {
            float mx;
            double sum;
            ce_row_stats(logits, dt, r * v, v, &mx, &sum);
            if (threadIdx.x == 0) losses[r] = (float)(mx + log(sum) - tgk_load(logits, dt, r * v + tgt));
        }
    }
}

/* loss = [mean of the valid rows' losses (0 if none), number of valid rows]; losses NULL: [0, number]. */
static __global__ void ce_forward_mean(float *loss, const float *losses, const int32_t *targets, int64_t n,
                                       int ignore_index)
{
    __shared__ double buf[CE_THREADS];
    double total = 0.0, count = 0.0;
    for (int64_t r = threadIdx.x; r < n; r += blockDim.x)
        if (targets[r] != ignore_index) total += losses ? losses[r] : 0.0f, count += 1.0;
    total = ce_block_reduce(total, ce_sum(), buf);
    count = ce_block_reduce(count, ce_sum(), buf);
    if (threadIdx.x == 0) {
        loss[0] = count > 0 ? (float)(total / count) : 0.0f;
        loss[1] = (float)count;
    }
}

/* dlogits (NULL: none) and, with losses not NULL, the rows' losses too (the fused pass). */
static __global__ void ce_backward_rows(void *dlogits, float *losses, const void *logits, const int32_t *targets,
                                        const float *loss, tg_dtype dt, int64_t n, int64_t v, float dloss,
                                        int ignore_index)
{
    const float count = loss[1];
    const double scale = count > 0 ? (double)dloss / count : 0.0;
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const int32_t tgt = targets[r];
        const int64_t o = r * v;
        if (tgt == ignore_index || tgt < 0 || tgt >= v) {
            if (losses && threadIdx.x == 0) losses[r] = tgt == ignore_index ? 0.0f : NAN;
            if (dlogits)
                for (int64_t j = threadIdx.x; j < v; j += blockDim.x) tgk_store(dlogits, dt, o + j, 0.0f);
            continue;
        }
        float mx;
        double sum;
        ce_row_stats(logits, dt, o, v, &mx, &sum);
        if (losses && threadIdx.x == 0) losses[r] = (float)(mx + log(sum) - tgk_load(logits, dt, o + tgt));
        __syncthreads(); /* the target's logit is read before any thread overwrites it */
        if (!dlogits) continue;
        const double inv = 1.0 / sum;
        /* each thread reads logits[j] before writing dlogits[j] (they may alias) */
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
            double p = (double)expf(tgk_load(logits, dt, o + j) - mx) * inv;
            tgk_store(dlogits, dt, o + j, (float)(scale * (p - (j == tgt ? 1.0 : 0.0))));
        }
        __syncthreads(); /* the row's stats buffers are reused by the next row */
    }
}

/* ------------------------------------------------------------------ one read a row
 * The multi-pass kernels above read a row three times (max, sum, then the
 * output pass) in 2-byte loads: on GPT-2's 8192 x 50304 bf16 logits that
 * was most of the LM head's backward. These keep the row in shared memory
 * (100 KB for 50304 bf16): one 16-byte-load pass from global memory, the
 * rest from shared memory. Groups of CE_G elements: the exponentials of a
 * group are added in f32 and the groups in double (the conversions to double
 * are slow on the GPU); dlogits are f32 products of exp(x - max) and
 * dloss / count / sum, the target's in double. Within rounding of the CPU's
 * all-double sums; the same every run (fixed order). */

#define CE_G 8     /* elements a group: 16 bytes of bf16 */
#define CE_LOADS 4 /* groups a thread loads at once */

template <class T> static __device__ __forceinline__ float ce_f(T x);
template <> __device__ __forceinline__ float ce_f<uint16_t>(uint16_t x) { return tgk_bf16_to_f32(x); }
template <> __device__ __forceinline__ float ce_f<float>(float x) { return x; }
template <class T> static __device__ __forceinline__ T ce_t(float x);
template <> __device__ __forceinline__ uint16_t ce_t<uint16_t>(float x) { return tgk_f32_to_bf16(x); }
template <> __device__ __forceinline__ float ce_t<float>(float x) { return x; }

/* Copy one group (16-byte aligned at both ends). */
template <class T> static __device__ __forceinline__ void ce_copy_group(T *dst, const T *src)
{
#pragma unroll
    for (int k = 0; k < (int)(CE_G * sizeof(T) / 16); k++) ((uint4 *)dst)[k] = ((const uint4 *)src)[k];
}

/* Block-wide reduction: a warp butterfly, then the warps' results in order (every thread gets it). */
template <class T, class Op> static __device__ T ce_reduce(T v, Op op, T *buf)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) buf[threadIdx.x / 32] = v;
    __syncthreads();
    T r = buf[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++) r = op(r, buf[w]);
    __syncthreads(); /* buf is reused by the next reduction */
    return r;
}

/* Row src (v elements) into sm; returns its max. vec: v % CE_G == 0 and src 16-byte aligned. */
template <class T> static __device__ float ce_load_row(T *sm, const T *src, int64_t v, bool vec)
{
    __shared__ float fbuf[32];
    float m = -INFINITY;
    if (vec) {
        /* CE_LOADS groups in flight a thread: one at a time leaves the memory system idle */
        const int64_t ng = v / CE_G;
        for (int64_t g0 = threadIdx.x; g0 < ng; g0 += CE_LOADS * blockDim.x) {
            alignas(16) T x[CE_LOADS][CE_G];
#pragma unroll
            for (int u = 0; u < CE_LOADS; u++)
                if (g0 + u * blockDim.x < ng) ce_copy_group(x[u], src + (g0 + u * blockDim.x) * CE_G);
#pragma unroll
            for (int u = 0; u < CE_LOADS; u++)
                if (g0 + u * blockDim.x < ng) {
                    ce_copy_group(sm + (g0 + u * blockDim.x) * CE_G, x[u]);
#pragma unroll
                    for (int k = 0; k < CE_G; k++) m = fmaxf(m, ce_f(x[u][k]));
                }
        }
    } else {
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
            const T x = src[j];
            sm[j] = x;
            m = fmaxf(m, ce_f(x));
        }
    }
    return ce_reduce(m, ce_max(), fbuf);
}

/* Sum over the row in sm of exp(x - mx). */
template <class T> static __device__ double ce_sum_row(const T *sm, int64_t v, float mx)
{
    __shared__ double dbuf[32];
    double s = 0.0;
    for (int64_t g = threadIdx.x; g * CE_G < v; g += blockDim.x) {
        float part = 0.0f;
        if ((g + 1) * CE_G <= v) {
            alignas(16) T x[CE_G];
            ce_copy_group(x, sm + g * CE_G);
#pragma unroll
            for (int k = 0; k < CE_G; k++) part += expf(ce_f(x[k]) - mx);
        } else {
            for (int64_t j = g * CE_G; j < v; j++) part += expf(ce_f(sm[j]) - mx);
        }
        s += part;
    }
    return ce_reduce(s, ce_sum(), dbuf);
}

template <class T>
static __global__ void __launch_bounds__(1024) ce_forward_rows_smem(float *losses, const T *logits,
                                                                    const int32_t *targets, int64_t n, int64_t v,
                                                                    int ignore_index, bool vec)
{
    extern __shared__ uint4 ce_smem[];
    T *sm = (T *)ce_smem;
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const int32_t tgt = targets[r];
        if (tgt == ignore_index || tgt < 0 || tgt >= v) {
            if (threadIdx.x == 0) losses[r] = tgt == ignore_index ? 0.0f : NAN;
            continue;
        }
        const float mx = ce_load_row(sm, logits + r * v, v, vec);
        const double sum = ce_sum_row(sm, v, mx); /* its reductions synchronise: sm is complete */
        if (threadIdx.x == 0) losses[r] = (float)(mx + log(sum) - ce_f(sm[tgt]));
        __syncthreads(); /* sm is reloaded by the next row */
    }
}

/* dlogits of one element j (its logit x): scale * (softmax - onehot). */
static __device__ __forceinline__ float ce_grad(float x, float mx, float fs, double scale, double inv, bool is_tgt)
{
    const float e = expf(x - mx);
    return is_tgt ? (float)(scale * ((double)e * inv - 1.0)) : e * fs;
}

template <class T>
static __global__ void __launch_bounds__(1024) ce_backward_rows_smem(T *dlogits, float *losses, const T *logits,
                                                                     const int32_t *targets, const float *loss,
                                                                     int64_t n, int64_t v, float dloss,
                                                                     int ignore_index, bool vec)
{
    extern __shared__ uint4 ce_smem[];
    T *sm = (T *)ce_smem;
    const float count = loss[1];
    const double scale = count > 0 ? (double)dloss / count : 0.0;
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const int32_t tgt = targets[r];
        T *out = dlogits ? dlogits + r * v : NULL;
        if (tgt == ignore_index || tgt < 0 || tgt >= v) {
            if (losses && threadIdx.x == 0) losses[r] = tgt == ignore_index ? 0.0f : NAN;
            if (!out) continue;
            const T z = ce_t<T>(0.0f);
            if (vec) {
                alignas(16) T zs[CE_G];
#pragma unroll
                for (int k = 0; k < CE_G; k++) zs[k] = z;
                for (int64_t g = threadIdx.x; g < v / CE_G; g += blockDim.x) ce_copy_group(out + g * CE_G, zs);
            } else {
                for (int64_t j = threadIdx.x; j < v; j += blockDim.x) out[j] = z;
            }
            continue;
        }
        /* the whole row is in sm before anything is written: dlogits may alias logits */
        const float mx = ce_load_row(sm, logits + r * v, v, vec);
        const double sum = ce_sum_row(sm, v, mx);
        if (losses && threadIdx.x == 0) losses[r] = (float)(mx + log(sum) - ce_f(sm[tgt]));
        if (!out) {
            __syncthreads(); /* sm is reloaded by the next row */
            continue;
        }
        const double inv = 1.0 / sum;
        const float fs = (float)(scale * inv);
        if (vec) {
            for (int64_t g = threadIdx.x; g < v / CE_G; g += blockDim.x) {
                alignas(16) T x[CE_G];
                ce_copy_group(x, sm + g * CE_G);
#pragma unroll
                for (int k = 0; k < CE_G; k++)
                    x[k] = ce_t<T>(ce_grad(ce_f(x[k]), mx, fs, scale, inv, g * CE_G + k == tgt));
                ce_copy_group(out + g * CE_G, x);
            }
        } else {
            for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
                out[j] = ce_t<T>(ce_grad(ce_f(sm[j]), mx, fs, scale, inv, j == tgt));
        }
        __syncthreads(); /* sm is reloaded by the next row */
    }
}

static unsigned ce_grid(int64_t n) { return (unsigned)(n < 65536 ? n : 65536); }

#define CE_MAX_DEVICES 64
#define CE_STATIC_SMEM 1024 /* the reduction buffers, with room to spare */

/* Dynamic shared memory the one-read kernels may use on the current device (0: unknown). */
static size_t ce_smem_limit(void)
{
    static int optin[CE_MAX_DEVICES]; /* benign race: every thread stores the same value */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= CE_MAX_DEVICES) return 0;
    if (!optin[dev]) {
        int v = 0;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return 0;
        optin[dev] = v > CE_STATIC_SMEM ? v : -1;
    }
    return optin[dev] > 0 ? (size_t)optin[dev] - CE_STATIC_SMEM : 0;
}

/* Raises fn's dynamic shared memory limit to ce_smem_limit(): always the same value, so
 * threads launching it with different row sizes do not undo each other. */
template <class K> static cudaError_t ce_allow_smem(K fn, size_t bytes)
{
    /* the kernels' static shared memory counts against the 48 KB default too */
    if (bytes + CE_STATIC_SMEM <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ce_smem_limit());
}

/* Bytes of shared memory a row takes, 0 when the one-read kernels cannot take it (the row is
 * larger than a block's shared memory: the multi-pass kernels read it three times instead). */
static size_t ce_row_bytes(tg_dtype dt, int64_t v)
{
    const size_t b = ((size_t)v * tg_dtype_size(dt) + 15) & ~(size_t)15;
    return b <= ce_smem_limit() ? b : 0;
}

/* 512 threads a row when two blocks share a multiprocessor, else 1024. */
static unsigned ce_threads(size_t bytes) { return bytes <= 100 * 1024 ? 512 : 1024; }

static bool ce_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }


extern "C" cudaError_t tg_cuda_cross_entropy_forward(float *loss, float *losses, const void *logits,
                                                     const int32_t *targets, tg_dtype dt, int64_t n, int64_t v,
                                                     int ignore_index, cudaStream_t st)
{
    cudaError_t e;
    if (n > 0) {
        const size_t bytes = ce_row_bytes(dt, v);
        const bool vec = v % CE_G == 0 && ce_aligned(logits);
        if (bytes && dt == TG_BF16) {
            if ((e = ce_allow_smem(ce_forward_rows_smem<uint16_t>, bytes)) != cudaSuccess) return e;
            ce_forward_rows_smem<uint16_t><<<ce_grid(n), ce_threads(bytes), bytes, st>>>(
                losses, (const uint16_t *)logits, targets, n, v, ignore_index, vec);
        } else if (bytes) {
            if ((e = ce_allow_smem(ce_forward_rows_smem<float>, bytes)) != cudaSuccess) return e;
            ce_forward_rows_smem<float><<<ce_grid(n), ce_threads(bytes), bytes, st>>>(losses, (const float *)logits,
                                                                                     targets, n, v, ignore_index, vec);
        } else {
            ce_forward_rows<<<ce_grid(n), CE_THREADS, 0, st>>>(losses, logits, targets, dt, n, v, ignore_index);
        }
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    ce_forward_mean<<<1, CE_THREADS, 0, st>>>(loss, losses, targets, n, ignore_index);
    return cudaGetLastError();
}

/* dlogits (NULL: none) and losses (NULL: none) of n rows, each read once. */
static cudaError_t ce_rows(void *dlogits, float *losses, const void *logits, const int32_t *targets, const float *loss,
                           tg_dtype dt, int64_t n, int64_t v, float dloss, int ignore_index, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    cudaError_t e;
    const size_t bytes = ce_row_bytes(dt, v);
    const bool vec = v % CE_G == 0 && ce_aligned(logits) && (!dlogits || ce_aligned(dlogits));
    if (bytes && dt == TG_BF16) {
        if ((e = ce_allow_smem(ce_backward_rows_smem<uint16_t>, bytes)) != cudaSuccess) return e;
        ce_backward_rows_smem<uint16_t><<<ce_grid(n), ce_threads(bytes), bytes, st>>>(
            (uint16_t *)dlogits, losses, (const uint16_t *)logits, targets, loss, n, v, dloss, ignore_index, vec);
    } else if (bytes) {
        if ((e = ce_allow_smem(ce_backward_rows_smem<float>, bytes)) != cudaSuccess) return e;
        ce_backward_rows_smem<float><<<ce_grid(n), ce_threads(bytes), bytes, st>>>(
            (float *)dlogits, losses, (const float *)logits, targets, loss, n, v, dloss, ignore_index, vec);
    } else {
        ce_backward_rows<<<ce_grid(n), CE_THREADS, 0, st>>>(dlogits, losses, logits, targets, loss, dt, n, v, dloss,
                                                            ignore_index);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_cross_entropy_backward(void *dlogits, const void *logits, const int32_t *targets,
                                                      const float *loss, tg_dtype dt, int64_t n, int64_t v, float dloss,
                                                      int ignore_index, cudaStream_t st)
{
    return ce_rows(dlogits, NULL, logits, targets, loss, dt, n, v, dloss, ignore_index, st);
}

extern "C" cudaError_t tg_cuda_cross_entropy_fused(float *losses, void *dlogits, const void *logits,
                                                   const int32_t *targets, const float *loss, tg_dtype dt, int64_t n,
                                                   int64_t v, float dloss, int ignore_index, cudaStream_t st)
{
    return ce_rows(dlogits, losses, logits, targets, loss, dt, n, v, dloss, ignore_index, st);
}

extern "C" cudaError_t tg_cuda_cross_entropy_mean(float *loss, const float *losses, const int32_t *targets, int64_t n,
                                                  int ignore_index, cudaStream_t st)
{
    ce_forward_mean<<<1, CE_THREADS, 0, st>>>(loss, losses, targets, n, ignore_index);
    return cudaGetLastError();
}
