/* cpu_gemm.c — CPU GEMM with f32 accumulation and the bias / gelu / bias-grad / gelu-grad epilogues: CBLAS for f32 operands when configured, else a packed, cache-blocked OpenMP loop. */
#include "backend/cpu_impl.h"
#include "core/debug.h"

#include <limits.h>
#include <math.h>
#include <string.h>
#ifdef TG_HAVE_BLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* Blocking of the C loop. C is cut into MC x NC tiles, each computed by one
 * thread from start to end: for each KC-deep slice of k it packs its slice of
 * op(A) (MC x KC) and op(B) (KC x NC) into f32 panels and runs the MR x NR
 * register kernel over them, accumulating into an f32 tile; alpha, beta and
 * the rounding to C's dtype are applied once at the end. Tiles are
 * independent (no barrier but the last), and every element sums its k
 * products in the same order whatever the number of threads, so results are
 * deterministic. */
#define MR 6
#define NR 16
#define KC 256
#define MC 144 /* multiple of MR */
#define NC 512 /* multiple of NR */
#define WS_FLOATS (MC * KC + KC * NC + MC * NC) /* per thread: A panels, B panels, f32 tile */

typedef float v8f __attribute__((vector_size(32)));

static inline float ldf(const void *p, tg_dtype dt, int64_t i)
{
    return dt == TG_BF16 ? tg_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

static inline void stf(void *p, tg_dtype dt, int64_t i, float v)
{
    if (dt == TG_BF16) ((uint16_t *)p)[i] = tg_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* The bias / gelu / dgelu epilogue of element (i, j) of batch bi on u = v + beta * C
 * (f32): writes (BIAS_GELU) or reads (DGELU) aux, returns the value to store.
 * The formulas are cpu_nn.c's gelu_forward and gelu_backward (dy * d), so fused
 * and unfused f32 results are the same bits. */
static inline float epilogue(const struct tg_gemm_args *g, int64_t bi, int64_t i, int64_t j, float u)
{
    if (g->epi == TG_EPI_DGELU) {
        float x = ldf((const char *)g->aux + (size_t)(bi * g->stride_aux) * tg_dtype_size(g->c_dt), g->c_dt,
                      i * g->ldaux + j);
        float th = tanhf(GELU_K * (x + GELU_A * x * x * x));
        float d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        return u * d;
    }
    if (g->epi != TG_EPI_BIAS && g->epi != TG_EPI_BIAS_GELU) return u;
    u += ldf(g->bias, g->c_dt, j);
    if (g->epi == TG_EPI_BIAS) return u;
    if (g->aux) stf((char *)g->aux + (size_t)(bi * g->stride_aux) * tg_dtype_size(g->c_dt), g->c_dt, i * g->ldaux + j, u);
    return 0.5f * u * (1.0f + tanhf(GELU_K * (u + GELU_A * u * u * u)));
}

/* C[i][j] of batch bi (c its C) = epilogue(v + beta * C) (beta == 0 overwrites),
 * rounded to C's dtype; v is alpha * op(A) op(B). */
static inline void store_c(const struct tg_gemm_args *g, int64_t bi, void *c, int64_t i, int64_t j, float v)
{
    int64_t idx = i * g->ldc + j;
    if (g->c_dt == TG_BF16) {
        uint16_t *h = (uint16_t *)c + idx;
        *h = tg_f32_to_bf16(epilogue(g, bi, i, j, g->beta == 0.0f ? v : v + g->beta * tg_bf16_to_f32(*h)));
    } else {
        float *f = (float *)c + idx;
        *f = epilogue(g, bi, i, j, g->beta == 0.0f ? v : v + g->beta * *f);
    }
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* op(A)[i][p] and op(B)[p][j] of one batch. */
static inline float op_a(const struct tg_gemm_args *g, const void *a, int64_t i, int64_t p)
{
    return ldf(a, g->a_dt, g->trans_a ? p * g->lda + i : i * g->lda + p);
}
static inline float op_b(const struct tg_gemm_args *g, const void *b, int64_t p, int64_t j)
{
    return ldf(b, g->b_dt, g->trans_b ? j * g->ldb + p : p * g->ldb + j);
}

/* The operands and C of batch bi. */
static void batch_ptrs(const struct tg_gemm_args *g, int64_t bi, const void **a, const void **b, void **c)
{
    *a = (const char *)g->a + (size_t)(bi * g->stride_a) * tg_dtype_size(g->a_dt);
    *b = (const char *)g->b + (size_t)(bi * g->stride_b) * tg_dtype_size(g->b_dt);
    *c = (char *)g->c + (size_t)(bi * g->stride_c) * tg_dtype_size(g->c_dt);
}

/* ------------------------------------------------------------------ the blocked loop */
/* acc (MR rows of stride NC, NR columns) (+)= Ap (kc, MR)^T @ Bp (kc, NR); acc is 32-byte aligned. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static void gemm_kernel(int64_t kc, const float *restrict ap, const float *restrict bp, float *restrict acc, int load)
{
    v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    v8f c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
#define ROW(i) ((v8f *)(acc + (i) * NC))
    if (load) {
        c00 = ROW(0)[0], c01 = ROW(0)[1], c10 = ROW(1)[0], c11 = ROW(1)[1], c20 = ROW(2)[0], c21 = ROW(2)[1];
        c30 = ROW(3)[0], c31 = ROW(3)[1], c40 = ROW(4)[0], c41 = ROW(4)[1], c50 = ROW(5)[0], c51 = ROW(5)[1];
    }
    for (int64_t p = 0; p < kc; p++, ap += MR, bp += NR) {
        v8f b0 = *(const v8f *)bp, b1 = *(const v8f *)(bp + 8);
        c00 += ap[0] * b0, c01 += ap[0] * b1;
        c10 += ap[1] * b0, c11 += ap[1] * b1;
        c20 += ap[2] * b0, c21 += ap[2] * b1;
        c30 += ap[3] * b0, c31 += ap[3] * b1;
        c40 += ap[4] * b0, c41 += ap[4] * b1;
        c50 += ap[5] * b0, c51 += ap[5] * b1;
    }
    ROW(0)[0] = c00, ROW(0)[1] = c01, ROW(1)[0] = c10, ROW(1)[1] = c11, ROW(2)[0] = c20, ROW(2)[1] = c21;
    ROW(3)[0] = c30, ROW(3)[1] = c31, ROW(4)[0] = c40, ROW(4)[1] = c41, ROW(5)[0] = c50, ROW(5)[1] = c51;
#undef ROW
}

/* Packs op(A) rows [i0, i0+mc) x k range [p0, p0+kc) into MR-row panels
 * dst[(ip*kc + p)*MR + ii], zero-padded to a multiple of MR rows. */
static inline __attribute__((always_inline)) void pack_a_as(const struct tg_gemm_args *g, const void *a, int64_t i0,
                                                             int64_t mc, int64_t p0, int64_t kc, float *restrict dst,
                                                             const int bf16)
{
    const int64_t ld = g->lda;
    const tg_dtype dt = bf16 ? TG_BF16 : TG_F32;
    for (int64_t ip = 0; ip * MR < mc; ip++) {
        float *d = dst + ip * kc * MR;
        int64_t rows = min64(MR, mc - ip * MR), r0 = i0 + ip * MR;
        if (!g->trans_a) { /* row i is contiguous in p */
            for (int64_t ii = 0; ii < rows; ii++)
                for (int64_t p = 0; p < kc; p++) d[p * MR + ii] = ldf(a, dt, (r0 + ii) * ld + p0 + p);
        } else { /* stored (k, m): for each p the rows are contiguous */
            for (int64_t p = 0; p < kc; p++)
                for (int64_t ii = 0; ii < rows; ii++) d[p * MR + ii] = ldf(a, dt, (p0 + p) * ld + r0 + ii);
        }
        for (int64_t ii = rows; ii < MR; ii++)
            for (int64_t p = 0; p < kc; p++) d[p * MR + ii] = 0.0f;
    }
}

/* Packs op(B) k range [p0, p0+kc) x columns [j0, j0+nc) into NR-column panels
 * dst[(jp*kc + p)*NR + jj], zero-padded to a multiple of NR columns. */
static inline __attribute__((always_inline)) void pack_b_as(const struct tg_gemm_args *g, const void *b, int64_t j0,
                                                             int64_t nc, int64_t p0, int64_t kc, float *restrict dst,
                                                             const int bf16)
{
    const int64_t ld = g->ldb;
    const tg_dtype dt = bf16 ? TG_BF16 : TG_F32;
    for (int64_t jp = 0; jp * NR < nc; jp++) {
        float *d = dst + jp * kc * NR;
        int64_t cols = min64(NR, nc - jp * NR), c0 = j0 + jp * NR;
        if (cols < NR) memset(d, 0, (size_t)kc * NR * sizeof *d);
        if (!g->trans_b) { /* for each p the columns are contiguous */
            for (int64_t p = 0; p < kc; p++)
                for (int64_t jj = 0; jj < cols; jj++) d[p * NR + jj] = ldf(b, dt, (p0 + p) * ld + c0 + jj);
        } else { /* stored (n, k): column j is contiguous in p */
            for (int64_t jj = 0; jj < cols; jj++)
                for (int64_t p = 0; p < kc; p++) d[p * NR + jj] = ldf(b, dt, (c0 + jj) * ld + p0 + p);
        }
    }
}

/* One MC x NC tile of C at (i0, j0) of batch bi; ws holds WS_FLOATS. */
static void gemm_tile(const struct tg_gemm_args *g, int64_t bi, int64_t i0, int64_t j0, float *ws)
{
    const void *a, *b;
    void *c;
    batch_ptrs(g, bi, &a, &b, &c);
    int64_t mc = min64(MC, g->m - i0), nc = min64(NC, g->n - j0);
    int64_t mp = (mc + MR - 1) / MR, np = (nc + NR - 1) / NR;
    float *ap = ws, *bp = ws + MC * KC, *acc = bp + KC * NC;

    for (int64_t pc = 0; pc < g->k; pc += KC) {
        int64_t kc = min64(KC, g->k - pc);
        if (g->a_dt == TG_BF16) pack_a_as(g, a, i0, mc, pc, kc, ap, 1);
        else pack_a_as(g, a, i0, mc, pc, kc, ap, 0);
        if (g->b_dt == TG_BF16) pack_b_as(g, b, j0, nc, pc, kc, bp, 1);
        else pack_b_as(g, b, j0, nc, pc, kc, bp, 0);
        for (int64_t jp = 0; jp < np; jp++)
            for (int64_t ip = 0; ip < mp; ip++)
                gemm_kernel(kc, ap + ip * kc * MR, bp + jp * kc * NR, acc + ip * MR * NC + jp * NR, pc > 0);
    }
    for (int64_t i = 0; i < mc; i++)
        for (int64_t j = 0; j < nc; j++) store_c(g, bi, c, i0 + i, j0 + j, g->alpha * acc[i * NC + j]);
}

/* Returns 0 when the workspace cannot be allocated. */
static int gemm_blocked(const struct tg_gemm_args *g)
{
    int64_t tm = (g->m + MC - 1) / MC, tn = (g->n + NC - 1) / NC, ntiles = g->batch * tm * tn;
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    float *ws = cpu_aligned_alloc((size_t)nthreads * WS_FLOATS * sizeof(float));
    if (!ws) return 0;
    double flops = 2.0 * (double)g->batch * (double)g->m * (double)g->n * (double)g->k;
#pragma omp parallel for schedule(dynamic) if (ntiles > 1 && flops > 2e6)
    for (int64_t t = 0; t < ntiles; t++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        int64_t bi = t / (tm * tn), r = t % (tm * tn);
        gemm_tile(g, bi, (r / tn) * MC, (r % tn) * NC, ws + (size_t)tid * WS_FLOATS);
    }
    free(ws);
    return 1;
}

/* Without workspace (allocation failed): slow, same accumulation order per element. */
static void gemm_naive(const struct tg_gemm_args *g)
{
    for (int64_t bi = 0; bi < g->batch; bi++) {
        const void *a, *b;
        void *c;
        batch_ptrs(g, bi, &a, &b, &c);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++) {
                float acc = 0;
                for (int64_t p = 0; p < g->k; p++) acc += op_a(g, a, i, p) * op_b(g, b, p, j);
                store_c(g, bi, c, i, j, g->alpha * acc);
            }
    }
}

/* ------------------------------------------------------------------ CBLAS */
#ifdef TG_HAVE_BLAS
/* CBLAS takes all-f32 GEMMs; bf16 ones go through the blocked loop, whose
 * packing converts them (faster than converting, then calling CBLAS). */
static int blas_fits(const struct tg_gemm_args *g)
{
    if (g->a_dt != TG_F32 || g->b_dt != TG_F32 || g->c_dt != TG_F32) return 0;
    int64_t acols = g->trans_a ? g->m : g->k, bcols = g->trans_b ? g->k : g->n;
    return g->m <= INT_MAX && g->n <= INT_MAX && g->k <= INT_MAX && g->lda <= INT_MAX && g->ldb <= INT_MAX &&
           g->ldc <= INT_MAX && g->lda >= acols && g->ldb >= bcols && g->ldc >= g->n;
}

static void gemm_blas(const struct tg_gemm_args *g)
{
    for (int64_t bi = 0; bi < g->batch; bi++) {
        const void *a, *b;
        void *c;
        batch_ptrs(g, bi, &a, &b, &c);
        cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                    (int)g->m, (int)g->n, (int)g->k, g->alpha, a, (int)g->lda, b, (int)g->ldb, g->beta, c, (int)g->ldc);
        if (g->epi != TG_EPI_BIAS && g->epi != TG_EPI_BIAS_GELU && g->epi != TG_EPI_DGELU) continue;
        /* C is f32 here, so the epilogue after the call sees the same v + beta * C as the blocked loop */
        float *f = c;
#pragma omp parallel for schedule(static) if (g->m * g->n > CPU_PAR_MIN)
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++) f[i * g->ldc + j] = epilogue(g, bi, i, j, f[i * g->ldc + j]);
    }
}
#endif

/* ------------------------------------------------------------------ entry */
/* BGRAD: bgrad[b*m + i] = acc * bgrad + sum_p op(A[b])[i][p], summed in double
 * in p order by one thread per block of rows i: the order of cpu_nn.c's
 * bias_backward_dw over dy's rows, so fused and unfused are the same bits. */
#define BGRAD_BLOCK 32
static void bgrad_run(const struct tg_gemm_args *g)
{
    for (int64_t bi = 0; bi < g->batch; bi++) {
        const void *a, *b;
        void *c;
        batch_ptrs(g, bi, &a, &b, &c);
#pragma omp parallel for schedule(static) if (g->m * g->k > CPU_PAR_MIN)
        for (int64_t i0 = 0; i0 < g->m; i0 += BGRAD_BLOCK) {
            int64_t w = min64(BGRAD_BLOCK, g->m - i0);
            double s[BGRAD_BLOCK] = {0};
            for (int64_t p = 0; p < g->k; p++)
                for (int64_t ii = 0; ii < w; ii++) s[ii] += op_a(g, a, i0 + ii, p);
            for (int64_t ii = 0; ii < w; ii++) {
                int64_t o = bi * g->m + i0 + ii;
                double v = g->bgrad_acc == 0.0f ? s[ii] : (double)g->bgrad_acc * ldf(g->bgrad, g->bgrad_dt, o) + s[ii];
                stf(g->bgrad, g->bgrad_dt, o, (float)v);
            }
        }
    }
}

/* C = c_in, row by row, so the paths below read it as C (beta != 0 only). */
static void copy_c_in(const struct tg_gemm_args *g)
{
    size_t es = tg_dtype_size(g->c_dt), row = (size_t)g->n * es;
    for (int64_t bi = 0; bi < g->batch; bi++)
        for (int64_t i = 0; i < g->m; i++) {
            size_t off = ((size_t)(bi * g->stride_c) + (size_t)(i * g->ldc)) * es;
            memmove((char *)g->c + off, (const char *)g->c_in + off, row);
        }
}

static void gemm_run(const void *p)
{
    const struct tg_gemm_args *g = p;
    if (g->epi == TG_EPI_BGRAD && g->m > 0 && g->batch > 0) bgrad_run(g);
    if (g->m <= 0 || g->n <= 0 || g->batch <= 0) return;
    if (g->c_in && g->c_in != g->c && g->beta != 0.0f) copy_c_in(g);

    if (g->k == 0 || g->alpha == 0.0f) { /* C = beta * C, A and B not read */
        for (int64_t bi = 0; bi < g->batch; bi++) {
            const void *a, *b;
            void *c;
            batch_ptrs(g, bi, &a, &b, &c);
            for (int64_t i = 0; i < g->m; i++)
                for (int64_t j = 0; j < g->n; j++) store_c(g, bi, c, i, j, 0.0f);
        }
        return;
    }
#ifdef TG_HAVE_BLAS
    if (blas_fits(g) && !tg_debug_get(TG_DEBUG_GEMM_BLOCKED)) { /* the switch: tests, benchmarks */
        gemm_blas(g);
        return;
    }
#endif
    if (!gemm_blocked(g)) gemm_naive(g);
}


/* ------------------------------------------------------------------ the bf16 study (core/debug.h)
 * With "autocast_gemm" an all-f32 GEMM computes as PyTorch's bf16 autocast does for an f32 model: op(A),
 * op(B) and the bias rounded to bf16, the product (+ bias) rounded, the GELU output (or DGELU product)
 * rounded, then C = that + beta * C in f32. "round_residual" rounds C when a residual c_in was added,
 * "round_grads" when it accumulates in place (the wgrads), and the bias gradient. */
struct study_gemm {
    struct tg_gemm_args g;
    int round_residual, round_grads;
};

static inline float bf16r(float v) { return tg_bf16_to_f32(tg_f32_to_bf16(v)); }

static void study_run(const void *p)
{
    const struct study_gemm *sg = p;
    const struct tg_gemm_args *g = &sg->g;
    int64_t m = g->m, n = g->n, k = g->k, nb = g->batch;
    int residual = g->c_in && g->c_in != g->c;
    if (m <= 0 || n <= 0 || nb <= 0) return;
    if (g->c_in && g->c_in != g->c && g->beta != 0.0f) copy_c_in(g);
    float *ab = malloc((size_t)(nb * m * (k ? k : 1)) * sizeof(float));
    float *bb = malloc((size_t)(nb * (k ? k : 1) * n) * sizeof(float));
    float *t = malloc((size_t)(nb * m * n) * sizeof(float));
    if (!ab || !bb || !t) { /* no memory for the study's copies: the plain GEMM */
        free(ab), free(bb), free(t);
        gemm_run(g);
        return;
    }
    for (int64_t bi = 0; bi < nb; bi++) {
        const void *a, *b;
        void *c;
        batch_ptrs(g, bi, &a, &b, &c);
        for (int64_t i = 0; i < m; i++)
            for (int64_t q = 0; q < k; q++) ab[(bi * m + i) * k + q] = bf16r(op_a(g, a, i, q));
        for (int64_t q = 0; q < k; q++)
            for (int64_t j = 0; j < n; j++) bb[(bi * k + q) * n + j] = bf16r(op_b(g, b, q, j));
    }
    struct tg_gemm_args h = {.trans_a = 0, .trans_b = 0, .m = m, .n = n, .k = k, .batch = nb, .alpha = g->alpha,
                             .beta = 0.0f, .a = ab, .lda = k, .stride_a = m * k, .a_dt = TG_F32, .b = bb, .ldb = n,
                             .stride_b = k * n, .b_dt = TG_F32, .c = t, .ldc = n, .stride_c = m * n, .c_dt = TG_F32,
                             .epi = TG_EPI_NONE};
    if (k == 0 || g->alpha == 0.0f) memset(t, 0, (size_t)(nb * m * n) * sizeof(float));
    else if (!gemm_blocked(&h)) gemm_naive(&h);
    for (int64_t bi = 0; bi < nb; bi++) {
        const void *a, *b;
        void *c;
        batch_ptrs(g, bi, &a, &b, &c);
        float *f = c;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float v = t[(bi * m + i) * n + j];
                if (g->epi == TG_EPI_BIAS || g->epi == TG_EPI_BIAS_GELU) v += bf16r(((const float *)g->bias)[j]);
                v = bf16r(v);
                if (g->epi == TG_EPI_BIAS_GELU) {
                    if (g->aux) ((float *)g->aux)[bi * g->stride_aux + i * g->ldaux + j] = v;
                    v = bf16r(0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_A * v * v * v))));
                } else if (g->epi == TG_EPI_DGELU) {
                    v = bf16r(epilogue(g, bi, i, j, v));
                }
                float *o = f + i * g->ldc + j;
                float u = g->beta == 0.0f ? v : v + g->beta * *o;
                if ((residual && sg->round_residual) || (!residual && sg->round_grads)) u = bf16r(u);
                *o = u;
            }
        if (g->epi == TG_EPI_BGRAD)
            for (int64_t i = 0; i < m; i++) {
                double s = 0;
                for (int64_t q = 0; q < k; q++) s += ab[(bi * m + i) * k + q];
                int64_t o = bi * m + i;
                float v = bf16r((float)s);
                if (g->bgrad_acc != 0.0f) v += g->bgrad_acc * ((float *)g->bgrad)[o];
                ((float *)g->bgrad)[o] = sg->round_grads ? bf16r(v) : v;
            }
    }
    free(ab), free(bb), free(t);
}

tg_status cpu_gemm(tg_stream *s, const struct tg_gemm_args *a)
{
    if ((a->a_dt != TG_F32 && a->a_dt != TG_BF16) || (a->b_dt != TG_F32 && a->b_dt != TG_BF16) ||
        (a->c_dt != TG_F32 && a->c_dt != TG_BF16))
        return tg_error(TG_ENOTSUP, "cpu gemm: dtypes %s x %s -> %s are not supported", tg_dtype_name(a->a_dt),
                        tg_dtype_name(a->b_dt), tg_dtype_name(a->c_dt));
    if (a->m < 0 || a->n < 0 || a->k < 0 || a->batch < 0)
        return tg_error(TG_EINVAL, "cpu gemm: negative size (m %lld, n %lld, k %lld, batch %lld)", (long long)a->m,
                        (long long)a->n, (long long)a->k, (long long)a->batch);
    if ((unsigned)a->epi > TG_EPI_DGELU || ((a->epi == TG_EPI_BIAS || a->epi == TG_EPI_BIAS_GELU) && !a->bias) ||
        (a->epi == TG_EPI_BGRAD && (!a->bgrad || (a->bgrad_dt != TG_F32 && a->bgrad_dt != TG_BF16))) ||
        (a->epi == TG_EPI_DGELU && !a->aux))
        return tg_error(TG_EINVAL, "cpu gemm: bad epilogue %d (bias, aux, bgrad or its dtype missing)", (int)a->epi);
    if (a->a_dt == TG_F32 && a->b_dt == TG_F32 && a->c_dt == TG_F32 && (a->epi != TG_EPI_BGRAD || a->bgrad_dt == TG_F32) &&
        tg_debug_get(TG_DEBUG_AUTOCAST_GEMM)) {
        struct study_gemm sg = {.g = *a, .round_residual = tg_debug_get(TG_DEBUG_ROUND_RESIDUAL),
                                .round_grads = tg_debug_get(TG_DEBUG_ROUND_GRADS)};
        return cpu_submit(s, study_run, &sg, sizeof sg);
    }
    return cpu_submit(s, gemm_run, a, sizeof *a);
}
