/* fp8.cuh — device helpers of the FP8 kernels: the saturating conversions and the amax reduction. */
#ifndef TG_KERNELS_FP8_CUH
#define TG_KERNELS_FP8_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "common.cuh"

/* f32 -> FP8 code, round to nearest even, saturating to +-max (infinities too): the hardware cvt.rn.satfinite
 * on sm_89 and later. NaN gives 0x7f for both formats, as tg_fp8_from_f32 on the host. */
static __device__ __forceinline__ uint8_t tgk_to_fp8(float v, tg_dtype dt)
{
    if (isnan(v)) return 0x7f;
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, dt == TG_E4M3 ? __NV_E4M3 : __NV_E5M2);
}

/* Two codes at once (a in the low byte, b in the high one): the same codes as tgk_to_fp8 on each, from one paired
 * hardware conversion. */
static __device__ __forceinline__ uint32_t tgk_to_fp8x2(float a, float b, tg_dtype dt)
{
    uint32_t r = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, dt == TG_E4M3 ? __NV_E4M3 : __NV_E5M2);
    if (isnan(a)) r = (r & 0xff00u) | 0x7fu;
    if (isnan(b)) r = (r & 0x00ffu) | 0x7f00u;
    return r;
}

/* FP8 code -> f32, exact (every FP8 value is a half). */
static __device__ __forceinline__ float tgk_from_fp8(uint8_t c, tg_dtype dt)
{
    __half h(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, dt == TG_E4M3 ? __NV_E4M3 : __NV_E5M2));
    return __half2float(h);
}

/* |v| as the bits amaxes compare (unsigned: NaN > Inf > numbers). */
static __device__ __forceinline__ unsigned tgk_abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

/* Folds each thread's m into *amax (as unsigned bits) with one atomic per block; every thread of the block
 * must call it. */
static __device__ __forceinline__ void tgk_amax_block(unsigned m, float *amax)
{
    __shared__ unsigned warp_max[32];
    m = __reduce_max_sync(0xffffffffu, m);
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32;
    if (lane == 0) warp_max[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? warp_max[lane] : 0u;
        m = __reduce_max_sync(0xffffffffu, m);
        if (lane == 0 && m) atomicMax((unsigned *)amax, m);
    }
}

/* Host, before a kernel that folds its amax into *amax: 0 first unless the op accumulates onto the old value. */
static inline cudaError_t tgk_amax_reset(float *amax, int accumulate, cudaStream_t st)
{
    return amax && !accumulate ? cudaMemsetAsync(amax, 0, sizeof(float), st) : cudaSuccess;
}

#define TGK_VEC 8 /* elements per vector group */

/* v = x[i .. i + 8) as f32; x + i is 16-byte aligned. */
static __device__ __forceinline__ void tgk_load8(const void *x, tg_dtype dt, int64_t i, float v[TGK_VEC])
{
    if (dt == TG_BF16) {
        const uint4 u = *(const uint4 *)((const uint16_t *)x + i);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[2 * k] = __uint_as_float(w[k] << 16);
            v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    } else {
        const float4 a = *(const float4 *)((const float *)x + i), b = *(const float4 *)((const float *)x + i + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
}

#endif
