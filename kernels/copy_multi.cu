/* copy_multi.cu — many copies in one launch, f32 or bf16 on either side (zero1's gather: the f32 values of a bucket
 * rounded into each parameter's bf16 weight, one launch instead of one per parameter). */
#include "common.cuh"

#if CUDART_VERSION >= 12010
#define COPY_GROUP 256 /* 32 bytes a pair + 4 of index: 9 KiB of kernel parameters */
#else
#define COPY_GROUP 96
#endif
#define COPY_CHUNK 16384 /* elements of one work item */

struct copy_table {
    int n;
    int item_start[COPY_GROUP + 1]; /* work item c is chunk c - item_start[k] of pair k */
    struct tgk_copy_pair t[COPY_GROUP];
};

/* Block b copies work items b, b + gridDim.x, ...; the same dtype copies the bits (NaN payloads too). */
static __global__ void __launch_bounds__(TGK_THREADS) copy_multi_kernel(const __grid_constant__ struct copy_table tab)
{
    const int nitems = tab.item_start[tab.n];
    for (int c = (int)blockIdx.x; c < nitems; c += (int)gridDim.x) {
        const int k = tgk_item_owner(tab.item_start, tab.n, c);
        const struct tgk_copy_pair &p = tab.t[k];
        const int64_t first = (int64_t)(c - tab.item_start[k]) * COPY_CHUNK;
        const int64_t last = first + COPY_CHUNK < p.n ? first + COPY_CHUNK : p.n;
        if (p.dst_dt == p.src_dt && p.dst_dt == TG_BF16) {
            for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x)
                ((uint16_t *)p.dst)[i] = ((const uint16_t *)p.src)[i];
        } else if (p.dst_dt == p.src_dt) {
            for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x)
                ((uint32_t *)p.dst)[i] = ((const uint32_t *)p.src)[i];
        } else {
            for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x)
                tgk_store(p.dst, p.dst_dt, i, tgk_load(p.src, p.src_dt, i));
        }
    }
}

extern "C" cudaError_t tg_cuda_copy_multi(const struct tgk_copy_pair *t, int n, cudaStream_t st)
{
    for (int g0 = 0; g0 < n; g0 += COPY_GROUP) {
        struct copy_table tab;
        tab.n = n - g0 < COPY_GROUP ? n - g0 : COPY_GROUP;
        for (int k = 0; k < tab.n; k++) tab.t[k] = t[g0 + k];
        const int64_t items = tgk_item_starts(tab.item_start, tab.n, COPY_CHUNK, [&](int k) { return tab.t[k].n; });
        if (items < 0) return cudaErrorInvalidValue;
        if (items == 0) continue;
        copy_multi_kernel<<<(unsigned)(items < 2048 ? items : 2048), TGK_THREADS, 0, st>>>(tab);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
