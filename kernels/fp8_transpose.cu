/* fp8_transpose.cu — y_t = x^T of FP8 codes (struct tg_fp8_transpose_args), through a shared tile. */
#include "common.cuh"

#define TILE 32
#define ROWS_PER_PASS 8

static __global__ void transpose_kernel(const uint8_t *x, uint8_t *yt, int64_t rows, int64_t cols)
{
    __shared__ uint8_t tile[TILE][TILE + 4];
    const int64_t tiles_r = (rows + TILE - 1) / TILE, c0 = (int64_t)blockIdx.x * TILE;
    for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        const int64_t r0 = tr * TILE;
        for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
            const int64_t r = r0 + j, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[j][threadIdx.x] = x[r * cols + c];
        }
        __syncthreads();
        for (int j = threadIdx.y; j < TILE; j += ROWS_PER_PASS) {
            const int64_t c = c0 + j, r = r0 + threadIdx.x;
            if (c < cols && r < rows) yt[c * rows + r] = tile[threadIdx.x][j];
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
    transpose_kernel<<<grid, dim3(TILE, ROWS_PER_PASS), 0, st>>>(x, yt, rows, cols);
    return cudaGetLastError();
}
