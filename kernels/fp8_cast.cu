/* fp8_cast.cu — y = fp8(x * scale) and/or its transpose y_t, with amax = max|x| and scale_inv = 1 / scale in the
 * same pass (struct tg_fp8_cast_args). Groups of 8 consecutive elements move as 16-byte (bf16) or 2 x 16-byte (f32)
 * loads and 8-byte FP8 stores where the tensor's shape and pointers allow it; other groups go element by element
 * with the same arithmetic, so the codes and amax are the same bits either way. */
#include "fp8.cuh"

#include <stdint.h>

#define VEC TGK_VEC
#define TILE 64       /* cast_transpose: a 64 x 64 tile per block */
#define CT_THREADS 256 /* 8 groups per tile row x 32 rows per pass, 2 passes */

/* y only: a grid-stride loop over groups of 8 (vec: n % 8 == 0 and x, y aligned), else over elements. */
static __global__ void cast_kernel(const void *x, tg_dtype x_dt, uint8_t *y, tg_dtype y_dt, int64_t n, int vec,
                                   const float *scale, float *amax, float *scale_inv)
{
    const float s = scale ? *scale : 1.0f;
    unsigned m = 0;
    if (vec) {
        TGK_GRID_STRIDE(g, n / VEC)
        {
            float v[VEC];
            tgk_load8(x, x_dt, g * VEC, v);
            uint32_t lo = 0, hi = 0;
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                m = max(m, tgk_abs_bits(v[k]));
                const uint32_t q = tgk_to_fp8(v[k] * s, y_dt);
                if (k < 4)
                    lo |= q << (8 * k);
                else
                    hi |= q << (8 * (k - 4));
            }
            *(uint2 *)(y + g * VEC) = make_uint2(lo, hi);
        }
    } else {
        TGK_GRID_STRIDE(i, n)
        {
            const float v = tgk_load(x, x_dt, i);
            m = max(m, tgk_abs_bits(v));
            y[i] = tgk_to_fp8(v * s, y_dt);
        }
    }
    if (amax) tgk_amax_block(m, amax);
    if (scale_inv && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
}

/* y (may be NULL) and y_t through a shared 64 x 64 tile: reads and both writes coalesced. vec_in: cols % 8 == 0 and
 * x, y aligned (row groups go as vectors); vec_out: rows % 8 == 0 and yt aligned (transposed groups go as 8 bytes). */
static __global__ void __launch_bounds__(CT_THREADS)
    cast_transpose_kernel(const void *x, tg_dtype x_dt, uint8_t *y, uint8_t *yt, tg_dtype y_dt, int64_t rows,
                          int64_t cols, int vec_in, int vec_out, const float *scale, float *amax, float *scale_inv)
{
    __shared__ uint8_t tile[TILE][TILE + 4];
    const float s = scale ? *scale : 1.0f;
    unsigned m = 0;
    const int gi = threadIdx.x % (TILE / VEC) * VEC, ri = threadIdx.x / (TILE / VEC); /* group column, row */
    const int64_t tiles_r = (rows + TILE - 1) / TILE, c0 = (int64_t)blockIdx.x * TILE;
    for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        const int64_t r0 = tr * TILE;
#pragma unroll
        for (int p = 0; p < TILE; p += CT_THREADS / (TILE / VEC)) {
            const int j = ri + p;
            const int64_t r = r0 + j, c = c0 + gi;
            if (r >= rows || c >= cols) continue;
            if (vec_in && c + VEC <= cols) {
                float v[VEC];
                tgk_load8(x, x_dt, r * cols + c, v);
                uint32_t lo = 0, hi = 0;
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    m = max(m, tgk_abs_bits(v[k]));
                    const uint32_t q = tgk_to_fp8(v[k] * s, y_dt);
                    if (k < 4)
                        lo |= q << (8 * k);
                    else
                        hi |= q << (8 * (k - 4));
                }
                *(uint32_t *)&tile[j][gi] = lo; /* rows of TILE + 4 bytes: 4-byte aligned */
                *(uint32_t *)&tile[j][gi + 4] = hi;
                if (y) *(uint2 *)(y + r * cols + c) = make_uint2(lo, hi);
            } else {
                for (int k = 0; k < VEC && c + k < cols; k++) {
                    const float v = tgk_load(x, x_dt, r * cols + c + k);
                    m = max(m, tgk_abs_bits(v));
                    const uint8_t q = tgk_to_fp8(v * s, y_dt);
                    if (y) y[r * cols + c + k] = q;
                    tile[j][gi + k] = q;
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < TILE; p += CT_THREADS / (TILE / VEC)) {
            const int j = ri + p; /* column within the tile: row j of y_t's tile */
            const int64_t c = c0 + j, r = r0 + gi;
            if (c >= cols || r >= rows) continue;
            if (vec_out && r + VEC <= rows) {
                uint32_t lo = 0, hi = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    lo |= (uint32_t)tile[gi + k][j] << (8 * k);
                    hi |= (uint32_t)tile[gi + 4 + k][j] << (8 * k);
                }
                *(uint2 *)(yt + c * rows + r) = make_uint2(lo, hi);
            } else {
                for (int k = 0; k < VEC && r + k < rows; k++) yt[c * rows + r + k] = tile[gi + k][j];
            }
        }
        __syncthreads();
    }
    if (amax) tgk_amax_block(m, amax);
    if (scale_inv && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
}

static int aligned(const void *p, unsigned a) { return p == NULL || (uintptr_t)p % a == 0; }

extern "C" cudaError_t tg_cuda_fp8_cast(const void *x, tg_dtype x_dt, void *y, void *yt, tg_dtype y_dt, int64_t rows,
                                        int64_t cols, const float *scale, float *amax, float *scale_inv, int accumulate,
                                        cudaStream_t st)
{
    if (amax && !accumulate) {
        cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), st);
        if (e != cudaSuccess) return e;
    }
    const int x_ok = aligned(x, 16);
    if (!yt) {
        const int64_t n = rows * cols;
        const int vec = n % VEC == 0 && x_ok && aligned(y, 8);
        cast_kernel<<<tgk_blocks(vec ? n / VEC : n), TGK_THREADS, 0, st>>>(x, x_dt, (uint8_t *)y, y_dt, n, vec, scale,
                                                                           amax, scale_inv);
        return cudaGetLastError();
    }
    const int vec_in = cols % VEC == 0 && x_ok && aligned(y, 8), vec_out = rows % VEC == 0 && aligned(yt, 8);
    int64_t tc = (cols + TILE - 1) / TILE, tr = (rows + TILE - 1) / TILE;
    if (tc > 2147483647) return cudaErrorInvalidValue;
    dim3 grid((unsigned)(tc < 1 ? 1 : tc), (unsigned)(tr < 1 ? 1 : tr > 65535 ? 65535 : tr));
    cast_transpose_kernel<<<grid, CT_THREADS, 0, st>>>(x, x_dt, (uint8_t *)y, (uint8_t *)yt, y_dt, rows, cols, vec_in,
                                                       vec_out, scale, amax, scale_inv);
    return cudaGetLastError();
}
