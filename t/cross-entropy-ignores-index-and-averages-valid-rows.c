/* cross-entropy-ignores-index-and-averages-valid-rows.c — rows whose target is ignore_index get loss 0 and zero gradient, the loss is the mean over valid rows with their count, and backward reads that count on the device. */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>

enum { N = 8, V = 11 };

/* float64 loss of one row */
static double row_loss(const double *x, int t)
{
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) mx = fmax(mx, x[j]);
    for (int j = 0; j < V; j++) s += exp(x[j] - mx);
    return mx + log(s) - x[t];
}

static void run(int ignore, const int32_t *tgt, const char *what)
{
    double lv[N * V];
    nt_fill_uniform(lv, N * V, -3, 3);
    nt_round(lv, N * V, TG_F32);
    tg_tensor *logits = nt_make(TG_F32, lv, N, V), *t = nt_ids(1, (const int64_t[]){N}, tgt);
    tg_tensor *loss = nt_make(TG_F32, NULL, 2), *losses = nt_make(TG_F32, NULL, N), *dl = nt_make(TG_F32, NULL, N, V);

    nt_set(losses, NAN), nt_set(dl, NAN);
    ok(tg_cross_entropy_forward(loss, losses, logits, t, ignore) == TG_OK, "%s: forward runs", what);
    double *ls = nt_get(losses), *l = nt_get(loss), total = 0;
    int valid = 0, zeros = 1, rows_ok = 1;
    for (int r = 0; r < N; r++) {
        if (tgt[r] == ignore) zeros &= ls[r] == 0;
        else {
            double want = row_loss(lv + r * V, tgt[r]);
            rows_ok &= fabs(ls[r] - want) <= 1e-5 * fmax(1, fabs(want));
            total += want, valid++;
        }
    }
    ok(zeros, "%s: ignored rows have loss 0", what);
    ok(rows_ok, "%s: valid rows have their cross-entropy", what);
    is_near(l[1], valid, 0, "%s: loss[1] counts the %d valid rows", what, valid);
    is_near(l[0], valid ? total / valid : 0, 1e-5, "%s: loss[0] is the mean over valid rows only", what);

    ok(tg_cross_entropy_backward(dl, logits, t, loss, 2.0, ignore) == TG_OK, "%s: backward runs", what);
    double *d = nt_get(dl);
    int zrows = 1, grad_ok = 1;
    for (int r = 0; r < N; r++)
        for (int j = 0; j < V; j++) {
            if (tgt[r] == ignore) zrows &= d[r * V + j] == 0;
            else {
                double mx = -INFINITY, s = 0;
                for (int k = 0; k < V; k++) mx = fmax(mx, lv[r * V + k]);
                for (int k = 0; k < V; k++) s += exp(lv[r * V + k] - mx);
                double want = 2.0 / valid * (exp(lv[r * V + j] - mx) / s - (j == tgt[r]));
                grad_ok &= fabs(d[r * V + j] - want) <= 1e-6;
            }
        }
    ok(zrows, "%s: ignored rows get zero gradient (no NaN)", what);
    ok(grad_ok, "%s: valid rows get dloss / count * (softmax - onehot)", what);

    if (valid) {
        /* the count comes from loss[1] on the device: doubling it halves the gradient */
        double doubled[2] = {l[0], 2.0 * valid}, *d2;
        nt_check(tg_tensor_write_f64(loss, doubled, 2), "write loss");
        nt_check(tg_cross_entropy_backward(dl, logits, t, loss, 2.0, ignore), "cross_entropy_backward");
        d2 = nt_get(dl);
        int half = 1;
        for (int i = 0; i < N * V; i++) half &= fabs(d2[i] - 0.5 * d[i]) <= 1e-7;
        ok(half, "%s: backward scales by the count read from loss[1] on the device", what);
        free(d2);
    }
    free(ls), free(l), free(d);
    tg_tensor_free(logits), tg_tensor_free(t), tg_tensor_free(loss), tg_tensor_free(losses), tg_tensor_free(dl);
}

int main(void)
{
    plan(NO_PLAN);
    const int32_t some[N] = {3, -100, 0, 10, -100, 7, 7, -100};
    const int32_t none[N] = {3, 1, 0, 10, 2, 7, 7, 5};
    const int32_t all[N] = {-1, -1, -1, -1, -1, -1, -1, -1};
    const int32_t zero_ignored[N] = {0, 4, 0, 10, 0, 7, 7, 2};
    run(-100, some, "3 of 8 rows ignored (-100)");
    run(-100, none, "no row ignored");
    run(-1, all, "every row ignored");
    run(0, zero_ignored, "ignore_index 0 (a real class id)");
    return done_testing();
}
