/* fp8_amax.cu — amax = max|x| (or max(amax, max|x|)) as f32 bits (struct tg_fp8_amax_args). */
#include "fp8.cuh"

static __global__ void amax_kernel(const void *x, tg_dtype dt, int64_t n, float *amax)
{
    unsigned m = 0;
    TGK_GRID_STRIDE(i, n) m = max(m, tgk_abs_bits(tgk_load(x, dt, i)));
    tgk_amax_block(m, amax);
}

extern "C" cudaError_t tg_cuda_fp8_amax(const void *x, tg_dtype dt, int64_t n, float *amax, int accumulate,
                                        cudaStream_t st)
{
    if (!accumulate) {
        cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), st);
        if (e != cudaSuccess) return e;
    }
    if (n <= 0) return cudaSuccess;
    amax_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(x, dt, n, amax);
    return cudaGetLastError();
}
