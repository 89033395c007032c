/* fp8_cast_gelu.cu — the FP8 cast of a GELU output from its pre-activation (struct tg_fp8_cast_args, x = h):
 * g = x_dt(gelu(h)) (gelu.cuh's formula, rounded as gelu.cu stores it), y = fp8(g * scale) and/or its transpose y_t,
 * amax = max|g| and scale_inv = 1 / scale, in one pass of fp8_cast.cuh's cast-transpose kernel; g is never stored. */
#include "fp8_cast.cuh"

extern "C" cudaError_t tg_cuda_fp8_cast_gelu(const void *h, tg_dtype h_dt, void *y, void *yt, tg_dtype y_dt,
                                             int64_t rows, int64_t cols, const float *scale, float *amax,
                                             float *scale_inv, int accumulate, cudaStream_t st)
{
    return tgk_cast_transpose_launch<TGK_CT_GELU>(h, NULL, h_dt, y, yt, y_dt, rows, cols, scale, amax, scale_inv,
                                                  accumulate, NULL, 0, st);
}
