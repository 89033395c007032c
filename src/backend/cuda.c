/* cuda.c — the CUDA backend: errors, devices and the vtable dispatching to the kernels (kernels/<op>.cu);
 * memory is cuda_alloc.c, streams, graphs and events cuda_stream.c, GEMM cuda_gemm.c. */
#include "backend/cuda_impl.h"

#include "kernels.h" /* kernels/ is not on the C include path */

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

_Static_assert((int)TGK_REDUCE_SUM == (int)TG_REDUCE_SUM && (int)TGK_REDUCE_MAX_ABS == (int)TG_REDUCE_MAX_ABS &&
                   (int)TGK_REDUCE_MAX_ABS_DIFF == (int)TG_REDUCE_MAX_ABS_DIFF &&
                   (int)TGK_REDUCE_SUMSQ == (int)TG_REDUCE_SUMSQ,
               "kernels.h reduce codes follow backend.h");
_Static_assert((int)TGK_RAND_UNIFORM == (int)TG_RAND_UNIFORM && (int)TGK_RAND_NORMAL == (int)TG_RAND_NORMAL,
               "kernels.h rand codes follow backend.h");

/* ------------------------------------------------------------------ errors */

/* "src/backend/cuda.c" rather than the build's relative path to it. */
static const char *short_path(const char *file)
{
    const char *p = strstr(file, "src/");
    return p ? p : file;
}

tg_status tg_cuda_fail(cudaError_t e, const char *file, int line, const char *expr)
{
    (void)cudaGetLastError(); /* a non-sticky error must not fail the next unrelated call */
    return tg_error(TG_EDEVICE, "%s:%d: %s: %s (%s)", short_path(file), line, expr, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

tg_status tg_cublas_fail(cublasStatus_t e, const char *file, int line, const char *expr)
{
    return tg_error(TG_EDEVICE, "%s:%d: %s: %s", short_path(file), line, expr, cublasGetStatusString(e));
}

/* ------------------------------------------------------------------ devices */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int ndevices;

static void probe(void)
{
    int n = 0;
    /* No driver or no GPU is a machine without CUDA devices, not an error. */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    ndevices = n > TG_CUDA_MAX_DEVICES ? TG_CUDA_MAX_DEVICES : n;
    tg_cuda_alloc_init();
}

static int cuda_device_count(void)
{
    pthread_once(&probe_once, probe);
    return ndevices;
}

static tg_status cuda_device_describe(int index, char *name, size_t n, size_t *total)
{
    struct cudaDeviceProp p;
    TG_CUDA_TRY(cudaGetDeviceProperties(&p, index));
    if (name && n) snprintf(name, n, "%s", p.name);
    if (total) *total = p.totalGlobalMem;
    return TG_OK;
}

/* The cudaStream_t of s, for libraries that issue work on it (NCCL). */
static void *cuda_stream_native(tg_stream *s) { return tg_cuda_stream(s); }

/* ------------------------------------------------------------------ kernels */

#define LAUNCH(s, call)                                                                                \
    do {                                                                                               \
        TG_TRY(tg_cuda_use_device((s)->dev.index));                                                            \
        TG_CUDA_TRY(call);                                                                             \
    } while (0)

static int is_float(tg_dtype dt) { return dt == TG_F32 || dt == TG_BF16; }

/* The fill value as the element's bits, converted as the CPU backend converts
 * (floats through f32; integers truncated, saturated, NaN to 0). */
static tg_status fill_bits(tg_dtype dt, double v, uint32_t *bits)
{
    float f = (float)v;
    switch (dt) {
    case TG_F32: memcpy(bits, &f, sizeof *bits); return TG_OK;
    case TG_BF16: *bits = tg_f32_to_bf16(f); return TG_OK;
    case TG_I32:
        *bits = (uint32_t)(isnan(v) ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v);
        return TG_OK;
    case TG_U16: *bits = isnan(v) ? 0 : v >= 65535.0 ? 65535 : v <= 0 ? 0 : (uint16_t)v; return TG_OK;
    case TG_E4M3:
    case TG_E5M2: *bits = tg_fp8_from_f32(dt, f); return TG_OK;
    default: return tg_error(TG_ENOTSUP, "cuda fill: dtype %s is not supported", tg_dtype_name(dt));
    }
}

static tg_status cuda_fill(tg_stream *s, const struct tg_fill_args *a)
{
    uint32_t bits = 0;
    TG_TRY(fill_bits(a->dt, a->value, &bits));
    if (tg_dtype_size(a->dt) == 1) { /* FP8: bytes */
        TG_TRY(tg_cuda_use_device(s->dev.index));
        TG_CUDA_TRY(cudaMemsetAsync(a->dst, (int)bits, (size_t)a->n, tg_cuda_stream(s)));
        return TG_OK;
    }
    LAUNCH(s, tg_cuda_fill(a->dst, tg_dtype_size(a->dt), bits, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_cast(tg_stream *s, const struct tg_cast_args *a)
{
    if (a->src_dt == TG_F16 || a->dst_dt == TG_F16)
        return tg_error(TG_ENOTSUP, "cuda cast: %s -> %s is not supported", tg_dtype_name(a->src_dt),
                        tg_dtype_name(a->dst_dt));
    if (tg_dtype_is_fp8(a->dst_dt) && is_float(a->src_dt)) { /* unscaled FP8 casts (tg_copy): the FP8 kernels */
        struct tg_fp8_cast_args c = {.x = a->src, .x_dt = a->src_dt, .y = a->dst, .y_dt = a->dst_dt, .rows = 1, .cols = a->n};
        return tg_cuda_fp8_cast_op(s, &c);
    }
    if (tg_dtype_is_fp8(a->src_dt) && is_float(a->dst_dt)) {
        struct tg_fp8_dequantize_args d = {.x = a->src, .x_dt = a->src_dt, .y = a->dst, .y_dt = a->dst_dt, .n = a->n};
        return tg_cuda_fp8_dequantize_op(s, &d);
    }
    if (tg_dtype_is_fp8(a->src_dt) || tg_dtype_is_fp8(a->dst_dt))
        return tg_error(TG_ENOTSUP, "cuda cast: %s -> %s is not supported (FP8 casts from and to f32 or bf16)",
                        tg_dtype_name(a->src_dt), tg_dtype_name(a->dst_dt));
    if (a->check) /* before the cast: src may be dst's memory */
        LAUNCH(s, tg_cuda_cast_check(&a->check->first[TG_INDEX_CAST], &a->check->limit[TG_INDEX_CAST], a->src,
                                     a->src_dt, a->dst_dt, a->n, tg_cuda_stream(s)));
    LAUNCH(s, tg_cuda_cast(a->src, a->src_dt, a->dst, a->dst_dt, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_binary(tg_stream *s, const struct tg_binary_args *a)
{
    if (!is_float(a->dt)) return tg_error(TG_ENOTSUP, "cuda binary: dtype %s is not supported", tg_dtype_name(a->dt));
    LAUNCH(s, tg_cuda_binary(a->op, a->a, a->b, a->out, a->dt, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_axpby(tg_stream *s, const struct tg_axpby_args *a)
{
    if (!is_float(a->dt)) return tg_error(TG_ENOTSUP, "cuda axpby: dtype %s is not supported", tg_dtype_name(a->dt));
    LAUNCH(s, tg_cuda_axpby(a->x, a->y, a->dt, a->n, a->alpha, a->beta, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_reduce(tg_stream *s, const struct tg_reduce_args *a)
{
    if (!is_float(a->dt)) return tg_error(TG_ENOTSUP, "cuda reduce: dtype %s is not supported", tg_dtype_name(a->dt));
    double *parts;
    TG_TRY(tg_cuda_reduce_scratch(s, &parts));
    LAUNCH(s, tg_cuda_reduce(a->op, a->a, a->b, a->dt, a->n, a->out, parts, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_rand(tg_stream *s, const struct tg_rand_args *a)
{
    if (!is_float(a->dt)) return tg_error(TG_ENOTSUP, "cuda rand: dtype %s is not supported", tg_dtype_name(a->dt));
    LAUNCH(s, tg_cuda_rand(a->dst, a->dt, a->n, a->dist, a->a, a->b, a->seed, a->offset, tg_cuda_stream(s)));
    return TG_OK;
}

/* ------------------------------------------------------------------ transformer kernels (kernels/<op>.cu) */

static tg_status float_only(const char *what, tg_dtype dt)
{
    if (is_float(dt)) return TG_OK;
    return tg_error(TG_ENOTSUP, "cuda %s: dtype %s is not supported", what,
                    (unsigned)dt < TG_DTYPE_COUNT ? tg_dtype_name(dt) : "(invalid)");
}

/* A kernel that needs the stream's scratch: a failure there is a size limit, said plainly. */
#define LAUNCH_SCRATCH(s, what, call)                                                                  \
    do {                                                                                               \
        TG_TRY(tg_cuda_use_device((s)->dev.index));                                                            \
        cudaError_t e_ = (call);                                                                       \
        if (e_ == cudaErrorInvalidValue)                                                               \
            return tg_error(TG_ENOTSUP, "cuda %s: the shapes exceed the kernel's limits or its %zu MiB scratch", \
                            what, TG_CUDA_NN_SCRATCH >> 20);                                           \
        if (e_ != cudaSuccess) return tg_cuda_fail(e_, __FILE__, __LINE__, #call);                     \
    } while (0)

static tg_status cuda_layernorm_forward(tg_stream *s, const struct tg_layernorm_forward_args *a)
{
    TG_TRY(float_only("layernorm_forward", a->dt));
    LAUNCH(s, tg_cuda_layernorm_forward(a->y, a->mean, a->rstd, a->x, a->gamma, a->beta, a->dt, a->n, a->c, a->eps,
                                        tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_layernorm_backward(tg_stream *s, const struct tg_layernorm_backward_args *a)
{
    TG_TRY(float_only("layernorm_backward", a->dt));
    LAUNCH(s, tg_cuda_layernorm_backward(a->dx, a->dy, a->dres, a->x, a->gamma, a->mean, a->rstd, a->dt, a->n, a->c,
                                         tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_layernorm_backward_dw(tg_stream *s, const struct tg_layernorm_backward_dw_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("layernorm_backward_dw", a->dt));
    TG_TRY(float_only("layernorm_backward_dw", a->dw_dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "layernorm_backward_dw",
                   tg_cuda_layernorm_backward_dw(a->dgamma, a->dbeta, a->dy, a->x, a->mean, a->rstd, a->dt, a->dw_dt,
                                                 a->n, a->c, a->accumulate, scr, bytes, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_rmsnorm_forward(tg_stream *s, const struct tg_rmsnorm_forward_args *a)
{
    TG_TRY(float_only("rmsnorm_forward", a->dt));
    LAUNCH(s, tg_cuda_rmsnorm_forward(a->y, a->rstd, a->x, a->gamma, a->dt, a->n, a->c, a->eps, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_rmsnorm_backward(tg_stream *s, const struct tg_rmsnorm_backward_args *a)
{
    TG_TRY(float_only("rmsnorm_backward", a->dt));
    LAUNCH(s, tg_cuda_rmsnorm_backward(a->dx, a->dy, a->dres, a->x, a->gamma, a->rstd, a->dt, a->n, a->c,
                                       tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_rmsnorm_backward_dw(tg_stream *s, const struct tg_rmsnorm_backward_dw_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("rmsnorm_backward_dw", a->dt));
    TG_TRY(float_only("rmsnorm_backward_dw", a->dw_dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "rmsnorm_backward_dw",
                   tg_cuda_rmsnorm_backward_dw(a->dgamma, a->dy, a->x, a->rstd, a->dt, a->dw_dt, a->n, a->c,
                                               a->accumulate, scr, bytes, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_gelu_forward(tg_stream *s, const struct tg_gelu_forward_args *a)
{
    TG_TRY(float_only("gelu_forward", a->dt));
    LAUNCH(s, tg_cuda_gelu_forward(a->y, a->x, a->dt, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_gelu_backward(tg_stream *s, const struct tg_gelu_backward_args *a)
{
    TG_TRY(float_only("gelu_backward", a->dt));
    LAUNCH(s, tg_cuda_gelu_backward(a->dx, a->dy, a->x, a->dt, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_swiglu_forward(tg_stream *s, const struct tg_swiglu_forward_args *a)
{
    TG_TRY(float_only("swiglu_forward", a->dt));
    LAUNCH(s, tg_cuda_swiglu_forward(a->y, a->x, a->dt, a->n, a->h, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_swiglu_backward(tg_stream *s, const struct tg_swiglu_backward_args *a)
{
    TG_TRY(float_only("swiglu_backward", a->dt));
    LAUNCH(s, tg_cuda_swiglu_backward(a->dx, a->dy, a->x, a->dt, a->n, a->h, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_bias_add(tg_stream *s, const struct tg_bias_add_args *a)
{
    TG_TRY(float_only("bias_add", a->dt));
    LAUNCH(s, tg_cuda_bias_add(a->y, a->bias, a->dt, a->n, a->c, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_bias_backward_dw(tg_stream *s, const struct tg_bias_backward_dw_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("bias_backward_dw", a->dt));
    TG_TRY(float_only("bias_backward_dw", a->dw_dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "bias_backward_dw",
                   tg_cuda_bias_backward_dw(a->dbias, a->dy, a->dt, a->dw_dt, a->n, a->c, a->accumulate, scr, bytes,
                                            tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_attention_forward(tg_stream *s, const struct tg_attention_forward_args *a)
{
    TG_TRY(float_only("attention_forward", a->dt));
    LAUNCH_SCRATCH(s, "attention_forward",
                   tg_cuda_attention_forward(a->out, a->lse, a->qkv, a->dt, a->b, a->t, a->c, a->n_head,
                                             tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_attention_kv(tg_stream *s, const struct tg_attention_kv_args *a)
{
    TG_TRY(float_only("attention_kv", a->dt));
    LAUNCH_SCRATCH(s, "attention_kv",
                   tg_cuda_attention_kv(a->out, a->kcache, a->vcache, a->qkv, a->dt, a->b, a->tn, a->tmax, a->pos,
                                        a->c, a->n_head, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_attention_backward(tg_stream *s, const struct tg_attention_backward_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("attention_backward", a->dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "attention_backward",
                   tg_cuda_attention_backward(a->dqkv, a->dout, a->out, a->qkv, a->lse, a->dt, a->b, a->t, a->c,
                                              a->n_head, scr, bytes, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_embedding_forward(tg_stream *s, const struct tg_embedding_forward_args *a)
{
    TG_TRY(float_only("embedding_forward", a->dt));
    LAUNCH(s, tg_cuda_embedding_forward(a->out, a->idx, a->wte, a->wpe, a->dt, a->b, a->t, a->c, a->v,
                                        tg_cuda_stream(s)));
    if (a->check)
        LAUNCH(s, tg_cuda_index_check(&a->check->first[TG_INDEX_EMBEDDING], &a->check->limit[TG_INDEX_EMBEDDING], a->idx,
                                      a->b * a->t, a->v, 0, 0, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_embedding_backward_dw(tg_stream *s, const struct tg_embedding_backward_dw_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("embedding_backward_dw", a->dt));
    if (a->dwte) TG_TRY(float_only("embedding_backward_dw", a->dwte_dt));
    if (a->dwpe) TG_TRY(float_only("embedding_backward_dw", a->dwpe_dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "embedding_backward_dw",
                   tg_cuda_embedding_backward_dw(a->dwte, a->dwpe, a->dout, a->idx, a->dt, a->dwte_dt, a->dwpe_dt, a->b,
                                                 a->t, a->c, a->v, a->tmax, a->accumulate, scr, bytes,
                                                 tg_cuda_stream(s)));
    if (a->check && a->dwte)
        LAUNCH(s, tg_cuda_index_check(&a->check->first[TG_INDEX_EMBEDDING], &a->check->limit[TG_INDEX_EMBEDDING], a->idx,
                                      a->b * a->t, a->v, 0, 0, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_cross_entropy_forward(tg_stream *s, const struct tg_cross_entropy_forward_args *a)
{
    TG_TRY(float_only("cross_entropy_forward", a->dt));
    LAUNCH(s, tg_cuda_cross_entropy_forward(a->loss, a->losses, a->logits, a->targets, a->dt, a->n, a->v,
                                            a->ignore_index, tg_cuda_stream(s)));
    if (a->check)
        LAUNCH(s, tg_cuda_index_check(&a->check->first[TG_INDEX_TARGET], &a->check->limit[TG_INDEX_TARGET], a->targets,
                                      a->n, a->v, 1, a->ignore_index, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_cross_entropy_backward(tg_stream *s, const struct tg_cross_entropy_backward_args *a)
{
    TG_TRY(float_only("cross_entropy_backward", a->dt));
    LAUNCH(s, tg_cuda_cross_entropy_backward(a->dlogits, a->logits, a->targets, a->loss, a->dt, a->n, a->v, a->dloss,
                                             a->ignore_index, tg_cuda_stream(s)));
    if (a->check)
        LAUNCH(s, tg_cuda_index_check(&a->check->first[TG_INDEX_TARGET], &a->check->limit[TG_INDEX_TARGET], a->targets,
                                      a->n, a->v, 1, a->ignore_index, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_cross_entropy_fused(tg_stream *s, const struct tg_cross_entropy_fused_args *a)
{
    TG_TRY(float_only("cross_entropy_fused", a->dt));
    LAUNCH(s, tg_cuda_cross_entropy_fused(a->losses, a->dlogits, a->logits, a->targets, a->loss, a->dt, a->n, a->v,
                                          a->dloss, a->ignore_index, tg_cuda_stream(s)));
    if (a->check)
        LAUNCH(s, tg_cuda_index_check(&a->check->first[TG_INDEX_TARGET], &a->check->limit[TG_INDEX_TARGET], a->targets,
                                      a->n, a->v, 1, a->ignore_index, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_cross_entropy_mean(tg_stream *s, const struct tg_cross_entropy_mean_args *a)
{
    LAUNCH(s, tg_cuda_cross_entropy_mean(a->loss, a->losses, a->targets, a->n, a->ignore_index, tg_cuda_stream(s)));
    if (a->check)
        LAUNCH(s, tg_cuda_index_check(&a->check->first[TG_INDEX_TARGET], &a->check->limit[TG_INDEX_TARGET], a->targets,
                                      a->n, a->v, 1, a->ignore_index, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_adamw(tg_stream *s, const struct tg_adamw_args *a)
{
    TG_TRY(float_only("adamw", a->g_dt));
    LAUNCH(s, tg_cuda_adamw(a->p, a->m, a->v, a->p_lowp, a->g, a->g_dt, a->n, a->lr, a->beta1, a->beta2, a->eps,
                            a->weight_decay, a->grad_scale, a->step, a->lr_dev, a->step_dev, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_fp8_scale_update(tg_stream *s, const struct tg_fp8_scale_update_args *a)
{
    LAUNCH(s, tg_cuda_fp8_scale_update(a->history, a->scale, a->scale_inv, a->len, a->n, a->most_recent, a->margin_div,
                                       a->fp8_max, tg_cuda_stream(s)));
    return TG_OK;
}
_Static_assert(TGK_FP8_MAX_ROLES == TG_FP8_MAX_ROLES, "kernels.h TGK_FP8_MAX_ROLES follows backend.h");

static tg_status cuda_adamw_count(tg_stream *s, const struct tg_adamw_count_args *a)
{
    LAUNCH(s, tg_cuda_adamw_count(a->step, a->check ? &a->check->first[TG_INDEX_STEP] : NULL, tg_cuda_stream(s)));
    return TG_OK;
}

/* The kernels take backend.h's tables as they are (kernels.h cannot include backend.h). */
_Static_assert(sizeof(struct tgk_adamw_tensor) == sizeof(struct tg_adamw_multi_tensor) &&
                   offsetof(struct tgk_adamw_tensor, p_lowp) == offsetof(struct tg_adamw_multi_tensor, p_lowp) &&
                   offsetof(struct tgk_adamw_tensor, g) == offsetof(struct tg_adamw_multi_tensor, g) &&
                   offsetof(struct tgk_adamw_tensor, n) == offsetof(struct tg_adamw_multi_tensor, n) &&
                   offsetof(struct tgk_adamw_tensor, g_dt) == offsetof(struct tg_adamw_multi_tensor, g_dt) &&
                   offsetof(struct tgk_adamw_tensor, weight_decay) == offsetof(struct tg_adamw_multi_tensor, weight_decay),
               "kernels.h tgk_adamw_tensor follows backend.h");
_Static_assert(sizeof(struct tgk_sumsq_tensor) == sizeof(struct tg_sumsq_multi_tensor) &&
                   offsetof(struct tgk_sumsq_tensor, n) == offsetof(struct tg_sumsq_multi_tensor, n) &&
                   offsetof(struct tgk_sumsq_tensor, dt) == offsetof(struct tg_sumsq_multi_tensor, dt),
               "kernels.h tgk_sumsq_tensor follows backend.h");

static tg_status cuda_adamw_multi(tg_stream *s, const struct tg_adamw_multi_args *a)
{
    for (int k = 0; k < a->ntensors; k++) TG_TRY(float_only("adamw_multi", a->t[k].g_dt));
    LAUNCH(s, tg_cuda_adamw_multi((const struct tgk_adamw_tensor *)a->t, a->ntensors, a->lr, a->beta1, a->beta2,
                                  a->eps, a->grad_scale, a->step, a->clip_sumsq, a->max_norm, a->lr_dev,
                                  a->step_dev, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_sumsq_multi(tg_stream *s, const struct tg_sumsq_multi_args *a)
{
    double *parts;
    for (int k = 0; k < a->ntensors; k++) TG_TRY(float_only("sumsq_multi", a->t[k].dt));
    TG_TRY(tg_cuda_reduce_scratch(s, &parts));
    LAUNCH(s, tg_cuda_sumsq_multi((const struct tgk_sumsq_tensor *)a->t, a->ntensors, a->out, parts,
                                  tg_cuda_stream(s)));
    return TG_OK;
}

_Static_assert(sizeof(struct tgk_zero_buf) == sizeof(struct tg_zero_multi_buf) &&
                   offsetof(struct tgk_zero_buf, bytes) == offsetof(struct tg_zero_multi_buf, bytes),
               "kernels.h tgk_zero_buf follows backend.h");

static tg_status cuda_zero_multi(tg_stream *s, const struct tg_zero_multi_args *a)
{
    LAUNCH(s, tg_cuda_zero_multi((const struct tgk_zero_buf *)a->t, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

_Static_assert(sizeof(struct tgk_copy_pair) == sizeof(struct tg_copy_multi_pair) &&
                   offsetof(struct tgk_copy_pair, n) == offsetof(struct tg_copy_multi_pair, n) &&
                   offsetof(struct tgk_copy_pair, src_dt) == offsetof(struct tg_copy_multi_pair, src_dt),
               "kernels.h tgk_copy_pair follows backend.h");

static tg_status cuda_copy_multi(tg_stream *s, const struct tg_copy_multi_args *a)
{
    LAUNCH(s, tg_cuda_copy_multi((const struct tgk_copy_pair *)a->t, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

const struct tg_backend tg_backend_cuda = {
    .name = "cuda",
    .type = TG_CUDA,
    .device_count = cuda_device_count,
    .device_describe = cuda_device_describe,
    .use_device = tg_cuda_use_device,
    .alloc = tg_cuda_alloc,
    .free = tg_cuda_free,
    .memcpy = tg_cuda_memcpy,
    .stream_init = tg_cuda_stream_init,
    .stream_destroy = tg_cuda_stream_destroy,
    .stream_sync = tg_cuda_stream_sync,
    .stream_native = cuda_stream_native,
    .capture_begin = tg_cuda_capture_begin,
    .capture_end = tg_cuda_capture_end,
    .graph_replay = tg_cuda_graph_replay,
    .graph_destroy = tg_cuda_graph_destroy,
    .event_init = tg_cuda_event_init,
    .event_destroy = tg_cuda_event_destroy,
    .event_record = tg_cuda_event_record,
    .stream_wait_event = tg_cuda_stream_wait_event,
    .event_query = tg_cuda_event_query,
    .event_sync = tg_cuda_event_sync,
    .event_elapsed = tg_cuda_event_elapsed,
    .fill = cuda_fill,
    .cast = cuda_cast,
    .binary = cuda_binary,
    .axpby = cuda_axpby,
    .gemm = tg_cuda_gemm,
    .reduce = cuda_reduce,
    .rand = cuda_rand,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .layernorm_backward_dw = cuda_layernorm_backward_dw,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .rmsnorm_backward_dw = cuda_rmsnorm_backward_dw,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .bias_add = cuda_bias_add,
    .bias_backward_dw = cuda_bias_backward_dw,
    .attention_forward = cuda_attention_forward,
    .attention_kv = cuda_attention_kv,
    .attention_backward = cuda_attention_backward,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward_dw = cuda_embedding_backward_dw,
    .cross_entropy_forward = cuda_cross_entropy_forward,
    .cross_entropy_backward = cuda_cross_entropy_backward,
    .cross_entropy_fused = cuda_cross_entropy_fused,
    .cross_entropy_mean = cuda_cross_entropy_mean,
    .adamw = cuda_adamw,
    .adamw_multi = cuda_adamw_multi,
    .adamw_count = cuda_adamw_count,
    .sumsq_multi = cuda_sumsq_multi,
    .fp8_scale_update = cuda_fp8_scale_update,
    .zero_multi = cuda_zero_multi,
    .copy_multi = cuda_copy_multi,
    .fp8_cast = tg_cuda_fp8_cast_op,
    .fp8_cast_gelu = tg_cuda_fp8_cast_gelu_op,
    .layernorm_forward_fp8 = tg_cuda_layernorm_forward_fp8_op,
    .fp8_dbias = tg_cuda_fp8_dbias_op,
    .fp8_transpose = tg_cuda_fp8_transpose_op,
    .fp8_dequantize = tg_cuda_fp8_dequantize_op,
    .fp8_amax = tg_cuda_fp8_amax_op,
    .fp8_gemm = tg_cuda_fp8_gemm_op,
};
