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

/* ------------------------------------------------------------------ rows streamed through the async copy unit
 * On sm_90 (Hopper and later), rows of up to ~113 KB (two buffers) or ~226 KB (one) of any length and
 * alignment, dlogits at the same offset from a 16-byte boundary as logits (in place, or both aligned).
 * One block a multiprocessor for GPT-2's 50304-entry rows, 1024 threads, a persistent loop over the
 * block's rows (blockIdx.x, + gridDim.x, ...) with two row buffers in shared memory (one where two do
 * not fit): one thread hands the load of a whole row to the bulk-copy unit (cp.async.bulk, completion
 * counted in bytes on an mbarrier), so the next row streams in from memory while the threads work on
 * this one and its dlogits stream out; no thread waits on a load it issued, and no registers hold rows
 * in flight. A row:
 *   1. max: packed bf16x2 maxima (no conversions), one warp shuffle tree, the warps' results in order;
 *   2. sum of exp(x - max) in f32: 2^(x log2e - max log2e), one FMA and one ex2 an element; per
 *      16-byte group a fixed tree, groups in order a thread, a warp shuffle tree, the warps in order;
 *   3. dlogits = 2^(x log2e - max log2e) * (dloss / count / sum) in f32, rounded to bf16 in pairs, in
 *      16-byte stores; the target's element is written again after its group by the same thread as
 *      dloss / count * (p - 1) in double.
 * Every sum has a fixed order: the same bits every run. The whole row is in shared memory before any
 * dlogit is written (dlogits may alias logits), and a buffer is loaded again only after every thread
 * has finished reading it. */

#define CE_LOG2E 1.4426950408889634f

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
static __device__ __forceinline__ uint32_t ce_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ float ce_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ uint32_t ce_max_bf16x2(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

/* Two f32 rounded to nearest even into bf16x2 (lo in the low half). */
static __device__ __forceinline__ uint32_t ce_pack_bf16x2(float lo, float hi)
{
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

static __device__ __forceinline__ float ce_lo(uint32_t w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float ce_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

static __device__ __forceinline__ void ce_mbar_init(uint64_t *bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ce_smem_addr(bar)) : "memory");
}

/* One thread: the load of bytes from src into dst, counted on bar. */
static __device__ __forceinline__ void ce_bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    const uint32_t b = ce_smem_addr(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     ce_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(b)
                 : "memory");
}

/* Until the phase of the given parity completes; a copy that never completes (a fault of the copy unit)
 * ends the kernel with an error after some seconds instead of hanging it. */
static __device__ __forceinline__ void ce_mbar_wait(uint64_t *bar, uint32_t parity)
{
    const uint32_t b = ce_smem_addr(bar);
    uint32_t done, tries = 0;
    do {
        if (++tries == 1u << 28) __trap();
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(b), "r"(parity)
                     : "memory");
    } while (!done);
}

/* Max over this thread's groups of a row in shared memory (16-byte groups g = threadIdx.x, + blockDim.x, ...). */
template <class T> static __device__ __forceinline__ float ce_thread_max(const uint4 *row, int64_t ng);
template <> __device__ __forceinline__ float ce_thread_max<uint16_t>(const uint4 *row, int64_t ng)
{
    uint32_t a = 0xff80ff80u, b = 0xff80ff80u; /* -inf, -inf */
#pragma unroll 4
    for (int64_t g = threadIdx.x; g < ng; g += blockDim.x) {
        const uint4 q = row[g];
        a = ce_max_bf16x2(a, q.x);
        b = ce_max_bf16x2(b, q.y);
        a = ce_max_bf16x2(a, q.z);
        b = ce_max_bf16x2(b, q.w);
    }
    a = ce_max_bf16x2(a, b);
    return fmaxf(ce_lo(a), ce_hi(a));
}
template <> __device__ __forceinline__ float ce_thread_max<float>(const uint4 *row, int64_t ng)
{
    float a = -INFINITY, b = -INFINITY;
#pragma unroll 4
    for (int64_t g = threadIdx.x; g < ng; g += blockDim.x) {
        const uint4 q = row[g];
        a = fmaxf(a, __uint_as_float(q.x));
        b = fmaxf(b, __uint_as_float(q.y));
        a = fmaxf(a, __uint_as_float(q.z));
        b = fmaxf(b, __uint_as_float(q.w));
    }
    return fmaxf(a, b);
}

/* Sum over this thread's groups of 2^(x log2e - ml), ml = max log2e. */
template <class T> static __device__ __forceinline__ float ce_thread_sum(const uint4 *row, int64_t ng, float ml);
template <> __device__ __forceinline__ float ce_thread_sum<uint16_t>(const uint4 *row, int64_t ng, float ml)
{
    float s = 0.0f;
#pragma unroll 4
    for (int64_t g = threadIdx.x; g < ng; g += blockDim.x) {
        const uint4 q = row[g];
        const float e0 = ce_ex2(fmaf(ce_lo(q.x), CE_LOG2E, -ml)), e1 = ce_ex2(fmaf(ce_hi(q.x), CE_LOG2E, -ml));
        const float e2 = ce_ex2(fmaf(ce_lo(q.y), CE_LOG2E, -ml)), e3 = ce_ex2(fmaf(ce_hi(q.y), CE_LOG2E, -ml));
        const float e4 = ce_ex2(fmaf(ce_lo(q.z), CE_LOG2E, -ml)), e5 = ce_ex2(fmaf(ce_hi(q.z), CE_LOG2E, -ml));
        const float e6 = ce_ex2(fmaf(ce_lo(q.w), CE_LOG2E, -ml)), e7 = ce_ex2(fmaf(ce_hi(q.w), CE_LOG2E, -ml));
        s += ((e0 + e1) + (e2 + e3)) + ((e4 + e5) + (e6 + e7));
    }
    return s;
}
template <> __device__ __forceinline__ float ce_thread_sum<float>(const uint4 *row, int64_t ng, float ml)
{
    float s = 0.0f;
#pragma unroll 4
    for (int64_t g = threadIdx.x; g < ng; g += blockDim.x) {
        const uint4 q = row[g];
        const float e0 = ce_ex2(fmaf(__uint_as_float(q.x), CE_LOG2E, -ml));
        const float e1 = ce_ex2(fmaf(__uint_as_float(q.y), CE_LOG2E, -ml));
        const float e2 = ce_ex2(fmaf(__uint_as_float(q.z), CE_LOG2E, -ml));
        const float e3 = ce_ex2(fmaf(__uint_as_float(q.w), CE_LOG2E, -ml));
        s += (e0 + e1) + (e2 + e3);
    }
    return s;
}

/* dlogits of this thread's groups: 2^(x log2e - ml) * fs, into out (16-byte aligned). */
template <class T> static __device__ __forceinline__ void ce_thread_grad(uint4 *out, const uint4 *row, int64_t ng,
                                                                         float ml, float fs);
template <>
__device__ __forceinline__ void ce_thread_grad<uint16_t>(uint4 *out, const uint4 *row, int64_t ng, float ml, float fs)
{
#pragma unroll 4
    for (int64_t g = threadIdx.x; g < ng; g += blockDim.x) {
        const uint4 q = row[g];
        uint4 d;
        d.x = ce_pack_bf16x2(ce_ex2(fmaf(ce_lo(q.x), CE_LOG2E, -ml)) * fs, ce_ex2(fmaf(ce_hi(q.x), CE_LOG2E, -ml)) * fs);
        d.y = ce_pack_bf16x2(ce_ex2(fmaf(ce_lo(q.y), CE_LOG2E, -ml)) * fs, ce_ex2(fmaf(ce_hi(q.y), CE_LOG2E, -ml)) * fs);
        d.z = ce_pack_bf16x2(ce_ex2(fmaf(ce_lo(q.z), CE_LOG2E, -ml)) * fs, ce_ex2(fmaf(ce_hi(q.z), CE_LOG2E, -ml)) * fs);
        d.w = ce_pack_bf16x2(ce_ex2(fmaf(ce_lo(q.w), CE_LOG2E, -ml)) * fs, ce_ex2(fmaf(ce_hi(q.w), CE_LOG2E, -ml)) * fs);
        out[g] = d;
    }
}
template <>
__device__ __forceinline__ void ce_thread_grad<float>(uint4 *out, const uint4 *row, int64_t ng, float ml, float fs)
{
#pragma unroll 4
    for (int64_t g = threadIdx.x; g < ng; g += blockDim.x) {
        const uint4 q = row[g];
        uint4 d;
        d.x = __float_as_uint(ce_ex2(fmaf(__uint_as_float(q.x), CE_LOG2E, -ml)) * fs);
        d.y = __float_as_uint(ce_ex2(fmaf(__uint_as_float(q.y), CE_LOG2E, -ml)) * fs);
        d.z = __float_as_uint(ce_ex2(fmaf(__uint_as_float(q.z), CE_LOG2E, -ml)) * fs);
        d.w = __float_as_uint(ce_ex2(fmaf(__uint_as_float(q.w), CE_LOG2E, -ml)) * fs);
        out[g] = d;
    }
}
#endif

/* dlogits (NULL: none; then loss may be NULL) and losses (NULL: none) of n rows of v elements. A row's
 * 16-byte-aligned middle comes through the copy unit; its head and tail (fewer than 16 bytes each, when
 * the row does not start or end on a 16-byte boundary) are read and written element by element by one
 * thread each. In a buffer (CE_PAD + whole groups + CE_PAD bytes) the middle starts at CE_PAD, the head
 * just before it, so the row is contiguous there. dlogits - logits is a multiple of 16 bytes. */
#define CE_PAD 16
template <class T, int S>
static __global__ void __launch_bounds__(1024, 1)
    ce_rows_bulk(T *dlogits, float *losses, const T *logits, const int32_t *targets, const float *loss, int64_t n,
                 int64_t v, float dloss, int ignore_index)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int E = 16 / sizeof(T); /* elements a group */
    extern __shared__ uint4 ce_smem[];
    __shared__ uint64_t bar[S];
    __shared__ float red[32];
    const int64_t stride = ((v * (int64_t)sizeof(T) + 15) / 16 + 2 * CE_PAD / 16); /* groups a buffer */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int64_t step = gridDim.x;
    double scale = 0.0;
    if (dlogits) {
        const float count = loss[1];
        scale = count > 0 ? (double)dloss / count : 0.0;
    }
    /* row r: h head elements, ng groups, then t tail elements */
    auto head = [&](int64_t r) -> int {
        const int h = (int)((16 - ((uintptr_t)(logits + r * v) & 15)) & 15) / (int)sizeof(T);
        return h < v ? h : (int)v;
    };
    auto issue = [&](int s, int64_t r) {
        const int h = head(r);
        const uint32_t bytes = (uint32_t)((v - h) / E * 16);
        if (bytes) ce_bulk_load(ce_smem + s * stride + CE_PAD / 16, logits + r * v + h, bytes, &bar[s]);
        else asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(ce_smem_addr(&bar[s])) : "memory");
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) ce_mbar_init(&bar[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int s = 0; s < S; s++)
            if (blockIdx.x + s * step < n) issue(s, blockIdx.x + s * step);
    }
    __syncthreads(); /* the barriers are initialised */
    int64_t it = 0;
    for (int64_t r = blockIdx.x; r < n; r += step, it++) {
        const int s = (int)(it % S);
        const int h = head(r);
        const int64_t ng = (v - h) / E;
        const int t = (int)(v - h - ng * E), extra = h + t;
        const uint4 *row = ce_smem + s * stride + CE_PAD / 16; /* the middle */
        T *rowe = (T *)row - h;                                 /* element 0 of the row */
        uint4 *out = dlogits ? (uint4 *)(dlogits + r * v + h) : NULL;
        /* this thread's head or tail element: its index in the row, -1: none */
        const int64_t xi = (int)threadIdx.x < extra ? ((int)threadIdx.x < h ? threadIdx.x : ng * E + threadIdx.x) : -1;
        const int32_t tgt = targets[r];
        ce_mbar_wait(&bar[s], (uint32_t)((it / S) & 1)); /* the middle of row r is in shared memory */
        if (extra) {
            if (xi >= 0) rowe[xi] = logits[r * v + xi];
            __syncthreads(); /* the head and tail too */
        }
        if (tgt == ignore_index || tgt < 0 || tgt >= v) {
            if (losses && threadIdx.x == 0) losses[r] = tgt == ignore_index ? 0.0f : NAN;
            if (out) {
                for (int64_t g = threadIdx.x; g < ng; g += blockDim.x) out[g] = make_uint4(0, 0, 0, 0);
                if (xi >= 0) dlogits[r * v + xi] = ce_t<T>(0.0f);
            }
        } else {
            /* 1. max */
            float m = ce_thread_max<T>(row, ng);
            if (xi >= 0) m = fmaxf(m, ce_f(rowe[xi]));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (lane == 0) red[warp] = m;
            __syncthreads();
            m = red[0];
            for (int w = 1; w < nw; w++) m = fmaxf(m, red[w]);
            const float ml = m == -INFINITY ? 0.0f : m * CE_LOG2E; /* all -inf: a zero sum, a NaN loss */
            /* 2. sum */
            float sum = ce_thread_sum<T>(row, ng, ml);
            if (xi >= 0) sum += ce_ex2(fmaf(ce_f(rowe[xi]), CE_LOG2E, -ml));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            __syncthreads(); /* every thread has read red's maxima */
            if (lane == 0) red[warp] = sum;
            __syncthreads();
            sum = red[0];
            for (int w = 1; w < nw; w++) sum += red[w];
            const float x_t = ce_f(rowe[tgt]);
            /* the last thread has the fewest groups: its warp has time for the double log */
            if (losses && threadIdx.x == blockDim.x - 1)
                losses[r] = (float)((double)m + log((double)sum) - (double)x_t);
            if (out) {
                const double inv = 1.0 / (double)sum;
                const float fs = (float)(scale * inv);
                ce_thread_grad<T>(out, row, ng, ml, fs);
                if (xi >= 0) dlogits[r * v + xi] = ce_t<T>(ce_ex2(fmaf(ce_f(rowe[xi]), CE_LOG2E, -ml)) * fs);
                /* the target's element, again, by the thread that wrote it, after it */
                const int64_t gt = tgt - h;
                const int owner = tgt < h ? tgt : gt < ng * E ? (int)(gt / E % blockDim.x) : (int)(gt - ng * E + h);
                if (owner == (int)threadIdx.x) {
                    asm volatile("" ::: "memory");
                    const float e = ce_ex2(fmaf(x_t, CE_LOG2E, -ml));
                    dlogits[r * v + tgt] = ce_t<T>((float)(scale * ((double)e * inv - 1.0)));
                }
            }
        }
        /* the head and tail writes of shared memory before the copy unit may write there again */
        if (extra) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads(); /* every thread is done with buffer s and red */
        if (threadIdx.x == 0 && r + S * step < n) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue(s, r + S * step);
        }
    }
#endif
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

/* Multiprocessors of the current device when it runs the bulk-copy kernels (sm_90 code built, a device of
 * compute capability 9 or later), else 0. */
static int ce_bulk_device(void)
{
    static int sms[CE_MAX_DEVICES]; /* > 0: the count; -1: no; 0: unknown (benign race: one value a device) */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= CE_MAX_DEVICES) return 0;
    if (!sms[dev]) {
        int major = 0, count = 0;
        cudaFuncAttributes fa;
        const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
                        cudaFuncGetAttributes(&fa, ce_rows_bulk<uint16_t, 2>) == cudaSuccess && major >= 9 &&
                        fa.ptxVersion >= 90 && fa.binaryVersion >= 90 && count > 0;
        if (!ok) (void)cudaGetLastError(); /* a failed query is not the next launch's error */
        sms[dev] = ok ? count : -1;
    }
    return sms[dev] > 0 ? sms[dev] : 0;
}

/* Bytes of a row buffer of the bulk-copy kernels. */
static size_t ce_bulk_bytes(tg_dtype dt, int64_t v)
{
    return ((size_t)v * tg_dtype_size(dt) + 15) / 16 * 16 + 2 * CE_PAD;
}

/* Row buffers of the bulk-copy kernels for rows of v elements of dt at logits (and dlogits, NULL: none):
 * 2, 1, or 0 when they cannot run (dlogits and logits at different offsets from 16-byte boundaries, a
 * row larger than shared memory, a device or build without them). */
static int ce_bulk_stages(tg_dtype dt, int64_t v, const void *logits, const void *dlogits)
{
    const size_t es = tg_dtype_size(dt), b = ce_bulk_bytes(dt, v);
    if ((uintptr_t)logits % es || (dlogits && ((uintptr_t)dlogits - (uintptr_t)logits) % 16) || !ce_bulk_device())
        return 0;
    const size_t lim = ce_smem_limit();
    return 2 * b <= lim ? 2 : b <= lim ? 1 : 0;
}

template <class T, int S>
static cudaError_t ce_launch_bulk(T *dlogits, float *losses, const T *logits, const int32_t *targets,
                                  const float *loss, int64_t n, int64_t v, float dloss, int ignore_index,
                                  cudaStream_t st)
{
    const int64_t ng = v * (int64_t)sizeof(T) / 16;
    const size_t smem = (size_t)S * ce_bulk_bytes(sizeof(T) == 2 ? TG_BF16 : TG_F32, v);
    /* about six groups a thread: 1024 threads for GPT-2's rows, fewer (and more blocks) for small rows */
    int threads = (int)(((ng + 5) / 6 + 31) & ~(int64_t)31);
    threads = threads < 128 ? 128 : threads > 1024 ? 1024 : threads;
    cudaError_t e = ce_allow_smem(ce_rows_bulk<T, S>, smem);
    if (e != cudaSuccess) return e;
    /* blocks a multiprocessor for the last row size, per device: (v << 8) | blocks (benign race: one word) */
    static int64_t last[CE_MAX_DEVICES];
    int dev = 0, per_sm = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    const int64_t seen = dev >= 0 && dev < CE_MAX_DEVICES ? last[dev] : 0;
    if (seen && seen >> 8 == v) per_sm = (int)(seen & 255);
    else {
        if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ce_rows_bulk<T, S>, threads, smem)) !=
            cudaSuccess)
            return e;
        per_sm = per_sm < 1 ? 1 : per_sm > 255 ? 255 : per_sm;
        if (dev >= 0 && dev < CE_MAX_DEVICES) last[dev] = v << 8 | per_sm;
    }
    const int64_t most = (int64_t)ce_bulk_device() * per_sm;
    ce_rows_bulk<T, S><<<(unsigned)(n < most ? n : most), threads, smem, st>>>(dlogits, losses, logits, targets, loss,
                                                                             n, v, dloss, ignore_index);
    return cudaGetLastError();
}

static cudaError_t ce_bulk(int stages, tg_dtype dt, void *dlogits, float *losses, const void *logits,
                           const int32_t *targets, const float *loss, int64_t n, int64_t v, float dloss,
                           int ignore_index, cudaStream_t st)
{
    if (dt == TG_BF16) {
        uint16_t *d = (uint16_t *)dlogits;
        const uint16_t *x = (const uint16_t *)logits;
        return stages == 2 ? ce_launch_bulk<uint16_t, 2>(d, losses, x, targets, loss, n, v, dloss, ignore_index, st)
                           : ce_launch_bulk<uint16_t, 1>(d, losses, x, targets, loss, n, v, dloss, ignore_index, st);
    }
    float *d = (float *)dlogits;
    const float *x = (const float *)logits;
    return stages == 2 ? ce_launch_bulk<float, 2>(d, losses, x, targets, loss, n, v, dloss, ignore_index, st)
                       : ce_launch_bulk<float, 1>(d, losses, x, targets, loss, n, v, dloss, ignore_index, st);
}


extern "C" cudaError_t tg_cuda_cross_entropy_forward(float *loss, float *losses, const void *logits,
                                                     const int32_t *targets, tg_dtype dt, int64_t n, int64_t v,
                                                     int ignore_index, cudaStream_t st)
{
    cudaError_t e;
    if (n > 0) {
        const size_t bytes = ce_row_bytes(dt, v);
        const bool vec = v % CE_G == 0 && ce_aligned(logits);
        const int stages = ce_bulk_stages(dt, v, logits, NULL);
        if (stages) {
            if ((e = ce_bulk(stages, dt, NULL, losses, logits, targets, NULL, n, v, 0.0f, ignore_index, st)) !=
                cudaSuccess)
                return e;
        } else if (bytes && dt == TG_BF16) {
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
    const int stages = ce_bulk_stages(dt, v, logits, dlogits);
    if (stages) return ce_bulk(stages, dt, dlogits, losses, logits, targets, loss, n, v, dloss, ignore_index, st);
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
