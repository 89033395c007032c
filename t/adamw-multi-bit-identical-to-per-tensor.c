/* adamw-multi-bit-identical-to-per-tensor.c — tg_adamw_multi equals tg_adamw_step per tensor bit for bit (mixed dtypes, decay, device-side clipping on and off), skips the step on a non-finite norm, captures and replays, and rejects bad input naming the parameter. */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define K 5
/* sizes: a scalar, odd sizes (the unaligned tails), one above the OpenMP threshold */
static const int64_t sizes[K] = {1, 7, 300, 70001, 33};
static const tg_dtype g_dts[K] = {TG_F32, TG_BF16, TG_F32, TG_BF16, TG_F32};
static const int has_lowp[K] = {0, 1, 0, 1, 1};
static const double wds[K] = {0.0, 0.1, 0.1, 0.0, 0.1};
static const double LR = 3e-3, B1 = 0.9, B2 = 0.95, EPS = 1e-8;

struct set {
    tg_tensor *p[K], *m[K], *v[K], *lowp[K];
};

static void set_init(struct set *s)
{
    for (int k = 0; k < K; k++) {
        size_t n = (size_t)sizes[k];
        double *x = malloc(n * sizeof *x);
        for (size_t i = 0; i < n; i++) x[i] = sin(0.3 * (double)i + k);
        s->p[k] = nt_make(TG_F32, x, sizes[k]);
        s->m[k] = nt_make(TG_F32, NULL, sizes[k]);
        s->v[k] = nt_make(TG_F32, NULL, sizes[k]);
        nt_set(s->m[k], 0), nt_set(s->v[k], 0);
        s->lowp[k] = has_lowp[k] ? nt_make(TG_BF16, x, sizes[k]) : NULL;
        free(x);
    }
}

static void set_free(struct set *s)
{
    for (int k = 0; k < K; k++) {
        tg_tensor_free(s->p[k]), tg_tensor_free(s->m[k]), tg_tensor_free(s->v[k]);
        if (s->lowp[k]) tg_tensor_free(s->lowp[k]);
    }
}

static int same_bytes(const tg_tensor *a, const tg_tensor *b)
{
    if (!a || !b) return a == b;
    size_t n = (size_t)tg_tensor_numel(a) * tg_dtype_size(tg_tensor_dtype(a));
    void *x = malloc(n), *y = malloc(n);
    nt_check(tg_tensor_read(a, x, n), "read"), nt_check(tg_tensor_read(b, y, n), "read");
    int same = memcmp(x, y, n) == 0;
    free(x), free(y);
    return same;
}

static int sets_equal(const struct set *a, const struct set *b)
{
    int same = 1;
    for (int k = 0; k < K; k++)
        same = same && same_bytes(a->p[k], b->p[k]) && same_bytes(a->m[k], b->m[k]) && same_bytes(a->v[k], b->v[k]) &&
               same_bytes(a->lowp[k], b->lowp[k]);
    return same;
}

/* A copy of a set (new tensors with the same bytes). */
static void set_copy(struct set *dst, const struct set *src)
{
    set_init(dst);
    for (int k = 0; k < K; k++) {
        nt_check(tg_copy(dst->p[k], src->p[k]), "copy"), nt_check(tg_copy(dst->m[k], src->m[k]), "copy");
        nt_check(tg_copy(dst->v[k], src->v[k]), "copy");
        if (src->lowp[k]) nt_check(tg_copy(dst->lowp[k], src->lowp[k]), "copy");
    }
}

static void write_grads(tg_tensor **g, int step, double amp)
{
    for (int k = 0; k < K; k++) {
        size_t n = (size_t)sizes[k];
        double *x = malloc(n * sizeof *x);
        for (size_t i = 0; i < n; i++) x[i] = amp * cos(0.7 * (double)i * (step + 1) + 0.5 * k);
        nt_check(tg_tensor_write_f64(g[k], x, n), "write grads");
        free(x);
    }
}

static void params_of(struct tg_adamw_param *ps, const struct set *s, tg_tensor **g)
{
    for (int k = 0; k < K; k++)
        ps[k] = (struct tg_adamw_param){.p = s->p[k], .p_lowp = s->lowp[k], .g = g[k], .m = s->m[k], .v = s->v[k],
                                        .weight_decay = wds[k]};
}

/* optim.clip_factor(sqrt(sumsq), max_norm), as lua/tegraph/optim.lua computes it. */
static double clip_factor(double sumsq, double max_norm)
{
    double norm = sqrt(sumsq);
    if (norm != norm || norm == INFINITY) return 0.0;
    if (norm <= max_norm) return 1.0;
    return max_norm / (norm + 1e-6);
}

static double read1(const tg_tensor *t)
{
    double v;
    nt_check(tg_tensor_read_f64(t, &v, 1), "read scalar");
    return v;
}

int main(void)
{
    plan(NO_PLAN);
    tg_tensor *g[K], *sumsq = nt_make(TG_F32, NULL, 1);
    for (int k = 0; k < K; k++) g[k] = nt_make(g_dts[k], NULL, sizes[k]);
    struct tg_adamw_param ps[K];

    /* several steps: no clip, clip active, clip inactive, clip active with a grad scale */
    {
        struct set multi, each;
        set_init(&multi), set_init(&each);
        const char *modes[] = {"no clipping", "clipping active", "clipping inactive", "clipping active, grad_scale 0.5"};
        for (int step = 1; step <= 4; step++) {
            const int mode = step - 1;
            write_grads(g, step, 1.0);
            double gs = mode == 3 ? 0.5 : 1.0, f = 1.0, max_norm = 0;
            const tg_tensor *clip = NULL;
            if (mode > 0) {
                nt_check(tg_sumsq_multi(sumsq, (const tg_tensor *const *)g, K), "sumsq_multi");
                double want = 0;
                for (int k = 0; k < K; k++) {
                    double *x = nt_get(g[k]);
                    for (int64_t i = 0; i < sizes[k]; i++) want += x[i] * x[i];
                    free(x);
                }
                double got = read1(sumsq);
                is_near(got, want, 1e-6 * want, "step %d: sumsq_multi is the sum of squares of all gradients (%.9g)", step,
                        want);
                max_norm = mode == 2 ? 1e6 : 0.25 * sqrt(got);
                f = clip_factor(got, max_norm);
                ok(mode == 2 ? f == 1.0 : f < 0.3, "step %d: the clip factor is %g", step, f);
                clip = sumsq;
            }
            params_of(ps, &multi, g);
            nt_check(tg_adamw_multi(ps, K, LR, B1, B2, EPS, step, gs, clip, max_norm), "adamw_multi");
            for (int k = 0; k < K; k++)
                nt_check(tg_adamw_step(each.p[k], each.lowp[k], g[k], each.m[k], each.v[k], LR, B1, B2, EPS, wds[k], step,
                                       (float)gs * f),
                         "adamw_step");
            ok(sets_equal(&multi, &each), "step %d (%s): p, m, v and bf16 copies equal per-tensor steps bit for bit",
               step, modes[mode]);
        }

        /* a non-finite gradient with clipping: nothing changes */
        for (int bad = 0; bad < 2; bad++) {
            struct set before;
            set_copy(&before, &multi);
            write_grads(g, 9, 1.0);
            double x = bad ? INFINITY : NAN;
            double *gv = nt_get(g[2]);
            gv[17] = x;
            nt_check(tg_tensor_write_f64(g[2], gv, (size_t)sizes[2]), "write");
            free(gv);
            nt_check(tg_sumsq_multi(sumsq, (const tg_tensor *const *)g, K), "sumsq_multi");
            params_of(ps, &multi, g);
            ok(tg_adamw_multi(ps, K, LR, B1, B2, EPS, 5, 1.0, sumsq, 1.0) == TG_OK, "a step with a %s gradient runs",
               bad ? "infinite" : "NaN");
            ok(sets_equal(&multi, &before), "a %s gradient norm makes the step a no-op (p, m, v, bf16 copies unchanged)",
               bad ? "infinite" : "NaN");
            set_free(&before);
        }
        set_free(&multi), set_free(&each);
    }

    /* capture and replay (CPU stream): replays equal eager steps, reading the gradients' current values */
    {
        struct set cap, eager;
        set_init(&cap), set_init(&eager);
        tg_stream *s;
        tg_graph *graph = NULL;
        nt_check(tg_stream_new(nt_cpu, "optim", &s), "stream");
        tg_stream *prev = tg_stream_set_current(s);
        params_of(ps, &cap, g);
        nt_check(tg_stream_begin_capture(s), "begin capture");
        tg_status a = tg_sumsq_multi(sumsq, (const tg_tensor *const *)g, K);
        tg_status b = tg_adamw_multi(ps, K, LR, B1, B2, EPS, 3, 1.0, sumsq, 0.5);
        nt_check(tg_stream_end_capture(s, &graph), "end capture");
        ok(a == TG_OK && b == TG_OK, "sumsq_multi and adamw_multi are capturable");
        is_int((long long)tg_graph_size(graph), 2, "the whole clipped step is 2 commands");
        ok(sets_equal(&cap, &eager), "capture did not run the step");
        for (int r = 0; r < 2; r++) {
            write_grads(g, 20 + r, r ? 100.0 : 1e-3); /* clipping inactive, then active */
            nt_check(tg_graph_replay(graph, s), "replay");
            nt_check(tg_stream_sync(s), "sync");
            nt_check(tg_sumsq_multi(sumsq, (const tg_tensor *const *)g, K), "sumsq_multi");
            params_of(ps, &eager, g);
            nt_check(tg_adamw_multi(ps, K, LR, B1, B2, EPS, 3, 1.0, sumsq, 0.5), "adamw_multi");
            nt_check(tg_stream_sync(s), "sync");
            ok(sets_equal(&cap, &eager), "replay %d (clipping %s) equals the eager step bit for bit", r + 1,
               r ? "active" : "inactive");
        }
        tg_stream_set_current(prev);
        tg_graph_free(graph);
        tg_stream_free(s);
        set_free(&cap), set_free(&eager);
    }

    /* bad input: errors name the parameter and the shapes */
    {
        struct set s;
        set_init(&s);
        params_of(ps, &s, g);
        struct tg_adamw_param bad[K];
        memcpy(bad, ps, sizeof bad);
        tg_tensor *b16 = nt_make(TG_BF16, NULL, 7), *wrong = nt_make(TG_F32, NULL, 8), *two = nt_make(TG_F32, NULL, 2);
        int64_t sh7 = 7;
        tg_tensor *ids = nt_ids(1, &sh7, (const int32_t[]){0, 1, 2, 3, 4, 5, 6});

        ok(tg_adamw_multi(ps, 0, LR, B1, B2, EPS, 1, 1.0, NULL, 0) == TG_EINVAL, "no parameters is an error");
        like(tg_last_error(), "needs at least one parameter", "... saying so");
        bad[1].p = b16;
        ok(tg_adamw_multi(bad, K, LR, B1, B2, EPS, 1, 1.0, NULL, 0) == TG_EINVAL, "a bf16 p is refused");
        like(tg_last_error(), "adamw_multi: param 2: p [7] bf16 must be f32", "... naming the parameter and p");
        bad[1] = ps[1], bad[1].v = wrong;
        ok(tg_adamw_multi(bad, K, LR, B1, B2, EPS, 1, 1.0, NULL, 0) == TG_EINVAL, "v of another shape is refused");
        like(tg_last_error(), "adamw_multi: param 2: p [7] f32 vs v [8] f32", "... naming the parameter, p and v");
        bad[1] = ps[1], bad[1].g = ids;
        ok(tg_adamw_multi(bad, K, LR, B1, B2, EPS, 1, 1.0, NULL, 0) == TG_EINVAL, "an i32 gradient is refused");
        like(tg_last_error(), "adamw_multi: param 2: p [7] f32 vs g [7] i32", "... naming the parameter and g");
        bad[1] = ps[1], bad[4].weight_decay = NAN;
        ok(tg_adamw_multi(bad, K, LR, B1, B2, EPS, 1, 1.0, NULL, 0) == TG_EINVAL, "a NaN weight decay is refused");
        like(tg_last_error(), "adamw_multi: param 5: weight_decay = nan", "... naming the parameter");
        ok(tg_adamw_multi(ps, K, LR, B1, B2, EPS, 0, 1.0, NULL, 0) == TG_EINVAL, "step 0 is refused");
        like(tg_last_error(), "adamw_multi: step = 0 must be >= 1", "... saying so");
        ok(tg_adamw_multi(ps, K, LR, B1, B2, EPS, 1, 1.0, two, 1.0) == TG_EINVAL, "a clip source of 2 elements is refused");
        like(tg_last_error(), "adamw_multi: clip_sumsq [2] f32 must hold one f32", "... naming it");
        ok(tg_adamw_multi(ps, K, LR, B1, B2, EPS, 1, 1.0, sumsq, 0.0) == TG_EINVAL, "max_norm 0 is refused");
        like(tg_last_error(), "max_norm = 0 must be > 0", "... saying so");
        const tg_tensor *ts[2] = {g[0], ids};
        ok(tg_sumsq_multi(sumsq, ts, 2) == TG_EINVAL, "sumsq_multi refuses an i32 tensor");
        like(tg_last_error(), "sumsq_multi: tensor 2: t [7] i32 must be f32 or bf16", "... naming it");
        ok(tg_sumsq_multi(b16, ts, 1) == TG_EINVAL, "sumsq_multi refuses a bf16 output");
        like(tg_last_error(), "sumsq_multi: out [7] bf16 must hold one f32", "... naming it");
        struct set after;
        set_init(&after);
        ok(sets_equal(&s, &after), "refused calls changed nothing");
        set_free(&after), set_free(&s);
        tg_tensor_free(b16), tg_tensor_free(wrong), tg_tensor_free(two), tg_tensor_free(ids);
    }

    for (int k = 0; k < K; k++) tg_tensor_free(g[k]);
    tg_tensor_free(sumsq);
    return done_testing();
}
