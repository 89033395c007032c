/* fill.cu — writes one bit pattern (2 or 4 bytes) into every element. */
#include "common.cuh"

template <typename T> static __global__ void fill_kernel(T *dst, T bits, int64_t n)
{
    TGK_GRID_STRIDE(i, n) dst[i] = bits;
}

extern "C" cudaError_t tg_cuda_fill(void *dst, size_t elem_size, uint32_t bits, int64_t n, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (elem_size == 4)
        fill_kernel<uint32_t><<<tgk_blocks(n), TGK_THREADS, 0, st>>>((uint32_t *)dst, bits, n);
    else if (elem_size == 2)
        fill_kernel<uint16_t><<<tgk_blocks(n), TGK_THREADS, 0, st>>>((uint16_t *)dst, (uint16_t)bits, n);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}
