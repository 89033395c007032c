/* graphed.c — graphed callables: warm-up, capture per (chunk, microbatch) in replay order, checked replay, hooks after wgrad replays. */
#include "core/debug.h"
#include "core/ops_optim.h"
#include "trace/trace.h"
#include "graph/graphed.h"

#include <limits.h>
#include <string.h>

/* What a B or W graph computed wgrad for: each parameter once per contribution. */
struct wgrad_set {
    tg_param **p; /* references */
    tg_tensor **target; /* p's wgrad target at capture (handles): the graph writes that memory */
    int n, cap;
};

struct entry {           /* one (chunk, microbatch) */
    tg_graph *f, *b, *w;
    tg_tensor *in;       /* static input (sample's shape and dtype) */
    tg_tensor *out;      /* static output, written by the F graph */
    tg_tensor *dout;     /* static output gradient, read by the B graph */
    tg_tensor *din;      /* static input gradient, written by the B graph (NULL: none) */
    tg_tensor *in2;      /* two-input chunks: the static residual input (y = res + f(x)) */
    tg_tensor *dout2;    /* chunks whose B takes a residual gradient: the static one (dx = dres + dgrad(dy)) */
    /* tuple chunks: static inputs, outputs, output gradients (NULL: the output takes none) and input
     * gradients (NULL: the input gets none), tn / tm of each (in, out, ... above stay NULL) */
    tg_tensor *tin[TG_MAX_IO], *tout[TG_MAX_IO], *tdout[TG_MAX_IO], *tdin[TG_MAX_IO];
    struct wgrad_set bset, wset;
};

struct tg_graphed {
    tg_module **chunks;  /* references */
    int nchunks, mbs;
    struct entry *e;     /* [(chunk - 1) * mbs + (mb - 1)] */
    int *has_w;          /* per chunk */
    int *res;            /* per chunk: its F graph takes a residual input (forward_res) */
    int *dres;           /* per chunk: its B graph takes a residual gradient (backward_res; in place only) */
    int *no_dy;          /* per chunk: its module's backward takes no dy (its output feeds a loss inside it) */
    tg_tensor **out_like; /* per chunk: a warm-up output (the residual input's layout), freed after capture */
    int *tn, *tm;        /* per chunk: tuple chunks' inputs and outputs; 0 for others */
    const tg_tensor *const *const *tsamples; /* tg_graphed_opts.tuples while warm-up and capture run */
    struct tg_graph_action *order;
    int norder, pos;
    tg_pool *pool;
    tg_device dev;
    int skip_hooks_after_w; /* TG_DEBUG_SKIP_HOOKS_AFTER_REPLAY when the set was made */
    int shared;          /* every microbatch replays microbatch 1's graphs (tg_graphed_shared) */
    int reuse;           /* static buffers go back to the pool when their last reader is captured (tg_graphed_reused) */
    int reuse_early;     /* test switch graph_reuse_early: ... at their microbatch's B, deferred W readers ignored */
    int *slot_of;        /* per entry: the microbatch whose graphs it replays (microbatches of a chunk whose lifetimes
                            do not overlap share one set); NULL: each its own */
    long *slot_end;      /* per entry that owns graphs others replay: the last position any of them is live */
    int slot_share;      /* tg_graphed_opts.share_overlap, with reuse on and no chain */
    struct tg_graph_action *capture_order; /* test switch graph_share_any_order: microbatch 1's actions */
    int ncapture;        /* actions of the order captured: all, or microbatch 1's block when shared */
    tg_stream *on;       /* the next replay call's stream (tg_graphed_replay_on), or NULL */
    tg_event *wait;      /* and the event it waits for first, or NULL */
    struct tg_module_route *routes; /* per chunk, when in place (partial capture); else NULL */
    int start;           /* pos at the start of the order (after the W actions it skips) */
    tg_graphed *next_set, *prev_set; /* every set not yet freed (sets sharing a pool check each other) */
    int running;         /* replay calls under way: their hooks run inside them (tg_graphed_running) */
    char running_op;     /* the outermost one's op and chunk */
    int running_chunk;
    int64_t pass_step;   /* the step (tg_step_index) the order's current pass began in */
    char action_op;      /* the action the outermost call under way passed check_order with (0: none) */
    int action_chunk, action_mb;
    char failed_op;      /* the last call that failed after its order check, while the pass it left goes on (0: none) */
    int failed_chunk, failed_mb;
};

static tg_graphed *sets; /* every set not yet freed, newest first */

static void sets_link(tg_graphed *g)
{
    g->prev_set = NULL;
    g->next_set = sets;
    if (sets) sets->prev_set = g;
    sets = g;
}

static void sets_unlink(tg_graphed *g)
{
    if (g->prev_set) g->prev_set->next_set = g->next_set;
    else if (sets == g) sets = g->next_set;
    if (g->next_set) g->next_set->prev_set = g->prev_set;
    g->next_set = g->prev_set = NULL;
}

static int capturing_depth; /* warm-up or capture in progress */
int tg_graph_capturing(void) { return capturing_depth > 0; }

static struct entry *entry_of(tg_graphed *g, int chunk, int mb) { return &g->e[(chunk - 1) * g->mbs + (mb - 1)]; }
/* The entry whose graphs replay for (chunk, mb): microbatch 1's when shared. */
static struct entry *replay_entry(tg_graphed *g, int chunk, int mb)
{
    return entry_of(g, chunk, g->shared ? 1 : g->slot_of ? g->slot_of[(chunk - 1) * g->mbs + mb - 1] : mb);
}

/* Whether the order is M blocks, block m being block 1 with microbatch m: the
 * microbatches run one after another, each through the same actions. */
static int order_is_sequential(const tg_graphed *g)
{
    if (g->norder % g->mbs) return 0;
    int len = g->norder / g->mbs;
    for (int m = 1; m <= g->mbs; m++)
        for (int k = 0; k < len; k++) {
            const struct tg_graph_action *a = &g->order[(m - 1) * len + k], *b = &g->order[k];
            if (a->op != b->op || a->chunk != b->chunk || a->mb != m || b->mb != 1) return 0;
        }
    return 1;
}

/* ------------------------------------------------------------------ wgrad sets (filled by the engine's capture observer) */
static tg_status set_add(struct wgrad_set *s, tg_param *p)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        tg_param **np = realloc(s->p, (size_t)cap * sizeof *np);
        if (np) s->p = np;
        tg_tensor **nt = np ? realloc(s->target, (size_t)cap * sizeof *nt) : NULL;
        if (nt) s->target = nt;
        if (!np || !nt) return tg_error(TG_ENOMEM, "out of host memory");
        s->cap = cap;
    }
    TG_TRY(tg_tensor_ref(tg_param_wgrad_target(p), &s->target[s->n]));
    s->p[s->n++] = tg_param_retain(p);
    return TG_OK;
}

static void set_free(struct wgrad_set *s)
{
    for (int i = 0; i < s->n; i++) {
        tg_param_release(s->p[i]);
        tg_tensor_free(s->target[i]);
    }
    free(s->p);
    free(s->target);
    memset(s, 0, sizeof *s);
}

/* ud: the set of the B or W graph being captured; NULL while an F graph is
 * (the observer is set then too: the engine leaves forwards to this layer). */
static tg_status observe(void *ud, tg_param *p, int mb)
{
    (void)mb;
    if (!ud) return tg_error(TG_ESTATE, "a forward computed the wgrad of %s while captured", p->name);
    return set_add(ud, p);
}

/* Before a wgrad replay: graphs always accumulate, so a parameter whose next
 * contribution is the first of the step gets its target zeroed here — the
 * host-side "first microbatch overwrites" decision, taken at replay time. */
static tg_status zero_first_targets(struct wgrad_set *s)
{
    if (s->n == 0) return TG_OK;
    /* the graph writes the memory the target had at capture: a target re-pointed since (set_main_grad, a
       data-parallel wrapper's buckets) would get nothing while the old buffer took the gradients */
    for (int i = 0; i < s->n; i++)
        if (!tg_tensor_same_memory(tg_param_wgrad_target(s->p[i]), s->target[i])) {
            char a[64];
            return tg_error(TG_ESTATE, "replay: the wgrad target of %s (%s) was replaced after the graph was captured "
                                       "(capture again)",
                            s->p[i]->name, tg_tensor_shape_str(s->target[i], a, sizeof a));
        }
    tg_tensor **z = malloc((size_t)s->n * sizeof *z);
    if (!z) return tg_error(TG_ENOMEM, "out of host memory");
    int nz = 0;
    for (int i = 0; i < s->n; i++) {
        tg_param *p = s->p[i];
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= s->p[j] == p;
        if (!seen && tg_param_wgrad_accumulate(p) == 0.0) z[nz++] = tg_param_wgrad_target(p);
    }
    /* one launch for all of them (a memset per parameter cost a GPT-2 layer stack ~150 tiny kernels a step) */
    tg_status st = tg_zero_multi(z, nz);
    free(z);
    return st;
}

static tg_status fire(struct wgrad_set *s, int mb)
{
    for (int i = 0; i < s->n; i++) TG_TRY(tg_param_wgrad_done(s->p[i], mb));
    return TG_OK;
}

/* ------------------------------------------------------------------ helpers */
static void mark_forward(tg_module *m)
{
    m->forward_step = tg_step_index();
    m->exec_mode = "graphed";
    for (int i = 0; i < m->nchildren; i++) mark_forward(m->children[i]);
}

/* m and every module under it run as `mode` ("graphed" while a set holds them, "eager" after). */
static void set_mode(tg_module *m, const char *mode)
{
    m->exec_mode = mode;
    for (int i = 0; i < m->nchildren; i++) set_mode(m->children[i], mode);
}

static const char *op_name(char op) { return op == 'F' ? "F" : op == 'B' ? "B" : "W"; }

/* Whether g's order is part-way through a pass begun in another step than the one open now (0: outside steps): a
 * step that failed, or ended, before its pass finished. Its next call starts the order again (check_order). */
static int stale_pass(const tg_graphed *g) { return g->pos != g->start && g->pass_step != tg_step_index(); }

/* Sets sharing a pool: a range one set's capture freed (saved activations after their backward, temporaries) was
 * taken by the captures of sets made after it, which is safe only while each set's order replays whole before
 * another set of the pool replays: interleaved (A:F, B:F, B:B, A:B), B's graphs overwrite what A's F saved for
 * A's B. So a replay is refused while another set of the same pool is part-way through its order. */
static tg_status check_pool_turn(tg_graphed *g, char op, int chunk, int mb)
{
    for (tg_graphed *h = sets; h; h = h->next_set) {
        if (h == g || h->pool != g->pool || h->pos == h->start || stale_pass(h)) continue;
        char la[160], lb[160];
        const struct tg_graph_action *a = &h->order[h->pos];
        return tg_error(TG_ESTATE,
                        "graphed replay of %s chunk %d mb %d (the set of %s) while the set of %s, which shares its graph "
                        "pool, is part-way through its order (next: %s chunk %d mb %d, action %d of %d): sets sharing a "
                        "pool replay each order whole, one set after another, since later captures reuse memory earlier "
                        "ones freed (finish that set's order or reset it, or give each set its own pool)",
                        op_name(op), chunk, mb, tg_module_label(g->chunks[0], la, sizeof la),
                        tg_module_label(h->chunks[0], lb, sizeof lb), op_name(a->op), a->chunk, a->mb, h->pos + 1,
                        h->norder);
    }
    return TG_OK;
}

static void skip_empty_w(tg_graphed *g);

/* Starts the order again: its next action is the first. Routed modules forget the W actions the pass left
 * (their backward_dw would be refused as out of order). */
static void restart(tg_graphed *g)
{
    g->pos = 0;
    skip_empty_w(g);
    g->start = g->pos;
    g->failed_op = 0;
    for (int c = 0; g->routes && c < g->nchunks; c++) g->chunks[c]->route_wpend = 0;
}

/* An out-of-order error, saying which earlier call failed and left the pass part-way when one did. */
static tg_status out_of_order(tg_graphed *g, const char *got)
{
    const struct tg_graph_action *a = &g->order[g->pos];
    char why[200] = "";
    if (g->failed_op)
        snprintf(why, sizeof why,
                 "; the set's %s chunk %d mb %d failed, leaving its order there: reset() starts it again (as the next "
                 "step does)",
                 op_name(g->failed_op), g->failed_chunk, g->failed_mb);
    return tg_error(TG_ESTATE, "graphed replay out of order: expected %s chunk %d mb %d (action %d of %d), got %s%s",
                    op_name(a->op), a->chunk, a->mb, g->pos + 1, g->norder, got, why);
}

/* *mb = 0 takes the microbatch of the next action when it is op of chunk. */
static tg_status check_order(tg_graphed *g, char op, int chunk, int *mbp)
{
    if (chunk < 1 || chunk > g->nchunks) return tg_error(TG_EINVAL, "graphed %s: chunk %d of %d", op_name(op), chunk, g->nchunks);
    /* a pass left part-way by an earlier step (it failed, or ended before the pass did) is abandoned, as eager
       modules abandon the forwards of another step: nothing of it replays later, the F graphs overwrite its buffers */
    if (stale_pass(g)) restart(g);
    const struct tg_graph_action *a = &g->order[g->pos];
    if (*mbp == 0 && a->op == op && a->chunk == chunk) *mbp = a->mb;
    int mb = *mbp;
    char got[48];
    if (mb < 1 || mb > g->mbs) {
        if (mb == 0) {
            snprintf(got, sizeof got, "%s chunk %d", op_name(op), chunk);
            return out_of_order(g, got);
        }
        return tg_error(TG_EINVAL, "graphed %s: microbatch %d of %d", op_name(op), mb, g->mbs);
    }
    if (a->op != op || a->chunk != chunk || a->mb != mb) {
        snprintf(got, sizeof got, "%s chunk %d mb %d", op_name(op), chunk, mb);
        return out_of_order(g, got);
    }
    TG_TRY(check_pool_turn(g, op, chunk, mb));
    if (g->pos == g->start) g->pass_step = tg_step_index();
    g->action_op = op, g->action_chunk = chunk, g->action_mb = mb;
    return TG_OK;
}

/* W actions of chunks without W graphs are not replayed: the order skips them. */
static void skip_empty_w(tg_graphed *g)
{
    for (int i = 0; i < g->norder; i++) {
        const struct tg_graph_action *a = &g->order[g->pos];
        if (a->op != 'W' || g->has_w[a->chunk - 1]) return;
        g->pos = (g->pos + 1) % g->norder;
    }
}

static void advance(tg_graphed *g)
{
    g->pos = (g->pos + 1) % g->norder;
    skip_empty_w(g);
}

static tg_status check_like(const char *what, const tg_tensor *x, const tg_tensor *ref)
{
    char a[64], b[64];
    if (!tg_tensor_same_shape(x, ref) || x->dtype != ref->dtype)
        return tg_error(TG_EINVAL, "%s: got %s %s, captured with %s %s", what, tg_tensor_shape_str(x, a, sizeof a),
                        tg_dtype_name(x->dtype), tg_tensor_shape_str(ref, b, sizeof b), tg_dtype_name(ref->dtype));
    return TG_OK;
}

/* The default order: every F in chunk order, then B (and W) in reverse. */
static tg_status default_order(tg_graphed *g)
{
    int n = 3 * g->nchunks * g->mbs, k = 0;
    g->order = calloc((size_t)n, sizeof *g->order);
    if (!g->order) return tg_error(TG_ENOMEM, "out of host memory");
    for (int m = 1; m <= g->mbs; m++)
        for (int c = 1; c <= g->nchunks; c++) g->order[k++] = (struct tg_graph_action){'F', c, m};
    for (int m = g->mbs; m >= 1; m--)
        for (int c = g->nchunks; c >= 1; c--) {
            g->order[k++] = (struct tg_graph_action){'B', c, m};
            g->order[k++] = (struct tg_graph_action){'W', c, m};
        }
    g->norder = k;
    return TG_OK;
}

/* Every (chunk, mb) needs exactly one F and one B, F before B before W. */
static tg_status validate_order(tg_graphed *g)
{
    int n = g->nchunks * g->mbs;
    char *state = calloc((size_t)n, 1); /* 0 none, 1 F, 2 B, 3 W */
    if (!state) return tg_error(TG_ENOMEM, "out of host memory");
    tg_status st = TG_OK;
    for (int i = 0; i < g->norder && st == TG_OK; i++) {
        const struct tg_graph_action *a = &g->order[i];
        if (a->op != 'F' && a->op != 'B' && a->op != 'W')
            st = tg_error(TG_EINVAL, "order action %d: op '%c' (expected F, B or W)", i + 1, a->op ? a->op : '?');
        else if (a->chunk < 1 || a->chunk > g->nchunks || a->mb < 1 || a->mb > g->mbs)
            st = tg_error(TG_EINVAL, "order action %d (%s chunk %d mb %d): chunk or microbatch out of range (%d chunks, %d microbatches)",
                          i + 1, op_name(a->op), a->chunk, a->mb, g->nchunks, g->mbs);
        else {
            char *s = &state[(a->chunk - 1) * g->mbs + a->mb - 1];
            int want = a->op == 'F' ? 0 : a->op == 'B' ? 1 : 2;
            if (*s != want)
                st = tg_error(TG_EINVAL, "order action %d (%s chunk %d mb %d): %s", i + 1, op_name(a->op), a->chunk, a->mb,
                              *s > want ? "repeated" : a->op == 'B' ? "B before F" : "W before B");
            else *s = (char)(want + 1);
        }
    }
    for (int i = 0; i < n && st == TG_OK; i++)
        if (state[i] < 2) st = tg_error(TG_EINVAL, "order has no %s for chunk %d mb %d", state[i] ? "B" : "F", i / g->mbs + 1, i % g->mbs + 1);
    free(state);
    return st;
}

/* After warm-up: a chunk that queues wgrad work needs a W after the B of
 * every microbatch, or its wgrads (and their hooks) would never run. */
static tg_status check_w_present(tg_graphed *g)
{
    for (int c = 1; c <= g->nchunks; c++) {
        if (!g->has_w[c - 1]) continue;
        for (int m = 1; m <= g->mbs; m++) {
            int found = 0;
            for (int i = 0; i < g->norder && !found; i++)
                found = g->order[i].op == 'W' && g->order[i].chunk == c && g->order[i].mb == m;
            if (!found)
                return tg_error(TG_EINVAL, "order has no W for chunk %d mb %d, but the chunk delays wgrad", c, m);
        }
    }
    return TG_OK;
}

/* Copies every parameter's grad and main_grad and the FP8 scaling state, to put them back after warm-up. */
struct grad_backup {
    tg_tensor **saved;
    tg_tensor **live;
    int n;
};

static tg_status backup_grads(tg_graphed *g, struct grad_backup *bk)
{
    memset(bk, 0, sizeof *bk);
    for (int c = 0; c < g->nchunks; c++) {
        tg_param **ps;
        int np;
        TG_TRY(tg_module_parameters(g->chunks[c], &ps, &np));
        /* and the FP8 scaling state (amax histories, scales), which warm-up casts and updates */
        tg_tensor **f8 = NULL;
        int nf8 = 0;
        tg_status st = tg_module_fp8_prepare(g->chunks[c]);
        if (st == TG_OK) st = tg_module_fp8_tensors(g->chunks[c], &f8, &nf8);
        for (int i = 0; i < np + nf8 && st == TG_OK; i++) {
            tg_tensor *bufs[2] = {i < np ? ps[i]->grad : f8[i - np], i < np ? ps[i]->main_grad : NULL};
            for (int j = 0; j < 2 && st == TG_OK; j++) {
                if (!bufs[j]) continue;
                tg_tensor **ns = realloc(bk->saved, (size_t)(bk->n + 1) * sizeof *ns);
                tg_tensor **nl = ns ? realloc(bk->live, (size_t)(bk->n + 1) * sizeof *nl) : NULL;
                if (ns) bk->saved = ns;
                if (nl) bk->live = nl;
                if (!ns || !nl) {
                    st = tg_error(TG_ENOMEM, "out of host memory");
                    break;
                }
                tg_tensor *copy = NULL;
                st = tg_tensor_new(bufs[j]->dtype, bufs[j]->ndim, bufs[j]->shape, tg_tensor_device(bufs[j]), &copy);
                if (st == TG_OK) st = tg_copy(copy, bufs[j]);
                if (st != TG_OK) {
                    tg_tensor_free(copy);
                    break;
                }
                bk->saved[bk->n] = copy;
                bk->live[bk->n++] = bufs[j];
            }
        }
        free(ps);
        free(f8);
        TG_TRY(st);
    }
    return TG_OK;
}

static tg_status restore_grads(struct grad_backup *bk)
{
    tg_status st = TG_OK;
    for (int i = 0; i < bk->n; i++) {
        if (st == TG_OK) st = tg_copy(bk->live[i], bk->saved[i]);
        tg_tensor_free(bk->saved[i]);
    }
    free(bk->saved);
    free(bk->live);
    memset(bk, 0, sizeof *bk);
    return st;
}

/* ------------------------------------------------------------------ warm-up and capture */
static tg_status make_dy(const tg_tensor *like, tg_tensor **out)
{
    TG_TRY(tg_tensor_new(like->dtype, like->ndim, like->shape, tg_tensor_device(like), out));
    return tg_fill(*out, 1.0 / (double)(tg_tensor_numel(like) ? tg_tensor_numel(like) : 1));
}

static int takes_grad(tg_dtype dt) { return dt == TG_F32 || dt == TG_BF16 || dt == TG_F16; }

/* Warm-up F or B of a tuple chunk; the first F of each microbatch keeps its outputs (their layouts). */
static tg_status warm_tuple(tg_graphed *g, const struct tg_graph_action *a)
{
    int c = a->chunk - 1, ny = 0;
    tg_module *m = g->chunks[c];
    struct entry *e = entry_of(g, a->chunk, a->mb);
    tg_tensor *y[TG_MAX_IO] = {0}, *dy[TG_MAX_IO] = {0}, *dx[TG_MAX_IO] = {0};
    tg_status st = TG_OK;
    if (a->op == 'F') {
        st = tg_module_forward_n(m, a->mb, g->tsamples[c], g->tn[c], y, &ny);
        if (st == TG_OK && g->tm[c] && ny != g->tm[c])
            st = tg_error(TG_EINVAL, "chunk %d: forward returned %d outputs, then %d", a->chunk, g->tm[c], ny);
        if (st == TG_OK) g->tm[c] = ny;
        for (int j = 0; j < ny; j++)
            if (st == TG_OK && !e->tout[j]) e->tout[j] = y[j], y[j] = NULL;
    } else {
        for (int j = 0; j < g->tm[c] && st == TG_OK; j++)
            if (e->tout[j] && takes_grad(e->tout[j]->dtype)) st = make_dy(e->tout[j], &dy[j]);
        if (st == TG_OK) st = tg_module_backward_n(m, a->mb, (const tg_tensor *const *)dy, g->tm[c], dx, g->tn[c]);
        if (st == TG_OK && tg_module_need_backward_dw(m)) g->has_w[c] = 1;
    }
    for (int j = 0; j < TG_MAX_IO; j++) {
        tg_tensor_free(y[j]);
        tg_tensor_free(dy[j]);
        tg_tensor_free(dx[j]);
    }
    return st;
}

/* Which chunks' backward takes no dy (eagerly, backward(nil) is refused with "dy is missing" unless the module's
 * output feeds a loss inside it): one F of microbatch 1 and a backward without dy per one-tensor chunk, hooks
 * silenced. A replay given no dy then runs only for those; for the others the static gradient buffer would hold
 * whatever the last call left there. Modules check dy before they take their saved context; whatever a refused
 * backward left is dropped. */
static tg_status probe_no_dy(tg_graphed *g, const tg_tensor *const *samples, const tg_tensor *const *samples2)
{
    for (int c = 0; c < g->nchunks; c++) {
        if (g->tn[c] || g->dres[c]) continue; /* tuples give a gradient per output; a residual gradient needs dy */
        tg_module *m = g->chunks[c];
        tg_tensor *y = NULL, *dx = NULL;
        TG_TRY(tg_module_forward_res(m, 1, samples[c], samples2 ? samples2[c] : NULL, &y));
        tg_status st = tg_module_backward(m, 1, NULL, &dx);
        g->no_dy[c] = st == TG_OK;
        if (st == TG_OK && tg_module_need_backward_dw(m)) st = tg_module_backward_dw(m, 1);
        tg_tensor_free(y);
        tg_tensor_free(dx);
        tg_error_clear();
        tg_module_drop_state(m);
    }
    return TG_OK;
}

/* Runs the order eagerly `iters` times with hooks silenced; records which
 * chunks queue wgrad work (need W graphs). */
static tg_status warm_up(tg_graphed *g, const tg_tensor *const *samples, const tg_tensor *const *samples2, int iters)
{
    tg_status st = TG_OK;
    for (int it = 0; it < iters && st == TG_OK; it++) {
        for (int i = 0; i < g->norder && st == TG_OK; i++) {
            const struct tg_graph_action *a = &g->order[i];
            tg_module *m = g->chunks[a->chunk - 1];
            if (g->tn[a->chunk - 1] && a->op != 'W') {
                st = warm_tuple(g, a);
            } else if (a->op == 'F') {
                tg_tensor *y = NULL;
                const tg_tensor *r = samples2 ? samples2[a->chunk - 1] : NULL;
                st = tg_module_forward_res(m, a->mb, samples[a->chunk - 1], r, &y);
                if (st == TG_OK && !entry_of(g, a->chunk, a->mb)->out) {
                    /* keep the output's shape for the static dy */
                    entry_of(g, a->chunk, a->mb)->out = y;
                    y = NULL;
                }
                tg_tensor_free(y);
            } else if (a->op == 'B') {
                tg_tensor *dy = NULL, *dx = NULL;
                st = make_dy(entry_of(g, a->chunk, a->mb)->out, &dy);
                if (st == TG_OK) st = tg_module_backward(m, a->mb, dy, &dx);
                if (st == TG_OK && tg_module_need_backward_dw(m)) g->has_w[a->chunk - 1] = 1;
                tg_tensor_free(dy);
                tg_tensor_free(dx);
            } else if (tg_module_need_backward_dw(m)) {
                st = tg_module_backward_dw(m, a->mb);
            }
        }
    }
    /* shapes are known now; the F captures allocate the real static outputs */
    for (int c = 1; st == TG_OK && c <= g->nchunks; c++) {
        const tg_tensor *y = entry_of(g, c, 1)->out;
        if (y) st = tg_tensor_new(y->dtype, y->ndim, y->shape, g->dev, &g->out_like[c - 1]);
    }
    for (int i = 0; i < g->nchunks * g->mbs; i++) {
        tg_tensor_free(g->e[i].out);
        g->e[i].out = NULL;
        for (int j = 0; j < TG_MAX_IO; j++) { /* tuple chunks' static outputs are made by their F captures */
            tg_tensor_free(g->e[i].tout[j]);
            g->e[i].tout[j] = NULL;
        }
    }
    return st;
}

/* Whether a and b have the same dtype and shape. */
static int same_layout(const tg_tensor *a, const tg_tensor *b)
{
    return a && b && a->dtype == b->dtype && tg_tensor_same_shape(a, b);
}

/* ------------------------------------------------------------------ static buffer reuse across microbatches */
/* Where each (chunk, microbatch)'s static buffers stop being read, as positions
 * in the capture order (which is the replay order). A buffer is held from the
 * action that allocates it until its last reader: the input, output and output
 * gradient until the last of the (chunk, mb)'s B and W (the saved input and the
 * output gradient are what a deferred W reads; a module may save its output);
 * the input gradient until microbatch mb's last action in the set (the chunk
 * before, whose B reads it, runs within that microbatch's actions). Past that
 * position the range goes back to the pool, and buffers or temporaries that
 * later captures allocate take it: replays follow the captured order, so the
 * earlier owner is done with it whenever the later one writes it. */
struct lifetimes {
    int *last_cm; /* [(chunk - 1) * mbs + mb - 1]: position of the last of B and W */
    int *b_cm;    /* position of B */
    int *f_cm;    /* position of F */
    int *last_mb; /* [mb - 1]: position of the microbatch's last action */
};

static void lifetimes_free(struct lifetimes *lt)
{
    free(lt->last_cm);
    free(lt->b_cm);
    free(lt->f_cm);
    free(lt->last_mb);
    memset(lt, 0, sizeof *lt);
}

static tg_status lifetimes_of(const tg_graphed *g, struct lifetimes *lt)
{
    int n = g->nchunks * g->mbs;
    lt->last_cm = malloc((size_t)n * sizeof *lt->last_cm);
    lt->b_cm = malloc((size_t)n * sizeof *lt->b_cm);
    lt->f_cm = malloc((size_t)n * sizeof *lt->f_cm);
    lt->last_mb = malloc((size_t)g->mbs * sizeof *lt->last_mb);
    if (!lt->last_cm || !lt->b_cm || !lt->f_cm || !lt->last_mb) {
        lifetimes_free(lt);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    for (int i = 0; i < n; i++) lt->last_cm[i] = lt->b_cm[i] = lt->f_cm[i] = -1;
    for (int m = 0; m < g->mbs; m++) lt->last_mb[m] = -1;
    for (int i = 0; i < g->norder; i++) {
        const struct tg_graph_action *a = &g->order[i];
        if (a->op == 'W' && !g->has_w[a->chunk - 1]) continue; /* not replayed */
        int k = (a->chunk - 1) * g->mbs + a->mb - 1;
        if (a->op != 'F') lt->last_cm[k] = i;
        if (a->op == 'B') lt->b_cm[k] = i;
        if (a->op == 'F') lt->f_cm[k] = i;
        lt->last_mb[a->mb - 1] = i;
    }
    return TG_OK;
}

/* Whether the buffer of entry k (role 0 in, 1 out, 2 dout, 3 din, 4 in2, 5 dout2; tuple chunks: 6 + TG_MAX_IO * r + i,
 * r 0 .. 3 as roles 0 .. 3, i the input or output) is past its last reader at position pos. */
static int buffer_done(const tg_graphed *g, const struct lifetimes *lt, int k, int role, int pos)
{
    if (g->slot_of && g->slot_end[k] >= 0) return g->slot_end[k] <= pos; /* graphs later microbatches replay */
    int base = role < 6 ? role : (role - 6) / TG_MAX_IO;
    int until = g->reuse_early ? lt->b_cm[k] /* the reuse-too-early bug on purpose (tests) */
                : base == 3    ? lt->last_mb[k % g->mbs]
                               : lt->last_cm[k];
    return until >= 0 && until <= pos;
}

#define NROLES (6 + 4 * TG_MAX_IO)
/* Roles of entry k's buffers: tuple chunks' too only where the chunk is one. */
static int nroles(const tg_graphed *g, int k) { return g->tn[k / g->mbs] ? NROLES : 6; }
static tg_tensor **entry_buffer(struct entry *e, int role)
{
    if (role >= 6) {
        int r = (role - 6) / TG_MAX_IO, i = (role - 6) % TG_MAX_IO;
        return r == 0 ? &e->tin[i] : r == 1 ? &e->tout[i] : r == 2 ? &e->tdout[i] : &e->tdin[i];
    }
    return role == 0 ? &e->in : role == 1 ? &e->out : role == 2 ? &e->dout : role == 3 ? &e->din
         : role == 4 ? &e->in2 : &e->dout2;
}

/* One set of graphs for microbatches of a chunk whose lifetimes do not overlap
 * (Megatron's reuse_cudagraphs, where the order overlaps microbatches): the
 * lifetime of (chunk c, mb m) runs from its F to microbatch m's last action
 * (its input gradient is read until then), or to its B under the test switch.
 * Taking microbatches in F order, m joins the first set whose current holder's
 * lifetime ended before F of m; the first microbatch of a set captures, the
 * others replay its graphs with its buffers. Everything those graphs touch is
 * held until the set's last lifetime ends (slot_end; the pool defers the
 * frees of their captures), so no later capture takes a range one of them
 * still reads. Overwrite or accumulate and the hooks' microbatch are decided
 * at replay. */
static tg_status assign_slots(tg_graphed *g, const struct lifetimes *lt)
{
    int n = g->nchunks * g->mbs;
    g->slot_of = malloc((size_t)n * sizeof *g->slot_of);
    g->slot_end = malloc((size_t)n * sizeof *g->slot_end);
    int *first = malloc((size_t)g->mbs * sizeof *first);
    long *end = malloc((size_t)g->mbs * sizeof *end);
    if (!g->slot_of || !g->slot_end || !first || !end) {
        free(first);
        free(end);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    for (int k = 0; k < n; k++) g->slot_of[k] = k % g->mbs + 1, g->slot_end[k] = -1;
    for (int c = 1; c <= g->nchunks; c++) {
        int nslots = 0;
        for (int i = 0; i < g->norder; i++) {
            const struct tg_graph_action *a = &g->order[i];
            if (a->op != 'F' || a->chunk != c) continue;
            int k = (c - 1) * g->mbs + a->mb - 1;
            long e = g->reuse_early ? lt->b_cm[k] : lt->last_mb[a->mb - 1];
            int s = 0;
            while (s < nslots && end[s] >= i) s++;
            if (s == nslots) first[nslots++] = a->mb;
            end[s] = e;
            g->slot_of[k] = first[s];
        }
        for (int s = 0; s < nslots; s++) {
            int k0 = (c - 1) * g->mbs + first[s] - 1, members = 0;
            for (int m = 1; m <= g->mbs; m++) members += g->slot_of[(c - 1) * g->mbs + m - 1] == first[s];
            if (members > 1) g->slot_end[k0] = end[s];
        }
    }
    free(first);
    free(end);
    return TG_OK;
}

/* After the capture at position pos: every static buffer all of whose holders
 * (chained chunks share one) are past their last reader goes back to the pool. */
static void return_done_buffers(tg_graphed *g, const struct lifetimes *lt, int pos)
{
    int n = g->nchunks * g->mbs;
    for (int k = 0; k < n; k++)
        for (int r = 0; r < nroles(g, k); r++) {
            tg_tensor *t = *entry_buffer(&g->e[k], r);
            if (!t || t->storage->range_returned || !buffer_done(g, lt, k, r, pos)) continue;
            int all = 1;
            for (int k2 = 0; k2 < n && all; k2++)
                for (int r2 = 0; r2 < nroles(g, k2) && all; r2++) {
                    tg_tensor *u = *entry_buffer(&g->e[k2], r2);
                    if (u && u->storage == t->storage && !buffer_done(g, lt, k2, r2, pos)) all = 0;
                }
            if (all) tg_storage_return_range(t->storage);
        }
}

/* F or B capture of a tuple chunk: a static buffer per input (the sample's layout) and per float output's gradient. */
static tg_status capture_tuple(tg_graphed *g, const struct tg_graph_action *a, struct entry *e, tg_stream *s)
{
    int c = a->chunk - 1, ny = 0;
    tg_module *m = g->chunks[c];
    tg_status st = TG_OK;
    if (a->op == 'F') {
        for (int i = 0; i < g->tn[c] && st == TG_OK; i++) {
            const tg_tensor *x = g->tsamples[c][i];
            st = tg_tensor_new_in(g->pool, x->dtype, x->ndim, x->shape, g->dev, &e->tin[i]);
            if (st == TG_OK) st = tg_copy(e->tin[i], x);
        }
        if (st == TG_OK) st = tg_stream_begin_capture(s);
        if (st != TG_OK) return st;
        tg_engine_set_capture_observer(observe, NULL);
        st = tg_module_forward_n(m, a->mb, (const tg_tensor *const *)e->tin, g->tn[c], e->tout, &ny);
        tg_engine_set_capture_observer(NULL, NULL);
        tg_status end = tg_stream_end_capture(s, &e->f);
        if (st == TG_OK) st = end;
        if (st == TG_OK && ny != g->tm[c])
            st = tg_error(TG_EINVAL, "forward returned %d outputs, %d in warm-up", ny, g->tm[c]);
        return st;
    }
    for (int j = 0; j < g->tm[c] && st == TG_OK; j++) { /* the F capture of (chunk, mb) made the static outputs */
        const tg_tensor *y = e->tout[j];
        if (!takes_grad(y->dtype)) continue;
        st = tg_tensor_new_in(g->pool, y->dtype, y->ndim, y->shape, g->dev, &e->tdout[j]);
        if (st == TG_OK) st = tg_fill(e->tdout[j], 0.0);
    }
    if (st == TG_OK) st = tg_stream_begin_capture(s);
    if (st != TG_OK) return st;
    tg_engine_set_capture_observer(observe, &e->bset);
    st = tg_module_backward_n(m, a->mb, (const tg_tensor *const *)e->tdout, g->tm[c], e->tdin, g->tn[c]);
    tg_engine_set_capture_observer(NULL, NULL);
    tg_status end = tg_stream_end_capture(s, &e->b);
    if (st == TG_OK) st = end;
    for (int i = 0; i < g->tn[c] && st == TG_OK; i++)
        if (e->tdin[i] && !takes_grad(e->tin[i]->dtype))
            st = tg_error(TG_EINVAL, "backward returned a gradient for input %d, which is %s (takes none)", i + 1,
                          tg_dtype_name(e->tin[i]->dtype));
    return st;
}

/* Warm-up needs one iteration at least to learn output shapes and W needs.
 * chain: chunk c + 1's static input is chunk c's static output (same microbatch),
 * and chunk c's static output gradient chunk c + 1's static input gradient. */
static tg_status capture_all(tg_graphed *g, const tg_tensor *const *samples, int chain)
{
    tg_stream *s = tg_stream_current(g->dev);
    if (!s) return TG_ENOMEM;
    tg_status st = TG_OK;
    struct lifetimes lt = {0};
    if (g->reuse) TG_TRY(lifetimes_of(g, &lt));
    if (g->reuse && g->slot_share && !chain) st = assign_slots(g, &lt);
    const struct tg_graph_action *co = g->capture_order ? g->capture_order : g->order;
    for (int i = 0; i < g->ncapture && st == TG_OK; i++) {
        const struct tg_graph_action *a = &co[i];
        tg_module *m = g->chunks[a->chunk - 1];
        struct entry *e = entry_of(g, a->chunk, a->mb);
        int k = (a->chunk - 1) * g->mbs + a->mb - 1;
        if (g->slot_of && g->slot_of[k] != a->mb) { /* replays the graphs of its set's first microbatch */
            return_done_buffers(g, &lt, i);
            tg_pool_release_deferred(g->pool, i);
            continue;
        }
        if (g->slot_of && g->slot_end[k] >= 0) tg_pool_defer(g->pool, g->slot_end[k]);
        if (g->tn[a->chunk - 1] && a->op != 'W') {
            st = capture_tuple(g, a, e, s);
            tg_pool_defer(g->pool, -1);
            if (st != TG_OK) tg_error_prefix(st, "capturing %s chunk %d mb %d", op_name(a->op), a->chunk, a->mb);
            else if (g->reuse) return_done_buffers(g, &lt, i);
            tg_pool_release_deferred(g->pool, i);
            continue;
        }
        const tg_tensor *x = samples[a->chunk - 1];
        const struct entry *prev = chain && a->chunk > 1 ? entry_of(g, a->chunk - 1, a->mb) : NULL;
        const struct entry *next = chain && a->chunk < g->nchunks ? entry_of(g, a->chunk + 1, a->mb) : NULL;
        if (a->op == 'F') {
            if (prev && same_layout(prev->out, x)) {
                st = tg_tensor_ref(prev->out, &e->in); /* holds the previous chunk's output of this microbatch */
            } else {
                st = tg_tensor_new_in(g->pool, x->dtype, x->ndim, x->shape, g->dev, &e->in);
                if (st == TG_OK) st = tg_copy(e->in, x); /* sensible contents for the capture-time shapes */
            }
            if (st == TG_OK && g->res[a->chunk - 1] && !e->in2) {
                const tg_tensor *l = g->out_like[a->chunk - 1];
                st = tg_tensor_new_in(g->pool, l->dtype, l->ndim, l->shape, g->dev, &e->in2);
                if (st == TG_OK) st = tg_fill(e->in2, 0.0);
            }
            if (st == TG_OK) st = tg_stream_begin_capture(s);
            if (st != TG_OK) { tg_error_prefix(st, "capturing F chunk %d mb %d", a->chunk, a->mb); break; }
            tg_engine_set_capture_observer(observe, NULL);
            st = tg_module_forward_res(m, a->mb, e->in, e->in2, &e->out);
            tg_engine_set_capture_observer(NULL, NULL);
            tg_status end = tg_stream_end_capture(s, &e->f);
            if (st == TG_OK) st = end;
        } else if (a->op == 'B') {
            if (next && same_layout(next->din, e->out)) {
                st = tg_tensor_ref(next->din, &e->dout); /* the next chunk's input gradient of this microbatch */
            } else {
                st = tg_tensor_new_in(g->pool, e->out->dtype, e->out->ndim, e->out->shape, g->dev, &e->dout);
                if (st == TG_OK) st = tg_fill(e->dout, 0.0);
            }
            if (st == TG_OK && g->dres[a->chunk - 1]) { /* the residual gradient has the input's layout */
                const tg_tensor *l = samples[a->chunk - 1];
                st = tg_tensor_new_in(g->pool, l->dtype, l->ndim, l->shape, g->dev, &e->dout2);
                if (st == TG_OK) st = tg_fill(e->dout2, 0.0);
            }
            if (st == TG_OK) st = tg_stream_begin_capture(s);
            if (st != TG_OK) { tg_error_prefix(st, "capturing B chunk %d mb %d", a->chunk, a->mb); break; }
            tg_engine_set_capture_observer(observe, &e->bset);
            st = tg_module_backward_res(m, a->mb, e->dout, e->dout2, &e->din);
            tg_engine_set_capture_observer(NULL, NULL);
            tg_status end = tg_stream_end_capture(s, &e->b);
            if (st == TG_OK) st = end;
        } else if (g->has_w[a->chunk - 1]) {
            st = tg_stream_begin_capture(s);
            if (st != TG_OK) { tg_error_prefix(st, "capturing W chunk %d mb %d", a->chunk, a->mb); break; }
            tg_engine_set_capture_observer(observe, &e->wset);
            st = tg_module_backward_dw(m, a->mb);
            tg_engine_set_capture_observer(NULL, NULL);
            tg_status end = tg_stream_end_capture(s, &e->w);
            if (st == TG_OK) st = end;
        }
        tg_pool_defer(g->pool, -1);
        if (st != TG_OK) tg_error_prefix(st, "capturing %s chunk %d mb %d", op_name(a->op), a->chunk, a->mb);
        else if (g->reuse) return_done_buffers(g, &lt, i);
        tg_pool_release_deferred(g->pool, i);
    }
    tg_pool_defer(g->pool, -1);
    tg_pool_release_deferred(g->pool, LONG_MAX);
    lifetimes_free(&lt);
    for (int i = 0; i < g->nchunks * g->mbs && st == TG_OK; i++) {
        struct entry *e = &g->e[i];
        tg_graph *gs[3] = {e->f, e->b, e->w};
        for (int j = 0; j < 3; j++)
            if (gs[j] && st == TG_OK) st = tg_graph_keep_pool(gs[j], g->pool);
    }
    return st;
}

/* The first module under m (m included) whose calls a graphed set replays; NULL when none. */
static const tg_module *routed_under(const tg_module *m)
{
    if (m->route) return m;
    for (int i = 0; i < m->nchildren; i++) {
        const tg_module *r = routed_under(m->children[i]);
        if (r) return r;
    }
    return NULL;
}

static int holds(const tg_module *m, const tg_module *x)
{
    if (m == x) return 1;
    for (int i = 0; i < m->nchildren; i++)
        if (holds(m->children[i], x)) return 1;
    return 0;
}

static tg_status route_forward(void *ctx, int chunk, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y)
{
    return tg_graphed_forward_res(ctx, chunk, mb, x, res, y);
}
static tg_status route_backward(void *ctx, int chunk, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx)
{
    return tg_graphed_backward_res(ctx, chunk, mb, dy, dres, dx);
}
static tg_status route_backward_dw(void *ctx, int chunk, int mb) { return tg_graphed_backward_dw(ctx, chunk, mb); }

tg_status tg_graphed_new(tg_module **chunks, int nchunks, const tg_graphed_opts *o, tg_graphed **out)
{
    *out = NULL;
    if (nchunks < 1) return tg_error(TG_EINVAL, "make_graphed: no chunks");
    if (o->microbatches < 1) return tg_error(TG_EINVAL, "make_graphed: microbatches must be >= 1 (got %d)", o->microbatches);
    if (o->warmup < 0) return tg_error(TG_EINVAL, "make_graphed: warmup must be >= 1 (got %d)", o->warmup);
    if (!o->samples) return tg_error(TG_EINVAL, "make_graphed: no sample inputs");
    if (tg_graph_capturing()) return tg_error(TG_ESTATE, "make_graphed: already capturing another graphed set");
    if (tg_step_open()) return tg_error(TG_ESTATE, "make_graphed: call it outside a step (step %lld is open)", (long long)tg_step_index());
    tg_device dev = chunks[0]->opts.device;
    for (int c = 0; c < nchunks; c++) {
        if (!o->samples[c]) return tg_error(TG_EINVAL, "make_graphed: no sample input for chunk %d", c + 1);
        tg_device d = tg_tensor_device(o->samples[c]);
        if (chunks[c]->opts.device.type != dev.type || chunks[c]->opts.device.index != dev.index || d.type != dev.type || d.index != dev.index)
            return tg_error(TG_EINVAL, "make_graphed: chunk %d or its sample is on another device than chunk 1", c + 1);
        if (o->samples2 && o->samples2[c]) {
            tg_device d2 = tg_tensor_device(o->samples2[c]);
            if (d2.type != dev.type || d2.index != dev.index)
                return tg_error(TG_EINVAL, "make_graphed: chunk %d's second sample input is on another device than chunk 1", c + 1);
            if (o->in_place) return tg_error(TG_EINVAL, "make_graphed: chunk %d: in place, a residual input comes from the parent, not a second sample", c + 1);
        }
        if (o->tuples && o->tuples[c]) {
            int nt = o->ntuple ? o->ntuple[c] : 0;
            if (nt < 1 || nt > TG_MAX_IO)
                return tg_error(TG_EINVAL, "make_graphed: chunk %d: %d sample inputs (1 to %d)", c + 1, nt, TG_MAX_IO);
            if ((o->samples2 && o->samples2[c]) || o->in_place)
                return tg_error(TG_EINVAL, "make_graphed: chunk %d: a chunk with a list of sample inputs takes no residual and is not graphed in place", c + 1);
            if (!chunks[c]->vt->forward_n || !chunks[c]->vt->backward_n)
                return tg_error(TG_EINVAL, "make_graphed: chunk %d (a %s) takes one input, not a list of %d", c + 1, chunks[c]->vt->type, nt);
            for (int i = 0; i < nt; i++) {
                if (!o->tuples[c][i]) return tg_error(TG_EINVAL, "make_graphed: chunk %d: sample input %d is missing", c + 1, i + 1);
                tg_device di = tg_tensor_device(o->tuples[c][i]);
                if (di.type != dev.type || di.index != dev.index)
                    return tg_error(TG_EINVAL, "make_graphed: chunk %d's sample input %d is on another device than chunk 1", c + 1, i + 1);
            }
        }
        if (tg_module_need_backward_dw(chunks[c]))
            return tg_error(TG_ESTATE, "make_graphed: chunk %d has queued wgrad work (call backward_dw first)", c + 1);
        const tg_module *r = routed_under(chunks[c]);
        char label[160];
        if (r)
            return tg_error(TG_ESTATE, "make_graphed: chunk %d holds %s, whose calls another graphed set replays (free that set first)",
                            c + 1, tg_module_label(r, label, sizeof label));
        for (int d = 0; o->in_place && d < nchunks; d++)
            if (d != c && holds(chunks[c], chunks[d]))
                return tg_error(TG_EINVAL, "make_graphed: chunk %d (%s) holds chunk %d: chunks graphed in place must not contain each other",
                                c + 1, tg_module_label(chunks[c], label, sizeof label), d + 1);
    }
    tg_graphed *g = calloc(1, sizeof *g);
    if (!g) return tg_error(TG_ENOMEM, "out of host memory");
    g->nchunks = nchunks;
    g->mbs = o->microbatches;
    g->dev = dev;
    g->skip_hooks_after_w = tg_debug_get(TG_DEBUG_SKIP_HOOKS_AFTER_REPLAY);
    g->chunks = calloc((size_t)nchunks, sizeof *g->chunks);
    g->has_w = calloc((size_t)nchunks, sizeof *g->has_w);
    g->res = calloc((size_t)nchunks, sizeof *g->res);
    g->dres = calloc((size_t)nchunks, sizeof *g->dres);
    g->no_dy = calloc((size_t)nchunks, sizeof *g->no_dy);
    g->out_like = calloc((size_t)nchunks, sizeof *g->out_like);
    g->tn = calloc((size_t)nchunks, sizeof *g->tn);
    g->tm = calloc((size_t)nchunks, sizeof *g->tm);
    g->e = calloc((size_t)(nchunks * g->mbs), sizeof *g->e);
    tg_status st = g->chunks && g->has_w && g->e && g->res && g->dres && g->no_dy && g->out_like && g->tn && g->tm ? TG_OK : tg_error(TG_ENOMEM, "out of host memory");
    for (int c = 0; c < nchunks && st == TG_OK; c++) {
        g->chunks[c] = tg_module_retain(chunks[c]);
        /* two inputs: given a second sample, or graphed in place under a parent that hands it a residual */
        g->res[c] = (o->samples2 && o->samples2[c]) || (o->in_place && (chunks[c]->parent_res & TG_PARENT_RES_FORWARD));
        g->dres[c] = o->in_place && (chunks[c]->parent_res & TG_PARENT_RES_BACKWARD);
        g->tn[c] = o->tuples && o->tuples[c] ? o->ntuple[c] : 0;
    }
    g->tsamples = o->tuples;
    if (st == TG_OK && o->order) {
        g->order = malloc((size_t)o->norder * sizeof *g->order);
        if (!g->order) st = tg_error(TG_ENOMEM, "out of host memory");
        else memcpy(g->order, o->order, (size_t)o->norder * sizeof *g->order), g->norder = o->norder;
    } else if (st == TG_OK) {
        st = default_order(g);
    }
    if (st == TG_OK) st = validate_order(g);
    if (st == TG_OK) {
        int share_any = tg_debug_get(TG_DEBUG_GRAPH_SHARE_ANY_ORDER);
        g->shared = !o->no_share && g->mbs > 1 && (order_is_sequential(g) || share_any);
        g->ncapture = g->norder;
        /* shared: one set of buffers already; else every (chunk, mb) has its own, reused where lifetimes allow */
        g->reuse = !o->no_reuse && !g->shared && g->mbs > 1;
        g->reuse_early = g->reuse && tg_debug_get(TG_DEBUG_GRAPH_REUSE_EARLY);
        g->slot_share = g->reuse && o->share_overlap && !o->chain;
        if (g->shared && order_is_sequential(g)) g->ncapture = g->norder / g->mbs;
        else if (g->shared) { /* the reuse-too-early bug on purpose (tests): microbatch 1's actions only */
            struct tg_graph_action *o1 = malloc((size_t)g->norder * sizeof *o1);
            if (!o1) st = tg_error(TG_ENOMEM, "out of host memory");
            int k = 0;
            for (int i = 0; o1 && i < g->norder; i++)
                if (g->order[i].mb == 1) o1[k++] = g->order[i];
            g->capture_order = o1;
            g->ncapture = k;
        }
    }
    if (st == TG_OK) {
        g->pool = o->pool ? tg_pool_retain(o->pool) : NULL;
        if (!g->pool) st = tg_pool_new(dev, &g->pool);
    }
    if (st != TG_OK) {
        tg_graphed_free(g);
        return st;
    }

    /* Warm up on a side stream, hooks silenced and gradients restored after. */
    int warmup = o->warmup > 0 ? o->warmup : TG_GRAPHED_WARMUP;
    tg_stream *side = NULL, *prev = NULL;
    struct grad_backup bk;
    capturing_depth++;
    tg_engine_set_quiet(1);
    st = backup_grads(g, &bk);
    /* the side stream must see the caller's work done (samples written, grads
     * backed up): streams are not ordered with each other */
    if (st == TG_OK) st = tg_stream_sync(tg_stream_current(dev));
    if (st == TG_OK) st = tg_stream_new(dev, "graph-warmup", &side);
    if (st == TG_OK) {
        prev = tg_stream_set_current(side);
        st = probe_no_dy(g, o->samples, o->samples2);
        if (st == TG_OK) st = warm_up(g, o->samples, o->samples2, warmup);
        tg_engine_set_quiet(0);
        if (st != TG_OK) tg_error_prefix(st, "make_graphed warm-up");
        if (st == TG_OK) st = check_w_present(g);
        if (st == TG_OK) st = tg_pool_push(g->pool);
        if (st == TG_OK) {
            st = capture_all(g, o->samples, o->chain && !g->shared && !o->in_place);
            tg_pool_pop(g->pool);
        }
        for (int c = 0; c < nchunks; c++) { /* the layouts were for the capture */
            tg_tensor_free(g->out_like[c]);
            g->out_like[c] = NULL;
        }
        tg_status sy = tg_stream_sync(side);
        if (st == TG_OK) st = sy;
        tg_stream_set_current(prev);
        tg_stream_free(side);
    }
    g->tsamples = NULL;
    tg_status rs = restore_grads(&bk);
    if (st == TG_OK) st = rs;
    tg_engine_set_quiet(0);
    capturing_depth--;
    for (int c = 0; c < nchunks; c++) {
        set_mode(g->chunks[c], "graphed");
        /* contexts and wgrad items left by warm-up or capture belong to no replay
         * (after a failure, half-captured ones must never run) */
        tg_module_drop_state(g->chunks[c]);
    }
    if (st != TG_OK) {
        tg_graphed_free(g);
        return st;
    }
    if (o->in_place) {
        g->routes = calloc((size_t)nchunks, sizeof *g->routes);
        if (!g->routes) {
            tg_graphed_free(g);
            return tg_error(TG_ENOMEM, "out of host memory");
        }
        for (int c = 0; c < nchunks; c++) {
            g->routes[c] = (struct tg_module_route){.ctx = g, .chunk = c + 1, .has_w = g->has_w[c], .res = g->res[c],
                                                    .dres = g->dres[c], .forward = route_forward,
                                                    .backward = route_backward, .backward_dw = route_backward_dw};
            g->chunks[c]->route = &g->routes[c];
            g->chunks[c]->route_wpend = 0;
        }
    }
    tg_graphed_reset(g);
    sets_link(g);
    *out = g;
    return TG_OK;
}

void tg_graphed_free(tg_graphed *g)
{
    if (!g) return;
    sets_unlink(g);
    for (int i = 0; g->e && i < g->nchunks * g->mbs; i++) {
        struct entry *e = &g->e[i];
        tg_graph_free(e->f);
        tg_graph_free(e->b);
        tg_graph_free(e->w);
        tg_tensor_free(e->in);
        tg_tensor_free(e->out);
        tg_tensor_free(e->dout);
        tg_tensor_free(e->din);
        tg_tensor_free(e->in2);
        tg_tensor_free(e->dout2);
        for (int j = 0; j < TG_MAX_IO; j++) {
            tg_tensor_free(e->tin[j]);
            tg_tensor_free(e->tout[j]);
            tg_tensor_free(e->tdout[j]);
            tg_tensor_free(e->tdin[j]);
        }
        set_free(&e->bset);
        set_free(&e->wset);
    }
    for (int c = 0; g->chunks && c < g->nchunks; c++) {
        if (g->chunks[c] && g->routes) g->chunks[c]->route = NULL, g->chunks[c]->route_wpend = 0;
        if (g->chunks[c]) set_mode(g->chunks[c], "eager");
        tg_module_release(g->chunks[c]);
    }
    tg_pool_release(g->pool);
    free(g->e);
    free(g->chunks);
    free(g->has_w);
    free(g->res);
    free(g->dres);
    free(g->no_dy);
    free(g->tn);
    free(g->tm);
    for (int c = 0; g->out_like && c < g->nchunks; c++) tg_tensor_free(g->out_like[c]);
    free(g->out_like);
    free(g->order);
    free(g->capture_order);
    free(g->slot_of);
    free(g->slot_end);
    free(g->routes);
    free(g);
}

/* ------------------------------------------------------------------ replay */
static tg_stream *replay_stream(tg_graphed *g) { return tg_stream_current(g->dev); }

/* Replays one graph; while tracing, in a compute span ("graph B chunk 1"),
 * since the module spans inside it are not recorded on CUDA. */
static tg_status replay(tg_graphed *g, tg_graph *graph, char op, int chunk, int mb)
{
    tg_stream *s = replay_stream(g);
    int sp = -1;
    if (tg_trace_on) {
        char name[48], args[32];
        snprintf(name, sizeof name, "graph %c chunk %d", op, chunk);
        snprintf(args, sizeof args, "\"phase\":\"graph %c\"", op);
        struct tg_trace_about a = {.chunk = chunk, .mb = mb, .step = tg_step_index(), .args = args};
        sp = tg_trace_open(s, TG_TRACK_COMPUTE, name, &a);
    }
    tg_status st = tg_graph_replay(graph, s);
    tg_trace_close(sp, s);
    return st;
}

static tg_status replay_forward(tg_graphed *g, int chunk, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y)
{
    *y = NULL;
    TG_TRY(check_order(g, 'F', chunk, &mb));
    struct entry *e = replay_entry(g, chunk, mb);
    char what[80];
    if (g->tn[chunk - 1])
        return tg_error(TG_EINVAL, "graphed forward chunk %d mb %d: the chunk takes a list of %d inputs, got %s", chunk, mb,
                        g->tn[chunk - 1], res ? "a pair (x, res)" : "one tensor");
    if (g->res[chunk - 1] && !res)
        return tg_error(TG_EINVAL, "graphed forward chunk %d mb %d: the chunk takes two inputs (x, res), got one", chunk, mb);
    if (!g->res[chunk - 1] && res)
        return tg_error(TG_EINVAL, "graphed forward chunk %d mb %d: the chunk takes one input, got two (x, res)", chunk, mb);
    snprintf(what, sizeof what, "graphed forward chunk %d mb %d input", chunk, mb);
    TG_TRY(check_like(what, x, e->in));
    if (res) {
        snprintf(what, sizeof what, "graphed forward chunk %d mb %d residual input", chunk, mb);
        TG_TRY(check_like(what, res, e->in2));
    }
    TG_TRY(tg_module_run_forward_pre_hooks(g->chunks[chunk - 1], mb));
    if (!tg_tensor_same_memory(x, e->in)) TG_TRY(tg_copy(e->in, x));
    if (res && !tg_tensor_same_memory(res, e->in2)) TG_TRY(tg_copy(e->in2, res));
    TG_TRY(replay(g, e->f, 'F', chunk, mb));
    mark_forward(g->chunks[chunk - 1]);
    advance(g);
    return tg_tensor_ref(e->out, y);
}

static tg_status replay_backward(tg_graphed *g, int chunk, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx)
{
    *dx = NULL;
    TG_TRY(check_order(g, 'B', chunk, &mb));
    struct entry *e = replay_entry(g, chunk, mb);
    char what[80];
    if (g->tn[chunk - 1])
        return tg_error(TG_EINVAL, "graphed backward chunk %d mb %d: the chunk has %d outputs; give a list of their gradients",
                        chunk, mb, g->tm[chunk - 1]);
    if (g->dres[chunk - 1] && !dres)
        return tg_error(TG_EINVAL, "graphed backward chunk %d mb %d: the chunk was captured with a residual gradient, got none", chunk, mb);
    if (!g->dres[chunk - 1] && dres)
        return tg_error(TG_EINVAL, "graphed backward chunk %d mb %d: the chunk was captured without a residual gradient, got one", chunk, mb);
    if (dres) {
        snprintf(what, sizeof what, "graphed backward chunk %d mb %d residual gradient", chunk, mb);
        TG_TRY(check_like(what, dres, e->dout2));
        if (!tg_tensor_same_memory(dres, e->dout2)) TG_TRY(tg_copy(e->dout2, dres));
    }
    snprintf(what, sizeof what, "graphed backward chunk %d mb %d gradient", chunk, mb);
    if (!dy && !g->no_dy[chunk - 1]) {
        char a[64], label[160];
        return tg_error(TG_EINVAL, "%s backward (microbatch %d): dy is missing, expected %s %s (graphed chunk %d)",
                        tg_module_label(g->chunks[chunk - 1], label, sizeof label), mb,
                        tg_tensor_shape_str(e->dout, a, sizeof a), tg_dtype_name(e->dout->dtype), chunk);
    }
    if (dy) {
        TG_TRY(check_like(what, dy, e->dout));
        if (!tg_tensor_same_memory(dy, e->dout)) TG_TRY(tg_copy(e->dout, dy));
    }
    TG_TRY(zero_first_targets(&e->bset));
    TG_TRY(replay(g, e->b, 'B', chunk, mb));
    advance(g);
    TG_TRY(fire(&e->bset, mb));
    return e->din ? tg_tensor_ref(e->din, dx) : TG_OK;
}

static tg_status replay_forward_n(tg_graphed *g, int chunk, int mb, const tg_tensor *const *x, int nx, tg_tensor **y, int *ny)
{
    char what[96], a[64];
    *ny = 0;
    TG_TRY(check_order(g, 'F', chunk, &mb));
    int n = g->tn[chunk - 1];
    if (!n) return tg_error(TG_EINVAL, "graphed forward chunk %d mb %d: the chunk takes one tensor, got a list of %d", chunk, mb, nx);
    if (nx != n) return tg_error(TG_EINVAL, "graphed forward chunk %d mb %d: the chunk takes %d inputs, got %d", chunk, mb, n, nx);
    struct entry *e = replay_entry(g, chunk, mb);
    for (int i = 0; i < n; i++) {
        if (!x[i])
            return tg_error(TG_EINVAL, "graphed forward chunk %d mb %d: input %d is missing (captured with %s %s)", chunk, mb, i + 1,
                            tg_tensor_shape_str(e->tin[i], a, sizeof a), tg_dtype_name(e->tin[i]->dtype));
        snprintf(what, sizeof what, "graphed forward chunk %d mb %d input %d", chunk, mb, i + 1);
        TG_TRY(check_like(what, x[i], e->tin[i]));
    }
    TG_TRY(tg_module_run_forward_pre_hooks(g->chunks[chunk - 1], mb));
    for (int i = 0; i < n; i++)
        if (!tg_tensor_same_memory(x[i], e->tin[i])) TG_TRY(tg_copy(e->tin[i], x[i]));
    TG_TRY(replay(g, e->f, 'F', chunk, mb));
    mark_forward(g->chunks[chunk - 1]);
    advance(g);
    tg_status st = TG_OK;
    for (int j = 0; j < g->tm[chunk - 1] && st == TG_OK; j++) st = tg_tensor_ref(e->tout[j], &y[j]);
    if (st != TG_OK)
        for (int j = 0; j < g->tm[chunk - 1]; j++) tg_tensor_free(y[j]), y[j] = NULL;
    else *ny = g->tm[chunk - 1];
    return st;
}

static tg_status replay_backward_n(tg_graphed *g, int chunk, int mb, const tg_tensor *const *dy, int ndy, tg_tensor **dx, int nx)
{
    char what[96];
    for (int i = 0; i < nx; i++) dx[i] = NULL;
    TG_TRY(check_order(g, 'B', chunk, &mb));
    int n = g->tn[chunk - 1], m = g->tm[chunk - 1];
    if (!n) return tg_error(TG_EINVAL, "graphed backward chunk %d mb %d: the chunk takes one gradient, got a list of %d", chunk, mb, ndy);
    if (ndy != m)
        return tg_error(TG_EINVAL, "graphed backward chunk %d mb %d: the chunk has %d outputs, got %d gradients", chunk, mb, m, ndy);
    if (nx < n) return tg_error(TG_EINVAL, "graphed backward chunk %d mb %d: room for %d input gradients, %d inputs", chunk, mb, nx, n);
    struct entry *e = replay_entry(g, chunk, mb);
    for (int j = 0; j < m; j++) {
        if (!dy[j] && e->tdout[j])
            return tg_error(TG_EINVAL, "graphed backward chunk %d mb %d: the gradient of output %d is missing", chunk, mb, j + 1);
        if (dy[j] && !e->tdout[j])
            return tg_error(TG_EINVAL, "graphed backward chunk %d mb %d: output %d is %s and takes no gradient, got one", chunk, mb,
                            j + 1, tg_dtype_name(e->tout[j]->dtype));
        if (!dy[j]) continue;
        snprintf(what, sizeof what, "graphed backward chunk %d mb %d gradient of output %d", chunk, mb, j + 1);
        TG_TRY(check_like(what, dy[j], e->tdout[j]));
    }
    for (int j = 0; j < m; j++)
        if (dy[j] && !tg_tensor_same_memory(dy[j], e->tdout[j])) TG_TRY(tg_copy(e->tdout[j], dy[j]));
    TG_TRY(zero_first_targets(&e->bset));
    TG_TRY(replay(g, e->b, 'B', chunk, mb));
    advance(g);
    TG_TRY(fire(&e->bset, mb));
    tg_status st = TG_OK;
    for (int i = 0; i < n && st == TG_OK; i++)
        if (e->tdin[i]) st = tg_tensor_ref(e->tdin[i], &dx[i]);
    if (st != TG_OK)
        for (int i = 0; i < n; i++) tg_tensor_free(dx[i]), dx[i] = NULL;
    return st;
}

static tg_status replay_backward_dw(tg_graphed *g, int chunk, int mb)
{
    if (chunk >= 1 && chunk <= g->nchunks && !g->has_w[chunk - 1])
        return tg_error(TG_ESTATE, "graphed backward_dw: chunk %d has no W graph (none of its modules delays wgrad)", chunk);
    TG_TRY(check_order(g, 'W', chunk, &mb));
    struct entry *e = replay_entry(g, chunk, mb);
    TG_TRY(zero_first_targets(&e->wset));
    TG_TRY(replay(g, e->w, 'W', chunk, mb));
    advance(g);
    if (g->skip_hooks_after_w) return TG_OK; /* TransformerEngine's bug, on purpose (tests) */
    return fire(&e->wset, mb);
}

tg_status tg_graphed_replay_on(tg_graphed *g, tg_stream *s, tg_event *wait)
{
    if (s && (s->dev.type != g->dev.type || s->dev.index != g->dev.index))
        return tg_error(TG_EINVAL, "graphed replay on stream '%s': it is on another device than the set", s->name);
    g->on = s;
    g->wait = wait;
    return TG_OK;
}

/* Makes the stream tg_graphed_replay_on gave current (after it waited for the
 * event) for one replay call; *prev is what to restore (NULL: nothing). */
static tg_status call_begin(tg_graphed *g, tg_stream **prev)
{
    *prev = NULL;
    tg_stream *s = g->on;
    tg_event *wait = g->wait;
    g->on = NULL;
    g->wait = NULL;
    if (s) *prev = tg_stream_set_current(s);
    if (!wait) return TG_OK;
    tg_stream *cur = tg_stream_current(g->dev);
    return cur ? tg_stream_wait_event(cur, wait) : TG_ENOMEM;
}

static tg_status call_end(tg_stream *prev, tg_status st)
{
    if (prev) tg_stream_set_current(prev);
    return st;
}

/* Brackets every replay call (its hooks run inside it: tg_graphed_running). */
static void run_begin(tg_graphed *g, char op, int chunk)
{
    if (g->running++ == 0) g->running_op = op, g->running_chunk = chunk, g->action_op = 0;
}

/* The outermost call's end: a failure after its order check (a hook, a copy, a replay) is kept for the
 * out-of-order error that the next call may meet; a call that succeeds forgets it. */
static tg_status run_end(tg_graphed *g, tg_status st)
{
    if (--g->running > 0) return st;
    if (st == TG_OK) {
        g->failed_op = 0;
    } else if (g->action_op) {
        g->failed_op = g->action_op, g->failed_chunk = g->action_chunk, g->failed_mb = g->action_mb;
    }
    g->action_op = 0;
    return st;
}

int tg_graphed_running(const tg_graphed *g, char *what, size_t n)
{
    if (!g || !g->running) return 0;
    static const char *const names[] = {"forward", "backward", "backward_dw"};
    const char *op = names[g->running_op == 'F' ? 0 : g->running_op == 'B' ? 1 : 2];
    if (what && n) snprintf(what, n, "%s of chunk %d", op, g->running_chunk);
    return 1;
}

tg_status tg_graphed_forward_res(tg_graphed *g, int chunk, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y)
{
    tg_stream *prev;
    *y = NULL;
    run_begin(g, 'F', chunk);
    tg_status st = call_begin(g, &prev);
    return run_end(g, call_end(prev, st == TG_OK ? replay_forward(g, chunk, mb, x, res, y) : st));
}

tg_status tg_graphed_forward(tg_graphed *g, int chunk, int mb, const tg_tensor *x, tg_tensor **y)
{
    return tg_graphed_forward_res(g, chunk, mb, x, NULL, y);
}

tg_status tg_graphed_backward_res(tg_graphed *g, int chunk, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx)
{
    tg_stream *prev;
    *dx = NULL;
    run_begin(g, 'B', chunk);
    tg_status st = call_begin(g, &prev);
    return run_end(g, call_end(prev, st == TG_OK ? replay_backward(g, chunk, mb, dy, dres, dx) : st));
}

tg_status tg_graphed_backward(tg_graphed *g, int chunk, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    return tg_graphed_backward_res(g, chunk, mb, dy, NULL, dx);
}

tg_status tg_graphed_forward_n(tg_graphed *g, int chunk, int mb, const tg_tensor *const *x, int nx, tg_tensor **y, int *ny)
{
    tg_stream *prev;
    *ny = 0;
    run_begin(g, 'F', chunk);
    tg_status st = call_begin(g, &prev);
    return run_end(g, call_end(prev, st == TG_OK ? replay_forward_n(g, chunk, mb, x, nx, y, ny) : st));
}

tg_status tg_graphed_backward_n(tg_graphed *g, int chunk, int mb, const tg_tensor *const *dy, int ndy, tg_tensor **dx, int nx)
{
    tg_stream *prev;
    run_begin(g, 'B', chunk);
    tg_status st = call_begin(g, &prev);
    return run_end(g, call_end(prev, st == TG_OK ? replay_backward_n(g, chunk, mb, dy, ndy, dx, nx) : st));
}

int tg_graphed_tuple_inputs(const tg_graphed *g, int chunk) { return chunk >= 1 && chunk <= g->nchunks ? g->tn[chunk - 1] : 0; }
int tg_graphed_tuple_outputs(const tg_graphed *g, int chunk) { return chunk >= 1 && chunk <= g->nchunks ? g->tm[chunk - 1] : 0; }

int tg_graphed_inputs(const tg_graphed *g, int chunk) { return chunk >= 1 && chunk <= g->nchunks && g->res[chunk - 1] ? 2 : 1; }

tg_status tg_graphed_backward_dw(tg_graphed *g, int chunk, int mb)
{
    tg_stream *prev;
    run_begin(g, 'W', chunk);
    tg_status st = call_begin(g, &prev);
    return run_end(g, call_end(prev, st == TG_OK ? replay_backward_dw(g, chunk, mb) : st));
}

void tg_graphed_reset(tg_graphed *g) { restart(g); }
int tg_graphed_has_w(const tg_graphed *g, int chunk) { return chunk >= 1 && chunk <= g->nchunks && g->has_w[chunk - 1]; }
int tg_graphed_nchunks(const tg_graphed *g) { return g->nchunks; }
int tg_graphed_shared(const tg_graphed *g) { return g->shared; }
int tg_graphed_reused(const tg_graphed *g) { return g->reuse; }

int tg_graphed_ngraphs(const tg_graphed *g)
{
    int n = 0;
    for (int i = 0; i < g->nchunks * g->mbs; i++) n += !!g->e[i].f + !!g->e[i].b + !!g->e[i].w;
    return n;
}
tg_module *tg_graphed_chunk(const tg_graphed *g, int chunk) { return chunk >= 1 && chunk <= g->nchunks ? g->chunks[chunk - 1] : NULL; }

void tg_graphed_memory(const tg_graphed *g, size_t *peak, size_t *naive)
{
    if (peak) *peak = g->pool->peak;
    if (naive) *naive = g->pool->total;
}
