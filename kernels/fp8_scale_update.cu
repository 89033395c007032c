/* fp8_scale_update.cu — FP8 delayed-scaling update (backend.h, tg_fp8_scale_update_args): one thread per role. */
#include "common.cuh"
#include "kernels.h"

#include <cfloat>

static __global__ void fp8_scale_update_kernel(float *history, float *scale, float *scale_inv, int64_t len, int n,
                                               int most_recent, float margin_div, struct tgk_fp8_max fp8_max)
{
    const int j = threadIdx.x;
    if (j >= n) return;
    float *h = history + j;
    const float last = h[0];
    float amax = most_recent ? last : 0.0f;
    for (int64_t i = 0; i < len; i++) { /* roll: row i <- row i + 1, the last row <- row 0, row 0 <- 0 */
        const float v = i < len - 1 ? h[(i + 1) * n] : last;
        if (!most_recent) amax = fmaxf(amax, v);
        h[i * n] = i > 0 ? v : 0.0f;
    }
    float s = scale[j];
    if (isfinite(amax) && amax > 0.0f) s = __fdiv_rn(__fdiv_rn(fp8_max.v[j], amax), margin_div);
    if (isinf(s)) s = FLT_MAX;
    scale[j] = s;
    scale_inv[j] = __fdiv_rn(1.0f, s);
}

extern "C" cudaError_t tg_cuda_fp8_scale_update(float *history, float *scale, float *scale_inv, int64_t len, int n,
                                                int most_recent, float margin_div, const float *fp8_max, cudaStream_t st)
{
    struct tgk_fp8_max m;
    for (int j = 0; j < TGK_FP8_MAX_ROLES; j++) m.v[j] = j < n ? fp8_max[j] : 1.0f;
    fp8_scale_update_kernel<<<1, 32, 0, st>>>(history, scale, scale_inv, len, n, most_recent, margin_div, m);
    return cudaGetLastError();
}
