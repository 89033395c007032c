/* layernorm-mlp-gelu-backward-fuses-dgelu.c — LayerNormMLP(gelu) applies fc1's gelu' inside fc2's dgrad GEMM (DGELU
 * epilogue on fc1's saved pre-activation) and fc1 runs no gelu_backward: against the unfused path
 * (TG_DEBUG_UNFUSED_DGELU) y, dx and every weight gradient are the same bits in f32 and within bf16 rounding in
 * bf16, with two microbatches interleaved, wgrad delayed or not, fused main_grad accumulation or not, with and
 * without a residual gradient; hooks fire once per parameter per microbatch; a captured CPU backward has one
 * command fewer per LayerNormMLP (also inside TransformerLayers), none fewer for swiglu; misuse of the internal
 * API is refused with named errors. */
#include "core/debug.h"
#include "nn-ops-util.h"
#include "nn/nn.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 3, C = 16, H = 40, NH = 2, L = 2, MB = 2, MAXP = 64 };
static const tg_device cpu = {TG_CPU, 0};

#define CHECK(call) nt_check((call), #call)

struct run {
    double *g; /* y and dx of each microbatch, then every parameter's wgrad target, as doubles */
    size_t n;
    size_t cmds;      /* commands of a captured backward */
    int hooks_ok;     /* every parameter's hook fired once per microbatch */
    int step_ok;      /* tg_step_end's hook check passed */
};

static void append(struct run *r, const tg_tensor *t) { nt_append(&r->g, &r->n, t); }

static tg_tensor *input(tg_dtype dt, double phase)
{
    double h[B * T * C];
    for (int i = 0; i < B * T * C; i++) h[i] = (float)(1.5 * sin(0.37 * i + phase));
    return nt_make(dt, h, B, T, C);
}

/* Hook: counts firings per microbatch (ud: int[MB + 1]). */
static tg_status count_hook(void *ud, tg_param *p, const tg_hook_info *info)
{
    int *n = ud;
    if (info->microbatch >= 1 && info->microbatch <= MB) n[info->microbatch]++;
    return TG_OK;
}

struct cfg {
    tg_dtype dt;
    int unfused, delay, fuse_acc, dres, layers; /* layers: a Sequential of L TransformerLayers instead of one MLP */
    const char *act;
};

static tg_module *build(const struct cfg *c, tg_module **parts)
{
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = cpu;
    o.dtype = c->dt;
    o.init_std = 0.2;
    o.delay_wgrad = c->delay;
    o.fuse_wgrad_accumulation = c->fuse_acc;
    tg_manual_seed(7);
    tg_module *m;
    if (!c->layers) {
        o.name = "mlp";
        CHECK(tg_layernorm_mlp_new(C, H, "LayerNorm", c->act, &o, &m));
        return m;
    }
    char name[16];
    for (int i = 0; i < L; i++) {
        snprintf(name, sizeof name, "h.%d", i);
        o.name = name;
        CHECK(tg_transformer_layer_new(C, NH, H, "LayerNorm", c->act, &o, &parts[i]));
    }
    CHECK(tg_sequential_new(parts, L, NULL, &m));
    return m;
}

static struct run run_model(const struct cfg *c)
{
    struct run r = {.hooks_ok = 1};
    tg_module *parts[L] = {0};
    tg_module *m = build(c, parts);
    tg_debug_set(TG_DEBUG_UNFUSED_DGELU, c->unfused);
    tg_param **p;
    int np;
    CHECK(tg_module_parameters(m, &p, &np));
    if (np > MAXP) bail_out("too many parameters");
    static int counts[MAXP][MB + 1];
    memset(counts, 0, sizeof counts);
    for (int i = 0; i < np; i++) CHECK(tg_param_add_hook(p[i], count_hook, counts[i], NULL, NULL));

    /* one step of two microbatches, interleaved: F1 F2 B2 B1 (then W2 W1 when delayed) */
    tg_tensor *x[MB], *dy[MB], *y[MB], *dx[MB];
    tg_tensor *dres = c->dres ? input(c->dt, 3.0) : NULL;
    CHECK(tg_step_begin(MB));
    for (int k = 0; k < MB; k++) {
        x[k] = input(c->dt, 0.5 * k), dy[k] = input(c->dt, 1.0 + 0.7 * k);
        CHECK(tg_module_forward(m, k + 1, x[k], &y[k]));
    }
    for (int k = MB - 1; k >= 0; k--) CHECK(tg_module_backward_res(m, k + 1, dy[k], dres, &dx[k]));
    if (c->delay)
        for (int k = 0; k < MB; k++) CHECK(tg_module_backward_dw(m, MB - k)); /* B order */
    r.step_ok = tg_step_end() == TG_OK;
    if (!r.step_ok) diag("step end: %s", tg_last_error());
    for (int k = 0; k < MB; k++) append(&r, y[k]), append(&r, dx[k]);
    for (int i = 0; i < np; i++) {
        append(&r, tg_param_wgrad_target(p[i]));
        for (int k = 1; k <= MB; k++) r.hooks_ok &= counts[i][k] == 1;
    }
    for (int k = 0; k < MB; k++) tg_tensor_free(y[k]), tg_tensor_free(dx[k]);

    /* captured: the commands of one backward (outside the step: no hooks) */
    tg_stream *side;
    tg_pool *pool;
    tg_graph *g = NULL;
    CHECK(tg_module_forward(m, 1, x[0], &y[0]));
    CHECK(tg_stream_new(cpu, "capture", &side));
    CHECK(tg_pool_new(cpu, &pool));
    tg_stream *prev = tg_stream_set_current(side);
    CHECK(tg_stream_begin_capture(side));
    CHECK(tg_pool_push(pool));
    tg_status st = tg_module_backward_res(m, 1, dy[0], dres, &dx[0]);
    tg_pool_pop(pool);
    tg_status st2 = tg_stream_end_capture(side, &g);
    if (st != TG_OK || st2 != TG_OK) bail_out("captured backward: %s", tg_last_error());
    r.cmds = tg_graph_size(g);
    tg_graph_free(g);
    tg_pool_release(pool);
    tg_stream_set_current(prev);
    tg_stream_free(side);

    tg_debug_set(TG_DEBUG_UNFUSED_DGELU, 0);
    tg_tensor_free(y[0]), tg_tensor_free(dx[0]), tg_tensor_free(dres);
    for (int k = 0; k < MB; k++) tg_tensor_free(x[k]), tg_tensor_free(dy[k]);
    free(p);
    tg_module_release(m);
    for (int i = 0; i < L; i++) tg_module_release(parts[i]);
    return r;
}

static double rel_l2(const struct run *a, const struct run *b)
{
    return a->n != b->n ? INFINITY : nt_rel_l2(a->g, b->g, a->n);
}

static void compare(const struct cfg *c)
{
    struct cfg cu = *c;
    cu.unfused = 1;
    struct run f = run_model(c), u = run_model(&cu);
    char what[200];
    snprintf(what, sizeof what, "%s %s%s%s%s%s", c->layers ? "2 TransformerLayers" : "LayerNormMLP", c->act,
             c->dt == TG_BF16 ? " bf16" : " f32", c->delay ? ", delayed wgrad" : "", c->fuse_acc ? ", fused main_grad" : "",
             c->dres ? ", with dres" : "");
    int per = strcmp(c->act, "gelu") == 0 ? (c->layers ? L : 1) : 0;
    ok(u.cmds == f.cmds + (size_t)per, "%s: captured backward is %zu commands fused, %zu unfused (%d fewer)", what, f.cmds,
       u.cmds, per);
    if (c->dt == TG_F32)
        ok(f.n == u.n && memcmp(f.g, u.g, f.n * sizeof *f.g) == 0,
           "%s: y, dx and all weight gradients of both microbatches are the same bits fused and unfused (%zu values)", what,
           f.n);
    else {
        double rel = rel_l2(&f, &u);
        ok(rel <= 1e-2, "%s: y, dx and weight gradients fused vs unfused relative L2 %.3g <= 1e-2", what, rel);
    }
    ok(f.hooks_ok && u.hooks_ok && f.step_ok && u.step_ok,
       "%s: every parameter's hook fired once per microbatch, fused and unfused, and the step check passes", what);
    double mx = 0;
    for (size_t i = 0; i < f.n; i++) mx = fmax(mx, fabs(f.g[i]));
    ok(mx > 0 && !isnan(mx), "%s: the values are not all zero (max %.3g)", what, mx);
    free(f.g), free(u.g);
}

/* The internal API refuses what it cannot fuse, naming the modules. */
static void misuse(void)
{
    struct cfg c = {.dt = TG_F32, .act = "gelu"};
    tg_module *m = build(&c, NULL), *norm = m->children[0], *fc1 = m->children[1], *fc2 = m->children[2];
    tg_tensor *x = input(TG_F32, 0.0), *y, *dh = NULL, *dy = input(TG_F32, 1.0);
    CHECK(tg_module_forward(m, 1, x, &y));
    ok(tg_linear_backward_dgelu(norm, 1, dy, fc1, &dh) == TG_EINVAL && strstr(tg_last_error(), "LayerNorm 'mlp.norm'") &&
           strstr(tg_last_error(), "not a Linear"),
       "backward with dgelu of a non-Linear is refused, naming it: %s", tg_last_error());
    ok(tg_linear_backward_dgelu(fc2, 1, dy, norm, &dh) == TG_EINVAL && strstr(tg_last_error(), "mlp.norm") &&
           strstr(tg_last_error(), "not a Linear with gelu"),
       "a dgelu source that is not a gelu Linear is refused, naming it: %s", tg_last_error());
    ok(tg_linear_backward_dgelu(fc2, 2, dy, fc1, &dh) == TG_ESTATE && strstr(tg_last_error(), "microbatch 2") && !dh,
       "backward with dgelu of a microbatch that never ran forward is refused: %s", tg_last_error());
    /* the misuse left everything usable: the real backward still matches the unfused one */
    tg_tensor *dx = NULL;
    CHECK(tg_module_backward(m, 1, dy, &dx));
    struct run a = {0}, b = {0};
    append(&a, dx);
    tg_tensor_free(dx), tg_tensor_free(y);
    tg_debug_set(TG_DEBUG_UNFUSED_DGELU, 1);
    CHECK(tg_module_forward(m, 1, x, &y));
    CHECK(tg_module_backward(m, 1, dy, &dx));
    tg_debug_set(TG_DEBUG_UNFUSED_DGELU, 0);
    append(&b, dx);
    ok(a.n == b.n && memcmp(a.g, b.g, a.n * sizeof *a.g) == 0, "after refused misuse, dx fused = dx unfused (same bits)");
    /* fc2's dgelu consumed fc1's pre-activation for microbatch 1: a second one is refused */
    tg_tensor_free(dx), tg_tensor_free(y);
    CHECK(tg_module_forward(m, 1, x, &y));
    CHECK(tg_linear_backward_dgelu(fc2, 1, dy, fc1, &dh));
    CHECK(tg_module_forward(fc2, 1, dh, &dx)); /* fc2 saved again, fc1 still waiting for dh */
    tg_tensor *dh2 = NULL;
    ok(tg_linear_backward_dgelu(fc2, 1, dy, fc1, &dh2) == TG_ESTATE && strstr(tg_last_error(), "no pre-activation"),
       "a second dgelu on the same pre-activation is refused: %s", tg_last_error());
    tg_tensor_free(dx), tg_tensor_free(dh), tg_tensor_free(dh2), tg_tensor_free(y);
    free(a.g), free(b.g);
    tg_tensor_free(x), tg_tensor_free(dy);
    tg_module_drop_state(m);
    tg_module_release(m);
}

int main(void)
{
    plan(NO_PLAN);
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = d ? TG_BF16 : TG_F32;
        for (int mode = 0; mode < 4; mode++) {
            struct cfg c = {.dt = dt, .act = "gelu", .delay = mode & 1, .fuse_acc = mode >> 1};
            compare(&c);
        }
        struct cfg r = {.dt = dt, .act = "gelu", .dres = 1};
        compare(&r);
        struct cfg layers = {.dt = dt, .act = "gelu", .layers = 1};
        compare(&layers);
        struct cfg layers_delayed = {.dt = dt, .act = "gelu", .layers = 1, .delay = 1, .fuse_acc = 1};
        compare(&layers_delayed);
    }
    struct cfg sw = {.dt = TG_F32, .act = "swiglu"};
    compare(&sw);
    misuse();
    return done_testing();
}
