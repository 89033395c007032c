/* fp8-producer-casts-equal-the-unfused-ops.c — the casts FP8 producers run give, bit for bit on the CPU, what the
 * unfused sequences give: tg_fp8_cast_transpose_gelu(h) = tg_gelu_forward then tg_fp8_cast_transpose (codes,
 * transposed codes, amax, scale_inv), and tg_layernorm_forward_fp8 = tg_layernorm_forward then tg_fp8_cast (codes,
 * mean, rstd, amax, scale_inv). Values from tiny to large (some codes saturate, some flush to zero), odd shapes,
 * f32 and bf16, E4M3 and E5M2, with and without beta, amax written or accumulated; bad arguments are refused,
 * naming them. */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Values |v| from 1e-6 to 1e3 (a random power of ten per element), either sign; row_scale: each row times
 * 10^(r % 5 - 2) as well. */
static tg_tensor *wide_t(tg_dtype dt, int64_t r, int64_t c, int row_scale)
{
    const int64_t n = c ? r * c : r; /* c == 0: a vector of r */
    double *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = nt_uniform(-1, 1) * pow(10.0, floor(nt_uniform(-6, 3.999)));
        if (row_scale && c) v[i] = nt_uniform(-1, 1) * pow(10.0, (double)((i / c) % 5 - 2)) + 0.5;
    }
    const int64_t shape[2] = {r, c};
    tg_tensor *t = nt_new(dt, c ? 2 : 1, shape, v);
    free(v);
    return t;
}

/* How many codes of y are the format's largest magnitude, and how many are zero. */
static void code_counts(const tg_tensor *y, int *sat, int *zero)
{
    size_t n = tg_tensor_bytes(y);
    unsigned char *b = malloc(n);
    tg_tensor_read(y, b, n);
    const unsigned char top = y->dtype == TG_E4M3 ? 0x7e : 0x7b;
    *sat = *zero = 0;
    for (size_t i = 0; i < n; i++) {
        *sat += (b[i] & 0x7f) == top;
        *zero += (b[i] & 0x7f) == 0;
    }
    free(b);
}

static void gelu_case(int64_t rows, int64_t cols, tg_dtype dt, tg_dtype ft, float scale_v, int accumulate)
{
    char what[128];
    snprintf(what, sizeof what, "cast_transpose_gelu %s -> %s %lld x %lld, scale %g%s", tg_dtype_name(dt),
             tg_dtype_name(ft), (long long)rows, (long long)cols, scale_v, accumulate ? ", amax accumulated" : "");
    tg_tensor *h = wide_t(dt, rows, cols, 0), *g = nt_matrix(dt, rows, cols);
    tg_tensor *scale = nt_scalar(scale_v), *amax = nt_scalar(0.75f), *si = nt_scalar(0), *amax_r = nt_scalar(0.75f), *si_r = nt_scalar(0);
    tg_tensor *y = nt_matrix(ft, rows, cols), *yt = nt_matrix(ft, cols, rows), *y_r = nt_matrix(ft, rows, cols);
    tg_tensor *yt_r = nt_matrix(ft, cols, rows), *yt2 = nt_matrix(ft, cols, rows);
    const int fl = accumulate ? TG_FP8_AMAX_ACCUMULATE : 0;
    ok(tg_fp8_cast_transpose_gelu(y, yt, h, scale, amax, si, fl) == TG_OK, "%s: runs", what);
    ok(tg_gelu_forward(g, h) == TG_OK && tg_fp8_cast_transpose(y_r, yt_r, g, scale, amax_r, si_r, fl) == TG_OK,
       "%s: the unfused gelu_forward, cast_transpose run", what);
    ok(nt_same_bytes(y, y_r) && nt_same_bytes(yt, yt_r), "%s: y and y_t are the unfused codes", what);
    ok(nt_same_bytes(amax, amax_r) && nt_same_bytes(si, si_r), "%s: amax (%g) and scale_inv are the unfused cast's", what,
       nt_read_f32(amax));
    int sat, zero;
    code_counts(y, &sat, &zero);
    ok(sat > 0 && zero > 0, "%s: the values reach both ends (%d codes saturated, %d zero)", what, sat, zero);
    ok(tg_fp8_cast_transpose_gelu(NULL, yt2, h, scale, NULL, NULL, 0) == TG_OK && nt_same_bytes(yt2, yt_r),
       "%s: y_t alone, the same codes", what);
    tg_tensor *all[] = {h, g, scale, amax, si, amax_r, si_r, y, yt, y_r, yt_r, yt2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
}

static void layernorm_case(int64_t rows, int64_t cols, tg_dtype dt, tg_dtype ft, int with_beta, float scale_v,
                           int accumulate)
{
    char what[128];
    snprintf(what, sizeof what, "layernorm_forward_fp8 %s -> %s %lld x %lld%s, scale %g%s", tg_dtype_name(dt),
             tg_dtype_name(ft), (long long)rows, (long long)cols, with_beta ? "" : " (no beta)", scale_v,
             accumulate ? ", amax accumulated" : "");
    tg_tensor *x = wide_t(dt, rows, cols, 1), *gm = wide_t(dt, cols, 0, 0), *bt = with_beta ? wide_t(dt, cols, 0, 0) : NULL;
    tg_tensor *mean = nt_matrix(TG_F32, rows, 0), *rstd = nt_matrix(TG_F32, rows, 0), *mean_r = nt_matrix(TG_F32, rows, 0);
    tg_tensor *rstd_r = nt_matrix(TG_F32, rows, 0), *y = nt_matrix(dt, rows, cols);
    tg_tensor *scale = nt_scalar(scale_v), *amax = nt_scalar(1e-3f), *si = nt_scalar(0), *amax_r = nt_scalar(1e-3f), *si_r = nt_scalar(0);
    tg_tensor *y8 = nt_matrix(ft, rows, cols), *y8_r = nt_matrix(ft, rows, cols);
    const int fl = accumulate ? TG_FP8_AMAX_ACCUMULATE : 0;
    ok(tg_layernorm_forward_fp8(y8, mean, rstd, x, gm, bt, 1e-5, scale, amax, si, fl) == TG_OK, "%s: runs", what);
    ok(tg_layernorm_forward(y, mean_r, rstd_r, x, gm, bt, 1e-5) == TG_OK &&
           tg_fp8_cast(y8_r, y, scale, amax_r, si_r, fl) == TG_OK,
       "%s: the unfused layernorm_forward, cast run", what);
    ok(nt_same_bytes(y8, y8_r), "%s: the codes are the unfused cast's", what);
    ok(nt_same_bytes(mean, mean_r) && nt_same_bytes(rstd, rstd_r), "%s: mean and rstd are layernorm_forward's", what);
    ok(nt_same_bytes(amax, amax_r) && nt_same_bytes(si, si_r), "%s: amax (%g) and scale_inv are the unfused cast's", what,
       nt_read_f32(amax));
    int sat, zero;
    code_counts(y8, &sat, &zero);
    ok(sat > 0 && zero > 0, "%s: the values reach both ends (%d codes saturated, %d zero)", what, sat, zero);
    tg_tensor *all[] = {x, gm, bt, mean, rstd, mean_r, rstd_r, y, scale, amax, si, amax_r, si_r, y8, y8_r};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
}

static void errors(void)
{
    tg_tensor *x = wide_t(TG_BF16, 10, 12, 1), *gm = wide_t(TG_BF16, 12, 0, 0), *mean = nt_matrix(TG_F32, 10, 0);
    tg_tensor *rstd = nt_matrix(TG_F32, 10, 0), *y8 = nt_matrix(TG_E4M3, 10, 11), *ybf = nt_matrix(TG_BF16, 10, 12);
    tg_tensor *yt = nt_matrix(TG_E4M3, 10, 12), *g32 = wide_t(TG_F32, 12, 0, 0);
    ok(tg_layernorm_forward_fp8(y8, mean, rstd, x, gm, NULL, 1e-5, NULL, NULL, NULL, 0) == TG_EINVAL,
       "layernorm_forward_fp8 into a y of another width is refused");
    like(tg_last_error(), "layernorm_forward_fp8: x [10,12] bf16 vs y [10,11] e4m3", "... naming both");
    ok(tg_layernorm_forward_fp8(ybf, mean, rstd, x, gm, NULL, 1e-5, NULL, NULL, NULL, 0) == TG_EINVAL,
       "a bf16 y is refused");
    like(tg_last_error(), "must be an e4m3 or e5m2 tensor", "... saying what it must be");
    ok(tg_layernorm_forward_fp8(yt, mean, rstd, x, g32, NULL, 1e-5, NULL, NULL, NULL, 0) == TG_EINVAL,
       "an f32 gamma for a bf16 x is refused");
    ok(tg_layernorm_forward_fp8(yt, mean, rstd, x, gm, NULL, -1, NULL, NULL, NULL, 0) == TG_EINVAL,
       "a negative eps is refused");
    like(tg_last_error(), "eps = -1", "... naming it");
    ok(tg_layernorm_forward_fp8(yt, mean, rstd, x, gm, NULL, 1e-5, NULL, NULL, NULL, 4) == TG_EINVAL,
       "unknown flags are refused");
    ok(tg_fp8_cast_transpose_gelu(NULL, yt, x, NULL, NULL, NULL, 0) == TG_EINVAL,
       "cast_transpose_gelu with a y_t not (cols, rows) is refused");
    like(tg_last_error(), "fp8_cast_transpose_gelu: x [10,12] bf16 vs y_t [10,12] e4m3", "... naming both");
    ok(tg_fp8_cast_transpose_gelu(NULL, NULL, x, NULL, NULL, NULL, 0) == TG_EINVAL, "no output at all is refused");
    tg_tensor *all[] = {x, gm, mean, rstd, y8, ybf, yt, g32};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
}

int main(void)
{
    gelu_case(150, 37, TG_BF16, TG_E4M3, 8.0f, 0);
    gelu_case(7, 40, TG_F32, TG_E4M3, 1.0f, 1);
    gelu_case(64, 130, TG_BF16, TG_E5M2, 64.0f, 1);
    layernorm_case(37, 19, TG_BF16, TG_E4M3, 1, 4.0f, 0);
    layernorm_case(130, 768, TG_BF16, TG_E4M3, 1, 0.5f, 1);
    layernorm_case(5, 1000, TG_F32, TG_E4M3, 0, 2.0f, 0);
    layernorm_case(64, 480, TG_F32, TG_E5M2, 1, 50.0f, 1);
    errors();
    return done_testing();
}
