/* nn-hooks-fire-once-after-wgrad.c — wgrad hooks fire exactly once per parameter per microbatch, in both eager modes,
 * after the gradient is in the buffer (a hook reads the final value), with the right info; never while capturing, and a plain stream capture of module work fires them at each replay;
 * the step check catches a skipped wgrad and names the parameter and the mode. */
#include "nn/nn.h"
#include "tap.h"

#include <string.h>

enum { B = 2, T = 3, C = 8, NH = 2, H = 12, V = 7, M = 3, MAXP = 64 };

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        if ((call) != TG_OK) bail_out("%s: %s", #call, tg_last_error());                               \
    } while (0)

struct model {
    tg_module *emb, *layer, *head; /* head tied to emb; layer on chunk 2 */
    tg_param **p;
    int np;
};

static void model_new(struct model *md, int delay)
{
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = (tg_device){TG_CPU, 0};
    o.delay_wgrad = delay;
    o.init_std = 0.2;
    tg_manual_seed(5);
    o.name = "emb";
    CHECK(tg_embedding_new(V, C, T, &o, &md->emb));
    o.name = "h.0";
    o.chunk = 2;
    CHECK(tg_transformer_layer_new(C, NH, H, "LayerNorm", "gelu", &o, &md->layer));
    o.name = "head";
    o.chunk = 1;
    CHECK(tg_lm_head_new(C, V, md->emb, "LayerNorm", &o, &md->head));
    tg_module *all[3] = {md->emb, md->layer, md->head}, *seq;
    CHECK(tg_sequential_new(all, 3, NULL, &seq));
    CHECK(tg_module_parameters(seq, &md->p, &md->np));
    tg_module_release(seq);
    if (md->np > MAXP) bail_out("too many parameters");
}

static void model_free(struct model *md)
{
    free(md->p);
    tg_module_release(md->head), tg_module_release(md->layer), tg_module_release(md->emb);
}

static void fwd(struct model *md, int mb)
{
    int32_t idx[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) idx[i] = (i * 3 + mb) % V, tgt[i] = (i + 2 * mb) % V;
    tg_tensor *ti, *tt, *h0, *h1, *loss;
    CHECK(tg_tensor_new(TG_I32, 2, (int64_t[]){B, T}, (tg_device){TG_CPU, 0}, &ti));
    CHECK(tg_tensor_new(TG_I32, 2, (int64_t[]){B, T}, (tg_device){TG_CPU, 0}, &tt));
    CHECK(tg_tensor_write(ti, idx, sizeof idx));
    CHECK(tg_tensor_write(tt, tgt, sizeof tgt));
    CHECK(tg_module_forward(md->emb, mb, ti, &h0));
    CHECK(tg_module_forward(md->layer, mb, h0, &h1));
    CHECK(tg_lm_head_forward_loss(md->head, mb, h1, tt, -1, &loss));
    tg_tensor_free(ti), tg_tensor_free(tt), tg_tensor_free(h0), tg_tensor_free(h1), tg_tensor_free(loss);
}

static tg_status bwd(struct model *md, int mb)
{
    tg_tensor *d1, *d0, *none;
    TG_TRY(tg_module_backward(md->head, mb, NULL, &d1));
    tg_status st = tg_module_backward(md->layer, mb, d1, &d0);
    if (st == TG_OK) st = tg_module_backward(md->emb, mb, d0, &none);
    tg_tensor_free(d1), tg_tensor_free(d0);
    return st;
}

/* ------------------------------------------------------------------ the hook and its log */
struct entry {
    tg_param *p;
    tg_hook_info info;
    int grad_matches; /* the buffer held the expected cumulative gradient when the hook ran */
};
static struct entry logv[4096];
static int nlog;
/* expected cumulative wgrad targets after the k-th microbatch's wgrad, per parameter (reference run) */
static float *expect[M + 1][MAXP];
static struct model *cur;
static int fail_on_mb; /* a hook returns an error for this microbatch (0: never) */

static int param_index(tg_param *p)
{
    if (!cur) return -1; /* hooks of a module outside the reference model */
    for (int i = 0; i < cur->np; i++)
        if (cur->p[i] == p) return i;
    return -1;
}

/* A C x C Linear named name on the CPU, and its parameters (*lp: the caller frees). */
static void cpu_linear(const char *name, tg_module **lin, tg_param ***lp, int *nlp)
{
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = (tg_device){TG_CPU, 0};
    o.name = name;
    CHECK(tg_linear_new(C, C, &o, lin));
    CHECK(tg_module_parameters(*lin, lp, nlp));
}

/* A hook that fails without setting a message: it returns *ud. */
static tg_status silent_fail(void *ud, tg_param *p, const tg_hook_info *info)
{
    (void)p, (void)info;
    return *(tg_status *)ud;
}

/* A hook that adds another hook to its own parameter, keeping the status and the id it got. */
struct adder {
    tg_status st;
    int id;
};
static tg_status adds_a_hook(void *ud, tg_param *p, const tg_hook_info *info)
{
    (void)info;
    struct adder *a = ud;
    a->id = -1;
    a->st = tg_param_add_hook(p, silent_fail, NULL, NULL, &a->id);
    return TG_OK;
}

static int freed; /* calls of count_free */
static void count_free(void *ud)
{
    (void)ud;
    freed++;
}

static tg_status hook(void *ud, tg_param *p, const tg_hook_info *info)
{
    (void)ud;
    if (fail_on_mb && info->microbatch == fail_on_mb) return tg_error(TG_EINVAL, "the test hook refuses microbatch %d", fail_on_mb);
    struct entry *e = &logv[nlog++];
    e->p = p;
    e->info = *info;
    int k = 0; /* this is p's k-th firing of the step */
    for (int i = 0; i < nlog; i++) k += logv[i].p == p;
    int pi = param_index(p);
    tg_tensor *g = tg_param_wgrad_target(p);
    size_t n = (size_t)tg_tensor_numel(g);
    float *now = malloc(n * 4);
    if (tg_tensor_read(g, now, n * 4) != TG_OK) return TG_EDEVICE;
    e->grad_matches = pi >= 0 && k <= M && expect[k][pi] && memcmp(now, expect[k][pi], n * 4) == 0;
    free(now);
    return TG_OK;
}

static int count(tg_param *p, int mb)
{
    int n = 0;
    for (int i = 0; i < nlog; i++) n += logv[i].p == p && logv[i].info.microbatch == mb;
    return n;
}

static void snapshot(struct model *md, int k)
{
    for (int i = 0; i < md->np; i++) {
        tg_tensor *g = tg_param_wgrad_target(md->p[i]);
        size_t n = (size_t)tg_tensor_numel(g);
        expect[k][i] = malloc(n * 4);
        CHECK(tg_tensor_read(g, expect[k][i], n * 4));
    }
}

static const int order_f[M] = {1, 2, 3}, order_b[M] = {2, 1, 3}; /* backward out of forward order */

static void check_run(struct model *md, const char *mode, int64_t step)
{
    int once = 1, info_ok = 1, grad_ok = 1;
    for (int i = 0; i < md->np; i++)
        for (int mb = 1; mb <= M; mb++) once &= count(md->p[i], mb) == 1;
    ok(once && nlog == md->np * M, "%s: every parameter's hooks fired once per microbatch (%d firings)", mode, nlog);
    int seen[MAXP] = {0};
    for (int i = 0; i < nlog; i++) {
        struct entry *e = &logv[i];
        int pi = param_index(e->p);
        seen[pi]++;
        int chunk = strncmp(e->p->name, "h.0.", 4) == 0 ? 2 : 1;
        /* hooks fire in B order, since the wgrad store is FIFO */
        info_ok &= e->info.microbatch == order_b[seen[pi] - 1] && e->info.last == (seen[pi] == M) &&
                   e->info.chunk == chunk && e->info.step == step;
        grad_ok &= e->grad_matches;
    }
    ok(info_ok, "%s: info has the microbatch, last only on the %d-th firing, the module's chunk and step %lld", mode, M,
       (long long)step);
    ok(grad_ok, "%s: every hook saw its parameter's gradient complete through that microbatch", mode);
}

int main(void)
{
    plan(NO_PLAN);
    struct model md;

    /* reference: immediate wgrad, no hooks; snapshot the gradients after each microbatch in B order */
    model_new(&md, 0);
    CHECK(tg_step_begin(M));
    for (int i = 0; i < M; i++) fwd(&md, order_f[i]);
    for (int i = 0; i < M; i++) {
        CHECK(bwd(&md, order_b[i]));
        snapshot(&md, i + 1);
    }
    CHECK(tg_step_end());
    model_free(&md);

    for (int delay = 0; delay <= 1; delay++) {
        const char *mode = delay ? "eager, delayed wgrad" : "eager, immediate wgrad";
        model_new(&md, delay);
        cur = &md;
        for (int i = 0; i < md.np; i++) CHECK(tg_param_add_hook(md.p[i], hook, NULL, NULL, NULL));
        nlog = 0;
        int64_t step = 0;
        CHECK(tg_step_begin(M));
        step = tg_step_index();
        for (int i = 0; i < M; i++) fwd(&md, order_f[i]);
        for (int i = 0; i < M; i++) {
            int before = nlog;
            CHECK(bwd(&md, order_b[i]));
            if (delay) {
                ok(nlog == before, "%s: backward of microbatch %d fired no hooks (wgrad queued)", mode, order_b[i]);
                CHECK(tg_module_backward_dw(md.head, order_b[i]));
                CHECK(tg_module_backward_dw(md.layer, order_b[i]));
                int half = count(md.p[0], order_b[i]);
                CHECK(tg_module_backward_dw(md.emb, order_b[i]));
                /* the tied table fires only once the embedding's half is in too */
                ok(half == 0 && count(md.p[0], order_b[i]) == 1, "%s: tied %s fired after both of its contributions, not before",
                   mode, md.p[0]->name);
            } else {
                ok(nlog == before + md.np, "%s: backward of microbatch %d fired every parameter's hooks", mode, order_b[i]);
            }
        }
        ok(tg_step_end() == TG_OK, "%s: the step check passes", mode);
        check_run(&md, mode, step);
        model_free(&md);
    }

    /* what the graph layer fires after a replay: each module's wgrad contributions, the tied table in both */
    model_new(&md, 1);
    {
        tg_param **w, **own;
        int nw, nown, has_w = 0, has_own = 0;
        CHECK(tg_module_wgrad_params(md.head, &w, &nw));
        CHECK(tg_module_parameters(md.head, &own, &nown));
        for (int i = 0; i < nw; i++) has_w += w[i] == md.p[0];
        for (int i = 0; i < nown; i++) has_own += own[i] == md.p[0];
        ok(nw == nown + 1 && has_w == 1 && has_own == 0,
           "the tied head's wgrad contributions include %s, its parameters do not (%d vs %d)", md.p[0]->name, nw, nown);
        free(w), free(own);
    }

    /* the step check: skip one delayed wgrad of h.0 */
    cur = &md;
    for (int i = 0; i < md.np; i++) CHECK(tg_param_add_hook(md.p[i], hook, NULL, NULL, NULL));
    for (int pass = 0; pass < 2; pass++) {
        nlog = 0;
        tg_hook_check_set(pass == 0);
        CHECK(tg_step_begin(M));
        for (int i = 0; i < M; i++) fwd(&md, order_f[i]);
        for (int i = 0; i < M; i++) {
            CHECK(bwd(&md, order_b[i]));
            CHECK(tg_module_backward_dw(md.head, order_b[i]));
            if (i < M - 1) CHECK(tg_module_backward_dw(md.layer, order_b[i])); /* the last one is "forgotten" */
            CHECK(tg_module_backward_dw(md.emb, order_b[i]));
        }
        /* a forgotten wgrad still queued keeps the step open, naming it */
        tg_status st = tg_step_end();
        if (pass == 0) {
            is_int(st, TG_ESTATE, "step_end refuses while h.0's last delayed wgrad is queued");
            like(tg_last_error(), "has delayed wgrads that have not run: ", "... saying so");
            ok(tg_step_open(), "... and the step stays open");
        }
        tg_module_drop_saved(md.layer, order_b[M - 1]); /* dropped: its hooks never fire */
        st = tg_step_end();
        if (pass == 0) {
            const char *msg = tg_last_error();
            is_int(st, TG_ESTATE, "step check fails when h.0 skipped a wgrad");
            like(msg, "hook check failed at step", "message says what failed");
            like(msg, "(mode: eager, delayed wgrad)", "message names the execution mode");
            like(msg, "h.0.attn_norm.weight fired [1,1,0] (expected once per microbatch 1..3)",
                 "message names the parameter and what it got per microbatch");
            like(msg, "h.0.mlp.fc2.weight fired [1,1,0]", "message lists every skipped parameter");
            ok(!strstr(msg, "emb.wte") && !strstr(msg, "head.norm"), "parameters that fired are not listed");
            diag("%s", msg);
        } else {
            ok(st == TG_OK, "with the hook check off the same step ends without error");
        }
    }
    tg_hook_check_set(1);

    /* a parameter without hooks, or whose module did not run in the step, is not checked */
    CHECK(tg_step_begin(2));
    ok(tg_step_end() == TG_OK, "a step in which no module ran passes the check");

    /* outside steps: step 0, every firing is "last"; gradients accumulate */
    nlog = 0;
    fwd(&md, 1);
    CHECK(bwd(&md, 1));
    CHECK(tg_module_backward_dw(md.head, 1));
    CHECK(tg_module_backward_dw(md.layer, 1));
    CHECK(tg_module_backward_dw(md.emb, 1));
    int outside_ok = nlog == md.np;
    for (int i = 0; i < nlog; i++) outside_ok &= logv[i].info.step == 0 && logv[i].info.last == 1 && logv[i].info.microbatch == 1;
    ok(outside_ok, "outside steps hooks fire once with step 0 and last = 1");

    /* a failing hook fails the call that fired it, with its message */
    fail_on_mb = 2;
    CHECK(tg_step_begin(2));
    fwd(&md, 2);
    CHECK(bwd(&md, 2));
    tg_status st = tg_module_backward_dw(md.head, 2);
    is_int(st, TG_EINVAL, "a hook error is returned by backward_dw");
    like(tg_last_error(), "the test hook refuses microbatch 2", "with the hook's message");
    like(tg_last_error(), "wgrad hook 1 of head.norm.weight", "naming the parameter");
    fail_on_mb = 0;
    tg_hook_check_set(0);
    tg_module_drop_saved(md.head, 0); /* the step is given up: its queued wgrads go */
    tg_module_drop_saved(md.layer, 0);
    tg_module_drop_saved(md.emb, 0);
    is_int(tg_step_end(), TG_OK, "a step given up (drop_saved) ends");
    tg_hook_check_set(1);
    model_free(&md);

    /* a hook that fails without a message is reported as such, not with whatever message an earlier call left;
     * a value that is not a tg_status is refused as one */
    {
        tg_module *lin;
        tg_param **lp;
        int nlp;
        cpu_linear("quiet", &lin, &lp, &nlp);
        tg_device dev = {TG_CPU, 0};
        static tg_status returns[2] = {TG_EINVAL, (tg_status)77};
        const char *want[2] = {"wgrad hook 1 of quiet.weight (microbatch 1): the hook failed (invalid argument) without a message",
                               "wgrad hook 1 of quiet.weight (microbatch 1): the hook returned 77, which is not a tg_status"};
        tg_tensor *x, *y, *dx;
        CHECK(tg_tensor_new(TG_F32, 2, (int64_t[]){4, C}, dev, &x));
        CHECK(tg_fill(x, 0.5));
        for (int k = 0; k < 2; k++) {
            int id;
            CHECK(tg_param_add_hook(lp[0], silent_fail, &returns[k], NULL, &id));
            CHECK(tg_module_forward(lin, 1, x, &y));
            tg_error(TG_EIO, "a stale message of an earlier failure");
            tg_status st = tg_module_backward(lin, 1, y, &dx);
            ok(st != TG_OK && strstr(tg_last_error(), want[k]) && !strstr(tg_last_error(), "stale"),
               "a hook returning %d without a message: '%s'", (int)returns[k], tg_last_error());
            tg_tensor_free(y);
            CHECK(tg_param_remove_hook(lp[0], id));
        }

        /* tegraph.h's refusals of tg_param_add_hook: the same (fn, ud) pair twice is TG_EINVAL with *id = 0 (and
         * free_ud not called: ud stays the caller's), another ud is another hook; adding a hook from one of the
         * parameter's own hooks is TG_ESTATE */
        static tg_status status_a = TG_OK, status_b = TG_OK;
        int first = 0, again = -1, other = 0;
        CHECK(tg_param_add_hook(lp[0], silent_fail, &status_a, count_free, &first));
        freed = 0;
        ok(tg_param_add_hook(lp[0], silent_fail, &status_a, count_free, &again) == TG_EINVAL && again == 0,
           "adding the same (fn, ud) twice is TG_EINVAL and *id is 0 (got %d)", again);
        char want_dup[96];
        snprintf(want_dup, sizeof want_dup, "already registered as hook id %d", first);
        like(tg_last_error(), want_dup, "... naming the hook's id");
        ok(freed == 0 && tg_param_hook_count(lp[0]) == 1, "... free_ud is not called and the hook is there once");
        ok(tg_param_add_hook(lp[0], silent_fail, &status_b, NULL, &other) == TG_OK && other > first,
           "the same fn with another ud is another hook");
        CHECK(tg_param_remove_hook(lp[0], other));
        CHECK(tg_param_remove_hook(lp[0], first));
        ok(freed == 1, "removing the hook calls its free_ud once");
        struct adder add = {TG_OK, 0};
        int aid;
        CHECK(tg_param_add_hook(lp[0], adds_a_hook, &add, NULL, &aid));
        CHECK(tg_module_forward(lin, 1, x, &y));
        CHECK(tg_module_backward(lin, 1, y, &dx));
        tg_tensor_free(y);
        tg_tensor_free(dx);
        ok(add.st == TG_ESTATE && add.id == 0, "adding a hook from one of the parameter's own hooks is TG_ESTATE, *id 0");
        ok(tg_param_hook_count(lp[0]) == 1, "... and adds nothing");
        CHECK(tg_param_remove_hook(lp[0], aid));
        tg_tensor_free(x);
        free(lp);
        tg_module_release(lin);
    }

    /* while the device captures (the C API's plain stream capture), wgrads are neither counted nor fired: the
     * graph records them, and each replay zeroes first-of-step targets, marks the forward and fires the hooks */
    {
        tg_module *lin;
        tg_param **lp;
        int nlp;
        cpu_linear("cap", &lin, &lp, &nlp);
        tg_device dev = {TG_CPU, 0};
        cur = NULL; /* lin is not the reference model: its hooks compare no snapshots */
        for (int i = 0; i < nlp; i++) CHECK(tg_param_add_hook(lp[i], hook, NULL, NULL, NULL));
        tg_tensor *x, *y, *dx;
        CHECK(tg_tensor_new(TG_F32, 2, (int64_t[]){4, C}, dev, &x));
        CHECK(tg_fill(x, 0.5));
        /* the eager gradient of one microbatch, the reference for every replayed step */
        int64_t n = tg_tensor_numel(lp[0]->grad);
        float *ref = malloc((size_t)n * 4), *now = malloc((size_t)n * 4);
        CHECK(tg_step_begin(1));
        CHECK(tg_module_forward(lin, 1, x, &y));
        CHECK(tg_module_backward(lin, 1, y, &dx));
        CHECK(tg_step_end());
        tg_tensor_free(y), tg_tensor_free(dx);
        CHECK(tg_tensor_read(lp[0]->grad, ref, (size_t)n * 4));
        tg_pool *pool;
        CHECK(tg_pool_new(dev, &pool));
        tg_stream *s = tg_stream_current(dev);
        CHECK(tg_pool_push(pool));
        int64_t seen0 = lp[0]->step_seen;
        int contributed0 = lp[0]->contributed;
        CHECK(tg_stream_begin_capture(s));
        nlog = 0;
        tg_status fs = tg_module_forward(lin, 1, x, &y);
        tg_status bs = fs == TG_OK ? tg_module_backward(lin, 1, y, &dx) : fs;
        ok(bs == TG_OK && nlog == 0, "no hook fires during capture (%s)", bs == TG_OK ? "ok" : tg_last_error());
        ok(lp[0]->step_seen == seen0 && lp[0]->contributed == contributed0, "and no contribution is counted");
        tg_graph *g = NULL;
        CHECK(tg_stream_end_capture(s, &g));
        tg_pool_pop(pool);
        for (int step = 1; step <= 3; step++) {
            nlog = 0;
            CHECK(tg_step_begin(1));
            CHECK(tg_graph_replay(g, s));
            ok(nlog == nlp, "step %d: the replay fires each hook once (%d firings)", step, nlog);
            tg_status es = tg_step_end();
            ok(es == TG_OK, "step %d: the step check passes%s%s", step, es ? ": " : "", es ? tg_last_error() : "");
            CHECK(tg_tensor_read(lp[0]->grad, now, (size_t)n * 4));
            ok(memcmp(now, ref, (size_t)n * 4) == 0, "step %d: the gradient equals eager's (the replay overwrote it)", step);
        }
        CHECK(tg_step_begin(1));
        CHECK(tg_graph_replay(g, s));
        CHECK(tg_graph_replay(g, s));
        tg_status es = tg_step_end();
        ok(es == TG_ESTATE && strstr(tg_last_error(), "cap.weight fired [2]"),
           "two replays in a one-microbatch step fail the step check, naming the parameter: %s", tg_last_error());
        tg_graph_free(g);
        free(ref), free(now);
        tg_tensor_free(x), tg_tensor_free(y), tg_tensor_free(dx);
        tg_pool_release(pool);
        free(lp);
        tg_module_release(lin);
    }
    for (int k = 1; k <= M; k++)
        for (int i = 0; i < MAXP; i++) free(expect[k][i]);
    return done_testing();
}
