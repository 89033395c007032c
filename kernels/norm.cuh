/* norm.cuh — row kernels shared by LayerNorm and RMSNorm (RMS = true: no mean, no beta): forward, dgrad with an
 * optional residual gradient, and a deterministic two-stage dgamma/dbeta reduction. Included by layernorm.cu and
 * rmsnorm.cu, which instantiate one flavour each. */
#ifndef TG_KERNELS_NORM_CUH
#define TG_KERNELS_NORM_CUH

#include "colsum.cuh"
#include "fp8.cuh"

/* Storage: float (f32) or uint16_t (bf16 bits). Compute is f32; statistics are
 * f32 two-pass sums over the row held in registers (mean, then squared
 * deviations), well inside the CPU-vs-CUDA tolerances of the double-precision
 * CPU reference. */
static __device__ __forceinline__ float tgk_to_f(float v) { return v; }
static __device__ __forceinline__ float tgk_to_f(uint16_t v) { return tgk_bf16_to_f32(v); }
template <class T> static __device__ __forceinline__ T tgk_from_f(float v);
template <> __device__ __forceinline__ float tgk_from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ uint16_t tgk_from_f<uint16_t>(float v) { return tgk_f32_to_bf16(v); }

/* The FP8 form of the forward (F8 = true): each output is rounded to the storage type as the plain forward
 * stores it, then its code fp8(v * scale) goes to y8 (y is not written); amax = max|v| folded per block,
 * scale_inv = 1 / scale. */
struct tgk_norm_f8 {
    uint8_t *y8;
    tg_dtype dt;
    const float *scale;
    float *amax, *scale_inv;
};

/* The code of the value v would be stored as (T), its |bits| folded into am. */
template <class T> static __device__ __forceinline__ uint8_t tgk_norm_code(float v, float s, tg_dtype dt, unsigned &am)
{
    const float q = tgk_to_f(tgk_from_f<T>(v));
    am = max(am, tgk_abs_bits(q));
    return tgk_to_fp8(q * s, dt);
}

/* V elements moved as one load/store (16 bytes when V = 16 / sizeof(T)). */
template <class T, int V> struct alignas(sizeof(T) * V) tgk_pack {
    T v[V];
};

template <class T, int V> static __device__ __forceinline__ void tgk_ldv(const T *p, int64_t i, float *out)
{
    tgk_pack<T, V> k = *reinterpret_cast<const tgk_pack<T, V> *>(p + i);
#pragma unroll
    for (int j = 0; j < V; j++) out[j] = tgk_to_f(k.v[j]);
}

template <class T, int V> static __device__ __forceinline__ void tgk_stv(T *p, int64_t i, const float *in)
{
    tgk_pack<T, V> k;
#pragma unroll
    for (int j = 0; j < V; j++) k.v[j] = tgk_from_f<T>(in[j]);
    *reinterpret_cast<tgk_pack<T, V> *>(p + i) = k;
}

/* Register-resident rows: a group of tpr threads (a power of two, 32..512)
 * owns a row; thread t holds vectors t, t + tpr, ... (NV of them, V elements
 * each). A block runs max(256, tpr) threads, i.e. 256 / tpr rows (or one). */
#define TGK_NORM_NV_MAX 4
#define TGK_NORM_BLOCK 256
#define TGK_NORM_TPR_MAX 512 /* 128 registers a thread: the NV = 4 rows of the backward fit without spills */

/* Sums a and b over the tpr threads of a row, in a fixed order; every thread
 * of the block must call it (rows past n included). sh: 2 x 32 floats. */
static __device__ __forceinline__ void tgk_row_sum2(float &a, float &b, int tpr, float (*sh)[32])
{
    a = tgk_warp_sum(a);
    b = tgk_warp_sum(b);
    if (tpr == 32) return;
    const int w = threadIdx.x / 32, w0 = (threadIdx.x / tpr) * (tpr / 32);
    __syncthreads(); /* the previous call's readers are done */
    if (threadIdx.x % 32 == 0) sh[0][w] = a, sh[1][w] = b;
    __syncthreads();
    a = sh[0][w0], b = sh[1][w0];
    for (int k = 1; k < tpr / 32; k++) a += sh[0][w0 + k], b += sh[1][w0 + k];
}

template <class T, int V, int NV, bool RMS, bool F8>
static __global__ void __launch_bounds__(TGK_NORM_TPR_MAX) tgk_norm_forward(T *y, float *mean, float *rstd, const T *x, const T *gamma,
                                                                const T *beta, int64_t n, int c, int tpr, float eps,
                                                                tgk_norm_f8 f8)
{
    __shared__ float sh[2][32];
    const int t = threadIdx.x % tpr;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / tpr) + threadIdx.x / tpr;
    const bool row_ok = r < n;
    const T *xr = x + (row_ok ? r : 0) * c;
    float v[NV][V];
    float s = 0.0f, dummy = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int e = (i * tpr + t) * V;
        if (row_ok && e < c) {
            tgk_ldv<T, V>(xr, e, v[i]);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++) v[i][j] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < V; j++) s += RMS ? v[i][j] * v[i][j] : v[i][j];
    }
    float m = 0.0f, rs;
    if (RMS) {
        tgk_row_sum2(s, dummy, tpr, sh);
        rs = rsqrtf(s / (float)c + eps);
    } else {
        tgk_row_sum2(s, dummy, tpr, sh);
        m = s / (float)c;
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++)
            if ((i * tpr + t) * V < c)
#pragma unroll
                for (int j = 0; j < V; j++) q += (v[i][j] - m) * (v[i][j] - m);
        dummy = 0.0f;
        tgk_row_sum2(q, dummy, tpr, sh);
        rs = rsqrtf(q / (float)c + eps);
    }
    const float s8 = F8 && f8.scale ? *f8.scale : 1.0f;
    unsigned am = 0;
    if (row_ok) {
        if (t == 0) {
            if (!RMS) mean[r] = m;
            rstd[r] = rs;
        }
        /* y may alias x: the row is in registers already */
#pragma unroll
        for (int i = 0; i < NV; i++) {
            const int e = (i * tpr + t) * V;
            if (e >= c) continue;
            float g[V], b[V], o[V];
            tgk_ldv<T, V>(gamma, e, g);
            if (!RMS && beta) tgk_ldv<T, V>(beta, e, b);
#pragma unroll
            for (int j = 0; j < V; j++) {
                o[j] = (v[i][j] - m) * rs * g[j];
                if (!RMS && beta) o[j] += b[j];
            }
            if (F8) {
                tgk_pack<uint8_t, V> k;
#pragma unroll
                for (int j = 0; j < V; j++) k.v[j] = tgk_norm_code<T>(o[j], s8, f8.dt, am);
                *reinterpret_cast<tgk_pack<uint8_t, V> *>(f8.y8 + r * c + e) = k;
            } else {
                tgk_stv<T, V>(y + r * c, e, o);
            }
        }
    }
    if (F8) {
        if (f8.amax) tgk_amax_block(am, f8.amax);
        if (f8.scale_inv && blockIdx.x == 0 && threadIdx.x == 0) *f8.scale_inv = 1.0f / s8;
    }
}

/* dx = [dres +] rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), the mean(dxhat) term for LayerNorm
 * only; the sum with dres is in f32, rounded once. dx may alias dy or dres. */
template <class T, int V, int NV, bool RMS>
static __global__ void __launch_bounds__(TGK_NORM_TPR_MAX)
    tgk_norm_backward(T *dx, const T *dy, const T *dres, const T *x, const T *gamma, const float *mean,
                      const float *rstd, int64_t n, int c, int tpr)
{
    __shared__ float sh[2][32];
    const int t = threadIdx.x % tpr;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / tpr) + threadIdx.x / tpr;
    const bool row_ok = r < n;
    const int64_t o = (row_ok ? r : 0) * c;
    const float m = RMS || !row_ok ? 0.0f : mean[r], rs = row_ok ? rstd[r] : 0.0f;
    float xv[NV][V], gv[NV][V]; /* xhat, then dxhat */
    float s1 = 0.0f, s2 = 0.0f; /* sum dxhat, sum dxhat * xhat */
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int e = (i * tpr + t) * V;
        if (row_ok && e < c) {
            float g[V];
            tgk_ldv<T, V>(x + o, e, xv[i]);
            tgk_ldv<T, V>(dy + o, e, gv[i]);
            tgk_ldv<T, V>(gamma, e, g);
#pragma unroll
            for (int j = 0; j < V; j++) {
                xv[i][j] = (xv[i][j] - m) * rs;
                gv[i][j] *= g[j];
                s1 += gv[i][j];
                s2 += gv[i][j] * xv[i][j];
            }
        } else {
#pragma unroll
            for (int j = 0; j < V; j++) xv[i][j] = gv[i][j] = 0.0f;
        }
    }
    tgk_row_sum2(s1, s2, tpr, sh);
    if (!row_ok) return;
    const float m1 = RMS ? 0.0f : s1 / (float)c, m2 = s2 / (float)c;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int e = (i * tpr + t) * V;
        if (e >= c) continue;
        float d[V], res[V];
        if (dres) tgk_ldv<T, V>(dres + o, e, res);
#pragma unroll
        for (int j = 0; j < V; j++) {
            d[j] = rs * (gv[i][j] - m1 - xv[i][j] * m2);
            if (dres) d[j] += res[j];
        }
        tgk_stv<T, V>(dx + o, e, d);
    }
}

/* Rows too wide for registers: one block per row, three passes over global memory (L2-resident rows). */
template <class T, bool RMS, bool F8>
static __global__ void __launch_bounds__(1024) tgk_norm_forward_wide(T *y, float *mean, float *rstd, const T *x, const T *gamma, const T *beta,
                                             int64_t n, int64_t c, float eps, tgk_norm_f8 f8)
{
    __shared__ float sh[2][32];
    const int64_t r = blockIdx.x, o = r * c;
    const int tpr = blockDim.x;
    float s = 0.0f, dummy = 0.0f;
    for (int64_t j = threadIdx.x; j < c; j += tpr) {
        float v = tgk_to_f(x[o + j]);
        s += RMS ? v * v : v;
    }
    tgk_row_sum2(s, dummy, tpr, sh);
    float m = 0.0f, rs;
    if (RMS) {
        rs = rsqrtf(s / (float)c + eps);
    } else {
        m = s / (float)c;
        float q = 0.0f;
        for (int64_t j = threadIdx.x; j < c; j += tpr) {
            float d = tgk_to_f(x[o + j]) - m;
            q += d * d;
        }
        dummy = 0.0f;
        tgk_row_sum2(q, dummy, tpr, sh);
        rs = rsqrtf(q / (float)c + eps);
    }
    if (threadIdx.x == 0) {
        if (!RMS) mean[r] = m;
        rstd[r] = rs;
    }
    /* each thread reads its elements before writing them (y may alias x) */
    const float s8 = F8 && f8.scale ? *f8.scale : 1.0f;
    unsigned am = 0;
    for (int64_t j = threadIdx.x; j < c; j += tpr) {
        float v = (tgk_to_f(x[o + j]) - m) * rs * tgk_to_f(gamma[j]);
        if (!RMS && beta) v += tgk_to_f(beta[j]);
        if (F8) f8.y8[o + j] = tgk_norm_code<T>(v, s8, f8.dt, am);
        else y[o + j] = tgk_from_f<T>(v);
    }
    if (F8) {
        if (f8.amax) tgk_amax_block(am, f8.amax);
        if (f8.scale_inv && blockIdx.x == 0 && threadIdx.x == 0) *f8.scale_inv = 1.0f / s8;
    }
}

template <class T, bool RMS>
static __global__ void __launch_bounds__(1024) tgk_norm_backward_wide(T *dx, const T *dy, const T *dres, const T *x, const T *gamma,
                                              const float *mean, const float *rstd, int64_t n, int64_t c)
{
    __shared__ float sh[2][32];
    const int64_t r = blockIdx.x, o = r * c;
    const int tpr = blockDim.x;
    const float m = RMS ? 0.0f : mean[r], rs = rstd[r];
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t j = threadIdx.x; j < c; j += tpr) {
        float xhat = (tgk_to_f(x[o + j]) - m) * rs, dxhat = tgk_to_f(dy[o + j]) * tgk_to_f(gamma[j]);
        s1 += dxhat;
        s2 += dxhat * xhat;
    }
    tgk_row_sum2(s1, s2, tpr, sh);
    const float m1 = RMS ? 0.0f : s1 / (float)c, m2 = s2 / (float)c;
    for (int64_t j = threadIdx.x; j < c; j += tpr) {
        float xhat = (tgk_to_f(x[o + j]) - m) * rs, dxhat = tgk_to_f(dy[o + j]) * tgk_to_f(gamma[j]);
        float d = rs * (dxhat - m1 - xhat * m2);
        if (dres) d += tgk_to_f(dres[o + j]);
        dx[o + j] = tgk_from_f<T>(d);
    }
}

/* ------------------------------------------------------------------ launch */
/* Threads per row and vectors per thread for nvec vectors; false: too wide for registers. */
static inline bool tgk_norm_plan(int64_t nvec, int *tpr, int *nv)
{
    for (int t = 32; t <= TGK_NORM_TPR_MAX; t *= 2) {
        int64_t k = (nvec + t - 1) / t;
        if (k <= TGK_NORM_NV_MAX) {
            *tpr = t;
            *nv = (int)(k < 1 ? 1 : k);
            return true;
        }
    }
    return false;
}

static inline dim3 tgk_norm_grid(int64_t n, int tpr, unsigned *threads)
{
    *threads = (unsigned)(tpr > TGK_NORM_BLOCK ? tpr : TGK_NORM_BLOCK);
    int64_t rows = *threads / tpr;
    return dim3((unsigned)((n + rows - 1) / rows));
}

template <class T, int V, bool RMS, bool F8>
static cudaError_t tgk_norm_forward_v(T *y, float *mean, float *rstd, const T *x, const T *gamma, const T *beta,
                                      int64_t n, int64_t c, float eps, tgk_norm_f8 f8, cudaStream_t st)
{
    int tpr, nv;
    if (!tgk_norm_plan(c / V, &tpr, &nv)) {
        tgk_norm_forward_wide<T, RMS, F8><<<(unsigned)n, 1024, 0, st>>>(y, mean, rstd, x, gamma, beta, n, c, eps, f8);
        return cudaGetLastError();
    }
    unsigned th;
    dim3 g = tgk_norm_grid(n, tpr, &th);
    switch (nv) {
    case 1: tgk_norm_forward<T, V, 1, RMS, F8><<<g, th, 0, st>>>(y, mean, rstd, x, gamma, beta, n, (int)c, tpr, eps, f8); break;
    case 2: tgk_norm_forward<T, V, 2, RMS, F8><<<g, th, 0, st>>>(y, mean, rstd, x, gamma, beta, n, (int)c, tpr, eps, f8); break;
    case 3: tgk_norm_forward<T, V, 3, RMS, F8><<<g, th, 0, st>>>(y, mean, rstd, x, gamma, beta, n, (int)c, tpr, eps, f8); break;
    default: tgk_norm_forward<T, V, 4, RMS, F8><<<g, th, 0, st>>>(y, mean, rstd, x, gamma, beta, n, (int)c, tpr, eps, f8); break;
    }
    return cudaGetLastError();
}

template <class T, int V, bool RMS>
static cudaError_t tgk_norm_backward_v(T *dx, const T *dy, const T *dres, const T *x, const T *gamma, const float *mean,
                                       const float *rstd, int64_t n, int64_t c, cudaStream_t st)
{
    int tpr, nv;
    if (!tgk_norm_plan(c / V, &tpr, &nv)) {
        tgk_norm_backward_wide<T, RMS><<<(unsigned)n, 1024, 0, st>>>(dx, dy, dres, x, gamma, mean, rstd, n, c);
        return cudaGetLastError();
    }
    unsigned th;
    dim3 g = tgk_norm_grid(n, tpr, &th);
    switch (nv) {
    case 1: tgk_norm_backward<T, V, 1, RMS><<<g, th, 0, st>>>(dx, dy, dres, x, gamma, mean, rstd, n, (int)c, tpr); break;
    case 2: tgk_norm_backward<T, V, 2, RMS><<<g, th, 0, st>>>(dx, dy, dres, x, gamma, mean, rstd, n, (int)c, tpr); break;
    case 3: tgk_norm_backward<T, V, 3, RMS><<<g, th, 0, st>>>(dx, dy, dres, x, gamma, mean, rstd, n, (int)c, tpr); break;
    default: tgk_norm_backward<T, V, 4, RMS><<<g, th, 0, st>>>(dx, dy, dres, x, gamma, mean, rstd, n, (int)c, tpr); break;
    }
    return cudaGetLastError();
}

/* Vector path (16-byte accesses) when c is a multiple of the vector width and every pointer is 16-byte aligned;
 * element path otherwise. Both give the same results up to f32 summation order. F8: the FP8 form (y unused,
 * f8.amax overwritten first unless accumulate). */
template <bool RMS, bool F8>
static cudaError_t tgk_norm_forward_launch_as(void *y, float *mean, float *rstd, const void *x, const void *gamma,
                                              const void *beta, tg_dtype dt, int64_t n, int64_t c, float eps,
                                              tgk_norm_f8 f8, int accumulate, cudaStream_t st)
{
    if (F8) {
        cudaError_t e = tgk_amax_reset(f8.amax, accumulate, st);
        if (e != cudaSuccess) return e;
    }
    if (n <= 0 || c <= 0) return cudaSuccess;
    if (n > 0x7fffffff || c > 0x7fffffff) return cudaErrorInvalidValue;
    const bool al = tgk_aligned(F8 ? (const void *)f8.y8 : y, 16) && tgk_aligned(x, 16) && tgk_aligned(gamma, 16) &&
                    tgk_aligned(beta, 16);
    if (dt == TG_BF16) {
        typedef uint16_t T;
        if (al && c % 8 == 0)
            return tgk_norm_forward_v<T, 8, RMS, F8>((T *)y, mean, rstd, (const T *)x, (const T *)gamma,
                                                     (const T *)beta, n, c, eps, f8, st);
        return tgk_norm_forward_v<T, 1, RMS, F8>((T *)y, mean, rstd, (const T *)x, (const T *)gamma, (const T *)beta, n,
                                                 c, eps, f8, st);
    }
    typedef float T;
    if (al && c % 4 == 0)
        return tgk_norm_forward_v<T, 4, RMS, F8>((T *)y, mean, rstd, (const T *)x, (const T *)gamma, (const T *)beta, n,
                                                 c, eps, f8, st);
    return tgk_norm_forward_v<T, 1, RMS, F8>((T *)y, mean, rstd, (const T *)x, (const T *)gamma, (const T *)beta, n, c,
                                             eps, f8, st);
}

template <bool RMS>
static cudaError_t tgk_norm_forward_launch(void *y, float *mean, float *rstd, const void *x, const void *gamma,
                                           const void *beta, tg_dtype dt, int64_t n, int64_t c, float eps,
                                           cudaStream_t st)
{
    return tgk_norm_forward_launch_as<RMS, false>(y, mean, rstd, x, gamma, beta, dt, n, c, eps, tgk_norm_f8(), 0, st);
}

template <bool RMS>
static cudaError_t tgk_norm_backward_launch(void *dx, const void *dy, const void *dres, const void *x,
                                            const void *gamma, const float *mean, const float *rstd, tg_dtype dt,
                                            int64_t n, int64_t c, cudaStream_t st)
{
    if (n <= 0 || c <= 0) return cudaSuccess;
    if (n > 0x7fffffff || c > 0x7fffffff) return cudaErrorInvalidValue;
    const bool al = tgk_aligned(dx, 16) && tgk_aligned(dy, 16) && tgk_aligned(dres, 16) && tgk_aligned(x, 16) &&
                    tgk_aligned(gamma, 16);
    if (dt == TG_BF16) {
        typedef uint16_t T;
        if (al && c % 8 == 0)
            return tgk_norm_backward_v<T, 8, RMS>((T *)dx, (const T *)dy, (const T *)dres, (const T *)x,
                                                  (const T *)gamma, mean, rstd, n, c, st);
        return tgk_norm_backward_v<T, 1, RMS>((T *)dx, (const T *)dy, (const T *)dres, (const T *)x, (const T *)gamma,
                                              mean, rstd, n, c, st);
    }
    typedef float T;
    if (al && c % 4 == 0)
        return tgk_norm_backward_v<T, 4, RMS>((T *)dx, (const T *)dy, (const T *)dres, (const T *)x, (const T *)gamma,
                                              mean, rstd, n, c, st);
    return tgk_norm_backward_v<T, 1, RMS>((T *)dx, (const T *)dy, (const T *)dres, (const T *)x, (const T *)gamma, mean,
                                          rstd, n, c, st);
}

/* ------------------------------------------------------------------ dgamma (, dbeta) */
/* Stage 1: block (32, 8) owns a tile of 32 * V columns and a chunk of rows; warp y takes rows r0 + y, r0 + y + 8,
 * ... (vector loads across the tile), then the 8 warps' sums are folded in order. Per column the order of the sums
 * does not depend on V, so both paths give bit-identical results. part: (nchunks, NOUT, c). */
#define TGK_NDW_Y 8
template <class T, int V, bool RMS>
static __global__ void __launch_bounds__(256) tgk_norm_dw_partial(const T *dy, const T *x, const float *mean,
                                                                  const float *rstd, int64_t n, int64_t c,
                                                                  int64_t rows_per_chunk, float *part)
{
    constexpr int NOUT = RMS ? 1 : 2, W = 32 * V;
    __shared__ float sh[NOUT][TGK_NDW_Y][W + 1];
    const int64_t c0 = (int64_t)blockIdx.x * W, col = c0 + threadIdx.x * V;
    const int64_t r0 = (int64_t)blockIdx.y * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < n ? r0 + rows_per_chunk : n;
    float ag[V], ab[V];
#pragma unroll
    for (int j = 0; j < V; j++) ag[j] = ab[j] = 0.0f;
    if (col < c) {
#pragma unroll 2
        for (int64_t r = r0 + threadIdx.y; r < r1; r += TGK_NDW_Y) {
            float g[V], xv[V];
            tgk_ldv<T, V>(dy, r * c + col, g);
            tgk_ldv<T, V>(x, r * c + col, xv);
            const float m = RMS ? 0.0f : mean[r], rs = rstd[r];
#pragma unroll
            for (int j = 0; j < V; j++) {
                ag[j] += g[j] * ((xv[j] - m) * rs);
                if (!RMS) ab[j] += g[j];
            }
        }
    }
#pragma unroll
    for (int j = 0; j < V; j++) {
        sh[0][threadIdx.y][threadIdx.x * V + j] = ag[j];
        if (!RMS) sh[NOUT - 1][threadIdx.y][threadIdx.x * V + j] = ab[j];
    }
    __syncthreads();
    const int tid = threadIdx.y * 32 + threadIdx.x;
    for (int i = tid; i < NOUT * W; i += 32 * TGK_NDW_Y) {
        const int k = i / W, j = i % W;
        if (c0 + j >= c) continue;
        float s = sh[k][0][j];
#pragma unroll
        for (int y = 1; y < TGK_NDW_Y; y++) s += sh[k][y][j];
        part[((int64_t)blockIdx.y * NOUT + k) * c + c0 + j] = s;
    }
}

/* Stage 2 is colsum.cuh's tgk_colsum_final: the partials have its layout. */

/* The chunking depends only on (n, c, RMS, the scratch size): not on the path or the device. */
template <bool RMS>
static cudaError_t tgk_norm_dw_launch(void *dgamma, void *dbeta, const void *dy, const void *x, const float *mean,
                                      const float *rstd, tg_dtype dt, tg_dtype dw_dt, int64_t n, int64_t c,
                                      float accumulate, float *scratch, size_t scratch_bytes, cudaStream_t st)
{
    constexpr int NOUT = RMS ? 1 : 2;
    if (c <= 0) return cudaSuccess;
    int64_t nchunks = 0;
    if (n > 0) {
        const int64_t tiles = (c + 255) / 256, cap = (int64_t)scratch_bytes / (NOUT * c * (int64_t)sizeof(float));
        nchunks = (1024 + tiles - 1) / tiles;            /* ~1024 blocks of stage 1: the whole GPU busy */
        if (nchunks > (n + 31) / 32) nchunks = (n + 31) / 32; /* at least 32 rows a chunk */
        if (nchunks > 65535) nchunks = 65535;
        if (nchunks > cap) nchunks = cap;
        if (nchunks < 1) return cudaErrorInvalidValue; /* c too large for the scratch */
        int64_t rows = (n + nchunks - 1) / nchunks;
        nchunks = (n + rows - 1) / rows;
        const bool al = tgk_aligned(dy, 16) && tgk_aligned(x, 16);
        if (dt == TG_BF16) {
            typedef uint16_t T;
            if (al && c % 8 == 0)
                tgk_norm_dw_partial<T, 8, RMS><<<dim3((unsigned)((c + 255) / 256), (unsigned)nchunks), dim3(32, TGK_NDW_Y),
                                                 0, st>>>((const T *)dy, (const T *)x, mean, rstd, n, c, rows, scratch);
            else
                tgk_norm_dw_partial<T, 1, RMS><<<dim3((unsigned)((c + 31) / 32), (unsigned)nchunks), dim3(32, TGK_NDW_Y),
                                                 0, st>>>((const T *)dy, (const T *)x, mean, rstd, n, c, rows, scratch);
        } else {
            typedef float T;
            if (al && c % 4 == 0)
                tgk_norm_dw_partial<T, 4, RMS><<<dim3((unsigned)((c + 127) / 128), (unsigned)nchunks), dim3(32, TGK_NDW_Y),
                                                 0, st>>>((const T *)dy, (const T *)x, mean, rstd, n, c, rows, scratch);
            else
                tgk_norm_dw_partial<T, 1, RMS><<<dim3((unsigned)((c + 31) / 32), (unsigned)nchunks), dim3(32, TGK_NDW_Y),
                                                 0, st>>>((const T *)dy, (const T *)x, mean, rstd, n, c, rows, scratch);
        }
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return tgk_colsum_final_launch<NOUT>(scratch, nchunks, c, dgamma, dbeta, dw_dt, accumulate, st);
}

#endif
