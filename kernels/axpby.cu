/* axpby.cu — y = alpha * x + beta * y, and the strided C *= beta of a k == 0 GEMM. */
#include "common.cuh"

/* Unfused multiply-adds (_rn) so the result matches the CPU backend bit for
 * bit. beta == 0 never reads y: NaN garbage in an output buffer must not leak. */
static __global__ void axpby_kernel(const void *x, void *y, tg_dtype dt, int64_t n, float alpha, float beta)
{
    TGK_GRID_STRIDE(i, n)
    {
        float v = __fmul_rn(alpha, tgk_load(x, dt, i));
        if (beta != 0.0f) v = __fadd_rn(v, __fmul_rn(beta, tgk_load(y, dt, i)));
        tgk_store(y, dt, i, v);
    }
}

extern "C" cudaError_t tg_cuda_axpby(const void *x, void *y, tg_dtype dt, int64_t n, float alpha, float beta,
                                     cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (dt != TG_F32 && dt != TG_BF16) return cudaErrorInvalidValue;
    axpby_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(x, y, dt, n, alpha, beta);
    return cudaGetLastError();
}

static __global__ void scale_strided_kernel(void *c, tg_dtype dt, int64_t batch, int64_t rows, int64_t cols,
                                            int64_t ld, int64_t stride, float beta)
{
    int64_t total = batch * rows * cols;
    TGK_GRID_STRIDE(i, total)
    {
        int64_t j = i % cols, r = (i / cols) % rows, b = i / (cols * rows);
        int64_t at = b * stride + r * ld + j;
        tgk_store(c, dt, at, beta == 0.0f ? 0.0f : __fmul_rn(beta, tgk_load(c, dt, at)));
    }
}

extern "C" cudaError_t tg_cuda_scale_strided(void *c, tg_dtype dt, int64_t batch, int64_t rows, int64_t cols,
                                             int64_t ld, int64_t stride, float beta, cudaStream_t st)
{
    int64_t total = batch * rows * cols;
    if (total <= 0) return cudaSuccess;
    if (dt != TG_F32 && dt != TG_BF16) return cudaErrorInvalidValue;
    scale_strided_kernel<<<tgk_blocks(total), TGK_THREADS, 0, st>>>(c, dt, batch, rows, cols, ld, stride, beta);
    return cudaGetLastError();
}
