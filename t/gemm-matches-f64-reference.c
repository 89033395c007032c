/* gemm-matches-f64-reference.c — CPU GEMM (CBLAS and blocked paths) vs a float64 reference: transposes, odd sizes, alpha/beta, batches, bf16. */
#include "backend/backend.h"
#include "core/debug.h"
#include "tap.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const tg_device cpu = {TG_CPU, 0};
static uint64_t rng = 0x2545f4914f6cdd1dull;

static double urand(void) /* in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-52 - 1.0;
}

static tg_tensor *tensor(tg_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t shape[3] = {d0, d1, d2};
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, ndim, shape, cpu, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    return t;
}

/* Fills t with values (random, or NaN) and returns the values the tensor actually holds. */
static double *fill_host(tg_tensor *t, int poison)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = poison ? NAN : urand();
    if (tg_tensor_write_f64(t, v, n) != TG_OK || tg_tensor_read_f64(t, v, n) != TG_OK) bail_out("fill: %s", tg_last_error());
    return v;
}

struct gcase {
    int64_t m, n, k, batch;
    int ta, tb;
    double alpha, beta;
    tg_dtype ab_dt, c_dt;
    int a_broadcast; /* A 2-D, shared by every batch */
};

/* Runs one case; returns the number of wrong elements (diag on the first). */
static int run_case(const struct gcase *g)
{
    int64_t m = g->m, n = g->n, k = g->k, nb = g->batch;
    int batched = nb > 1 || g->a_broadcast;
    int64_t ar = g->ta ? k : m, ac = g->ta ? m : k, br = g->tb ? n : k, bc = g->tb ? k : n;
    tg_tensor *a = g->a_broadcast || !batched ? tensor(g->ab_dt, 2, ar, ac, 0) : tensor(g->ab_dt, 3, nb, ar, ac);
    tg_tensor *b = batched ? tensor(g->ab_dt, 3, nb, br, bc) : tensor(g->ab_dt, 2, br, bc, 0);
    tg_tensor *c = batched ? tensor(g->c_dt, 3, nb, m, n) : tensor(g->c_dt, 2, m, n, 0);
    double *av = fill_host(a, 0), *bv = fill_host(b, 0), *cv = fill_host(c, g->beta == 0.0);
    size_t nc = (size_t)(nb * m * n);
    double *got = malloc((nc ? nc : 1) * sizeof *got);
    int bad = 0;

    tg_status st = tg_gemm(c, a, g->ta, b, g->tb, g->alpha, g->beta);
    if (st != TG_OK || tg_tensor_read_f64(c, got, nc) != TG_OK) {
        diag("gemm %lldx%lldx%lld: %s", (long long)m, (long long)n, (long long)k, tg_last_error());
        bad = 1;
    }
    for (int64_t q = 0; q < nb && !bad; q++) {
        const double *A = av + (g->a_broadcast ? 0 : q * ar * ac), *B = bv + q * br * bc;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, sabs = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = g->ta ? A[p * ac + i] : A[i * ac + p], y = g->tb ? B[j * bc + p] : B[p * bc + j];
                    s += x * y, sabs += fabs(x * y);
                }
                double c0 = cv[(q * m + i) * n + j];
                double want = g->alpha * s + (g->beta == 0.0 ? 0.0 : g->beta * c0);
                double scale = fabs(g->alpha) * sabs + (g->beta == 0.0 ? 0.0 : fabs(g->beta * c0));
                double tol = 2e-7 * (double)(k + 4) * scale + 1e-30;
                if (g->c_dt == TG_BF16) tol += 0x1p-8 * fabs(want) + 1e-38;
                double v = got[(q * m + i) * n + j];
                if (!(fabs(v - want) <= tol)) {
                    if (bad++ == 0)
                        diag("m=%lld n=%lld k=%lld batch=%lld ta=%d tb=%d alpha=%g beta=%g: C[%lld][%lld][%lld] = %.9g, want %.9g",
                             (long long)m, (long long)n, (long long)k, (long long)nb, g->ta, g->tb, g->alpha, g->beta,
                             (long long)q, (long long)i, (long long)j, v, want);
                }
            }
    }
    tg_tensor_free(a), tg_tensor_free(b), tg_tensor_free(c);
    free(av), free(bv), free(cv), free(got);
    return bad;
}

static const char *dtn(tg_dtype dt) { return tg_dtype_name(dt); }

static void suite(const char *mode)
{
    static const int64_t sizes[] = {1, 3, 17, 67, 130};
    static const tg_dtype combos[3][2] = {{TG_F32, TG_F32}, {TG_BF16, TG_F32}, {TG_BF16, TG_BF16}};
    const int ns = sizeof sizes / sizeof sizes[0];

    for (int d = 0; d < 3; d++)
        for (int t = 0; t < 4; t++) {
            int bad = 0, cases = 0;
            for (int im = 0; im < ns; im++)
                for (int in = 0; in < ns; in++)
                    for (int ik = 0; ik < ns; ik++) {
                        if (combos[d][0] == TG_BF16 && (im + in + ik) % 2) continue; /* half the grid for bf16 */
                        struct gcase g = {sizes[im], sizes[in], sizes[ik], 1, t & 1, t >> 1, 1.0, 0.0, combos[d][0], combos[d][1], 0};
                        bad += run_case(&g) != 0;
                        cases++;
                    }
            ok(bad == 0, "%s: %s x %s -> %s, op(A)%s op(B)%s: %d size triples from {1,3,17,67,130} match", mode,
               dtn(combos[d][0]), dtn(combos[d][0]), dtn(combos[d][1]), t & 1 ? "^T" : "", t >> 1 ? "^T" : "", cases);
        }

    /* alpha / beta: scaling, accumulation, overwrite of NaN-poisoned C, alpha = 0 and k = 0 (only beta). */
    static const double ab[][2] = {{0.5, -1.5}, {1.0, 1.0}, {-2.0, 0.0}, {0.0, 2.0}, {0.0, 0.0}};
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++) {
            int bad = 0;
            for (int t = 0; t < 4; t++) {
                struct gcase g = {67, 17, 130, 1, t & 1, t >> 1, ab[i][0], ab[i][1], combos[d][0], combos[d][1], 0};
                bad += run_case(&g) != 0;
            }
            ok(bad == 0, "%s: %s -> %s, alpha=%g beta=%g%s, all transposes", mode, dtn(combos[d][0]), dtn(combos[d][1]),
               ab[i][0], ab[i][1], ab[i][1] == 0.0 ? " (C poisoned with NaN)" : "");
        }
    for (int d = 0; d < 3; d++) {
        struct gcase g0 = {5, 7, 0, 1, 0, 0, 1.0, 0.0, combos[d][0], combos[d][1], 0};
        struct gcase g1 = {5, 7, 0, 1, 1, 1, 1.0, 0.5, combos[d][0], combos[d][1], 0};
        ok(run_case(&g0) == 0 && run_case(&g1) == 0, "%s: %s -> %s, k = 0 gives beta * C (0 over NaN when beta = 0)", mode,
           dtn(combos[d][0]), dtn(combos[d][1]));
    }

    /* Sizes past the blocking: k > 256 (several K panels), n > 2048 (several B blocks). */
    for (int d = 0; d < 3; d++) {
        struct gcase g0 = {37, 45, 600, 1, 0, 1, 0.75, 0.25, combos[d][0], combos[d][1], 0};
        struct gcase g1 = {13, 2100, 300, 1, 1, 0, 1.0, 0.0, combos[d][0], combos[d][1], 0};
        ok(run_case(&g0) == 0 && run_case(&g1) == 0, "%s: %s -> %s, k = 600 and n = 2100 (several blocks)", mode,
           dtn(combos[d][0]), dtn(combos[d][1]));
    }

    /* Batched: 3-D operands, and a 2-D A shared by all batches. */
    for (int d = 0; d < 3; d++) {
        int bad = 0;
        for (int t = 0; t < 4; t++) {
            struct gcase g0 = {17, 3, 67, 4, t & 1, t >> 1, 1.0, 0.0, combos[d][0], combos[d][1], 0};
            struct gcase g1 = {3, 17, 5, 3, t & 1, t >> 1, -1.0, 1.0, combos[d][0], combos[d][1], 1};
            bad += run_case(&g0) != 0;
            bad += run_case(&g1) != 0;
        }
        ok(bad == 0, "%s: %s -> %s, batched (batch 4, and batch 3 with a shared 2-D A), all transposes", mode,
           dtn(combos[d][0]), dtn(combos[d][1]));
    }
}

/* The backend entry with leading dimensions larger than the rows and batch
 * strides with gaps (what views into bigger buffers need). */
static void strided_backend_call(void)
{
    const int64_t m = 5, n = 6, k = 7, lda = 11, ldb = 9, ldc = 8, sa = 80, sb = 70, sc = 50, nb = 2; /* sa >= k*lda, sb >= k*ldb, sc >= m*ldc */
    float *a = malloc(sa * nb * sizeof *a), *b = malloc(sb * nb * sizeof *b), *c = malloc(sc * nb * sizeof *c);
    for (int64_t i = 0; i < sa * nb; i++) a[i] = (float)urand();
    for (int64_t i = 0; i < sb * nb; i++) b[i] = (float)urand();
    for (int64_t i = 0; i < sc * nb; i++) c[i] = -7.0f; /* sentinel outside C; inside C is overwritten */
    struct tg_gemm_args g = {.trans_a = 1, .trans_b = 0, .m = m, .n = n, .k = k, .batch = nb, .alpha = 1.0f, .beta = 0.0f,
                             .a = a, .lda = lda, .stride_a = sa, .a_dt = TG_F32,
                             .b = b, .ldb = ldb, .stride_b = sb, .b_dt = TG_F32,
                             .c = c, .ldc = ldc, .stride_c = sc, .c_dt = TG_F32};
    tg_stream *s = tg_stream_current(cpu);
    ok(tg_backend_cpu.gemm(s, &g) == TG_OK, "backend gemm with lda/ldb/ldc and batch strides");
    int bad = 0, touched = 0;
    for (int64_t q = 0; q < nb; q++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ldc; j++) {
                float v = c[q * sc + i * ldc + j];
                if (j >= n) {
                    touched += v != -7.0f;
                    continue;
                }
                double want = 0;
                for (int64_t p = 0; p < k; p++) want += (double)a[q * sa + p * lda + i] * b[q * sb + p * ldb + j];
                bad += fabs(v - want) > 1e-5;
            }
    is_int(bad, 0, "strided backend gemm matches the reference");
    is_int(touched, 0, "strided backend gemm leaves the gaps between rows of C alone");
    free(a), free(b), free(c);
}

static int same_result_twice(int threads_a, int threads_b)
{
    tg_tensor *a = tensor(TG_F32, 2, 300, 200, 0), *b = tensor(TG_F32, 2, 200, 290, 0);
    tg_tensor *c1 = tensor(TG_F32, 2, 300, 290, 0), *c2 = tensor(TG_F32, 2, 300, 290, 0);
    free(fill_host(a, 0)), free(fill_host(b, 0));
    size_t n = 300 * 290;
    float *x = malloc(n * 4), *y = malloc(n * 4);
#ifdef _OPENMP
    omp_set_num_threads(threads_a);
#endif
    tg_gemm(c1, a, 0, b, 0, 1.0, 0.0);
#ifdef _OPENMP
    omp_set_num_threads(threads_b);
#endif
    tg_gemm(c2, a, 0, b, 0, 1.0, 0.0);
    tg_tensor_read(c1, x, n * 4), tg_tensor_read(c2, y, n * 4);
    int same = memcmp(x, y, n * 4) == 0;
    tg_tensor_free(a), tg_tensor_free(b), tg_tensor_free(c1), tg_tensor_free(c2);
    free(x), free(y);
    return same;
}

int main(void)
{
    plan(NO_PLAN);
    diag("build options: %s", tg_build_options());

    suite("default path");
    ok(same_result_twice(2, 2), "default path: the same GEMM twice gives bitwise the same C");
    tg_debug_set(TG_DEBUG_GEMM_BLOCKED, 1);
    suite("blocked path");
    ok(same_result_twice(2, 2), "blocked path: the same GEMM twice gives bitwise the same C");
    ok(same_result_twice(1, 2), "blocked path: 1 and 2 threads give bitwise the same C");
    strided_backend_call();
    tg_debug_set(TG_DEBUG_GEMM_BLOCKED, 0);
    strided_backend_call();

    /* Invalid shapes and dtypes are refused with messages that name them. */
    tg_tensor *a = tensor(TG_F32, 2, 2, 3, 0), *b = tensor(TG_F32, 2, 4, 5, 0), *c = tensor(TG_F32, 2, 2, 5, 0);
    tg_tensor *b35 = tensor(TG_F32, 2, 3, 5, 0), *c24 = tensor(TG_F32, 2, 2, 4, 0), *bb = tensor(TG_BF16, 2, 3, 5, 0);
    tg_tensor *v1 = tensor(TG_F32, 1, 6, 0, 0);
    is_int(tg_gemm(c, a, 0, b, 0, 1, 0), TG_EINVAL, "[2,3] @ [4,5] is refused");
    like(tg_last_error(), "[2,3]", "the message names A's shape");
    like(tg_last_error(), "[4,5]", "the message names B's shape");
    is_int(tg_gemm(c24, a, 0, b35, 0, 1, 0), TG_EINVAL, "C [2,4] for [2,3] @ [3,5] is refused");
    like(tg_last_error(), "[2,4]", "the message names C's shape");
    is_int(tg_gemm(c, a, 1, b35, 0, 1, 0), TG_EINVAL, "[2,3]^T @ [3,5] is refused (k 2 vs 3)");
    is_int(tg_gemm(c, a, 0, b35, 0, 1, 0), TG_OK, "[2,3] @ [3,5] into [2,5] is fine");
    is_int(tg_gemm(c, a, 0, bb, 0, 1, 0), TG_EINVAL, "f32 A with bf16 B is refused");
    like(tg_last_error(), "bf16", "the message names the dtype");
    is_int(tg_gemm(c, v1, 0, b35, 0, 1, 0), TG_EINVAL, "a 1-D operand is refused");
    tg_tensor_free(a), tg_tensor_free(b), tg_tensor_free(c), tg_tensor_free(b35), tg_tensor_free(c24), tg_tensor_free(bb);
    tg_tensor_free(v1);
    return done_testing();
}
