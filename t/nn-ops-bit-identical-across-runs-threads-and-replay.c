/* nn-ops-bit-identical-across-runs-threads-and-replay.c — the transformer ops give bit-identical results run after run, with 1 or several OpenMP threads, and when captured on a stream and replayed. */
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Sizes above the CPU backend's OpenMP threshold, so the parallel paths run. */
enum { N = 64, C = 512, B = 2, T = 64, H = 4, AC = 64, V = 300, CN = 256, CV = 128, P = 40000 };

struct io {
    tg_tensor *in[16];
    int nin;
    tg_tensor *out[40];
    const char *name[40];
    int nout;
} io;

static tg_tensor *in(tg_dtype dt, int ndim, const int64_t *shape, double lo, double hi)
{
    tg_tensor *t = nt_new(dt, ndim, shape, NULL);
    size_t n = (size_t)tg_tensor_numel(t);
    double *v = malloc(n * sizeof *v);
    nt_fill_uniform(v, n, lo, hi);
    nt_check(tg_tensor_write_f64(t, v, n), "write");
    free(v);
    return io.in[io.nin++] = t;
}

static tg_tensor *out(const char *name, tg_dtype dt, int ndim, const int64_t *shape)
{
    io.name[io.nout] = name;
    return io.out[io.nout++] = nt_new(dt, ndim, shape, NULL);
}

#define S(...) NT_NDIM(__VA_ARGS__), (const int64_t[]){__VA_ARGS__}

static tg_tensor *x, *g, *b, *dy, *ax, *ady, *qkv, *dout, *idx, *wte, *wpe, *edout, *logits, *tgt, *p0, *grad;
static tg_tensor *y, *mean, *rstd, *dx, *dg, *db, *ry, *rr, *rdx, *rdg, *gy, *gdx, *sy, *sdx, *by, *bdb, *ao, *al, *adq;
static tg_tensor *eo, *edte, *edpe, *loss, *losses, *dl, *p, *m, *v, *lowp;

static void setup(tg_dtype dt)
{
    memset(&io, 0, sizeof io);
    x = in(dt, S(N, C), -2, 2), g = in(dt, S(C), 0.5, 1.5), b = in(dt, S(C), -1, 1), dy = in(dt, S(N, C), -1, 1);
    ax = in(dt, S(N, 2 * C), -4, 4), ady = in(dt, S(N, 2 * C), -1, 1);
    qkv = in(dt, S(B, T, 3 * AC), -2, 2), dout = in(dt, S(B, T, AC), -1, 1);
    int32_t ids[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 7919) % 97; /* many repeats */
    idx = io.in[io.nin++] = nt_ids(2, (const int64_t[]){B, T}, ids);
    wte = in(dt, S(V, AC), -1, 1), wpe = in(dt, S(T, AC), -1, 1), edout = in(dt, S(B, T, AC), -1, 1);
    logits = in(dt, S(CN, CV), -4, 4);
    int32_t ts[CN];
    for (int i = 0; i < CN; i++) ts[i] = i % 9 == 0 ? -1 : (i * 31) % CV;
    tgt = io.in[io.nin++] = nt_ids(1, (const int64_t[]){CN}, ts);
    p0 = in(TG_F32, S(P), -1, 1), grad = in(dt, S(P), -1, 1);

    y = out("layernorm y", dt, S(N, C)), mean = out("mean", TG_F32, S(N)), rstd = out("rstd", TG_F32, S(N));
    dx = out("layernorm dx", dt, S(N, C)), dg = out("dgamma", TG_F32, S(C)), db = out("dbeta", TG_F32, S(C));
    ry = out("rmsnorm y", dt, S(N, C)), rr = out("rmsnorm rstd", TG_F32, S(N)), rdx = out("rmsnorm dx", dt, S(N, C));
    rdg = out("rmsnorm dgamma", dt, S(C));
    gy = out("gelu y", dt, S(N, 2 * C)), gdx = out("gelu dx", dt, S(N, 2 * C));
    sy = out("swiglu y", dt, S(N, C)), sdx = out("swiglu dx", dt, S(N, 2 * C));
    by = out("bias_add y", dt, S(N, C)), bdb = out("dbias", TG_F32, S(C));
    ao = out("attention out", dt, S(B, T, AC)), al = out("lse", TG_F32, S(B, H, T)), adq = out("dqkv", dt, S(B, T, 3 * AC));
    eo = out("embedding out", dt, S(B, T, AC)), edte = out("dwte", TG_F32, S(V, AC)), edpe = out("dwpe", dt, S(T, AC));
    loss = out("loss", TG_F32, S(2)), losses = out("losses", TG_F32, S(CN)), dl = out("dlogits", dt, S(CN, CV));
    p = out("adamw p", TG_F32, S(P)), m = out("adamw m", TG_F32, S(P)), v = out("adamw v", TG_F32, S(P));
    lowp = out("adamw p_lowp", TG_BF16, S(P));
}

/* Issues every op once (no allocation: capturable). */
static tg_status run_all(void)
{
    TG_TRY(tg_layernorm_forward(y, mean, rstd, x, g, b, 1e-5));
    TG_TRY(tg_layernorm_backward(dx, dy, x, g, mean, rstd));
    TG_TRY(tg_layernorm_backward_dw(dg, db, dy, x, mean, rstd, 0));
    TG_TRY(tg_rmsnorm_forward(ry, rr, x, g, 1e-5));
    TG_TRY(tg_rmsnorm_backward(rdx, dy, x, g, rr));
    TG_TRY(tg_rmsnorm_backward_dw(rdg, dy, x, rr, 0));
    TG_TRY(tg_gelu_forward(gy, ax));
    TG_TRY(tg_gelu_backward(gdx, ady, ax));
    TG_TRY(tg_swiglu_forward(sy, ax));
    TG_TRY(tg_swiglu_backward(sdx, dy, ax));
    TG_TRY(tg_copy(by, x));
    TG_TRY(tg_bias_add(by, b));
    TG_TRY(tg_bias_backward_dw(bdb, dy, 0));
    TG_TRY(tg_attention_forward(ao, al, qkv, H));
    TG_TRY(tg_attention_backward(adq, dout, qkv, ao, al, H));
    TG_TRY(tg_embedding_forward(eo, idx, wte, wpe));
    TG_TRY(tg_embedding_backward_dw(edte, edpe, edout, idx, 0));
    TG_TRY(tg_cross_entropy_forward(loss, losses, logits, tgt, -1));
    TG_TRY(tg_cross_entropy_backward(dl, logits, tgt, loss, 1.0, -1));
    TG_TRY(tg_copy(p, p0));
    TG_TRY(tg_fill(m, 0));
    TG_TRY(tg_fill(v, 0));
    for (int step = 1; step <= 2; step++) TG_TRY(tg_adamw_step(p, lowp, grad, m, v, 1e-3, 0.9, 0.95, 1e-8, 0.1, step, 1));
    return TG_OK;
}
enum { OPS_ISSUED = 24 }; /* 22 op calls + 2 AdamW steps */

/* Raw bytes of every output. */
static char **snapshot(void)
{
    char **s = malloc((size_t)io.nout * sizeof *s);
    for (int i = 0; i < io.nout; i++) {
        size_t n = tg_tensor_bytes(io.out[i]);
        s[i] = malloc(n);
        nt_check(tg_tensor_read(io.out[i], s[i], n), "read");
    }
    return s;
}

static void poison(void)
{
    for (int i = 0; i < io.nout; i++) nt_set(io.out[i], NAN);
}

/* Outputs equal to the reference snapshot, bit for bit; names the first that differs. */
static int same(char **ref, char **got, const char *what)
{
    for (int i = 0; i < io.nout; i++)
        if (memcmp(ref[i], got[i], tg_tensor_bytes(io.out[i])) != 0) {
            diag("%s: %s differs", what, io.name[i]);
            return 0;
        }
    return 1;
}

static void free_snap(char **s)
{
    for (int i = 0; i < io.nout; i++) free(s[i]);
    free(s);
}

static void check(tg_dtype dt)
{
    const char *dn = tg_dtype_name(dt);
    setup(dt);
    poison();
    ok(run_all() == TG_OK, "%s: all ops run", dn);
    char **ref = snapshot(), **s;
    int nan = 0;
    for (int i = 0; i < io.nout; i++) {
        double *vals = nt_get(io.out[i]);
        if (nt_any_nan(vals, (size_t)tg_tensor_numel(io.out[i]))) diag("%s has NaN", io.name[i]), nan = 1;
        free(vals);
    }
    ok(!nan, "%s: every output was written (no NaN left)", dn);

    poison();
    nt_check(run_all(), "run_all");
    ok(same(ref, s = snapshot(), "second run"), "%s: a second run is bit-identical", dn);
    free_snap(s);

#ifdef _OPENMP
    int threads = omp_get_max_threads();
    omp_set_num_threads(threads > 1 ? 1 : 3);
    poison();
    nt_check(run_all(), "run_all");
    ok(same(ref, s = snapshot(), "other thread count"), "%s: %d thread(s) instead of %d: bit-identical", dn,
       threads > 1 ? 1 : 3, threads);
    free_snap(s);
    omp_set_num_threads(threads);
#else
    ok(1, "# SKIP built without OpenMP");
#endif

    /* capture on a side stream, then replay */
    tg_stream *side = NULL;
    tg_graph *graph = NULL;
    nt_check(tg_stream_new(nt_cpu, "capture", &side), "tg_stream_new");
    tg_stream *prev = tg_stream_set_current(side);
    nt_check(tg_stream_begin_capture(side), "begin_capture");
    tg_status st = run_all();
    tg_status st2 = tg_stream_end_capture(side, &graph);
    ok(st == TG_OK && st2 == TG_OK, "%s: every op can be captured", dn);
    if (graph) {
        is_int((long long)tg_graph_size(graph), OPS_ISSUED, "%s: the graph holds one command per op", dn);
        poison();
        ok(tg_graph_replay(graph, side) == TG_OK, "%s: replay runs", dn);
        nt_check(tg_stream_sync(side), "sync");
        ok(same(ref, s = snapshot(), "replay"), "%s: replay is bit-identical to eager", dn);
        free_snap(s);
        poison();
        nt_check(tg_graph_replay(graph, side), "replay");
        ok(same(ref, s = snapshot(), "second replay"), "%s: a second replay is bit-identical too", dn);
        free_snap(s);
        tg_graph_free(graph);
    }
    tg_stream_set_current(prev);
    tg_stream_free(side);

    free_snap(ref);
    for (int i = 0; i < io.nin; i++) tg_tensor_free(io.in[i]);
    for (int i = 0; i < io.nout; i++) tg_tensor_free(io.out[i]);
}

int main(void)
{
    plan(NO_PLAN);
    check(TG_F32);
    check(TG_BF16);
    return done_testing();
}
