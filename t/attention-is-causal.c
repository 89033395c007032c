/* attention-is-causal.c — causal attention: changing a later token never changes earlier outputs (forward), and a gradient at one position only reaches qkv of that position and earlier ones (backward). */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <string.h>

enum { B = 2, T = 7, H = 3, D = 4, C = H * D, C3 = 3 * C };

static void forward(const double *qkv, double *out)
{
    tg_tensor *q = nt_make(TG_F32, qkv, B, T, C3), *o = nt_make(TG_F32, NULL, B, T, C), *l = nt_make(TG_F32, NULL, B, H, T);
    nt_check(tg_attention_forward(o, l, q, H), "attention_forward");
    nt_check(tg_tensor_read_f64(o, out, B * T * C), "read");
    tg_tensor_free(q), tg_tensor_free(o), tg_tensor_free(l);
}

int main(void)
{
    plan(NO_PLAN);
    double qkv[B * T * C3], qkv2[B * T * C3], out[B * T * C], out2[B * T * C];
    nt_fill_uniform(qkv, B * T * C3, -2, 2);
    forward(qkv, out);

    /* first token: attends only to itself, so its output is its own v */
    int own_v = 1;
    for (int b = 0; b < B; b++)
        for (int e = 0; e < C; e++) own_v &= fabs(out[b * T * C + e] - (float)qkv[b * T * C3 + 2 * C + e]) <= 1e-6;
    ok(own_v, "token 0 outputs its own v");

    for (int tc = 1; tc < T; tc++) {
        /* change q, k and v of token tc of batch 1 */
        memcpy(qkv2, qkv, sizeof qkv);
        for (int e = 0; e < C3; e++) qkv2[(T + tc) * C3 + e] += 0.5 + 0.1 * e;
        forward(qkv2, out2);
        int before_same = 1, at_changed = 0, other_batch_same = 1;
        for (int t = 0; t < T; t++)
            for (int e = 0; e < C; e++) {
                double a = out[(T + t) * C + e], b = out2[(T + t) * C + e];
                if (t < tc) before_same &= a == b;
                if (t == tc) at_changed |= a != b;
                other_batch_same &= out[t * C + e] == out2[t * C + e];
            }
        ok(before_same, "changing token %d leaves outputs 0..%d bit-identical", tc, tc - 1);
        ok(at_changed, "changing token %d changes its own output", tc);
        ok(other_batch_same, "changing token %d of batch 1 leaves batch 0 alone", tc);
    }

    /* backward: dout non-zero only at position tp -> dqkv zero after tp, non-zero at tp */
    tg_tensor *q = nt_make(TG_F32, qkv, B, T, C3), *o = nt_make(TG_F32, NULL, B, T, C), *l = nt_make(TG_F32, NULL, B, H, T);
    tg_tensor *dout = nt_make(TG_F32, NULL, B, T, C), *dq = nt_make(TG_F32, NULL, B, T, C3);
    nt_check(tg_attention_forward(o, l, q, H), "attention_forward");
    for (int tp = 0; tp < T; tp += 3) {
        double dv[B * T * C] = {0}, g[B * T * C3];
        for (int b = 0; b < B; b++)
            for (int e = 0; e < C; e++) dv[(b * T + tp) * C + e] = 1.0 + e;
        nt_check(tg_tensor_write_f64(dout, dv, B * T * C), "write");
        nt_set(dq, NAN);
        nt_check(tg_attention_backward(dq, dout, q, o, l, H), "attention_backward");
        nt_check(tg_tensor_read_f64(dq, g, B * T * C3), "read");
        int later_zero = 1, at_nonzero = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int e = 0; e < C3; e++) {
                    if (t > tp) later_zero &= g[(b * T + t) * C3 + e] == 0;
                    if (t == tp) at_nonzero |= g[(b * T + t) * C3 + e] != 0;
                }
        ok(later_zero, "a gradient at position %d gives exactly zero dqkv after it", tp);
        ok(at_nonzero, "a gradient at position %d reaches dqkv at %d", tp, tp);
    }
    tg_tensor_free(q), tg_tensor_free(o), tg_tensor_free(l), tg_tensor_free(dout), tg_tensor_free(dq);
    return done_testing();
}
