/* fp8_amax.cu — amax = max|x| (or max(amax, max|x|)) as f32 bits (struct tg_fp8_amax_args); groups of 8 elements
 * as vector loads when n % 8 == 0 and x is 16-byte aligned. */
#include "fp8.cuh"

#include <stdint.h>

static __global__ void amax_kernel(const void *x, tg_dtype dt, int64_t n, int vec, float *amax)
{
    unsigned m = 0;
    if (vec) {
        TGK_GRID_STRIDE(g, n / TGK_VEC)
        {
            float v[TGK_VEC];
            tgk_load8(x, dt, g * TGK_VEC, v);
#pragma unroll
            for (int k = 0; k < TGK_VEC; k++) m = max(m, tgk_abs_bits(v[k]));
        }
    } else {
        TGK_GRID_STRIDE(i, n) m = max(m, tgk_abs_bits(tgk_load(x, dt, i)));
    }
    tgk_amax_block(m, amax);
}

extern "C" cudaError_t tg_cuda_fp8_amax(const void *x, tg_dtype dt, int64_t n, float *amax, int accumulate,
                                        cudaStream_t st)
{
    cudaError_t e = tgk_amax_reset(amax, accumulate, st);
    if (e != cudaSuccess) return e;
    if (n <= 0) return cudaSuccess;
    const int vec = n % TGK_VEC == 0 && (uintptr_t)x % 16 == 0;
    amax_kernel<<<tgk_blocks(vec ? n / TGK_VEC : n), TGK_THREADS, 0, st>>>(x, dt, n, vec, amax);
    return cudaGetLastError();
}
