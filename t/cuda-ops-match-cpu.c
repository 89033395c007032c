/* cuda-ops-match-cpu.c — every CUDA kernel gives the CPU backend's results on the same random inputs and seed. */
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

static const tg_device gpu = {TG_CUDA, 0};

/* ------------------------------------------------------------------ paired buffers: the same bytes on both devices */
/* NaN in every float (all bits set is NaN in f32 and bf16), so elements a kernel forgets to write show. */
static void pair_poison(struct pair *p)
{
    void *h = malloc(p->bytes);
    memset(h, 0xff, p->bytes);
    pair_set(p, h);
    free(h);
}

static int run_ok(tg_status a, tg_status b, const char *what)
{
    if (a == TG_OK && b == TG_OK) return 1;
    ok(0, "%s: cpu %s, cuda %s: %s", what, tg_status_name(a), tg_status_name(b), tg_last_error());
    return 0;
}

/* Bytes identical (NaN payloads included). */
static void check_exact(const struct pair *p, const char *what)
{
    unsigned char *g = pair_gpu(p);
    size_t first = p->bytes;
    for (size_t i = 0; i < p->bytes && first == p->bytes; i++)
        if (g[i] != ((unsigned char *)p->c)[i]) first = i;
    ok(first == p->bytes, "%s: bytes identical", what);
    if (first != p->bytes) diag("first difference at byte %zu of %zu", first, p->bytes);
    free(g);
}

/* Random f32 values with the special cases kernels get wrong. */
static void fill_specials(float *v, size_t n, double scale)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f /* bf16 tie, to even (down) */,
                                    1.01171875f /* bf16 tie, up */, 65535.5f, 65536.0f, -70000.0f, 3e9f, -3e9f,
                                    1e-40f /* subnormal */, 3.4e38f /* rounds to bf16 inf */, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < n; i++)
        v[i] = i < sizeof special / sizeof special[0] ? special[i] : (float)(scale * rnd_normal());
}

/* ------------------------------------------------------------------ fill, cast */
static const tg_dtype all_dt[] = {TG_F32, TG_BF16, TG_I32, TG_U16};

static void test_fill(void)
{
    const double values[] = {1.5, -3.14159265, 1e10, -1e10, 0.1};
    const int64_t n = 1037;
    for (int d = 0; d < 4; d++) {
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
            struct pair p = pair_new((size_t)n * tg_dtype_size(all_dt[d]));
            pair_poison(&p);
            struct tg_fill_args a = {.dst = NULL, .dt = all_dt[d], .n = n, .value = values[v]};
            a.dst = p.c;
            tg_status sc = tg_backend_cpu.fill(cs, &a);
            a.dst = p.g;
            tg_status sg = tg_backend_cuda.fill(gs, &a);
            sync_both();
            char what[64];
            snprintf(what, sizeof what, "fill %s %g", tg_dtype_name(all_dt[d]), values[v]);
            if (run_ok(sc, sg, what)) check_exact(&p, what);
            pair_free(&p);
        }
    }
}

static void random_elems(void *h, tg_dtype dt, size_t n)
{
    if (dt == TG_I32) {
        for (size_t i = 0; i < n; i++) ((int32_t *)h)[i] = (int32_t)(uint32_t)rnd_u64() >> (int)(rnd_u64() % 31);
    } else if (dt == TG_U16) {
        for (size_t i = 0; i < n; i++) ((uint16_t *)h)[i] = (uint16_t)rnd_u64();
    } else {
        float *f = malloc(n * sizeof *f);
        fill_specials(f, n, 1e4);
        for (size_t i = 0; i < n; i++) {
            if (dt == TG_F32) ((float *)h)[i] = f[i];
            else ((uint16_t *)h)[i] = tg_f32_to_bf16(f[i]);
        }
        free(f);
    }
}

static void test_cast(void)
{
    const int64_t n = 4099;
    for (int s = 0; s < 4; s++) {
        for (int d = 0; d < 4; d++) {
            tg_dtype sd = all_dt[s], dd = all_dt[d];
            struct pair src = pair_new((size_t)n * tg_dtype_size(sd)), dst = pair_new((size_t)n * tg_dtype_size(dd));
            void *h = malloc(src.bytes);
            random_elems(h, sd, (size_t)n);
            pair_set(&src, h);
            free(h);
            pair_poison(&dst);
            struct tg_cast_args a = {.src = src.c, .src_dt = sd, .dst = dst.c, .dst_dt = dd, .n = n};
            tg_status sc = tg_backend_cpu.cast(cs, &a);
            a.src = src.g, a.dst = dst.g;
            tg_status sg = tg_backend_cuda.cast(gs, &a);
            sync_both();
            char what[64];
            snprintf(what, sizeof what, "cast %s -> %s", tg_dtype_name(sd), tg_dtype_name(dd));
            if (run_ok(sc, sg, what)) check_exact(&dst, what);
            pair_free(&src), pair_free(&dst);
        }
    }
}

/* ------------------------------------------------------------------ binary, axpby */

/* n random floats of dtype dt (rounded to bf16 when dt is bf16), away from 0 when nonzero. */
static struct pair random_pair(tg_dtype dt, size_t n, int nonzero)
{
    struct pair p = pair_new(n * tg_dtype_size(dt));
    void *h = malloc(p.bytes);
    for (size_t i = 0; i < n; i++) {
        double v = rnd_normal();
        if (nonzero) v = (v < 0 ? -0.5 : 0.5) + v;
        if (dt == TG_F32) ((float *)h)[i] = (float)v;
        else ((uint16_t *)h)[i] = tg_f32_to_bf16((float)v);
    }
    pair_set(&p, h);
    free(h);
    return p;
}

static void test_binary(void)
{
    static const char *names[] = {"add", "sub", "mul", "div"};
    const int64_t n = 100003;
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = all_dt[d];
        for (int op = TG_ADD; op <= TG_DIV; op++) {
            for (int alias = 0; alias < 2; alias++) {
                struct pair a = random_pair(dt, (size_t)n, 0), b = random_pair(dt, (size_t)n, 1);
                struct pair o = pair_new((size_t)n * tg_dtype_size(dt));
                pair_poison(&o);
                struct pair *out = alias ? &a : &o; /* out = a op b in place */
                struct tg_binary_args x = {.op = (tg_binop)op, .a = a.c, .b = b.c, .out = out->c, .dt = dt, .n = n};
                tg_status sc = tg_backend_cpu.binary(cs, &x);
                x.a = a.g, x.b = b.g, x.out = out->g;
                tg_status sg = tg_backend_cuda.binary(gs, &x);
                sync_both();
                char what[64];
                snprintf(what, sizeof what, "binary %s %s%s", names[op], tg_dtype_name(dt), alias ? " (out aliases a)" : "");
                if (run_ok(sc, sg, what)) check_close(out, dt, (size_t)n, tol_of(dt), what);
                pair_free(&a), pair_free(&b), pair_free(&o);
            }
        }
    }
}

static void test_axpby(void)
{
    const float coef[][2] = {{0.5f, 0.0f}, {1.25f, -0.75f}, {-2.0f, 1.0f}};
    const int64_t n = 77777;
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = all_dt[d];
        for (int c = 0; c < 3; c++) {
            struct pair x = random_pair(dt, (size_t)n, 0), y = random_pair(dt, (size_t)n, 0);
            if (coef[c][1] == 0.0f) pair_poison(&y); /* beta == 0 must overwrite NaN */
            struct tg_axpby_args a = {.x = x.c, .y = y.c, .dt = dt, .n = n, .alpha = coef[c][0], .beta = coef[c][1]};
            tg_status sc = tg_backend_cpu.axpby(cs, &a);
            a.x = x.g, a.y = y.g;
            tg_status sg = tg_backend_cuda.axpby(gs, &a);
            sync_both();
            char what[64];
            snprintf(what, sizeof what, "axpby %s alpha=%g beta=%g", tg_dtype_name(dt), coef[c][0], coef[c][1]);
            if (run_ok(sc, sg, what)) {
                check_close(&y, dt, (size_t)n, tol_of(dt), what);
                if (coef[c][1] == 0.0f) {
                    double m = 0;
                    float *g = pair_gpu(&y);
                    for (int64_t i = 0; i < n; i++) m += isnan(elem(g, dt, (size_t)i));
                    is_int((long long)m, 0, "%s: no NaN left from the poisoned y", what);
                    free(g);
                }
            }
            pair_free(&x), pair_free(&y);
        }
    }
}

/* ------------------------------------------------------------------ gemm */
struct gemm_case {
    int64_t m, n, k, batch;
    int ta, tb;
    tg_dtype ab, c;
    float alpha, beta;
    int pad; /* extra elements per row (ld) and between batch matrices */
};

/* A random matrix batch of rows x cols with leading dim cols + pad; padding holds NaN. */
static struct pair random_matrix(tg_dtype dt, int64_t batch, int64_t rows, int64_t cols, int pad, int64_t *ld,
                                 int64_t *stride, int nan_all)
{
    *ld = cols + pad;
    *stride = rows * *ld + pad;
    size_t n = (size_t)(*stride * batch);
    struct pair p = pair_new(n * tg_dtype_size(dt));
    void *h = malloc(p.bytes);
    for (size_t i = 0; i < n; i++) {
        int64_t in_b = (int64_t)i % *stride, col = in_b % *ld;
        int inside = in_b < rows * *ld && col < cols && !nan_all;
        float v = inside ? (float)rnd_normal() : NAN;
        if (dt == TG_F32) ((float *)h)[i] = v;
        else ((uint16_t *)h)[i] = tg_f32_to_bf16(v);
    }
    pair_set(&p, h);
    free(h);
    return p;
}

static void test_gemm(void)
{
    struct gemm_case cases[64];
    int nc = 0;
    const tg_dtype types[][2] = {{TG_F32, TG_F32}, {TG_BF16, TG_BF16}, {TG_BF16, TG_F32}};
    for (int t = 0; t < 3; t++) {
        for (int tr = 0; tr < 4; tr++) {
            cases[nc++] = (struct gemm_case){37, 29, 51, 1, tr & 1, tr >> 1, types[t][0], types[t][1], 1.0f, 0.0f, 0};
            cases[nc++] = (struct gemm_case){64, 96, 128, 3, tr & 1, tr >> 1, types[t][0], types[t][1], 0.5f, 1.0f, 3};
        }
        cases[nc++] = (struct gemm_case){256, 384, 512, 2, 0, 1, types[t][0], types[t][1], 1.0f, 0.0f, 0};
        cases[nc++] = (struct gemm_case){1, 300, 17, 1, 1, 0, types[t][0], types[t][1], -1.5f, 0.25f, 1};
        cases[nc++] = (struct gemm_case){5, 7, 0, 2, 0, 0, types[t][0], types[t][1], 1.0f, 0.5f, 0}; /* k == 0: C *= beta */
    }
    for (int i = 0; i < nc; i++) {
        struct gemm_case *g = &cases[i];
        struct tg_gemm_args a = {.trans_a = g->ta, .trans_b = g->tb, .m = g->m, .n = g->n, .k = g->k, .batch = g->batch,
                                 .alpha = g->alpha, .beta = g->beta, .a_dt = g->ab, .b_dt = g->ab, .c_dt = g->c};
        struct pair A = random_matrix(g->ab, g->batch, g->ta ? g->k : g->m, g->ta ? g->m : g->k, g->pad, &a.lda,
                                      &a.stride_a, 0);
        struct pair B = random_matrix(g->ab, g->batch, g->tb ? g->n : g->k, g->tb ? g->k : g->n, g->pad, &a.ldb,
                                      &a.stride_b, 0);
        struct pair C = random_matrix(g->c, g->batch, g->m, g->n, g->pad, &a.ldc, &a.stride_c, g->beta == 0.0f);
        a.a = A.c, a.b = B.c, a.c = C.c;
        tg_status sc = tg_backend_cpu.gemm(cs, &a);
        a.a = A.g, a.b = B.g, a.c = C.g;
        tg_status sg = tg_backend_cuda.gemm(gs, &a);
        sync_both();
        char what[160];
        snprintf(what, sizeof what, "gemm %lldx%lldx%lld batch %lld%s%s %s->%s alpha=%g beta=%g pad %d", (long long)g->m,
                 (long long)g->n, (long long)g->k, (long long)g->batch, g->ta ? " A^T" : "", g->tb ? " B^T" : "",
                 tg_dtype_name(g->ab), tg_dtype_name(g->c), g->alpha, g->beta, g->pad);
        if (run_ok(sc, sg, what)) {
            size_t n = C.bytes / tg_dtype_size(g->c);
            check_close(&C, g->c, n, g->c == TG_BF16 ? 1e-2 : 1e-5, what);
            /* every element inside the matrices written (no NaN left), padding untouched (still NaN) */
            void *h = pair_gpu(&C);
            size_t bad = 0;
            for (size_t e = 0; e < n; e++) {
                int64_t in_b = (int64_t)e % a.stride_c, col = in_b % a.ldc;
                int inside = in_b < g->m * a.ldc && col < g->n;
                bad += inside == !!isnan(elem(h, g->c, e));
            }
            is_int((long long)bad, 0, "%s: all of C written, padding untouched", what);
            free(h);
        }
        pair_free(&A), pair_free(&B), pair_free(&C);
    }
}

/* ------------------------------------------------------------------ gemm epilogues
 * The CUDA epilogues (cuBLASLt, or the unfused kernels when it refuses, or
 * the test switch TG_DEBUG_EPILOGUE_UNFUSED) against the CPU reference. cuBLASLt's GELU (its
 * own tanh approximation) is used for bf16 C only, where 1e-2 covers it; the
 * measured difference is printed as a diag. f32 gelu runs the gelu kernel.
 * DGELU likewise: cuBLASLt's gelu derivative for bf16 C (aux ld a multiple
 * of 8), the gelu_backward kernel after the GEMM otherwise; its aux is an input. */
#define EPI_F32_TOL 1e-5
/* alpha scales the product; off: the bias (or bias grad) vector starts off
 * elements into its buffer (a view; off * size not a multiple of 16 bytes
 * takes the unfused kernels); pad_a: A's rows padded (NaN) by pad_a elements. */
static void epi_case_x(int epi, tg_dtype ab, tg_dtype cd, tg_dtype bd, int64_t m, int64_t n, int64_t k, int64_t batch,
                       float beta, float acc, int with_aux, int with_cin, const char *mode, float alpha, int64_t off,
                       int pad_a)
{
    /* BGRAD: the wgrad dy^T x; DGELU: the dgrad dy W; others: the forward x W^T */
    struct tg_gemm_args a = {.trans_a = epi == TG_EPI_BGRAD, .trans_b = epi != TG_EPI_BGRAD && epi != TG_EPI_DGELU, .m = m, .n = n, .k = k,
                             .batch = batch, .alpha = alpha, .beta = beta, .a_dt = ab, .b_dt = ab, .c_dt = cd,
                             .epi = epi, .bgrad_dt = bd, .bgrad_acc = acc};
    int64_t ld, st;
    struct pair A = random_matrix(ab, batch, a.trans_a ? k : m, a.trans_a ? m : k, pad_a, &a.lda, &a.stride_a, 0);
    struct pair B = random_matrix(ab, batch, a.trans_b ? n : k, a.trans_b ? k : n, 0, &a.ldb, &a.stride_b, 0);
    struct pair C = random_matrix(cd, batch, m, n, 0, &a.ldc, &a.stride_c, beta == 0.0f);
    struct pair bias = random_matrix(cd, 1, 1, n + off, 0, &ld, &st, 0);
    struct pair aux = random_matrix(cd, batch, m, n, 0, &a.ldaux, &a.stride_aux, epi != TG_EPI_DGELU); /* DGELU reads it */
    struct pair bg = random_matrix(bd, 1, 1, batch * m + off, 0, &ld, &st, acc == 0.0f); /* checked whole: the prefix too */
    struct pair cin = random_matrix(cd, batch, m, n, 0, &ld, &st, 0); /* the C that beta scales, apart from C */
    static const char *names[] = {"none", "bias", "bias_gelu", "bgrad", "dgelu"};
    char what[200];
    snprintf(what, sizeof what, "gemm %s (%s) %lldx%lldx%lld batch %lld %s->%s%s%s alpha %g beta %g acc %g%s", names[epi],
             mode, (long long)m, (long long)n, (long long)k, (long long)batch, tg_dtype_name(ab), tg_dtype_name(cd),
             epi == TG_EPI_BGRAD ? " bgrad " : "", epi == TG_EPI_BGRAD ? tg_dtype_name(bd) : "", alpha, beta, acc,
             with_aux ? " +aux" : "");
    if (off) snprintf(what + strlen(what), sizeof what - strlen(what), " vector at +%lld", (long long)off);
    if (pad_a) snprintf(what + strlen(what), sizeof what - strlen(what), " lda +%d", pad_a);
    if (with_cin) strncat(what, " C from c_in", sizeof what - strlen(what) - 1);
    tg_status rc[2];
    for (int dev = 0; dev < 2; dev++) {
        a.a = dev ? A.g : A.c, a.b = dev ? B.g : B.c, a.c = dev ? C.g : C.c;
        const size_t vo = (size_t)off * tg_dtype_size(epi == TG_EPI_BGRAD ? bd : cd);
        a.bias = epi == TG_EPI_BIAS || epi == TG_EPI_BIAS_GELU ? (char *)(dev ? bias.g : bias.c) + vo : NULL;
        a.aux = with_aux ? (dev ? aux.g : aux.c) : NULL;
        a.bgrad = epi == TG_EPI_BGRAD ? (char *)(dev ? bg.g : bg.c) + vo : NULL;
        a.c_in = with_cin ? (dev ? cin.g : cin.c) : NULL;
        rc[dev] = dev ? tg_backend_cuda.gemm(gs, &a) : tg_backend_cpu.gemm(cs, &a);
    }
    sync_both();
    if (run_ok(rc[0], rc[1], what)) {
        double tc = cd == TG_BF16 ? 1e-2 : EPI_F32_TOL;
        char w2[240];
        check_close(&C, cd, C.bytes / tg_dtype_size(cd), tc, what);
        if (with_aux) {
            snprintf(w2, sizeof w2, "%s: aux", what);
            check_close(&aux, cd, aux.bytes / tg_dtype_size(cd), tc, w2);
        }
        if (epi == TG_EPI_BGRAD) {
            snprintf(w2, sizeof w2, "%s: bgrad", what);
            check_close(&bg, bd, bg.bytes / tg_dtype_size(bd), bd == TG_BF16 || cd == TG_BF16 ? 1e-2 : EPI_F32_TOL, w2);
        }
    }
    pair_free(&A), pair_free(&B), pair_free(&C), pair_free(&bias), pair_free(&aux), pair_free(&bg), pair_free(&cin);
}

static void epi_case(int epi, tg_dtype ab, tg_dtype cd, tg_dtype bd, int64_t m, int64_t n, int64_t k, int64_t batch,
                     float beta, float acc, int with_aux, int with_cin, const char *mode)
{
    epi_case_x(epi, ab, cd, bd, m, n, k, batch, beta, acc, with_aux, with_cin, mode, 1.0f, 0, 0);
}

static void test_gemm_epilogues(void)
{
    const tg_dtype types[][2] = {{TG_F32, TG_F32}, {TG_BF16, TG_BF16}, {TG_BF16, TG_F32}};
    for (int forced = 0; forced < 2; forced++) {
        const char *mode = forced ? "unfused" : "fused";
        tg_debug_set(TG_DEBUG_EPILOGUE_UNFUSED, forced);
        for (int t = 0; t < 3; t++) {
            tg_dtype ab = types[t][0], cd = types[t][1];
            epi_case(TG_EPI_BIAS, ab, cd, TG_F32, 64, 96, 128, 1, 0.0f, 0, 0, 0, mode);
            epi_case(TG_EPI_BIAS, ab, cd, TG_F32, 37, 45, 29, 3, 1.0f, 0, 0, 0, mode);
            epi_case(TG_EPI_BIAS_GELU, ab, cd, TG_F32, 64, 96, 128, 1, 0.0f, 0, 1, 0, mode);
            epi_case(TG_EPI_BIAS_GELU, ab, cd, TG_F32, 64, 96, 128, 1, 0.0f, 0, 0, 0, mode);
            epi_case(TG_EPI_BIAS_GELU, ab, cd, TG_F32, 256, 1024, 384, 2, 0.0f, 0, 1, 0, mode);
            epi_case(TG_EPI_BIAS_GELU, ab, cd, TG_F32, 33, 37, 29, 1, 0.5f, 0, 1, 0, mode); /* aux ld 37: not a multiple of 8 */
            /* a residual as the C input (the output projections' GEMMs) */
            epi_case(TG_EPI_BIAS, ab, cd, TG_F32, 64, 96, 128, 1, 1.0f, 0, 0, 1, mode);
            epi_case(TG_EPI_NONE, ab, cd, TG_F32, 37, 45, 29, 3, 1.0f, 0, 0, 1, mode);
            for (int acc = 0; acc < 2; acc++) {
                epi_case(TG_EPI_BGRAD, ab, cd, cd, 96, 64, 128, 1, (float)acc, (float)acc, 0, 0, mode);
                epi_case(TG_EPI_BGRAD, ab, cd, TG_F32, 768, 256, 1024, 1, (float)acc, (float)acc, 0, 0, mode);
                epi_case(TG_EPI_BGRAD, ab, cd, cd, 40, 24, 77, 2, (float)acc, (float)acc, 0, 0, mode);
            }
            /* alpha != 1 scales the product, not the bias grad (a sum of dy); bias and bias grad as views at
             * offsets (1 element: off 16 bytes, so the bias takes the unfused kernels and the bias grad
             * cuBLASLt's scratch or the column sum; 8: aligned, cuBLASLt straight); A's rows padded, so the bias
             * grad's column sums step over NaN padding (vector path at +8, the element one at +3) */
            epi_case_x(TG_EPI_BGRAD, ab, cd, cd, 96, 64, 128, 1, 0.0f, 0.0f, 0, 0, mode, 0.5f, 0, 0);
            epi_case_x(TG_EPI_BGRAD, ab, cd, TG_F32, 768, 256, 1024, 1, 1.0f, 1.0f, 0, 0, mode, 2.0f, 0, 8);
            epi_case_x(TG_EPI_BGRAD, ab, cd, cd, 96, 64, 128, 2, 0.0f, 0.0f, 0, 0, mode, 1.0f, 1, 3);
            epi_case_x(TG_EPI_BGRAD, ab, cd, TG_F32, 96, 64, 128, 1, 1.0f, 1.0f, 0, 0, mode, 1.0f, 8, 8);
            epi_case_x(TG_EPI_BIAS, ab, cd, TG_F32, 64, 96, 128, 1, 0.0f, 0, 0, 0, mode, 0.5f, 1, 0);
            epi_case_x(TG_EPI_BIAS, ab, cd, TG_F32, 64, 96, 128, 1, 0.0f, 0, 0, 0, mode, 1.0f, 8, 0);
            epi_case_x(TG_EPI_BIAS_GELU, ab, cd, TG_F32, 64, 96, 128, 1, 0.0f, 0, 1, 0, mode, 1.5f, 1, 0);
            epi_case_x(TG_EPI_BIAS_GELU, ab, cd, TG_F32, 64, 96, 128, 1, 0.0f, 0, 1, 0, mode, 1.0f, 8, 0);
            /* DGELU (fc2's dgrad into fc1's gelu): aux is the pre-activation, read */
            epi_case(TG_EPI_DGELU, ab, cd, TG_F32, 64, 96, 128, 1, 0.0f, 0, 1, 0, mode);
            epi_case(TG_EPI_DGELU, ab, cd, TG_F32, 512, 3072, 768, 1, 0.0f, 0, 1, 0, mode); /* GPT-2 MLP width */
            epi_case(TG_EPI_DGELU, ab, cd, TG_F32, 256, 1024, 384, 2, 0.0f, 0, 1, 0, mode);
            epi_case(TG_EPI_DGELU, ab, cd, TG_F32, 37, 45, 29, 3, 1.0f, 0, 1, 0, mode);
            epi_case(TG_EPI_DGELU, ab, cd, TG_F32, 33, 37, 29, 1, 0.5f, 0, 1, 0, mode); /* aux ld 37: the fallback */
            epi_case(TG_EPI_DGELU, ab, cd, TG_F32, 64, 96, 128, 1, 1.0f, 0, 1, 1, mode); /* C from c_in */
        }
    }
    tg_debug_set(TG_DEBUG_EPILOGUE_UNFUSED, 0);
}

/* ------------------------------------------------------------------ reduce */
static void test_reduce(void)
{
    static const char *names[] = {"sum", "max_abs", "max_abs_diff", "sumsq"};
    const int64_t sizes[] = {1, 1000, (1 << 20) + 3};
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = all_dt[d];
        for (int op = TG_REDUCE_SUM; op <= TG_REDUCE_SUMSQ; op++) {
            for (int si = 0; si < 3; si++) {
                for (int with_nan = 0; with_nan < 2; with_nan++) {
                    if (with_nan && si != 1) continue;
                    int64_t n = sizes[si];
                    struct pair a = random_pair(dt, (size_t)n, 0), b = random_pair(dt, (size_t)n, 0);
                    struct pair out = pair_new(sizeof(float));
                    pair_poison(&out);
                    if (with_nan) { /* one NaN in the middle of a */
                        float nanv = NAN;
                        uint16_t nanb = 0x7fc0;
                        size_t at = (size_t)n / 2 * tg_dtype_size(dt);
                        const void *src = dt == TG_F32 ? (const void *)&nanv : (const void *)&nanb;
                        memcpy((char *)a.c + at, src, tg_dtype_size(dt));
                        tg_backend_cuda.memcpy(gs, (char *)a.g + at, src, tg_dtype_size(dt), TG_H2D);
                    }
                    struct tg_reduce_args r = {.op = (tg_reduce_op)op, .a = a.c, .b = b.c, .dt = dt, .n = n, .out = out.c};
                    tg_status sc = tg_backend_cpu.reduce(cs, &r);
                    r.a = a.g, r.b = b.g, r.out = out.g;
                    tg_status sg = tg_backend_cuda.reduce(gs, &r);
                    sync_both();
                    char what[96];
                    snprintf(what, sizeof what, "reduce %s %s n=%lld%s", names[op], tg_dtype_name(dt), (long long)n,
                             with_nan ? " with a NaN" : "");
                    if (run_ok(sc, sg, what)) {
                        float *g = pair_gpu(&out), c = *(float *)out.c;
                        if (with_nan) {
                            ok(isnan(*g) && isnan(c), "%s: NaN on both (cpu %g, cuda %g)", what, c, *g);
                        } else {
                            /* both sum in f64; they differ by the f32 rounding and the order */
                            double scale = op == TG_REDUCE_SUM ? sqrt((double)n) + fabs(c) : fabs(c);
                            is_near(*g, c, 1e-5 * scale + 1e-30, "%s", what);
                        }
                        free(g);
                    }
                    pair_free(&a), pair_free(&b), pair_free(&out);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ rand */
static void test_rand(void)
{
    const uint64_t offsets[] = {0, 5, (1ull << 32) + 7};
    const int64_t n = 100001; /* not a multiple of 4: the last counter is cut */
    for (int d = 0; d < 2; d++) {
        tg_dtype dt = all_dt[d];
        for (int dist = TG_RAND_UNIFORM; dist <= TG_RAND_NORMAL; dist++) {
            for (int o = 0; o < 3; o++) {
                struct pair p = pair_new((size_t)n * tg_dtype_size(dt));
                pair_poison(&p);
                struct tg_rand_args a = {.dst = p.c, .dt = dt, .n = n, .dist = (tg_rand_dist)dist,
                                         .a = dist == TG_RAND_UNIFORM ? -2.0 : 0.5,
                                         .b = dist == TG_RAND_UNIFORM ? 3.0 : 2.0, .seed = rnd_u64(), .offset = offsets[o]};
                tg_status sc = tg_backend_cpu.rand(cs, &a);
                a.dst = p.g;
                tg_status sg = tg_backend_cuda.rand(gs, &a);
                sync_both();
                char what[96];
                snprintf(what, sizeof what, "rand %s %s offset %llu", dist == TG_RAND_UNIFORM ? "uniform" : "normal",
                         tg_dtype_name(dt), (unsigned long long)offsets[o]);
                if (!run_ok(sc, sg, what)) {
                } else if (dist == TG_RAND_UNIFORM) {
                    check_exact(&p, what);
                } else {
                    /* f64 log/sin/cos of glibc and CUDA may differ in the last bit */
                    check_close(&p, dt, (size_t)n, dt == TG_BF16 ? 1e-2 : 1e-6, what);
                }
                pair_free(&p);
            }
        }
    }
}

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    plan(NO_PLAN);
    cuda_test_setup();
    char name[256];
    size_t total = 0;
    if (tg_device_describe(gpu, name, sizeof name, &total) == TG_OK) diag("cuda:0 is %s, %zu MiB", name, total >> 20);

    test_fill();
    test_cast();
    test_binary();
    test_axpby();
    test_gemm();
    test_gemm_epilogues();
    test_reduce();
    test_rand();
    return done_testing();
}
#endif
