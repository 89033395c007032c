/* fp8_dequantize.cu — y = value(x) * scale_inv, rounded once to f32 or bf16 (struct tg_fp8_dequantize_args). */
#include "fp8.cuh"

static __global__ void dequantize_kernel(const uint8_t *x, tg_dtype x_dt, void *y, tg_dtype y_dt, int64_t n,
                                         const float *scale_inv)
{
    const float si = scale_inv ? *scale_inv : 1.0f;
    TGK_GRID_STRIDE(i, n) tgk_store(y, y_dt, i, tgk_from_fp8(x[i], x_dt) * si);
}

extern "C" cudaError_t tg_cuda_fp8_dequantize(const uint8_t *x, tg_dtype x_dt, void *y, tg_dtype y_dt, int64_t n,
                                              const float *scale_inv, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    dequantize_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(x, x_dt, y, y_dt, n, scale_inv);
    return cudaGetLastError();
}
