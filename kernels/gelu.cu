/* gelu.cu — GELU (tanh approximation) forward and backward, elementwise, the CPU reference's float formulas. */
#include "common.cuh"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

static __global__ void gelu_forward_kernel(void *y, const void *x, tg_dtype dt, int64_t n)
{
    TGK_GRID_STRIDE(i, n)
    {
        float v = tgk_load(x, dt, i);
        tgk_store(y, dt, i, 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_A * v * v * v))));
    }
}

static __global__ void gelu_backward_kernel(void *dx, const void *dy, const void *x, tg_dtype dt, int64_t n)
{
    TGK_GRID_STRIDE(i, n)
    {
        float v = tgk_load(x, dt, i), th = tanhf(GELU_K * (v + GELU_A * v * v * v));
        float d = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
        tgk_store(dx, dt, i, tgk_load(dy, dt, i) * d);
    }
}

extern "C" cudaError_t tg_cuda_gelu_forward(void *y, const void *x, tg_dtype dt, int64_t n, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    gelu_forward_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(y, x, dt, n);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_gelu_backward(void *dx, const void *dy, const void *x, tg_dtype dt, int64_t n,
                                             cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    gelu_backward_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(dx, dy, x, dt, n);
    return cudaGetLastError();
}
