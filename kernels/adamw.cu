/* adamw.cu — fused AdamW step on f32 master weights (optional bf16 copy), in double as the CPU reference; one tensor or many per launch. */
#include "common.cuh"

#include <stdlib.h>

/* One element's update: the same operations in the same order as the CPU's adamw_tensor. */
static __device__ __forceinline__ void adamw_elem(float &p, float &m, float &v, float g, double lr, double b1,
                                                  double b2, double eps, double wd, double gs, double bc1, double bc2)
{
    const double gi = gs * g;
    const double mi = b1 * m + (1.0 - b1) * gi, vi = b2 * v + (1.0 - b2) * gi * gi;
    double w = p;
    w -= lr * (mi / bc1 / (sqrt(vi / bc2) + eps) + wd * w);
    m = (float)mi;
    v = (float)vi;
    p = (float)w;
}

/* A capturable step's lr and bias corrections from the device values, read when
 * the kernel runs (a replay sees those of its time); as the host computes them.
 * false for a count below 1 (never advanced): the step then changes nothing,
 * where the bias correction 1 - b^0 = 0 would divide by zero. */
static __device__ __forceinline__ bool adamw_sched(const float *lr_dev, const int32_t *step_dev, double b1, double b2,
                                                   double &lr, double &bc1, double &bc2)
{
    lr = *lr_dev;
    const int32_t step = *step_dev;
    const double t = (double)step;
    bc1 = 1.0 - pow(b1, t);
    bc2 = 1.0 - pow(b2, t);
    return step >= 1;
}

/* DEV: lr and step from lr_dev / step_dev (capturable), else the host's lr, bc1, bc2. */
template <bool DEV>
static __global__ void adamw_kernel(float *p, float *m, float *v, uint16_t *p_lowp, const void *g, tg_dtype g_dt,
                                    int64_t n, double lr, double b1, double b2, double eps, double wd, double gs,
                                    double bc1, double bc2, const float *lr_dev, const int32_t *step_dev)
{
    if (DEV && !adamw_sched(lr_dev, step_dev, b1, b2, lr, bc1, bc2)) return; /* the same value in every thread */
    TGK_GRID_STRIDE(i, n)
    {
        float pi = p[i], mi = m[i], vi = v[i];
        adamw_elem(pi, mi, vi, tgk_load(g, g_dt, i), lr, b1, b2, eps, wd, gs, bc1, bc2);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (p_lowp) p_lowp[i] = tgk_f32_to_bf16(pi);
    }
}

extern "C" cudaError_t tg_cuda_adamw(float *p, float *m, float *v, uint16_t *p_lowp, const void *g, tg_dtype g_dt,
                                     int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                                     float grad_scale, int64_t step, const float *lr_dev, const int32_t *step_dev,
                                     cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    const double b1 = beta1, b2 = beta2;
    if (lr_dev) {
        adamw_kernel<true><<<tgk_blocks(n), TGK_THREADS, 0, st>>>(p, m, v, p_lowp, g, g_dt, n, 0.0, b1, b2, eps,
                                                                  weight_decay, grad_scale, 1.0, 1.0, lr_dev,
                                                                  step_dev);
        return cudaGetLastError();
    }
    const double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
    adamw_kernel<false><<<tgk_blocks(n), TGK_THREADS, 0, st>>>(p, m, v, p_lowp, g, g_dt, n, lr, b1, b2, eps,
                                                               weight_decay, grad_scale, bc1, bc2, NULL, NULL);
    return cudaGetLastError();
}

/* The capturable optimizer's step count, advanced on the device once per step
 * (a separate launch: every block of the updates after it reads the new value). */
static __global__ void adamw_count_kernel(int32_t *step, unsigned long long *first)
{
    if (*step < INT32_MAX) *step += 1;
    else if (first) atomicMin(first, (unsigned long long)(uint32_t)*step); /* stays: noted, never wraps */
}

extern "C" cudaError_t tg_cuda_adamw_count(int32_t *step, unsigned long long *first, cudaStream_t st)
{
    adamw_count_kernel<<<1, 1, 0, st>>>(step, first);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------ many tensors per launch
 * The table travels in the kernel parameters (__grid_constant__: read in place
 * from the parameter bank, never copied per thread). CUDA 12.1 raised that
 * space from 4 KiB to 32 KiB; a group is as many tensors as fit. */
#if CUDART_VERSION >= 12010
#define ADAMW_GROUP 256 /* 60 bytes a tensor: 15 KiB */
#else
#define ADAMW_GROUP 48
#endif
#define ADAMW_CHUNK 8192 /* elements per block: 256 threads x 8 vectors of 4 */

struct adamw_table {
    int ntensors;
    int chunk_start[ADAMW_GROUP + 1]; /* block b updates chunk b - chunk_start[k] of tensor k */
    struct tgk_adamw_tensor t[ADAMW_GROUP];
    double lr, b1, b2, eps, bc1, bc2, grad_scale, max_norm;
    const float *clip_sumsq;
    const float *lr_dev;     /* capturable: lr and step read here (then lr, bc1, bc2 unused) */
    const int32_t *step_dev;
};

static __device__ __forceinline__ int aligned(const void *p, unsigned bytes)
{
    return ((uintptr_t)p & (bytes - 1)) == 0;
}

template <bool DEV> static __global__ void adamw_multi_kernel(const __grid_constant__ struct adamw_table tab)
{
    double lr = tab.lr, bc1 = tab.bc1, bc2 = tab.bc2;
    if (DEV && !adamw_sched(tab.lr_dev, tab.step_dev, tab.b1, tab.b2, lr, bc1, bc2)) return; /* uniform */
    double gs = tab.grad_scale;
    if (tab.clip_sumsq) { /* optim.clip_factor of sqrt(sumsq), decided here so the host never reads the norm */
        const double norm = sqrt((double)*tab.clip_sumsq);
        if (!isfinite(norm)) return; /* a non-finite gradient: the step changes nothing */
        const double f = norm <= tab.max_norm ? 1.0 : tab.max_norm / (norm + 1e-6);
        gs = (double)(float)(gs * f); /* rounded as tg_adamw_step's grad_scale is */
    }
    const int b = (int)blockIdx.x;
    const int lo = tgk_item_owner(tab.chunk_start, tab.ntensors, b);
    const struct tgk_adamw_tensor &t = tab.t[lo];
    const int64_t first = (int64_t)(b - tab.chunk_start[lo]) * ADAMW_CHUNK;
    const int64_t last = first + ADAMW_CHUNK < t.n ? first + ADAMW_CHUNK : t.n;
    const double wd = t.weight_decay;
    const int bf16 = t.g_dt == TG_BF16;
    int64_t i = first;
    /* 4 elements a thread per iteration when every buffer is aligned for it (first is a multiple of 4) */
    if (aligned(t.p, 16) && aligned(t.m, 16) && aligned(t.v, 16) && aligned(t.g, bf16 ? 8 : 16) &&
        (!t.p_lowp || aligned(t.p_lowp, 8))) {
        const int64_t vend = first + (last - first) / 4 * 4;
        for (int64_t j = first + 4 * (int64_t)threadIdx.x; j < vend; j += 4 * (int64_t)blockDim.x) {
            float4 p4 = *(const float4 *)(t.p + j), m4 = *(const float4 *)(t.m + j), v4 = *(const float4 *)(t.v + j);
            float g4[4];
            if (bf16) {
                const ushort4 h = *(const ushort4 *)((const uint16_t *)t.g + j);
                g4[0] = tgk_bf16_to_f32(h.x), g4[1] = tgk_bf16_to_f32(h.y);
                g4[2] = tgk_bf16_to_f32(h.z), g4[3] = tgk_bf16_to_f32(h.w);
            } else {
                const float4 f = *(const float4 *)((const float *)t.g + j);
                g4[0] = f.x, g4[1] = f.y, g4[2] = f.z, g4[3] = f.w;
            }
            adamw_elem(p4.x, m4.x, v4.x, g4[0], lr, tab.b1, tab.b2, tab.eps, wd, gs, bc1, bc2);
            adamw_elem(p4.y, m4.y, v4.y, g4[1], lr, tab.b1, tab.b2, tab.eps, wd, gs, bc1, bc2);
            adamw_elem(p4.z, m4.z, v4.z, g4[2], lr, tab.b1, tab.b2, tab.eps, wd, gs, bc1, bc2);
            adamw_elem(p4.w, m4.w, v4.w, g4[3], lr, tab.b1, tab.b2, tab.eps, wd, gs, bc1, bc2);
            *(float4 *)(t.p + j) = p4;
            *(float4 *)(t.m + j) = m4;
            *(float4 *)(t.v + j) = v4;
            if (t.p_lowp)
                *(ushort4 *)(t.p_lowp + j) = make_ushort4(tgk_f32_to_bf16(p4.x), tgk_f32_to_bf16(p4.y),
                                                          tgk_f32_to_bf16(p4.z), tgk_f32_to_bf16(p4.w));
        }
        i = vend;
    }
    for (int64_t j = i + threadIdx.x; j < last; j += blockDim.x) {
        float pj = t.p[j], mj = t.m[j], vj = t.v[j];
        adamw_elem(pj, mj, vj, tgk_load(t.g, t.g_dt, j), lr, tab.b1, tab.b2, tab.eps, wd, gs, bc1, bc2);
        t.m[j] = mj;
        t.v[j] = vj;
        t.p[j] = pj;
        if (t.p_lowp) t.p_lowp[j] = tgk_f32_to_bf16(pj);
    }
}

extern "C" cudaError_t tg_cuda_adamw_multi(const struct tgk_adamw_tensor *t, int ntensors, float lr, float beta1,
                                           float beta2, float eps, float grad_scale, int64_t step,
                                           const float *clip_sumsq, double max_norm, const float *lr_dev,
                                           const int32_t *step_dev, cudaStream_t st)
{
    struct adamw_table *x = (struct adamw_table *)malloc(sizeof *x); /* 15 KiB: kept off small thread stacks */
    if (!x) return cudaErrorMemoryAllocation;
    const double b1 = beta1, b2 = beta2;
    x->lr = lr, x->b1 = b1, x->b2 = b2, x->eps = eps, x->grad_scale = grad_scale, x->max_norm = max_norm;
    if (lr_dev) x->bc1 = x->bc2 = 1.0; /* unused: the kernel computes them from *step_dev */
    else x->bc1 = 1.0 - pow(b1, (double)step), x->bc2 = 1.0 - pow(b2, (double)step);
    x->clip_sumsq = clip_sumsq;
    x->lr_dev = lr_dev, x->step_dev = step_dev;
    cudaError_t e = cudaSuccess;
    for (int k0 = 0; k0 < ntensors && e == cudaSuccess; k0 += ADAMW_GROUP) {
        int n = 0;
        int64_t blocks = 0;
        for (int k = k0; k < ntensors && k < k0 + ADAMW_GROUP; k++) {
            if (t[k].n <= 0) continue; /* no block would find it */
            x->t[n] = t[k];
            x->chunk_start[n++] = (int)blocks;
            blocks += (t[k].n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
        }
        if (blocks > 0x7fffffff) {
            e = cudaErrorInvalidValue;
            break;
        }
        x->ntensors = n;
        x->chunk_start[n] = (int)blocks;
        if (blocks == 0) continue;
        if (lr_dev) adamw_multi_kernel<true><<<(unsigned)blocks, TGK_THREADS, 0, st>>>(*x);
        else adamw_multi_kernel<false><<<(unsigned)blocks, TGK_THREADS, 0, st>>>(*x);
        e = cudaGetLastError();
    }
    free(x);
    return e;
}
