/* fp8_cast_gelu.cu — the FP8 cast of a GELU output from its pre-activation (struct tg_fp8_cast_args, x = h):
 * g = x_dt(gelu(h)) (gelu.cu's float formula, rounded as it stores), y = fp8(g * scale) and/or its transpose y_t,
 * amax = max|g| and scale_inv = 1 / scale, in one pass through a shared 64 x 64 tile (reads and both writes
 * coalesced); g is never stored. A thread moves 4 consecutive elements: one 8- or 16-byte load and 4-byte code
 * stores where the shape and pointers allow it, element by element otherwise (the same codes either way). */
#include "fp8.cuh"

#include <stdint.h>

#define TILE 64
#define THREADS 256
#define COL_T 16                 /* threads across a tile row: 4 elements each */
#define ROW_T (THREADS / COL_T) /* tile rows per pass */

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

static __device__ __forceinline__ float gelu_g(float h, tg_dtype dt)
{
    const float g = 0.5f * h * (1.0f + tanhf(GELU_K * (h + GELU_A * h * h * h)));
    return dt == TG_BF16 ? tgk_bf16_to_f32(tgk_f32_to_bf16(g)) : g;
}

/* v = h[i .. i + 4) as f32; h + i aligned to 4 elements. */
static __device__ __forceinline__ void load4(const void *h, tg_dtype dt, int64_t i, float v[4])
{
    if (dt == TG_BF16) {
        const uint2 u = *(const uint2 *)((const uint16_t *)h + i);
        v[0] = __uint_as_float(u.x << 16), v[1] = __uint_as_float(u.x & 0xffff0000u);
        v[2] = __uint_as_float(u.y << 16), v[3] = __uint_as_float(u.y & 0xffff0000u);
    } else {
        const float4 a = *(const float4 *)((const float *)h + i);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    }
}

/* vec_in: cols % 4 == 0, h and y aligned (4 elements, 4 bytes); vec_out: rows % 4 == 0, yt 4-byte aligned. */
static __global__ void __launch_bounds__(THREADS)
    cast_gelu_kernel(const void *__restrict__ h, tg_dtype h_dt, uint8_t *__restrict__ y, uint8_t *__restrict__ yt,
                     tg_dtype y_dt, int64_t rows, int64_t cols, int vec_in, int vec_out, const float *scale, float *amax,
                     float *scale_inv)
{
    __shared__ uint8_t tile[TILE][TILE + 4];
    const float s = scale ? *scale : 1.0f;
    unsigned m = 0;
    const int tc = threadIdx.x % COL_T * 4, tr = threadIdx.x / COL_T;
    const int64_t tiles_r = (rows + TILE - 1) / TILE, c0 = (int64_t)blockIdx.x * TILE;
    for (int64_t b = blockIdx.y; b < tiles_r; b += gridDim.y) {
        const int64_t r0 = b * TILE;
#pragma unroll
        for (int p = 0; p < TILE; p += ROW_T) { /* unrolled: the passes' loads can be in flight together */
            const int j = tr + p;
            const int64_t r = r0 + j, c = c0 + tc;
            if (r >= rows || c >= cols) continue;
            const int n = cols - c < 4 ? (int)(cols - c) : 4;
            float v[4];
            if (vec_in && n == 4) {
                load4(h, h_dt, r * cols + c, v);
            } else {
#pragma unroll
                for (int k = 0; k < 4; k++) v[k] = k < n ? tgk_load(h, h_dt, r * cols + c + k) : 0.0f;
            }
            uint32_t w = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float g = gelu_g(v[k], h_dt);
                if (k < n) m = max(m, tgk_abs_bits(g));
                w |= (uint32_t)tgk_to_fp8(g * s, y_dt) << (8 * k);
            }
            *(uint32_t *)&tile[j][tc] = w; /* rows of TILE + 4 bytes: 4-byte aligned */
            if (y && vec_in && n == 4) *(uint32_t *)(y + r * cols + c) = w;
            else if (y)
                for (int k = 0; k < n; k++) y[r * cols + c + k] = (uint8_t)(w >> (8 * k));
        }
        __syncthreads();
        if (yt) {
            /* row j of y_t's tile is column c0 + j: 4 consecutive rows of x per thread */
#pragma unroll
            for (int p = 0; p < TILE; p += ROW_T) {
                const int j = tr + p;
                const int64_t c = c0 + j, r = r0 + tc;
                if (c >= cols || r >= rows) continue;
                const int n = rows - r < 4 ? (int)(rows - r) : 4;
                uint32_t w = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) w |= (uint32_t)tile[tc + k][j] << (8 * k);
                if (vec_out && n == 4) *(uint32_t *)(yt + c * rows + r) = w;
                else
                    for (int k = 0; k < n; k++) yt[c * rows + r + k] = (uint8_t)(w >> (8 * k));
            }
        }
        __syncthreads();
    }
    if (amax) tgk_amax_block(m, amax);
    if (scale_inv && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
}

extern "C" cudaError_t tg_cuda_fp8_cast_gelu(const void *h, tg_dtype h_dt, void *y, void *yt, tg_dtype y_dt,
                                             int64_t rows, int64_t cols, const float *scale, float *amax,
                                             float *scale_inv, int accumulate, cudaStream_t st)
{
    if (amax && !accumulate) {
        cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), st);
        if (e != cudaSuccess) return e;
    }
    const int64_t tc = (cols + TILE - 1) / TILE, tr = (rows + TILE - 1) / TILE;
    if (tc > 2147483647) return cudaErrorInvalidValue;
    /* an empty h still gets its scale_inv (one block, no tiles) */
    dim3 grid((unsigned)(tc < 1 ? 1 : tc), (unsigned)(tr < 1 ? 1 : tr > 65535 ? 65535 : tr));
    const int vec_in = cols % 4 == 0 && (uintptr_t)h % (h_dt == TG_BF16 ? 8 : 16) == 0 && (uintptr_t)y % 4 == 0;
    const int vec_out = rows % 4 == 0 && (uintptr_t)yt % 4 == 0;
    cast_gelu_kernel<<<grid, THREADS, 0, st>>>(h, h_dt, (uint8_t *)y, (uint8_t *)yt, y_dt, rows, cols, vec_in, vec_out,
                                               scale, amax, scale_inv);
    return cudaGetLastError();
}
