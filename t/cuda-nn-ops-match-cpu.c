/* cuda-nn-ops-match-cpu.c — every transformer kernel on CUDA matches the CPU reference on the same random inputs, writes every output, and is bit-identical run to run. */
#include "backend/backend.h"

#include "cuda-test-util.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef TG_HAVE_CUDA
int main(void) { skip_all("no CUDA device (built without CUDA)"); }
#else

/* ------------------------------------------------------------------ the same bytes on both backends */
/* The GPU copy = the CPU copy (for inputs computed by the CPU reference). */
static void pair_from_cpu(struct pair *p)
{
    if (p->bytes) h2d(p->g, p->c, p->bytes);
}

/* n values N(mean, sd) of dtype dt (f32 or bf16) on both backends. */
static struct pair rnd_pair(tg_dtype dt, size_t n, double mean, double sd)
{
    struct pair p = pair_new(n * tg_dtype_size(dt));
    void *h = malloc(p.bytes);
    for (size_t i = 0; i < n; i++) {
        float v = (float)(mean + sd * rnd_normal());
        if (dt == TG_F32) ((float *)h)[i] = v;
        else ((uint16_t *)h)[i] = tg_f32_to_bf16(v);
    }
    pair_set(&p, h);
    free(h);
    return p;
}

static struct pair uniform_f32(size_t n, double lo, double hi)
{
    struct pair p = pair_new(n * 4);
    float *h = malloc(p.bytes);
    for (size_t i = 0; i < n; i++) h[i] = (float)(lo + (hi - lo) * rnd_unit());
    pair_set(&p, h);
    free(h);
    return p;
}

/* ------------------------------------------------------------------ one case: CPU vs CUDA, then CUDA twice */

/* An output: reset before each run to `init` (host bytes) or to NaN (all bits set) when init is NULL. */
struct out {
    struct pair *p;
    tg_dtype dt;
    size_t n;
    const void *init;
    const char *name;
};

static void out_reset(const struct out *o, int cpu_too)
{
    void *h = malloc(o->p->bytes);
    if (o->init) memcpy(h, o->init, o->p->bytes);
    else memset(h, 0xff, o->p->bytes);
    if (cpu_too) memcpy(o->p->c, h, o->p->bytes);
    if (o->p->bytes) h2d(o->p->g, h, o->p->bytes);
    free(h);
}

/* The host bytes of a pair's CPU copy (an init for in-place outputs); caller frees. */
static void *init_of(const struct pair *p)
{
    void *h = malloc(p->bytes);
    memcpy(h, p->c, p->bytes);
    return h;
}

typedef tg_status (*issue_fn)(int on_gpu, const void *args);

#define ISSUE_FN(op)                                                                                   \
    static tg_status issue_##op(int on_gpu, const void *a)                                             \
    {                                                                                                  \
        return on_gpu ? tg_backend_cuda.op(gs, a) : tg_backend_cpu.op(cs, a);                          \
    }
ISSUE_FN(layernorm_forward)
ISSUE_FN(layernorm_backward)
ISSUE_FN(layernorm_backward_dw)
ISSUE_FN(rmsnorm_forward)
ISSUE_FN(rmsnorm_backward)
ISSUE_FN(rmsnorm_backward_dw)
ISSUE_FN(gelu_forward)
ISSUE_FN(gelu_backward)
ISSUE_FN(swiglu_forward)
ISSUE_FN(swiglu_backward)
ISSUE_FN(bias_add)
ISSUE_FN(bias_backward_dw)
ISSUE_FN(attention_forward)
ISSUE_FN(attention_backward)
ISSUE_FN(embedding_forward)
ISSUE_FN(embedding_backward_dw)
ISSUE_FN(cross_entropy_forward)
ISSUE_FN(cross_entropy_backward)
ISSUE_FN(cross_entropy_fused)
ISSUE_FN(adamw)
ISSUE_FN(adamw_multi)
ISSUE_FN(sumsq_multi)

static void run_case(const char *what, issue_fn fn, const void *args_cpu, const void *args_gpu, const struct out *o,
                     int no, tg_dtype op_dt)
{
    char w[256];
    for (int i = 0; i < no; i++) out_reset(&o[i], 1);
    tg_status sc = fn(0, args_cpu), sg = fn(1, args_gpu);
    sync_both();
    if (sc != TG_OK || sg != TG_OK) {
        ok(0, "%s: cpu %s, cuda %s: %s", what, tg_status_name(sc), tg_status_name(sg), tg_last_error());
        return;
    }
    for (int i = 0; i < no; i++) {
        snprintf(w, sizeof w, "%s: %s", what, o[i].name);
        check_close(o[i].p, o[i].dt, o[i].n, tol_of(op_dt == TG_BF16 ? TG_BF16 : o[i].dt), w);
    }
    void *snap[8];
    for (int i = 0; i < no; i++) {
        snap[i] = pair_gpu(o[i].p);
        out_reset(&o[i], 0);
    }
    sg = fn(1, args_gpu);
    if (sg == TG_OK && tg_backend_cuda.stream_sync(gs) != TG_OK) sg = TG_EDEVICE;
    int same = sg == TG_OK;
    for (int i = 0; i < no; i++) {
        void *again = pair_gpu(o[i].p);
        same = same && memcmp(again, snap[i], o[i].p->bytes) == 0;
        free(again);
        free(snap[i]);
    }
    ok(same, "%s: two CUDA runs bit-identical", what);
}

/* A[0] for the CPU, A[1] for CUDA: the pointer of pair p on backend g. */
#define ON(p) (g ? (p).g : (p).c)
#define ON_OPT(p, cond) ((cond) ? ON(p) : NULL)

static const tg_dtype dts[] = {TG_F32, TG_BF16};

/* ------------------------------------------------------------------ norms */
static void test_norms(void)
{
    /* the kernels' paths: 16-byte vectors (c a multiple of 8 bf16 / 4 f32) with 32..512 threads a row, elements
     * (c = 201, 771, 100 in bf16), rows too wide for registers (20000; 3001 on the element path); n not a
     * multiple of the rows per block; GPT-2's 768 and large 4096, 8192 */
    const int64_t shapes[][2] = {{67, 200}, {33, 1024}, {300, 96}, {17, 201}, {70, 768},  {9, 4096},
                                 {6, 8192}, {5, 771},   {13, 100}, {3, 20000}, {4, 3001}};
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < nshapes; s++) {
            tg_dtype dt = dts[d];
            int64_t n = shapes[s][0], c = shapes[s][1];
            size_t nc = (size_t)(n * c);
            int with_beta = s % 3 != 1;
            char what[160];
            struct pair x = rnd_pair(dt, nc, 0.5, 2.0), gamma = rnd_pair(dt, (size_t)c, 1.0, 0.5),
                        beta = rnd_pair(dt, (size_t)c, 0.0, 1.0), y = pair_new(nc * tg_dtype_size(dt)),
                        mean = pair_new((size_t)n * 4), rstd = pair_new((size_t)n * 4);
            /* layernorm forward, then in place (y aliases x) */
            for (int alias = 0; alias < 2; alias++) {
                struct pair *yy = alias ? &x : &y;
                void *xinit = alias ? init_of(&x) : NULL;
                struct tg_layernorm_forward_args a[2];
                for (int g = 0; g < 2; g++)
                    a[g] = (struct tg_layernorm_forward_args){.y = ON(*yy), .mean = ON(mean), .rstd = ON(rstd), .x = ON(x),
                                                              .gamma = ON(gamma), .beta = ON_OPT(beta, with_beta),
                                                              .dt = dt, .n = n, .c = c, .eps = 1e-5f};
                struct out o[] = {{yy, dt, nc, xinit, "y"}, {&mean, TG_F32, (size_t)n, NULL, "mean"},
                                  {&rstd, TG_F32, (size_t)n, NULL, "rstd"}};
                snprintf(what, sizeof what, "layernorm_forward %s [%lld,%lld]%s%s", tg_dtype_name(dt), (long long)n,
                         (long long)c, with_beta ? "" : " no beta", alias ? " y aliases x" : "");
                run_case(what, issue_layernorm_forward, &a[0], &a[1], o, 3, dt);
                if (alias) { /* x is y now: restore x on both */
                    pair_set(&x, xinit);
                    free(xinit);
                }
            }
            /* rmsnorm forward */
            {
                struct tg_rmsnorm_forward_args a[2];
                for (int g = 0; g < 2; g++)
                    a[g] = (struct tg_rmsnorm_forward_args){.y = ON(y), .rstd = ON(rstd), .x = ON(x), .gamma = ON(gamma),
                                                            .dt = dt, .n = n, .c = c, .eps = 1e-6f};
                struct out o[] = {{&y, dt, nc, NULL, "y"}, {&rstd, TG_F32, (size_t)n, NULL, "rstd"}};
                snprintf(what, sizeof what, "rmsnorm_forward %s [%lld,%lld]", tg_dtype_name(dt), (long long)n, (long long)c);
                run_case(what, issue_rmsnorm_forward, &a[0], &a[1], o, 2, dt);
            }
            /* backward: statistics as inputs (random, so the formula is checked on its own) */
            struct pair dy = rnd_pair(dt, nc, 0.0, 1.0), dx = pair_new(nc * tg_dtype_size(dt));
            struct pair mu = rnd_pair(TG_F32, (size_t)n, 0.5, 0.3), rsd = uniform_f32((size_t)n, 0.5, 2.0);
            struct pair dr = rnd_pair(dt, nc, 0.0, 1.0);
            /* res: 0 no residual gradient, 1 dres, 2 dres with dx aliasing it */
            static const char *res_name[] = {"", " + dres", " + dres, dx aliases dres"};
            for (int res = 0; res < 3; res++) {
                struct pair *out = res == 2 ? &dr : &dx;
                void *init = res == 2 ? init_of(&dr) : NULL;
                struct tg_layernorm_backward_args a[2];
                for (int g = 0; g < 2; g++)
                    a[g] = (struct tg_layernorm_backward_args){.dx = ON(*out), .dy = ON(dy), .x = ON(x),
                                                               .dres = ON_OPT(dr, res), .gamma = ON(gamma),
                                                               .mean = ON(mu), .rstd = ON(rsd), .dt = dt, .n = n, .c = c};
                struct out o[] = {{out, dt, nc, init, "dx"}};
                snprintf(what, sizeof what, "layernorm_backward %s [%lld,%lld]%s", tg_dtype_name(dt), (long long)n,
                         (long long)c, res_name[res]);
                run_case(what, issue_layernorm_backward, &a[0], &a[1], o, 1, dt);
                if (init) pair_set(&dr, init);
                struct tg_rmsnorm_backward_args r[2];
                for (int g = 0; g < 2; g++)
                    r[g] = (struct tg_rmsnorm_backward_args){.dx = ON(*out), .dy = ON(dy), .x = ON(x),
                                                             .dres = ON_OPT(dr, res), .gamma = ON(gamma),
                                                             .rstd = ON(rsd), .dt = dt, .n = n, .c = c};
                snprintf(what, sizeof what, "rmsnorm_backward %s [%lld,%lld]%s", tg_dtype_name(dt), (long long)n,
                         (long long)c, res_name[res]);
                run_case(what, issue_rmsnorm_backward, &r[0], &r[1], o, 1, dt);
                if (init) pair_set(&dr, init);
                free(init);
            }
            pair_free(&dr);
            /* wgrads: into f32 or the activation dtype, overwrite (NaN ignored) or accumulate */
            for (int wd = 0; wd < 2; wd++)
                for (int acc = 0; acc < 2; acc++) {
                    tg_dtype dw_dt = wd ? dt : TG_F32;
                    struct pair dgamma = rnd_pair(dw_dt, (size_t)c, 0.0, 1.0), dbeta = rnd_pair(dw_dt, (size_t)c, 0.0, 1.0);
                    void *ig = acc ? init_of(&dgamma) : NULL, *ib = acc ? init_of(&dbeta) : NULL;
                    struct tg_layernorm_backward_dw_args a[2];
                    for (int g = 0; g < 2; g++)
                        a[g] = (struct tg_layernorm_backward_dw_args){
                            .dgamma = ON(dgamma), .dbeta = ON_OPT(dbeta, with_beta), .dy = ON(dy), .x = ON(x),
                            .mean = ON(mu), .rstd = ON(rsd), .dt = dt, .dw_dt = dw_dt, .n = n, .c = c,
                            .accumulate = (float)acc};
                    struct out o[] = {{&dgamma, dw_dt, (size_t)c, ig, "dgamma"}, {&dbeta, dw_dt, (size_t)c, ib, "dbeta"}};
                    snprintf(what, sizeof what, "layernorm_backward_dw %s -> %s [%lld,%lld] accumulate %d",
                             tg_dtype_name(dt), tg_dtype_name(dw_dt), (long long)n, (long long)c, acc);
                    run_case(what, issue_layernorm_backward_dw, &a[0], &a[1], o, with_beta ? 2 : 1, dt);
                    struct tg_rmsnorm_backward_dw_args r[2];
                    for (int g = 0; g < 2; g++)
                        r[g] = (struct tg_rmsnorm_backward_dw_args){.dgamma = ON(dgamma), .dy = ON(dy), .x = ON(x),
                                                                    .rstd = ON(rsd), .dt = dt, .dw_dt = dw_dt, .n = n,
                                                                    .c = c, .accumulate = (float)acc};
                    snprintf(what, sizeof what, "rmsnorm_backward_dw %s -> %s [%lld,%lld] accumulate %d",
                             tg_dtype_name(dt), tg_dtype_name(dw_dt), (long long)n, (long long)c, acc);
                    run_case(what, issue_rmsnorm_backward_dw, &r[0], &r[1], o, 1, dt);
                    struct tg_bias_backward_dw_args b[2];
                    for (int g = 0; g < 2; g++)
                        b[g] = (struct tg_bias_backward_dw_args){.dbias = ON(dgamma), .dy = ON(dy), .dt = dt,
                                                                 .dw_dt = dw_dt, .n = n, .c = c, .accumulate = (float)acc};
                    snprintf(what, sizeof what, "bias_backward_dw %s -> %s [%lld,%lld] accumulate %d", tg_dtype_name(dt),
                             tg_dtype_name(dw_dt), (long long)n, (long long)c, acc);
                    run_case(what, issue_bias_backward_dw, &b[0], &b[1], o, 1, dt);
                    free(ig), free(ib);
                    pair_free(&dgamma), pair_free(&dbeta);
                }
            /* bias add, in place */
            {
                void *yinit = init_of(&dy);
                struct tg_bias_add_args a[2];
                for (int g = 0; g < 2; g++)
                    a[g] = (struct tg_bias_add_args){.y = ON(dy), .bias = ON(beta), .dt = dt, .n = n, .c = c};
                struct out o[] = {{&dy, dt, nc, yinit, "y"}};
                snprintf(what, sizeof what, "bias_add %s [%lld,%lld]", tg_dtype_name(dt), (long long)n, (long long)c);
                run_case(what, issue_bias_add, &a[0], &a[1], o, 1, dt);
                free(yinit);
            }
            pair_free(&x), pair_free(&gamma), pair_free(&beta), pair_free(&y), pair_free(&mean), pair_free(&rstd);
            pair_free(&dy), pair_free(&dx), pair_free(&mu), pair_free(&rsd);
        }
}

/* ------------------------------------------------------------------ activations */
static void test_activations(void)
{
    char what[128];
    for (int d = 0; d < 4; d++) { /* n odd (one element a thread) and n = 8k (8 a thread in bf16) */
        tg_dtype dt = dts[d % 2];
        const int64_t n = d < 2 ? 100003 : 98304, rows = 77, h = 300;
        struct pair x = rnd_pair(dt, (size_t)n, 0.0, 2.0), dy = rnd_pair(dt, (size_t)n, 0.0, 1.0),
                    y = pair_new((size_t)n * tg_dtype_size(dt));
        struct tg_gelu_forward_args f[2];
        struct tg_gelu_backward_args b[2];
        for (int g = 0; g < 2; g++) {
            f[g] = (struct tg_gelu_forward_args){.y = ON(y), .x = ON(x), .dt = dt, .n = n};
            b[g] = (struct tg_gelu_backward_args){.dx = ON(y), .dy = ON(dy), .x = ON(x), .dt = dt, .n = n};
        }
        struct out o[] = {{&y, dt, (size_t)n, NULL, "out"}};
        snprintf(what, sizeof what, "gelu_forward %s n=%lld", tg_dtype_name(dt), (long long)n);
        run_case(what, issue_gelu_forward, &f[0], &f[1], o, 1, dt);
        snprintf(what, sizeof what, "gelu_backward %s n=%lld", tg_dtype_name(dt), (long long)n);
        run_case(what, issue_gelu_backward, &b[0], &b[1], o, 1, dt);

        struct pair sx = rnd_pair(dt, (size_t)(rows * 2 * h), 0.0, 2.0), sdy = rnd_pair(dt, (size_t)(rows * h), 0.0, 1.0),
                    sy = pair_new((size_t)(rows * h) * tg_dtype_size(dt)),
                    sdx = pair_new((size_t)(rows * 2 * h) * tg_dtype_size(dt));
        struct tg_swiglu_forward_args sf[2];
        struct tg_swiglu_backward_args sb[2];
        for (int g = 0; g < 2; g++) {
            sf[g] = (struct tg_swiglu_forward_args){.y = ON(sy), .x = ON(sx), .dt = dt, .n = rows, .h = h};
            sb[g] = (struct tg_swiglu_backward_args){.dx = ON(sdx), .dy = ON(sdy), .x = ON(sx), .dt = dt, .n = rows, .h = h};
        }
        struct out so[] = {{&sy, dt, (size_t)(rows * h), NULL, "y"}}, sbo[] = {{&sdx, dt, (size_t)(rows * 2 * h), NULL, "dx"}};
        snprintf(what, sizeof what, "swiglu_forward %s [%lld,%lld]", tg_dtype_name(dt), (long long)rows, (long long)(2 * h));
        run_case(what, issue_swiglu_forward, &sf[0], &sf[1], so, 1, dt);
        snprintf(what, sizeof what, "swiglu_backward %s [%lld,%lld]", tg_dtype_name(dt), (long long)rows, (long long)(2 * h));
        run_case(what, issue_swiglu_backward, &sb[0], &sb[1], sbo, 1, dt);
        pair_free(&x), pair_free(&dy), pair_free(&y), pair_free(&sx), pair_free(&sdy), pair_free(&sy), pair_free(&sdx);
    }
}

/* ------------------------------------------------------------------ attention */
static void test_attention(void)
{
    struct {
        tg_dtype dt;
        int64_t b, t;
        int h, d;
    } cases[] = {
        /* the tensor-core kernels (bf16, head dim 16/32/64/128): T a multiple of the blocks (64 or 128 rows), not,
         * and below one block */
        {TG_BF16, 2, 200, 3, 128}, {TG_BF16, 1, 257, 2, 128}, {TG_BF16, 1, 50, 2, 128}, {TG_BF16, 1, 130, 2, 128},
        {TG_BF16, 1, 140, 2, 128}, {TG_BF16, 2, 128, 2, 64},  {TG_BF16, 1, 10, 3, 64},  {TG_BF16, 2, 100, 2, 64},
        {TG_BF16, 1, 300, 2, 64},  {TG_BF16, 1, 257, 2, 64},  {TG_BF16, 1, 193, 2, 64}, {TG_BF16, 2, 260, 2, 64},
        {TG_BF16, 1, 70, 2, 64},   {TG_BF16, 2, 70, 4, 32},   {TG_BF16, 2, 200, 3, 32}, {TG_BF16, 1, 40, 2, 16},
        /* the SIMT kernels: another head dim in bf16, and f32 */
        {TG_BF16, 1, 33, 3, 48},   {TG_F32, 2, 100, 2, 64},   {TG_F32, 1, 50, 3, 40},   {TG_F32, 1, 64, 1, 128},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tg_dtype dt = cases[k].dt;
        int64_t B = cases[k].b, T = cases[k].t, H = cases[k].h, C = H * cases[k].d;
        size_t nqkv = (size_t)(B * T * 3 * C), nout = (size_t)(B * T * C), nl = (size_t)(B * H * T);
        char what[160];
        struct pair qkv = rnd_pair(dt, nqkv, 0.0, 1.0), out = pair_new(nout * tg_dtype_size(dt)), lse = pair_new(nl * 4),
                    dout = rnd_pair(dt, nout, 0.0, 1.0), dqkv = pair_new(nqkv * tg_dtype_size(dt));
        struct tg_attention_forward_args f[2];
        for (int g = 0; g < 2; g++)
            f[g] = (struct tg_attention_forward_args){.out = ON(out), .lse = ON(lse), .qkv = ON(qkv), .dt = dt, .b = B,
                                                      .t = T, .c = C, .n_head = (int)H};
        struct out fo[] = {{&out, dt, nout, NULL, "out"}, {&lse, TG_F32, nl, NULL, "lse"}};
        snprintf(what, sizeof what, "attention_forward %s B=%lld T=%lld H=%lld D=%d", tg_dtype_name(dt), (long long)B,
                 (long long)T, (long long)H, cases[k].d);
        run_case(what, issue_attention_forward, &f[0], &f[1], fo, 2, dt);
        /* backward from the CPU forward's out and lse, on both */
        pair_from_cpu(&out);
        pair_from_cpu(&lse);
        struct tg_attention_backward_args b[2];
        for (int g = 0; g < 2; g++)
            b[g] = (struct tg_attention_backward_args){.dqkv = ON(dqkv), .dout = ON(dout), .out = ON(out), .qkv = ON(qkv),
                                                       .lse = ON(lse), .dt = dt, .b = B, .t = T, .c = C, .n_head = (int)H};
        struct out bo[] = {{&dqkv, dt, nqkv, NULL, "dqkv"}};
        snprintf(what, sizeof what, "attention_backward %s B=%lld T=%lld H=%lld D=%d", tg_dtype_name(dt), (long long)B,
                 (long long)T, (long long)H, cases[k].d);
        run_case(what, issue_attention_backward, &b[0], &b[1], bo, 1, dt);
        pair_free(&qkv), pair_free(&out), pair_free(&lse), pair_free(&dout), pair_free(&dqkv);
    }
}

/* ------------------------------------------------------------------ embedding */
static void test_embedding(void)
{
    /* the wgrad's paths: 16-byte vectors (c a multiple of 8) or one column a lane (33); runs of one id shorter
     * than a warp's 64-token chunk, and hot ids whose runs span many chunks (hot: that share of the tokens is
     * id 1); GPT-2's width 768 (three 256-column slices) with most of the vocabulary absent */
    struct {
        int64_t b, t, c, v, tmax;
        double hot;
    } cases[] = {{3, 17, 40, 50, 20, 0},      {4, 256, 128, 1000, 256, 0}, {2, 64, 33, 7, 64, 0},
                 {8, 256, 768, 5000, 300, 0.3}, {4, 200, 33, 60, 200, 0.5}};
    for (int d = 0; d < 2; d++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            tg_dtype dt = dts[d];
            int64_t B = cases[k].b, T = cases[k].t, C = cases[k].c, V = cases[k].v, TM = cases[k].tmax;
            size_t nbt = (size_t)(B * T);
            char what[160];
            struct pair idx = pair_new(nbt * 4), wte = rnd_pair(dt, (size_t)(V * C), 0.0, 1.0),
                        wpe = rnd_pair(dt, (size_t)(TM * C), 0.0, 1.0), out = pair_new(nbt * C * tg_dtype_size(dt)),
                        dout = rnd_pair(dt, nbt * C, 0.0, 1.0);
            int32_t *ids = malloc(nbt * 4);
            for (size_t i = 0; i < nbt; i++) /* repeats: V small, or a hot id */
                ids[i] = rnd_unit() < cases[k].hot ? 1 : (int32_t)(rnd_u64() % (uint64_t)V);
            ids[0] = -1; /* skipped */
            ids[nbt / 2] = (int32_t)V + 3;
            ids[1] = 0, ids[nbt - 1] = (int32_t)V - 1, ids[nbt - 2] = (int32_t)V - 1; /* the table's first and last rows */
            pair_set(&idx, ids);
            free(ids);
            for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
                struct tg_embedding_forward_args f[2];
                for (int g = 0; g < 2; g++)
                    f[g] = (struct tg_embedding_forward_args){.out = ON(out), .idx = ON(idx), .wte = ON(wte),
                                                              .wpe = ON_OPT(wpe, with_wpe), .dt = dt, .b = B, .t = T,
                                                              .c = C, .v = V};
                struct out fo[] = {{&out, dt, nbt * C, NULL, "out"}};
                snprintf(what, sizeof what, "embedding_forward %s B=%lld T=%lld C=%lld V=%lld%s", tg_dtype_name(dt),
                         (long long)B, (long long)T, (long long)C, (long long)V, with_wpe ? "" : " no wpe");
                run_case(what, issue_embedding_forward, &f[0], &f[1], fo, 1, dt);
            }
            /* accumulate 0 overwrites (rows of absent ids become 0), 1 adds (they stay), 0.5 scales them */
            static const double accs[] = {0, 1, 0.5};
            for (int wd = 0; wd < 2; wd++)
                for (int ai = 0; ai < 3; ai++) {
                    const double acc = accs[ai];
                    tg_dtype dw_dt = wd ? dt : TG_F32;
                    struct pair dwte = rnd_pair(dw_dt, (size_t)(V * C), 0.0, 1.0),
                                dwpe = rnd_pair(dw_dt, (size_t)(TM * C), 0.0, 1.0);
                    void *it = acc != 0 ? init_of(&dwte) : NULL, *ip = acc != 0 ? init_of(&dwpe) : NULL;
                    struct tg_embedding_backward_dw_args a[2];
                    for (int g = 0; g < 2; g++)
                        a[g] = (struct tg_embedding_backward_dw_args){
                            .dwte = ON(dwte), .dwpe = ON(dwpe), .dout = ON(dout), .idx = ON(idx), .dt = dt,
                            .dwte_dt = dw_dt, .dwpe_dt = dw_dt, .b = B, .t = T, .c = C, .v = V, .tmax = TM,
                            .accumulate = (float)acc};
                    struct out o[] = {{&dwte, dw_dt, (size_t)(V * C), it, "dwte"}, {&dwpe, dw_dt, (size_t)(TM * C), ip, "dwpe"}};
                    snprintf(what, sizeof what, "embedding_backward_dw %s -> %s B=%lld T=%lld C=%lld V=%lld accumulate %g",
                             tg_dtype_name(dt), tg_dtype_name(dw_dt), (long long)B, (long long)T, (long long)C,
                             (long long)V, acc);
                    run_case(what, issue_embedding_backward_dw, &a[0], &a[1], o, 2, dt);
                    free(it), free(ip);
                    pair_free(&dwte), pair_free(&dwpe);
                }
            pair_free(&idx), pair_free(&wte), pair_free(&wpe), pair_free(&out), pair_free(&dout);
        }
}

/* ------------------------------------------------------------------ cross-entropy */
static void test_cross_entropy(void)
{
    /* the row kernels: rows streamed through shared memory, their 16-byte-aligned middles by the copy unit, with
     * two row buffers a block (one for f32 50304 and 50257): rows of whole 16-byte groups (1000, GPT-2's padded
     * 50304, 8, f32 100), rows with a head and a tail element by element (5003, 50257, bf16 100), rows starting one
     * element past an aligned address (off 1); and the multi-pass kernels for rows too large for shared memory
     * (bf16 120000 and f32 60000 exceed an H200's 227 KB). On GPUs before sm_90, and for dlogits at another offset
     * from a 16-byte boundary than logits (off 1, not aliased), one block a row. */
    enum { NORMAL, BAD, ALL_IGNORED };
    struct {
        int64_t n, v;
        int mode; /* BAD: one target out of range (its loss and the mean are NaN); ALL_IGNORED: count 0 */
        int off;  /* the tensors start this many elements into their allocation */
    } cases[] = {{64, 1000, NORMAL, 0},  {37, 5003, NORMAL, 0},       {16, 50257, NORMAL, 0}, {20, 100, BAD, 0},
                 {24, 50304, NORMAL, 0}, {9, 8, NORMAL, 0},           {3, 120000, NORMAL, 0},
                 {4, 60000, NORMAL, 0},  {12, 1000, ALL_IGNORED, 0},
                 /* rows of exactly 48 KB (bf16 24576, f32 12288): with the kernels' static shared memory
                  * they need the opt-in above the 48 KB default */
                 {8, 24576, NORMAL, 0},  {8, 12288, NORMAL, 0},
                 /* more rows than blocks on the GPU: a block's rows reuse its buffers several times */
                 {5000, 1024, NORMAL, 0}, {300, 50304, NORMAL, 0},
                 /* unaligned rows of an aligned length */
                 {7, 1000, NORMAL, 1},   {5, 50304, NORMAL, 1}};
    const int ignore = -100;
    for (int d = 0; d < 2; d++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            tg_dtype dt = dts[d];
            int64_t N = cases[k].n, V = cases[k].v;
            const size_t nv = (size_t)(N * V), off = (size_t)cases[k].off, es = tg_dtype_size(dt);
            char what[200];
            struct pair logits = rnd_pair(dt, nv + off, 0.0, 3.0), tg = pair_new((size_t)N * 4), loss = pair_new(8),
                        losses = pair_new((size_t)N * 4), dl = pair_new((nv + off) * es);
#define AT(p) ((char *)ON(p) + off * es) /* a tensor's first element */
            int32_t *t = malloc((size_t)N * 4);
            for (int64_t i = 0; i < N; i++)
                t[i] = i % 5 == 3 || cases[k].mode == ALL_IGNORED ? ignore : (int32_t)(rnd_u64() % (uint64_t)V);
            if (cases[k].mode == BAD) t[1] = (int32_t)V;
            if (cases[k].mode != ALL_IGNORED) t[0] = 0, t[N - 1] = (int32_t)V - 1; /* the first and last columns */
            pair_set(&tg, t);
            free(t);
            const char *mode = cases[k].mode == BAD           ? " (a target out of range)"
                               : cases[k].mode == ALL_IGNORED ? " (all rows ignored)"
                               : off                          ? " (rows one element past 16-byte alignment)"
                                                              : "";
            struct tg_cross_entropy_forward_args f[2];
            for (int g = 0; g < 2; g++)
                f[g] = (struct tg_cross_entropy_forward_args){.loss = ON(loss), .losses = ON(losses), .logits = AT(logits),
                                                              .targets = ON(tg), .dt = dt, .n = N, .v = V,
                                                              .ignore_index = ignore};
            struct out fo[] = {{&loss, TG_F32, 2, NULL, "loss"}, {&losses, TG_F32, (size_t)N, NULL, "losses"}};
            snprintf(what, sizeof what, "cross_entropy_forward %s N=%lld V=%lld%s", tg_dtype_name(dt), (long long)N,
                     (long long)V, mode);
            run_case(what, issue_cross_entropy_forward, &f[0], &f[1], fo, 2, dt);
            pair_from_cpu(&loss);
            for (int alias = 0; alias < 2; alias++) {
                struct pair *out = alias ? &logits : &dl;
                void *linit = alias ? init_of(&logits) : NULL;
                struct tg_cross_entropy_backward_args b[2];
                for (int g = 0; g < 2; g++)
                    /* unaligned logits and aligned dlogits (off 1, not aliased): the one-block-a-row kernels */
                    b[g] = (struct tg_cross_entropy_backward_args){.dlogits = alias ? AT(*out) : ON(dl), .logits = AT(logits),
                                                                   .targets = ON(tg), .loss = ON(loss), .dt = dt, .n = N,
                                                                   .v = V, .dloss = 1.7f, .ignore_index = ignore};
                struct out bo[] = {{out, dt, nv + off, linit, "dlogits"}};
                snprintf(what, sizeof what, "cross_entropy_backward %s N=%lld V=%lld%s%s", tg_dtype_name(dt),
                         (long long)N, (long long)V, mode,
                         alias ? " dlogits aliases logits" : off ? " dlogits 16-byte aligned" : "");
                run_case(what, issue_cross_entropy_backward, &b[0], &b[1], bo, 1, dt);
                if (alias) {
                    pair_set(&logits, linit);
                    free(linit);
                }
            }
            /* the fused LM head's pass: losses and dlogits in place from one read of each row, and losses alone */
            for (int grad = 0; grad < 2; grad++) {
                void *linit = grad ? init_of(&logits) : NULL;
                struct tg_cross_entropy_fused_args u[2];
                for (int g = 0; g < 2; g++)
                    u[g] = (struct tg_cross_entropy_fused_args){.losses = ON(losses), .dlogits = grad ? AT(logits) : NULL,
                                                                .logits = AT(logits), .targets = ON(tg), .loss = ON(loss),
                                                                .dt = dt, .n = N, .v = V, .dloss = 0.6f,
                                                                .ignore_index = ignore};
                struct out uo[] = {{&losses, TG_F32, (size_t)N, NULL, "losses"}, {&logits, dt, nv + off, linit, "dlogits"}};
                snprintf(what, sizeof what, "cross_entropy_fused %s N=%lld V=%lld%s%s", tg_dtype_name(dt), (long long)N,
                         (long long)V, mode, grad ? " dlogits in place" : " losses only");
                run_case(what, issue_cross_entropy_fused, &u[0], &u[1], uo, grad ? 2 : 1, dt);
                if (grad) {
                    pair_set(&logits, linit);
                    free(linit);
                }
            }
#undef AT
            pair_free(&logits), pair_free(&tg), pair_free(&loss), pair_free(&losses), pair_free(&dl);
        }
}

/* ------------------------------------------------------------------ AdamW */
static void test_adamw(void)
{
    const int64_t n = 10007;
    for (int d = 0; d < 2; d++)
        for (int lowp = 0; lowp < 2; lowp++)
            for (int s = 0; s < 2; s++) {
                tg_dtype g_dt = dts[d];
                int64_t step = s ? 7 : 1;
                char what[128];
                struct pair p = rnd_pair(TG_F32, (size_t)n, 0.0, 1.0), m = rnd_pair(TG_F32, (size_t)n, 0.0, 0.1),
                            v = uniform_f32((size_t)n, 0.0, 0.01), g = rnd_pair(g_dt, (size_t)n, 0.0, 1.0),
                            pl = pair_new((size_t)n * 2);
                void *ip = init_of(&p), *im = init_of(&m), *iv = init_of(&v);
                struct tg_adamw_args a[2];
                for (int k = 0; k < 2; k++) {
                    int gg = k;
#define ONK(q) (gg ? (q).g : (q).c)
                    a[k] = (struct tg_adamw_args){.p = ONK(p), .m = ONK(m), .v = ONK(v), .p_lowp = lowp ? ONK(pl) : NULL,
                                                  .g = ONK(g), .g_dt = g_dt, .n = n, .lr = 3e-3f, .beta1 = 0.9f,
                                                  .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                                                  .grad_scale = 0.5f, .step = step};
#undef ONK
                }
                struct out o[] = {{&p, TG_F32, (size_t)n, ip, "p"},
                                  {&m, TG_F32, (size_t)n, im, "m"},
                                  {&v, TG_F32, (size_t)n, iv, "v"},
                                  {&pl, TG_BF16, (size_t)n, NULL, "p_lowp"}};
                snprintf(what, sizeof what, "adamw g %s%s step %lld", tg_dtype_name(g_dt), lowp ? " with bf16 copy" : "",
                         (long long)step);
                run_case(what, issue_adamw, &a[0], &a[1], o, lowp ? 4 : 3, TG_F32);
                free(ip), free(im), free(iv);
                pair_free(&p), pair_free(&m), pair_free(&v), pair_free(&g), pair_free(&pl);
            }
}

/* ------------------------------------------------------------------ multi-tensor AdamW and sum of squares
 * 300 tensors (more than one CUDA group), as slices of shared buffers at offsets that leave
 * some unaligned (the scalar path) and some 16-byte aligned (the vector path). */
static void test_adamw_multi(void)
{
    enum { K = 300 };
    int64_t off[K], len[K], total = 0;
    for (int k = 0; k < K; k++) {
        const int64_t big[] = {10007, 65539, 4099, 1, 8192, 24576};
        len[k] = k < 6 ? big[k] : 1 + (k * 37) % 64;
        total += k % 3 == 1 ? 1 : (4 - total % 4) % 4; /* unaligned, else aligned to 4 elements */
        off[k] = total;
        total += len[k];
    }
    struct pair p = rnd_pair(TG_F32, (size_t)total, 0.0, 1.0), m = rnd_pair(TG_F32, (size_t)total, 0.0, 0.1),
                v = uniform_f32((size_t)total, 0.0, 0.01), g32 = rnd_pair(TG_F32, (size_t)total, 0.0, 1.0),
                g16 = rnd_pair(TG_BF16, (size_t)total, 0.0, 1.0), pl = pair_new((size_t)total * 2),
                sq = pair_new(4);
    void *ip = init_of(&p), *im = init_of(&m), *iv = init_of(&v);

    struct tg_sumsq_multi_args *sa[2];
    struct tg_adamw_multi_args *aa[2];
    for (int g = 0; g < 2; g++) {
        sa[g] = malloc(tg_sumsq_multi_args_size(K));
        aa[g] = malloc(tg_adamw_multi_args_size(K));
        sa[g]->out = ON(sq), sa[g]->ntensors = K;
        for (int k = 0; k < K; k++) {
            const int bf = k % 2;
            const struct pair *gp = bf ? &g16 : &g32;
            const size_t es = bf ? 2 : 4;
            const void *gk = (const char *)ON(*gp) + (size_t)off[k] * es;
            sa[g]->t[k] = (struct tg_sumsq_multi_tensor){.x = gk, .n = len[k], .dt = bf ? TG_BF16 : TG_F32};
            aa[g]->t[k] = (struct tg_adamw_multi_tensor){
                .p = (float *)ON(p) + off[k], .m = (float *)ON(m) + off[k], .v = (float *)ON(v) + off[k],
                .p_lowp = k % 3 == 2 ? NULL : (uint16_t *)ON(pl) + off[k], .g = gk, .n = len[k],
                .g_dt = bf ? TG_BF16 : TG_F32, .weight_decay = k % 4 ? 0.1f : 0.0f};
        }
    }
    struct out so[] = {{&sq, TG_F32, 1, NULL, "sum of squares"}};
    run_case("sumsq_multi of 300 f32/bf16 tensors", issue_sumsq_multi, sa[0], sa[1], so, 1, TG_F32);
    sync_both();
    const double norm = sqrt((double)*(float *)sq.c);
    float cpu_sq = *(float *)sq.c;
    pair_set(&sq, &cpu_sq); /* the CPU's sum on both, so both clip with one factor */
    struct out o[] = {{&p, TG_F32, (size_t)total, ip, "p"},
                      {&m, TG_F32, (size_t)total, im, "m"},
                      {&v, TG_F32, (size_t)total, iv, "v"},
                      {&pl, TG_BF16, (size_t)total, NULL, "p_lowp"}};
    for (int c = 0; c < 3; c++) {
        for (int g = 0; g < 2; g++) {
            *aa[g] = (struct tg_adamw_multi_args){.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                                  .grad_scale = 1.0f, .step = c ? 7 : 1, .ntensors = K,
                                                  .clip_sumsq = c ? ON(sq) : NULL,
                                                  .max_norm = c == 2 ? 0.5 * norm : 2.0 * norm};
        }
        char what[128];
        snprintf(what, sizeof what, "adamw_multi of 300 tensors, %s",
                 c == 0 ? "step 1, no clip" : c == 1 ? "step 7, clip inactive" : "step 7, clip active");
        run_case(what, issue_adamw_multi, aa[0], aa[1], o, 4, TG_F32);
    }
    /* capturable: lr and step read by the kernels from device scalars (each backend its own copy) */
    {
        struct pair lrp = pair_new(4), stp = pair_new(4);
        const float lr = 3e-3f;
        int32_t step = 7;
        pair_set(&lrp, &lr), pair_set(&stp, &step);
        for (int g = 0; g < 2; g++)
            *aa[g] = (struct tg_adamw_multi_args){.lr = 1.0f, .step = 1, /* unused: read from lr_dev, step_dev */
                                                  .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f,
                                                  .ntensors = K, .clip_sumsq = ON(sq), .max_norm = 0.5 * norm,
                                                  .lr_dev = ON(lrp), .step_dev = ON(stp)};
        run_case("adamw_multi of 300 tensors, capturable (lr and step 7 on the device), clip active",
                 issue_adamw_multi, aa[0], aa[1], o, 4, TG_F32);
        /* the step count advances on the device, once per call */
        step = 41;
        pair_set(&stp, &step);
        struct tg_adamw_count_args cc = {.step = stp.c}, gc = {.step = stp.g};
        tg_status sc = tg_backend_cpu.adamw_count(cs, &cc), sg = tg_backend_cuda.adamw_count(gs, &gc);
        sync_both();
        int32_t *gv = pair_gpu(&stp);
        ok(sc == TG_OK && sg == TG_OK && *gv == 42 && *(int32_t *)stp.c == 42,
           "adamw_count advances the device step count 41 -> 42 (cpu %d, cuda %d)", *(int32_t *)stp.c, *gv);
        free(gv);
        for (int g = 0; g < 2; g++) aa[g]->lr_dev = NULL, aa[g]->step_dev = NULL;
        pair_free(&lrp), pair_free(&stp);
    }
    /* NaN norm: the device skips the step */
    {
        float nan = NAN;
        pair_set(&sq, &nan);
        aa[1]->clip_sumsq = sq.g;
        out_reset(&o[0], 0), out_reset(&o[1], 0), out_reset(&o[2], 0);
        tg_status st = issue_adamw_multi(1, aa[1]);
        sync_both();
        void *gp = pair_gpu(&p), *gm = pair_gpu(&m), *gv = pair_gpu(&v);
        ok(st == TG_OK && memcmp(gp, ip, p.bytes) == 0 && memcmp(gm, im, m.bytes) == 0 && memcmp(gv, iv, v.bytes) == 0,
           "adamw_multi with a NaN norm leaves p, m and v unchanged on CUDA");
        free(gp), free(gm), free(gv);
    }
    for (int g = 0; g < 2; g++) free(sa[g]), free(aa[g]);
    free(ip), free(im), free(iv);
    pair_free(&p), pair_free(&m), pair_free(&v), pair_free(&g32), pair_free(&g16), pair_free(&pl), pair_free(&sq);
}

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    plan(NO_PLAN);
    cuda_test_setup();
    /* TG_NN_OPS=attention,embedding: only those groups (for the sanitizers, which are slow) */
    const char *only = getenv("TG_NN_OPS");
#define GROUP(name) if (!only || strstr(only, #name)) test_##name()
    GROUP(norms);
    GROUP(activations);
    GROUP(attention);
    GROUP(embedding);
    GROUP(cross_entropy);
    GROUP(adamw);
    GROUP(adamw_multi);
#undef GROUP
    return done_testing();
}
#endif
