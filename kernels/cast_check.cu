/* cast_check.cu — source values that do not fit an integer dtype: the smallest (position << 32 | value bits) of the
 * bad ones into the device's check record (TG_INDEX_CAST), as tg_cast's CPU kernel notes them. */
#include "common.cuh"

/* The value as double (exact) and the bits the record keeps: f32 bits for f32 and bf16, the i32 itself. */
static __device__ __forceinline__ double value_of(const void *src, tg_dtype dt, int64_t i, uint32_t *bits)
{
    if (dt == TG_I32) {
        const int32_t v = ((const int32_t *)src)[i];
        *bits = (uint32_t)v;
        return v;
    }
    const float f = dt == TG_BF16 ? tgk_bf16_to_f32(((const uint16_t *)src)[i]) : ((const float *)src)[i];
    *bits = __float_as_uint(f);
    return f;
}

static __global__ void cast_check_kernel(unsigned long long *first, long long *limit, const void *src, tg_dtype src_dt,
                                         int64_t n, double lo, double hi, long long code)
{
    TGK_GRID_STRIDE(i, n)
    {
        uint32_t bits;
        const double v = value_of(src, src_dt, i, &bits);
        if (v >= lo && v <= hi && v == trunc(v)) continue; /* NaN fails the range test */
        const unsigned long long key = (unsigned long long)(i < 0xffffffffLL ? i : 0xffffffffLL) << 32 | bits;
        /* the writer that lowered the record names the dtypes (a later cast's bad value at a larger position
         * leaves both alone); writers of one launch write the same code */
        if (atomicMin(first, key) > key) *limit = code;
    }
}

extern "C" cudaError_t tg_cuda_cast_check(unsigned long long *first, long long *limit, const void *src, tg_dtype src_dt,
                                          tg_dtype dst_dt, int64_t n, cudaStream_t st)
{
    if (n <= 0 || !first) return cudaSuccess;
    if (src_dt != TG_F32 && src_dt != TG_BF16 && src_dt != TG_I32) return cudaErrorInvalidValue;
    if (dst_dt != TG_I32 && dst_dt != TG_U16) return cudaErrorInvalidValue;
    const double lo = dst_dt == TG_U16 ? 0.0 : -2147483648.0, hi = dst_dt == TG_U16 ? 65535.0 : 2147483647.0;
    const long long code = (long long)src_dt << 8 | (long long)dst_dt; /* tg_index_cast_code (backend.h) */
    cast_check_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(first, limit, src, src_dt, n, lo, hi, code);
    return cudaGetLastError();
}
