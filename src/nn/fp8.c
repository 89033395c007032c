/* fp8.c — FP8 recipes, fp8_autocast, and the per-Linear scaling state (amax history, scales, weight cache). */
#include "core/debug.h"
#include "nn/nn.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ recipes */
void tg_fp8_recipe_delayed(tg_fp8_recipe *r)
{
    if (!r) return;
    memset(r, 0, sizeof *r);
    r->scaling = TG_FP8_DELAYED;
    r->format = TG_FP8_HYBRID;
    r->margin = 0;
    r->amax_history_len = 1024;
    r->amax_compute_algo = TG_FP8_AMAX_MAX;
}

void tg_fp8_recipe_current(tg_fp8_recipe *r)
{
    if (!r) return;
    tg_fp8_recipe_delayed(r);
    r->scaling = TG_FP8_CURRENT;
    r->amax_history_len = 1;
    r->amax_compute_algo = TG_FP8_AMAX_MOST_RECENT;
}

tg_status tg_fp8_recipe_check(const tg_fp8_recipe *r)
{
    if (!r) return tg_error(TG_EINVAL, "FP8 recipe: NULL");
    if (r->scaling != TG_FP8_OFF && r->scaling != TG_FP8_DELAYED && r->scaling != TG_FP8_CURRENT)
        return tg_error(TG_EINVAL, "FP8 recipe: scaling %d is not one of off, delayed, current", (int)r->scaling);
    if (r->scaling == TG_FP8_OFF) return TG_OK; /* FP8 off: the other fields are not used */
    if (r->format != TG_FP8_HYBRID && r->format != TG_FP8_FORMAT_E4M3)
        return tg_error(TG_EINVAL, "FP8 recipe: fp8_format %d is not HYBRID or E4M3", (int)r->format);
    if (r->margin < 0 || r->margin > 127)
        return tg_error(TG_EINVAL, "FP8 recipe: margin = %d must be an integer in 0..127", r->margin);
    if (r->amax_history_len < 1 || r->amax_history_len > (1 << 20))
        return tg_error(TG_EINVAL, "FP8 recipe: amax_history_len = %d must be in 1..%d", r->amax_history_len, 1 << 20);
    if (r->amax_compute_algo != TG_FP8_AMAX_MAX && r->amax_compute_algo != TG_FP8_AMAX_MOST_RECENT)
        return tg_error(TG_EINVAL, "FP8 recipe: amax_compute_algo %d is not max or most_recent", (int)r->amax_compute_algo);
    if (r->scaling == TG_FP8_CURRENT && (r->amax_history_len != 1 || r->amax_compute_algo != TG_FP8_AMAX_MOST_RECENT))
        return tg_error(TG_EINVAL, "FP8 recipe: current scaling has no amax history (amax_history_len %d, amax_compute_algo %s)",
                        r->amax_history_len, r->amax_compute_algo == TG_FP8_AMAX_MAX ? "max" : "most_recent");
    return TG_OK;
}

static int recipe_same(const tg_fp8_recipe *a, const tg_fp8_recipe *b)
{
    return a->scaling == b->scaling && a->format == b->format && a->margin == b->margin &&
           a->amax_history_len == b->amax_history_len && a->amax_compute_algo == b->amax_compute_algo;
}

/* ------------------------------------------------------------------ fp8_autocast */
static struct {
    int active, enabled;
    tg_fp8_recipe r;
} autocast;

tg_status tg_fp8_autocast_set(int active, int enabled, const tg_fp8_recipe *r)
{
    if (active && enabled) {
        TG_TRY(tg_fp8_recipe_check(r));
        if (r->scaling == TG_FP8_OFF) return tg_error(TG_EINVAL, "fp8_autocast: an enabled autocast needs a recipe that scales");
    }
    autocast.active = active != 0;
    autocast.enabled = active && enabled;
    if (autocast.enabled) autocast.r = *r;
    else memset(&autocast.r, 0, sizeof autocast.r);
    return TG_OK;
}

void tg_fp8_autocast_get(int *active, int *enabled, tg_fp8_recipe *r)
{
    if (active) *active = autocast.active;
    if (enabled) *enabled = autocast.enabled;
    if (r) *r = autocast.r;
}

const tg_fp8_recipe *tg_fp8_effective(const tg_module *m)
{
    if (m->fp8_exempt) return NULL;
    if (autocast.active) return autocast.enabled ? &autocast.r : NULL;
    return m->opts.fp8.scaling != TG_FP8_OFF ? &m->opts.fp8 : NULL;
}

tg_dtype tg_fp8_role_dtype(const tg_fp8_recipe *r, int role)
{
    return role == TG_FP8_ROLE_GRAD && r->format == TG_FP8_HYBRID ? TG_E5M2 : TG_E4M3;
}

/* ------------------------------------------------------------------ the scaling state */
void tg_fp8_state_free(struct tg_fp8_state *s)
{
    if (!s) return;
    for (int j = 0; j < TG_FP8_ROLES; j++) {
        tg_tensor_free(s->amax_v[j]);
        tg_tensor_free(s->scale_v[j]);
        tg_tensor_free(s->scale_inv_v[j]);
    }
    tg_tensor_free(s->history);
    tg_tensor_free(s->scale);
    tg_tensor_free(s->scale_inv);
    tg_tensor_free(s->w8);
    tg_tensor_free(s->w8_t);
    tg_tensor_free(s->w_scale_inv);
    free(s);
}

static int captures(const tg_module *m) { return tg_device_capture_graph(m->opts.device) != NULL; }

static tg_status state_new(tg_module *m, const tg_fp8_recipe *r, int64_t out, int64_t in, struct tg_fp8_state **sp)
{
    char a[160];
    if (captures(m))
        return tg_error(TG_ECAPTURE, "%s: its FP8 scaling state cannot be made while the device captures (run one FP8 "
                        "forward eagerly first, or give the module fp8 = recipe when it is made)",
                        tg_module_label(m, a, sizeof a));
    struct tg_fp8_state *s = calloc(1, sizeof *s);
    if (!s) return tg_error(TG_ENOMEM, "out of host memory");
    s->r = *r;
    int64_t hs[2] = {r->amax_history_len, TG_FP8_ROLES}, vs[1] = {TG_FP8_ROLES}, one[1] = {1};
    int64_t ws[2] = {out, in}, wts[2] = {in, out};
    tg_dtype wdt = tg_fp8_role_dtype(r, TG_FP8_ROLE_WEIGHT);
    tg_status st = tg_module_tensor(m, TG_F32, 2, hs, &s->history);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, vs, &s->scale);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, vs, &s->scale_inv);
    if (st == TG_OK) st = tg_module_tensor(m, wdt, 2, ws, &s->w8);
    if (st == TG_OK) st = tg_module_tensor(m, wdt, 2, wts, &s->w8_t);
    if (st == TG_OK) st = tg_module_tensor(m, TG_F32, 1, one, &s->w_scale_inv);
    if (st == TG_OK) st = tg_fill(s->history, 0.0);
    if (st == TG_OK) st = tg_fill(s->scale, 1.0);
    if (st == TG_OK) st = tg_fill(s->scale_inv, 1.0);
    if (st == TG_OK) st = tg_fill(s->w_scale_inv, 1.0);
    for (int j = 0; j < TG_FP8_ROLES && st == TG_OK; j++) {
        st = tg_tensor_view(s->history, j, 1, one, &s->amax_v[j]);
        if (st == TG_OK) st = tg_tensor_view(s->scale, j, 1, one, &s->scale_v[j]);
        if (st == TG_OK) st = tg_tensor_view(s->scale_inv, j, 1, one, &s->scale_inv_v[j]);
    }
    if (st != TG_OK) {
        tg_fp8_state_free(s);
        return tg_error_prefix(st, tg_module_label(m, a, sizeof a));
    }
    *sp = s;
    return TG_OK;
}

tg_status tg_fp8_state_ensure(tg_module *m, const tg_fp8_recipe *r, int64_t out, int64_t in)
{
    if (m->fp8 && recipe_same(&m->fp8->r, r)) return TG_OK;
    struct tg_fp8_state *s = NULL;
    TG_TRY(state_new(m, r, out, in, &s));
    tg_fp8_state_free(m->fp8);
    m->fp8 = s;
    return TG_OK;
}

static void role_max(const tg_fp8_recipe *r, double *mx)
{
    for (int j = 0; j < TG_FP8_ROLES; j++) mx[j] = tg_fp8_max(tg_fp8_role_dtype(r, j));
}

tg_status tg_fp8_state_update(struct tg_fp8_state *s)
{
    if (s->r.scaling != TG_FP8_DELAYED) return TG_OK;
    double mx[TG_FP8_ROLES];
    role_max(&s->r, mx);
    return tg_fp8_scale_update(s->history, s->scale, s->scale_inv, mx, s->r.margin,
                               s->r.amax_compute_algo == TG_FP8_AMAX_MOST_RECENT);
}

tg_status tg_fp8_state_cast(struct tg_fp8_state *s, int role, const tg_tensor *x, tg_tensor *y, tg_tensor *y_t,
                            tg_tensor *y_scale_inv)
{
    if (s->r.scaling == TG_FP8_DELAYED)
        return tg_fp8_cast_transpose(y, y_t, x, s->scale_v[role], s->amax_v[role], y_scale_inv, TG_FP8_AMAX_ACCUMULATE);
    /* current scaling: this tensor's amax, its scale (kept when the amax is 0 or not finite), then the cast */
    double mx = tg_fp8_max(tg_fp8_role_dtype(&s->r, role));
    TG_TRY(tg_fp8_amax(s->amax_v[role], x, 0));
    TG_TRY(tg_fp8_scale_update(s->amax_v[role], s->scale_v[role], s->scale_inv_v[role], &mx, 0, 1));
    return tg_fp8_cast_transpose(y, y_t, x, s->scale_v[role], NULL, y_scale_inv, 0);
}

tg_status tg_fp8_state_cast_grad(struct tg_fp8_state *s, const tg_tensor *dy, const tg_tensor *gelu_x, tg_tensor *y,
                                 tg_tensor *y_t, tg_tensor *y_scale_inv, tg_tensor *dbias_part)
{
    const int g = TG_FP8_ROLE_GRAD;
    if (s->r.scaling == TG_FP8_DELAYED)
        return tg_fp8_cast_transpose_dbias(y, y_t, dy, gelu_x, s->scale_v[g], s->amax_v[g], y_scale_inv, dbias_part,
                                           TG_FP8_AMAX_ACCUMULATE);
    if (gelu_x) return tg_error(TG_EINVAL, "FP8 gradient cast: current scaling takes the gradient after GELU");
    double mx = tg_fp8_max(tg_fp8_role_dtype(&s->r, g));
    TG_TRY(tg_fp8_amax(s->amax_v[g], dy, 0));
    TG_TRY(tg_fp8_scale_update(s->amax_v[g], s->scale_v[g], s->scale_inv_v[g], &mx, 0, 1));
    return tg_fp8_cast_transpose_dbias(y, y_t, dy, NULL, s->scale_v[g], NULL, y_scale_inv, dbias_part, 0);
}

/* ------------------------------------------------------------------ modules */
static int in_graphed_set(const tg_module *m) { return m->exec_mode && strcmp(m->exec_mode, "graphed") == 0; }

static tg_status set_fp8_rec(tg_module *m, const tg_fp8_recipe *r)
{
    m->opts.fp8 = *r;
    if (m->fp8 && (r->scaling == TG_FP8_OFF || !recipe_same(&m->fp8->r, r))) {
        tg_fp8_state_free(m->fp8);
        m->fp8 = NULL;
    }
    if (r->scaling != TG_FP8_OFF && !m->fp8_exempt && m->vt->wgrad && m->nparams > 0 && strcmp(m->vt->type, "Linear") == 0) {
        const tg_tensor *w = m->params[0]->data;
        TG_TRY(tg_fp8_state_ensure(m, r, w->shape[0], w->shape[1]));
    }
    for (int i = 0; i < m->nchildren; i++) TG_TRY(set_fp8_rec(m->children[i], r));
    return TG_OK;
}

static tg_status check_settable(const tg_module *m)
{
    char a[160];
    if (in_graphed_set(m))
        return tg_error(TG_ESTATE, "%s: set_fp8 while it belongs to a graphed set (its graphs hold the old setting)",
                        tg_module_label(m, a, sizeof a));
    for (int i = 0; i < m->nchildren; i++) TG_TRY(check_settable(m->children[i]));
    return TG_OK;
}

tg_status tg_module_set_fp8(tg_module *m, const tg_fp8_recipe *r)
{
    char a[160];
    TG_NONNULL(m, "the module");
    tg_fp8_recipe off;
    memset(&off, 0, sizeof off);
    if (!r) r = &off;
    TG_TRY(tg_fp8_recipe_check(r));
    if (captures(m))
        return tg_error(TG_ECAPTURE, "%s: set_fp8 while its device captures", tg_module_label(m, a, sizeof a));
    TG_TRY(check_settable(m));
    return set_fp8_rec(m, r);
}

static tg_status push_tensor(tg_tensor ***arr, int *n, tg_tensor *t)
{
    tg_tensor **na = realloc(*arr, (size_t)(*n + 1) * sizeof *na);
    if (!na) return tg_error(TG_ENOMEM, "out of host memory");
    na[(*n)++] = t;
    *arr = na;
    return TG_OK;
}

static tg_status fp8_tensors_rec(tg_module *m, tg_tensor ***arr, int *n)
{
    if (m->fp8) {
        TG_TRY(push_tensor(arr, n, m->fp8->history));
        TG_TRY(push_tensor(arr, n, m->fp8->scale));
        TG_TRY(push_tensor(arr, n, m->fp8->scale_inv));
    }
    for (int i = 0; i < m->nchildren; i++) TG_TRY(fp8_tensors_rec(m->children[i], arr, n));
    return TG_OK;
}

tg_status tg_module_fp8_tensors(tg_module *m, tg_tensor ***out, int *n)
{
    *out = NULL, *n = 0;
    tg_status st = fp8_tensors_rec(m, out, n);
    if (st != TG_OK) {
        free(*out);
        *out = NULL, *n = 0;
    }
    return st;
}

tg_status tg_module_fp8_prepare(tg_module *m)
{
    const tg_fp8_recipe *r = tg_fp8_effective(m);
    if (r && m->vt->wgrad && m->nparams > 0 && strcmp(m->vt->type, "Linear") == 0) {
        const tg_tensor *w = m->params[0]->data;
        TG_TRY(tg_fp8_state_ensure(m, r, w->shape[0], w->shape[1]));
    }
    for (int i = 0; i < m->nchildren; i++) TG_TRY(tg_module_fp8_prepare(m->children[i]));
    return TG_OK;
}

/* ------------------------------------------------------------------ producers */
void tg_fp8_input_free(struct tg_fp8_input *in)
{
    tg_tensor_free(in->x8);
    tg_tensor_free(in->x8_t);
    tg_tensor_free(in->scale_inv);
    memset(in, 0, sizeof *in);
}

static int writes_fp8(const tg_module *m) { return tg_norm_writes_fp8(m) || tg_linear_writes_fp8(m); }

/* The Linear that would take an FP8 input given to m: m itself, or through composites that hand their input to
 * their first child (fp8_in_first: CausalSelfAttention's qkv); NULL when none can. */
static tg_module *input_leaf(tg_module *m)
{
    for (; m && !m->route && !m->npre; m = m->nchildren ? m->children[0] : NULL) {
        if (tg_linear_takes_fp8_input(m)) return m;
        if (!m->fp8_in_first) return NULL;
    }
    return NULL;
}

tg_status tg_fp8_forward_into(tg_module *c, tg_module *next, int mb, const tg_tensor *x, const tg_tensor *res,
                              const struct tg_fp8_input *in, struct tg_fp8_input *out, tg_tensor **y)
{
    memset(out, 0, sizeof *out);
    *y = NULL;
    tg_module *leaf = next && !tg_debug_get(TG_DEBUG_FP8_UNFUSED_PRODUCERS) && writes_fp8(c) ? input_leaf(next) : NULL;
    if (leaf) {
        const int64_t cols = x->ndim ? x->shape[x->ndim - 1] : 1;
        TG_TRY(tg_linear_fp8_input_begin(leaf, mb, cols ? tg_tensor_numel(x) / cols : 0, out));
    }
    c->fp8_in = in;
    c->fp8_out = leaf ? out : NULL;
    tg_status st = tg_module_forward_res(c, mb, x, res, y);
    c->fp8_in = c->fp8_out = NULL;
    if (st != TG_OK) tg_fp8_input_free(out);
    return st;
}

tg_status tg_fp8_chain_forward_res(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y)
{
    if (m->nchildren == 0) return tg_chain_forward_res(m, mb, x, res, y);
    tg_tensor *cur = NULL; /* owned, as in tg_chain_forward_res */
    struct tg_fp8_input in = {0}, out; /* the current child's FP8 input (from the child before), its output */
    int have_in = 0;
    tg_status st = TG_OK;
    for (int i = 0; i < m->nchildren && st == TG_OK; i++) {
        const int last = i == m->nchildren - 1;
        /* the first child gets what m was given (m->fp8_in, for fp8_in_first composites) */
        const struct tg_fp8_input *cin = i == 0 ? m->fp8_in : have_in ? &in : NULL;
        tg_tensor *nx = NULL;
        st = tg_fp8_forward_into(m->children[i], last ? NULL : m->children[i + 1], mb, cur ? cur : x,
                                 last ? res : NULL, cin, &out, &nx);
        tg_fp8_input_free(&in); /* the consumer keeps its own references */
        in = out;
        have_in = in.x8 != NULL;
        tg_tensor_free(cur);
        cur = nx;
    }
    tg_fp8_input_free(&in);
    if (st != TG_OK) {
        tg_tensor_free(cur);
        return st;
    }
    *y = cur;
    return TG_OK;
}

tg_status tg_fp8_chain_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y)
{
    return tg_fp8_chain_forward_res(m, mb, x, NULL, y);
}
