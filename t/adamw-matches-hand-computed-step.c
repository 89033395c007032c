/* adamw-matches-hand-computed-step.c — tg_adamw_step matches a step worked out by hand, a float64 reference over several steps (weight decay, gradient scale, bf16 gradients), and writes the bf16 copy of p. */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>

/* float64 reference of one step for one element */
static void ref_step(double *p, double *m, double *v, double g, double lr, double b1, double b2, double eps, double wd,
                     int step, double gs)
{
    g *= gs;
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    double mh = *m / (1 - pow(b1, step)), vh = *v / (1 - pow(b2, step));
    *p -= lr * (mh / (sqrt(vh) + eps) + wd * *p);
}

int main(void)
{
    plan(NO_PLAN);

    /* By hand: p = 1, g = 0.5, m = v = 0, lr = 0.1, b1 = 0.5, b2 = 0.75, eps = 0.25, wd = 0.5, step 1.
     * m = 0.5 * 0.5 = 0.25; v = 0.25 * 0.25 = 0.0625; mhat = 0.25 / 0.5 = 0.5; vhat = 0.0625 / 0.25 = 0.25;
     * update = 0.5 / (0.5 + 0.25) + 0.5 * 1 = 2/3 + 1/2 = 7/6; p = 1 - 0.1 * 7/6 = 0.88333... */
    {
        double one = 1, half = 0.5;
        tg_tensor *p = nt_make(TG_F32, &one, 1), *g = nt_make(TG_F32, &half, 1), *m = nt_make(TG_F32, NULL, 1);
        tg_tensor *v = nt_make(TG_F32, NULL, 1), *lp = nt_make(TG_BF16, NULL, 1);
        nt_set(m, 0), nt_set(v, 0);
        ok(tg_adamw_step(p, lp, g, m, v, 0.1, 0.5, 0.75, 0.25, 0.5, 1, 1.0) == TG_OK, "hand step runs");
        double pv, mv, vv, lv;
        nt_check(tg_tensor_read_f64(p, &pv, 1), "read"), nt_check(tg_tensor_read_f64(m, &mv, 1), "read");
        nt_check(tg_tensor_read_f64(v, &vv, 1), "read"), nt_check(tg_tensor_read_f64(lp, &lv, 1), "read");
        is_near(mv, 0.25, 0, "m = 0.25");
        is_near(vv, 0.0625, 0, "v = 0.0625");
        is_near(pv, 1 - 0.1 * 7.0 / 6.0, 1e-7, "p = 1 - 0.1 * (0.5 / (0.5 + 0.25) + 0.5 * 1) = 0.883333");
        is_near(lv, 0.8828125, 0, "p_lowp = p rounded to bf16 (0.8828125)");
        /* step 2 with g = 0.5 again: m = 0.375, v = 0.109375, mhat = 0.5, vhat = 0.25 (bias corrections of step 2) */
        ok(tg_adamw_step(p, NULL, g, m, v, 0.1, 0.5, 0.75, 0.25, 0.0, 2, 1.0) == TG_OK, "second hand step runs");
        double p2;
        nt_check(tg_tensor_read_f64(m, &mv, 1), "read"), nt_check(tg_tensor_read_f64(v, &vv, 1), "read");
        nt_check(tg_tensor_read_f64(p, &p2, 1), "read");
        is_near(mv, 0.375, 0, "step 2: m = 0.375");
        is_near(vv, 0.109375, 0, "step 2: v = 0.109375");
        is_near(p2, pv - 0.1 * (0.5 / (0.5 + 0.25)), 1e-7, "step 2: bias correction uses step 2 (p -= 0.1 * 2/3)");
        tg_tensor_free(p), tg_tensor_free(g), tg_tensor_free(m), tg_tensor_free(v), tg_tensor_free(lp);
    }

    /* Several steps on a vector against float64, with f32 and bf16 gradients. */
    for (int gd = 0; gd < 2; gd++) {
        tg_dtype gdt = gd ? TG_BF16 : TG_F32;
        enum { n = 300 };
        double p0[n], pr[n], mr[n] = {0}, vr[n] = {0}, gv[n];
        nt_fill_uniform(p0, n, -1, 1);
        nt_round(p0, n, TG_F32);
        for (int i = 0; i < n; i++) pr[i] = p0[i];
        tg_tensor *p = nt_make(TG_F32, p0, 3, 100), *g = nt_make(gdt, NULL, 3, 100), *m = nt_make(TG_F32, NULL, 3, 100);
        tg_tensor *v = nt_make(TG_F32, NULL, 3, 100), *lp = nt_make(TG_BF16, NULL, 3, 100);
        nt_set(m, 0), nt_set(v, 0);
        const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.25;
        for (int step = 1; step <= 5; step++) {
            nt_fill_uniform(gv, n, -2, 2);
            nt_round(gv, n, gdt);
            nt_check(tg_tensor_write_f64(g, gv, n), "write g");
            nt_check(tg_adamw_step(p, lp, g, m, v, lr, b1, b2, eps, wd, step, gs), "adamw_step");
            for (int i = 0; i < n; i++) { /* f32 parameters, as the op layer passes them; p, m, v stored as f32 */
                ref_step(&pr[i], &mr[i], &vr[i], gv[i], (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, step,
                         (float)gs);
                pr[i] = (float)pr[i], mr[i] = (float)mr[i], vr[i] = (float)vr[i];
            }
        }
        double *pg = nt_get(p), *mg = nt_get(m), *vg = nt_get(v), *lg = nt_get(lp), ep = 0, em = 0, ev = 0;
        int lowp_ok = 1;
        for (int i = 0; i < n; i++) {
            ep = fmax(ep, fabs(pg[i] - pr[i]));
            em = fmax(em, fabs(mg[i] - mr[i]) / fmax(1e-3, fabs(mr[i])));
            ev = fmax(ev, fabs(vg[i] - vr[i]) / fmax(1e-6, fabs(vr[i])));
            lowp_ok &= lg[i] == (double)tg_bf16_to_f32(tg_f32_to_bf16((float)pg[i]));
        }
        /* p moves by ~lr = 3e-3 per step; the reference rounds p, m, v to f32 after each step as storage does,
         * so only the last rounding can differ (|p| < 2: one f32 ulp is 2.4e-7) */
        ok(ep <= 2.4e-7, "%s gradients, 5 steps: p matches float64 (max abs error %.1e <= 2.4e-7)", tg_dtype_name(gdt), ep);
        ok(em <= 1e-5, "%s gradients, 5 steps: m matches float64 (relative error %.1e)", tg_dtype_name(gdt), em);
        ok(ev <= 1e-5, "%s gradients, 5 steps: v matches float64 (relative error %.1e)", tg_dtype_name(gdt), ev);
        ok(lowp_ok, "%s gradients: p_lowp is exactly bf16(p)", tg_dtype_name(gdt));
        free(pg), free(mg), free(vg), free(lg);
        tg_tensor_free(p), tg_tensor_free(g), tg_tensor_free(m), tg_tensor_free(v), tg_tensor_free(lp);
    }
    return done_testing();
}
