/* index_check.cu — ids outside their table: the smallest (position << 32 | id) of the bad ones into a device record. */
#include "common.cuh"

static __global__ void index_check_kernel(unsigned long long *first, long long *limit, const int32_t *ids, int64_t n,
                                          int64_t v, int has_ignore, int ignore_index)
{
    TGK_GRID_STRIDE(r, n)
    {
        const int32_t id = ids[r];
        if ((id >= 0 && id < v) || (has_ignore && id == ignore_index)) continue;
        const unsigned long long pos = (unsigned long long)(r < 0xffffffffLL ? r : 0xffffffffLL);
        atomicMin(first, pos << 32 | (uint32_t)id);
        *limit = (long long)v; /* every writer of one launch writes the same value */
    }
}

extern "C" cudaError_t tg_cuda_index_check(unsigned long long *first, long long *limit, const int32_t *ids, int64_t n,
                                           int64_t v, int has_ignore, int ignore_index, cudaStream_t st)
{
    if (n <= 0 || !first) return cudaSuccess;
    index_check_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(first, limit, ids, n, v, has_ignore, ignore_index);
    return cudaGetLastError();
}
