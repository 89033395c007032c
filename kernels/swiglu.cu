/* swiglu.cu — SwiGLU forward and backward: row [a | b] (2h) -> silu(a) * b (h). */
#include "common.cuh"

static __global__ void swiglu_forward_kernel(void *y, const void *x, tg_dtype dt, int64_t n, int64_t h)
{
    TGK_GRID_STRIDE(i, n * h)
    {
        const int64_t r = i / h, j = i - r * h;
        float u = tgk_load(x, dt, r * 2 * h + j), g = tgk_load(x, dt, r * 2 * h + h + j);
        tgk_store(y, dt, i, u / (1.0f + expf(-u)) * g);
    }
}

static __global__ void swiglu_backward_kernel(void *dx, const void *dy, const void *x, tg_dtype dt, int64_t n,
                                              int64_t h)
{
    TGK_GRID_STRIDE(i, n * h)
    {
        const int64_t r = i / h, j = i - r * h, iu = r * 2 * h + j, ig = iu + h;
        float u = tgk_load(x, dt, iu), g = tgk_load(x, dt, ig), d = tgk_load(dy, dt, i);
        float sg = 1.0f / (1.0f + expf(-u));
        tgk_store(dx, dt, iu, d * g * sg * (1.0f + u * (1.0f - sg)));
        tgk_store(dx, dt, ig, d * u * sg);
    }
}

extern "C" cudaError_t tg_cuda_swiglu_forward(void *y, const void *x, tg_dtype dt, int64_t n, int64_t h,
                                              cudaStream_t st)
{
    if (n <= 0 || h <= 0) return cudaSuccess;
    swiglu_forward_kernel<<<tgk_blocks(n * h), TGK_THREADS, 0, st>>>(y, x, dt, n, h);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_swiglu_backward(void *dx, const void *dy, const void *x, tg_dtype dt, int64_t n,
                                               int64_t h, cudaStream_t st)
{
    if (n <= 0 || h <= 0) return cudaSuccess;
    swiglu_backward_kernel<<<tgk_blocks(n * h), TGK_THREADS, 0, st>>>(dx, dy, x, dt, n, h);
    return cudaGetLastError();
}
