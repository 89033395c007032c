/* colsum.cuh — deterministic two-stage column sums over rows (the wgrads of norms and bias), no float atomics. */
#ifndef TG_KERNELS_COLSUM_CUH
#define TG_KERNELS_COLSUM_CUH

#include "common.cuh"

/* A wgrad element: p[i] = acc * p[i] + g (acc == 0 overwrites, NaN in p
 * ignored), computed in double and rounded once, as st_wgrad in cpu_nn.c. */
static __device__ __forceinline__ void tgk_store_wgrad(void *p, tg_dtype dt, int64_t i, float acc, double g)
{
    double v = acc == 0.0f ? g : (double)acc * tgk_load(p, dt, i) + g;
    tgk_store(p, dt, i, (float)v);
}

#define TGK_COLSUM_X 32 /* columns per block (one warp across a row) */
#define TGK_COLSUM_Y 8  /* rows in flight per block */
#define TGK_COLSUM_MIN_ROWS 64

/* Stage 1: part[(chunk * NOUT + k) * c + col] = sum over the rows of `chunk`
 * of term k of f(row, col); rows within a block are folded in a fixed order. */
template <int NOUT, class F>
static __global__ void tgk_colsum_partial(F f, int64_t n, int64_t c, int64_t rows_per_chunk, float *part)
{
    __shared__ float sh[NOUT][TGK_COLSUM_Y][TGK_COLSUM_X + 1];
    const int64_t col = (int64_t)blockIdx.x * TGK_COLSUM_X + threadIdx.x;
    const int64_t r0 = (int64_t)blockIdx.y * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < n ? r0 + rows_per_chunk : n;
    float acc[NOUT];
#pragma unroll
    for (int k = 0; k < NOUT; k++) acc[k] = 0.0f;
    if (col < c)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += TGK_COLSUM_Y) f(r, col, acc);
#pragma unroll
    for (int k = 0; k < NOUT; k++) sh[k][threadIdx.y][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && col < c) {
#pragma unroll
        for (int k = 0; k < NOUT; k++) {
            float s = sh[k][0][threadIdx.x];
            for (int y = 1; y < TGK_COLSUM_Y; y++) s += sh[k][y][threadIdx.x];
            part[((int64_t)blockIdx.y * NOUT + k) * c + col] = s;
        }
    }
}

/* Stage 2: block (32, 8) owns 32 columns; warp y sums chunks y, y + 8, ... in double (independent loads, so a
 * long column of partials is not one chain of dependent reads), the 8 sums are folded in order, then
 * out_k[col] = acc * out_k[col] + sum. The order depends only on nchunks: bit-identical run to run.
 * part: (nchunks, NOUT, c). */
#define TGK_COLSUM_FINAL_Y 8
template <int NOUT>
static __global__ void __launch_bounds__(32 * TGK_COLSUM_FINAL_Y)
    tgk_colsum_final(const float *part, int64_t nchunks, int64_t c, void *out0, void *out1, tg_dtype dw_dt,
                     float accumulate)
{
    __shared__ double sh[TGK_COLSUM_FINAL_Y][32];
    const int64_t col = (int64_t)blockIdx.x * 32 + threadIdx.x;
#pragma unroll
    for (int k = 0; k < NOUT; k++) {
        void *out = k == 0 ? out0 : out1;
        if (!out) continue; /* uniform across the block */
        double s = 0.0;
        if (col < c) {
#pragma unroll 4
            for (int64_t ch = threadIdx.y; ch < nchunks; ch += TGK_COLSUM_FINAL_Y) s += part[(ch * NOUT + k) * c + col];
        }
        __syncthreads(); /* the previous k's readers are done */
        sh[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0 && col < c) {
            double t = sh[0][threadIdx.x];
#pragma unroll
            for (int y = 1; y < TGK_COLSUM_FINAL_Y; y++) t += sh[y][threadIdx.x];
            tgk_store_wgrad(out, dw_dt, col, accumulate, t);
        }
    }
}

template <int NOUT>
static cudaError_t tgk_colsum_final_launch(const float *part, int64_t nchunks, int64_t c, void *out0, void *out1,
                                           tg_dtype dw_dt, float accumulate, cudaStream_t st)
{
    tgk_colsum_final<NOUT><<<(unsigned)((c + 31) / 32), dim3(32, TGK_COLSUM_FINAL_Y), 0, st>>>(part, nchunks, c, out0,
                                                                                             out1, dw_dt, accumulate);
    return cudaGetLastError();
}

/* The chunking of stage 1: depends only on (n, c, NOUT, the scratch size), so
 * results are bit-identical run to run. 0 when c is too large for the scratch. */
static inline int64_t tgk_colsum_chunks(int64_t n, int64_t c, int nout, size_t scratch_bytes, int64_t *rows)
{
    int64_t per_chunk_bytes = nout * c * (int64_t)sizeof(float);
    int64_t cap = (int64_t)scratch_bytes / per_chunk_bytes;
    if (cap > 65535) cap = 65535; /* gridDim.y */
    int64_t nchunks = (n + TGK_COLSUM_MIN_ROWS - 1) / TGK_COLSUM_MIN_ROWS;
    if (nchunks > 1024) nchunks = 1024;
    if (nchunks > cap) nchunks = cap;
    if (nchunks < 1) return 0;
    *rows = (n + nchunks - 1) / nchunks;
    return (n + *rows - 1) / *rows;
}

/* Launches both stages. scratch: device memory of scratch_bytes; too small
 * for one chunk of partials is an error. */
template <int NOUT, class F>
static cudaError_t tgk_colsum(F f, int64_t n, int64_t c, void *out0, void *out1, tg_dtype dw_dt, float accumulate,
                              float *scratch, size_t scratch_bytes, cudaStream_t st)
{
    if (c <= 0) return cudaSuccess;
    int64_t nchunks = 0, rows = 0;
    if (n > 0) {
        nchunks = tgk_colsum_chunks(n, c, NOUT, scratch_bytes, &rows);
        if (nchunks < 1) return cudaErrorInvalidValue; /* c too large for the scratch */
        dim3 grid((unsigned)((c + TGK_COLSUM_X - 1) / TGK_COLSUM_X), (unsigned)nchunks);
        tgk_colsum_partial<NOUT><<<grid, dim3(TGK_COLSUM_X, TGK_COLSUM_Y), 0, st>>>(f, n, c, rows, scratch);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return tgk_colsum_final_launch<NOUT>(scratch, nchunks, c, out0, out1, dw_dt, accumulate, st);
}

/* Stage 1 for plain column sums of a matrix with contiguous rows (leading
 * dim ld): a thread loads V adjacent columns at once (16 bytes), a block
 * covers 32 * V columns. Each column's rows are summed by the same thread
 * (threadIdx.y) in the same order, and folded over threadIdx.y in the same
 * order, as in tgk_colsum_partial: the partials are bit-identical to it. */
template <class T, int V>
static __global__ void __launch_bounds__(TGK_COLSUM_X *TGK_COLSUM_Y)
    tgk_colsum_rows_partial(const T *a, int64_t ld, int64_t n, int64_t c, int64_t rows_per_chunk, float *part)
{
    constexpr int W = TGK_COLSUM_X * V;
    __shared__ float sh[TGK_COLSUM_Y][W + 1];
    const int64_t c0 = (int64_t)blockIdx.x * W, col = c0 + threadIdx.x * V;
    const int64_t r0 = (int64_t)blockIdx.y * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < n ? r0 + rows_per_chunk : n;
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; j++) acc[j] = 0.0f;
    if (col < c) {
#pragma unroll 4
        for (int64_t r = r0 + threadIdx.y; r < r1; r += TGK_COLSUM_Y) {
            if (sizeof(T) == 2) {
                const uint4 q = *reinterpret_cast<const uint4 *>(a + r * ld + col);
                const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
                for (int j = 0; j < V / 2; j++) {
                    acc[2 * j] += tgk_bf16_to_f32((uint16_t)(w[j] & 0xffffu));
                    acc[2 * j + 1] += tgk_bf16_to_f32((uint16_t)(w[j] >> 16));
                }
            } else {
                const float4 q = *reinterpret_cast<const float4 *>(a + r * ld + col);
                acc[0] += q.x, acc[1] += q.y, acc[2] += q.z, acc[3] += q.w;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < V; j++) sh[threadIdx.y][threadIdx.x * V + j] = acc[j];
    __syncthreads();
    for (int i = threadIdx.y * TGK_COLSUM_X + threadIdx.x; i < W; i += TGK_COLSUM_X * TGK_COLSUM_Y) {
        if (c0 + i >= c) continue;
        float s = sh[0][i];
#pragma unroll
        for (int y = 1; y < TGK_COLSUM_Y; y++) s += sh[y][i];
        part[(int64_t)blockIdx.y * c + c0 + i] = s;
    }
}

/* out[col] = accumulate * out[col] + sum over rows of a[row * ld + col]: the
 * vector stage 1 when the rows allow 16-byte loads, else the generic one
 * (same bits either way). */
struct tgk_colsum_elem {
    const void *a;
    tg_dtype dt;
    int64_t ld;
    __device__ void operator()(int64_t r, int64_t col, float *acc) const { acc[0] += tgk_load(a, dt, r * ld + col); }
};

static cudaError_t tgk_colsum_rows(const void *a, tg_dtype dt, int64_t ld, int64_t n, int64_t c, void *out,
                                   tg_dtype dw_dt, float accumulate, float *scratch, size_t scratch_bytes,
                                   cudaStream_t st)
{
    const int v = dt == TG_BF16 ? 8 : 4;
    if (c <= 0 || n <= 0 || c % v != 0 || ld % v != 0 || ((uintptr_t)a & 15) != 0 || (dt != TG_BF16 && dt != TG_F32))
        return tgk_colsum<1>(tgk_colsum_elem{a, dt, ld}, n, c, out, NULL, dw_dt, accumulate, scratch, scratch_bytes, st);
    int64_t rows = 0, nchunks = tgk_colsum_chunks(n, c, 1, scratch_bytes, &rows);
    if (nchunks < 1) return cudaErrorInvalidValue;
    const dim3 block(TGK_COLSUM_X, TGK_COLSUM_Y);
    if (dt == TG_BF16)
        tgk_colsum_rows_partial<uint16_t, 8><<<dim3((unsigned)((c + 255) / 256), (unsigned)nchunks), block, 0, st>>>(
            (const uint16_t *)a, ld, n, c, rows, scratch);
    else
        tgk_colsum_rows_partial<float, 4><<<dim3((unsigned)((c + 127) / 128), (unsigned)nchunks), block, 0, st>>>(
            (const float *)a, ld, n, c, rows, scratch);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    return tgk_colsum_final_launch<1>(scratch, nchunks, c, out, NULL, dw_dt, accumulate, st);
}

/* Sum over a warp, in a fixed butterfly order (every lane gets the total). */
template <class T> static __device__ __forceinline__ T tgk_warp_sum(T v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#endif
