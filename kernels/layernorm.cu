/* layernorm.cu — LayerNorm forward, dgrad and a deterministic two-stage dgamma/dbeta reduction. */
#include "colsum.cuh"

/* One warp per row; statistics in double (as the CPU reference), lanes stride the columns. */
#define LN_ROWS_PER_BLOCK (TGK_THREADS / 32)

static __global__ void layernorm_forward_kernel(void *y, float *mean, float *rstd, const void *x, const void *gamma,
                                                const void *beta, tg_dtype dt, int64_t n, int64_t c, float eps)
{
    const int64_t r = (int64_t)blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= n) return;
    const int64_t o = r * c;
    double sum = 0.0;
    for (int64_t j = lane; j < c; j += 32) sum += tgk_load(x, dt, o + j);
    const double mu = tgk_warp_sum(sum) / (double)c;
    double var = 0.0;
    for (int64_t j = lane; j < c; j += 32) {
        double d = tgk_load(x, dt, o + j) - mu;
        var += d * d;
    }
    var = tgk_warp_sum(var);
    const float m = (float)mu, rs = (float)(1.0 / sqrt(var / (double)c + eps));
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
    /* y may alias x: each lane reads its elements before writing them */
    for (int64_t j = lane; j < c; j += 32) {
        float v = (tgk_load(x, dt, o + j) - m) * rs * tgk_load(gamma, dt, j);
        if (beta) v += tgk_load(beta, dt, j);
        tgk_store(y, dt, o + j, v);
    }
}

static __global__ void layernorm_backward_kernel(void *dx, const void *dy, const void *x, const void *gamma,
                                                 const float *mean, const float *rstd, tg_dtype dt, int64_t n, int64_t c)
{
    const int64_t r = (int64_t)blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= n) return;
    const int64_t o = r * c;
    const float m = mean[r], rs = rstd[r];
    double s1 = 0.0, s2 = 0.0; /* sum dxhat, sum dxhat * xhat */
    for (int64_t j = lane; j < c; j += 32) {
        float xhat = (tgk_load(x, dt, o + j) - m) * rs, dxhat = tgk_load(dy, dt, o + j) * tgk_load(gamma, dt, j);
        s1 += dxhat;
        s2 += (double)dxhat * xhat;
    }
    const float m1 = (float)(tgk_warp_sum(s1) / (double)c), m2 = (float)(tgk_warp_sum(s2) / (double)c);
    for (int64_t j = lane; j < c; j += 32) {
        float xhat = (tgk_load(x, dt, o + j) - m) * rs, dxhat = tgk_load(dy, dt, o + j) * tgk_load(gamma, dt, j);
        tgk_store(dx, dt, o + j, rs * (dxhat - m1 - xhat * m2));
    }
}

/* Terms of the column sums: dy * xhat (dgamma), dy (dbeta). */
struct ln_dw_term {
    const void *dy, *x;
    const float *mean, *rstd;
    tg_dtype dt;
    int64_t c;
    __device__ void operator()(int64_t r, int64_t col, float *acc) const
    {
        const int64_t i = r * c + col;
        float g = tgk_load(dy, dt, i), xhat = (tgk_load(x, dt, i) - mean[r]) * rstd[r];
        acc[0] += g * xhat;
        acc[1] += g;
    }
};

extern "C" cudaError_t tg_cuda_layernorm_forward(void *y, float *mean, float *rstd, const void *x, const void *gamma,
                                                 const void *beta, tg_dtype dt, int64_t n, int64_t c, float eps,
                                                 cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    unsigned g = (unsigned)((n + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_forward_kernel<<<g, TGK_THREADS, 0, st>>>(y, mean, rstd, x, gamma, beta, dt, n, c, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_layernorm_backward(void *dx, const void *dy, const void *x, const void *gamma,
                                                  const float *mean, const float *rstd, tg_dtype dt, int64_t n,
                                                  int64_t c, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    unsigned g = (unsigned)((n + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
    layernorm_backward_kernel<<<g, TGK_THREADS, 0, st>>>(dx, dy, x, gamma, mean, rstd, dt, n, c);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_layernorm_backward_dw(void *dgamma, void *dbeta, const void *dy, const void *x,
                                                     const float *mean, const float *rstd, tg_dtype dt, tg_dtype dw_dt,
                                                     int64_t n, int64_t c, float accumulate, float *scratch,
                                                     size_t scratch_bytes, cudaStream_t st)
{
    ln_dw_term f = {dy, x, mean, rstd, dt, c};
    return tgk_colsum<2>(f, n, c, dgamma, dbeta, dw_dt, accumulate, scratch, scratch_bytes, st);
}
