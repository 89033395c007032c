/* cuda_gemm.c — row-major batched GEMM through cuBLASLt (f32 accumulation) with bias / gelu / bias-grad / gelu-grad epilogues, capturable. */
#include "backend/cuda_impl.h"
#include "core/debug.h"

#include "kernels.h" /* kernels/ is not on the C include path */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* cuBLASLt is column-major. A row-major (r, c) matrix with leading dim ld is
 * the column-major (c, r) matrix with the same ld, i.e. its transpose, so
 * row-major C = op(A) @ op(B) is computed as column-major
 * C^T (n, m) = op(B)^T (n, k) @ op(A)^T (k, m): B's storage is cuBLASLt's
 * "A" and A's storage its "B", each transposed exactly when the caller asked.
 *
 * Epilogues map the same way: row-major C's columns j are the rows of
 * column-major D, so BIAS (one value per row of D) is our bias[j]; aux has
 * D's layout (ld ldaux); our BGRAD sums op(A)[i][:] over k, and A is
 * cuBLASLt's B, so it is BGRADB (one value per column of D = our row i).
 * cuBLASLt writes the bias grad in D's dtype and cannot accumulate: with
 * bgrad_acc != 0 (or another dtype, or a misaligned target) it writes to the
 * stream's nn scratch and a small kernel adds that into bgrad. DGELU reads aux
 * (D's layout, like GELU_AUX wrote it) and has no bias. Combinations
 * cuBLASLt refuses (no heuristic, NOT_SUPPORTED) run the plain GEMM and the
 * unfused kernels instead, as does the test switch TG_DEBUG_EPILOGUE_UNFUSED. */

/* Everything the algorithm choice depends on; memset to 0 before filling (hashed as bytes). */
struct gemm_key {
    int dev, trans_a, trans_b, a_dt, c_dt;
    int64_t m, n, k, batch, lda, ldb, ldc, stride_a, stride_b, stride_c;
    uint32_t align_a, align_b, align_c;
    uint32_t epi;            /* cublasLtEpilogue_t */
    int64_t ldaux, stride_aux, bias_stride;
    uint32_t align_bias, align_aux;
    uint64_t ws_bytes;
    int c_in_sep;            /* C read from c_in, not from D */
};


/* What one cuBLASLt call does after the product: its epilogue and the vectors it reads or writes. */
struct lt_epi {
    cublasLtEpilogue_t epi;
    const void *bias;        /* BIAS: the bias; BGRADB: where the bias grad goes */
    void *aux;
    int64_t ldaux, stride_aux, bias_stride;
};


#define PLAN_SLOTS 512
#define PLAN_PROBE 8
#define BGRAD_FUSED_MAX 68719476736.0 /* 2^36 multiply-adds: see gemm_fused */

static size_t key_hash(const struct gemm_key *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return (size_t)(h % PLAN_SLOTS);
}

/* Largest power of two (<= 256) dividing the address of every matrix of the batch. */
static uint32_t alignment(const void *p, int64_t stride, size_t esize, int64_t batch)
{
    uintptr_t bits = (uintptr_t)p | 256;
    if (batch > 1) bits |= (uintptr_t)stride * esize;
    return (uint32_t)(bits & -bits);
}

static cudaDataType_t cuda_type(tg_dtype dt) { return dt == TG_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

struct lt_descs {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our B), B (our A), C = D */
    cublasLtMatmulPreference_t pref;
};

/* A shape's cuBLASLt descriptors and algorithm, made once: creating and
 * destroying the five descriptors per call cost more host time than the
 * launch itself. Only the epilogue pointers change between calls; they are set
 * on the cached descriptor just before each cublasLtMatmul, under plans_lock. */
struct gemm_plan {
    struct gemm_key key;
    int valid;
    int supported;           /* 0: cuBLASLt has no algorithm (epilogues fall back) */
    cublasLtMatmulAlgo_t algo;
    struct lt_descs d;
};

static void descs_destroy(struct lt_descs *d)
{
    if (d->pref) cublasLtMatmulPreferenceDestroy(d->pref);
    if (d->lc) cublasLtMatrixLayoutDestroy(d->lc);
    if (d->lb) cublasLtMatrixLayoutDestroy(d->lb);
    if (d->la) cublasLtMatrixLayoutDestroy(d->la);
    if (d->op) cublasLtMatmulDescDestroy(d->op);
}

static tg_status layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                        int64_t batch, int64_t stride)
{
    TG_CUBLAS_TRY(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t count = (int32_t)batch;
        TG_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        TG_CUBLAS_TRY(
            cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    return TG_OK;
}

static tg_status descs_create(struct lt_descs *d, const struct tg_gemm_args *a, const struct lt_epi *e,
                              const struct gemm_key *key, size_t ws_bytes)
{
    cublasOperation_t ta = a->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = a->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    TG_CUBLAS_TRY(cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    /* our B stored (k, n) row-major = column-major (n, k); transposed: stored (n, k) -> (k, n) */
    TG_TRY(layout(&d->la, cuda_type(a->b_dt), a->trans_b ? a->k : a->n, a->trans_b ? a->n : a->k, a->ldb, a->batch,
                  a->stride_b));
    TG_TRY(layout(&d->lb, cuda_type(a->a_dt), a->trans_a ? a->m : a->k, a->trans_a ? a->k : a->m, a->lda, a->batch,
                  a->stride_a));
    TG_TRY(layout(&d->lc, cuda_type(a->c_dt), a->n, a->m, a->ldc, a->batch, a->stride_c));
    if (e->epi != CUBLASLT_EPILOGUE_DEFAULT) {
        int32_t bt = (int32_t)cuda_type(a->c_dt); /* bias and bias grad in D's dtype */
        TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e->epi, sizeof e->epi));
        if (e->epi != CUBLASLT_EPILOGUE_DGELU) { /* DGELU has no bias vector */
            TG_CUBLAS_TRY(
                cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e->bias, sizeof e->bias));
            TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
            if (a->batch > 1)
                TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                                             &e->bias_stride, sizeof e->bias_stride));
        }
        if (e->aux) {
            TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e->aux,
                                                         sizeof e->aux));
            TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &e->ldaux,
                                                         sizeof e->ldaux));
            if (a->batch > 1)
                TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                                                             &e->stride_aux, sizeof e->stride_aux));
        }
    }
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&d->pref));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                       sizeof ws_bytes));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                       &key->align_b, sizeof key->align_b));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                       &key->align_a, sizeof key->align_a));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                       &key->align_c, sizeof key->align_c));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                       &key->align_c, sizeof key->align_c));
    return TG_OK;
}

/* The cuBLASLt handle of each device, created by its first GEMM. */
static struct {
    pthread_mutex_t lock;
    cublasLtHandle_t lt;
} lts[TG_CUDA_MAX_DEVICES] = {[0 ... TG_CUDA_MAX_DEVICES - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER}};

tg_status tg_cuda_lt_handle(int dev, cublasLtHandle_t *out)
{
    tg_status st = TG_OK;
    pthread_mutex_lock(&lts[dev].lock);
    if (!lts[dev].lt) {
        cublasStatus_t e = cublasLtCreate(&lts[dev].lt);
        if (e != CUBLAS_STATUS_SUCCESS) {
            lts[dev].lt = NULL;
            st = tg_cublas_fail(e, __FILE__, __LINE__, "cublasLtCreate(&lts[dev].lt)");
        }
    }
    *out = lts[dev].lt;
    pthread_mutex_unlock(&lts[dev].lock);
    return st;
}

/* Heuristic queries cost tens of microseconds and descriptors a few: remember the last answers. */
static struct gemm_plan plans[PLAN_SLOTS];
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;

/* Sets this call's epilogue vectors on desc. */
static cublasStatus_t set_epi_pointers(cublasLtMatmulDesc_t op, const struct lt_epi *e)
{
    if (e->epi == CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_SUCCESS;
    cublasStatus_t ce = CUBLAS_STATUS_SUCCESS;
    if (e->epi != CUBLASLT_EPILOGUE_DGELU)
        ce = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e->bias, sizeof e->bias);
    if (ce == CUBLAS_STATUS_SUCCESS && e->aux)
        ce = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e->aux, sizeof e->aux);
    return ce;
}

/* The plan for key, with plans_lock held: made on a miss. The table is open
 * addressed (linear probing over PLAN_PROBE slots from the key's hash), so
 * two shapes whose hashes collide do not evict each other on every call (a
 * training step uses a few dozen shapes); only when all probed slots hold
 * other shapes is one evicted, round robin. plan->supported = 0 when
 * cuBLASLt has no algorithm: an error for a plain GEMM, a fallback for an
 * epilogue. */
static tg_status plan_for(cublasLtHandle_t lt, const struct tg_gemm_args *a, const struct lt_epi *e,
                          const struct gemm_key *key, struct gemm_plan **out)
{
    static unsigned evict_next;
    size_t h = key_hash(key);
    struct gemm_plan *p = NULL;
    for (int i = 0; i < PLAN_PROBE; i++) {
        struct gemm_plan *q = &plans[(h + (size_t)i) % PLAN_SLOTS];
        if (q->valid && memcmp(&q->key, key, sizeof *key) == 0) {
            *out = q;
            return TG_OK;
        }
        if (!q->valid && !p) p = q;
    }
    if (!p) {
        p = &plans[(h + evict_next++ % PLAN_PROBE) % PLAN_SLOTS];
        descs_destroy(&p->d);
    }
    memset(p, 0, sizeof *p);
    *out = p;
    struct lt_descs d = {0};
    tg_status rc = descs_create(&d, a, e, key, (size_t)key->ws_bytes);
    if (rc != TG_OK) {
        descs_destroy(&d);
        return rc;
    }
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t ce = cublasLtMatmulAlgoGetHeuristic(lt, d.op, d.la, d.lb, d.lc, d.lc, d.pref, 1, &r, &found);
    if (ce != CUBLAS_STATUS_SUCCESS && ce != CUBLAS_STATUS_NOT_SUPPORTED) {
        descs_destroy(&d);
        return tg_cublas_fail(ce, __FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic(...)");
    }
    p->key = *key;
    p->valid = 1;
    p->supported = ce == CUBLAS_STATUS_SUCCESS && found >= 1;
    if (p->supported) p->algo = r.algo;
    p->d = d;
    return TG_OK;
}

/* One cuBLASLt call with epilogue e; *done = 0 (nothing issued) when cuBLASLt
 * cannot do it. k > 0, m, n, batch > 0. */
static tg_status gemm_lt(tg_stream *s, const struct tg_gemm_args *a, const struct lt_epi *e, int *done)
{
    cudaStream_t st = tg_cuda_stream(s);
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
    *done = 0;
    TG_TRY(tg_cuda_lt_handle(s->dev.index, &lt));
    TG_TRY(tg_cuda_gemm_workspace(s, &ws, &ws_bytes));

    struct gemm_key key;
    memset(&key, 0, sizeof key);
    key.dev = s->dev.index;
    key.trans_a = !!a->trans_a;
    key.trans_b = !!a->trans_b;
    key.a_dt = a->a_dt;
    key.c_dt = a->c_dt;
    key.m = a->m, key.n = a->n, key.k = a->k, key.batch = a->batch;
    key.lda = a->lda, key.ldb = a->ldb, key.ldc = a->ldc;
    if (a->batch > 1) key.stride_a = a->stride_a, key.stride_b = a->stride_b, key.stride_c = a->stride_c;
    key.align_a = alignment(a->a, a->stride_a, tg_dtype_size(a->a_dt), a->batch);
    key.align_b = alignment(a->b, a->stride_b, tg_dtype_size(a->b_dt), a->batch);
    key.align_c = alignment(a->c, a->stride_c, tg_dtype_size(a->c_dt), a->batch);
    if (a->c_in && a->c_in != a->c) {
        uint32_t ai = alignment(a->c_in, a->stride_c, tg_dtype_size(a->c_dt), a->batch);
        if (ai < key.align_c) key.align_c = ai;
        key.c_in_sep = 1;
    }
    key.epi = (uint32_t)e->epi;
    if (e->epi != CUBLASLT_EPILOGUE_DEFAULT) {
        /* the heuristic reads the epilogue pointers' alignment */
        if (e->bias) key.align_bias = alignment(e->bias, e->bias_stride, tg_dtype_size(a->c_dt), a->batch);
        if (a->batch > 1) key.bias_stride = e->bias_stride;
        if (e->aux) {
            key.ldaux = e->ldaux;
            key.align_aux = alignment(e->aux, e->stride_aux, tg_dtype_size(a->c_dt), a->batch);
            if (a->batch > 1) key.stride_aux = e->stride_aux;
        }
    }

    key.ws_bytes = ws_bytes;

    pthread_mutex_lock(&plans_lock);
    struct gemm_plan *p;
    tg_status rc = plan_for(lt, a, e, &key, &p);
    if (rc == TG_OK && !p->supported && e->epi == CUBLASLT_EPILOGUE_DEFAULT)
        rc = tg_error(TG_EDEVICE, "cuda gemm: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld batch=%lld %s x %s -> %s",
                      (long long)a->m, (long long)a->n, (long long)a->k, (long long)a->batch, tg_dtype_name(a->a_dt),
                      tg_dtype_name(a->b_dt), tg_dtype_name(a->c_dt));
    if (rc == TG_OK && p->supported) { /* this call's vectors on the cached descriptor */
        cublasStatus_t ce = set_epi_pointers(p->d.op, e);
        if (ce != CUBLAS_STATUS_SUCCESS) rc = tg_cublas_fail(ce, __FILE__, __LINE__, "cublasLtMatmulDescSetAttribute(...)");
    }
    if (rc == TG_OK && p->supported) {
        /* alpha and beta are read from the host now, so capture records their values */
        cublasStatus_t ce = cublasLtMatmul(lt, p->d.op, &a->alpha, a->b, p->d.la, a->a, p->d.lb, &a->beta,
                                           a->c_in ? a->c_in : a->c, p->d.lc, a->c, p->d.lc, &p->algo, ws, ws_bytes, st);
        if (ce == CUBLAS_STATUS_SUCCESS) *done = 1;
        else if (!(ce == CUBLAS_STATUS_NOT_SUPPORTED && e->epi != CUBLASLT_EPILOGUE_DEFAULT))
            rc = tg_cublas_fail(ce, __FILE__, __LINE__, "cublasLtMatmul(...)");
    }
    pthread_mutex_unlock(&plans_lock);
    return rc;
}

static tg_status launched(cudaError_t e, const char *what)
{
    if (e == cudaErrorInvalidValue)
        return tg_error(TG_ENOTSUP, "cuda gemm %s: the shapes exceed the kernel's limits or its %zu MiB scratch", what,
                        TG_CUDA_NN_SCRATCH >> 20);
    if (e != cudaSuccess) return tg_cuda_fail(e, __FILE__, __LINE__, what);
    return TG_OK;
}

/* The epilogue without cuBLASLt's help: the plain GEMM, then the kernels the
 * modules used before (bias_add, gelu_forward, column sums, gelu_backward).
 * C and aux are contiguous (ldc == ldaux == n), as the op layer makes them. */
static tg_status gemm_unfused(tg_stream *s, const struct tg_gemm_args *a)
{
    cudaStream_t st = tg_cuda_stream(s);
    struct tg_gemm_args plain = *a;
    plain.epi = TG_EPI_NONE;
    TG_TRY(tg_cuda_gemm(s, &plain));
    size_t es = tg_dtype_size(a->c_dt);
    if (a->epi == TG_EPI_BGRAD) {
        void *scr;
        size_t bytes;
        TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
        for (int64_t bi = 0; bi < a->batch; bi++) {
            const char *ab = (const char *)a->a + (size_t)(bi * a->stride_a) * tg_dtype_size(a->a_dt);
            char *out = (char *)a->bgrad + (size_t)(bi * a->m) * tg_dtype_size(a->bgrad_dt);
            TG_TRY(launched(tg_cuda_gemm_bgrad(out, a->bgrad_dt, ab, a->a_dt, a->trans_a, a->lda, a->m, a->k,
                                               a->bgrad_acc, scr, bytes, st),
                            "bgrad"));
        }
        return TG_OK;
    }
    if (a->ldc != a->n || (a->aux && a->ldaux != a->n))
        return tg_error(TG_ENOTSUP, "cuda gemm: the unfused epilogue needs contiguous rows (ldc %lld, n %lld)",
                        (long long)a->ldc, (long long)a->n);
    for (int64_t bi = 0; bi < a->batch; bi++) {
        char *c = (char *)a->c + (size_t)(bi * a->stride_c) * es;
        if (a->epi == TG_EPI_DGELU) { /* C = gelu'(aux) * C, in place (elementwise) */
            const char *x = (const char *)a->aux + (size_t)(bi * a->stride_aux) * es;
            TG_TRY(launched(tg_cuda_gelu_backward(c, c, x, a->c_dt, a->m * a->n, st), "gelu_backward"));
            continue;
        }
        TG_TRY(launched(tg_cuda_bias_add(c, a->bias, a->c_dt, a->m, a->n, st), "bias_add"));
        if (a->epi != TG_EPI_BIAS_GELU) continue;
        if (a->aux)
            TG_CUDA_TRY(cudaMemcpyAsync((char *)a->aux + (size_t)(bi * a->stride_aux) * es, c, (size_t)(a->m * a->n) * es,
                                        cudaMemcpyDeviceToDevice, st));
        TG_TRY(launched(tg_cuda_gelu_forward(c, c, a->c_dt, a->m * a->n, st), "gelu_forward"));
    }
    return TG_OK;
}

/* The epilogue in cuBLASLt; *done = 0 when it cannot (nothing issued). */
static tg_status gemm_fused(tg_stream *s, const struct tg_gemm_args *a, int *done)
{
    struct lt_epi e = {0};
    const size_t es = tg_dtype_size(a->c_dt);
    *done = 0;
    /* epilogue vectors not on 16-byte boundaries (views at odd offsets) go to the unfused kernels */
    if ((a->bias && alignment(a->bias, 0, es, 1) < 16) || (a->aux && alignment(a->aux, a->stride_aux, es, a->batch) < 16))
        return TG_OK;
    if (a->epi == TG_EPI_BIAS) {
        e.epi = CUBLASLT_EPILOGUE_BIAS;
        e.bias = a->bias;
        return gemm_lt(s, a, &e, done);
    }
    if (a->epi == TG_EPI_BIAS_GELU) {
        e.epi = a->aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
        e.bias = a->bias;
        e.aux = a->aux, e.ldaux = a->ldaux, e.stride_aux = a->stride_aux;
        if (a->aux && (a->ldaux % 8 != 0 || (a->batch > 1 && a->stride_aux % 8 != 0))) return TG_OK; /* cuBLASLt's rule */
        /* cuBLASLt's GELU is its own tanh approximation, which may be less exact
         * than tanhf; below bf16's rounding that does not show, in f32 it may:
         * f32 keeps the gelu kernel (the CPU's formula). */
        if (a->c_dt != TG_BF16) return TG_OK;
        return gemm_lt(s, a, &e, done);
    }
    if (a->epi == TG_EPI_DGELU) {
        /* aux is the GELU_AUX layout: cuBLASLt wants its ld (and batch stride) a multiple of 8
         * (its base alignment was checked above, for every epilogue) */
        if (a->ldaux % 8 != 0 || (a->batch > 1 && a->stride_aux % 8 != 0)) return TG_OK;
        /* cuBLASLt's gelu derivative is its own approximation, like its GELU:
         * bf16 outputs only, f32 keeps gelu_backward (the CPU's formula) */
        if (a->c_dt != TG_BF16) return TG_OK;
        e.epi = CUBLASLT_EPILOGUE_DGELU;
        e.aux = a->aux, e.ldaux = a->ldaux, e.stride_aux = a->stride_aux;
        return gemm_lt(s, a, &e, done);
    }
    /* BGRAD on big products costs cuBLASLt more than our separate column sum:
     * on an H200 (2026-11-29, ops.lua) the epilogue added 0.022 ms to a
     * 3072x768x8192 wgrad (column sum alone: 0.035 ms) but 0.15 ms to a
     * 16384x4096x4096 one (column sum: 0.061 ms). Between the two: unfused
     * above 2^36 multiply-adds. */
    /* the bias grad is a sum of op(A), never scaled by alpha: cuBLASLt's is not documented to be, so a
     * scaled product (no module makes one) keeps the column-sum kernel */
    if (a->alpha != 1.0f) return TG_OK;
    if ((double)a->m * (double)a->n * (double)a->k * (double)a->batch > BGRAD_FUSED_MAX) return TG_OK;
    if (tg_debug_get(TG_DEBUG_BGRAD_UNFUSED)) return TG_OK;
    /* BGRAD: straight into bgrad when cuBLASLt's store is the wgrad's (overwrite, D's dtype, aligned), else via scratch */
    e.epi = CUBLASLT_EPILOGUE_BGRADB;
    e.bias_stride = a->m;
    size_t need = (size_t)(a->batch * a->m) * tg_dtype_size(a->c_dt);
    int direct = a->bgrad_acc == 0.0f && a->bgrad_dt == a->c_dt && alignment(a->bgrad, a->m, es, a->batch) >= 16;
    /* cuBLASLt stores the bias grad in C's dtype: through the scratch a bf16 C would round it twice
     * (once there, once when added), unlike every other wgrad, so bf16 C accumulates unfused */
    if (!direct && a->c_dt == TG_BF16) return TG_OK;
    void *scr = NULL;
    size_t bytes = 0;
    if (!direct) {
        TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
        if (bytes < need) return TG_OK;
    }
    e.bias = direct ? a->bgrad : scr;
    TG_TRY(gemm_lt(s, a, &e, done));
    if (*done && !direct) {
        TG_TRY(launched(tg_cuda_bias_accumulate(a->bgrad, a->bgrad_dt, scr, a->c_dt, a->batch * a->m, a->bgrad_acc,
                                                tg_cuda_stream(s)),
                        "bias_accumulate"));
    }
    return TG_OK;
}

tg_status tg_cuda_gemm(tg_stream *s, const struct tg_gemm_args *a)
{
    if (a->a_dt != a->b_dt || (a->a_dt != TG_F32 && a->a_dt != TG_BF16) ||
        (a->c_dt != TG_F32 && a->c_dt != a->a_dt))
        return tg_error(TG_ENOTSUP, "cuda gemm: %s x %s -> %s is not supported (f32 or bf16 inputs, C f32 or theirs)",
                        tg_dtype_name(a->a_dt), tg_dtype_name(a->b_dt), tg_dtype_name(a->c_dt));
    if ((unsigned)a->epi > TG_EPI_DGELU || ((a->epi == TG_EPI_BIAS || a->epi == TG_EPI_BIAS_GELU) && !a->bias) ||
        (a->epi == TG_EPI_BGRAD && (!a->bgrad || (a->bgrad_dt != TG_F32 && a->bgrad_dt != TG_BF16))) ||
        (a->epi == TG_EPI_DGELU && !a->aux))
        return tg_error(TG_EINVAL, "cuda gemm: bad epilogue %d (bias, aux, bgrad or its dtype missing)", (int)a->epi);
    if (a->m <= 0 || a->batch <= 0 || (a->n <= 0 && a->epi != TG_EPI_BGRAD)) return TG_OK;
    TG_CUDA_TRY(cudaSetDevice(s->dev.index));
    if (a->epi != TG_EPI_NONE) {
        int done = 0;
        if (a->k > 0 && a->n > 0 && !tg_debug_get(TG_DEBUG_EPILOGUE_UNFUSED)) TG_TRY(gemm_fused(s, a, &done));
        return done ? TG_OK : gemm_unfused(s, a);
    }
    if (a->k <= 0) { /* an empty sum: C = beta * C (C from c_in when given) */
        if (a->c_in && a->c_in != a->c && a->beta != 0.0f) {
            size_t es = tg_dtype_size(a->c_dt);
            for (int64_t bi = 0; bi < a->batch; bi++)
                TG_CUDA_TRY(cudaMemcpy2DAsync((char *)a->c + (size_t)(bi * a->stride_c) * es, (size_t)a->ldc * es,
                                              (const char *)a->c_in + (size_t)(bi * a->stride_c) * es,
                                              (size_t)a->ldc * es, (size_t)a->n * es, (size_t)a->m,
                                              cudaMemcpyDeviceToDevice, tg_cuda_stream(s)));
        }
        TG_CUDA_TRY(tg_cuda_scale_strided(a->c, a->c_dt, a->batch, a->m, a->n, a->ldc, a->stride_c, a->beta,
                                          tg_cuda_stream(s)));
        return TG_OK;
    }
    struct lt_epi none = {.epi = CUBLASLT_EPILOGUE_DEFAULT};
    int done;
    return gemm_lt(s, a, &none, &done);
}
