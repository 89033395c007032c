/* nn-ops-bf16-close-to-f32.c — every transformer op run in bf16 stays within bf16 tolerance (relative L2 <= 1e-2) of the same op in f32 on the same (bf16-representable) inputs. */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <string.h>

#define TOL 1e-2

/* Outputs of one run, by name. */
struct run {
    int k;
    const char *name[12];
    double *v[12];
    size_t n[12];
};

static void keep(struct run *r, const char *name, const tg_tensor *t)
{
    TG_ASSERT(r->k < 12);
    r->name[r->k] = name;
    r->v[r->k] = nt_get(t);
    r->n[r->k] = (size_t)tg_tensor_numel(t);
    r->k++;
}

static void compare(const char *op, struct run *f32, struct run *b16)
{
    double worst = 0;
    TG_ASSERT(f32->k == b16->k);
    for (int i = 0; i < f32->k; i++) {
        double e = nt_rel_l2(b16->v[i], f32->v[i], f32->n[i]);
        ok(e <= TOL && !nt_any_nan(b16->v[i], b16->n[i]), "%s: bf16 %s within %.0e of f32 (relative L2 %.2e)", op,
           f32->name[i], TOL, e);
        if (!(e <= worst)) worst = e;
        free(f32->v[i]), free(b16->v[i]);
    }
    diag("largest bf16 vs f32 relative L2 %-16s %.2e", op, worst);
    f32->k = b16->k = 0;
}

static double *inputs(size_t n, double lo, double hi)
{
    double *x = malloc(n * sizeof *x);
    nt_fill_uniform(x, n, lo, hi);
    nt_round(x, n, TG_BF16);
    return x;
}

static void free_all(tg_tensor **t, size_t n)
{
    for (size_t i = 0; i < n; i++) tg_tensor_free(t[i]);
}

/* ------------------------------------------------------------------ norms, bias */
enum { N = 16, C = 64 };
static double *x_in, *g_in, *b_in, *dy_in;

/* wgrads go to f32 (main_grad) and to the activation dtype (grad) */
static void run_norms(tg_dtype dt, struct run *ln, struct run *rms, struct run *bias)
{
    tg_tensor *x = nt_make(dt, x_in, 4, 4, C), *g = nt_make(dt, g_in, C), *b = nt_make(dt, b_in, C);
    tg_tensor *y = nt_make(dt, NULL, 4, 4, C), *mean = nt_make(TG_F32, NULL, N), *rstd = nt_make(TG_F32, NULL, N);
    tg_tensor *dy = nt_make(dt, dy_in, 4, 4, C), *dx = nt_make(dt, NULL, 4, 4, C);
    tg_tensor *dg = nt_make(TG_F32, NULL, C), *db = nt_make(TG_F32, NULL, C);
    tg_tensor *dg2 = nt_make(dt, NULL, C), *db2 = nt_make(dt, NULL, C);

    nt_check(tg_layernorm_forward(y, mean, rstd, x, g, b, 1e-5), "layernorm_forward");
    keep(ln, "y", y), keep(ln, "mean", mean), keep(ln, "rstd", rstd);
    nt_check(tg_layernorm_backward(dx, dy, x, g, mean, rstd), "layernorm_backward");
    keep(ln, "dx", dx);
    nt_check(tg_layernorm_backward_dw(dg, db, dy, x, mean, rstd, 0), "layernorm_backward_dw");
    nt_check(tg_layernorm_backward_dw(dg2, db2, dy, x, mean, rstd, 0), "layernorm_backward_dw");
    keep(ln, "dgamma (f32)", dg), keep(ln, "dbeta (f32)", db), keep(ln, "dgamma (param dtype)", dg2),
        keep(ln, "dbeta (param dtype)", db2);

    nt_check(tg_rmsnorm_forward(y, rstd, x, g, 1e-5), "rmsnorm_forward");
    keep(rms, "y", y), keep(rms, "rstd", rstd);
    nt_check(tg_rmsnorm_backward(dx, dy, x, g, rstd), "rmsnorm_backward");
    keep(rms, "dx", dx);
    nt_check(tg_rmsnorm_backward_dw(dg, dy, x, rstd, 0), "rmsnorm_backward_dw");
    nt_check(tg_rmsnorm_backward_dw(dg2, dy, x, rstd, 0), "rmsnorm_backward_dw");
    keep(rms, "dgamma (f32)", dg), keep(rms, "dgamma (param dtype)", dg2);

    nt_check(tg_bias_add(x, b), "bias_add");
    keep(bias, "y += bias", x);
    nt_check(tg_bias_backward_dw(db, dy, 0), "bias_backward_dw");
    nt_check(tg_bias_backward_dw(db2, dy, 0), "bias_backward_dw");
    keep(bias, "dbias (f32)", db), keep(bias, "dbias (param dtype)", db2);

    tg_tensor *all[] = {x, g, b, y, mean, rstd, dy, dx, dg, db, dg2, db2};
    free_all(all, sizeof all / sizeof *all);
}

/* ------------------------------------------------------------------ activations */
static double *a_in, *ady_in;

static void run_acts(tg_dtype dt, struct run *gelu, struct run *swiglu)
{
    tg_tensor *x = nt_make(dt, a_in, N, 2 * C), *y = nt_make(dt, NULL, N, 2 * C), *dy = nt_make(dt, ady_in, N, 2 * C);
    tg_tensor *dx = nt_make(dt, NULL, N, 2 * C), *yh = nt_make(dt, NULL, N, C), *dyh = nt_make(dt, ady_in, N, C);
    nt_check(tg_gelu_forward(y, x), "gelu_forward");
    keep(gelu, "y", y);
    nt_check(tg_gelu_backward(dx, dy, x), "gelu_backward");
    keep(gelu, "dx", dx);
    nt_check(tg_swiglu_forward(yh, x), "swiglu_forward");
    keep(swiglu, "y", yh);
    nt_check(tg_swiglu_backward(dx, dyh, x), "swiglu_backward");
    keep(swiglu, "dx", dx);
    tg_tensor *all[] = {x, y, dy, dx, yh, dyh};
    free_all(all, sizeof all / sizeof *all);
}

/* ------------------------------------------------------------------ attention */
enum { B = 2, T = 16, H = 2, D = 16, AC = H * D };
static double *qkv_in, *dout_in;

static void run_attention(tg_dtype dt, struct run *r)
{
    tg_tensor *qkv = nt_make(dt, qkv_in, B, T, 3 * AC), *out = nt_make(dt, NULL, B, T, AC);
    tg_tensor *lse = nt_make(TG_F32, NULL, B, H, T), *dout = nt_make(dt, dout_in, B, T, AC);
    tg_tensor *dqkv = nt_make(dt, NULL, B, T, 3 * AC);
    nt_check(tg_attention_forward(out, lse, qkv, H), "attention_forward");
    keep(r, "out", out), keep(r, "lse", lse);
    nt_check(tg_attention_backward(dqkv, dout, qkv, out, lse, H), "attention_backward");
    keep(r, "dqkv", dqkv);
    tg_tensor *all[] = {qkv, out, lse, dout, dqkv};
    free_all(all, sizeof all / sizeof *all);
}

/* ------------------------------------------------------------------ embedding */
enum { V = 20, TMAX = 24 };
static double *wte_in, *wpe_in, *eout_in;
static int32_t ids[B * T];

static void run_embedding(tg_dtype dt, struct run *r)
{
    tg_tensor *idx = nt_ids(2, (const int64_t[]){B, T}, ids);
    tg_tensor *wte = nt_make(dt, wte_in, V, AC), *wpe = nt_make(dt, wpe_in, TMAX, AC), *out = nt_make(dt, NULL, B, T, AC);
    tg_tensor *dout = nt_make(dt, eout_in, B, T, AC), *dwte = nt_make(TG_F32, NULL, V, AC);
    tg_tensor *dwpe = nt_make(TG_F32, NULL, TMAX, AC), *dwte2 = nt_make(dt, NULL, V, AC);
    nt_check(tg_embedding_forward(out, idx, wte, wpe), "embedding_forward");
    keep(r, "out", out);
    nt_check(tg_embedding_backward_dw(dwte, dwpe, dout, idx, 0), "embedding_backward_dw");
    nt_check(tg_embedding_backward_dw(dwte2, NULL, dout, idx, 0), "embedding_backward_dw");
    keep(r, "dwte (f32)", dwte), keep(r, "dwpe (f32)", dwpe), keep(r, "dwte (param dtype)", dwte2);
    tg_tensor *all[] = {idx, wte, wpe, out, dout, dwte, dwpe, dwte2};
    free_all(all, sizeof all / sizeof *all);
}

/* ------------------------------------------------------------------ cross-entropy */
enum { CN = 16, CV = 50 };
static double *logits_in;
static int32_t tgts[CN];

static void run_ce(tg_dtype dt, struct run *r)
{
    tg_tensor *logits = nt_make(dt, logits_in, CN, CV), *tgt = nt_ids(1, (const int64_t[]){CN}, tgts);
    tg_tensor *loss = nt_make(TG_F32, NULL, 2), *losses = nt_make(TG_F32, NULL, CN), *dl = nt_make(dt, NULL, CN, CV);
    nt_check(tg_cross_entropy_forward(loss, losses, logits, tgt, -1), "cross_entropy_forward");
    keep(r, "losses", losses), keep(r, "[mean, count]", loss);
    nt_check(tg_cross_entropy_backward(dl, logits, tgt, loss, 1.0, -1), "cross_entropy_backward");
    keep(r, "dlogits", dl);
    tg_tensor *all[] = {logits, tgt, loss, losses, dl};
    free_all(all, sizeof all / sizeof *all);
}

/* ------------------------------------------------------------------ adamw (bf16 gradient, bf16 copy of p) */
enum { P = 256 };
static double *p_in, *gr_in;

static void run_adamw(tg_dtype dt, struct run *r)
{
    tg_tensor *p = nt_make(TG_F32, p_in, P), *g = nt_make(dt, gr_in, P), *m = nt_make(TG_F32, NULL, P);
    tg_tensor *v = nt_make(TG_F32, NULL, P), *lowp = nt_make(TG_BF16, NULL, P);
    nt_set(m, 0), nt_set(v, 0);
    for (int step = 1; step <= 3; step++)
        nt_check(tg_adamw_step(p, dt == TG_BF16 ? lowp : NULL, g, m, v, 1e-2, 0.9, 0.95, 1e-8, 0.1, step, 0.5),
                 "adamw_step");
    if (dt == TG_F32) nt_check(tg_copy(lowp, p), "copy");
    keep(r, "p", p), keep(r, "m", m), keep(r, "v", v), keep(r, "p_lowp", lowp);
    tg_tensor *all[] = {p, g, m, v, lowp};
    free_all(all, sizeof all / sizeof *all);
}

int main(void)
{
    struct run f[3] = {0}, b[3] = {0};
    plan(NO_PLAN);

    x_in = inputs(N * C, -2, 2), g_in = inputs(C, 0.5, 1.5), b_in = inputs(C, -0.5, 0.5), dy_in = inputs(N * C, -1, 1);
    run_norms(TG_F32, &f[0], &f[1], &f[2]);
    run_norms(TG_BF16, &b[0], &b[1], &b[2]);
    compare("layernorm", &f[0], &b[0]);
    compare("rmsnorm", &f[1], &b[1]);
    compare("bias", &f[2], &b[2]);

    a_in = inputs(N * 2 * C, -4, 4), ady_in = inputs(N * 2 * C, -1, 1);
    run_acts(TG_F32, &f[0], &f[1]);
    run_acts(TG_BF16, &b[0], &b[1]);
    compare("gelu", &f[0], &b[0]);
    compare("swiglu", &f[1], &b[1]);

    qkv_in = inputs(B * T * 3 * AC, -1.5, 1.5), dout_in = inputs(B * T * AC, -1, 1);
    run_attention(TG_F32, &f[0]);
    run_attention(TG_BF16, &b[0]);
    compare("attention", &f[0], &b[0]);

    wte_in = inputs(V * AC, -1, 1), wpe_in = inputs(TMAX * AC, -1, 1), eout_in = inputs(B * T * AC, -1, 1);
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)(nt_uniform(0, V)) % V;
    run_embedding(TG_F32, &f[0]);
    run_embedding(TG_BF16, &b[0]);
    compare("embedding", &f[0], &b[0]);

    logits_in = inputs(CN * CV, -4, 4);
    for (int i = 0; i < CN; i++) tgts[i] = i % 5 == 4 ? -1 : (int32_t)(nt_uniform(0, CV)) % CV;
    run_ce(TG_F32, &f[0]);
    run_ce(TG_BF16, &b[0]);
    compare("cross_entropy", &f[0], &b[0]);

    p_in = inputs(P, -1, 1), gr_in = inputs(P, -1, 1);
    run_adamw(TG_F32, &f[0]);
    run_adamw(TG_BF16, &b[0]);
    compare("adamw", &f[0], &b[0]);

    free(x_in), free(g_in), free(b_in), free(dy_in), free(a_in), free(ady_in), free(qkv_in), free(dout_in);
    free(wte_in), free(wpe_in), free(eout_in), free(logits_in), free(p_in), free(gr_in);
    return done_testing();
}
