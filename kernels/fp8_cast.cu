/* fp8_cast.cu — y = fp8(x * scale) and/or its transpose y_t, with amax = max|x| and scale_inv = 1 / scale in the
 * same pass (struct tg_fp8_cast_args). */
#include "fp8.cuh"

#define TILE 32
#define ROWS_PER_PASS 8 /* block (32, 8): each thread converts 4 elements of a 32 x 32 tile */

static __device__ __forceinline__ float load_x(const void *x, tg_dtype dt, int64_t i) { return tgk_load(x, dt, i); }

/* y only: a grid-stride loop. */
static __global__ void cast_kernel(const void *x, tg_dtype x_dt, uint8_t *y, tg_dtype y_dt, int64_t n,
                                   const float *scale, float *amax, float *scale_inv)
{
    const float s = scale ? *scale : 1.0f;
    unsigned m = 0;
    TGK_GRID_STRIDE(i, n)
    {
        const float v = load_x(x, x_dt, i);
        m = max(m, tgk_abs_bits(v));
        y[i] = tgk_to_fp8(v * s, y_dt);
    }
    if (amax) tgk_amax_block(m, amax);
    if (scale_inv && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
}

/* y (may be NULL) and y_t through a shared tile: reads and both writes coalesced. */
static __global__ void cast_transpose_kernel(const void *x, tg_dtype x_dt, uint8_t *y, uint8_t *yt, tg_dtype y_dt,
                                             int64_t rows, int64_t cols, const float *scale, float *amax,
                                             float *scale_inv)
{
    __shared__ uint8_t tile[TILE][TILE + 4];
    const float s = scale ? *scale : 1.0f;
    unsigned m = 0;
    const int64_t tiles_r = (rows + TILE - 1) / TILE, c0 = (int64_t)blockIdx.x * TILE;
    for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        const int64_t r0 = tr * TILE;
        for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
            const int64_t r = r0 + j, c = c0 + threadIdx.x;
            if (r < rows && c < cols) {
                const float v = load_x(x, x_dt, r * cols + c);
                m = max(m, tgk_abs_bits(v));
                const uint8_t q = tgk_to_fp8(v * s, y_dt);
                if (y) y[r * cols + c] = q;
                tile[j][threadIdx.x] = q;
            }
        }
        __syncthreads();
        for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
            const int64_t c = c0 + j, r = r0 + threadIdx.x;
            if (c < cols && r < rows) yt[c * rows + r] = tile[threadIdx.x][j];
        }
        __syncthreads();
    }
    if (amax) {
        /* tgk_amax_block works on a 1-D thread index */
        __shared__ unsigned warp_max[TILE * ROWS_PER_PASS / 32];
        const unsigned t = threadIdx.y * TILE + threadIdx.x, lane = t % 32, warp = t / 32;
        m = __reduce_max_sync(0xffffffffu, m);
        if (lane == 0) warp_max[warp] = m;
        __syncthreads();
        if (t == 0) {
            for (unsigned w = 1; w < TILE * ROWS_PER_PASS / 32; w++) m = max(m, warp_max[w]);
            if (m) atomicMax((unsigned *)amax, m);
        }
    }
    if (scale_inv && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *scale_inv = 1.0f / s;
}

extern "C" cudaError_t tg_cuda_fp8_cast(const void *x, tg_dtype x_dt, void *y, void *yt, tg_dtype y_dt, int64_t rows,
                                        int64_t cols, const float *scale, float *amax, float *scale_inv, int accumulate,
                                        cudaStream_t st)
{
    if (amax && !accumulate) {
        cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), st);
        if (e != cudaSuccess) return e;
    }
    if (!yt) {
        cast_kernel<<<tgk_blocks(rows * cols), TGK_THREADS, 0, st>>>(x, x_dt, (uint8_t *)y, y_dt, rows * cols, scale,
                                                                     amax, scale_inv);
        return cudaGetLastError();
    }
    int64_t tc = (cols + TILE - 1) / TILE, tr = (rows + TILE - 1) / TILE;
    if (tc > 2147483647) return cudaErrorInvalidValue;
    dim3 grid((unsigned)(tc < 1 ? 1 : tc), (unsigned)(tr < 1 ? 1 : tr > 65535 ? 65535 : tr));
    cast_transpose_kernel<<<grid, dim3(TILE, ROWS_PER_PASS), 0, st>>>(x, x_dt, (uint8_t *)y, (uint8_t *)yt, y_dt, rows,
                                                                      cols, scale, amax, scale_inv);
    return cudaGetLastError();
}
