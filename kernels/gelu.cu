/* gelu.cu — GELU (tanh approximation) forward and backward, elementwise, in gelu.cuh's form (the FP8 casts through
 * GELU compute the same bits). */
#include "gelu.cuh"

/* bf16, n a multiple of 8, 16-byte aligned: 8 elements per 16-byte access (the same formulas). */
static __device__ __forceinline__ void unpack8(uint4 u, float *f)
{
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = tgk_bf16_to_f32((uint16_t)(w[k] & 0xffffu));
        f[2 * k + 1] = tgk_bf16_to_f32((uint16_t)(w[k] >> 16));
    }
}
static __device__ __forceinline__ uint4 pack8(const float *f)
{
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) w[k] = (uint32_t)tgk_f32_to_bf16(f[2 * k]) | (uint32_t)tgk_f32_to_bf16(f[2 * k + 1]) << 16;
    return make_uint4(w[0], w[1], w[2], w[3]);
}

static __global__ void gelu_forward_vec8(uint4 *y, const uint4 *x, int64_t n8)
{
    TGK_GRID_STRIDE(i, n8)
    {
        float f[8];
        unpack8(x[i], f);
#pragma unroll
        for (int k = 0; k < 8; k++) f[k] = tgk_gelu(f[k]);
        y[i] = pack8(f);
    }
}

static __global__ void gelu_backward_vec8(uint4 *dx, const uint4 *dy, const uint4 *x, int64_t n8)
{
    TGK_GRID_STRIDE(i, n8)
    {
        float f[8], g[8];
        unpack8(x[i], f);
        unpack8(dy[i], g);
#pragma unroll
        for (int k = 0; k < 8; k++) g[k] = __fmul_rn(g[k], tgk_gelu_grad(f[k]));
        dx[i] = pack8(g);
    }
}

static bool vec8_ok(tg_dtype dt, int64_t n, const void *a, const void *b, const void *c)
{
    return dt == TG_BF16 && n % 8 == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

static __global__ void gelu_forward_kernel(void *y, const void *x, tg_dtype dt, int64_t n)
{
    TGK_GRID_STRIDE(i, n)
    {
        tgk_store(y, dt, i, tgk_gelu(tgk_load(x, dt, i)));
    }
}

static __global__ void gelu_backward_kernel(void *dx, const void *dy, const void *x, tg_dtype dt, int64_t n)
{
    TGK_GRID_STRIDE(i, n)
    {
        tgk_store(dx, dt, i, __fmul_rn(tgk_load(dy, dt, i), tgk_gelu_grad(tgk_load(x, dt, i))));
    }
}

extern "C" cudaError_t tg_cuda_gelu_forward(void *y, const void *x, tg_dtype dt, int64_t n, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (vec8_ok(dt, n, y, x, x)) {
        gelu_forward_vec8<<<tgk_blocks(n / 8), TGK_THREADS, 0, st>>>((uint4 *)y, (const uint4 *)x, n / 8);
        return cudaGetLastError();
    }
    gelu_forward_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(y, x, dt, n);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_gelu_backward(void *dx, const void *dy, const void *x, tg_dtype dt, int64_t n,
                                             cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (vec8_ok(dt, n, dx, dy, x)) {
        gelu_backward_vec8<<<tgk_blocks(n / 8), TGK_THREADS, 0, st>>>((uint4 *)dx, (const uint4 *)dy, (const uint4 *)x,
                                                                      n / 8);
        return cudaGetLastError();
    }
    gelu_backward_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(dx, dy, x, dt, n);
    return cudaGetLastError();
}
