/* ops_optim.c — the optimizer op layer (AdamW, multi-tensor sum of squares and zeroing): checks, then one backend kernel on the current stream. */
#include "core/ops_optim.h"
#include "core/ops_check.h"

#include <math.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ optimizer */
/* The device scalar a multi-tensor op reads or writes: (1) f32 on ref's device. */
static tg_status scalar_check(const char *op, const char *name, const tg_tensor *t, const char *rn, const tg_tensor *ref)
{
    char x[96];
    TG_TRY(need(op, name, t));
    TG_TRY(on_dev(op, rn, ref, name, t));
    if (t->dtype != TG_F32 || tg_tensor_numel(t) != 1)
        return tg_error(TG_EINVAL, "%s: %s %s must hold one f32", op, name, desc(t, x, sizeof x));
    return TG_OK;
}

/* A capturable optimizer's device lr (1) f32 and step count (1) i32, both on p's
 * device (ref names p: "p" or "param 1 p"). */
static tg_status sched_check(const char *op, const char *rn, const tg_tensor *ref, const tg_tensor *lr,
                             const tg_tensor *step)
{
    char x[96];
    TG_TRY(scalar_check(op, "lr", lr, rn, ref));
    TG_TRY(need(op, "step", step));
    TG_TRY(on_dev(op, rn, ref, "step", step));
    if (step->dtype != TG_I32 || tg_tensor_numel(step) != 1)
        return tg_error(TG_EINVAL, "%s: step %s must hold one i32 (the step count)", op, desc(step, x, sizeof x));
    return TG_OK;
}

/* One parameter's tensors (op may name the parameter: "adamw_multi: param 3"). */
static tg_status adamw_tensors_check(const char *op, const tg_tensor *p, const tg_tensor *p_lowp, const tg_tensor *g,
                                     const tg_tensor *m, const tg_tensor *v)
{
    char x[96], y[96];
    TG_TRY(need(op, "p", p));
    if (p->dtype != TG_F32) return tg_error(TG_EINVAL, "%s: p %s must be f32 (master weights)", op, desc(p, x, sizeof x));
    TG_TRY(like(op, "p", p, "m", m));
    TG_TRY(like(op, "p", p, "v", v));
    TG_TRY(need(op, "g", g));
    TG_TRY(on_dev(op, "p", p, "g", g));
    if (!tg_tensor_same_shape(p, g) || !float_dtype(g->dtype))
        return tg_error(TG_EINVAL, "%s: p %s vs g %s (g of p's shape, f32 or bf16, expected)", op, desc(p, x, sizeof x),
                        desc(g, y, sizeof y));
    if (p_lowp) {
        TG_TRY(on_dev(op, "p", p, "p_lowp", p_lowp));
        if (!tg_tensor_same_shape(p, p_lowp) || p_lowp->dtype != TG_BF16)
            return tg_error(TG_EINVAL, "%s: p %s vs p_lowp %s (bf16 of p's shape expected)", op, desc(p, x, sizeof x),
                            desc(p_lowp, y, sizeof y));
    }
    return TG_OK;
}

static tg_status adamw_hyper_check(const char *op, double lr, double beta1, double beta2, double eps, int64_t step,
                                   double grad_scale)
{
    TG_TRY(finite_arg(op, "lr", lr));
    TG_TRY(finite_arg(op, "grad_scale", grad_scale));
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
        return tg_error(TG_EINVAL, "%s: beta1 = %g and beta2 = %g must be in [0, 1)", op, beta1, beta2);
    if (!(eps > 0) || !isfinite(eps)) return tg_error(TG_EINVAL, "%s: eps = %g must be finite and > 0", op, eps);
    if (step < 1) return tg_error(TG_EINVAL, "%s: step = %lld must be >= 1", op, (long long)step);
    return TG_OK;
}

static tg_status adamw_check(const char *op, tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m,
                             tg_tensor *v, double lr, double beta1, double beta2, double eps, double weight_decay,
                             int64_t step, double grad_scale)
{
    TG_TRY(adamw_tensors_check(op, p, p_lowp, g, m, v));
    TG_TRY(finite_arg(op, "lr", lr));
    TG_TRY(finite_arg(op, "weight_decay", weight_decay));
    return adamw_hyper_check(op, lr, beta1, beta2, eps, step, grad_scale);
}

/* tg_adamw_step, with lr and step read on the device when lr_t is given. */
static tg_status adamw_step_issue(const char *op, tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m,
                                  tg_tensor *v, double lr, const tg_tensor *lr_t, int64_t step, const tg_tensor *step_t,
                                  double beta1, double beta2, double eps, double weight_decay, double grad_scale)
{
    tg_stream *s;
    TG_TRY(stream_for(op, "p", p, &s));
    tg_status st = adamw_check(op, p, p_lowp, g, m, v, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    if (st == TG_OK && lr_t) st = sched_check(op, "p", p, lr_t, step_t);
    struct tg_adamw_args a = {0};
    if (st == TG_OK)
        a = (struct tg_adamw_args){.p = tg_tensor_data(p), .m = tg_tensor_data(m), .v = tg_tensor_data(v),
                                   .p_lowp = p_lowp ? tg_tensor_data(p_lowp) : NULL, .g = tg_tensor_data(g),
                                   .g_dt = g->dtype, .n = tg_tensor_numel(p), .lr = (float)lr, .beta1 = (float)beta1,
                                   .beta2 = (float)beta2, .eps = (float)eps, .weight_decay = (float)weight_decay,
                                   .grad_scale = (float)grad_scale, .step = step,
                                   .lr_dev = lr_t ? tg_tensor_data(lr_t) : NULL,
                                   .step_dev = lr_t ? tg_tensor_data(step_t) : NULL};
    ISSUE(s, op, adamw, &a, st);
}

tg_status tg_adamw_step(tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m, tg_tensor *v, double lr,
                        double beta1, double beta2, double eps, double weight_decay, int64_t step, double grad_scale)
{
    return adamw_step_issue("adamw_step", p, p_lowp, g, m, v, lr, NULL, step, NULL, beta1, beta2, eps, weight_decay,
                            grad_scale);
}

tg_status tg_adamw_step_dev(tg_tensor *p, tg_tensor *p_lowp, const tg_tensor *g, tg_tensor *m, tg_tensor *v,
                            const tg_tensor *lr, const tg_tensor *step, double beta1, double beta2, double eps,
                            double weight_decay, double grad_scale)
{
    const char *op = "adamw_step";
    if (!lr || !step) return tg_error(TG_EINVAL, "%s: capturable: both lr and step tensors are required", op);
    /* 0 and 1 stand for the device values in the host checks */
    return adamw_step_issue(op, p, p_lowp, g, m, v, 0.0, lr, 1, step, beta1, beta2, eps, weight_decay, grad_scale);
}

tg_status tg_adamw_count(tg_tensor *step)
{
    const char *op = "adamw_count";
    char x[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "step", step, &s));
    tg_status st = TG_OK;
    if (step->dtype != TG_I32 || tg_tensor_numel(step) != 1)
        st = tg_error(TG_EINVAL, "%s: step %s must hold one i32 (the step count)", op, desc(step, x, sizeof x));
    struct tg_adamw_count_args a = {.step = st == TG_OK ? tg_tensor_data(step) : NULL, .check = tg_index_check_of(s)};
    ISSUE_CHECKED(s, op, adamw_count, &a, st);
}

static tg_status adamw_multi_check(const struct tg_adamw_param *ps, int n, double lr, double beta1, double beta2,
                                   double eps, int64_t step, double grad_scale, const tg_tensor *clip_sumsq,
                                   double max_norm)
{
    const char *op = "adamw_multi";
    char what[48];
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof what, "%s: param %d", op, i + 1);
        TG_TRY(adamw_tensors_check(what, ps[i].p, ps[i].p_lowp, ps[i].g, ps[i].m, ps[i].v));
        if (i > 0) TG_TRY(on_dev(what, "param 1 p", ps[0].p, "p", ps[i].p));
        TG_TRY(finite_arg(what, "weight_decay", ps[i].weight_decay));
    }
    TG_TRY(adamw_hyper_check(op, lr, beta1, beta2, eps, step, grad_scale));
    if (clip_sumsq) {
        TG_TRY(scalar_check(op, "clip_sumsq", clip_sumsq, "param 1 p", ps[0].p));
        if (!(max_norm > 0)) return tg_error(TG_EINVAL, "%s: max_norm = %g must be > 0", op, max_norm);
    }
    return TG_OK;
}

static tg_status adamw_multi_issue(const struct tg_adamw_param *params, int n, double lr, const tg_tensor *lr_t,
                                   int64_t step, const tg_tensor *step_t, double beta1, double beta2, double eps,
                                   double grad_scale, const tg_tensor *clip_sumsq, double max_norm)
{
    const char *op = "adamw_multi";
    tg_stream *s;
    if (n < 1 || !params) return tg_error(TG_EINVAL, "%s: needs at least one parameter (got %d)", op, n);
    TG_TRY(stream_for(op, "param 1 p", params[0].p, &s));
    tg_status st = adamw_multi_check(params, n, lr, beta1, beta2, eps, step, grad_scale, clip_sumsq, max_norm);
    if (st == TG_OK && lr_t) st = sched_check(op, "param 1 p", params[0].p, lr_t, step_t);
    if (st == TG_OK) st = kernel(op, s, (const void *)s->be->adamw_multi);
    struct tg_adamw_multi_args *a = NULL;
    if (st == TG_OK && !(a = malloc(tg_adamw_multi_args_size(n))))
        st = tg_error(TG_ENOMEM, "%s: no memory for the table of %d parameters", op, n);
    if (st == TG_OK) {
        *a = (struct tg_adamw_multi_args){.lr = (float)lr, .beta1 = (float)beta1, .beta2 = (float)beta2,
                                          .eps = (float)eps, .grad_scale = (float)grad_scale, .step = step,
                                          .clip_sumsq = clip_sumsq ? tg_tensor_data(clip_sumsq) : NULL,
                                          .max_norm = max_norm, .lr_dev = lr_t ? tg_tensor_data(lr_t) : NULL,
                                          .step_dev = lr_t ? tg_tensor_data(step_t) : NULL, .ntensors = n};
        for (int i = 0; i < n; i++) {
            const struct tg_adamw_param *q = &params[i];
            a->t[i] = (struct tg_adamw_multi_tensor){
                .p = tg_tensor_data(q->p), .m = tg_tensor_data(q->m), .v = tg_tensor_data(q->v),
                .p_lowp = q->p_lowp ? tg_tensor_data(q->p_lowp) : NULL, .g = tg_tensor_data(q->g),
                .n = tg_tensor_numel(q->p), .g_dt = q->g->dtype, .weight_decay = (float)q->weight_decay};
        }
        st = s->be->adamw_multi(s, a);
    }
    free(a);
    return tg_stream_note_error(s, st);
}

tg_status tg_adamw_multi(const struct tg_adamw_param *params, int n, double lr, double beta1, double beta2, double eps,
                         int64_t step, double grad_scale, const tg_tensor *clip_sumsq, double max_norm)
{
    return adamw_multi_issue(params, n, lr, NULL, step, NULL, beta1, beta2, eps, grad_scale, clip_sumsq, max_norm);
}

tg_status tg_adamw_multi_dev(const struct tg_adamw_param *params, int n, const tg_tensor *lr, const tg_tensor *step,
                             double beta1, double beta2, double eps, double grad_scale, const tg_tensor *clip_sumsq,
                             double max_norm)
{
    if (!lr || !step) return tg_error(TG_EINVAL, "adamw_multi: capturable: both lr and step tensors are required");
    /* 0 and 1 stand for the device values in the host checks */
    return adamw_multi_issue(params, n, 0.0, lr, 1, step, beta1, beta2, eps, grad_scale, clip_sumsq, max_norm);
}

tg_status tg_sumsq_multi(tg_tensor *out, const tg_tensor *const *ts, int n)
{
    const char *op = "sumsq_multi";
    char what[48], x[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "out", out, &s));
    tg_status st = scalar_check(op, "out", out, "out", out);
    if (st == TG_OK && (n < 0 || (n > 0 && !ts))) st = tg_error(TG_EINVAL, "%s: bad tensor count %d", op, n);
    for (int i = 0; st == TG_OK && i < n; i++) {
        snprintf(what, sizeof what, "%s: tensor %d", op, i + 1);
        st = need(what, "t", ts[i]);
        if (st == TG_OK) st = on_dev(what, "out", out, "t", ts[i]);
        if (st == TG_OK && !float_dtype(ts[i]->dtype))
            st = tg_error(TG_EINVAL, "%s: t %s must be f32 or bf16", what, desc(ts[i], x, sizeof x));
    }
    if (st == TG_OK) st = kernel(op, s, (const void *)s->be->sumsq_multi);
    struct tg_sumsq_multi_args *a = NULL;
    if (st == TG_OK && !(a = malloc(tg_sumsq_multi_args_size(n))))
        st = tg_error(TG_ENOMEM, "%s: no memory for the table of %d tensors", op, n);
    if (st == TG_OK) {
        a->out = tg_tensor_data(out);
        a->ntensors = n;
        for (int i = 0; i < n; i++)
            a->t[i] = (struct tg_sumsq_multi_tensor){.x = tg_tensor_data(ts[i]), .n = tg_tensor_numel(ts[i]),
                                                     .dt = ts[i]->dtype};
        st = s->be->sumsq_multi(s, a);
    }
    free(a);
    return tg_stream_note_error(s, st);
}

tg_status tg_zero_multi(tg_tensor *const *ts, int n)
{
    const char *op = "zero_multi";
    char what[48];
    tg_stream *s;
    if (n == 0) return TG_OK;
    if (n < 0 || !ts) return tg_error(TG_EINVAL, "%s: bad tensor count %d", op, n);
    TG_TRY(stream_for(op, "tensor 1", ts[0], &s));
    tg_status st = TG_OK;
    for (int i = 1; st == TG_OK && i < n; i++) {
        snprintf(what, sizeof what, "%s: tensor %d", op, i + 1);
        st = need(what, "t", ts[i]);
        if (st == TG_OK) st = on_dev(what, "tensor 1", ts[0], "t", ts[i]);
    }
    if (st == TG_OK) st = kernel(op, s, (const void *)s->be->zero_multi);
    struct tg_zero_multi_args *a = NULL;
    if (st == TG_OK && !(a = malloc(tg_zero_multi_args_size(n))))
        st = tg_error(TG_ENOMEM, "%s: no memory for the table of %d tensors", op, n);
    if (st == TG_OK) {
        a->n = n;
        for (int i = 0; i < n; i++)
            a->t[i] = (struct tg_zero_multi_buf){.p = tg_tensor_data(ts[i]), .bytes = (int64_t)tg_tensor_bytes(ts[i])};
        st = s->be->zero_multi(s, a);
    }
    free(a);
    return tg_stream_note_error(s, st);
}

tg_status tg_copy_multi(tg_tensor *const *dst, const tg_tensor *const *src, int n)
{
    const char *op = "copy_multi";
    char what[48], x[96], y[96];
    tg_stream *s;
    if (n == 0) return TG_OK;
    if (n < 0 || !dst || !src) return tg_error(TG_EINVAL, "%s: bad pair count %d", op, n);
    if (!dst[0]) return tg_error(TG_EINVAL, "%s: pair 1: dst is NULL", op);
    TG_TRY(stream_for(op, "dst 1", dst[0], &s));
    tg_status st = TG_OK;
    for (int i = 0; st == TG_OK && i < n; i++) {
        snprintf(what, sizeof what, "%s: pair %d", op, i + 1);
        st = need(what, "dst", dst[i]);
        if (st == TG_OK) st = need(what, "src", src[i]);
        if (st == TG_OK) st = on_dev(what, "dst 1", dst[0], "dst", dst[i]);
        if (st == TG_OK) st = on_dev(what, "dst 1", dst[0], "src", src[i]);
        if (st == TG_OK && (!float_dtype(dst[i]->dtype) || !float_dtype(src[i]->dtype)))
            st = tg_error(TG_EINVAL, "%s: dst %s and src %s must be f32 or bf16", what, desc(dst[i], x, sizeof x),
                          desc(src[i], y, sizeof y));
        if (st == TG_OK && tg_tensor_numel(dst[i]) != tg_tensor_numel(src[i]))
            st = tg_error(TG_EINVAL, "%s: dst %s and src %s differ in size", what, desc(dst[i], x, sizeof x),
                          desc(src[i], y, sizeof y));
    }
    if (st == TG_OK) st = kernel(op, s, (const void *)s->be->copy_multi);
    struct tg_copy_multi_args *a = NULL;
    if (st == TG_OK && !(a = malloc(tg_copy_multi_args_size(n))))
        st = tg_error(TG_ENOMEM, "%s: no memory for the table of %d pairs", op, n);
    if (st == TG_OK) {
        a->n = n;
        for (int i = 0; i < n; i++)
            a->t[i] = (struct tg_copy_multi_pair){.dst = tg_tensor_data(dst[i]), .src = tg_tensor_data(src[i]),
                                                  .n = tg_tensor_numel(dst[i]), .dst_dt = dst[i]->dtype,
                                                  .src_dt = src[i]->dtype};
        st = s->be->copy_multi(s, a);
    }
    free(a);
    return tg_stream_note_error(s, st);
}

/* ------------------------------------------------------------------ sumsq (through the reduce kernel) */
tg_status tg_sumsq(const tg_tensor *t, double *out)
{
    tg_stream *s;
    TG_TRY(stream_for("sumsq", "t", t, &s));
    return tg_reduce_to_host(TG_REDUCE_SUMSQ, t, NULL, out, "sumsq");
}
