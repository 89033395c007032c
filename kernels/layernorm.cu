/* layernorm.cu — LayerNorm forward, dgrad (+ residual gradient) and a deterministic two-stage dgamma/dbeta reduction. */
#include "norm.cuh"

extern "C" cudaError_t tg_cuda_layernorm_forward(void *y, float *mean, float *rstd, const void *x, const void *gamma,
                                                 const void *beta, tg_dtype dt, int64_t n, int64_t c, float eps,
                                                 cudaStream_t st)
{
    return tgk_norm_forward_launch<false>(y, mean, rstd, x, gamma, beta, dt, n, c, eps, st);
}

extern "C" cudaError_t tg_cuda_layernorm_backward(void *dx, const void *dy, const void *dres, const void *x,
                                                  const void *gamma, const float *mean, const float *rstd, tg_dtype dt,
                                                  int64_t n, int64_t c, cudaStream_t st)
{
    return tgk_norm_backward_launch<false>(dx, dy, dres, x, gamma, mean, rstd, dt, n, c, st);
}

extern "C" cudaError_t tg_cuda_layernorm_backward_dw(void *dgamma, void *dbeta, const void *dy, const void *x,
                                                     const float *mean, const float *rstd, tg_dtype dt, tg_dtype dw_dt,
                                                     int64_t n, int64_t c, float accumulate, float *scratch,
                                                     size_t scratch_bytes, cudaStream_t st)
{
    return tgk_norm_dw_launch<false>(dgamma, dbeta, dy, x, mean, rstd, dt, dw_dt, n, c, accumulate, scratch,
                                     scratch_bytes, st);
}
