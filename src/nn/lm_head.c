/* lm_head.c — LM head: final norm, projection to the vocabulary (own or tied to an embedding's table), softmax cross-entropy; the loss in chunks of rows (fused), so the (N, V) logits never exist. */
#include "nn/nn.h"

#include <math.h>

struct lm_head {
    int64_t c, vocab;
    tg_param *tied; /* the embedding's token table when tied (retained), else NULL */
    double dloss;   /* d(loss) of the backward in progress (tg_lm_head_backward_loss) */
    int fused;      /* the chunked loss (default) */
    int64_t chunk_rows; /* rows a chunk; 0: chosen from the vocabulary */
    int norm_only;  /* set by the fused forward_loss: the forward runs the norm alone */
    int pending;    /* fused backwards of this step whose dW is in the target but not reported yet */
    int64_t pending_step;
};

/* children: [0] norm, [1] projection (Linear without bias; shares the table when tied).
 * saved by forward_loss, ival = ignore_index | path << 32:
 *   UNFUSED:   t[0] = logits (..., V), t[1] = targets (N) i32, t[2] = loss (2) f32
 *   RECOMPUTE: t[0] = the normed input xn (N, C), t[1], t[2] as above: the backward computes the
 *              chunks' logits again (no d(loss) was promised)
 *   DONE:      t[0] = dxn (N, C), the input gradient of the norm's output, t[1], t[2] as above;
 *              dW is already in its target (dval = the promised d(loss)) */
enum { UNFUSED = 0, RECOMPUTE = 1, DONE = 2 };
#define CHUNK_BYTES ((int64_t)256 << 20) /* the automatic chunk's logits at most */

static int saved_path(const struct tg_saved *s) { return (int)(s->ival >> 32); }
static int saved_ignore(const struct tg_saved *s) { return (int)(int32_t)(s->ival & 0xffffffff); }

static void drop_saved(tg_module *m, int mb)
{
    struct tg_saved *s;
    for (s = m->saved; s && s->mb != mb; s = s->next) {}
    if (s && tg_module_take(m, mb, &s) == TG_OK) tg_saved_free(s);
}

static tg_status head_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    struct lm_head *H = m->impl;
    drop_saved(m, mb); /* a plain forward (generation) has no loss to differentiate */
    if (H->norm_only) return tg_module_forward(m->children[0], mb, x, y);
    return tg_chain_forward(m, mb, x, y);
}

/* Rows a chunk for n rows. */
static int64_t chunk_rows(const struct lm_head *H, const tg_tensor *w, int64_t n)
{
    if (H->chunk_rows > 0) return H->chunk_rows < n ? H->chunk_rows : n;
    int64_t most = CHUNK_BYTES / (H->vocab * (int64_t)tg_dtype_size(w->dtype));
    if (most < 1) most = 1;
    int64_t k = (n + most - 1) / most; /* chunks of equal size */
    return n ? (n + k - 1) / k : 1;
}

/* The loss of rows xn (N, C) against the weight w (V, C), a chunk of rows at a time into one
 * (rows, V) buffer: logits = xn_c W^T; then
 *   loss_out:  the rows' losses, and, with dxn, at once dlogits = dloss / count (softmax - onehot)
 *              in the same buffer (the count of valid targets is made first), then loss = the mean;
 *   !loss_out: dlogits from loss's count (a backward that computes the logits again);
 * and with dxn: dxn_c = dlogits W, dW (+)= dlogits^T xn_c (beta for the first chunk, then 1). */
static tg_status chunked(struct lm_head *H, tg_param *w, const tg_tensor *xn, const tg_tensor *targets, int ignore,
                         tg_tensor *loss, int loss_out, double dloss, tg_tensor *dxn, double beta)
{
    const tg_tensor *W = w->data;
    const int64_t n = tg_tensor_numel(targets), c = H->c, v = H->vocab, r = chunk_rows(H, W, n);
    tg_tensor *buf = NULL, *losses = NULL, *acc = NULL, *tmp = NULL;
    tg_tensor *target = dxn ? tg_param_wgrad_target(w) : NULL;
    int64_t bs[2] = {r, v}, ns[1] = {n};
    tg_status st = tg_tensor_new(W->dtype, 2, bs, tg_tensor_device(xn), &buf);
    if (st == TG_OK && loss_out) st = tg_tensor_new(TG_F32, 1, ns, tg_tensor_device(xn), &losses);
    if (st == TG_OK && loss_out) st = tg_cross_entropy_mean(loss, NULL, targets, v, ignore); /* count, checks */
    /* a gradient in a narrower dtype than f32 adds the chunks in f32 and is rounded once */
    if (st == TG_OK && target && target->dtype != TG_F32 && r < n)
        st = tg_tensor_new(TG_F32, 2, W->shape, tg_tensor_device(xn), &acc);
    for (int64_t o = 0; st == TG_OK && o < n; o += r) {
        const int64_t k = n - o < r ? n - o : r;
        int64_t ks[2] = {k, v}, xs[2] = {k, c}, k1[1] = {k};
        tg_tensor *lc = NULL, *xc = NULL, *tc = NULL, *dc = NULL, *sc = NULL;
        st = tg_tensor_view(buf, 0, 2, ks, &lc);
        if (st == TG_OK) st = tg_tensor_view(xn, o * c, 2, xs, &xc);
        if (st == TG_OK) st = tg_tensor_view(targets, o, 1, k1, &tc);
        if (st == TG_OK) st = tg_gemm(lc, xc, 0, W, 1, 1.0, 0.0); /* logits */
        if (st == TG_OK && loss_out) st = tg_tensor_view(losses, o, 1, k1, &sc);
        if (st == TG_OK && loss_out) /* the targets were checked above, all rows (tg_cross_entropy_mean) */
            st = tg_cross_entropy_fused_prechecked(sc, dxn ? lc : NULL, lc, tc, loss, dloss, ignore);
        else if (st == TG_OK && dxn) st = tg_cross_entropy_backward_prechecked(lc, lc, tc, loss, dloss, ignore);
        if (st == TG_OK && dxn) st = tg_tensor_view(dxn, o * c, 2, xs, &dc);
        if (st == TG_OK && dxn) st = tg_gemm(dc, lc, 0, W, 0, 1.0, 0.0); /* dxn = dlogits W */
        if (st == TG_OK && dxn) /* dW (V, C) (+)= dlogits^T xn */
            st = tg_gemm(acc ? acc : target, lc, 1, xc, 0, 1.0, o == 0 ? (acc ? 0.0 : beta) : 1.0);
        tg_tensor_free(lc);
        tg_tensor_free(xc);
        tg_tensor_free(tc);
        tg_tensor_free(dc);
        tg_tensor_free(sc);
    }
    if (st == TG_OK && acc && beta == 0.0) st = tg_copy(target, acc);
    else if (st == TG_OK && acc) {
        st = tg_tensor_new(target->dtype, 2, W->shape, tg_tensor_device(xn), &tmp);
        if (st == TG_OK) st = tg_copy(tmp, acc);
        if (st == TG_OK) st = tg_axpby(target, 1.0, tmp, 1.0);
    }
    if (st == TG_OK && loss_out) st = tg_cross_entropy_mean(loss, losses, targets, v, ignore);
    tg_tensor_free(buf);
    tg_tensor_free(losses);
    tg_tensor_free(acc);
    tg_tensor_free(tmp);
    return st;
}

/* beta of the weight's first dW GEMM: the engine's answer, or accumulate after a fused backward of
 * this step whose contribution is issued but not reported yet (forward_loss of several microbatches
 * before their backwards). */
static double first_beta(struct lm_head *H, tg_param *w)
{
    if (H->pending && H->pending_step == tg_step_index()) return 1.0;
    return tg_param_wgrad_accumulate(w);
}

static tg_status head_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    struct lm_head *H = m->impl;
    struct tg_saved *s;
    for (s = m->saved; s && s->mb != mb; s = s->next) {}
    if (dy) {
        if (s && saved_path(s) != UNFUSED)
            return tg_error(TG_ESTATE, "backward(dy) of microbatch %d after a fused forward_loss (no logits were kept): "
                                       "pass d(loss) instead, or turn the fused loss off", mb);
        drop_saved(m, mb);
        return tg_chain_backward(m, mb, dy, dx);
    }
    if (!s)
        return tg_error(TG_ESTATE, "backward without dy needs forward_loss of microbatch %d first (pass dlogits as dy after a plain forward)", mb);
    const int path = saved_path(s);
    if (path == DONE && H->dloss != s->dval)
        return tg_error(TG_EINVAL, "backward_loss of microbatch %d with dloss = %g, but its forward_loss was promised dloss = %g",
                        mb, H->dloss, s->dval);
    tg_module_take(m, mb, &s);
    tg_status st = TG_OK;
    if (path == UNFUSED) {
        tg_tensor *logits = NULL;
        st = tg_nn_rows(s->t[0], &logits);
        /* dlogits overwrite the logits: nothing else needs them */
        if (st == TG_OK) st = tg_cross_entropy_backward(logits, logits, s->t[1], s->t[2], H->dloss, saved_ignore(s));
        tg_tensor_free(logits);
        if (st == TG_OK) st = tg_chain_backward(m, mb, s->t[0], dx);
        tg_saved_free(s);
        return st;
    }
    tg_param *w = tg_linear_weight(m->children[1]);
    tg_tensor *dxn = NULL;
    if (path == RECOMPUTE) {
        st = tg_tensor_new(s->t[0]->dtype, s->t[0]->ndim, s->t[0]->shape, tg_tensor_device(s->t[0]), &dxn);
        if (st == TG_OK)
            st = chunked(H, w, s->t[0], s->t[1], saved_ignore(s), s->t[2], 0, H->dloss, dxn, first_beta(H, w));
    } else {
        dxn = s->t[0], s->t[0] = NULL;
        if (H->pending > 0) H->pending--;
    }
    /* dxn is (N, C): the norm's backward takes it in the input's shape */
    tg_tensor *dn = NULL;
    if (st == TG_OK) st = tg_module_backward(m->children[0], mb, dxn, &dn);
    if (st == TG_OK) st = tg_param_wgrad_done(w, mb);
    tg_tensor_free(dxn);
    tg_saved_free(s);
    if (st != TG_OK) {
        tg_tensor_free(dn);
        return st;
    }
    *dx = dn;
    return TG_OK;
}

static void head_destroy(tg_module *m)
{
    struct lm_head *H = m->impl;
    if (H && H->tied) {
        H->tied->contributors--;
        tg_param_release(H->tied);
    }
    free(H);
}

static const struct tg_module_vtbl lm_head_vt = {
    .type = "LMHead",
    .forward = head_forward,
    .backward = head_backward,
    .destroy = head_destroy,
};

tg_status tg_lm_head_new(int64_t c, int64_t vocab, tg_module *tied_embedding, const char *norm, const tg_module_opts *o,
                         tg_module **mp)
{
    *mp = NULL;
    tg_param *table = NULL;
    if (tied_embedding) {
        table = tg_embedding_token_table(tied_embedding);
        if (!table) return tg_error(TG_EINVAL, "LMHead: can only be tied to an Embedding (got %s)", tied_embedding->vt->type);
        if (table->data->shape[0] != vocab || table->data->shape[1] != c)
            return tg_error(TG_EINVAL, "LMHead: tied token table %s is [%lld,%lld], expected [%lld,%lld] (vocab, width)", table->name,
                            (long long)table->data->shape[0], (long long)table->data->shape[1], (long long)vocab, (long long)c);
    }
    if (c < 1 || vocab < 1) return tg_error(TG_EINVAL, "LMHead: sizes must be positive (hidden_size %lld, vocab_size %lld)", (long long)c, (long long)vocab);
    tg_module *m, *tmp = NULL;
    TG_TRY(tg_module_alloc(&lm_head_vt, o, &m));
    struct lm_head *H = calloc(1, sizeof *H);
    if (!H) {
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->impl = H;
    H->c = c, H->vocab = vocab, H->dloss = 1.0, H->fused = 1;
    tg_module_opts co;
    char name[256];
    tg_nn_child_opts(m, "norm", &co, name, sizeof name);
    tg_status st = tg_norm_new_by_name(norm, c, &co, &tmp);
    if (st == TG_OK) st = tg_module_add_child(m, tmp);
    tg_module_release(tmp);
    tmp = NULL;
    if (st == TG_OK && table && table->contributors > 1)
        /* two heads on one table would make the engine wait for 3 contributions a
         * microbatch while only 2 come: its hooks would never fire */
        st = tg_error(TG_EINVAL, "token table %s is already tied to another LMHead", table->name);
    if (st == TG_OK) {
        co = m->opts; /* the projection's weight is "<name>.weight" */
        co.bias = 0;
        st = table ? tg_linear_new_shared(table, &co, &tmp) : tg_linear_new(c, vocab, &co, &tmp);
        if (st == TG_OK) tmp->fp8_exempt = 1; /* the LM head stays in its dtype under FP8 (as in TransformerEngine) */
        if (st == TG_OK) st = tg_module_add_child(m, tmp);
        tg_module_release(tmp);
    }
    if (st == TG_OK && table) {
        /* its wgrad for a microbatch is complete once the head and the embedding both added theirs */
        H->tied = tg_param_retain(table);
        table->contributors++;
    }
    if (st != TG_OK) {
        tg_module_release(m);
        return tg_error_prefix(st, "LMHead");
    }
    *mp = m;
    return TG_OK;
}

/* forward_loss; grad: the backward at once with d(loss) = dloss (the fused path). */
static tg_status forward_loss(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *targets, int ignore_index,
                              int grad, double dloss, tg_tensor **loss)
{
    char label[160], a[64];
    *loss = NULL;
    if (!m || m->vt != &lm_head_vt) return tg_error(TG_EINVAL, "forward_loss: not an LMHead");
    struct lm_head *H = m->impl;
    if (mb == 0) mb = tg_module_next_forward(m);
    /* rows of x by its own last dimension: a wrong width is the forward's to report */
    int64_t last = x && x->ndim >= 1 ? x->shape[x->ndim - 1] : 0, n = last ? tg_tensor_numel(x) / last : 0;
    if (!targets || targets->dtype != TG_I32 || tg_tensor_numel(targets) != n)
        return tg_error(TG_EINVAL, "%s forward_loss (microbatch %d): targets are %s %s, expected %lld i32 ids (one per row of x)",
                        tg_module_label(m, label, sizeof label), mb, targets ? tg_tensor_shape_str(targets, a, sizeof a) : "missing",
                        targets ? tg_dtype_name(targets->dtype) : "", (long long)n);
    if (grad && !isfinite(dloss))
        return tg_error(TG_EINVAL, "%s forward_loss (microbatch %d): dloss = %g is not finite", tg_module_label(m, label, sizeof label),
                        mb, dloss);
    tg_module *proj = m->children[1];
    tg_param *w = tg_linear_weight(proj);
    /* a delayed wgrad keeps its place (backward_dw): the unfused path saves what it needs */
    const int fused = H->fused && !proj->opts.delay_wgrad;
    int path = !fused ? UNFUSED : grad ? DONE : RECOMPUTE;
    tg_tensor *out = NULL, *rows = NULL, *t[3] = {NULL, NULL, NULL}, *losses = NULL;
    int64_t ns[1] = {n}, ls[1] = {2};
    H->norm_only = fused;
    tg_status st = tg_module_forward(m, mb, x, &out); /* logits, or (fused) the normed rows */
    H->norm_only = 0;
    if (st != TG_OK) return st;
    st = tg_nn_rows(out, &rows);
    if (st == TG_OK) st = tg_tensor_view(targets, 0, 1, ns, &t[1]);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, ls, &t[2]);
    if (path == UNFUSED) {
        if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, ns, &losses);
        if (st == TG_OK) st = tg_cross_entropy_forward(t[2], losses, rows, t[1], ignore_index);
        t[0] = out, out = NULL;
    } else {
        if (st == TG_OK) st = tg_engine_note_forward(proj); /* the projection ran in this step */
        if (st == TG_OK && path == DONE) st = tg_module_tensor(m, out->dtype, out->ndim, out->shape, &t[0]);
        if (st == TG_OK)
            st = chunked(H, w, rows, t[1], ignore_index, t[2], 1, dloss, path == DONE ? t[0] : NULL,
                         path == DONE ? first_beta(H, w) : 0.0);
        if (st == TG_OK && path == RECOMPUTE) st = tg_tensor_ref(out, &t[0]);
    }
    if (st == TG_OK) st = tg_tensor_ref(t[2], loss);
    tg_tensor_free(rows);
    tg_tensor_free(losses);
    tg_tensor_free(out);
    if (st != TG_OK) {
        for (int i = 0; i < 3; i++) tg_tensor_free(t[i]);
        if (fused) { /* the norm's context of mb goes too */
            struct tg_saved *ns_;
            if (tg_module_take(m->children[0], mb, &ns_) == TG_OK) tg_saved_free(ns_);
        }
        return tg_error_prefix(st, "%s forward_loss (microbatch %d)", tg_module_label(m, label, sizeof label), mb);
    }
    st = tg_module_save(m, mb, t, 3);
    struct tg_saved *s;
    for (s = m->saved; s && s->mb != mb; s = s->next) {}
    if (s) {
        s->ival = (int64_t)(uint32_t)ignore_index | (int64_t)path << 32;
        s->dval = dloss;
    }
    if (st == TG_OK && path == DONE) {
        if (H->pending_step != tg_step_index()) H->pending = 0;
        H->pending++, H->pending_step = tg_step_index();
    }
    if (st != TG_OK) {
        tg_tensor_free(*loss);
        *loss = NULL;
    }
    return st;
}

tg_status tg_lm_head_forward_loss(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *targets, int ignore_index,
                                  tg_tensor **loss)
{
    return forward_loss(m, mb, x, targets, ignore_index, 0, 1.0, loss);
}

tg_status tg_lm_head_forward_loss_grad(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *targets,
                                       int ignore_index, double dloss, tg_tensor **loss)
{
    return forward_loss(m, mb, x, targets, ignore_index, 1, dloss, loss);
}

tg_status tg_lm_head_set_fused(tg_module *m, int fused, int64_t chunk_rows)
{
    if (!m || m->vt != &lm_head_vt) return tg_error(TG_EINVAL, "set_fused: not an LMHead");
    if (chunk_rows < 0) return tg_error(TG_EINVAL, "LMHead: chunk rows must be >= 0 (0: automatic), got %lld", (long long)chunk_rows);
    if (m->saved)
        return tg_error(TG_ESTATE, "LMHead: the fused loss cannot change while microbatch %d waits for its backward", m->saved->mb);
    struct lm_head *H = m->impl;
    H->fused = fused != 0, H->chunk_rows = chunk_rows;
    return TG_OK;
}

tg_status tg_lm_head_backward_loss(tg_module *m, int mb, double dloss, tg_tensor **dx)
{
    *dx = NULL;
    if (!m || m->vt != &lm_head_vt) return tg_error(TG_EINVAL, "backward_loss: not an LMHead");
    struct lm_head *H = m->impl;
    H->dloss = dloss;
    tg_status st = tg_module_backward(m, mb, NULL, dx);
    H->dloss = 1.0;
    return st;
}
