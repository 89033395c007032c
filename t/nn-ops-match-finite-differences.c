/* nn-ops-match-finite-differences.c — each transformer op (f32, CPU) matches a float64 reference forward, and its dgrad/wgrad match float64 central differences of sum(y * r). */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <string.h>

/* Tolerances (normwise: max |got - want| / max |want|). The forward compares
 * f32 kernels with a float64 reference on the same f32 inputs; the gradients
 * compare with central differences (h = 1e-5 relative) of the float64
 * reference, exact to ~1e-9, so the error is the kernels' f32 rounding. */
#define FWD_TOL 1e-6
#define BWD_TOL 1e-5
#define FLOOR 1e-6

/* ------------------------------------------------------------------ finite differences */
typedef void (*ref_fn)(double *y); /* the reference forward over the current inputs */

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* g[i] = d sum(f() * r) / d p[i], central differences. */
static void fd_grad(double *p, size_t np, ref_fn f, const double *r, size_t ny, double *g)
{
    double *y = malloc(ny * sizeof *y);
    for (size_t i = 0; i < np; i++) {
        double save = p[i], h = 1e-5 * fmax(1.0, fabs(save));
        p[i] = save + h;
        f(y);
        double lp = dot(y, r, ny);
        p[i] = save - h;
        f(y);
        double lm = dot(y, r, ny);
        p[i] = save;
        g[i] = (lp - lm) / (2 * h);
    }
    free(y);
}

static double *vec(size_t n, double lo, double hi)
{
    double *x = malloc(n * sizeof *x);
    nt_fill_uniform(x, n, lo, hi);
    nt_round(x, n, TG_F32);
    return x;
}

/* Compares a tensor with want; returns the error (also asserts it). */
static double check(const char *op, const char *what, const tg_tensor *t, const double *want, size_t n, double tol)
{
    double *got = nt_get(t);
    double e = nt_rel_max(got, want, n, FLOOR);
    ok(e <= tol && !nt_any_nan(got, n), "%s: %s matches (error %.2e <= %.0e)", op, what, e, tol);
    free(got);
    return e;
}

static double worst_fwd, worst_bwd;
static void report(const char *op, double fwd, double bwd)
{
    diag("largest error %-22s forward %.2e  backward (FD) %.2e", op, fwd, bwd);
    if (fwd > worst_fwd) worst_fwd = fwd;
    if (bwd > worst_bwd) worst_bwd = bwd;
}

/* ------------------------------------------------------------------ layernorm / rmsnorm */
enum { NR = 6, NC = 10 };
static double *ln_x, *ln_g, *ln_b;
static const double EPS = 1e-5;

static void ref_layernorm(const double *x, const double *g, const double *b, double *y, double *mean, double *rstd)
{
    for (int r = 0; r < NR; r++) {
        double mu = 0, var = 0;
        for (int j = 0; j < NC; j++) mu += x[r * NC + j];
        mu /= NC;
        for (int j = 0; j < NC; j++) var += (x[r * NC + j] - mu) * (x[r * NC + j] - mu);
        double rs = 1 / sqrt(var / NC + EPS);
        for (int j = 0; j < NC; j++) y[r * NC + j] = (x[r * NC + j] - mu) * rs * g[j] + (b ? b[j] : 0);
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = rs;
    }
}
static void f_layernorm(double *y) { ref_layernorm(ln_x, ln_g, ln_b, y, NULL, NULL); }

static void ref_rmsnorm(const double *x, const double *g, double *y, double *rstd)
{
    for (int r = 0; r < NR; r++) {
        double ss = 0;
        for (int j = 0; j < NC; j++) ss += x[r * NC + j] * x[r * NC + j];
        double rs = 1 / sqrt(ss / NC + EPS);
        for (int j = 0; j < NC; j++) y[r * NC + j] = x[r * NC + j] * rs * g[j];
        if (rstd) rstd[r] = rs;
    }
}
static void f_rmsnorm(double *y) { ref_rmsnorm(ln_x, ln_g, y, NULL); }

static void test_layernorm(void)
{
    const size_t n = NR * NC;
    ln_x = vec(n, -2, 2), ln_g = vec(NC, 0.5, 1.5), ln_b = vec(NC, -0.5, 0.5);
    double *r = vec(n, -1, 1), y[NR * NC], mean[NR], rstd[NR], g[NR * NC];
    tg_tensor *x = nt_make(TG_F32, ln_x, 2, 3, NC), *gamma = nt_make(TG_F32, ln_g, NC), *beta = nt_make(TG_F32, ln_b, NC);
    tg_tensor *ty = nt_make(TG_F32, NULL, 2, 3, NC), *tm = nt_make(TG_F32, NULL, 2, 3), *tr = nt_make(TG_F32, NULL, NR);
    tg_tensor *dy = nt_make(TG_F32, r, 2, 3, NC), *dx = nt_make(TG_F32, NULL, 2, 3, NC);
    tg_tensor *dg = nt_make(TG_F32, NULL, NC), *db = nt_make(TG_F32, NULL, NC);
    double ef = 0, eb = 0;

    ok(tg_layernorm_forward(ty, tm, tr, x, gamma, beta, EPS) == TG_OK, "layernorm_forward runs");
    ref_layernorm(ln_x, ln_g, ln_b, y, mean, rstd);
    ef = fmax(ef, check("layernorm", "y", ty, y, n, FWD_TOL));
    ef = fmax(ef, check("layernorm", "mean", tm, mean, NR, FWD_TOL));
    ef = fmax(ef, check("layernorm", "rstd", tr, rstd, NR, FWD_TOL));

    ok(tg_layernorm_backward(dx, dy, x, gamma, tm, tr) == TG_OK, "layernorm_backward runs");
    fd_grad(ln_x, n, f_layernorm, r, n, g);
    eb = fmax(eb, check("layernorm", "dx vs FD", dx, g, n, BWD_TOL));
    nt_set(dg, NAN), nt_set(db, NAN);
    ok(tg_layernorm_backward_dw(dg, db, dy, x, tm, tr, 0) == TG_OK, "layernorm_backward_dw runs");
    fd_grad(ln_g, NC, f_layernorm, r, n, g);
    eb = fmax(eb, check("layernorm", "dgamma vs FD", dg, g, NC, BWD_TOL));
    fd_grad(ln_b, NC, f_layernorm, r, n, g);
    eb = fmax(eb, check("layernorm", "dbeta vs FD", db, g, NC, BWD_TOL));
    report("layernorm", ef, eb);

    /* without beta */
    free(ln_b), ln_b = NULL;
    ok(tg_layernorm_forward(ty, tm, tr, x, gamma, NULL, EPS) == TG_OK, "layernorm_forward without beta runs");
    ref_layernorm(ln_x, ln_g, NULL, y, NULL, NULL);
    check("layernorm", "y without beta", ty, y, n, FWD_TOL);

    /* rmsnorm on the same inputs */
    ef = eb = 0;
    ok(tg_rmsnorm_forward(ty, tr, x, gamma, EPS) == TG_OK, "rmsnorm_forward runs");
    ref_rmsnorm(ln_x, ln_g, y, rstd);
    ef = fmax(ef, check("rmsnorm", "y", ty, y, n, FWD_TOL));
    ef = fmax(ef, check("rmsnorm", "rstd", tr, rstd, NR, FWD_TOL));
    ok(tg_rmsnorm_backward(dx, dy, x, gamma, tr) == TG_OK, "rmsnorm_backward runs");
    fd_grad(ln_x, n, f_rmsnorm, r, n, g);
    eb = fmax(eb, check("rmsnorm", "dx vs FD", dx, g, n, BWD_TOL));
    nt_set(dg, NAN);
    ok(tg_rmsnorm_backward_dw(dg, dy, x, tr, 0) == TG_OK, "rmsnorm_backward_dw runs");
    fd_grad(ln_g, NC, f_rmsnorm, r, n, g);
    eb = fmax(eb, check("rmsnorm", "dgamma vs FD", dg, g, NC, BWD_TOL));
    report("rmsnorm", ef, eb);

    tg_tensor *all[] = {x, gamma, beta, ty, tm, tr, dy, dx, dg, db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
    free(ln_x), free(ln_g), free(r);
}

/* ------------------------------------------------------------------ gelu, swiglu */
enum { AR = 5, AH = 6 };
static double *act_x;

static double ref_gelu1(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
static void f_gelu(double *y)
{
    for (int i = 0; i < AR * 2 * AH; i++) y[i] = ref_gelu1(act_x[i]);
}
static void f_swiglu(double *y)
{
    for (int r = 0; r < AR; r++)
        for (int j = 0; j < AH; j++) {
            double a = act_x[r * 2 * AH + j], b = act_x[r * 2 * AH + AH + j];
            y[r * AH + j] = a / (1 + exp(-a)) * b;
        }
}

static void test_activations(void)
{
    const size_t n = AR * 2 * AH, nh = AR * AH;
    act_x = vec(n, -4, 4);
    double *r = vec(n, -1, 1), y[AR * 2 * AH], g[AR * 2 * AH];
    tg_tensor *x = nt_make(TG_F32, act_x, AR, 2 * AH), *ty = nt_make(TG_F32, NULL, AR, 2 * AH);
    tg_tensor *dy = nt_make(TG_F32, r, AR, 2 * AH), *dx = nt_make(TG_F32, NULL, AR, 2 * AH);
    tg_tensor *th = nt_make(TG_F32, NULL, AR, AH), *dyh = nt_make(TG_F32, r, AR, AH);
    double ef, eb;

    ok(tg_gelu_forward(ty, x) == TG_OK, "gelu_forward runs");
    f_gelu(y);
    ef = check("gelu", "y", ty, y, n, FWD_TOL);
    ok(tg_gelu_backward(dx, dy, x) == TG_OK, "gelu_backward runs");
    fd_grad(act_x, n, f_gelu, r, n, g);
    eb = check("gelu", "dx vs FD", dx, g, n, BWD_TOL);
    report("gelu", ef, eb);

    ok(tg_swiglu_forward(th, x) == TG_OK, "swiglu_forward runs");
    f_swiglu(y);
    ef = check("swiglu", "y", th, y, nh, FWD_TOL);
    ok(tg_swiglu_backward(dx, dyh, x) == TG_OK, "swiglu_backward runs");
    fd_grad(act_x, n, f_swiglu, r, nh, g);
    eb = check("swiglu", "dx vs FD", dx, g, n, BWD_TOL);
    report("swiglu", ef, eb);

    tg_tensor *all[] = {x, ty, dy, dx, th, dyh};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
    free(act_x), free(r);
}

/* ------------------------------------------------------------------ bias */
enum { BR = 7, BC = 9 };
static double *bias_y0, *bias_b;
static void f_bias(double *y)
{
    for (int r = 0; r < BR; r++)
        for (int j = 0; j < BC; j++) y[r * BC + j] = bias_y0[r * BC + j] + bias_b[j];
}

static void test_bias(void)
{
    const size_t n = BR * BC;
    bias_y0 = vec(n, -2, 2), bias_b = vec(BC, -1, 1);
    double *r = vec(n, -1, 1), y[BR * BC], g[BC];
    tg_tensor *ty = nt_make(TG_F32, bias_y0, BR, BC), *tb = nt_make(TG_F32, bias_b, BC);
    tg_tensor *dy = nt_make(TG_F32, r, BR, BC), *db = nt_make(TG_F32, NULL, BC);

    ok(tg_bias_add(ty, tb) == TG_OK, "bias_add runs");
    f_bias(y);
    double ef = check("bias", "y += bias", ty, y, n, FWD_TOL);
    nt_set(db, NAN);
    ok(tg_bias_backward_dw(db, dy, 0) == TG_OK, "bias_backward_dw runs");
    fd_grad(bias_b, BC, f_bias, r, n, g);
    double eb = check("bias", "dbias vs FD", db, g, BC, BWD_TOL);
    report("bias", ef, eb);

    tg_tensor_free(ty), tg_tensor_free(tb), tg_tensor_free(dy), tg_tensor_free(db);
    free(bias_y0), free(bias_b), free(r);
}

/* ------------------------------------------------------------------ attention */
enum { AB = 2, AT = 5, NH = 2, HD = 4, AC = NH * HD };
static double *att_qkv;

static void ref_attention(const double *qkv, double *out, double *lse)
{
    const double scale = 1 / sqrt((double)HD);
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < AT; i++) {
                double s[AT], mx = -INFINITY, l = 0;
                const double *q = qkv + (b * AT + i) * 3 * AC + h * HD;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + (b * AT + j) * 3 * AC + AC + h * HD;
                    s[j] = 0;
                    for (int e = 0; e < HD; e++) s[j] += q[e] * k[e];
                    s[j] *= scale;
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= i; j++) l += exp(s[j] - mx);
                for (int e = 0; e < HD; e++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++) o += exp(s[j] - mx) / l * qkv[(b * AT + j) * 3 * AC + 2 * AC + h * HD + e];
                    out[(b * AT + i) * AC + h * HD + e] = o;
                }
                if (lse) lse[(b * NH + h) * AT + i] = mx + log(l);
            }
}
static void f_attention(double *y) { ref_attention(att_qkv, y, NULL); }

static void test_attention(void)
{
    const size_t nq = AB * AT * 3 * AC, no = AB * AT * AC, nl = AB * NH * AT;
    att_qkv = vec(nq, -1.5, 1.5);
    double *r = vec(no, -1, 1), out[AB * AT * AC], lse[AB * NH * AT], g[AB * AT * 3 * AC];
    tg_tensor *qkv = nt_make(TG_F32, att_qkv, AB, AT, 3 * AC), *to = nt_make(TG_F32, NULL, AB, AT, AC);
    tg_tensor *tl = nt_make(TG_F32, NULL, AB, NH, AT), *dout = nt_make(TG_F32, r, AB, AT, AC);
    tg_tensor *dqkv = nt_make(TG_F32, NULL, AB, AT, 3 * AC);

    ok(tg_attention_forward(to, tl, qkv, NH) == TG_OK, "attention_forward runs");
    ref_attention(att_qkv, out, lse);
    double ef = check("attention", "out", to, out, no, FWD_TOL);
    ef = fmax(ef, check("attention", "lse", tl, lse, nl, FWD_TOL));
    nt_set(dqkv, NAN); /* dgrad overwrites everything */
    ok(tg_attention_backward(dqkv, dout, qkv, to, tl, NH) == TG_OK, "attention_backward runs");
    fd_grad(att_qkv, nq, f_attention, r, no, g);
    double eb = check("attention", "dqkv vs FD", dqkv, g, nq, BWD_TOL);
    report("attention", ef, eb);

    tg_tensor_free(qkv), tg_tensor_free(to), tg_tensor_free(tl), tg_tensor_free(dout), tg_tensor_free(dqkv);
    free(att_qkv), free(r);
}

/* ------------------------------------------------------------------ embedding */
enum { EB = 2, ET = 4, EC = 5, EV = 7, ETMAX = 6 };
static const int32_t emb_idx[EB * ET] = {3, 1, 3, 0, 6, 3, 1, 1};
static double *emb_wte, *emb_wpe;

static void f_embedding(double *y)
{
    for (int b = 0; b < EB; b++)
        for (int t = 0; t < ET; t++)
            for (int j = 0; j < EC; j++)
                y[(b * ET + t) * EC + j] = emb_wte[emb_idx[b * ET + t] * EC + j] + emb_wpe[t * EC + j];
}

static void test_embedding(void)
{
    const size_t no = EB * ET * EC;
    emb_wte = vec(EV * EC, -1, 1), emb_wpe = vec(ETMAX * EC, -1, 1);
    double *r = vec(no, -1, 1), y[EB * ET * EC], g[EV * EC];
    tg_tensor *idx = nt_ids(2, (const int64_t[]){EB, ET}, emb_idx);
    tg_tensor *wte = nt_make(TG_F32, emb_wte, EV, EC), *wpe = nt_make(TG_F32, emb_wpe, ETMAX, EC);
    tg_tensor *out = nt_make(TG_F32, NULL, EB, ET, EC), *dout = nt_make(TG_F32, r, EB, ET, EC);
    tg_tensor *dwte = nt_make(TG_F32, NULL, EV, EC), *dwpe = nt_make(TG_F32, NULL, ETMAX, EC);

    ok(tg_embedding_forward(out, idx, wte, wpe) == TG_OK, "embedding_forward runs");
    f_embedding(y);
    double ef = check("embedding", "out", out, y, no, FWD_TOL);
    nt_set(dwte, NAN), nt_set(dwpe, NAN);
    ok(tg_embedding_backward_dw(dwte, dwpe, dout, idx, 0) == TG_OK, "embedding_backward_dw runs");
    fd_grad(emb_wte, EV * EC, f_embedding, r, no, g);
    double eb = check("embedding", "dwte vs FD (repeated ids)", dwte, g, EV * EC, BWD_TOL);
    fd_grad(emb_wpe, ETMAX * EC, f_embedding, r, no, g);
    eb = fmax(eb, check("embedding", "dwpe vs FD (rows >= T zero)", dwpe, g, ETMAX * EC, BWD_TOL));
    report("embedding", ef, eb);

    tg_tensor *all[] = {idx, wte, wpe, out, dout, dwte, dwpe};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
    free(emb_wte), free(emb_wpe), free(r);
}

/* ------------------------------------------------------------------ cross-entropy */
enum { CN = 6, CV = 9, IGN = -100 };
static const int32_t ce_tgt[CN] = {2, 0, IGN, 8, 5, 2};
static double *ce_logits;

static void ref_ce(const double *x, double *losses, double *mean, double *count)
{
    double total = 0;
    int valid = 0;
    for (int r = 0; r < CN; r++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < CV; j++) mx = fmax(mx, x[r * CV + j]);
        for (int j = 0; j < CV; j++) s += exp(x[r * CV + j] - mx);
        double l = ce_tgt[r] == IGN ? 0 : mx + log(s) - x[r * CV + ce_tgt[r]];
        if (losses) losses[r] = l;
        if (ce_tgt[r] != IGN) total += l, valid++;
    }
    *mean = total / valid;
    if (count) *count = valid;
}
static void f_ce(double *y) { ref_ce(ce_logits, NULL, y, NULL); }

static void test_cross_entropy(void)
{
    const size_t n = CN * CV;
    const double dloss = 1.7;
    ce_logits = vec(n, -3, 3);
    double losses[CN], want[2], g[CN * CV];
    tg_tensor *logits = nt_make(TG_F32, ce_logits, CN, CV), *tgt = nt_ids(1, (const int64_t[]){CN}, ce_tgt);
    tg_tensor *loss = nt_make(TG_F32, NULL, 2), *tls = nt_make(TG_F32, NULL, CN), *dl = nt_make(TG_F32, NULL, CN, CV);

    ok(tg_cross_entropy_forward(loss, tls, logits, tgt, IGN) == TG_OK, "cross_entropy_forward runs");
    ref_ce(ce_logits, losses, &want[0], &want[1]);
    double ef = check("cross_entropy", "per-row losses", tls, losses, CN, FWD_TOL);
    ef = fmax(ef, check("cross_entropy", "[mean, count]", loss, want, 2, FWD_TOL));
    ok(tg_cross_entropy_backward(dl, logits, tgt, loss, dloss, IGN) == TG_OK, "cross_entropy_backward runs");
    fd_grad(ce_logits, n, f_ce, &dloss, 1, g);
    double eb = check("cross_entropy", "dlogits vs FD", dl, g, n, BWD_TOL);
    /* in place: dlogits aliasing logits gives the same values */
    ok(tg_cross_entropy_backward(logits, logits, tgt, loss, dloss, IGN) == TG_OK, "cross_entropy_backward in place runs");
    eb = fmax(eb, check("cross_entropy", "dlogits in place vs FD", logits, g, n, BWD_TOL));
    report("cross_entropy", ef, eb);

    tg_tensor_free(logits), tg_tensor_free(tgt), tg_tensor_free(loss), tg_tensor_free(tls), tg_tensor_free(dl);
    free(ce_logits);
}

/* ------------------------------------------------------------------ sumsq */
static void test_sumsq(void)
{
    const size_t n = 1000;
    double *x = vec(n, -2, 2), want = 0, got = -1;
    for (size_t i = 0; i < n; i++) want += x[i] * x[i];
    tg_tensor *t = nt_make(TG_F32, x, 10, 100);
    ok(tg_sumsq(t, &got) == TG_OK, "sumsq runs");
    double e = fabs(got - want) / want;
    ok(e <= 1e-6, "sumsq matches the f64 sum of squares (error %.2e <= 1e-6)", e);
    report("sumsq", e, 0);
    tg_tensor_free(t);
    free(x);
}

int main(void)
{
    plan(NO_PLAN);
    test_layernorm();
    test_activations();
    test_bias();
    test_attention();
    test_embedding();
    test_cross_entropy();
    test_sumsq();
    diag("worst forward error %.2e (tolerance %.0e), worst FD error %.2e (tolerance %.0e)", worst_fwd, FWD_TOL,
         worst_bwd, BWD_TOL);
    return done_testing();
}
