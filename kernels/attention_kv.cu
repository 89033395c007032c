/* attention_kv.cu — incremental decoding: appends new keys and values to a cache, then attends over it. */
#include "common.cuh"

#include <math.h>

/* Copies the keys and values of the tn new positions into cache rows pos .. pos+tn-1. */
static __global__ void kv_append(void *kc, void *vc, const void *qkv, tg_dtype dt, int64_t b, int64_t tn, int64_t tmax,
                                 int64_t pos, int64_t c)
{
    TGK_GRID_STRIDE(idx, b * tn * c)
    {
        const int64_t e = idx % c, row = idx / c, i = row % tn, bb = row / tn;
        const int64_t src = row * 3 * c, dst = (bb * tmax + pos + i) * c + e;
        tgk_store(kc, dt, dst, tgk_load(qkv, dt, src + c + e));
        tgk_store(vc, dt, dst, tgk_load(qkv, dt, src + 2 * c + e));
    }
}

static __device__ float block_reduce(float v, float *red, bool is_max)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads(); /* red may still be read from the previous reduction */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = red[0];
    for (int k = 1; k < nw; k++) r = is_max ? fmaxf(r, red[k]) : r + red[k];
    return r;
}

/* One block per (batch, head, new position i): scores of q_i against cache rows 0 .. pos+i in shared memory,
 * softmax, then the weighted sum of the values (one thread per head-dimension element). */
static __global__ void kv_attend(void *out, const void *kc, const void *vc, const void *qkv, tg_dtype dt, int64_t tn,
                                 int64_t tmax, int64_t pos, int64_t c, int n_head)
{
    extern __shared__ float sh[]; /* red[32], q[d], s[pos + tn] */
    float *red = sh, *q = sh + 32;
    const int64_t d = c / n_head;
    float *s = q + d;
    const int64_t i = blockIdx.x % tn, h = (blockIdx.x / tn) % n_head, bb = blockIdx.x / (tn * n_head);
    const int64_t L = pos + i; /* last cache row this query sees */
    const float scale = 1.0f / sqrtf((float)d);
    const int64_t qoff = (bb * tn + i) * 3 * c + h * d;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) q[e] = tgk_load(qkv, dt, qoff + e);
    __syncthreads();
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j <= L; j += blockDim.x) {
        const int64_t koff = (bb * tmax + j) * c + h * d;
        float acc = 0;
        for (int64_t e = 0; e < d; e++) acc += q[e] * tgk_load(kc, dt, koff + e);
        s[j] = acc * scale;
        mx = fmaxf(mx, s[j]);
    }
    mx = block_reduce(mx, red, true);
    float l = 0;
    for (int64_t j = threadIdx.x; j <= L; j += blockDim.x) l += (s[j] = expf(s[j] - mx));
    l = block_reduce(l, red, false);
    __syncthreads();
    const float inv = 1.0f / l;
    for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
        float o = 0;
        for (int64_t j = 0; j <= L; j++) o += s[j] * tgk_load(vc, dt, (bb * tmax + j) * c + h * d + e);
        tgk_store(out, dt, (bb * tn + i) * c + h * d + e, o * inv);
    }
}

cudaError_t tg_cuda_attention_kv(void *out, void *kcache, void *vcache, const void *qkv, tg_dtype dt, int64_t b,
                                 int64_t tn, int64_t tmax, int64_t pos, int64_t c, int n_head, cudaStream_t st)
{
    if (b < 1 || tn < 1 || c < 1 || n_head < 1) return cudaSuccess;
    kv_append<<<tgk_blocks(b * tn * c), TGK_THREADS, 0, st>>>(kcache, vcache, qkv, dt, b, tn, tmax, pos, c);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const int64_t d = c / n_head;
    const size_t shmem = (size_t)(32 + d + pos + tn) * sizeof(float);
    int dev, limit;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess) return e;
    if (shmem > (size_t)limit) return cudaErrorInvalidValue;
    if (shmem > 48 * 1024 &&
        (e = cudaFuncSetAttribute(kv_attend, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem)) != cudaSuccess)
        return e;
    const int64_t blocks = b * n_head * tn;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    kv_attend<<<(unsigned)blocks, 128, shmem, st>>>(out, kcache, vcache, qkv, dt, tn, tmax, pos, c, n_head);
    return cudaGetLastError();
}
