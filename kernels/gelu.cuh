/* gelu.cuh — GELU (tanh approximation) as every CUDA kernel computes it, so a fused kernel and the unfused ops give
 * the same bits. With u = sqrt(2/pi) (h + 0.044715 h^3), 0.5 (1 + tanh u) = s = 1 / (1 + exp(-2u)) and
 * 1 - tanh(u)^2 = 4 s (1 - s), so
 *     gelu(h)  = h s
 *     gelu'(h) = s + 2 sqrt(2/pi) h s (1 - s) (1 + 3 0.044715 h^2),
 * equal in exact arithmetic to the CPU's tanhf formulas. Computed from t = exp(-2|u|) <= 1 (no overflow, no
 * cancellation: s and 1 - s are 1 / (1 + t) and t / (1 + t) in some order) with the hardware exp2 and reciprocal
 * approximations in half the tanhf form's instructions: a few f32 ulps from it near 0, up to about 2^-24 |2u| relative
 * in the far tails (the exp2 approximation's error grows with its argument). */
#ifndef TG_KERNELS_GELU_CUH
#define TG_KERNELS_GELU_CUH

#include "common.cuh"

#define TGK_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define TGK_GELU_A 0.044715f

/* s = 0.5 (1 + tanh u) and sp = s (1 - s) for the pre-activation h. */
static __device__ __forceinline__ void tgk_gelu_s(float h, float &s, float &sp)
{
    const float u = TGK_GELU_K * (h + TGK_GELU_A * h * h * h);
    const float t = __expf(-2.0f * fabsf(u));
    const float r = __fdividef(1.0f, 1.0f + t), p = t * r;
    s = u >= 0.0f ? r : p;
    sp = r * p;
}

static __device__ __forceinline__ float tgk_gelu(float h)
{
    float s, sp;
    tgk_gelu_s(h, s, sp);
    return h * s;
}

static __device__ __forceinline__ float tgk_gelu_grad(float h)
{
    float s, sp;
    tgk_gelu_s(h, s, sp);
    return s + 2.0f * TGK_GELU_K * h * sp * (1.0f + 3.0f * TGK_GELU_A * h * h);
}

#endif
