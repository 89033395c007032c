/* embedding.c — token + learned position embedding: idx (B, T) i32 -> (B, T, C); wgrad scatter-adds into the tables. */
#include "nn/nn.h"

struct embedding {
    int64_t vocab, c, max_t;
    tg_param *wte; /* (V, C) token table; an LM head may share it (contributors 2) */
    tg_param *wpe; /* (max_t, C) position table */
};

/* saved: t[0] = idx (B, T) i32; wgrad item: t[0] = idx, t[1] = dy (B, T, C) */

static tg_status embedding_forward(tg_module *m, int mb, const tg_tensor *idx, tg_tensor **y)
{
    struct embedding *E = m->impl;
    char a[64];
    if (idx->ndim != 2 || idx->dtype != TG_I32 || idx->shape[1] > E->max_t || idx->shape[1] < 1)
        return tg_error(TG_EINVAL, "idx is %s %s, expected (B, T) i32 token ids with 1 <= T <= %lld",
                        tg_tensor_shape_str(idx, a, sizeof a), tg_dtype_name(idx->dtype), (long long)E->max_t);
    int64_t shape[3] = {idx->shape[0], idx->shape[1], E->c};
    tg_tensor *out = NULL, *keep = NULL;
    tg_status st = tg_module_tensor(m, m->opts.dtype, 3, shape, &out);
    if (st == TG_OK) st = tg_embedding_forward(out, idx, E->wte->data, E->wpe->data);
    if (st == TG_OK) st = tg_tensor_ref(idx, &keep);
    if (st == TG_OK) st = tg_module_save(m, mb, &keep, 1);
    if (st != TG_OK) {
        tg_tensor_free(out);
        return st;
    }
    *y = out;
    return TG_OK;
}

static tg_status embedding_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    struct embedding *E = m->impl;
    struct tg_saved *s;
    TG_TRY(tg_module_peek(m, mb, &s));
    int64_t want[3] = {s->t[0]->shape[0], s->t[0]->shape[1], E->c};
    char a[64];
    if (!dy || dy->ndim != 3 || dy->dtype != m->opts.dtype || dy->shape[0] != want[0] || dy->shape[1] != want[1] ||
        dy->shape[2] != want[2])
        return tg_error(TG_EINVAL, "dy is %s %s, expected [%lld,%lld,%lld] %s", dy ? tg_tensor_shape_str(dy, a, sizeof a) : "missing",
                        dy ? tg_dtype_name(dy->dtype) : "", (long long)want[0], (long long)want[1], (long long)want[2],
                        tg_dtype_name(m->opts.dtype));
    TG_TRY(tg_tensor_ref(dy, &s->t[1]));
    s->n = 2;
    tg_module_take(m, mb, &s);
    *dx = NULL; /* token ids have no gradient */
    return tg_module_wgrad_or_queue(m, s);
}

static tg_status embedding_wgrad(tg_module *m, struct tg_saved *item)
{
    struct embedding *E = m->impl;
    const tg_tensor *idx = item->t[0], *dy = item->t[1];
    /* one call per table: a tied wte may accumulate while wpe overwrites */
    tg_status st = tg_embedding_backward_dw(tg_param_wgrad_target(E->wte), NULL, dy, idx, tg_param_wgrad_accumulate(E->wte));
    if (st == TG_OK) st = tg_embedding_backward_dw(NULL, tg_param_wgrad_target(E->wpe), dy, idx, tg_param_wgrad_accumulate(E->wpe));
    if (st == TG_OK) st = tg_param_wgrad_done(E->wte, item->mb);
    if (st == TG_OK) st = tg_param_wgrad_done(E->wpe, item->mb);
    return st;
}

static void embedding_destroy(tg_module *m) { free(m->impl); }

static const struct tg_module_vtbl embedding_vt = {
    .type = "Embedding",
    .forward = embedding_forward,
    .backward = embedding_backward,
    .wgrad = embedding_wgrad,
    .destroy = embedding_destroy,
};

tg_status tg_embedding_new(int64_t vocab, int64_t c, int64_t max_t, const tg_module_opts *o, tg_module **mp)
{
    *mp = NULL;
    if (vocab < 1 || c < 1 || max_t < 1)
        return tg_error(TG_EINVAL, "Embedding: sizes must be positive (num_embeddings %lld, embedding_dim %lld, "
                        "max_position_embeddings %lld)", (long long)vocab,
                        (long long)c, (long long)max_t);
    tg_module *m;
    TG_TRY(tg_module_alloc(&embedding_vt, o, &m));
    struct embedding *E = calloc(1, sizeof *E);
    if (!E) {
        tg_module_release(m);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    m->impl = E;
    E->vocab = vocab, E->c = c, E->max_t = max_t;
    int64_t ts[2] = {vocab, c}, ps[2] = {max_t, c};
    tg_status st = tg_module_add_param(m, "wte", 2, ts, m->opts.init_std, 0.0, &E->wte);
    if (st == TG_OK) st = tg_module_add_param(m, "wpe", 2, ps, m->opts.init_std, 0.0, &E->wpe);
    if (st != TG_OK) {
        tg_module_release(m);
        return st;
    }
    *mp = m;
    return TG_OK;
}

/* The token table, for an LM head tied to this embedding (NULL if m is not an Embedding). */
tg_param *tg_embedding_token_table(tg_module *m)
{
    return m && m->vt == &embedding_vt ? ((struct embedding *)m->impl)->wte : NULL;
}
