/* reduce.cu — sum / max|a| / max|a-b| / sum of squares into one f32, in two deterministic passes. */
#include "common.cuh"

/* Max that keeps a NaN once seen, so a NaN anywhere shows in the result. */
static __device__ __forceinline__ double nanmax(double m, double x) { return (x > m || x != x) ? x : m; }

template <int OP> static __device__ __forceinline__ double combine(double acc, double x)
{
    return (OP == TGK_REDUCE_SUM || OP == TGK_REDUCE_SUMSQ) ? acc + x : nanmax(acc, x);
}

/* Reduces v over the block in a fixed tree; thread 0 gets the result. */
template <int OP, int THREADS> static __device__ double block_reduce(double v)
{
    __shared__ double buf[THREADS];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) buf[threadIdx.x] = combine<OP>(buf[threadIdx.x], buf[threadIdx.x + w]);
        __syncthreads();
    }
    return buf[0];
}

/* Pass 1: partial[blockIdx.x] = reduction of a grid-stride slice. */
template <int OP>
static __global__ void reduce_partial_kernel(const void *a, const void *b, tg_dtype dt, int64_t n, double *partial)
{
    double acc = 0.0; /* the identity of every op here (|x| >= 0) */
    TGK_GRID_STRIDE(i, n)
    {
        double x = tgk_load(a, dt, i);
        if (OP == TGK_REDUCE_MAX_ABS_DIFF) x -= (double)tgk_load(b, dt, i);
        if (OP == TGK_REDUCE_SUMSQ) x *= x;
        if (OP == TGK_REDUCE_MAX_ABS || OP == TGK_REDUCE_MAX_ABS_DIFF) x = fabs(x);
        acc = combine<OP>(acc, x);
    }
    double r = block_reduce<OP, TGK_THREADS>(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = r;
}

/* Pass 2: one block folds the partials and stores the f32 result. */
template <int OP> static __global__ void reduce_final_kernel(const double *partial, int nparts, float *out)
{
    double v = threadIdx.x < nparts ? partial[threadIdx.x] : 0.0;
    double r = block_reduce<OP, TGK_REDUCE_BLOCKS>(v);
    if (threadIdx.x == 0) *out = (float)r;
}

template <int OP>
static cudaError_t reduce_launch(const void *a, const void *b, tg_dtype dt, int64_t n, float *out, double *scratch,
                                 cudaStream_t st)
{
    int64_t per_block = (int64_t)TGK_THREADS * 4;
    int64_t nb = (n + per_block - 1) / per_block;
    int parts = (int)(nb < 1 ? 1 : nb > TGK_REDUCE_BLOCKS ? TGK_REDUCE_BLOCKS : nb);
    reduce_partial_kernel<OP><<<parts, TGK_THREADS, 0, st>>>(a, b, dt, n, scratch);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    reduce_final_kernel<OP><<<1, TGK_REDUCE_BLOCKS, 0, st>>>(scratch, parts, out);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_reduce(int op, const void *a, const void *b, tg_dtype dt, int64_t n, float *out,
                                      double *scratch, cudaStream_t st)
{
    if (dt != TG_F32 && dt != TG_BF16) return cudaErrorInvalidValue;
    if (n < 0) n = 0;
    switch (op) {
    case TGK_REDUCE_SUM: return reduce_launch<TGK_REDUCE_SUM>(a, b, dt, n, out, scratch, st);
    case TGK_REDUCE_MAX_ABS: return reduce_launch<TGK_REDUCE_MAX_ABS>(a, b, dt, n, out, scratch, st);
    case TGK_REDUCE_MAX_ABS_DIFF: return reduce_launch<TGK_REDUCE_MAX_ABS_DIFF>(a, b, dt, n, out, scratch, st);
    case TGK_REDUCE_SUMSQ: return reduce_launch<TGK_REDUCE_SUMSQ>(a, b, dt, n, out, scratch, st);
    default: return cudaErrorInvalidValue;
    }
}
