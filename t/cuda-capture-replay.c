/* cuda-capture-replay.c — CUDA stream capture: replay equals eager, uses the captured addresses, allocation rules hold. */
#include <tegraph.h>

#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const tg_device gpu = {TG_CUDA, 0};
#define M 48 /* x (M, K) @ w (K, N) */
#define K 64
#define N 40

static tg_tensor *tensor(tg_dtype dt, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, 2, shape, gpu, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    return t;
}

static void write_vals(tg_tensor *t, double phase)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = sin(0.37 * (double)i + phase);
    if (tg_tensor_write_f64(t, v, n) != TG_OK) bail_out("write: %s", tg_last_error());
    free(v);
}

static void poison(tg_tensor *t)
{
    if (tg_fill(t, NAN) != TG_OK) bail_out("fill: %s", tg_last_error());
}

static double *read_vals(const tg_tensor *t)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *v = malloc(n * sizeof *v);
    if (tg_tensor_read_f64(t, v, n) != TG_OK) bail_out("read: %s", tg_last_error());
    return v;
}

static size_t count_nan(const tg_tensor *t)
{
    double *v = read_vals(t);
    size_t c = 0;
    for (int64_t i = 0; i < tg_tensor_numel(t); i++) c += isnan(v[i]) != 0;
    free(v);
    return c;
}

/* Largest |got - want| (NaN counts as infinite). */
static double max_diff(const tg_tensor *t, const double *want)
{
    double *v = read_vals(t), m = 0;
    for (int64_t i = 0; i < tg_tensor_numel(t); i++) {
        double d = fabs(v[i] - want[i]);
        if (isnan(d)) d = INFINITY;
        if (d > m) m = d;
    }
    free(v);
    return m;
}

/* The work under test: GEMM (cuBLASLt), binary, axpby, cast and a copy.
 * tmp (M, N) f32, yb (M, N) bf16, y (M, N) f32. */
static tg_status work(tg_tensor *x, tg_tensor *w, tg_tensor *tmp, tg_tensor *yb, tg_tensor *y)
{
    tg_status st = tg_gemm(tmp, x, 0, w, 0, 1.0, 0.0); /* tmp = x @ w */
    if (st == TG_OK) st = tg_binary(TG_MUL, tmp, tmp, tmp); /* tmp = tmp^2 */
    if (st == TG_OK) st = tg_axpby(tmp, 0.5, tmp, 0.25); /* tmp = 0.75 tmp */
    if (st == TG_OK) st = tg_copy(yb, tmp);                  /* bf16 cast */
    if (st == TG_OK) st = tg_copy(y, yb);                    /* and back */
    return st;
}

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    plan(NO_PLAN);

    tg_stream *s = NULL, *s2 = NULL;
    if (tg_stream_new(gpu, "capture", &s) != TG_OK || tg_stream_new(gpu, "replay", &s2) != TG_OK)
        bail_out("stream: %s", tg_last_error());
    tg_stream_set_current(s);

    /* static buffers of the graph come from a pool made before capture */
    tg_pool *pool = NULL, *late = NULL;
    if (tg_pool_new(gpu, &pool) != TG_OK || tg_pool_new(gpu, &late) != TG_OK) bail_out("pool: %s", tg_last_error());
    tg_pool_push(pool);
    tg_tensor *x = tensor(TG_F32, M, K), *w = tensor(TG_F32, K, N), *y = tensor(TG_F32, M, N);
    tg_tensor *yb = tensor(TG_BF16, M, N), *tmp_eager = tensor(TG_F32, M, N), *other_x = tensor(TG_F32, M, K);
    tg_pool_pop(pool);

    /* eager reference */
    write_vals(x, 1.0);
    write_vals(w, 2.0);
    ok(work(x, w, tmp_eager, yb, y) == TG_OK, "eager work runs on the CUDA stream");
    double *eager = read_vals(y);
    ok(count_nan(y) == 0, "eager result has no NaN");

    /* ---- rules while capturing: the default allocator and host transfers refuse */
    ok(tg_stream_begin_capture(s) == TG_OK, "begin capture");
    ok(tg_stream_capturing(s) && tg_device_capturing(gpu), "stream and device report capturing");
    tg_tensor *t = NULL;
    int64_t shape[1] = {1000};
    tg_status st = tg_tensor_new(TG_F32, 1, shape, gpu, &t);
    is_int(st, TG_ECAPTURE, "tg_tensor_new from the default allocator during capture fails with TG_ECAPTURE");
    like(tg_last_error(), "capturing", "the message says why (%s)", tg_last_error());
    tg_tensor_free(t);
    double scratch[1];
    is_int(tg_tensor_read(x, scratch, sizeof(float)), TG_ECAPTURE, "tg_tensor_read during capture fails with TG_ECAPTURE");
    is_int(tg_stream_sync(s), TG_ECAPTURE, "tg_stream_sync during capture fails with TG_ECAPTURE");
    tg_graph *g0 = NULL;
    tg_stream_end_capture(s, &g0); /* may report the refused calls; the stream must be usable again */
    tg_graph_free(g0);
    ok(!tg_stream_capturing(s) && !tg_device_capturing(gpu), "capture ended");
    st = tg_tensor_new(TG_F32, 1, shape, gpu, &t);
    ok(st == TG_OK, "the default allocator works again after capture");
    tg_tensor_free(t);

    /* ---- capture the work; its temporary comes from a pool whose first block is allocated during capture */
    poison(y);
    ok(tg_stream_begin_capture(s) == TG_OK, "begin capture of the work");
    tg_tensor *tmp = NULL;
    tg_pool_push(late);
    int64_t tshape[2] = {M, N};
    st = tg_tensor_new(TG_F32, 2, tshape, gpu, &tmp);
    ok(st == TG_OK, "pool allocation during capture works (%s)", st == TG_OK ? "ok" : tg_last_error());
    tg_pool_pop(late);
    if (!tmp) bail_out("no pool tensor");
    size_t reserved = 0;
    tg_pool_stats(late, NULL, NULL, &reserved);
    ok(reserved > 0, "the pool reserved a block from the device during capture (%zu bytes)", reserved);
    ok(work(x, w, tmp, yb, y) == TG_OK, "the work is issued while capturing");
    tg_graph *g = NULL;
    st = tg_stream_end_capture(s, &g);
    ok(st == TG_OK && g, "end capture returns a graph (%s)", st == TG_OK ? "ok" : tg_last_error());
    if (!g) bail_out("no graph");
    ok(tg_graph_keep_pool(g, pool) == TG_OK && tg_graph_keep_pool(g, late) == TG_OK, "the graph keeps both pools");
    ok(tg_graph_size(g) >= 5, "the graph has a node per captured op at least (%zu nodes)", tg_graph_size(g));
    is_int((long long)count_nan(y), M * N, "capture did not run the work (y still poisoned)");

    /* ---- replay equals eager */
    ok(tg_graph_replay(g, s) == TG_OK, "replay");
    ok(tg_stream_sync(s) == TG_OK, "sync after replay");
    double d = max_diff(y, eager);
    ok(d == 0, "replay equals the eager result bit for bit (max |diff| %g)", d);

    /* ---- replay follows the captured addresses: new values in x change the result, other tensors do not */
    write_vals(x, 3.0);
    poison(y);
    ok(work(x, w, tmp_eager, yb, y) == TG_OK, "eager work on new x");
    double *eager2 = read_vals(y);
    ok(max_diff(y, eager) > 1e-3, "new x gives a different result");
    write_vals(other_x, 5.0);
    poison(y);
    ok(tg_graph_replay(g, s) == TG_OK && tg_stream_sync(s) == TG_OK, "replay after changing x");
    d = max_diff(y, eager2);
    ok(d == 0, "replay reads x where it was captured (max |diff| to eager %g)", d);

    /* ---- the graph outlives its capturing stream: replay on another stream */
    tg_stream_set_current(s2);
    tg_stream_free(s);
    poison(y);
    ok(tg_graph_replay(g, s2) == TG_OK && tg_stream_sync(s2) == TG_OK, "replay on another stream after freeing the capturing one");
    d = max_diff(y, eager2);
    ok(d == 0, "that replay still equals eager (max |diff| %g)", d);
    ok(tg_graph_replay(g, s2) == TG_OK && tg_graph_replay(g, s2) == TG_OK && tg_stream_sync(s2) == TG_OK,
       "back-to-back replays");
    ok(max_diff(y, eager2) == 0, "and give the same result");

    tg_tensor_free(tmp);
    tg_tensor_free(x), tg_tensor_free(w), tg_tensor_free(y), tg_tensor_free(yb), tg_tensor_free(tmp_eager);
    tg_tensor_free(other_x);
    tg_graph_free(g);
    tg_pool_release(pool);
    tg_pool_release(late);
    tg_stream_free(s2);
    free(eager), free(eager2);
    return done_testing();
}
