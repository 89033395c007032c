/* fp8_transpose.cu — y_t = x^T of FP8 codes (struct tg_fp8_transpose_args), through a shared 64 x 64 tile: a
 * thread reads 8 consecutive codes of a row and writes 8 consecutive codes of a y_t row (8-byte accesses where
 * rows and cols are multiples of 8 and both pointers 8-byte aligned, byte by byte otherwise). */
#include "common.cuh"

#define TILE 64
#define THREADS 256
#define CPR (TILE / 8)        /* threads across a tile row, 8 codes each */
#define RPP (THREADS / CPR)   /* tile rows per pass */

template <bool VEC>
static __global__ void __launch_bounds__(THREADS)
    transpose_kernel(const uint8_t *__restrict__ x, uint8_t *__restrict__ yt, int64_t rows, int64_t cols)
{
    __shared__ uint8_t tile[TILE][TILE + 4]; /* rows of 68 bytes: 4-byte aligned, few bank conflicts down a column */
    const int gi = threadIdx.x % CPR * 8, ri = threadIdx.x / CPR;
    const int64_t tiles_r = (rows + TILE - 1) / TILE, c0 = (int64_t)blockIdx.x * TILE;
    for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        const int64_t r0 = tr * TILE;
#pragma unroll
        for (int p = 0; p < TILE; p += RPP) {
            const int j = ri + p;
            const int64_t r = r0 + j, c = c0 + gi;
            if (r >= rows || c >= cols) continue;
            if (VEC) { /* cols % 8 == 0: the 8 codes are inside the row */
                const uint2 w = *(const uint2 *)(x + r * cols + c);
                *(uint32_t *)&tile[j][gi] = w.x;
                *(uint32_t *)&tile[j][gi + 4] = w.y;
            } else {
                for (int k = 0; k < 8 && c + k < cols; k++) tile[j][gi + k] = x[r * cols + c + k];
            }
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < TILE; p += RPP) {
            const int j = ri + p; /* column j of the tile: row c0 + j of y_t */
            const int64_t c = c0 + j, r = r0 + gi;
            if (c >= cols || r >= rows) continue;
            if (VEC) { /* rows % 8 == 0 */
                uint32_t lo = 0, hi = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    lo |= (uint32_t)tile[gi + k][j] << (8 * k);
                    hi |= (uint32_t)tile[gi + 4 + k][j] << (8 * k);
                }
                *(uint2 *)(yt + c * rows + r) = make_uint2(lo, hi);
            } else {
                for (int k = 0; k < 8 && r + k < rows; k++) yt[c * rows + r + k] = tile[gi + k][j];
            }
        }
        __syncthreads();
    }
}

extern "C" cudaError_t tg_cuda_fp8_transpose(const uint8_t *x, uint8_t *yt, int64_t rows, int64_t cols, cudaStream_t st)
{
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int64_t tc = (cols + TILE - 1) / TILE, tr = (rows + TILE - 1) / TILE;
    if (tc > 2147483647) return cudaErrorInvalidValue;
    dim3 grid((unsigned)tc, (unsigned)(tr > 65535 ? 65535 : tr));
    const bool vec = rows % 8 == 0 && cols % 8 == 0 && (uintptr_t)x % 8 == 0 && (uintptr_t)yt % 8 == 0;
    if (vec) transpose_kernel<true><<<grid, THREADS, 0, st>>>(x, yt, rows, cols);
    else transpose_kernel<false><<<grid, THREADS, 0, st>>>(x, yt, rows, cols);
    return cudaGetLastError();
}
