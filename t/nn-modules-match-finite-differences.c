/* nn-modules-match-finite-differences.c — every f32 module: forward against a float64 reference, and both backward
 * halves (dgrad from backward, wgrad from a delayed backward_dw) against float64 central finite differences. */
#include "nn/nn.h"
#include "nn-ref.h"
#include "tap.h"

#include <math.h>
#include <string.h>

/* Sizes: B=2 sequences of T=3 tokens, width C=8, 2 heads, MLP hidden 12, vocab 11. */
enum { B = 2, T = 3, C = 8, NH = 2, H = 12, V = 11, MAXT = 4, OUT = 5, N = B * T };
static const double EPS_NORM = 1e-5;
/* FD step in float64 on the reference: truncation ~1e-12, rounding ~1e-9, so the error
 * measured is the module's own f32 rounding. */
static const double FD_STEP = 1e-6;
/* Tolerances (about 10x the f32 rounding seen): forward within 2e-6 of float64 (absolute, values O(1));
 * gradients within 2e-5 of the largest |gradient| of the same tensor. */
static const double FWD_TOL = 2e-6, GRAD_TOL = 2e-5;

enum kind { LINEAR, LAYERNORM, RMSNORM, LNLINEAR, MLP_GELU, MLP_SWIGLU_RMS, ATTN, LAYER, LAYER_RMS_SWIGLU, EMB, HEAD, TIED };

struct fcase {
    const char *name;
    enum kind kind;
    tg_module *m, *head; /* head: the tied LM head (TIED) */
    tg_param **p;
    int np;
    double **pd;     /* float64 copies of the parameters */
    double *x, *r;   /* input (float cases) and the weights r of L = sum(y * r) */
    int64_t nx, ny;
    int32_t idx[N], targets[N];
};

static int is_loss(const struct fcase *c) { return c->kind == HEAD || c->kind == TIED; }
static int takes_idx(const struct fcase *c) { return c->kind == EMB || c->kind == TIED; }

/* The float64 reference: returns L (sum(y * r), or the loss) and fills y. */
static double ref_eval(struct fcase *c, const double *x, double *y)
{
    double **P = c->pd, tmp[N * V], h[N * C];
    switch (c->kind) {
    case LINEAR: ref_linear(x, N, C, P[0], P[1], OUT, y); break;
    case LAYERNORM: ref_layernorm(x, N, C, P[0], P[1], EPS_NORM, y); break;
    case RMSNORM: ref_rmsnorm(x, N, C, P[0], EPS_NORM, y); break;
    case LNLINEAR:
        ref_layernorm(x, N, C, P[0], P[1], EPS_NORM, h);
        ref_linear(h, N, C, P[2], P[3], OUT, y);
        break;
    case MLP_GELU: ref_mlp(x, N, C, H, 0, 0, P, EPS_NORM, y); break;
    case MLP_SWIGLU_RMS: ref_mlp(x, N, C, H, 1, 1, P, EPS_NORM, y); break;
    case ATTN: ref_attn_block(x, B, T, C, NH, P, y); break;
    case LAYER: ref_layer(x, B, T, C, NH, H, 0, 0, P, EPS_NORM, y); break;
    case LAYER_RMS_SWIGLU: ref_layer(x, B, T, C, NH, H, 1, 1, P, EPS_NORM, y); break;
    case EMB: ref_embedding(c->idx, B, T, P[0], P[1], C, y); break;
    case HEAD:
        ref_layernorm(x, N, C, P[0], P[1], EPS_NORM, h);
        ref_linear(h, N, C, P[2], NULL, V, tmp);
        return y[0] = ref_cross_entropy(tmp, N, V, c->targets, -1);
    case TIED: {
        double e[N * C];
        ref_embedding(c->idx, B, T, P[0], P[1], C, e);
        ref_layernorm(e, N, C, P[2], P[3], EPS_NORM, h);
        ref_linear(h, N, C, P[0], NULL, V, tmp);
        return y[0] = ref_cross_entropy(tmp, N, V, c->targets, -1);
    }
    }
    double l = 0;
    for (int64_t i = 0; i < c->ny; i++) l += y[i] * c->r[i];
    return l;
}

static tg_tensor *tensor_f64(tg_dtype dt, int nd, const int64_t *shape, const double *v)
{
    tg_tensor *t;
    if (tg_tensor_new(dt, nd, shape, (tg_device){TG_CPU, 0}, &t) != TG_OK) bail_out("%s", tg_last_error());
    if (tg_tensor_write_f64(t, v, (size_t)tg_tensor_numel(t)) != TG_OK) bail_out("%s", tg_last_error());
    return t;
}

static tg_tensor *tensor_i32(int nd, const int64_t *shape, const int32_t *v)
{
    tg_tensor *t;
    if (tg_tensor_new(TG_I32, nd, shape, (tg_device){TG_CPU, 0}, &t) != TG_OK) bail_out("%s", tg_last_error());
    if (tg_tensor_write(t, v, (size_t)tg_tensor_numel(t) * 4) != TG_OK) bail_out("%s", tg_last_error());
    return t;
}

static double *read_all(const tg_tensor *t)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *d = malloc((n ? n : 1) * sizeof *d);
    if (tg_tensor_read_f64(t, d, n) != TG_OK) bail_out("%s", tg_last_error());
    return d;
}

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        if ((call) != TG_OK) bail_out("%s: %s", #call, tg_last_error());                               \
    } while (0)

/* max |a - fd| / max(|fd|) over one tensor; fd by central differences of the reference in v[0..n) */
static double fd_error(struct fcase *c, double *v, int64_t n, const double *analytic, double *ybuf)
{
    double err = 0, scale = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        double keep = v[i];
        v[i] = keep + FD_STEP;
        double lp = ref_eval(c, c->x, ybuf);
        v[i] = keep - FD_STEP;
        double lm = ref_eval(c, c->x, ybuf);
        v[i] = keep;
        double fd = (lp - lm) / (2 * FD_STEP);
        err = fmax(err, fabs(analytic[i] - fd));
        scale = fmax(scale, fabs(fd));
    }
    return err / scale;
}

static void run_case(struct fcase *c)
{
    int64_t xs[3] = {B, T, C}, is[2] = {B, T};
    tg_tensor *x = NULL, *y = NULL, *dx = NULL, *dy = NULL, *h = NULL;
    for (int i = 0; i < N; i++) {
        c->idx[i] = (i * 7 + 3) % V;
        c->targets[i] = i == 4 ? -1 : (i * 5 + 1) % V; /* one ignored row */
    }
    c->nx = takes_idx(c) ? 0 : N * C;
    c->x = malloc(N * C * sizeof *c->x);
    c->r = malloc(N * V * sizeof *c->r);
    for (int i = 0; i < N * C; i++) c->x[i] = sin(1.3 * i + 0.2) * 1.5;
    for (int i = 0; i < N * V; i++) c->r[i] = cos(0.7 * i + 0.1);
    x = takes_idx(c) ? tensor_i32(2, is, c->idx) : tensor_f64(TG_F32, 3, xs, c->x);
    double *xr = takes_idx(c) ? NULL : read_all(x);
    if (xr) memcpy(c->x, xr, N * C * sizeof *c->x), free(xr); /* the f32 values the module sees */

    CHECK(tg_module_parameters(c->m, &c->p, &c->np));
    if (c->head) {
        tg_param **hp;
        int nh;
        CHECK(tg_module_parameters(c->head, &hp, &nh));
        c->p = realloc(c->p, (size_t)(c->np + nh) * sizeof *c->p);
        for (int i = 0; i < nh; i++) c->p[c->np++] = hp[i];
        free(hp);
    }
    c->pd = calloc((size_t)c->np, sizeof *c->pd);
    for (int i = 0; i < c->np; i++) c->pd[i] = read_all(c->p[i]->data);

    /* forward */
    tg_tensor *targets = tensor_i32(1, (int64_t[]){N}, c->targets);
    if (c->kind == HEAD) {
        CHECK(tg_lm_head_forward_loss(c->m, 1, x, targets, -1, &y));
    } else if (c->kind == TIED) {
        CHECK(tg_module_forward(c->m, 1, x, &h));
        CHECK(tg_lm_head_forward_loss(c->head, 1, h, targets, -1, &y));
    } else {
        CHECK(tg_module_forward(c->m, 1, x, &y));
    }
    c->ny = is_loss(c) ? 1 : tg_tensor_numel(y);
    double *yref = calloc(N * 3 * C + N * V, sizeof *yref), *ybuf = calloc(N * 3 * C + N * V, sizeof *ybuf);
    ref_eval(c, c->x, yref);
    double *ym = read_all(y), ferr = 0;
    for (int64_t i = 0; i < c->ny; i++) ferr = fmax(ferr, fabs(ym[i] - yref[i]));
    ok(ferr <= FWD_TOL, "%s: forward matches float64 (max |err| %.2e)", c->name, ferr);
    if (is_loss(c)) is_near(ym[1], N - 1, 0, "%s: loss counts the %d rows not ignored", c->name, N - 1);
    free(ym);

    /* dgrad: backward, with wgrad delayed so nothing is in the gradients yet */
    if (is_loss(c)) {
        tg_tensor_free(h), h = NULL; /* the embedding keeps what it needs */
        CHECK(tg_module_backward(c->head ? c->head : c->m, 1, NULL, c->head ? &h : &dx));
        if (c->head) CHECK(tg_module_backward(c->m, 1, h, &dx));
    } else {
        dy = tensor_f64(TG_F32, tg_tensor_ndim(y), ((struct tg_tensor *)y)->shape, c->r);
        CHECK(tg_module_backward(c->m, 1, dy, &dx));
    }
    double gmax = 0;
    for (int i = 0; i < c->np; i++) {
        double v;
        CHECK(tg_max_abs(c->p[i]->grad, &v));
        gmax = fmax(gmax, v);
    }
    ok(gmax == 0 && tg_module_need_backward_dw(c->m), "%s: backward queued the wgrad and left the gradients alone", c->name);
    double worst = 0;
    if (c->nx) {
        double *a = read_all(dx);
        double e = fd_error(c, c->x, c->nx, a, ybuf);
        ok(e <= GRAD_TOL, "%s: dgrad dx matches finite differences (rel err %.2e)", c->name, e);
        worst = fmax(worst, e);
        free(a);
    } else {
        ok(dx == NULL, "%s: token ids get no input gradient", c->name);
    }
    /* wgrad: backward_dw (head first, like backward) */
    if (c->head) CHECK(tg_module_backward_dw(c->head, 1));
    CHECK(tg_module_backward_dw(c->m, 1));
    ok(!tg_module_need_backward_dw(c->m), "%s: nothing left queued", c->name);
    for (int i = 0; i < c->np; i++) {
        double *a = read_all(c->p[i]->grad);
        double e = fd_error(c, c->pd[i], tg_tensor_numel(c->p[i]->data), a, ybuf);
        ok(e <= GRAD_TOL, "%s: wgrad of %s matches finite differences (rel err %.2e)", c->name, c->p[i]->name, e);
        worst = fmax(worst, e);
        free(a);
    }
    diag("%-34s largest FD error: forward %.2e (abs), gradients %.2e (relative to the tensor's largest)", c->name, ferr, worst);

    for (int i = 0; i < c->np; i++) free(c->pd[i]);
    free(c->pd), free(c->p), free(c->x), free(c->r), free(yref), free(ybuf);
    tg_tensor_free(x), tg_tensor_free(y), tg_tensor_free(dx), tg_tensor_free(dy), tg_tensor_free(h);
    tg_tensor_free(targets);
    tg_module_release(c->head);
    tg_module_release(c->m);
}

int main(void)
{
    plan(NO_PLAN);
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = (tg_device){TG_CPU, 0};
    o.delay_wgrad = 1;
    o.init_std = 0.3; /* larger than the default so every path carries signal */
    tg_manual_seed(1234);
    struct fcase c;
#define NEW(kindv, label, make)                                                                        \
    do {                                                                                               \
        memset(&c, 0, sizeof c);                                                                       \
        c.kind = kindv, c.name = label;                                                                \
        o.name = label;                                                                                \
        CHECK(make);                                                                                   \
        run_case(&c);                                                                                  \
    } while (0)
    NEW(LINEAR, "Linear", tg_linear_new(C, OUT, &o, &c.m));
    NEW(LAYERNORM, "LayerNorm", tg_layernorm_new(C, &o, &c.m));
    NEW(RMSNORM, "RMSNorm", tg_rmsnorm_new(C, &o, &c.m));
    NEW(LNLINEAR, "LayerNormLinear", tg_layernorm_linear_new(C, OUT, "LayerNorm", &o, &c.m));
    NEW(MLP_GELU, "LayerNormMLP(gelu)", tg_layernorm_mlp_new(C, H, "LayerNorm", "gelu", &o, &c.m));
    NEW(MLP_SWIGLU_RMS, "LayerNormMLP(rmsnorm,swiglu)", tg_layernorm_mlp_new(C, H, "RMSNorm", "swiglu", &o, &c.m));
    NEW(ATTN, "CausalSelfAttention", tg_attention_new(C, NH, &o, &c.m));
    NEW(LAYER, "TransformerLayer", tg_transformer_layer_new(C, NH, H, "LayerNorm", "gelu", &o, &c.m));
    NEW(LAYER_RMS_SWIGLU, "TransformerLayer(rmsnorm,swiglu)", tg_transformer_layer_new(C, NH, H, "RMSNorm", "swiglu", &o, &c.m));
    NEW(EMB, "Embedding", tg_embedding_new(V, C, MAXT, &o, &c.m));
    NEW(HEAD, "LMHead(untied)", tg_lm_head_new(C, V, NULL, "LayerNorm", &o, &c.m));
    memset(&c, 0, sizeof c);
    c.kind = TIED, c.name = "Embedding+LMHead(tied)";
    o.name = "emb";
    CHECK(tg_embedding_new(V, C, MAXT, &o, &c.m));
    o.name = "head";
    CHECK(tg_lm_head_new(C, V, c.m, "LayerNorm", &o, &c.head));
    run_case(&c);
    return done_testing();
}
