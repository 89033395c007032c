/* cuda-attention-wgmma-backward-matches-cpu.c — the CUDA attention backward (the wgmma kernels on a compute
 * capability 9.0 device of an sm_90 build, else the mma.sync ones) matches the CPU backend's dq, dk and dv at head
 * dims 64 and 128, for lengths of one row, odd lengths, lengths off the 64- and 128-row tiles, several batch and
 * head counts and large bf16 magnitudes; writes every element of dqkv; gives the same bits run to run; and the
 * mma.sync fallback (debug switch attention_mma_sync) matches the CPU and the wgmma result. At head dim 64 the
 * wgmma backward is one kernel with dQ summed across key blocks in a fixed order; its two-kernel form (debug
 * switch attention_two_pass) matches the CPU and it, and so does the one-pass kernel where the scratch holds the
 * f32 dQ rows of fewer (batch, head) pairs than there are (several launches). */
#include "backend/backend.h"
#include "core/debug.h"

#include "cuda-test-util.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef TG_HAVE_CUDA
int main(void) { skip_all("no CUDA device (built without CUDA)"); }
#else

#include "backend/cuda_impl.h" /* TG_CUDA_NN_SCRATCH */

int tg_cuda_attention_wgmma(void); /* kernels/attention.cu */

#define TOL 1e-2 /* relative L2 of bf16 gradients from bf16 operands, f32 sums */




/* The GPU backward into a poisoned (all bits set: NaN) dqkv, copied back to the host. */
static tg_status gpu_backward(uint16_t *dqkv_h, void *dqkv_d, const void *dout_d, const void *out_d, const void *qkv_d,
                              const float *lse_d, int64_t B, int64_t T, int64_t C, int H)
{
    const size_t nb = (size_t)(B * T * 3 * C) * 2;
    memset(dqkv_h, 0xff, nb);
    h2d(dqkv_d, dqkv_h, nb);
    struct tg_attention_backward_args a = {.dqkv = dqkv_d, .dout = dout_d, .out = out_d, .qkv = qkv_d, .lse = lse_d,
                                           .dt = TG_BF16, .b = B, .t = T, .c = C, .n_head = H};
    tg_status st = tg_backend_cuda.attention_backward(gs, &a);
    if (st == TG_OK && tg_backend_cuda.stream_sync(gs) != TG_OK) st = TG_EDEVICE;
    d2h(dqkv_h, dqkv_d, nb);
    return st;
}

/* ||got - ref|| / ||ref|| over columns [c0, c1) of two (B T, 3C) bf16 matrices; NaN elements counted apart. */
static double rel_l2_cols(const uint16_t *got, const uint16_t *ref, int64_t rows, int64_t C, int64_t c0, int64_t c1,
                          size_t *nans)
{
    double num = 0, den = 0;
    *nans = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = c0; e < c1; e++) {
            const size_t i = (size_t)(r * 3 * C + e);
            const double x = tg_bf16_to_f32(got[i]), y = tg_bf16_to_f32(ref[i]);
            if (isnan(x) || isnan(y)) {
                (*nans)++;
                continue;
            }
            num += (x - y) * (x - y), den += y * y;
        }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* dq, dk and dv each against the CPU reference */
static void check(const char *what, const char *path, const uint16_t *got, const uint16_t *ref, int64_t rows, int64_t C)
{
    static const char *name[3] = {"dq", "dk", "dv"};
    for (int p = 0; p < 3; p++) {
        size_t nans;
        const double r = rel_l2_cols(got, ref, rows, C, p * C, p * C + C, &nans);
        ok(nans == 0 && r <= TOL, "%s (%s): %s vs cpu relative L2 %.3g <= %g, every element written", what, path, name[p],
           r, TOL);
        if (nans) diag("%zu of %lld %s elements NaN", nans, (long long)(rows * C), name[p]);
    }
}
/* the two GPU paths against each other over the whole dqkv: where dq and dk are zero in exact arithmetic (T = 1:
 * dp = dd), each path's are rounding noise, and one part's norm would compare noise with noise */
static void check_paths(const char *what, const char *other, const uint16_t *wg, const uint16_t *ms, int64_t rows,
                        int64_t C)
{
    size_t nans;
    const double r = rel_l2_cols(wg, ms, rows, C, 0, 3 * C, &nans);
    ok(nans == 0 && r <= TOL, "%s: dqkv of wgmma vs %s relative L2 %.3g <= %g", what, other, r, TOL);
}

struct shape {
    int64_t b, t;
    int h, d;
    double sd_qk, sd_v; /* q and k drawn N(0, sd_qk), v N(0, sd_v); dout N(0, 1) */
};

static void run_shape(const struct shape *s, int wgmma)
{
    const int64_t B = s->b, T = s->t, H = s->h, C = H * s->d;
    const size_t nqkv = (size_t)(B * T * 3 * C), nout = (size_t)(B * T * C), nl = (size_t)(B * H * T);
    char what[160];
    snprintf(what, sizeof what, "backward B=%lld T=%lld H=%lld D=%d sd(q,k)=%g sd(v)=%g", (long long)B, (long long)T,
             (long long)H, s->d, s->sd_qk, s->sd_v);
    /* inputs; out and lse from the CPU forward, the same for both backends */
    uint16_t *qkv_c = cpu_alloc(nqkv * 2), *dout_c = cpu_alloc(nout * 2), *out_c = cpu_alloc(nout * 2),
             *dqkv_c = cpu_alloc(nqkv * 2);
    float *lse_c = cpu_alloc(nl * 4);
    for (size_t i = 0; i < nqkv; i++) {
        const int64_t col = (int64_t)(i % (size_t)(3 * C));
        qkv_c[i] = tg_f32_to_bf16((float)((col < 2 * C ? s->sd_qk : s->sd_v) * rnd_normal()));
    }
    for (size_t i = 0; i < nout; i++) dout_c[i] = tg_f32_to_bf16((float)rnd_normal());
    struct tg_attention_forward_args f = {
        .out = out_c, .lse = lse_c, .qkv = qkv_c, .dt = TG_BF16, .b = B, .t = T, .c = C, .n_head = (int)H};
    struct tg_attention_backward_args a = {.dqkv = dqkv_c, .dout = dout_c, .out = out_c, .qkv = qkv_c, .lse = lse_c,
                                           .dt = TG_BF16, .b = B, .t = T, .c = C, .n_head = (int)H};
    memset(dqkv_c, 0xff, nqkv * 2);
    if (tg_backend_cpu.attention_forward(cs, &f) != TG_OK || tg_backend_cpu.attention_backward(cs, &a) != TG_OK ||
        tg_backend_cpu.stream_sync(cs) != TG_OK)
        bail_out("cpu attention: %s", tg_last_error());

    void *qkv_d = gpu_alloc(nqkv * 2), *dout_d = gpu_alloc(nout * 2), *out_d = gpu_alloc(nout * 2),
         *dqkv_d = gpu_alloc(nqkv * 2);
    float *lse_d = gpu_alloc(nl * 4);
    h2d(qkv_d, qkv_c, nqkv * 2);
    h2d(dout_d, dout_c, nout * 2);
    h2d(out_d, out_c, nout * 2);
    h2d(lse_d, lse_c, nl * 4);
    uint16_t *g1 = malloc(nqkv * 2), *g2 = malloc(nqkv * 2);
    const char *path = wgmma ? "wgmma" : "mma.sync";
    /* twice on the default path, then the mma.sync path where the default is wgmma */
    tg_status st = gpu_backward(g1, dqkv_d, dout_d, out_d, qkv_d, lse_d, B, T, C, (int)H);
    if (!ok(st == TG_OK, "%s (%s): runs", what, path)) diag("%s: %s", tg_status_name(st), tg_last_error());
    check(what, path, g1, dqkv_c, B * T, C);
    st = gpu_backward(g2, dqkv_d, dout_d, out_d, qkv_d, lse_d, B, T, C, (int)H);
    ok(st == TG_OK && memcmp(g1, g2, nqkv * 2) == 0, "%s (%s): two runs bit-identical", what, path);
    if (wgmma) {
        tg_debug_set(TG_DEBUG_ATTENTION_MMA_SYNC, 1);
        ok(!tg_cuda_attention_wgmma(), "%s: attention_mma_sync takes the backward off wgmma", what);
        st = gpu_backward(g2, dqkv_d, dout_d, out_d, qkv_d, lse_d, B, T, C, (int)H);
        tg_debug_set(TG_DEBUG_ATTENTION_MMA_SYNC, 0);
        ok(st == TG_OK, "%s (mma.sync): runs", what);
        check(what, "mma.sync", g2, dqkv_c, B * T, C);
        check_paths(what, "mma.sync", g1, g2, B * T, C);
        tg_debug_set(TG_DEBUG_ATTENTION_TWO_PASS, 1);
        st = gpu_backward(g2, dqkv_d, dout_d, out_d, qkv_d, lse_d, B, T, C, (int)H);
        tg_debug_set(TG_DEBUG_ATTENTION_TWO_PASS, 0);
        ok(st == TG_OK, "%s (two-pass): runs", what);
        check(what, "two-pass", g2, dqkv_c, B * T, C);
        check_paths(what, "two-pass", g1, g2, B * T, C);
    }
    free(g1), free(g2);
    tg_backend_cpu.free(0, qkv_c), tg_backend_cpu.free(0, dout_c), tg_backend_cpu.free(0, out_c);
    tg_backend_cpu.free(0, dqkv_c), tg_backend_cpu.free(0, lse_c);
    tg_backend_cuda.free(0, qkv_d), tg_backend_cuda.free(0, dout_d), tg_backend_cuda.free(0, out_d);
    tg_backend_cuda.free(0, dqkv_d), tg_backend_cuda.free(0, lse_d);
}

/* B = 4, T = 2048, 16 heads of 64: the f32 dQ rows of the 64 (batch, head) pairs (32 MiB) exceed the backend's
 * 32 MiB scratch with the lse / dd rows, so the one-pass backward runs as two launches; against the two-kernel
 * form (each checked against the CPU above at smaller sizes), with out and lse from the GPU forward. */
static void run_launches(void)
{
    const int64_t B = 4, T = 2048, H = 16, C = H * 64;
    const size_t nqkv = (size_t)(B * T * 3 * C), nout = (size_t)(B * T * C), nl = (size_t)(B * H * T);
    const char *what = "backward B=4 T=2048 H=16 D=64 (two launches of the one-pass kernel)";
    const size_t need = (size_t)(B * H * T) * (64 + 2) * sizeof(float); /* f32 dQ rows + lse / dd rows */
    ok(need > TG_CUDA_NN_SCRATCH, "%s: needs %zu bytes of scratch, more than the backend's %zu (so more than one launch)",
       what, need, (size_t)TG_CUDA_NN_SCRATCH);
    uint16_t *qkv_h = malloc(nqkv * 2), *dout_h = malloc(nout * 2), *g1 = malloc(nqkv * 2), *g2 = malloc(nqkv * 2),
             *g3 = malloc(nqkv * 2);
    for (size_t i = 0; i < nqkv; i++) qkv_h[i] = tg_f32_to_bf16((float)rnd_normal());
    for (size_t i = 0; i < nout; i++) dout_h[i] = tg_f32_to_bf16((float)rnd_normal());
    void *qkv_d = gpu_alloc(nqkv * 2), *dout_d = gpu_alloc(nout * 2), *out_d = gpu_alloc(nout * 2),
         *dqkv_d = gpu_alloc(nqkv * 2);
    float *lse_d = gpu_alloc(nl * 4);
    h2d(qkv_d, qkv_h, nqkv * 2);
    h2d(dout_d, dout_h, nout * 2);
    struct tg_attention_forward_args f = {
        .out = out_d, .lse = lse_d, .qkv = qkv_d, .dt = TG_BF16, .b = B, .t = T, .c = C, .n_head = (int)H};
    if (tg_backend_cuda.attention_forward(gs, &f) != TG_OK) bail_out("cuda attention forward: %s", tg_last_error());
    tg_status st = gpu_backward(g1, dqkv_d, dout_d, out_d, qkv_d, lse_d, B, T, C, (int)H);
    if (!ok(st == TG_OK, "%s: runs", what)) diag("%s: %s", tg_status_name(st), tg_last_error());
    st = gpu_backward(g3, dqkv_d, dout_d, out_d, qkv_d, lse_d, B, T, C, (int)H);
    ok(st == TG_OK && memcmp(g1, g3, nqkv * 2) == 0, "%s: two runs bit-identical", what);
    tg_debug_set(TG_DEBUG_ATTENTION_TWO_PASS, 1);
    st = gpu_backward(g2, dqkv_d, dout_d, out_d, qkv_d, lse_d, B, T, C, (int)H);
    tg_debug_set(TG_DEBUG_ATTENTION_TWO_PASS, 0);
    ok(st == TG_OK, "%s (two-pass): runs", what);
    static const char *name[3] = {"dq", "dk", "dv"};
    for (int p = 0; p < 3; p++) {
        size_t nans;
        const double r = rel_l2_cols(g1, g2, B * T, C, p * C, p * C + C, &nans);
        ok(nans == 0 && r <= TOL, "%s: %s vs two-pass relative L2 %.3g <= %g, every element written", what, name[p], r,
           TOL);
    }
    free(qkv_h), free(dout_h), free(g1), free(g2), free(g3);
    tg_backend_cuda.free(0, qkv_d), tg_backend_cuda.free(0, dout_d), tg_backend_cuda.free(0, out_d);
    tg_backend_cuda.free(0, dqkv_d), tg_backend_cuda.free(0, lse_d);
}

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    plan(NO_PLAN);
    cuda_test_setup();
    const int wgmma = tg_cuda_attention_wgmma();
    diag("backward path on this device and build: %s",
         wgmma ? "wgmma (sm_90a)" : "mma.sync (no sm_90a image or not compute capability 9.0)");
    /* lengths: 1, odd, one 64-row tile, one under / over the 128-row blocks, several blocks; the large-magnitude
     * cases give scores in the hundreds (one key dominates a row) and v near 1e30 */
    static const struct shape shapes[] = {
        {1, 1, 1, 64, 1, 1},       {1, 1, 2, 128, 1, 1},      {2, 17, 3, 64, 1, 1},     {2, 17, 3, 128, 1, 1},
        {1, 64, 2, 64, 1, 1},      {2, 64, 1, 128, 1, 1},     {1, 127, 2, 64, 1, 1},    {1, 127, 2, 128, 1, 1},
        {3, 200, 2, 64, 1, 1},     {3, 200, 2, 128, 1, 1},    {1, 129, 1, 64, 1, 1},    {1, 193, 1, 128, 1, 1},
        {1, 1000, 2, 64, 1, 1},    {1, 1000, 1, 128, 1, 1},   {1, 2048, 1, 64, 1, 1},   {1, 2048, 1, 128, 1, 1},
        {2, 300, 1, 64, 20, 1e30}, {2, 300, 1, 128, 20, 1e30}, {1, 1000, 1, 128, 8, 3e4}, {1, 1000, 1, 64, 8, 3e4},
    };
    /* TG_ATT_SMALL=1: lengths up to 300 only (for the sanitizers, which are slow) */
    const int small = getenv("TG_ATT_SMALL") != NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!small || shapes[i].t <= 300) run_shape(&shapes[i], wgmma);
    if (wgmma && !small) run_launches();
    return done_testing();
}
#endif
