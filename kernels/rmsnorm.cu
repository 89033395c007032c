/* rmsnorm.cu — RMSNorm forward, dgrad (+ residual gradient) and a deterministic two-stage dgamma reduction. */
#include "norm.cuh"

extern "C" cudaError_t tg_cuda_rmsnorm_forward(void *y, float *rstd, const void *x, const void *gamma, tg_dtype dt,
                                               int64_t n, int64_t c, float eps, cudaStream_t st)
{
    return tgk_norm_forward_launch<true>(y, NULL, rstd, x, gamma, NULL, dt, n, c, eps, st);
}

extern "C" cudaError_t tg_cuda_rmsnorm_backward(void *dx, const void *dy, const void *dres, const void *x,
                                                const void *gamma, const float *rstd, tg_dtype dt, int64_t n, int64_t c,
                                                cudaStream_t st)
{
    return tgk_norm_backward_launch<true>(dx, dy, dres, x, gamma, NULL, rstd, dt, n, c, st);
}

extern "C" cudaError_t tg_cuda_rmsnorm_backward_dw(void *dgamma, const void *dy, const void *x, const float *rstd,
                                                   tg_dtype dt, tg_dtype dw_dt, int64_t n, int64_t c, float accumulate,
                                                   float *scratch, size_t scratch_bytes, cudaStream_t st)
{
    return tgk_norm_dw_launch<true>(dgamma, NULL, dy, x, NULL, rstd, dt, dw_dt, n, c, accumulate, scratch,
                                    scratch_bytes, st);
}
