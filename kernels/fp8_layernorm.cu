/* fp8_layernorm.cu — the LayerNorm forward written as FP8 (struct tg_layernorm_fp8_args): norm.cuh's forward
 * rows, each output rounded to the storage type as layernorm.cu stores it, then its code fp8(v * scale) with the
 * amax in the same pass; mean and rstd saved as there. */
#include "norm.cuh"

extern "C" cudaError_t tg_cuda_layernorm_forward_fp8(uint8_t *y8, tg_dtype y8_dt, float *mean, float *rstd,
                                                     const void *x, const void *gamma, const void *beta, tg_dtype dt,
                                                     int64_t n, int64_t c, float eps, const float *scale, float *amax,
                                                     float *scale_inv, int accumulate, cudaStream_t st)
{
    tgk_norm_f8 f8 = {y8, y8_dt, scale, amax, scale_inv};
    return tgk_norm_forward_launch_as<false, true>(NULL, mean, rstd, x, gamma, beta, dt, n, c, eps, f8, accumulate, st);
}
