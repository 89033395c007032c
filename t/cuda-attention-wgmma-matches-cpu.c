/* cuda-attention-wgmma-matches-cpu.c — the CUDA attention forward (the wgmma kernels on a compute capability 9.0
 * device of an sm_90 build, else the mma.sync ones) matches the CPU backend's out and lse at head dims 64 and 128,
 * for odd lengths, lengths off the tiles, several batch and head counts and large bf16 magnitudes; writes every
 * output; gives the same bits run to run; and the mma.sync fallback (debug switch attention_mma_sync) matches too. */
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

int tg_cuda_attention_wgmma(void); /* kernels/attention.cu */




/* The GPU forward into poisoned (all bits set: NaN) out and lse, copied back to the host. */
static tg_status gpu_forward(void *out_h, float *lse_h, void *out_d, float *lse_d, const void *qkv_d, int64_t B,
                             int64_t T, int64_t C, int H)
{
    const size_t ob = (size_t)(B * T * C) * 2, lb = (size_t)(B * H * T) * 4;
    memset(out_h, 0xff, ob);
    memset(lse_h, 0xff, lb);
    h2d(out_d, out_h, ob);
    h2d(lse_d, lse_h, lb);
    struct tg_attention_forward_args a = {
        .out = out_d, .lse = lse_d, .qkv = qkv_d, .dt = TG_BF16, .b = B, .t = T, .c = C, .n_head = H};
    tg_status st = tg_backend_cuda.attention_forward(gs, &a);
    if (st == TG_OK && tg_backend_cuda.stream_sync(gs) != TG_OK) st = TG_EDEVICE;
    d2h(out_h, out_d, ob);
    d2h(lse_h, lse_d, lb);
    return st;
}

/* ||got - ref|| / ||ref|| over n values (bf16 when bf16, else f32); unwritten (NaN) elements counted apart. */
static double rel_l2(const void *got, const void *ref, size_t n, int bf16, size_t *nans)
{
    double num = 0, den = 0;
    *nans = 0;
    for (size_t i = 0; i < n; i++) {
        double x = bf16 ? tg_bf16_to_f32(((const uint16_t *)got)[i]) : ((const float *)got)[i];
        double y = bf16 ? tg_bf16_to_f32(((const uint16_t *)ref)[i]) : ((const float *)ref)[i];
        if (isnan(x) || isnan(y)) {
            (*nans)++;
            continue;
        }
        num += (x - y) * (x - y), den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int check(const char *what, const char *path, const void *out_g, const float *lse_g, const void *out_c,
                 const float *lse_c, size_t nout, size_t nl)
{
    size_t n1, n2;
    const double ro = rel_l2(out_g, out_c, nout, 1, &n1), rl = rel_l2(lse_g, lse_c, nl, 0, &n2);
    int r = ok(n1 == 0 && ro <= 1e-2, "%s (%s): out relative L2 %.3g <= 1e-2, every element written", what, path, ro);
    if (n1) diag("%zu of %zu out elements NaN", n1, nout);
    r &= ok(n2 == 0 && rl <= 1e-4, "%s (%s): lse relative L2 %.3g <= 1e-4, every element written", what, path, rl);
    if (n2) diag("%zu of %zu lse elements NaN", n2, nl);
    return r;
}

struct shape {
    int64_t b, t;
    int h, d;
    double sd_qk, sd_v; /* q and k drawn N(0, sd_qk), v N(0, sd_v) */
};

static void run_shape(const struct shape *s, int wgmma)
{
    const int64_t B = s->b, T = s->t, H = s->h, C = H * s->d;
    const size_t nqkv = (size_t)(B * T * 3 * C), nout = (size_t)(B * T * C), nl = (size_t)(B * H * T);
    char what[160];
    snprintf(what, sizeof what, "forward B=%lld T=%lld H=%lld D=%d sd(q,k)=%g sd(v)=%g", (long long)B, (long long)T,
             (long long)H, s->d, s->sd_qk, s->sd_v);
    uint16_t *qkv_h = malloc(nqkv * 2);
    for (size_t i = 0; i < nqkv; i++) {
        const int64_t col = (int64_t)(i % (size_t)(3 * C));
        const double sd = col < 2 * C ? s->sd_qk : s->sd_v;
        qkv_h[i] = tg_f32_to_bf16((float)(sd * rnd_normal()));
    }
    /* the CPU reference */
    void *qkv_c = cpu_alloc(nqkv * 2), *out_c = cpu_alloc(nout * 2);
    float *lse_c = cpu_alloc(nl * 4);
    memcpy(qkv_c, qkv_h, nqkv * 2);
    struct tg_attention_forward_args a = {
        .out = out_c, .lse = lse_c, .qkv = qkv_c, .dt = TG_BF16, .b = B, .t = T, .c = C, .n_head = (int)H};
    if (tg_backend_cpu.attention_forward(cs, &a) != TG_OK || tg_backend_cpu.stream_sync(cs) != TG_OK)
        bail_out("cpu attention: %s", tg_last_error());
    /* CUDA: twice on the default path, then the mma.sync path where the default is wgmma */
    void *qkv_d = gpu_alloc(nqkv * 2), *out_d = gpu_alloc(nout * 2);
    float *lse_d = gpu_alloc(nl * 4);
    h2d(qkv_d, qkv_h, nqkv * 2);
    void *out1 = malloc(nout * 2), *out2 = malloc(nout * 2);
    float *lse1 = malloc(nl * 4), *lse2 = malloc(nl * 4);
    const char *path = wgmma ? "wgmma" : "mma.sync";
    tg_status st = gpu_forward(out1, lse1, out_d, lse_d, qkv_d, B, T, C, (int)H);
    if (!ok(st == TG_OK, "%s (%s): runs", what, path)) diag("%s: %s", tg_status_name(st), tg_last_error());
    check(what, path, out1, lse1, out_c, lse_c, nout, nl);
    st = gpu_forward(out2, lse2, out_d, lse_d, qkv_d, B, T, C, (int)H);
    ok(st == TG_OK && memcmp(out1, out2, nout * 2) == 0 && memcmp(lse1, lse2, nl * 4) == 0,
       "%s (%s): two runs bit-identical", what, path);
    if (wgmma) {
        tg_debug_set(TG_DEBUG_ATTENTION_MMA_SYNC, 1);
        ok(!tg_cuda_attention_wgmma(), "%s: attention_mma_sync takes the forward off wgmma", what);
        st = gpu_forward(out2, lse2, out_d, lse_d, qkv_d, B, T, C, (int)H);
        tg_debug_set(TG_DEBUG_ATTENTION_MMA_SYNC, 0);
        ok(st == TG_OK, "%s (mma.sync): runs", what);
        check(what, "mma.sync", out2, lse2, out_c, lse_c, nout, nl);
    }
    free(out1), free(out2), free(lse1), free(lse2), free(qkv_h);
    tg_backend_cpu.free(0, qkv_c), tg_backend_cpu.free(0, out_c), tg_backend_cpu.free(0, lse_c);
    tg_backend_cuda.free(0, qkv_d), tg_backend_cuda.free(0, out_d), tg_backend_cuda.free(0, lse_d);
}

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    plan(NO_PLAN);
    cuda_test_setup();
    const int wgmma = tg_cuda_attention_wgmma();
    diag("forward path on this device and build: %s", wgmma ? "wgmma (sm_90a)" : "mma.sync (no sm_90a image or not compute capability 9.0)");
    /* lengths: 1, odd, one under / over the 128- and 192-query blocks and the 128-key tiles, several tiles;
     * the large-magnitude cases give scores in the hundreds (one key dominates a row) and v near 1e30 */
    static const struct shape shapes[] = {
        {1, 1, 1, 64, 1, 1},      {1, 1, 2, 128, 1, 1},     {2, 17, 3, 64, 1, 1},    {2, 17, 3, 128, 1, 1},
        {1, 127, 2, 64, 1, 1},    {1, 127, 2, 128, 1, 1},   {3, 200, 2, 64, 1, 1},   {3, 200, 2, 128, 1, 1},
        {1, 193, 1, 64, 1, 1},    {1, 129, 1, 128, 1, 1},   {1, 384, 2, 64, 1, 1},   {1, 256, 2, 128, 1, 1},
        {1, 1000, 2, 64, 1, 1},   {1, 1000, 2, 128, 1, 1},  {2, 300, 1, 64, 20, 1e30}, {2, 300, 1, 128, 20, 1e30},
        {1, 1000, 1, 128, 8, 3e4}, {1, 1000, 1, 64, 8, 3e4},
    };
    /* TG_ATT_SMALL=1: lengths up to 300 only (for the sanitizers, which are slow) */
    const int small = getenv("TG_ATT_SMALL") != NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!small || shapes[i].t <= 300) run_shape(&shapes[i], wgmma);
    return done_testing();
}
#endif
