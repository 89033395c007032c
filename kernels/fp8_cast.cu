/* fp8_cast.cu — y = fp8(g * scale) and/or its transpose y_t, with amax = max|g| and scale_inv = 1 / scale in the
 * same pass (struct tg_fp8_cast_args); g = x, or for a gradient through GELU g = x_dt(x * gelu'(gelu_x)); the
 * gradient form also writes the column sums of g per chunk of 64-row tiles (the bias gradient's first stage). y
 * alone goes through a grid-stride loop over groups of 8 elements; the rest through fp8_cast.cuh's cast-transpose
 * kernel. */
#include "fp8_cast.cuh"

#include <stdint.h>

/* y only: a grid-stride loop over groups of 8 (vec: n % 8 == 0 and x, y aligned). */
template <bool BF16>
static __global__ void cast_kernel(const void *__restrict__ x, uint8_t *__restrict__ y, tg_dtype y_dt, int64_t n,
                                   int vec, const float *scale, float *amax, float *scale_inv)
{
    const float s = scale ? *scale : 1.0f;
    unsigned m = 0;
    TGK_GRID_STRIDE(g, (n + TGK_VEC - 1) / TGK_VEC)
    {
        const int64_t i = g * TGK_VEC;
        const int cnt = n - i < TGK_VEC ? (int)(n - i) : TGK_VEC;
        float v[TGK_VEC];
        tgk_raw_unpack<BF16>(tgk_raw_load<BF16>(x, i, cnt, vec), v); /* 0 past the end */
#pragma unroll
        for (int k = 0; k < TGK_VEC; k++) m = max(m, tgk_abs_bits(v[k]));
        const uint32_t lo = tgk_to_fp8x2(v[0] * s, v[1] * s, y_dt) | tgk_to_fp8x2(v[2] * s, v[3] * s, y_dt) << 16;
        const uint32_t hi = tgk_to_fp8x2(v[4] * s, v[5] * s, y_dt) | tgk_to_fp8x2(v[6] * s, v[7] * s, y_dt) << 16;
        tgk_ct_store(y, i, cnt, vec, lo, hi);
    }
    if (amax) tgk_amax_block(m, amax);
    if (scale_inv && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
}

extern "C" cudaError_t tg_cuda_fp8_cast(const void *x, tg_dtype x_dt, const void *gelu_x, void *y, void *yt,
                                        tg_dtype y_dt, int64_t rows, int64_t cols, const float *scale, float *amax,
                                        float *scale_inv, int accumulate, float *dbias_part, int64_t dbias_chunks,
                                        cudaStream_t st)
{
    if (!yt && !gelu_x && !dbias_part) {
        cudaError_t e = tgk_amax_reset(amax, accumulate, st);
        if (e != cudaSuccess) return e;
        const int64_t n = rows * cols;
        const int vec = n % TGK_VEC == 0 && tgk_aligned(x, 16) && tgk_aligned(y, 8);
        const unsigned blocks = tgk_blocks((n + TGK_VEC - 1) / TGK_VEC);
        if (x_dt == TG_BF16)
            cast_kernel<true><<<blocks, TGK_THREADS, 0, st>>>(x, (uint8_t *)y, y_dt, n, vec, scale, amax, scale_inv);
        else
            cast_kernel<false><<<blocks, TGK_THREADS, 0, st>>>(x, (uint8_t *)y, y_dt, n, vec, scale, amax, scale_inv);
        return cudaGetLastError();
    }
#define CT_LAUNCH(M)                                                                                              \
    tgk_cast_transpose_launch<M>(x, gelu_x, x_dt, y, yt, y_dt, rows, cols, scale, amax, scale_inv, accumulate, \
                                 dbias_part, dbias_chunks, st)
    if (gelu_x && dbias_part) return CT_LAUNCH(TGK_CT_DGELU | TGK_CT_DBIAS);
    if (gelu_x) return CT_LAUNCH(TGK_CT_DGELU);
    if (dbias_part) return CT_LAUNCH(TGK_CT_DBIAS);
    return CT_LAUNCH(0);
#undef CT_LAUNCH
}
