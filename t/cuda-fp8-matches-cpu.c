/* cuda-fp8-matches-cpu.c — the CUDA FP8 ops against the CPU's: casts bit for bit on all 2^32 f32 bit patterns
 * (every midpoint between FP8 neighbours included), with scales, from bf16, with the transposed copy; amax,
 * transpose and dequantize bit for bit; the cuBLASLt FP8 GEMM within accumulation tolerance of the CPU emulation
 * for several shapes (odd m) and dtypes, with bias and bias+GELU epilogues, beta, amax_d, a replay reading the
 * scales of its time; k not a multiple of 16 (the operands zero-padded in the scratch, in chunks of rows where
 * they exceed it), eager and replayed; n not a multiple of 16 refused; cast_transpose, the plain cast and amax on whole and
 * partial tiles, f32 and bf16 inputs with NaN/Inf, accumulated amaxes; the delayed-scaling update on long
 * histories. */
#include "core/core.h"
#include "cuda-test-util.h"
#include "tap.h"
#ifdef TG_HAVE_CUDA
#include "backend/cuda_impl.h" /* TG_CUDA_NN_SCRATCH */
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef TG_HAVE_CUDA
int main(void) { skip_all("no CUDA device (built without CUDA)"); }
#else

static const tg_device cpu = {TG_CPU, 0}, gpu = {TG_CUDA, 0};

/* index of the first differing byte, or -1 */
static long long first_diff(const tg_tensor *a, const tg_tensor *b)
{
    size_t n = (size_t)tg_tensor_numel(a) * tg_dtype_size(tg_tensor_dtype(a));
    unsigned char *x = read_all(a), *y = read_all(b);
    long long at = -1;
    for (size_t i = 0; i < n && at < 0; i++)
        if (x[i] != y[i]) at = (long long)i;
    free(x), free(y);
    return at;
}

static tg_tensor *scalar(tg_device d, float v)
{
    tg_tensor *t = mk(d, TG_F32, 1, 0);
    tg_tensor_write(t, &v, sizeof v);
    return t;
}

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rs ^= rs >> 12, rs ^= rs << 25, rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}

/* ------------------------------------------------------------------ casts */
#define CHUNK ((int64_t)1 << 26)

static void cast_sweep(tg_dtype dt)
{
    const char *nm = tg_dtype_name(dt);
    /* all 2^32 f32 bit patterns, in chunks */
    uint32_t *bits = malloc((size_t)CHUNK * sizeof *bits);
    tg_tensor *xc, *xg, *yc, *yg;
    mk_pair(TG_F32, CHUNK, 0, NULL, &xc, &xg);
    mk_pair(dt, CHUNK, 0, NULL, &yc, &yg);
    tg_tensor *ac = scalar(cpu, 0), *ag = scalar(gpu, 0);
    long long ndiff = 0, amax_diff = 0;
    uint32_t first = 0;
    int runs = 1;
    for (uint64_t base = 0; base < 0x100000000ull; base += (uint64_t)CHUNK) {
        for (int64_t i = 0; i < CHUNK; i++) bits[i] = (uint32_t)(base + (uint64_t)i);
        if (tg_tensor_write(xc, bits, (size_t)CHUNK * 4) != TG_OK || tg_tensor_write(xg, bits, (size_t)CHUNK * 4) != TG_OK)
            bail_out("write: %s", tg_last_error());
        runs &= tg_fp8_cast(yg, xg, NULL, ag, NULL, 0) == TG_OK && tg_fp8_cast(yc, xc, NULL, ac, NULL, 0) == TG_OK;
        uint8_t *qc = read_all(yc), *qg = read_all(yg);
        for (int64_t i = 0; i < CHUNK; i++)
            if (qc[i] != qg[i] && !ndiff++) first = bits[i];
        free(qc), free(qg);
        amax_diff += first_diff(ac, ag) >= 0;
    }
    ok(runs, "%s: casts of all 2^32 f32 bit patterns run on both devices", nm);
    if (!ok(ndiff == 0, "%s: the CUDA cast equals the CPU's bit for bit on all 2^32 f32 bit patterns (NaN, Inf, "
                        "subnormals, every midpoint included)", nm))
        diag("%lld differ; the first at input bits 0x%08x", ndiff, first);
    is_int(amax_diff, 0, "%s: amax of each chunk (NaNs among the inputs) has the same bits on both", nm);
    tg_tensor_free(xc), tg_tensor_free(xg), tg_tensor_free(yc), tg_tensor_free(yg);
    free(bits);

    /* scaled, from bf16, with the transposed copy, of an odd shape; amax accumulated; scale_inv */
    int64_t r = 37, c = 53;
    float *xv = malloc(sizeof(float) * (size_t)(r * c));
    uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)(r * c));
    for (int64_t i = 0; i < r * c; i++) {
        xv[i] = (float)((double)(int64_t)(rnd() >> 11) * 0x1p-53 - 0.5) * 900.0f;
        xb[i] = tg_f32_to_bf16(xv[i]);
    }
    tg_tensor *bc, *bg, *y2c, *y2g, *ytc, *ytg, *sic = scalar(cpu, 0), *sig = scalar(gpu, 0);
    tg_tensor *sc = scalar(cpu, 0.37f), *sg = scalar(gpu, 0.37f);
    mk_pair(TG_BF16, r, c, xb, &bc, &bg);
    mk_pair(dt, r, c, NULL, &y2c, &y2g);
    mk_pair(dt, c, r, NULL, &ytc, &ytg);
    float big = 1.0f;
    tg_tensor_write(ac, &big, 4), tg_tensor_write(ag, &big, 4);
    ok(tg_fp8_cast_transpose(y2g, ytg, bg, sg, ag, sig, TG_FP8_AMAX_ACCUMULATE) == TG_OK &&
           tg_fp8_cast_transpose(y2c, ytc, bc, sc, ac, sic, TG_FP8_AMAX_ACCUMULATE) == TG_OK,
       "%s: cast_transpose of a bf16 [37,53] with scale 0.37 runs on both", nm);
    ok(first_diff(y2c, y2g) < 0 && first_diff(ytc, ytg) < 0, "%s: y and y_t equal the CPU's bit for bit", nm);
    ok(first_diff(ac, ag) < 0 && first_diff(sic, sig) < 0, "%s: accumulated amax and scale_inv too", nm);
    tg_tensor *tc = mk(cpu, dt, c, r), *tgt = mk(gpu, dt, c, r);
    ok(tg_fp8_transpose(tgt, y2g) == TG_OK && tg_fp8_transpose(tc, y2c) == TG_OK && first_diff(tc, tgt) < 0 &&
           first_diff(tgt, ytg) < 0,
       "%s: fp8_transpose equals the CPU's and cast_transpose's y_t", nm);
    /* shapes of whole 8-code groups (the 8-byte path) and of a partial 64-tile, random codes */
    static const int64_t ts[][2] = {{64, 136}, {200, 96}, {8, 8}, {1024, 72}};
    for (size_t q = 0; q < sizeof ts / sizeof ts[0]; q++) {
        const int64_t tr = ts[q][0], tcn = ts[q][1];
        uint8_t *codes = malloc((size_t)(tr * tcn));
        for (int64_t i = 0; i < tr * tcn; i++) codes[i] = (uint8_t)(rnd() >> 56);
        tg_tensor *xc8, *xg8, *oc, *og;
        mk_pair(dt, tr, tcn, codes, &xc8, &xg8);
        mk_pair(dt, tcn, tr, NULL, &oc, &og);
        ok(tg_fp8_transpose(og, xg8) == TG_OK && tg_fp8_transpose(oc, xc8) == TG_OK && first_diff(oc, og) < 0,
           "%s: fp8_transpose of random codes [%lld,%lld] equals the CPU's", nm, (long long)tr, (long long)tcn);
        tg_tensor_free(xc8), tg_tensor_free(xg8), tg_tensor_free(oc), tg_tensor_free(og);
        free(codes);
    }
    tg_tensor *dc, *dg, *dbc, *dbg;
    mk_pair(TG_F32, r, c, NULL, &dc, &dg);
    mk_pair(TG_BF16, r, c, NULL, &dbc, &dbg);
    tg_fp8_dequantize(dg, y2g, sig), tg_fp8_dequantize(dc, y2c, sic);
    tg_fp8_dequantize(dbg, y2g, sig), tg_fp8_dequantize(dbc, y2c, sic);
    ok(first_diff(dc, dg) < 0 && first_diff(dbc, dbg) < 0, "%s: dequantize to f32 and bf16 bit for bit", nm);
    tg_fp8_amax(ag, bg, 0), tg_fp8_amax(ac, bc, 0);
    ok(first_diff(ac, ag) < 0, "%s: fp8_amax bit for bit", nm);

    tg_tensor *all[] = {ac, ag, bc, bg, y2c, y2g, ytc, ytg, sic, sig, sc, sg, tc, tgt, dc, dg, dbc, dbg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
    free(xv), free(xb);
}

/* a value of x for the cast cases: mostly random in [-450, 450), some NaN, +-Inf, -0, subnormals, huge */
static float cast_input(void)
{
    const uint64_t u = rnd();
    switch (u % 61) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return -0.0f;
    case 4: return 0x1p-140f;
    case 5: return -3.0e38f;
    default: return (float)((double)(int64_t)(u >> 11) * 0x1p-53 - 0.5) * 900.0f;
    }
}

/* cast_transpose of an x (rows, cols) of x_dt, y kept or not, amax written or accumulated from a start value: y,
 * y_t, amax and scale_inv equal the CPU's bit for bit. Shapes cover whole 64 x 64 tiles, partial tiles, widths that
 * are and are not multiples of 8. */
static void cast_transpose_case(tg_dtype dt, tg_dtype x_dt, int64_t r, int64_t c, int with_y, int flags, float amax0,
                                float scale)
{
    const char *nm = tg_dtype_name(dt);
    const int64_t n = r * c;
    void *xb = malloc((size_t)n * tg_dtype_size(x_dt));
    for (int64_t i = 0; i < n; i++) {
        const float v = cast_input();
        if (x_dt == TG_BF16)
            ((uint16_t *)xb)[i] = tg_f32_to_bf16(v);
        else
            ((float *)xb)[i] = v;
    }
    tg_tensor *xc, *xg, *yc = NULL, *yg = NULL, *ytc, *ytg;
    tg_tensor *ac = scalar(cpu, amax0), *ag = scalar(gpu, amax0), *sic = scalar(cpu, 0), *sig = scalar(gpu, 0);
    tg_tensor *sc = scalar(cpu, scale), *sg = scalar(gpu, scale);
    mk_pair(x_dt, r, c, xb, &xc, &xg);
    if (with_y) mk_pair(dt, r, c, NULL, &yc, &yg);
    mk_pair(dt, c, r, NULL, &ytc, &ytg);
    const int runs = tg_fp8_cast_transpose(yg, ytg, xg, sg, ag, sig, flags) == TG_OK &&
                     tg_fp8_cast_transpose(yc, ytc, xc, sc, ac, sic, flags) == TG_OK;
    ok(runs, "%s: cast_transpose of a %s [%lld,%lld] (y %s, amax %s from %g, scale %g) runs on both", nm,
       tg_dtype_name(x_dt), (long long)r, (long long)c, with_y ? "kept" : "NULL",
       flags & TG_FP8_AMAX_ACCUMULATE ? "accumulated" : "written", amax0, scale);
    const long long dy = with_y ? first_diff(yc, yg) : -1, dyt = first_diff(ytc, ytg);
    if (!ok(dy < 0 && dyt < 0, "... y and y_t equal the CPU's bit for bit"))
        diag("first differing byte: y %lld, y_t %lld", dy, dyt);
    ok(first_diff(ac, ag) < 0 && first_diff(sic, sig) < 0, "... amax and scale_inv too");
    if (!with_y) { /* y only, through the plain cast (vector groups when numel % 8 == 0) */
        mk_pair(dt, r, c, NULL, &yc, &yg);
        ok(tg_fp8_cast(yg, xg, sg, ag, sig, flags) == TG_OK && tg_fp8_cast(yc, xc, sc, ac, sic, flags) == TG_OK &&
               first_diff(yc, yg) < 0 && first_diff(ac, ag) < 0,
           "... the plain cast of the same x: y and amax bit for bit");
        tg_fp8_amax(ag, xg, flags), tg_fp8_amax(ac, xc, flags);
        ok(first_diff(ac, ag) < 0, "... fp8_amax of the same x bit for bit");
    }
    tg_tensor *all[] = {xc, xg, yc, yg, ytc, ytg, ac, ag, sic, sig, sc, sg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) tg_tensor_free(all[i]);
    free(xb);
}

static void cast_transpose_cases(tg_dtype dt)
{
    cast_transpose_case(dt, TG_BF16, 256, 192, 1, 0, 0, 1.0f);                       /* whole tiles */
    cast_transpose_case(dt, TG_BF16, 200, 136, 1, TG_FP8_AMAX_ACCUMULATE, 1e30f, 0.37f); /* partial tiles */
    cast_transpose_case(dt, TG_BF16, 72, 40, 0, TG_FP8_AMAX_ACCUMULATE, 2.0f, 3.0f);
    cast_transpose_case(dt, TG_F32, 136, 64, 1, 0, 0, 0.37f);
    cast_transpose_case(dt, TG_F32, 8, 8, 0, 0, 0, 1.0f);
    cast_transpose_case(dt, TG_F32, 65, 130, 1, 0, 0, 2.0f); /* widths not multiples of 8 */
    cast_transpose_case(dt, TG_BF16, 130, 65, 0, 0, 0, 0.5f);
    cast_transpose_case(dt, TG_BF16, 1, 1001, 0, TG_FP8_AMAX_ACCUMULATE, 0, 1.0f);
    cast_transpose_case(dt, TG_BF16, 4096, 8, 1, 0, 0, 1.0f);
}

/* The gradient cast with the bias partials (and gelu' first): without gelu the codes, amax and scale_inv equal the
 * CPU's bit for bit; through gelu' (tanhf on two devices) almost every code does; the bias gradient after
 * dbias_finish (accumulating onto the same values) equals the CPU's to f32 summation order (and gelu' rounding). */
static void cast_dbias_case(tg_dtype x_dt, int64_t r, int64_t c, int gelu, int with_y)
{
    const int64_t n = r * c, chunks = tg_fp8_dbias_chunks(r);
    void *xb = malloc((size_t)n * tg_dtype_size(x_dt)), *hb = malloc((size_t)n * tg_dtype_size(x_dt));
    for (int64_t i = 0; i < n; i++) {
        const float v = (float)((double)(int64_t)(rnd() >> 11) * 0x1p-53 - 0.5) * 8.0f;
        const float h = (float)((double)(int64_t)(rnd() >> 11) * 0x1p-53 - 0.5) * 6.0f;
        if (x_dt == TG_BF16)
            ((uint16_t *)xb)[i] = tg_f32_to_bf16(v), ((uint16_t *)hb)[i] = tg_f32_to_bf16(h);
        else
            ((float *)xb)[i] = v, ((float *)hb)[i] = h;
    }
    tg_tensor *xc, *xg, *hc = NULL, *hg = NULL, *yc = NULL, *yg = NULL, *ytc, *ytg, *pc, *pg, *dc, *dg;
    tg_tensor *ac = scalar(cpu, 0), *ag = scalar(gpu, 0), *sic = scalar(cpu, 0), *sig = scalar(gpu, 0);
    tg_tensor *sc = scalar(cpu, 16.0f), *sg = scalar(gpu, 16.0f);
    mk_pair(x_dt, r, c, xb, &xc, &xg);
    if (gelu) mk_pair(x_dt, r, c, hb, &hc, &hg);
    if (with_y) mk_pair(TG_E5M2, r, c, NULL, &yc, &yg);
    mk_pair(TG_E5M2, c, r, NULL, &ytc, &ytg);
    mk_pair(TG_F32, chunks, c, NULL, &pc, &pg);
    float *old = malloc((size_t)c * sizeof *old);
    for (int64_t j = 0; j < c; j++) old[j] = (float)j - 3.5f;
    mk_pair(TG_F32, c, 0, old, &dc, &dg);
    const int runs = tg_fp8_cast_transpose_dbias(yg, ytg, xg, hg, sg, ag, sig, pg, 0) == TG_OK &&
                     tg_fp8_cast_transpose_dbias(yc, ytc, xc, hc, sc, ac, sic, pc, 0) == TG_OK &&
                     tg_fp8_dbias_finish(dg, pg, 1.0) == TG_OK && tg_fp8_dbias_finish(dc, pc, 1.0) == TG_OK;
    ok(runs, "cast_transpose_dbias of a %s [%lld,%lld] (%lld chunks, gelu %d, y %s) and dbias_finish run on both",
       tg_dtype_name(x_dt), (long long)r, (long long)c, (long long)chunks, gelu, with_y ? "kept" : "NULL");
    unsigned char *a = read_all(ytc), *b = read_all(ytg);
    long long ndiff = 0;
    for (int64_t i = 0; i < n; i++) ndiff += a[i] != b[i];
    free(a), free(b);
    if (!gelu) {
        ok(ndiff == 0 && (!with_y || first_diff(yc, yg) < 0), "... y and y_t equal the CPU's bit for bit");
        ok(first_diff(ac, ag) < 0 && first_diff(sic, sig) < 0, "... amax and scale_inv too");
    } else {
        ok(ndiff * 1000 <= n, "... through gelu': %lld of %lld codes differ from the CPU's", ndiff, (long long)n);
        float amc, amg;
        tg_tensor_read(ac, &amc, sizeof amc), tg_tensor_read(ag, &amg, sizeof amg);
        ok(fabsf(amc - amg) <= 1e-2f * amc, "... amax %g vs the CPU's %g", amg, amc);
    }
    float *vc = read_all(dc), *vg = read_all(dg);
    /* f32 sums of 64-row chunks; through gelu' in bf16 a g may round the other way (one bf16 ulp, < 0.02) */
    double worst = 0, tol = 5e-6 * (double)r + (gelu && x_dt == TG_BF16 ? 2e-5 * (double)r : 0.0);
    for (int64_t j = 0; j < c; j++) worst = fmax(worst, fabs((double)vc[j] - vg[j]));
    ok(worst <= tol, "... dbias (accumulated) equals the CPU's within %.3g (worst %.3g)", tol, worst);
    free(vc), free(vg), free(old), free(xb), free(hb);
    tg_tensor *all[] = {xc, xg, hc, hg, yc, yg, ytc, ytg, pc, pg, dc, dg, ac, ag, sic, sig, sc, sg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) tg_tensor_free(all[i]);
}

/* ------------------------------------------------------------------ delayed-scaling update */
/* histories (len, n) of amaxes (NaN, Inf, zeros and all-zero columns among them) updated three times in a row:
 * history, scale and scale_inv equal the CPU's bit for bit after each. */
static void scale_update_case(int64_t len, int n, int most_recent, int margin)
{
    float *h = malloc(sizeof(float) * (size_t)(len * n));
    for (int64_t i = 0; i < len * n; i++) {
        const uint64_t u = rnd();
        const int j = (int)(i % n);
        h[i] = j == 1 ? 0.0f : u % 97 == 0 ? NAN : u % 89 == 0 ? INFINITY : u % 7 == 0 ? 0.0f
                                                                     : (float)((u >> 11) % 100000) * 0.01f;
    }
    if (len > 3 && n > 2) h[(len - 1) * n + 2] = 1e6f; /* the column's max in its last row */
    tg_tensor *hc, *hg, *sc, *sg, *sic, *sig;
    mk_pair(TG_F32, len, n == 1 ? 0 : n, h, &hc, &hg);
    float s0[TG_FP8_MAX_ROLES];
    for (int j = 0; j < n; j++) s0[j] = 1.0f + (float)j;
    mk_pair(TG_F32, n, 0, s0, &sc, &sg);
    mk_pair(TG_F32, n, 0, NULL, &sic, &sig);
    double fmax[TG_FP8_MAX_ROLES];
    for (int j = 0; j < n; j++) fmax[j] = j % 3 == 2 ? 57344.0 : 448.0;
    int runs = 1, same = 1;
    for (int k = 0; k < 3; k++) {
        runs &= tg_fp8_scale_update(hg, sg, sig, fmax, margin, most_recent) == TG_OK &&
                tg_fp8_scale_update(hc, sc, sic, fmax, margin, most_recent) == TG_OK;
        const long long dh = first_diff(hc, hg), ds = first_diff(sc, sg), dsi = first_diff(sic, sig);
        if (dh >= 0 || ds >= 0 || dsi >= 0) {
            if (same) diag("update %d: first differing byte: history %lld, scale %lld, scale_inv %lld", k + 1, dh, ds, dsi);
            same = 0;
        }
    }
    ok(runs, "scale_update of a (%lld, %d) history (most_recent %d, margin %d) runs three times on both",
       (long long)len, n, most_recent, margin);
    ok(same, "... history, scale and scale_inv equal the CPU's bit for bit after each update");
    tg_tensor *all[] = {hc, hg, sc, sg, sic, sig};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
    free(h);
}

/* ------------------------------------------------------------------ GEMM */
static uint8_t *random_codes(tg_dtype dt, int64_t n)
{
    uint8_t *q = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float v;
        do q[i] = (uint8_t)rnd(), v = tg_fp8_to_f32(dt, q[i]);
        while (isnan(v) || isinf(v) || fabsf(v) > 16.0f);
    }
    return q;
}

static float gelu(float u) { return 0.5f * u * (1.0f + tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u))); }

/* Compares a GPU D with the CPU's: |g - c| <= rel * |c| + acc_tol, where acc_tol covers the tensor cores'
 * accumulation. */
static void gemm_case(tg_dtype adt, tg_dtype bdt, tg_dtype ddt, int64_t m, int64_t n, int64_t k, tg_gemm_epilogue epi,
                      double beta)
{
    uint8_t *aq = random_codes(adt, m * k), *bq = random_codes(bdt, n * k);
    tg_tensor *ac, *ag, *bc, *bg, *dc, *dg, *xc = NULL, *xg = NULL, *bic = NULL, *big = NULL;
    mk_pair(adt, m, k, aq, &ac, &ag);
    mk_pair(bdt, n, k, bq, &bc, &bg);
    double *d0 = malloc(sizeof(double) * (size_t)(m * n));
    for (int64_t i = 0; i < m * n; i++) d0[i] = (double)(i % 7) - 3.0;
    dc = mk(cpu, ddt, m, n), dg = mk(gpu, ddt, m, n);
    tg_tensor_write_f64(dc, d0, (size_t)(m * n)), tg_tensor_write_f64(dg, d0, (size_t)(m * n));
    if (epi != TG_EPI_NONE) {
        double *bv = malloc(sizeof(double) * (size_t)n);
        for (int64_t j = 0; j < n; j++) bv[j] = (double)(j % 5) * 0.75 - 1.5;
        bic = mk(cpu, TG_BF16, n, 0), big = mk(gpu, TG_BF16, n, 0);
        tg_tensor_write_f64(bic, bv, (size_t)n), tg_tensor_write_f64(big, bv, (size_t)n);
        free(bv);
    }
    if (epi == TG_EPI_BIAS_GELU) mk_pair(ddt, m, n, NULL, &xc, &xg);
    tg_tensor *sac = scalar(cpu, 0.5f), *sag = scalar(gpu, 0.5f), *sbc = scalar(cpu, 0.25f), *sbg = scalar(gpu, 0.25f);
    tg_tensor *amc = scalar(cpu, 0), *amg = scalar(gpu, 0);
    tg_status sg = tg_fp8_gemm(dg, ag, 0, sag, bg, 1, sbg, 1.5, beta, epi, big, xg, amg, 0);
    if (sg != TG_OK) diag("%s", tg_last_error());
    tg_status sc = tg_fp8_gemm(dc, ac, 0, sac, bc, 1, sbc, 1.5, beta, epi, bic, xc, amc, 0);
    double *gv = malloc(sizeof(double) * (size_t)(m * n)), *cv = malloc(sizeof(double) * (size_t)(m * n));
    tg_tensor_read_f64(dg, gv, (size_t)(m * n)), tg_tensor_read_f64(dc, cv, (size_t)(m * n));
    double *acc = malloc(sizeof(double) * (size_t)(m * n)); /* each element's accumulation tolerance */
    double rel = ddt == TG_BF16 ? 0x1p-7 : 0x1p-20, worst = 0, gmax = 0;
    if (epi == TG_EPI_BIAS_GELU) rel *= 2; /* cuBLASLt's GELU approximation (bf16 D) */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double mag = 0; /* sum of |products|: the accumulation's error scale */
            for (int64_t p = 0; p < k; p++)
                mag += fabs((double)tg_fp8_to_f32(adt, aq[i * k + p]) * tg_fp8_to_f32(bdt, bq[j * k + p]));
            mag *= 1.5 * 0.5 * 0.25;
            /* Hopper's FP8 tensor cores keep about 14 bits in their accumulators between cuBLASLt's promotions
             * to f32: a relative error of a few 2^-14 of the sum of |products| */
            double tol = rel * fabs(cv[i * n + j]) + mag * 0x1p-11 + 1e-6;
            acc[i * n + j] = mag * 0x1p-11 + 1e-6;
            double e = fabs(gv[i * n + j] - cv[i * n + j]) / tol;
            if (e > worst) worst = e;
            if (fabs(gv[i * n + j]) > gmax) gmax = fabs(gv[i * n + j]);
        }
    static const char *en[] = {"none", "bias", "bias_gelu"};
    ok(sg == TG_OK && sc == TG_OK && worst <= 1.0,
       "%s x %s -> %s m=%lld n=%lld k=%lld epilogue %s beta %g: CUDA matches the CPU emulation (worst %.3f of the "
       "tolerance)", tg_dtype_name(adt), tg_dtype_name(bdt), tg_dtype_name(ddt), (long long)m, (long long)n, (long long)k,
       en[epi], beta, worst);
    float am;
    tg_tensor_read(amg, &am, 4);
    ok((double)am == gmax, "... amax_d = max|D| of the GPU's D (%g)", gmax);
    if (epi == TG_EPI_BIAS_GELU) {
        double *xv = malloc(sizeof(double) * (size_t)(m * n)), *xcv = malloc(sizeof(double) * (size_t)(m * n));
        tg_tensor_read_f64(xg, xv, (size_t)(m * n)), tg_tensor_read_f64(xc, xcv, (size_t)(m * n));
        int bad = 0;
        for (int64_t i = 0; i < m * n; i++) {
            /* the pre-activation as the CPU's, to the accumulation's error and D's rounding; D = gelu(aux) to
             * the rounding of aux and D (bf16) and cuBLASLt's GELU approximation */
            double tol = 0x1p-7 * fabs(xcv[i]) + acc[i];
            bad += fabs(xv[i] - xcv[i]) > tol || fabs((double)gelu((float)xv[i]) - gv[i]) > 0x1p-6 * (1 + fabs(gv[i]));
        }
        is_int(bad, 0, "... aux holds the pre-activation and D = gelu(aux)");
        free(xv), free(xcv);
    }
    tg_tensor *all[] = {ac, ag, bc, bg, dc, dg, xc, xg, bic, big, sac, sag, sbc, sbg, amc, amg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
    free(aq), free(bq), free(d0), free(gv), free(cv), free(acc);
}

/* How many elements of the f32 matrix d differ from want (-1: the read failed). D is read whole:
 * tg_tensor_read takes the tensor's full size. */
static int64_t d_wrong(const tg_tensor *d, float want)
{
    int64_t n = tg_tensor_numel(d), bad = 0;
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v || tg_tensor_read(d, v, sizeof(float) * (size_t)n) != TG_OK) {
        diag("read of D: %s", v ? tg_last_error() : "out of memory");
        free(v);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) bad += v[i] != want;
    if (bad) diag("D[0] %g, D[%lld] %g, want %g", v[0], (long long)(n - 1), v[n - 1], want);
    free(v);
    return bad;
}

static void gemm_refusals_and_replay(void)
{
    tg_tensor *a = mk(gpu, TG_E4M3, 32, 24), *b = mk(gpu, TG_E4M3, 32, 24), *d = mk(gpu, TG_F32, 32, 32);
    tg_fill(a, 1), tg_fill(b, 1), tg_fill(d, 7);
    tg_status e24 = tg_fp8_gemm(d, a, 0, NULL, b, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0);
    if (e24 != TG_OK) diag("%s", tg_last_error());
    ok(e24 == TG_OK && d_wrong(d, 24) == 0, "k = 24 (not a multiple of 16) runs on CUDA: every element of D is 24");
    {   /* captured, then replayed on new operands: the padded copies are made at each replay */
        tg_stream *st = tg_stream_current(gpu);
        tg_graph *g = NULL;
        tg_fill(d, 0);
        tg_stream_begin_capture(st);
        tg_status cg = tg_fp8_gemm(d, a, 0, NULL, b, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0);
        tg_status ce = tg_stream_end_capture(st, &g);
        ok(cg == TG_OK && ce == TG_OK, "the k = 24 GEMM captures: %s", cg == TG_OK && ce == TG_OK ? "ok" : tg_last_error());
        tg_fill(a, 2), tg_fill(b, 0.5);
        if (g) tg_graph_replay(g, st);
        tg_stream_sync(st);
        ok(g && d_wrong(d, 24) == 0, "... its replay reads the operands written after capture (2 x 0.5 x 24 = 24)");
        tg_fill(a, 4);
        if (g) tg_graph_replay(g, st);
        tg_stream_sync(st);
        ok(g && d_wrong(d, 48) == 0, "... and again after A changes (4 x 0.5 x 24 = 48)");
        tg_graph_free(g);
    }
    tg_tensor *a2 = mk(gpu, TG_E4M3, 32, 32), *b2 = mk(gpu, TG_E4M3, 24, 32), *d2 = mk(gpu, TG_BF16, 32, 24);
    ok(tg_fp8_gemm(d2, a2, 0, NULL, b2, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_ENOTSUP,
       "n = 24 is refused on CUDA");
    like(tg_last_error(), "n to be a multiple of 16", "... saying cuBLASLt needs n to be a multiple of 16");

    /* capture, then change a scale: the replay multiplies by the new one */
    tg_tensor *a3 = mk(gpu, TG_E4M3, 16, 32), *b3 = mk(gpu, TG_E4M3, 16, 32), *d3 = mk(gpu, TG_F32, 16, 16);
    tg_tensor *s = scalar(gpu, 1.0f);
    tg_fill(a3, 1), tg_fill(b3, 0.5);
    tg_stream *st = tg_stream_current(gpu);
    tg_graph *g = NULL;
    float three = 3.0f;
    tg_fill(d3, 7);
    tg_status eg = tg_fp8_gemm(d3, a3, 0, s, b3, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0);
    int64_t wrong = eg == TG_OK ? d_wrong(d3, 32 * 0.5f) : -1;
    ok(wrong == 0, "the 16x16x32 GEMM runs eagerly first: every element of D is 16 (%lld wrong): %s", (long long)wrong,
       eg == TG_OK ? "ok" : tg_last_error());
    {   /* the same GEMM with both scales given, and with operands written from the host */
        tg_tensor *one = scalar(gpu, 1.0f);
        tg_fill(d3, 7);
        tg_status e2 = tg_fp8_gemm(d3, a3, 0, s, b3, 1, one, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0);
        ok(e2 == TG_OK && d_wrong(d3, 16) == 0, "... with both scales given");
        double av[16 * 32], bv[16 * 32];
        for (int i = 0; i < 16 * 32; i++) av[i] = 1, bv[i] = 0.5;
        tg_tensor_write_f64(a3, av, 16 * 32), tg_tensor_write_f64(b3, bv, 16 * 32);
        tg_fill(d3, 7);
        e2 = tg_fp8_gemm(d3, a3, 0, s, b3, 1, one, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0);
        ok(e2 == TG_OK && d_wrong(d3, 16) == 0, "... with the operands written from the host");
        tg_tensor_free(one);
    }
    tg_fill(d3, 0);
    tg_stream_begin_capture(st);
    tg_status cg = tg_fp8_gemm(d3, a3, 0, s, b3, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0);
    tg_status ce = tg_stream_end_capture(st, &g);
    ok(cg == TG_OK && ce == TG_OK, "an FP8 GEMM captures: %s", cg == TG_OK && ce == TG_OK ? "ok" : tg_last_error());
    tg_tensor_write(s, &three, 4);
    tg_graph_replay(g, st);
    tg_stream_sync(st);
    wrong = d_wrong(d3, 3.0f * 32 * 0.5f);
    ok(wrong == 0, "the replay read a_scale_inv = 3, written after capture: every element of D is 48 (%lld wrong)",
       (long long)wrong);
    tg_graph_free(g);
    tg_tensor *all[] = {a, b, d, a2, b2, d2, a3, b3, d3, s};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
}

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    cast_sweep(TG_E4M3);
    cast_sweep(TG_E5M2);
    cast_transpose_cases(TG_E4M3);
    cast_transpose_cases(TG_E5M2);
    cast_dbias_case(TG_BF16, 200, 136, 0, 1);
    cast_dbias_case(TG_BF16, 65, 130, 0, 0);
    cast_dbias_case(TG_F32, 256, 192, 1, 1);
    cast_dbias_case(TG_BF16, 8192, 768, 1, 0);
    cast_dbias_case(TG_BF16, 64 * 1030, 16, 1, 0);
    scale_update_case(1024, 3, 0, 0);
    scale_update_case(1024, 3, 1, 1);
    scale_update_case(257, 8, 0, 2);
    scale_update_case(16, 3, 0, 0);
    scale_update_case(1, 3, 1, 0);
    scale_update_case(2, 1, 0, 0);
    scale_update_case(600, 1, 0, 0);
    gemm_case(TG_E4M3, TG_E4M3, TG_BF16, 64, 64, 64, TG_EPI_NONE, 0);
    gemm_case(TG_E4M3, TG_E4M3, TG_BF16, 17, 48, 32, TG_EPI_NONE, 0);
    gemm_case(TG_E4M3, TG_E4M3, TG_F32, 1, 16, 16, TG_EPI_NONE, 0);
    gemm_case(TG_E4M3, TG_E5M2, TG_F32, 128, 96, 272, TG_EPI_NONE, 1);
    gemm_case(TG_E5M2, TG_E4M3, TG_BF16, 256, 512, 1024, TG_EPI_NONE, 0);
    gemm_case(TG_E4M3, TG_E4M3, TG_BF16, 33, 64, 128, TG_EPI_BIAS, 0);
    gemm_case(TG_E4M3, TG_E4M3, TG_F32, 40, 32, 64, TG_EPI_BIAS, 1);
    gemm_case(TG_E4M3, TG_E4M3, TG_BF16, 48, 64, 96, TG_EPI_BIAS_GELU, 0);
    gemm_case(TG_E4M3, TG_E4M3, TG_F32, 24, 32, 48, TG_EPI_BIAS_GELU, 0);
    /* k not a multiple of 16 (a wgrad's tokens): zero-padded copies */
    gemm_case(TG_E4M3, TG_E4M3, TG_BF16, 33, 64, 40, TG_EPI_NONE, 0);
    gemm_case(TG_E4M3, TG_E5M2, TG_F32, 48, 32, 1001, TG_EPI_BIAS, 1);
    gemm_case(TG_E4M3, TG_E4M3, TG_BF16, 48, 64, 72, TG_EPI_BIAS_GELU, 0);
    gemm_case(TG_E4M3, TG_E4M3, TG_F32, 17, 16, 3, TG_EPI_BIAS_GELU, 0);
    {   /* A's padded rows exceed the scratch: D in chunks of rows */
        const int64_t k = 8190, kp = 8192, m = (int64_t)(TG_CUDA_NN_SCRATCH / kp) + 100;
        ok((size_t)(m * kp) > TG_CUDA_NN_SCRATCH, "the next case's padded A (%lld bytes) exceeds the scratch (%zu)",
           (long long)(m * kp), (size_t)TG_CUDA_NN_SCRATCH);
        gemm_case(TG_E4M3, TG_E4M3, TG_BF16, m, 16, k, TG_EPI_BIAS, 1);
    }
    gemm_refusals_and_replay();
    return done_testing();
}
#endif
