/* sumsq_multi.cu — sum of squares of many tensors into one device f32 (global gradient norm), deterministic, no host sync. */
#include "common.cuh"

#include <stdlib.h>

#if CUDART_VERSION >= 12010
#define SUMSQ_GROUP 512 /* 28 bytes a tensor: 14 KiB of kernel parameters */
#else
#define SUMSQ_GROUP 96
#endif
#define SUMSQ_CHUNK 8192                    /* elements of one work item */
#define SUMSQ_PARTS (TGK_REDUCE_BLOCKS / 2) /* blocks of pass 1; the last scratch slot keeps the running total */
#define SUMSQ_TOTAL (TGK_REDUCE_BLOCKS - 1)

struct sumsq_table {
    int ntensors;
    int chunk_start[SUMSQ_GROUP + 1]; /* work item c is chunk c - chunk_start[k] of tensor k */
    struct tgk_sumsq_tensor t[SUMSQ_GROUP];
};

/* Tree over the block in a fixed order; thread 0 gets the sum. */
template <int THREADS> static __device__ double block_sum(double v)
{
    __shared__ double buf[THREADS];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) buf[threadIdx.x] += buf[threadIdx.x + w];
        __syncthreads();
    }
    return buf[0];
}

/* Pass 1: block b sums work items b, b + gridDim.x, ... into partial[b]. */
static __global__ void sumsq_partial_kernel(const __grid_constant__ struct sumsq_table tab, double *partial)
{
    double acc = 0.0;
    const int nitems = tab.chunk_start[tab.ntensors];
    for (int c = (int)blockIdx.x; c < nitems; c += (int)gridDim.x) {
        const int lo = tgk_item_owner(tab.chunk_start, tab.ntensors, c);
        const struct tgk_sumsq_tensor &t = tab.t[lo];
        const int64_t first = (int64_t)(c - tab.chunk_start[lo]) * SUMSQ_CHUNK;
        const int64_t last = first + SUMSQ_CHUNK < t.n ? first + SUMSQ_CHUNK : t.n;
        for (int64_t i = first + threadIdx.x; i < last; i += blockDim.x) {
            const double x = tgk_load(t.x, t.dt, i);
            acc += x * x;
        }
    }
    const double r = block_sum<TGK_THREADS>(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = r;
}

/* Pass 2: one block folds the partials; groups after the first add to the running total. */
static __global__ void sumsq_final_kernel(double *scratch, int nparts, int first_group, float *out)
{
    const double v = threadIdx.x < nparts ? scratch[threadIdx.x] : 0.0;
    const double r = block_sum<SUMSQ_PARTS>(v);
    if (threadIdx.x == 0) {
        const double total = first_group ? r : scratch[SUMSQ_TOTAL] + r;
        scratch[SUMSQ_TOTAL] = total;
        *out = (float)total;
    }
}

extern "C" cudaError_t tg_cuda_sumsq_multi(const struct tgk_sumsq_tensor *t, int ntensors, float *out,
                                           double *scratch, cudaStream_t st)
{
    struct sumsq_table *x = (struct sumsq_table *)malloc(sizeof *x); /* 14 KiB: kept off small thread stacks */
    if (!x) return cudaErrorMemoryAllocation;
    cudaError_t e = cudaSuccess;
    int k0 = 0;
    do { /* at least one group, so no tensors still writes 0 */
        int n = 0;
        int64_t items = 0;
        for (int k = k0; k < ntensors && k < k0 + SUMSQ_GROUP; k++) {
            if (t[k].dt != TG_F32 && t[k].dt != TG_BF16) e = cudaErrorInvalidValue;
            if (t[k].n <= 0) continue;
            x->t[n] = t[k];
            x->chunk_start[n++] = (int)items;
            items += (t[k].n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
        }
        if (items > 0x7fffffff) e = cudaErrorInvalidValue;
        if (e != cudaSuccess) break;
        x->ntensors = n;
        x->chunk_start[n] = (int)items;
        const int parts = (int)(items < 1 ? 1 : items > SUMSQ_PARTS ? SUMSQ_PARTS : items);
        sumsq_partial_kernel<<<parts, TGK_THREADS, 0, st>>>(*x, scratch);
        if ((e = cudaGetLastError()) != cudaSuccess) break;
        sumsq_final_kernel<<<1, SUMSQ_PARTS, 0, st>>>(scratch, parts, k0 == 0, out);
        e = cudaGetLastError();
        k0 += SUMSQ_GROUP;
    } while (k0 < ntensors && e == cudaSuccess);
    free(x);
    return e;
}
