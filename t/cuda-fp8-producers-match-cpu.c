/* cuda-fp8-producers-match-cpu.c — the CUDA casts FP8 producers run against the CPU's: tg_fp8_cast_transpose_gelu
 * (GELU of a pre-activation, rounded to its dtype, cast with its transpose) and tg_layernorm_forward_fp8 (the
 * LayerNorm output cast in the same pass). tanhf and the norm's f32 sums differ between the devices in the last
 * bit, so a code may move by one step: every code is within one E4M3/E5M2 step of the CPU's and almost all are
 * equal; amax within a bf16 rounding, scale_inv bit for bit, mean and rstd within f32 summation order. Whole and
 * partial tiles, widths that are and are not multiples of 8, f32 and bf16, amax written and accumulated. */
#include "core/core.h"
#include "core/ops_nn.h"
#include "cuda-test-util.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef TG_HAVE_CUDA
int main(void) { skip_all("no CUDA device (built without CUDA)"); }
#else

static float read_f32(const tg_tensor *t)
{
    float v;
    tg_tensor_read(t, &v, sizeof v);
    return v;
}

static uint64_t rs = 0x2545f4914f6cdd1dull;
static double unif(void) /* [-0.5, 0.5) */
{
    rs ^= rs >> 12, rs ^= rs << 25, rs ^= rs >> 27;
    return (double)(int64_t)((rs * 2685821657736338717ull) >> 11) * 0x1p-53 - 0.5;
}

/* Random values of dt, |v| spread over powers of ten (spread) or uniform in +-scale. */
static void *values(tg_dtype dt, int64_t n, double scale, int spread)
{
    void *b = malloc((size_t)n * tg_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        double v = 2.0 * unif() * scale;
        if (spread) v *= pow(10.0, floor((unif() + 0.5) * 7.0) - 4.0);
        if (dt == TG_BF16) ((uint16_t *)b)[i] = tg_f32_to_bf16((float)v);
        else ((float *)b)[i] = (float)v;
    }
    return b;
}

/* The codes of two FP8 tensors: how many differ, and whether each differs by at most one step (neighbouring codes
 * of one sign, or +-0 against the smallest magnitude). */
static void compare_codes(const tg_tensor *a, const tg_tensor *b, long long *ndiff, int *within)
{
    const int64_t n = tg_tensor_numel(a);
    unsigned char *x = read_all(a), *y = read_all(b);
    *ndiff = 0, *within = 1;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] == y[i]) continue;
        (*ndiff)++;
        const int sx = x[i] >> 7, sy = y[i] >> 7, mx = x[i] & 0x7f, my = y[i] & 0x7f;
        const int step = (sx == sy && abs(mx - my) == 1) || (mx + my == 1);
        if (!step) *within = 0;
    }
    free(x), free(y);
}

static void gelu_case(tg_dtype x_dt, tg_dtype dt, int64_t r, int64_t c, int flags, float scale)
{
    void *hb = values(x_dt, r * c, 4.0, 1);
    tg_tensor *hc, *hg, *yc, *yg, *ytc, *ytg;
    tg_tensor *sc, *sg, *ac, *ag, *sic, *sig;
    mk_pair(x_dt, r, c, hb, &hc, &hg);
    mk_pair(dt, r, c, NULL, &yc, &yg);
    mk_pair(dt, c, r, NULL, &ytc, &ytg);
    const float one[1] = {scale}, a0[1] = {0.25f}, z[1] = {0};
    mk_pair(TG_F32, 1, 0, one, &sc, &sg);
    mk_pair(TG_F32, 1, 0, a0, &ac, &ag);
    mk_pair(TG_F32, 1, 0, z, &sic, &sig);
    ok(tg_fp8_cast_transpose_gelu(yg, ytg, hg, sg, ag, sig, flags) == TG_OK &&
           tg_fp8_cast_transpose_gelu(yc, ytc, hc, sc, ac, sic, flags) == TG_OK,
       "cast_transpose_gelu %s -> %s [%lld,%lld] (amax %s, scale %g) runs on both", tg_dtype_name(x_dt),
       tg_dtype_name(dt), (long long)r, (long long)c, flags ? "accumulated" : "written", scale);
    long long d1, d2;
    int w1, w2;
    compare_codes(yc, yg, &d1, &w1);
    compare_codes(ytc, ytg, &d2, &w2);
    ok(w1 && w2 && d1 * 100 <= r * c && d1 == d2,
       "... y and y_t within one code step of the CPU's (%lld of %lld codes differ)", d1, (long long)(r * c));
    const float amc = read_f32(ac), amg = read_f32(ag);
    ok(fabsf(amc - amg) <= 8e-3f * amc, "... amax %g vs the CPU's %g", amg, amc);
    ok(read_f32(sic) == read_f32(sig), "... scale_inv bit for bit");
    tg_tensor *all[] = {hc, hg, yc, yg, ytc, ytg, sc, sg, ac, ag, sic, sig};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
    free(hb);
}

static void layernorm_case(tg_dtype x_dt, tg_dtype dt, int64_t r, int64_t c, int beta, int flags, float scale)
{
    void *xb = values(x_dt, r * c, 3.0, 0), *gb = values(x_dt, c, 2.0, 0), *bb = values(x_dt, c, 1.0, 0);
    tg_tensor *xc, *xg, *gc, *gg, *bc = NULL, *bg = NULL, *yc, *yg, *mc, *mg, *rc, *rg;
    tg_tensor *sc, *sg, *ac, *ag, *sic, *sig;
    mk_pair(x_dt, r, c, xb, &xc, &xg);
    mk_pair(x_dt, c, 0, gb, &gc, &gg);
    if (beta) mk_pair(x_dt, c, 0, bb, &bc, &bg);
    mk_pair(dt, r, c, NULL, &yc, &yg);
    mk_pair(TG_F32, r, 0, NULL, &mc, &mg);
    mk_pair(TG_F32, r, 0, NULL, &rc, &rg);
    const float one[1] = {scale}, a0[1] = {0.25f}, z[1] = {0};
    mk_pair(TG_F32, 1, 0, one, &sc, &sg);
    mk_pair(TG_F32, 1, 0, a0, &ac, &ag);
    mk_pair(TG_F32, 1, 0, z, &sic, &sig);
    ok(tg_layernorm_forward_fp8(yg, mg, rg, xg, gg, bg, 1e-5, sg, ag, sig, flags) == TG_OK &&
           tg_layernorm_forward_fp8(yc, mc, rc, xc, gc, bc, 1e-5, sc, ac, sic, flags) == TG_OK,
       "layernorm_forward_fp8 %s -> %s [%lld,%lld]%s (amax %s, scale %g) runs on both", tg_dtype_name(x_dt),
       tg_dtype_name(dt), (long long)r, (long long)c, beta ? "" : " without beta", flags ? "accumulated" : "written",
       scale);
    long long d;
    int w;
    compare_codes(yc, yg, &d, &w);
    ok(w && d * 100 <= r * c, "... the codes within one step of the CPU's (%lld of %lld differ)", d, (long long)(r * c));
    const float amc = read_f32(ac), amg = read_f32(ag);
    ok(fabsf(amc - amg) <= 8e-3f * amc, "... amax %g vs the CPU's %g", amg, amc);
    ok(read_f32(sic) == read_f32(sig), "... scale_inv bit for bit");
    float *m1 = read_all(mc), *m2 = read_all(mg), *r1 = read_all(rc), *r2 = read_all(rg);
    double worst = 0;
    for (int64_t i = 0; i < r; i++)
        worst = fmax(worst, fmax(fabs((double)m1[i] - m2[i]), fabs((double)r1[i] - r2[i]) / fabs((double)r1[i])));
    ok(worst < 1e-5, "... mean and rstd as the CPU's to f32 summation order (worst %.3g)", worst);
    free(m1), free(m2), free(r1), free(r2);
    tg_tensor *all[] = {xc, xg, gc, gg, bc, bg, yc, yg, mc, mg, rc, rg, sc, sg, ac, ag, sic, sig};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) tg_tensor_free(all[i]);
    free(xb), free(gb), free(bb);
}

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    gelu_case(TG_BF16, TG_E4M3, 256, 192, 0, 1.0f);
    gelu_case(TG_BF16, TG_E4M3, 200, 136, TG_FP8_AMAX_ACCUMULATE, 0.37f);
    gelu_case(TG_F32, TG_E4M3, 65, 130, 0, 2.0f);
    gelu_case(TG_BF16, TG_E5M2, 130, 65, 0, 16.0f);
    gelu_case(TG_BF16, TG_E4M3, 8192, 3072, 0, 8.0f);
    layernorm_case(TG_BF16, TG_E4M3, 8192, 768, 1, 0, 16.0f);
    layernorm_case(TG_BF16, TG_E4M3, 100, 24, 0, TG_FP8_AMAX_ACCUMULATE, 4.0f);
    layernorm_case(TG_BF16, TG_E4M3, 33, 13, 1, 0, 4.0f);    /* element path */
    layernorm_case(TG_F32, TG_E4M3, 64, 4100, 1, 0, 100.0f); /* a wide row */
    layernorm_case(TG_F32, TG_E5M2, 300, 96, 1, 0, 1.0f);
    return done_testing();
}
#endif
