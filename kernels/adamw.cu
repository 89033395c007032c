/* adamw.cu — fused AdamW step on f32 master weights (optional bf16 copy), in double as the CPU reference. */
#include "common.cuh"

static __global__ void adamw_kernel(float *p, float *m, float *v, uint16_t *p_lowp, const void *g, tg_dtype g_dt,
                                    int64_t n, double lr, double b1, double b2, double eps, double wd, double gs,
                                    double bc1, double bc2)
{
    TGK_GRID_STRIDE(i, n)
    {
        const double gi = gs * tgk_load(g, g_dt, i);
        const double mi = b1 * m[i] + (1.0 - b1) * gi, vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        double w = p[i];
        w -= lr * (mi / bc1 / (sqrt(vi / bc2) + eps) + wd * w);
        m[i] = (float)mi;
        v[i] = (float)vi;
        p[i] = (float)w;
        if (p_lowp) p_lowp[i] = tgk_f32_to_bf16((float)w);
    }
}

extern "C" cudaError_t tg_cuda_adamw(float *p, float *m, float *v, uint16_t *p_lowp, const void *g, tg_dtype g_dt,
                                     int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                                     float grad_scale, int64_t step, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    const double b1 = beta1, b2 = beta2;
    const double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
    adamw_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(p, m, v, p_lowp, g, g_dt, n, lr, b1, b2, eps, weight_decay,
                                                        grad_scale, bc1, bc2);
    return cudaGetLastError();
}
