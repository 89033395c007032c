/* linear.c — Linear: y = x W^T + b (optionally through gelu); dgrad dx = dy W; wgrad dW = dy^T x, db = sum dy (now or delayed). */
#include "nn/nn.h"

#include <string.h>

struct linear {
    int64_t in, out;
    tg_param *w; /* (out, in) */
    tg_param *b; /* (out) or NULL */
    int shared;  /* w is another module's parameter (retained here) */
    int gelu;    /* y = gelu(x W^T + b), fused into the GEMM (LayerNormMLP's fc1) */
    tg_module *dgelu_of; /* during tg_linear_backward_dgelu: the gelu Linear whose gelu' the dgrad applies */
};

/* saved: t[0] = x (..., in), with gelu t[1] = the pre-activation h (..., out);
 * wgrad item: t[0] = x, t[1] = dy (..., out), with gelu dh = gelu'(h) dy.
 * A gelu Linear's saved ival is DH_GIVEN once the next module's dgrad has
 * applied gelu'(h) (DGELU epilogue): its backward then receives dh as dy. */
#define DH_GIVEN 1

static const struct tg_module_vtbl linear_vt;

/* The saved context of the gelu Linear g for mb, whose h a DGELU epilogue may
 * read for the dgrad of m (saved input x, like h): named errors otherwise. */
static tg_status dgelu_source(tg_module *m, tg_module *g, int mb, const struct tg_saved *s, struct tg_saved **out)
{
    char a[160];
    struct linear *L = m->impl;
    if (g->vt != &linear_vt || !((struct linear *)g->impl)->gelu)
        return tg_error(TG_EINVAL, "the dgelu source %s is not a Linear with gelu", tg_module_label(g, a, sizeof a));
    TG_TRY(tg_module_peek(g, mb, out));
    if ((*out)->n < 2 || !(*out)->t[1] || (*out)->ival == DH_GIVEN)
        return tg_error(TG_ESTATE, "%s has no pre-activation saved for microbatch %d", tg_module_label(g, a, sizeof a), mb);
    return tg_nn_check_like("the dgelu source's pre-activation", (*out)->t[1], s->t[0], L->in, m->opts.dtype);
}

/* The FP8 weight step: at microbatch 1 (after the delayed-scaling update) or when no cast is cached, the
 * weight cast with its transpose. */
static tg_status fp8_weight_step(tg_module *m, int mb)
{
    struct linear *L = m->impl;
    struct tg_fp8_state *S = m->fp8;
    tg_status st = TG_OK;
    if (mb == 1 || !S->w_valid) {
        st = tg_fp8_state_update(S);
        if (st == TG_OK) st = tg_fp8_state_cast(S, TG_FP8_ROLE_WEIGHT, L->w->data, S->w8, S->w8_t, S->w_scale_inv);
        S->w_valid = st == TG_OK;
    }
    return st;
}

/* y = res + x W^T (+ b): res (NULL: none) is the C that the GEMM's beta = 1 scales;
 * with gelu (y = res + gelu(...)) it is a separate add. */
/* The FP8 forward (recipe r): the weight step (fp8_weight_step); x cast with its
 * transpose (kept for the wgrad); y = (x8 W8^T) * scale_invs (+ res) (+ b), gelu.
 * With m->fp8_in the input came cast (the weight step ran in
 * tg_linear_fp8_input_begin) and x only gives its shape. Under delayed scaling
 * the gelu applies to the stored pre-activation h (not in the GEMM's epilogue),
 * so its output is the same whether it is stored or, with m->fp8_out, cast for
 * the next Linear in one pass (*y is then h, for its shape). */
static tg_status linear_forward_fp8(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y,
                                    const tg_fp8_recipe *r)
{
    struct linear *L = m->impl;
    const struct tg_fp8_input *pre = m->fp8_in, *post = L->gelu ? m->fp8_out : NULL;
    char a[160];
    if ((pre || post) && r->scaling != TG_FP8_DELAYED)
        return tg_error(TG_ESTATE, "%s: an FP8 input or output written across modules needs delayed scaling",
                        tg_module_label(m, a, sizeof a));
    TG_TRY(tg_fp8_state_ensure(m, r, L->out, L->in));
    struct tg_fp8_state *S = m->fp8;
    tg_status st = pre ? TG_OK : fp8_weight_step(m, mb);
    const tg_dtype dt = m->opts.dtype, xdt = tg_fp8_role_dtype(r, TG_FP8_ROLE_INPUT);
    tg_tensor *out = NULL, *x2 = NULL, *y2 = NULL, *r2 = NULL, *h = NULL, *h2 = NULL, *x8 = NULL, *x8t = NULL, *xs = NULL;
    tg_tensor *keep[4] = {NULL, NULL, NULL, NULL};
    if (st == TG_OK && !post) st = tg_nn_new_like(m, x, L->out, dt, &out);
    if (st == TG_OK && res) st = post ? tg_error(TG_EINVAL, "%s: a residual with an FP8 output", tg_module_label(m, a, sizeof a))
                                      : tg_nn_check_like("res", res, out, L->out, dt);
    if (st == TG_OK) st = tg_nn_rows(x, &x2);
    if (st == TG_OK && out) st = tg_nn_rows(out, &y2);
    const int64_t n = st == TG_OK ? x2->shape[0] : 0, one[1] = {1};
    int64_t xs8[2] = {n, L->in}, xt8[2] = {L->in, n};
    if (st == TG_OK && pre) { /* the producer's cast: x8 borrowed, x8^T and scale_inv kept for the wgrad */
        if (pre->x8->ndim != 2 || pre->x8->shape[0] != n || pre->x8->shape[1] != L->in || pre->x8->dtype != xdt)
            st = tg_error(TG_EINVAL, "%s: the FP8 input written for it does not match x", tg_module_label(m, a, sizeof a));
        if (st == TG_OK) st = tg_tensor_ref(pre->x8_t, &x8t);
        if (st == TG_OK) st = tg_tensor_ref(pre->scale_inv, &xs);
    } else {
        if (st == TG_OK) st = tg_module_tensor(m, xdt, 2, xs8, &x8);
        if (st == TG_OK) st = tg_module_tensor(m, xdt, 2, xt8, &x8t);
        if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, one, &xs);
        if (st == TG_OK) st = tg_fp8_state_cast(S, TG_FP8_ROLE_INPUT, x2, x8, x8t, xs);
    }
    const tg_tensor *xin = pre ? pre->x8 : x8;
    if (st == TG_OK && L->gelu) st = tg_nn_new_like(m, x, L->out, dt, &h);
    if (st == TG_OK && h) st = tg_nn_rows(h, &h2);
    /* the bias (and gelu) ride in the GEMM's epilogue where the FP8 GEMM takes them (a bf16 bias), else run after it */
    const int epi_ok = L->b && dt == TG_BF16, gelu_epi = L->gelu && epi_ok && r->scaling != TG_FP8_DELAYED;
    tg_tensor *d = L->gelu ? h2 : y2;
    if (st == TG_OK && res && !L->gelu) st = tg_nn_rows(res, &r2); /* y = res + ...: the GEMM's C with beta = 1 */
    if (st == TG_OK && gelu_epi)
        st = tg_fp8_gemm(y2, xin, 0, xs, S->w8, 1, S->w_scale_inv, 1.0, 0.0, TG_EPI_BIAS_GELU, L->b->data, h2, NULL, 0);
    else if (st == TG_OK) {
        st = tg_fp8_gemm_in(d, r2, xin, 0, xs, S->w8, 1, S->w_scale_inv, 1.0, r2 ? 1.0 : 0.0,
                            epi_ok ? TG_EPI_BIAS : TG_EPI_NONE, epi_ok ? L->b->data : NULL, NULL, NULL, 0);
        if (st == TG_OK && L->b && !epi_ok) st = tg_bias_add(d, L->b->data);
        if (st == TG_OK && post)
            st = tg_fp8_cast_transpose_gelu(post->x8, post->x8_t, h2, post->scale, post->amax, post->scale_inv,
                                            TG_FP8_AMAX_ACCUMULATE);
        else if (st == TG_OK && L->gelu) st = tg_gelu_forward(y2, h2);
    }
    if (st == TG_OK && post) st = tg_tensor_ref(h, &out);
    if (st == TG_OK && res && L->gelu) st = tg_binary(TG_ADD, out, res, out);
    if (st == TG_OK) st = tg_tensor_ref(x, &keep[0]);
    if (st == TG_OK) {
        keep[1] = h, h = NULL;
        keep[2] = x8t, x8t = NULL;
        keep[3] = xs, xs = NULL;
        st = tg_module_save(m, mb, keep, 4);
    }
    tg_tensor_free(h);
    tg_tensor_free(h2);
    tg_tensor_free(x2);
    tg_tensor_free(y2);
    tg_tensor_free(r2);
    tg_tensor_free(x8);
    tg_tensor_free(x8t);
    tg_tensor_free(xs);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    *y = out;
    return TG_OK;
}

static tg_status linear_forward_res(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y)
{
    struct linear *L = m->impl;
    TG_TRY(tg_nn_check_rows("x", x, m->opts.dtype, L->in));
    const tg_fp8_recipe *r = L->shared ? NULL : tg_fp8_effective(m);
    if (r) return linear_forward_fp8(m, mb, x, res, y, r);
    if (m->fp8_in || (L->gelu && m->fp8_out)) {
        char a[160];
        return tg_error(TG_ESTATE, "%s: an FP8 input or output written across modules, but it does not run FP8",
                        tg_module_label(m, a, sizeof a));
    }
    tg_tensor *out = NULL, *x2 = NULL, *y2 = NULL, *h = NULL, *h2 = NULL, *r2 = NULL, *keep[2] = {NULL, NULL};
    tg_status st = tg_nn_new_like(m, x, L->out, m->opts.dtype, &out);
    if (st == TG_OK && res) st = tg_nn_check_like("res", res, out, L->out, m->opts.dtype);
    if (st == TG_OK) st = tg_nn_rows(x, &x2);
    if (st == TG_OK) st = tg_nn_rows(out, &y2);
    if (st == TG_OK && res && !L->gelu) st = tg_nn_rows(res, &r2);
    if (st == TG_OK && L->gelu) st = tg_nn_new_like(m, x, L->out, m->opts.dtype, &h);
    if (st == TG_OK && h) st = tg_nn_rows(h, &h2);
    if (st == TG_OK && L->gelu && L->b) /* y = gelu(h), h = x @ W^T + b: one GEMM */
        st = tg_gemm_ex(y2, x2, 0, L->w->data, 1, 1.0, 0.0, TG_EPI_BIAS_GELU, L->b->data, h2, NULL, 0.0);
    else if (st == TG_OK && L->gelu) { /* no gelu-only epilogue: h = x @ W^T, then y = gelu(h) */
        st = tg_gemm(h2, x2, 0, L->w->data, 1, 1.0, 0.0);
        if (st == TG_OK) st = tg_gelu_forward(y2, h2);
    } else if (st == TG_OK) /* y = (res +) x @ W^T (+ b in the GEMM's epilogue) */
        st = tg_gemm_in(y2, r2, x2, 0, L->w->data, 1, 1.0, r2 ? 1.0 : 0.0, L->b ? TG_EPI_BIAS : TG_EPI_NONE,
                        L->b ? L->b->data : NULL, NULL, NULL, 0.0);
    if (st == TG_OK && res && L->gelu) st = tg_binary(TG_ADD, out, res, out);
    if (st == TG_OK) st = tg_tensor_ref(x, &keep[0]);
    if (st == TG_OK) {
        keep[1] = h, h = NULL;
        st = tg_module_save(m, mb, keep, L->gelu ? 2 : 1);
    }
    tg_tensor_free(h);
    tg_tensor_free(h2);
    tg_tensor_free(x2);
    tg_tensor_free(y2);
    tg_tensor_free(r2);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    *y = out;
    return TG_OK;
}

static tg_status linear_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    return linear_forward_res(m, mb, x, NULL, y);
}

/* The FP8 backward's gradient cast: dy (rows dy2; through gelu'(h) first when h2 is given) to the grad format with
 * its transpose (for the wgrad) and, with a bias, the bias gradient's column partials, all in one pass. */
static tg_status fp8_grad_cast(tg_module *m, const tg_tensor *dy2, const tg_tensor *h2, tg_tensor **dy8, tg_tensor **dy8t,
                               tg_tensor **dys, tg_tensor **part)
{
    struct linear *L = m->impl;
    struct tg_fp8_state *S = m->fp8;
    const tg_dtype gdt = tg_fp8_role_dtype(&S->r, TG_FP8_ROLE_GRAD);
    const int64_t n = dy2->shape[0], one[1] = {1};
    int64_t ds[2] = {n, L->out}, dts[2] = {L->out, n}, ps[2] = {tg_fp8_dbias_chunks(n), L->out};
    tg_status st = tg_module_tensor(m, gdt, 2, ds, dy8);
    if (st == TG_OK) st = tg_module_tensor(m, gdt, 2, dts, dy8t);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, one, dys);
    if (st == TG_OK && L->b) st = tg_module_tensor(m, TG_F32, 2, ps, part);
    if (st == TG_OK) st = tg_fp8_state_cast_grad(S, dy2, h2, *dy8, *dy8t, *dys, *part);
    return st;
}

static tg_status linear_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    struct linear *L = m->impl;
    struct tg_saved *s, *src = NULL;
    TG_TRY(tg_module_peek(m, mb, &s));
    TG_TRY(tg_nn_check_like("dy", dy, s->t[0], L->out, m->opts.dtype));
    if (L->dgelu_of) TG_TRY(dgelu_source(m, L->dgelu_of, mb, s, &src));
    int dh_given = L->gelu && s->ival == DH_GIVEN; /* dy is already dh */
    const int fp8 = s->n >= 4 && s->t[2]; /* the forward ran FP8: x8^T and its scale_inv saved */
    if (fp8 && (!m->fp8 || !m->fp8->w_valid)) { /* set_fp8 dropped or replaced it: no weight cast to use */
        char a[160];
        return tg_error(TG_ESTATE, "%s: its FP8 state was dropped or replaced between the forward and the backward of "
                        "microbatch %d", tg_module_label(m, a, sizeof a), mb);
    }
    /* FP8 with delayed scaling: gelu'(h) is applied inside the gradient cast (dh is never stored) */
    const int fuse_dgelu = fp8 && L->gelu && !dh_given && m->fp8->r.scaling == TG_FP8_DELAYED;
    tg_tensor *out = NULL, *dx2 = NULL, *dy2 = NULL, *dh = NULL, *h2 = NULL, *hx2 = NULL, *kept = NULL;
    tg_tensor *dy8 = NULL, *dy8t = NULL, *dys = NULL, *part = NULL;
    tg_status st = tg_nn_new_like(m, s->t[0], L->in, m->opts.dtype, &out);
    if (st == TG_OK && L->gelu && !dh_given && !fuse_dgelu) st = tg_nn_new_like(m, s->t[0], L->out, m->opts.dtype, &dh);
    if (st == TG_OK && dh) st = tg_gelu_backward(dh, dy, s->t[1]); /* dh = gelu'(h) * dy */
    if (st == TG_OK) st = tg_nn_rows(out, &dx2);
    if (st == TG_OK) st = tg_nn_rows(dh ? dh : dy, &dy2);
    if (st == TG_OK && fuse_dgelu) st = tg_nn_rows(s->t[1], &hx2);
    if (st == TG_OK && src && !fp8) st = tg_nn_rows(src->t[1], &h2);
    if (st == TG_OK && fp8) { /* dy cast with its transpose and bias partials; dx = (dy8 W8) * scale_invs */
        struct tg_fp8_state *S = m->fp8;
        st = fp8_grad_cast(m, dy2, hx2, &dy8, &dy8t, &dys, &part);
        if (st == TG_OK) st = tg_fp8_gemm(dx2, dy8, 0, dys, S->w8_t, 1, S->w_scale_inv, 1.0, 0.0, TG_EPI_NONE, NULL, NULL, NULL, 0);
        /* a gelu before (src): its Linear applies gelu' itself, in its own gradient cast when FP8 */
    } else if (st == TG_OK && src) /* dgrad into the gelu before: dx = gelu'(h) * (dy @ W), one GEMM */
        st = tg_gemm_ex(dx2, dy2, 0, L->w->data, 0, 1.0, 0.0, TG_EPI_DGELU, NULL, h2, NULL, 0.0);
    else if (st == TG_OK) st = tg_gemm(dx2, dy2, 0, L->w->data, 0, 1.0, 0.0); /* dgrad: dx = dy @ W */
    tg_tensor_free(dx2);
    tg_tensor_free(dy2);
    tg_tensor_free(h2);
    tg_tensor_free(hx2);
    tg_tensor_free(dy8);
    if (st == TG_OK && !dh && !fp8) st = tg_tensor_ref(dy, &kept);
    if (st != TG_OK) {
        tg_tensor_free(dh);
        tg_tensor_free(out);
        tg_tensor_free(dy8t);
        tg_tensor_free(dys);
        tg_tensor_free(part);
        return st;
    }
    if (src && !fp8) src->ival = DH_GIVEN; /* the source's backward now gets dh */
    /* the wgrad needs dy (dh with gelu), no longer h; FP8: x8^T, dy8^T, their scale_invs and the bias partials */
    tg_tensor_free(s->t[1]);
    s->t[1] = dh ? dh : kept;
    s->n = 2;
    if (fp8) {
        tg_tensor_free(s->t[0]); /* x and dy: the FP8 wgrad reads their casts only */
        tg_tensor_free(s->t[1]);
        s->t[0] = s->t[1] = NULL;
        s->t[4] = dy8t;
        s->t[5] = dys;
        s->t[6] = part;
        s->n = 7;
    }
    tg_module_take(m, mb, &s);
    *dx = out;
    return tg_module_wgrad_or_queue(m, s);
}

static tg_status linear_wgrad(tg_module *m, struct tg_saved *item)
{
    struct linear *L = m->impl;
    tg_status st = TG_OK;
    if (item->n >= 7 && item->t[4]) { /* FP8: dW = acc * dW + (dy8^T x8) * scale_invs; db from the cast's partials */
        st = tg_fp8_gemm(tg_param_wgrad_target(L->w), item->t[4], 0, item->t[5], item->t[2], 1, item->t[3], 1.0,
                         tg_param_wgrad_accumulate(L->w), TG_EPI_NONE, NULL, NULL, NULL, 0);
        if (st == TG_OK && L->b)
            st = tg_fp8_dbias_finish(tg_param_wgrad_target(L->b), item->t[6], tg_param_wgrad_accumulate(L->b));
    } else { /* wgrad: dW (out, in) = acc * dW + dy^T @ x; db = acc * db + sum_n dy, in the GEMM's epilogue */
        tg_tensor *x2 = NULL, *dy2 = NULL;
        st = tg_nn_rows(item->t[0], &x2);
        if (st == TG_OK) st = tg_nn_rows(item->t[1], &dy2);
        if (st == TG_OK)
            st = tg_gemm_ex(tg_param_wgrad_target(L->w), dy2, 1, x2, 0, 1.0, tg_param_wgrad_accumulate(L->w),
                            L->b ? TG_EPI_BGRAD : TG_EPI_NONE, NULL, NULL, L->b ? tg_param_wgrad_target(L->b) : NULL,
                            L->b ? tg_param_wgrad_accumulate(L->b) : 0.0);
        tg_tensor_free(x2);
        tg_tensor_free(dy2);
    }
    if (st == TG_OK) st = tg_param_wgrad_done(L->w, item->mb);
    if (st == TG_OK && L->b) st = tg_param_wgrad_done(L->b, item->mb);
    return st;
}

static void linear_destroy(tg_module *m)
{
    struct linear *L = m->impl;
    if (L && L->shared) tg_param_release(L->w);
    free(L);
}

static const struct tg_module_vtbl linear_vt = {
    .type = "Linear",
    .forward = linear_forward,
    .forward_res = linear_forward_res,
    .backward = linear_backward,
    .wgrad = linear_wgrad,
    .destroy = linear_destroy,
};

tg_status tg_linear_new(int64_t in, int64_t out, const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    if (in < 1 || out < 1) return tg_error(TG_EINVAL, "Linear: sizes must be positive (in %lld, out %lld)", (long long)in, (long long)out);
    tg_module *m;
    TG_TRY(tg_module_alloc(&linear_vt, o, &m));
    struct linear *L = calloc(1, sizeof *L);
    if (!L) {
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->impl = L;
    L->in = in, L->out = out;
    int64_t ws[2] = {out, in}, bs[1] = {out};
    tg_status st = tg_module_add_param(m, "weight", 2, ws, m->opts.init_std, 0.0, &L->w);
    if (st == TG_OK && m->opts.bias) st = tg_module_add_param(m, "bias", 1, bs, 0.0, 0.0, &L->b);
    /* the fp8 option makes the scaling state now, outside any capture */
    if (st == TG_OK && m->opts.fp8.scaling != TG_FP8_OFF) st = tg_fp8_state_ensure(m, &m->opts.fp8, out, in);
    if (st != TG_OK) {
        tg_module_release(m);
        return st;
    }
    *mp = m;
    return TG_OK;
}

tg_status tg_linear_gelu_new(int64_t in, int64_t out, const tg_module_opts *o, tg_module **mp)
{
    TG_TRY(tg_linear_new(in, out, o, mp));
    ((struct linear *)(*mp)->impl)->gelu = 1;
    return TG_OK;
}

tg_status tg_linear_backward_dgelu(tg_module *m, int mb, const tg_tensor *dy, tg_module *gelu_src, tg_tensor **dx)
{
    char a[160];
    *dx = NULL;
    if (m->vt != &linear_vt)
        return tg_error(TG_EINVAL, "backward with dgelu: %s is not a Linear", tg_module_label(m, a, sizeof a));
    struct linear *L = m->impl;
    L->dgelu_of = gelu_src;
    tg_status st = tg_module_backward(m, mb, dy, dx);
    L->dgelu_of = NULL;
    return st;
}

tg_status tg_linear_new_shared(tg_param *weight, const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    if (!weight || weight->data->ndim != 2) return tg_error(TG_EINVAL, "Linear: the shared weight must be 2-D (out, in)");
    tg_module *m;
    TG_TRY(tg_module_alloc(&linear_vt, o, &m));
    if (weight->data->dtype != m->opts.dtype) {
        tg_status st = tg_error(TG_EINVAL, "Linear: shared weight %s is %s but the module computes in %s", weight->name,
                                tg_dtype_name(weight->data->dtype), tg_dtype_name(m->opts.dtype));
        tg_module_release(m);
        return st;
    }
    struct linear *L = calloc(1, sizeof *L);
    if (!L) {
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->impl = L;
    L->out = weight->data->shape[0], L->in = weight->data->shape[1];
    L->w = tg_param_retain(weight);
    L->shared = 1;
    m->shared = weight;
    *mp = m;
    return TG_OK;
}

tg_param *tg_linear_weight(tg_module *m) { return m && m->vt == &linear_vt ? ((struct linear *)m->impl)->w : NULL; }

int tg_linear_takes_fp8_input(const tg_module *m)
{
    if (m->vt != &linear_vt || m->route || m->npre) return 0;
    const struct linear *L = m->impl;
    const tg_fp8_recipe *r = L->shared ? NULL : tg_fp8_effective(m);
    return r && r->scaling == TG_FP8_DELAYED;
}

int tg_linear_writes_fp8(const tg_module *m)
{
    return tg_linear_takes_fp8_input(m) && ((const struct linear *)m->impl)->gelu;
}

tg_status tg_linear_fp8_input_begin(tg_module *m, int mb, int64_t rows, struct tg_fp8_input *in)
{
    char a[160];
    memset(in, 0, sizeof *in);
    if (!tg_linear_takes_fp8_input(m))
        return tg_error(TG_ESTATE, "%s takes no FP8 input from the module before it", tg_module_label(m, a, sizeof a));
    struct linear *L = m->impl;
    const tg_fp8_recipe *r = tg_fp8_effective(m);
    if (mb == 0) mb = tg_module_next_forward(m);
    TG_TRY(tg_fp8_state_ensure(m, r, L->out, L->in));
    TG_TRY(fp8_weight_step(m, mb));
    struct tg_fp8_state *S = m->fp8;
    const tg_dtype xdt = tg_fp8_role_dtype(r, TG_FP8_ROLE_INPUT);
    const int64_t xs8[2] = {rows, L->in}, xt8[2] = {L->in, rows}, one[1] = {1};
    tg_status st = tg_module_tensor(m, xdt, 2, xs8, &in->x8);
    if (st == TG_OK) st = tg_module_tensor(m, xdt, 2, xt8, &in->x8_t);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, one, &in->scale_inv);
    if (st != TG_OK) {
        tg_fp8_input_free(in);
        return st;
    }
    in->scale = S->scale_v[TG_FP8_ROLE_INPUT];
    in->amax = S->amax_v[TG_FP8_ROLE_INPUT];
    return TG_OK;
}
