/* zero_multi.cu — zeroes many device buffers in one launch (the first-of-step wgrad targets a graphed backward
 * resets before its replay: one launch instead of one memset per parameter). */
#include "common.cuh"

#if CUDART_VERSION >= 12010
#define ZERO_GROUP 512 /* 16 bytes a buffer + 4 of index: 10 KiB of kernel parameters */
#else
#define ZERO_GROUP 96
#endif
#define ZERO_CHUNK 65536 /* bytes of one work item */

struct zero_table {
    int n;
    int item_start[ZERO_GROUP + 1]; /* work item c is chunk c - item_start[k] of buffer k */
    struct tgk_zero_buf t[ZERO_GROUP];
};

/* Block b zeroes work items b, b + gridDim.x, ...: bytes up to a 16-byte boundary, then 16-byte stores, then
 * the tail. */
static __global__ void __launch_bounds__(TGK_THREADS) zero_multi_kernel(const __grid_constant__ struct zero_table tab)
{
    const int nitems = tab.item_start[tab.n];
    for (int c = (int)blockIdx.x; c < nitems; c += (int)gridDim.x) {
        const int lo = tgk_item_owner(tab.item_start, tab.n, c);
        char *p = (char *)tab.t[lo].p;
        const int64_t first = (int64_t)(c - tab.item_start[lo]) * ZERO_CHUNK;
        const int64_t last = first + ZERO_CHUNK < tab.t[lo].bytes ? first + ZERO_CHUNK : tab.t[lo].bytes;
        int64_t a0 = first + (int64_t)((16 - (((uintptr_t)p + (uintptr_t)first) & 15)) & 15);
        if (a0 > last) a0 = last;
        const int64_t a1 = a0 + ((last - a0) & ~(int64_t)15);
        for (int64_t i = first + threadIdx.x; i < a0; i += blockDim.x) p[i] = 0;
        for (int64_t i = a0 + 16 * (int64_t)threadIdx.x; i < a1; i += 16 * (int64_t)blockDim.x)
            *reinterpret_cast<uint4 *>(p + i) = make_uint4(0, 0, 0, 0);
        for (int64_t i = a1 + threadIdx.x; i < last; i += blockDim.x) p[i] = 0;
    }
}

extern "C" cudaError_t tg_cuda_zero_multi(const struct tgk_zero_buf *t, int n, cudaStream_t st)
{
    for (int g0 = 0; g0 < n; g0 += ZERO_GROUP) {
        struct zero_table tab;
        tab.n = n - g0 < ZERO_GROUP ? n - g0 : ZERO_GROUP;
        for (int k = 0; k < tab.n; k++) tab.t[k] = t[g0 + k];
        const int64_t items = tgk_item_starts(tab.item_start, tab.n, ZERO_CHUNK, [&](int k) { return tab.t[k].bytes; });
        if (items < 0) return cudaErrorInvalidValue;
        if (items == 0) continue;
        zero_multi_kernel<<<(unsigned)(items < 1024 ? items : 1024), TGK_THREADS, 0, st>>>(tab);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
