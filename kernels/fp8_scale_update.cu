/* fp8_scale_update.cu — FP8 delayed-scaling update (backend.h, tg_fp8_scale_update_args): one block per role,
 * its threads rolling the history column in chunks of blockDim rows and reducing its max. */
#include "common.cuh"
#include "kernels.h"

#include <cfloat>

#define SU_THREADS 256

/* the larger of a and b, or NaN when either is (fmaxf drops a NaN): a NaN amax in the window keeps the scale */
static __device__ __forceinline__ float max_nan(float a, float b) { return isnan(a) || a > b ? a : b; }

static __global__ void fp8_scale_update_kernel(float *history, float *scale, float *scale_inv, int64_t len, int n,
                                               int most_recent, float margin_div, struct tgk_fp8_max fp8_max)
{
    const int j = blockIdx.x;
    float *h = history + j;
    const float last = h[0];
    /* roll: row i <- row i + 1, the last row <- row 0, row 0 <- 0; the max covers every old row (and 0). A chunk
     * reads rows [c + 1, c + blockDim] before it writes rows [c, c + blockDim): the next chunk reads only rows it
     * has not yet written. */
    float amax = 0.0f;
    for (int64_t c = 0; c < len; c += blockDim.x) {
        const int64_t i = c + threadIdx.x;
        float v = 0.0f;
        if (i < len) {
            v = i < len - 1 ? h[(i + 1) * n] : last;
            amax = max_nan(amax, v);
        }
        __syncthreads(); /* every thread has read h[0] and this chunk's rows */
        if (i < len) h[i * n] = i > 0 ? v : 0.0f;
    }
    __shared__ float warp_max[SU_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) amax = max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < SU_THREADS / 32; w++) amax = max_nan(amax, warp_max[w]);
    if (most_recent) amax = last;
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
    if (n <= 0) return cudaSuccess;
    if (n > TGK_FP8_MAX_ROLES) return cudaErrorInvalidValue;
    for (int j = 0; j < TGK_FP8_MAX_ROLES; j++) m.v[j] = j < n ? fp8_max[j] : 1.0f;
    fp8_scale_update_kernel<<<n, SU_THREADS, 0, st>>>(history, scale, scale_inv, len, n, most_recent, margin_div, m);
    return cudaGetLastError();
}
