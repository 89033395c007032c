/* cross_entropy.cu — softmax cross-entropy: per-row losses, their mean and count on the device, and dlogits. */
#include "common.cuh"

#include <math.h>

#define CE_THREADS 512

/* Block-wide reductions in a fixed tree (deterministic); every thread gets the result. */
template <class T, class Op> static __device__ T ce_block_reduce(T v, Op op, T *buf)
{
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + w]);
        __syncthreads();
    }
    T r = buf[0];
    __syncthreads(); /* buf is reused by the next reduction */
    return r;
}

struct ce_max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct ce_sum {
    __device__ double operator()(double a, double b) const { return a + b; }
};

/* max of row o, and sum of exp(x - max) (f32 exp, summed in double). */
static __device__ void ce_row_stats(const void *logits, tg_dtype dt, int64_t o, int64_t v, float *mx, double *sum)
{
    __shared__ float fbuf[CE_THREADS];
    __shared__ double dbuf[CE_THREADS];
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, tgk_load(logits, dt, o + j));
    m = ce_block_reduce(m, ce_max(), fbuf);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += expf(tgk_load(logits, dt, o + j) - m);
    *sum = ce_block_reduce(s, ce_sum(), dbuf);
    *mx = m;
}

static __global__ void ce_forward_rows(float *losses, const void *logits, const int32_t *targets, tg_dtype dt,
                                       int64_t n, int64_t v, int ignore_index)
{
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const int32_t tgt = targets[r];
        if (tgt == ignore_index) {
            if (threadIdx.x == 0) losses[r] = 0.0f;
        } else if (tgt < 0 || tgt >= v) {
            if (threadIdx.x == 0) losses[r] = NAN;
        } else {
            float mx;
            double sum;
            ce_row_stats(logits, dt, r * v, v, &mx, &sum);
            if (threadIdx.x == 0) losses[r] = (float)(mx + log(sum) - tgk_load(logits, dt, r * v + tgt));
        }
    }
}

/* loss = [mean of the valid rows' losses (0 if none), number of valid rows]. */
static __global__ void ce_forward_mean(float *loss, const float *losses, const int32_t *targets, int64_t n,
                                       int ignore_index)
{
    __shared__ double buf[CE_THREADS];
    double total = 0.0, count = 0.0;
    for (int64_t r = threadIdx.x; r < n; r += blockDim.x)
        if (targets[r] != ignore_index) total += losses[r], count += 1.0;
    total = ce_block_reduce(total, ce_sum(), buf);
    count = ce_block_reduce(count, ce_sum(), buf);
    if (threadIdx.x == 0) {
        loss[0] = count > 0 ? (float)(total / count) : 0.0f;
        loss[1] = (float)count;
    }
}

static __global__ void ce_backward_rows(void *dlogits, const void *logits, const int32_t *targets, const float *loss,
                                        tg_dtype dt, int64_t n, int64_t v, float dloss, int ignore_index)
{
    const float count = loss[1];
    const double scale = count > 0 ? (double)dloss / count : 0.0;
    for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
        const int32_t tgt = targets[r];
        const int64_t o = r * v;
        if (tgt == ignore_index || tgt < 0 || tgt >= v) {
            for (int64_t j = threadIdx.x; j < v; j += blockDim.x) tgk_store(dlogits, dt, o + j, 0.0f);
            continue;
        }
        float mx;
        double sum;
        ce_row_stats(logits, dt, o, v, &mx, &sum);
        const double inv = 1.0 / sum;
        /* each thread reads logits[j] before writing dlogits[j] (they may alias) */
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
            double p = (double)expf(tgk_load(logits, dt, o + j) - mx) * inv;
            tgk_store(dlogits, dt, o + j, (float)(scale * (p - (j == tgt ? 1.0 : 0.0))));
        }
        __syncthreads(); /* the row's stats buffers are reused by the next row */
    }
}

static unsigned ce_grid(int64_t n) { return (unsigned)(n < 65536 ? n : 65536); }

extern "C" cudaError_t tg_cuda_cross_entropy_forward(float *loss, float *losses, const void *logits,
                                                     const int32_t *targets, tg_dtype dt, int64_t n, int64_t v,
                                                     int ignore_index, cudaStream_t st)
{
    if (n > 0) {
        ce_forward_rows<<<ce_grid(n), CE_THREADS, 0, st>>>(losses, logits, targets, dt, n, v, ignore_index);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    ce_forward_mean<<<1, CE_THREADS, 0, st>>>(loss, losses, targets, n, ignore_index);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_cross_entropy_backward(void *dlogits, const void *logits, const int32_t *targets,
                                                      const float *loss, tg_dtype dt, int64_t n, int64_t v, float dloss,
                                                      int ignore_index, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    ce_backward_rows<<<ce_grid(n), CE_THREADS, 0, st>>>(dlogits, logits, targets, loss, dt, n, v, dloss, ignore_index);
    return cudaGetLastError();
}
