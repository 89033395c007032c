/* lm_head.c — LM head: final norm, projection to the vocabulary (own or tied to an embedding's table), softmax cross-entropy. */
#include "nn/nn.h"

struct lm_head {
    int64_t c, vocab;
    tg_param *tied; /* the embedding's token table when tied (retained), else NULL */
    double dloss;   /* d(loss) of the backward in progress (tg_lm_head_backward_loss) */
};

/* children: [0] norm, [1] projection (Linear without bias; shares the table when tied).
 * saved by forward_loss: t[0] = logits (..., V), t[1] = targets (N) i32, t[2] = loss (2) f32;
 * ival = ignore_index */

static void drop_saved(tg_module *m, int mb)
{
    struct tg_saved *s;
    for (s = m->saved; s && s->mb != mb; s = s->next) {}
    if (s && tg_module_take(m, mb, &s) == TG_OK) tg_saved_free(s);
}

static tg_status head_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    drop_saved(m, mb); /* a plain forward (generation) has no loss to differentiate */
    return tg_chain_forward(m, mb, x, y);
}

static tg_status head_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    struct lm_head *H = m->impl;
    if (dy) {
        drop_saved(m, mb);
        return tg_chain_backward(m, mb, dy, dx);
    }
    struct tg_saved *s;
    for (s = m->saved; s && s->mb != mb; s = s->next) {}
    if (!s)
        return tg_error(TG_ESTATE, "backward without dy needs forward_loss of microbatch %d first (pass dlogits as dy after a plain forward)", mb);
    tg_module_take(m, mb, &s);
    tg_tensor *logits = NULL;
    tg_status st = tg_nn_rows(s->t[0], &logits);
    /* dlogits overwrite the logits: nothing else needs them */
    if (st == TG_OK) st = tg_cross_entropy_backward(logits, logits, s->t[1], s->t[2], H->dloss, (int)s->ival);
    tg_tensor_free(logits);
    if (st == TG_OK) st = tg_chain_backward(m, mb, s->t[0], dx);
    tg_saved_free(s);
    return st;
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
    if (c < 1 || vocab < 1) return tg_error(TG_EINVAL, "LMHead: sizes must be positive (width %lld, vocab %lld)", (long long)c, (long long)vocab);
    tg_module *m, *tmp = NULL;
    TG_TRY(tg_module_alloc(&lm_head_vt, o, &m));
    struct lm_head *H = calloc(1, sizeof *H);
    if (!H) {
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->impl = H;
    H->c = c, H->vocab = vocab, H->dloss = 1.0;
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

tg_status tg_lm_head_forward_loss(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *targets, int ignore_index,
                                  tg_tensor **loss)
{
    char label[160], a[64];
    *loss = NULL;
    if (!m || m->vt != &lm_head_vt) return tg_error(TG_EINVAL, "forward_loss: not an LMHead");
    if (mb == 0) mb = tg_module_next_forward(m);
    /* rows of x by its own last dimension: a wrong width is the forward's to report */
    int64_t last = x && x->ndim >= 1 ? x->shape[x->ndim - 1] : 0, n = last ? tg_tensor_numel(x) / last : 0;
    if (!targets || targets->dtype != TG_I32 || tg_tensor_numel(targets) != n)
        return tg_error(TG_EINVAL, "%s forward_loss (microbatch %d): targets are %s %s, expected %lld i32 ids (one per row of x)",
                        tg_module_label(m, label, sizeof label), mb, targets ? tg_tensor_shape_str(targets, a, sizeof a) : "missing",
                        targets ? tg_dtype_name(targets->dtype) : "", (long long)n);
    tg_tensor *logits = NULL, *rows = NULL, *t[3] = {NULL, NULL, NULL}, *losses = NULL;
    TG_TRY(tg_module_forward(m, mb, x, &logits));
    int64_t ns[1] = {n}, ls[1] = {2};
    tg_status st = tg_nn_rows(logits, &rows);
    if (st == TG_OK) st = tg_tensor_view(targets, 0, 1, ns, &t[1]);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, ls, &t[2]);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, ns, &losses);
    if (st == TG_OK) st = tg_cross_entropy_forward(t[2], losses, rows, t[1], ignore_index);
    if (st == TG_OK) st = tg_tensor_ref(t[2], loss);
    tg_tensor_free(rows);
    tg_tensor_free(losses);
    t[0] = logits;
    if (st != TG_OK) {
        for (int i = 0; i < 3; i++) tg_tensor_free(t[i]);
        return tg_error_prefix(st, "%s forward_loss (microbatch %d)", tg_module_label(m, label, sizeof label), mb);
    }
    st = tg_module_save(m, mb, t, 3);
    struct tg_saved *s;
    for (s = m->saved; s && s->mb != mb; s = s->next) {}
    if (s) s->ival = ignore_index;
    if (st != TG_OK) {
        tg_tensor_free(*loss);
        *loss = NULL;
    }
    return st;
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
