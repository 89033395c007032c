/* capture-replay-matches-eager.c — CPU stream capture records instead of running; replay equals eager and uses the captured addresses. */
#include <tegraph.h>

#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const tg_device cpu = {TG_CPU, 0};
#define N 257 /* elements of the vectors */
#define M 9   /* GEMM: (M, M) @ (M, M) */

static tg_tensor *tensor(tg_dtype dt, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, d1 ? 2 : 1, shape, cpu, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    return t;
}

static void write_vals(tg_tensor *t, double scale)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = scale * sin(0.37 * (double)i + 1.0);
    if (tg_tensor_write_f64(t, v, n) != TG_OK) bail_out("write: %s", tg_last_error());
    free(v);
}

/* Raw bytes of a tensor (caller frees). */
static void *bytes_of(const tg_tensor *t)
{
    size_t n = (size_t)tg_tensor_numel(t) * tg_dtype_size(tg_tensor_dtype(t));
    void *p = malloc(n ? n : 1);
    if (tg_tensor_read(t, p, n) != TG_OK) bail_out("read: %s", tg_last_error());
    return p;
}

static int same_bytes(const tg_tensor *a, const tg_tensor *b)
{
    size_t n = (size_t)tg_tensor_numel(a) * tg_dtype_size(tg_tensor_dtype(a));
    void *x = bytes_of(a), *y = bytes_of(b);
    int same = n == (size_t)tg_tensor_numel(b) * tg_dtype_size(tg_tensor_dtype(b)) && memcmp(x, y, n) == 0;
    free(x), free(y);
    return same;
}

static int all_equal(const tg_tensor *t, double want)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *v = malloc(n * sizeof *v);
    int ok_ = tg_tensor_read_f64(t, v, n) == TG_OK;
    for (size_t i = 0; ok_ && i < n; i++) ok_ = v[i] == want;
    free(v);
    return ok_;
}

/* The work under test: 6 ops (binary x2, axpby, gemm, cast, copy). */
struct work {
    tg_tensor *x, *y, *a, *b; /* inputs: (N) (N) (M, M) (M, M) */
    tg_tensor *t1, *t2, *out, *c, *out_bf16, *out_copy; /* outputs */
};

static struct work work_new(void)
{
    struct work w = {tensor(TG_F32, N, 0), tensor(TG_F32, N, 0), tensor(TG_F32, M, M), tensor(TG_F32, M, M),
                     tensor(TG_F32, N, 0), tensor(TG_F32, N, 0), tensor(TG_F32, N, 0), tensor(TG_F32, M, M),
                     tensor(TG_BF16, N, 0), tensor(TG_F32, N, 0)};
    write_vals(w.x, 1.0), write_vals(w.y, -0.5), write_vals(w.a, 2.0), write_vals(w.b, 0.25);
    tg_tensor *outs[] = {w.t1, w.t2, w.out, w.c, w.out_bf16, w.out_copy};
    for (int i = 0; i < 6; i++) tg_fill(outs[i], -1.0); /* sentinel */
    return w;
}

static tg_status work_issue(struct work *w)
{
    tg_status st;
    if ((st = tg_binary(TG_ADD, w->t1, w->x, w->y)) != TG_OK) return st;
    if ((st = tg_binary(TG_MUL, w->t2, w->t1, w->x)) != TG_OK) return st;
    if ((st = tg_axpby(w->out, 2.0, w->t2, 0.0)) != TG_OK) return st;
    if ((st = tg_gemm(w->c, w->a, 0, w->b, 1, 1.0, 0.0)) != TG_OK) return st;
    if ((st = tg_copy(w->out_bf16, w->out)) != TG_OK) return st;
    return tg_copy(w->out_copy, w->out);
}

static void work_free(struct work *w)
{
    tg_tensor *all[] = {w->x, w->y, w->a, w->b, w->t1, w->t2, w->out, w->c, w->out_bf16, w->out_copy};
    for (int i = 0; i < 10; i++) tg_tensor_free(all[i]);
}

static int work_same(struct work *p, struct work *q)
{
    return same_bytes(p->t1, q->t1) && same_bytes(p->t2, q->t2) && same_bytes(p->out, q->out) &&
           same_bytes(p->c, q->c) && same_bytes(p->out_bf16, q->out_bf16) && same_bytes(p->out_copy, q->out_copy);
}

int main(void)
{
    plan(NO_PLAN);
    tg_stream *s = NULL, *def = tg_stream_current(cpu);
    tg_graph *g = NULL;
    ok(tg_stream_new(cpu, "capture-side", &s) == TG_OK, "a named CPU stream");
    if (!s) bail_out("%s", tg_last_error());
    tg_stream_set_current(s);

    /* Eager reference. */
    struct work eager = work_new(), cap = work_new();
    ok(work_issue(&eager) == TG_OK, "eager work runs");

    /* Capture: nothing runs. */
    ok(tg_stream_begin_capture(s) == TG_OK, "begin capture");
    ok(tg_stream_capturing(s) && tg_device_capturing(cpu), "the stream and the device report capturing");
    ok(!tg_stream_capturing(def), "the default stream does not");
    ok(work_issue(&cap) == TG_OK, "ops issue fine while capturing");
    is_int(tg_stream_begin_capture(s), TG_ECAPTURE, "a second begin_capture on the same stream is refused");
    ok(tg_stream_end_capture(s, &g) == TG_OK && g != NULL, "end capture gives a graph");
    ok(!tg_stream_capturing(s) && !tg_device_capturing(cpu), "capture is over");
    is_int((long long)tg_graph_size(g), 6, "the graph holds the 6 issued commands");
    ok(all_equal(cap.t1, -1) && all_equal(cap.out, -1) && all_equal(cap.c, -1) && all_equal(cap.out_copy, -1) &&
           all_equal(cap.out_bf16, -1),
       "nothing ran during capture: every output still holds its sentinel");

    /* Replay = eager. */
    ok(tg_graph_replay(g, s) == TG_OK, "replay");
    ok(work_same(&eager, &cap), "replay gives bitwise the eager results (binary, axpby, gemm, cast, copy)");

    /* Replay reads the captured addresses: new input contents flow through. */
    write_vals(eager.x, 3.0), write_vals(cap.x, 3.0);
    write_vals(eager.a, -1.0), write_vals(cap.a, -1.0);
    ok(work_issue(&eager) == TG_OK, "eager again with new inputs");
    ok(!work_same(&eager, &cap), "before the replay the outputs are stale");
    ok(tg_graph_replay(g, s) == TG_OK && work_same(&eager, &cap), "replay after changing the inputs follows them");
    ok(tg_graph_replay(g, tg_stream_current(cpu)) == TG_OK, "replay works on the default stream too");
    tg_stream_set_current(s);

    /* Replay many times: each replay runs each command exactly once. */
    tg_tensor *acc = tensor(TG_F32, 5, 0), *one = tensor(TG_F32, 5, 0);
    tg_graph *g2 = NULL;
    tg_fill(acc, 0), tg_fill(one, 1);
    ok(tg_stream_begin_capture(s) == TG_OK && tg_axpby(acc, 1.0, one, 1.0) == TG_OK &&
           tg_stream_end_capture(s, &g2) == TG_OK,
       "capture acc += 1");
    int rep_ok = 1;
    for (int i = 0; i < 1000; i++) rep_ok &= tg_graph_replay(g2, s) == TG_OK;
    ok(rep_ok && all_equal(acc, 1000), "1000 replays add exactly 1000");
    tg_graph_free(g2);

    /* Random numbers drawn at capture replay as the same numbers (the host reserved the counters once). */
    tg_tensor *r = tensor(TG_F32, 64, 0), *r0 = tensor(TG_F32, 64, 0);
    g2 = NULL;
    ok(tg_stream_begin_capture(s) == TG_OK && tg_randn(r, 0, 1) == TG_OK && tg_stream_end_capture(s, &g2) == TG_OK,
       "capture a randn");
    ok(tg_graph_replay(g2, s) == TG_OK && tg_copy(r0, r) == TG_OK && tg_fill(r, 0) == TG_OK &&
           tg_graph_replay(g2, s) == TG_OK && same_bytes(r, r0) && !all_equal(r, 0),
       "two replays of a captured randn give the same numbers");
    tg_graph_free(g2);

    /* Graph memory comes from a pushed pool; the device allocator refuses. */
    tg_pool *pool = NULL;
    tg_tensor *bad = NULL, *pooled = NULL;
    int64_t shp[1] = {100};
    ok(tg_pool_new(cpu, &pool) == TG_OK, "a graph pool");
    ok(tg_stream_begin_capture(s) == TG_OK, "begin capture");
    ok(tg_pool_push(pool) == TG_OK, "push the pool");
    ok(tg_tensor_new(TG_F32, 1, shp, cpu, &pooled) == TG_OK && pooled != NULL, "allocating from the pushed pool works");
    tg_pool_pop(pool);
    ok(pooled && tg_fill(pooled, 7) == TG_OK, "ops on the pool tensor are captured");
    g2 = NULL;
    ok(tg_stream_end_capture(s, &g2) == TG_OK && g2, "end capture");
    ok(g2 && tg_graph_keep_pool(g2, pool) == TG_OK, "the graph keeps the pool");
    tg_pool_release(pool); /* the graph keeps it */
    ok(pooled && !all_equal(pooled, 7), "the pool tensor is not filled before replay");
    ok(g2 && tg_graph_replay(g2, s) == TG_OK && all_equal(pooled, 7), "the pool tensor is filled at replay");
    tg_tensor_free(pooled);
    tg_graph_free(g2);

    ok(tg_stream_begin_capture(s) == TG_OK, "begin capture");
    is_int(tg_tensor_new(TG_F32, 1, shp, cpu, &bad), TG_ECAPTURE, "allocating from the device allocator fails");
    like(tg_last_error(), "capture-side", "the message names the capturing stream");
    ok(bad == NULL, "and gives no tensor");
    float host[N];
    double sum = 0;
    is_int(tg_tensor_read(cap.out, host, sizeof host), TG_ECAPTURE, "tg_tensor_read while capturing fails");
    is_int(tg_tensor_write(cap.out, host, sizeof host), TG_ECAPTURE, "tg_tensor_write while capturing fails");
    is_int(tg_sum(cap.out, &sum), TG_ECAPTURE, "tg_sum (a host read) while capturing fails");
    g2 = NULL;
    tg_stream_end_capture(s, &g2); /* whether a refused host read breaks the capture is not asserted */
    tg_graph_free(g2);
    ok(!tg_stream_capturing(s), "capture ended");

    /* An op error while capturing breaks the capture. */
    tg_tensor *small = tensor(TG_F32, 3, 0);
    g2 = NULL;
    ok(tg_stream_begin_capture(s) == TG_OK, "begin capture");
    ok(tg_binary(TG_ADD, cap.out, cap.x, cap.y) == TG_OK, "a good op");
    is_int(tg_binary(TG_ADD, cap.out, cap.x, small), TG_EINVAL, "a bad op fails at once");
    tg_status st = tg_stream_end_capture(s, &g2);
    ok(st != TG_OK && g2 == NULL, "end_capture fails and gives no graph");
    like(tg_last_error(), "capture-side", "its message names the stream");
    like(tg_last_error(), "[3]", "and the op's error");
    ok(!tg_stream_capturing(s) && !tg_device_capturing(cpu), "the stream no longer captures");
    ok(tg_binary(TG_ADD, cap.out, cap.x, cap.y) == TG_OK, "eager ops work again");

    /* Misuse. */
    is_int(tg_stream_end_capture(s, &g2), TG_ESTATE, "end_capture without a capture is refused");
    ok(tg_stream_begin_capture(s) == TG_OK, "begin capture");
    ok(tg_graph_replay(g, s) != TG_OK, "replaying onto a capturing stream is refused");
    tg_stream_end_capture(s, &g2);
    tg_graph_free(g2);

    tg_stream_set_current(def);
    tg_graph_free(g);
    tg_tensor_free(acc), tg_tensor_free(one), tg_tensor_free(r), tg_tensor_free(r0), tg_tensor_free(small);
    work_free(&eager), work_free(&cap);
    tg_stream_free(s);
    return done_testing();
}
