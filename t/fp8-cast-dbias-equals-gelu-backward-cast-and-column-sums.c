/* fp8-cast-dbias-equals-gelu-backward-cast-and-column-sums.c — the FP8 gradient cast with the bias gradient in
 * the same pass (tg_fp8_cast_transpose_dbias, then tg_fp8_dbias_finish) gives, bit for bit on the CPU, what the
 * unfused sequence gives: gelu_backward, then cast_transpose (codes, transposed codes, amax, scale_inv); its
 * column partials are the per-chunk sums of the same gradient (chunk p = the 64-row tiles t with t % chunks ==
 * p), and the bias gradient their sum, equal to bias_backward_dw's where one chunk holds every row. Partial tiles,
 * odd widths, f32 and bf16, more tiles than chunks, accumulation, and the errors. */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A (r, c) tensor, or (r) when c == 0, of dtype dt on the CPU. */
static tg_tensor *random_t(tg_dtype dt, int64_t r, int64_t c, double lo, double hi)
{
    double *v = malloc((size_t)(r * c) * sizeof *v);
    nt_fill_uniform(v, (size_t)(r * c), lo, hi);
    const int64_t shape[2] = {r, c};
    tg_tensor *t = nt_new(dt, c ? 2 : 1, shape, v);
    free(v);
    return t;
}

static void one_case(int64_t rows, int64_t cols, int gelu, tg_dtype dt)
{
    char what[96];
    snprintf(what, sizeof what, "%s %lld x %lld%s", tg_dtype_name(dt), (long long)rows, (long long)cols,
             gelu ? " through gelu'" : "");
    const int64_t chunks = tg_fp8_dbias_chunks(rows);
    tg_tensor *dy = random_t(dt, rows, cols, -2, 2), *h = gelu ? random_t(dt, rows, cols, -3, 3) : NULL;
    tg_tensor *scale = nt_scalar(8.0f), *amax = nt_scalar(0), *si = nt_scalar(0), *amax_r = nt_scalar(0), *si_r = nt_scalar(0);
    tg_tensor *y = nt_matrix(TG_E5M2, rows, cols), *yt = nt_matrix(TG_E5M2, cols, rows);
    tg_tensor *y_r = nt_matrix(TG_E5M2, rows, cols), *yt_r = nt_matrix(TG_E5M2, cols, rows);
    tg_tensor *part = nt_matrix(TG_F32, chunks, cols), *db = nt_matrix(TG_F32, cols, 0), *db_r = nt_matrix(TG_F32, cols, 0);
    tg_tensor *dh = gelu ? nt_matrix(dt, rows, cols) : dy;

    ok(tg_fp8_cast_transpose_dbias(y, yt, dy, h, scale, amax, si, part, 0) == TG_OK, "%s: the fused cast runs", what);
    ok((!gelu || tg_gelu_backward(dh, dy, h) == TG_OK) && tg_fp8_cast_transpose(y_r, yt_r, dh, scale, amax_r, si_r, 0) == TG_OK &&
           tg_bias_backward_dw(db_r, dh, 0.0) == TG_OK,
       "%s: the unfused sequence runs", what);
    ok(nt_same_bytes(y, y_r) && nt_same_bytes(yt, yt_r), "%s: y and y_t are the unfused cast's codes", what);
    ok(nt_same_bytes(amax, amax_r) && nt_same_bytes(si, si_r), "%s: amax (%g) and scale_inv are the unfused cast's", what,
       nt_read_f32(amax));

    /* the partials: each chunk's rows summed in double in row order, rounded once */
    double *g = malloc((size_t)(rows * cols) * sizeof *g), *sum = calloc((size_t)cols, sizeof *sum);
    float *pv = malloc((size_t)(chunks * cols) * sizeof *pv);
    tg_tensor_read_f64(dh, g, (size_t)(rows * cols));
    tg_tensor_read(part, pv, (size_t)(chunks * cols) * sizeof *pv);
    int bad = 0;
    const int64_t tiles = (rows + 63) / 64;
    for (int64_t p = 0; p < chunks; p++)
        for (int64_t c = 0; c < cols; c++) {
            double s = 0;
            for (int64_t t = p; t < tiles; t += chunks)
                for (int64_t r = t * 64; r < rows && r < (t + 1) * 64; r++) s += g[r * cols + c];
            bad += memcmp(&(float){(float)s}, &pv[p * cols + c], sizeof(float)) != 0;
            sum[c] += pv[p * cols + c];
        }
    is_int(bad, 0, "%s: dbias_part row p = the column sums of the chunk's rows (%lld chunks)", what, (long long)chunks);

    ok(tg_fp8_dbias_finish(db, part, 0.0) == TG_OK, "%s: dbias_finish runs", what);
    float *dv = malloc((size_t)cols * sizeof *dv), *dr = malloc((size_t)cols * sizeof *dr);
    tg_tensor_read(db, dv, (size_t)cols * sizeof *dv);
    tg_tensor_read(db_r, dr, (size_t)cols * sizeof *dr);
    int bad_sum = 0, bad_ref = 0;
    double worst = 0;
    for (int64_t c = 0; c < cols; c++) {
        bad_sum += dv[c] != (float)sum[c];
        bad_ref += dv[c] != dr[c];
        double d = fabs((double)dv[c] - dr[c]) / (fabs(dr[c]) + 1e-30);
        if (d > worst) worst = d;
    }
    is_int(bad_sum, 0, "%s: dbias = the partials summed in chunk order in double, rounded once", what);
    if (chunks == 1) is_int(bad_ref, 0, "%s: one chunk: dbias is bias_backward_dw's, bit for bit", what);
    else ok(worst < 1e-6, "%s: dbias is bias_backward_dw's to f32 rounding (worst relative %.2g)", what, worst);

    /* accumulate: dbias = 1 * dbias + sum, one rounding */
    float *old = malloc((size_t)cols * sizeof *old);
    for (int64_t c = 0; c < cols; c++) old[c] = (float)nt_uniform(-1, 1);
    tg_tensor_write(db, old, (size_t)cols * sizeof *old);
    ok(tg_fp8_dbias_finish(db, part, 1.0) == TG_OK, "%s: dbias_finish accumulates", what);
    tg_tensor_read(db, dv, (size_t)cols * sizeof *dv);
    bad = 0;
    for (int64_t c = 0; c < cols; c++) bad += dv[c] != (float)((double)old[c] + sum[c]);
    is_int(bad, 0, "%s: accumulated: dbias = old + sum, rounded once", what);

    free(g), free(sum), free(pv), free(dv), free(dr), free(old);
    tg_tensor *all[] = {dy, h, scale, amax, si, amax_r, si_r, y, yt, y_r, yt_r, part, db, db_r};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
    if (gelu) tg_tensor_free(dh);
}

static void errors(void)
{
    tg_tensor *dy = random_t(TG_BF16, 150, 37, -1, 1), *h = random_t(TG_BF16, 150, 36, -1, 1);
    tg_tensor *yt = nt_matrix(TG_E5M2, 37, 150), *part = nt_matrix(TG_F32, 3, 37), *part2 = nt_matrix(TG_F32, 2, 37);
    tg_tensor *db = nt_matrix(TG_F32, 36, 0), *db16 = nt_matrix(TG_E4M3, 37, 0), *db37 = nt_matrix(TG_F32, 37, 0);
    is_int(tg_fp8_dbias_chunks(150), 3, "150 rows make 3 chunks (64-row tiles)");
    is_int(tg_fp8_dbias_chunks(64 * 1024 + 1), 1024, "at most 1024 chunks");
    ok(tg_fp8_cast_transpose_dbias(NULL, yt, dy, NULL, NULL, NULL, NULL, part2, 0) == TG_EINVAL,
       "dbias_part with too few rows is refused");
    like(tg_last_error(), "dbias_part [2,37] f32", "... naming it");
    like(tg_last_error(), "[3,37] f32 expected", "... and the shape expected");
    ok(tg_fp8_cast_transpose_dbias(NULL, yt, dy, h, NULL, NULL, NULL, part, 0) == TG_EINVAL,
       "a gelu_x of another shape is refused");
    like(tg_last_error(), "gelu_x [150,36]", "... naming it");
    ok(tg_fp8_cast_transpose_dbias(NULL, yt, dy, NULL, NULL, NULL, NULL, yt, 0) == TG_EINVAL,
       "an e5m2 dbias_part is refused");
    ok(tg_fp8_dbias_finish(db, part, 0) == TG_EINVAL, "dbias_finish into a dbias of another width is refused");
    like(tg_last_error(), "dbias [36] f32", "... naming both");
    ok(tg_fp8_dbias_finish(db16, part, 0) == TG_EINVAL, "an e4m3 dbias is refused");
    ok(tg_fp8_dbias_finish(NULL, part, 0) == TG_EINVAL, "a NULL dbias is refused");
    ok(tg_fp8_dbias_finish(part2, part, 0) == TG_EINVAL, "a 2-D dbias is refused");
    ok(tg_fp8_dbias_finish(db37, part, NAN) == TG_EINVAL, "a NaN accumulate is refused");
    like(tg_last_error(), "accumulate = nan", "... naming it");
    tg_tensor *all[] = {dy, h, yt, part, part2, db, db16, db37};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
}

int main(void)
{
    one_case(150, 37, 1, TG_BF16);
    one_case(64, 16, 0, TG_F32);
    one_case(7, 40, 1, TG_F32);
    one_case(64 * 1025 + 5, 3, 1, TG_BF16);
    one_case(300, 24, 0, TG_BF16);
    errors();
    return done_testing();
}
