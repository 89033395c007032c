/* cast.cu — elementwise dtype conversion among f32, bf16, i32 and u16 (the CPU backend's rules). */
#include "common.cuh"

struct bf16_bits {
    uint16_t bits;
};

/* Any element as double: exact for all four dtypes. */
static __device__ __forceinline__ double as_f64(float v) { return v; }
static __device__ __forceinline__ double as_f64(bf16_bits v) { return tgk_bf16_to_f32(v.bits); }
static __device__ __forceinline__ double as_f64(int32_t v) { return v; }
static __device__ __forceinline__ double as_f64(uint16_t v) { return v; }

/* Floats round through f32 (bf16 to nearest even); integers truncate toward
 * zero and saturate, NaN becomes 0 — as st_any in src/backend/cpu_kernels.c. */
static __device__ __forceinline__ void store(float *p, double v) { *p = (float)v; }
static __device__ __forceinline__ void store(bf16_bits *p, double v) { p->bits = tgk_f32_to_bf16((float)v); }
static __device__ __forceinline__ void store(int32_t *p, double v)
{
    *p = isnan(v) ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
}
static __device__ __forceinline__ void store(uint16_t *p, double v)
{
    *p = isnan(v) ? 0 : v >= 65535.0 ? 65535 : v <= 0 ? 0 : (uint16_t)v;
}

template <typename S, typename D> static __global__ void cast_kernel(const S *src, D *dst, int64_t n)
{
    TGK_GRID_STRIDE(i, n) store(&dst[i], as_f64(src[i]));
}

/* Same dtype: a copy, bit for bit (NaN payloads included). */
template <typename T> static __global__ void copy_kernel(const T *src, T *dst, int64_t n)
{
    TGK_GRID_STRIDE(i, n) dst[i] = src[i];
}

template <typename S> static cudaError_t cast_from(const S *src, void *dst, tg_dtype dst_dt, int64_t n, cudaStream_t st)
{
    unsigned g = tgk_blocks(n);
    switch (dst_dt) {
    case TG_F32: cast_kernel<<<g, TGK_THREADS, 0, st>>>(src, (float *)dst, n); break;
    case TG_BF16: cast_kernel<<<g, TGK_THREADS, 0, st>>>(src, (bf16_bits *)dst, n); break;
    case TG_I32: cast_kernel<<<g, TGK_THREADS, 0, st>>>(src, (int32_t *)dst, n); break;
    case TG_U16: cast_kernel<<<g, TGK_THREADS, 0, st>>>(src, (uint16_t *)dst, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_cast(const void *src, tg_dtype src_dt, void *dst, tg_dtype dst_dt, int64_t n,
                                    cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (src_dt == dst_dt) {
        unsigned g = tgk_blocks(n);
        if (src_dt == TG_F32 || src_dt == TG_I32)
            copy_kernel<<<g, TGK_THREADS, 0, st>>>((const uint32_t *)src, (uint32_t *)dst, n);
        else if (src_dt == TG_BF16 || src_dt == TG_U16)
            copy_kernel<<<g, TGK_THREADS, 0, st>>>((const uint16_t *)src, (uint16_t *)dst, n);
        else
            return cudaErrorInvalidValue;
        return cudaGetLastError();
    }
    switch (src_dt) {
    case TG_F32: return cast_from((const float *)src, dst, dst_dt, n, st);
    case TG_BF16: return cast_from((const bf16_bits *)src, dst, dst_dt, n, st);
    case TG_I32: return cast_from((const int32_t *)src, dst, dst_dt, n, st);
    case TG_U16: return cast_from((const uint16_t *)src, dst, dst_dt, n, st);
    default: return cudaErrorInvalidValue;
    }
}
