/* bias.cu — bias add over rows (in place) and the bias wgrad as deterministic column sums. */
#include "colsum.cuh"

static __global__ void bias_add_kernel(void *y, const void *bias, tg_dtype dt, int64_t n, int64_t c)
{
    TGK_GRID_STRIDE(i, n * c)
    {
        const int64_t j = i % c;
        tgk_store(y, dt, i, tgk_load(y, dt, i) + tgk_load(bias, dt, j));
    }
}

struct bias_dw_term {
    const void *dy;
    tg_dtype dt;
    int64_t c;
    __device__ void operator()(int64_t r, int64_t col, float *acc) const { acc[0] += tgk_load(dy, dt, r * c + col); }
};

extern "C" cudaError_t tg_cuda_bias_add(void *y, const void *bias, tg_dtype dt, int64_t n, int64_t c, cudaStream_t st)
{
    if (n <= 0 || c <= 0) return cudaSuccess;
    bias_add_kernel<<<tgk_blocks(n * c), TGK_THREADS, 0, st>>>(y, bias, dt, n, c);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_bias_backward_dw(void *dbias, const void *dy, tg_dtype dt, tg_dtype dw_dt, int64_t n,
                                                int64_t c, float accumulate, float *scratch, size_t scratch_bytes,
                                                cudaStream_t st)
{
    bias_dw_term f = {dy, dt, c};
    return tgk_colsum<1>(f, n, c, dbias, NULL, dw_dt, accumulate, scratch, scratch_bytes, st);
}
