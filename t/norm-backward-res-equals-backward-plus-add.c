/* norm-backward-res-equals-backward-plus-add.c — layernorm/rmsnorm backward with a residual gradient (dres) equals
 * backward then tg_binary(TG_ADD, dx, dres, dx): bit-identical in f32 (same f32 sum), within one bf16 rounding in
 * bf16 (fused rounds once, the pair twice); dx may alias dres or dy; a dres of the wrong shape is refused by name. */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <string.h>

static int bytes_equal(const tg_tensor *a, const tg_tensor *b)
{
    size_t n = tg_tensor_numel(a) * tg_dtype_size(a->dtype);
    unsigned char *x = malloc(n), *y = malloc(n);
    nt_check(tg_tensor_read(a, x, n), "read");
    nt_check(tg_tensor_read(b, y, n), "read");
    int same = memcmp(x, y, n) == 0;
    free(x), free(y);
    return same;
}

/* Elements where |fused - pair| exceeds what the roundings explain (bf16 unit roundoff u = 2^-8): the pair
 * rounds d (<= u |d|) and its sum (<= u |pair|), the fused path its sum (<= u |fused|, ~ u |pair|). */
static size_t beyond_one_rounding(const tg_tensor *fused, const tg_tensor *pair, const tg_tensor *d)
{
    size_t n = tg_tensor_numel(fused), bad = 0;
    double *f = nt_get(fused), *p = nt_get(pair), *g = nt_get(d);
    for (size_t i = 0; i < n; i++)
        if (fabs(f[i] - p[i]) > 0x1p-8 * (fabs(g[i]) + 2.02 * fabs(p[i]))) bad++;
    free(f), free(p), free(g);
    return bad;
}

static tg_status run(int rms, tg_tensor *dx, const tg_tensor *dy, const tg_tensor *dres, const tg_tensor *x,
                     const tg_tensor *g, const tg_tensor *mean, const tg_tensor *rstd)
{
    return rms ? tg_rmsnorm_backward_res(dx, dy, dres, x, g, rstd) : tg_layernorm_backward_res(dx, dy, dres, x, g, mean, rstd);
}

static void check(int rms, tg_dtype dt, int64_t n, int64_t c)
{
    const char *op = rms ? "rmsnorm" : "layernorm";
    size_t nc = (size_t)(n * c);
    double *hx = malloc(nc * sizeof *hx), *hy = malloc(nc * sizeof *hy), *hr = malloc(nc * sizeof *hr),
           *hg = malloc((size_t)c * sizeof *hg);
    nt_fill_uniform(hx, nc, -2, 3);
    nt_fill_uniform(hy, nc, -1, 1);
    nt_fill_uniform(hr, nc, -1, 1);
    nt_fill_uniform(hg, (size_t)c, 0.5, 1.5);
    tg_tensor *x = nt_make(dt, hx, n, c), *dy = nt_make(dt, hy, n, c), *dres = nt_make(dt, hr, n, c),
              *g = nt_make(dt, hg, c), *y = nt_make(dt, NULL, n, c), *mean = nt_make(TG_F32, NULL, n),
              *rstd = nt_make(TG_F32, NULL, n), *fused = nt_make(dt, NULL, n, c), *pair = nt_make(dt, NULL, n, c);
    if (rms) nt_check(tg_rmsnorm_forward(y, rstd, x, g, 1e-5), "rmsnorm_forward");
    else nt_check(tg_layernorm_forward(y, mean, rstd, x, g, NULL, 1e-5), "layernorm_forward");

    /* dres NULL is the plain backward */
    tg_tensor *plain = nt_make(dt, NULL, n, c), *plain2 = nt_make(dt, NULL, n, c);
    nt_check(run(rms, plain, dy, NULL, x, g, mean, rstd), "backward_res NULL");
    nt_check(rms ? tg_rmsnorm_backward(plain2, dy, x, g, rstd) : tg_layernorm_backward(plain2, dy, x, g, mean, rstd),
             "backward");
    ok(bytes_equal(plain, plain2), "%s %s: dres NULL is the plain backward", op, tg_dtype_name(dt));

    nt_check(run(rms, fused, dy, dres, x, g, mean, rstd), "backward_res");
    nt_check(run(rms, pair, dy, NULL, x, g, mean, rstd), "backward");
    nt_check(tg_binary(TG_ADD, pair, dres, pair), "add");
    if (dt == TG_F32) {
        ok(bytes_equal(fused, pair), "%s f32 [%lld,%lld]: fused dres bit-identical to backward + add", op, (long long)n,
           (long long)c);
    } else {
        size_t bad = beyond_one_rounding(fused, pair, plain);
        ok(bad == 0, "%s bf16 [%lld,%lld]: fused dres within one bf16 rounding of backward + add (%zu elements beyond)",
           op, (long long)n, (long long)c, bad);
    }

    /* in place: dx aliases dres, then dx aliases dy */
    tg_tensor *r2 = nt_make(dt, hr, n, c), *dy2 = nt_make(dt, hy, n, c);
    nt_check(run(rms, r2, dy, r2, x, g, mean, rstd), "dx aliases dres");
    ok(bytes_equal(r2, fused), "%s %s: dx aliasing dres gives the same dx", op, tg_dtype_name(dt));
    nt_check(run(rms, dy2, dy2, dres, x, g, mean, rstd), "dx aliases dy");
    ok(bytes_equal(dy2, fused), "%s %s: dx aliasing dy gives the same dx", op, tg_dtype_name(dt));

    /* a dres of the wrong shape is refused, naming it */
    tg_tensor *bad = nt_make(dt, NULL, n, c + 1);
    tg_status st = run(rms, fused, dy, bad, x, g, mean, rstd);
    ok(st == TG_EINVAL && strstr(tg_last_error(), "dres") && strstr(tg_last_error(), op), "%s: dres [%lld,%lld] refused: %s",
       op, (long long)n, (long long)(c + 1), tg_last_error());

    tg_tensor *all[] = {x, dy, dres, g, y, mean, rstd, fused, pair, plain, plain2, r2, dy2, bad};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
    free(hx), free(hy), free(hr), free(hg);
}

int main(void)
{
    plan(NO_PLAN);
    const int64_t shapes[][2] = {{7, 33}, {16, 64}, {5, 771}};
    for (int rms = 0; rms < 2; rms++)
        for (int d = 0; d < 2; d++)
            for (int s = 0; s < 3; s++) check(rms, d ? TG_BF16 : TG_F32, shapes[s][0], shapes[s][1]);
    return done_testing();
}
