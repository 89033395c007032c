/* rmsnorm.cu — RMSNorm forward, dgrad and a deterministic two-stage dgamma reduction. */
#include "colsum.cuh"

#define RMS_ROWS_PER_BLOCK (TGK_THREADS / 32)

/* One warp per row; the sum of squares in double, as the CPU reference. */
static __global__ void rmsnorm_forward_kernel(void *y, float *rstd, const void *x, const void *gamma, tg_dtype dt,
                                              int64_t n, int64_t c, float eps)
{
    const int64_t r = (int64_t)blockIdx.x * RMS_ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= n) return;
    const int64_t o = r * c;
    double ss = 0.0;
    for (int64_t j = lane; j < c; j += 32) {
        double v = tgk_load(x, dt, o + j);
        ss += v * v;
    }
    const float rs = (float)(1.0 / sqrt(tgk_warp_sum(ss) / (double)c + eps));
    if (lane == 0) rstd[r] = rs;
    for (int64_t j = lane; j < c; j += 32) tgk_store(y, dt, o + j, tgk_load(x, dt, o + j) * rs * tgk_load(gamma, dt, j));
}

static __global__ void rmsnorm_backward_kernel(void *dx, const void *dy, const void *x, const void *gamma,
                                               const float *rstd, tg_dtype dt, int64_t n, int64_t c)
{
    const int64_t r = (int64_t)blockIdx.x * RMS_ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= n) return;
    const int64_t o = r * c;
    const float rs = rstd[r];
    double s2 = 0.0; /* sum dxhat * xhat */
    for (int64_t j = lane; j < c; j += 32)
        s2 += (double)(tgk_load(dy, dt, o + j) * tgk_load(gamma, dt, j)) * (tgk_load(x, dt, o + j) * rs);
    const float m2 = (float)(tgk_warp_sum(s2) / (double)c);
    for (int64_t j = lane; j < c; j += 32) {
        float xhat = tgk_load(x, dt, o + j) * rs, dxhat = tgk_load(dy, dt, o + j) * tgk_load(gamma, dt, j);
        tgk_store(dx, dt, o + j, rs * (dxhat - xhat * m2));
    }
}

struct rms_dw_term {
    const void *dy, *x;
    const float *rstd;
    tg_dtype dt;
    int64_t c;
    __device__ void operator()(int64_t r, int64_t col, float *acc) const
    {
        const int64_t i = r * c + col;
        acc[0] += tgk_load(dy, dt, i) * (tgk_load(x, dt, i) * rstd[r]);
    }
};

extern "C" cudaError_t tg_cuda_rmsnorm_forward(void *y, float *rstd, const void *x, const void *gamma, tg_dtype dt,
                                               int64_t n, int64_t c, float eps, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    unsigned g = (unsigned)((n + RMS_ROWS_PER_BLOCK - 1) / RMS_ROWS_PER_BLOCK);
    rmsnorm_forward_kernel<<<g, TGK_THREADS, 0, st>>>(y, rstd, x, gamma, dt, n, c, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_rmsnorm_backward(void *dx, const void *dy, const void *x, const void *gamma,
                                                const float *rstd, tg_dtype dt, int64_t n, int64_t c, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    unsigned g = (unsigned)((n + RMS_ROWS_PER_BLOCK - 1) / RMS_ROWS_PER_BLOCK);
    rmsnorm_backward_kernel<<<g, TGK_THREADS, 0, st>>>(dx, dy, x, gamma, rstd, dt, n, c);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_rmsnorm_backward_dw(void *dgamma, const void *dy, const void *x, const float *rstd,
                                                   tg_dtype dt, tg_dtype dw_dt, int64_t n, int64_t c, float accumulate,
                                                   float *scratch, size_t scratch_bytes, cudaStream_t st)
{
    rms_dw_term f = {dy, x, rstd, dt, c};
    return tgk_colsum<1>(f, n, c, dgamma, NULL, dw_dt, accumulate, scratch, scratch_bytes, st);
}
