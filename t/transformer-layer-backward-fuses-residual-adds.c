/* transformer-layer-backward-fuses-residual-adds.c — TransformerLayer adds its two residuals inside the output
 * projections' GEMMs (forward) and its two residual gradients inside the norms' dgrad kernels (backward): a
 * captured CPU forward and backward each have 2 commands fewer per layer than the unfused path (forward or
 * backward, then an add: TG_DEBUG_UNFUSED_RESIDUAL), with outputs and gradients equal within f32 rounding in
 * f32 and within bf16 rounding in bf16; a module without a fused path still gets the residual added. */
#include "core/debug.h"
#include "nn-ops-util.h"
#include "nn/nn.h"
#include "tap.h"

#include <math.h>
#include <string.h>

enum { B = 2, T = 4, C = 16, NH = 2, H = 32, L = 2 };
static const tg_device cpu = {TG_CPU, 0};

#define CHECK(call) nt_check((call), #call)

struct run {
    double *g; /* y, dx, then every parameter's wgrad target, as doubles */
    size_t n;
    size_t cmds;  /* commands of a captured backward */
    size_t fcmds; /* commands of a captured forward */
};

static void append(struct run *r, const tg_tensor *t) { nt_append(&r->g, &r->n, t); }

static tg_tensor *input(tg_dtype dt, double phase)
{
    double h[B * T * C];
    for (int i = 0; i < B * T * C; i++) h[i] = (float)sin(0.37 * i + phase);
    return nt_make(dt, h, B, T, C);
}

static struct run run_model(const char *norm, tg_dtype dt, int unfused)
{
    struct run r = {0};
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = cpu;
    o.dtype = dt;
    o.init_std = 0.2;
    tg_manual_seed(5);
    tg_module *layers[L], *seq;
    char name[16];
    for (int i = 0; i < L; i++) {
        snprintf(name, sizeof name, "h.%d", i);
        o.name = name;
        CHECK(tg_transformer_layer_new(C, NH, H, norm, "gelu", &o, &layers[i]));
    }
    CHECK(tg_sequential_new(layers, L, NULL, &seq));
    tg_debug_set(TG_DEBUG_UNFUSED_RESIDUAL, unfused);

    /* eager: gradients */
    tg_tensor *x = input(dt, 0.0), *dy = input(dt, 1.0), *y, *dx;
    CHECK(tg_module_forward(seq, 1, x, &y));
    CHECK(tg_module_backward(seq, 1, dy, &dx));
    append(&r, y);
    append(&r, dx);
    tg_param **p;
    int np;
    CHECK(tg_module_parameters(seq, &p, &np));
    for (int i = 0; i < np; i++) append(&r, tg_param_wgrad_target(p[i]));
    free(p);
    tg_tensor_free(y), tg_tensor_free(dx);

    /* captured: the commands of one forward, then of one backward */
    tg_stream *side;
    tg_pool *pool;
    tg_graph *g = NULL;
    CHECK(tg_stream_new(cpu, "capture", &side));
    CHECK(tg_pool_new(cpu, &pool));
    tg_stream *prev = tg_stream_set_current(side);
    CHECK(tg_stream_begin_capture(side));
    CHECK(tg_pool_push(pool));
    tg_status st = tg_module_forward(seq, 1, x, &y);
    tg_pool_pop(pool);
    tg_status st1 = tg_stream_end_capture(side, &g);
    if (st != TG_OK || st1 != TG_OK) bail_out("captured forward: %s", tg_last_error());
    r.fcmds = tg_graph_size(g);
    tg_graph_free(g);
    g = NULL;
    CHECK(tg_stream_begin_capture(side));
    CHECK(tg_pool_push(pool));
    st = tg_module_backward(seq, 1, dy, &dx);
    tg_pool_pop(pool);
    tg_status st2 = tg_stream_end_capture(side, &g);
    if (st != TG_OK || st2 != TG_OK) bail_out("captured backward: %s", tg_last_error());
    r.cmds = tg_graph_size(g);
    tg_tensor_free(dx);
    tg_graph_free(g);
    tg_pool_release(pool);
    tg_stream_set_current(prev);
    tg_stream_free(side);

    tg_debug_set(TG_DEBUG_UNFUSED_RESIDUAL, 0);
    tg_tensor_free(y), tg_tensor_free(x), tg_tensor_free(dy);
    tg_module_release(seq);
    for (int i = 0; i < L; i++) tg_module_release(layers[i]);
    return r;
}

/* A chain whose first child has no fused residual path (Linear): backward_res falls back to backward + add. */
static void fallback_adds(void)
{
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = cpu;
    tg_manual_seed(9);
    tg_module *lin, *seq;
    CHECK(tg_linear_new(C, C, &o, &lin));
    CHECK(tg_sequential_new(&lin, 1, NULL, &seq));
    tg_tensor *x = input(TG_F32, 0.5), *dy = input(TG_F32, 2.0), *dres = input(TG_F32, 3.0), *y, *a, *b;
    CHECK(tg_module_forward(seq, 1, x, &y));
    CHECK(tg_module_backward_res(seq, 1, dy, dres, &a));
    tg_tensor_free(y);
    CHECK(tg_module_forward(seq, 1, x, &y));
    CHECK(tg_module_backward(seq, 1, dy, &b));
    CHECK(tg_binary(TG_ADD, b, dres, b));
    struct run ra = {0}, rb = {0};
    append(&ra, a), append(&rb, b);
    ok(ra.n == rb.n && memcmp(ra.g, rb.g, ra.n * sizeof *ra.g) == 0,
       "Sequential(Linear): backward_res equals backward + add (fallback path)");
    free(ra.g), free(rb.g);
    tg_tensor_free(x), tg_tensor_free(dy), tg_tensor_free(dres), tg_tensor_free(y), tg_tensor_free(a), tg_tensor_free(b);
    tg_module_release(seq), tg_module_release(lin);
}

int main(void)
{
    plan(NO_PLAN);
    const char *norms[] = {"LayerNorm", "RMSNorm"};
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 2; d++) {
            tg_dtype dt = d ? TG_BF16 : TG_F32;
            struct run f = run_model(norms[k], dt, 0), u = run_model(norms[k], dt, 1);
            ok(u.cmds == f.cmds + 2 * L, "%s %s: captured backward of %d layers is %zu commands fused, %zu unfused (2 fewer a layer)",
               norms[k], tg_dtype_name(dt), L, f.cmds, u.cmds);
            ok(u.fcmds == f.fcmds + 2 * L,
               "%s %s: captured forward of %d layers is %zu commands fused, %zu unfused (the residual adds run in the GEMMs)",
               norms[k], tg_dtype_name(dt), L, f.fcmds, u.fcmds);
            if (dt == TG_F32) {
                /* the forward GEMM adds the residual before the bias, the unfused path after: f32 rounding apart */
                double rel = f.n == u.n ? nt_rel_l2(f.g, u.g, f.n) : INFINITY;
                ok(f.n == u.n && rel <= 1e-6, "%s f32: y, dx and all weight gradients fused vs unfused relative L2 %.3g <= 1e-6 (%zu values)",
                   norms[k], rel, f.n);
            } else {
                double rel = f.n == u.n ? nt_rel_l2(f.g, u.g, f.n) : INFINITY;
                ok(f.n == u.n && rel <= 1e-2, "%s bf16: gradients fused vs unfused relative L2 %.3g <= 1e-2", norms[k], rel);
            }
            double mx = 0;
            for (size_t i = 0; i < f.n; i++) mx = fmax(mx, fabs(f.g[i]));
            ok(mx > 0, "%s %s: the gradients are not all zero (max %.3g)", norms[k], tg_dtype_name(dt), mx);
            free(f.g), free(u.g);
        }
    fallback_adds();
    return done_testing();
}
