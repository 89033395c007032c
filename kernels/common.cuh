/* common.cuh — device helpers shared by the kernels: bf16 bits <-> f32 and launch geometry. */
#ifndef TG_KERNELS_COMMON_CUH
#define TG_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "kernels.h"

/* bf16 is kept as raw uint16_t bits so the rounding is exactly the CPU's
 * tg_f32_to_bf16 (src/core/dtype.c), NaN payload included. */
static __device__ __forceinline__ float tgk_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

static __device__ __forceinline__ uint16_t tgk_f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                             /* nearest even */
    return (uint16_t)(u >> 16);
}

/* f rounded to bf16 and back, the bits tgk_f32_to_bf16 gives: the hardware's round-to-nearest-even conversion,
 * NaN through tgk_f32_to_bf16 so its payload is kept as the CPU keeps it. */
static __device__ __forceinline__ float tgk_round_bf16(float f)
{
    if (isnan(f)) return tgk_bf16_to_f32(tgk_f32_to_bf16(f));
    return __bfloat162float(__float2bfloat16_rn(f));
}

/* Loads / stores of a float element in f32 or bf16 storage. */
static __device__ __forceinline__ float tgk_load(const void *p, tg_dtype dt, int64_t i)
{
    return dt == TG_BF16 ? tgk_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static __device__ __forceinline__ void tgk_store(void *p, tg_dtype dt, int64_t i, float v)
{
    if (dt == TG_BF16)
        ((uint16_t *)p)[i] = tgk_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* Host: p (NULL counts as aligned) starts on a multiple of bytes, a vector access's requirement. */
static inline bool tgk_aligned(const void *p, unsigned bytes) { return !p || (uintptr_t)p % bytes == 0; }

#define TGK_THREADS 256
/* Blocks for a grid-stride loop over n elements: enough to fill the GPU,
 * few enough that each thread does several elements on big tensors. */
static inline unsigned tgk_blocks(int64_t n)
{
    int64_t b = (n + TGK_THREADS - 1) / TGK_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

#define TGK_GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Host, multi-tensor tables: start[k] = the first work item of entry k of n (len(k) units, items of chunk units),
 * start[n] = the items in all. Returns that total, or -1 past INT_MAX items. */
template <typename Len> static inline int64_t tgk_item_starts(int *start, int n, int64_t chunk, Len len)
{
    int64_t items = 0;
    for (int k = 0; k < n; k++) {
        start[k] = (int)items;
        items += (len(k) + chunk - 1) / chunk;
        if (items > 0x7fffffff) return -1;
    }
    start[n] = (int)items;
    return items;
}

/* Multi-tensor tables: work item c belongs to the last entry k (of n) with start[k] <= c (start ascending,
 * start[0] = 0): a binary search. */
static __device__ __forceinline__ int tgk_item_owner(const int *start, int n, int c)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (start[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

#endif
