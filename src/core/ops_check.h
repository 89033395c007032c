/* ops_check.h — the op layers' argument checks (ops_nn.c, ops_optim.c): shapes, dtypes and devices, then one kernel issued. */
#ifndef TG_OPS_CHECK_H
#define TG_OPS_CHECK_H

#include "core/core.h"
#include "backend/backend.h"

#include <math.h>
#include <stdio.h>

/* ------------------------------------------------------------------ checks
 * Each helper returns TG_OK or sets a message "op: what" and returns TG_EINVAL.
 * Tensors appear in messages as "x [4,7] f32". */

static inline const char *desc(const tg_tensor *t, char *buf, size_t n)
{
    char sh[64];
    snprintf(buf, n, "%s %s", tg_tensor_shape_str(t, sh, sizeof sh), tg_dtype_name(t->dtype));
    return buf;
}

static inline int same_dev(const tg_tensor *a, const tg_tensor *b)
{
    tg_device x = tg_tensor_device(a), y = tg_tensor_device(b);
    return x.type == y.type && x.index == y.index;
}

static inline int float_dtype(tg_dtype dt) { return dt == TG_F32 || dt == TG_BF16; }

/* 1 when a and b share bytes of one storage (exactly the same memory included: tg_tensor_same_memory tells);
 * 0 when either is NULL. The one overlap test of the op layers. */
static inline int overlaps(const tg_tensor *a, const tg_tensor *b)
{
    if (!a || !b || a->storage != b->storage) return 0;
    size_t ea = tg_dtype_size(a->dtype), eb = tg_dtype_size(b->dtype);
    size_t a0 = (size_t)a->offset * ea, a1 = a0 + (size_t)tg_tensor_numel(a) * ea;
    size_t b0 = (size_t)b->offset * eb, b1 = b0 + (size_t)tg_tensor_numel(b) * eb;
    return a0 < b1 && b0 < a1;
}

/* a and b share no memory (an output written while the other is read, as a GEMM's D and its A). */
static inline tg_status no_overlap(const char *op, const char *an, const tg_tensor *a, const char *bn, const tg_tensor *b)
{
    char x[96], y[96];
    if (!overlaps(a, b)) return TG_OK;
    return tg_error(TG_EINVAL, "%s: %s %s and %s %s share memory", op, an, desc(a, x, sizeof x), bn, desc(b, y, sizeof y));
}

/* An elementwise output and an input: the very same memory is fine (each element is read before it is
 * written), a partial overlap is not (elements would be read after another was written over them). */
static inline tg_status no_partial_overlap(const char *op, const char *an, const tg_tensor *a, const char *bn,
                                           const tg_tensor *b)
{
    char x[96], y[96];
    if (!overlaps(a, b) || tg_tensor_same_memory(a, b)) return TG_OK;
    return tg_error(TG_EINVAL, "%s: %s %s partly overlaps %s %s (in place, an output must be its input itself)", op, an,
                    desc(a, x, sizeof x), bn, desc(b, y, sizeof y));
}

static inline tg_status need(const char *op, const char *name, const tg_tensor *t)
{
    if (!t) return tg_error(TG_EINVAL, "%s: %s is NULL", op, name);
    return TG_OK;
}

/* t is on ref's device. */
static inline tg_status on_dev(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *t)
{
    char a[32], b[32], x[96], y[96];
    if (same_dev(ref, t)) return TG_OK;
    return tg_error(TG_EINVAL, "%s: tensors on different devices (%s %s on %s vs %s %s on %s)", op, rn,
                    desc(ref, x, sizeof x), tg_device_str(tg_tensor_device(ref), a, sizeof a), name,
                    desc(t, y, sizeof y), tg_device_str(tg_tensor_device(t), b, sizeof b));
}

/* An activation: f32 or bf16, at least 1-D. */
static inline tg_status activation(const char *op, const char *name, const tg_tensor *t)
{
    char x[96];
    TG_TRY(need(op, name, t));
    if (!float_dtype(t->dtype) || t->ndim < 1)
        return tg_error(TG_EINVAL, "%s: %s %s must be an f32 or bf16 tensor", op, name, desc(t, x, sizeof x));
    return TG_OK;
}

/* b has a's shape, dtype and device. */
static inline tg_status like(const char *op, const char *an, const tg_tensor *a, const char *bn, const tg_tensor *b)
{
    char x[96], y[96];
    TG_TRY(need(op, bn, b));
    TG_TRY(on_dev(op, an, a, bn, b));
    if (!tg_tensor_same_shape(a, b) || a->dtype != b->dtype)
        return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (same shape and dtype expected)", op, an, desc(a, x, sizeof x), bn,
                        desc(b, y, sizeof y));
    return TG_OK;
}

/* v is a 1-D vector [c] of dtype dt on ref's device (dt < 0: f32 or ref's dtype, a wgrad output). */
static inline tg_status vec(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *v,
                     int64_t c, int dt)
{
    char x[96], y[96];
    TG_TRY(need(op, name, v));
    TG_TRY(on_dev(op, rn, ref, name, v));
    int dt_ok = dt >= 0 ? v->dtype == (tg_dtype)dt : (v->dtype == TG_F32 || v->dtype == ref->dtype);
    if (v->ndim != 1 || v->shape[0] != c || !dt_ok)
        return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (%s [%lld] %s expected)", op, rn, desc(ref, x, sizeof x), name,
                        desc(v, y, sizeof y), name, (long long)c,
                        dt >= 0 ? tg_dtype_name((tg_dtype)dt)
                                : ref->dtype == TG_F32 ? "f32" : "f32 or bf16");
    return TG_OK;
}

/* A wgrad output of `ndim` dims `shape`: f32 or ref's dtype. */
static inline tg_status wgrad_out(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *w,
                           int ndim, const int64_t *shape)
{
    char x[96], y[96], want[64];
    TG_TRY(need(op, name, w));
    TG_TRY(on_dev(op, rn, ref, name, w));
    int ok = w->ndim == ndim && (w->dtype == TG_F32 || w->dtype == ref->dtype);
    for (int i = 0; ok && i < ndim; i++) ok = w->shape[i] == shape[i];
    if (ok) return TG_OK;
    int k = snprintf(want, sizeof want, "[");
    for (int i = 0; i < ndim; i++) k += snprintf(want + k, sizeof want - (size_t)k, "%s%lld", i ? "," : "", (long long)shape[i]);
    snprintf(want + k, sizeof want - (size_t)k, "]");
    return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (%s %s %s expected)", op, rn, desc(ref, x, sizeof x), name,
                    desc(w, y, sizeof y), name, want, ref->dtype == TG_F32 ? "f32" : "f32 or bf16");
}

/* A per-row statistic: f32 with n elements (any shape) on ref's device. */
static inline tg_status stat(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *s,
                      int64_t n)
{
    char x[96], y[96];
    TG_TRY(need(op, name, s));
    TG_TRY(on_dev(op, rn, ref, name, s));
    if (s->dtype != TG_F32 || tg_tensor_numel(s) != n)
        return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (%s of %lld f32 expected)", op, rn, desc(ref, x, sizeof x), name,
                        desc(s, y, sizeof y), name, (long long)n);
    return TG_OK;
}

/* An index tensor: i32 with n elements on ref's device. */
static inline tg_status ids(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *t,
                     int64_t n)
{
    char x[96], y[96];
    TG_TRY(need(op, name, t));
    TG_TRY(on_dev(op, rn, ref, name, t));
    if (t->dtype != TG_I32 || tg_tensor_numel(t) != n)
        return tg_error(TG_EINVAL, "%s: %s %s vs %s %s (%s of %lld i32 expected)", op, rn, desc(ref, x, sizeof x), name,
                        desc(t, y, sizeof y), name, (long long)n);
    return TG_OK;
}

static inline tg_status finite_arg(const char *op, const char *name, double v)
{
    if (!isfinite(v)) return tg_error(TG_EINVAL, "%s: %s = %g is not finite", op, name, v);
    return TG_OK;
}

static inline tg_status kernel(const char *op, tg_stream *s, const void *fn)
{
    if (!fn) return tg_error(TG_ENOTSUP, "%s is not implemented by the %s backend", op, s->be->name);
    tg_device_count_op(s, fn == (const void *)s->be->fp8_gemm); /* the FP8 GEMM counts as a GEMM */
    return TG_OK;
}

static inline int64_t cols(const tg_tensor *t) { return t->shape[t->ndim - 1]; }
static inline int64_t rows(const tg_tensor *t) { return cols(t) ? tg_tensor_numel(t) / cols(t) : 0; }

/* The current stream of t's device, or an error. */
static inline tg_status stream_for(const char *op, const char *name, const tg_tensor *t, tg_stream **s)
{
    TG_TRY(need(op, name, t));
    *s = tg_stream_current(tg_tensor_device(t));
    if (!*s) return TG_ENOMEM; /* message set by tg_stream_current */
    return TG_OK;
}

/* Runs the checks in `checks` (a status expression chain), then the kernel; notes errors on s. */
#define ISSUE(s, op, fn, args, checks)                                                                 \
    do {                                                                                               \
        tg_status st_ = (checks);                                                                      \
        if (st_ == TG_OK) st_ = kernel(op, s, (const void *)(s)->be->fn);                              \
        if (st_ == TG_OK) st_ = (s)->be->fn(s, args);                                                  \
        return tg_stream_note_error(s, st_);                                                           \
    } while (0)

/* ISSUE for kernels that check ids (backend.h, tg_index_check): on the CPU
 * outside a capture the work has run, so a bad id fails this call (captured,
 * it fails the replay: tg_graph_replay); elsewhere it fails the device's next
 * host read. */
#define ISSUE_CHECKED(s, op, fn, args, checks)                                                         \
    do {                                                                                               \
        tg_status st_ = (checks);                                                                      \
        if (st_ == TG_OK) st_ = kernel(op, s, (const void *)(s)->be->fn);                              \
        if (st_ == TG_OK) st_ = (s)->be->fn(s, args);                                                  \
        if (st_ == TG_OK) tg_index_check_arm(s);                                                       \
        if (st_ == TG_OK && (s)->be->type == TG_CPU && !(s)->capture) st_ = tg_index_check_poll(s);    \
        return tg_stream_note_error(s, st_);                                                           \
    } while (0)

#endif
