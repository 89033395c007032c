/* fp8_cast.cu — y = fp8(g * scale) and/or its transpose y_t, with amax = max|g| and scale_inv = 1 / scale in the
 * same pass (struct tg_fp8_cast_args); g = x, or for a gradient through GELU g = x_dt(x * gelu'(gelu_x)); the
 * gradient form also writes the column sums of g per chunk of 64-row tiles (the bias gradient's first stage).
 * Elements move in groups of 8 consecutive ones: 16-byte (bf16) or 2 x 16-byte (f32) loads and 8-byte FP8 stores
 * where the tensor's shape and pointers allow it, element by element otherwise, with the same arithmetic, so the
 * codes, amax and sums are the same bits either way. */
#include "fp8.cuh"

#include <stdint.h>

#define VEC TGK_VEC
#define TILE 64        /* cast_transpose: a 64 x 64 tile per block (the rows of tg_fp8_dbias_chunks' tiles) */
#define CT_THREADS 256 /* 8 groups per tile row x 32 rows per pass, 2 passes */
#define CT_ROWS (CT_THREADS / (TILE / VEC))

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/* gelu'(h), gelu.cu's (and the CPU's) float formula. */
static __device__ __forceinline__ float gelu_df(float h)
{
    const float th = tanhf(GELU_K * (h + GELU_A * h * h * h));
    return 0.5f * (1.0f + th) + 0.5f * h * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * h * h);
}

/* v[0 .. n) = the n (<= 8) elements of x from i as f32 (one vector load when vec and n == 8), the rest 0. */
static __device__ __forceinline__ void load_group(const void *x, tg_dtype dt, int64_t i, int n, int vec, float v[VEC])
{
    if (vec && n == VEC) {
        tgk_load8(x, dt, i, v);
        return;
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) v[k] = k < n ? tgk_load(x, dt, i + k) : 0.0f;
}

/* The group's g (through gelu' when GELU, rounded to dt as gelu_backward stores it), its amax folded into m,
 * its codes packed into lo (elements 0..3) and hi (4..7). */
template <bool GELU>
static __device__ __forceinline__ void quantize_group(const void *x, const void *gelu_x, tg_dtype x_dt, int64_t i,
                                                      int n, int vec, float s, tg_dtype y_dt, float v[VEC],
                                                      unsigned &m, uint32_t &lo, uint32_t &hi)
{
    load_group(x, x_dt, i, n, vec, v);
    if (GELU) {
        float h[VEC];
        load_group(gelu_x, x_dt, i, n, vec, h);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const float g = v[k] * gelu_df(h[k]);
            v[k] = x_dt == TG_BF16 ? tgk_bf16_to_f32(tgk_f32_to_bf16(g)) : g;
        }
    }
    lo = 0, hi = 0;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        if (k < n) m = max(m, tgk_abs_bits(v[k]));
        const uint32_t q = tgk_to_fp8(v[k] * s, y_dt);
        if (k < 4)
            lo |= q << (8 * k);
        else
            hi |= q << (8 * (k - 4));
    }
}

/* The n (<= 8) codes of (lo, hi) to y + i: one 8-byte store when vec and n == 8. */
static __device__ __forceinline__ void store_group(uint8_t *y, int64_t i, int n, int vec, uint32_t lo, uint32_t hi)
{
    if (vec && n == VEC) {
        *(uint2 *)(y + i) = make_uint2(lo, hi);
        return;
    }
    for (int k = 0; k < n; k++) y[i + k] = (uint8_t)((k < 4 ? lo >> (8 * k) : hi >> (8 * (k - 4))) & 0xffu);
}

/* y only: a grid-stride loop over groups of 8 (vec: n % 8 == 0 and x, y aligned). */
static __global__ void cast_kernel(const void *x, tg_dtype x_dt, uint8_t *y, tg_dtype y_dt, int64_t n, int vec,
                                   const float *scale, float *amax, float *scale_inv)
{
    const float s = scale ? *scale : 1.0f;
    unsigned m = 0;
    TGK_GRID_STRIDE(g, (n + VEC - 1) / VEC)
    {
        const int64_t i = g * VEC;
        const int cnt = n - i < VEC ? (int)(n - i) : VEC;
        float v[VEC];
        uint32_t lo, hi;
        quantize_group<false>(x, NULL, x_dt, i, cnt, vec, s, y_dt, v, m, lo, hi);
        store_group(y, i, cnt, vec, lo, hi);
    }
    if (amax) tgk_amax_block(m, amax);
    if (scale_inv && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
}

/* y and y_t (either may be NULL) through a shared 64 x 64 tile: reads and both writes coalesced. vec_in: cols % 8
 * == 0 and x, gelu_x, y aligned (row groups go as vectors); vec_out: rows % 8 == 0 and yt aligned (transposed groups
 * go as 8 bytes). Block y visits the row tiles blockIdx.y, + gridDim.y, ...; with DBIAS, gridDim.y is the number of
 * chunks and part[blockIdx.y][col] gets the block's column sums (each thread's rows in tile order, then the
 * threads of a column in order). */
template <bool GELU, bool DBIAS>
static __global__ void __launch_bounds__(CT_THREADS)
    cast_transpose_kernel(const void *x, const void *gelu_x, tg_dtype x_dt, uint8_t *y, uint8_t *yt, tg_dtype y_dt,
                          int64_t rows, int64_t cols, int vec_in, int vec_out, const float *scale, float *amax,
                          float *scale_inv, float *part)
{
    __shared__ uint8_t tile[TILE][TILE + 4];
    __shared__ float colsum[DBIAS ? CT_ROWS : 1][DBIAS ? TILE + 1 : 1];
    const float s = scale ? *scale : 1.0f;
    unsigned m = 0;
    float acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
    const int gi = threadIdx.x % (TILE / VEC) * VEC, ri = threadIdx.x / (TILE / VEC); /* group column, row */
    const int64_t tiles_r = (rows + TILE - 1) / TILE, c0 = (int64_t)blockIdx.x * TILE;
    for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        const int64_t r0 = tr * TILE;
#pragma unroll
        for (int p = 0; p < TILE; p += CT_ROWS) {
            const int j = ri + p;
            const int64_t r = r0 + j, c = c0 + gi;
            if (r >= rows || c >= cols) continue;
            const int cnt = cols - c < VEC ? (int)(cols - c) : VEC;
            float v[VEC];
            uint32_t lo, hi;
            quantize_group<GELU>(x, gelu_x, x_dt, r * cols + c, cnt, vec_in, s, y_dt, v, m, lo, hi);
            if (DBIAS) {
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] += v[k]; /* 0 past the last column */
            }
            *(uint32_t *)&tile[j][gi] = lo; /* rows of TILE + 4 bytes: 4-byte aligned */
            *(uint32_t *)&tile[j][gi + 4] = hi;
            if (y) store_group(y, r * cols + c, cnt, vec_in, lo, hi);
        }
        __syncthreads();
        if (yt) {
#pragma unroll
            for (int p = 0; p < TILE; p += CT_ROWS) {
                const int j = ri + p; /* column within the tile: row j of y_t's tile */
                const int64_t c = c0 + j, r = r0 + gi;
                if (c >= cols || r >= rows) continue;
                const int cnt = rows - r < VEC ? (int)(rows - r) : VEC;
                uint32_t lo = 0, hi = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    lo |= (uint32_t)tile[gi + k][j] << (8 * k);
                    hi |= (uint32_t)tile[gi + 4 + k][j] << (8 * k);
                }
                store_group(yt, c * rows + r, cnt, vec_out, lo, hi);
            }
        }
        __syncthreads();
    }
    if (DBIAS) {
#pragma unroll
        for (int k = 0; k < VEC; k++) colsum[ri][gi + k] = acc[k];
        __syncthreads();
        if (threadIdx.x < TILE && c0 + threadIdx.x < cols) {
            float sum = colsum[0][threadIdx.x];
            for (int q = 1; q < CT_ROWS; q++) sum += colsum[q][threadIdx.x];
            part[(int64_t)blockIdx.y * cols + c0 + threadIdx.x] = sum;
        }
    }
    if (amax) tgk_amax_block(m, amax);
    if (scale_inv && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
}

static int aligned(const void *p, unsigned a) { return p == NULL || (uintptr_t)p % a == 0; }

extern "C" cudaError_t tg_cuda_fp8_cast(const void *x, tg_dtype x_dt, const void *gelu_x, void *y, void *yt,
                                        tg_dtype y_dt, int64_t rows, int64_t cols, const float *scale, float *amax,
                                        float *scale_inv, int accumulate, float *dbias_part, int64_t dbias_chunks,
                                        cudaStream_t st)
{
    if (amax && !accumulate) {
        cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), st);
        if (e != cudaSuccess) return e;
    }
    const int x_ok = aligned(x, 16) && aligned(gelu_x, 16);
    if (!yt && !gelu_x && !dbias_part) {
        const int64_t n = rows * cols;
        const int vec = n % VEC == 0 && x_ok && aligned(y, 8);
        cast_kernel<<<tgk_blocks((n + VEC - 1) / VEC), TGK_THREADS, 0, st>>>(x, x_dt, (uint8_t *)y, y_dt, n, vec, scale,
                                                                             amax, scale_inv);
        return cudaGetLastError();
    }
    const int vec_in = cols % VEC == 0 && x_ok && aligned(y, 8), vec_out = rows % VEC == 0 && aligned(yt, 8);
    int64_t tc = (cols + TILE - 1) / TILE, tr = (rows + TILE - 1) / TILE;
    if (tc > 2147483647) return cudaErrorInvalidValue;
    if (dbias_part && (dbias_chunks < 1 || dbias_chunks > 65535)) return cudaErrorInvalidValue;
    dim3 grid((unsigned)(tc < 1 ? 1 : tc),
              (unsigned)(dbias_part ? dbias_chunks : tr < 1 ? 1 : tr > 65535 ? 65535 : tr));
    uint8_t *y8 = (uint8_t *)y, *yt8 = (uint8_t *)yt;
#define CT_LAUNCH(G, D)                                                                                \
    cast_transpose_kernel<G, D><<<grid, CT_THREADS, 0, st>>>(x, gelu_x, x_dt, y8, yt8, y_dt, rows, cols, vec_in, \
                                                             vec_out, scale, amax, scale_inv, dbias_part)
    if (gelu_x && dbias_part) CT_LAUNCH(true, true);
    else if (gelu_x) CT_LAUNCH(true, false);
    else if (dbias_part) CT_LAUNCH(false, true);
    else CT_LAUNCH(false, false);
#undef CT_LAUNCH
    return cudaGetLastError();
}
