/* cuda_gemm.c — row-major batched GEMM through cuBLASLt (f32 accumulation), capturable. */
#include "backend/cuda_impl.h"

#include "kernels.h" /* kernels/ is not on the C include path */

#include <pthread.h>
#include <string.h>

/* cuBLASLt is column-major. A row-major (r, c) matrix with leading dim ld is
 * the column-major (c, r) matrix with the same ld, i.e. its transpose, so
 * row-major C = op(A) @ op(B) is computed as column-major
 * C^T (n, m) = op(B)^T (n, k) @ op(A)^T (k, m): B's storage is cuBLASLt's
 * "A" and A's storage its "B", each transposed exactly when the caller asked. */

/* Everything the algorithm choice depends on; memset to 0 before filling (hashed as bytes). */
struct gemm_key {
    int dev, trans_a, trans_b, a_dt, c_dt;
    int64_t m, n, k, batch, lda, ldb, ldc, stride_a, stride_b, stride_c;
    uint32_t align_a, align_b, align_c;
};

struct gemm_plan {
    struct gemm_key key;
    int valid;
    cublasLtMatmulAlgo_t algo;
};

/* Heuristic queries cost tens of microseconds: remember the last answers. */
#define PLAN_SLOTS 256
static struct gemm_plan plans[PLAN_SLOTS];
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;

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

static tg_status descs_create(struct lt_descs *d, const struct tg_gemm_args *a, const struct gemm_key *key,
                              size_t ws_bytes)
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

static tg_status choose_algo(cublasLtHandle_t lt, struct lt_descs *d, const struct tg_gemm_args *a,
                             const struct gemm_key *key, cublasLtMatmulAlgo_t *algo)
{
    size_t slot = key_hash(key);
    pthread_mutex_lock(&plans_lock);
    int hit = plans[slot].valid && memcmp(&plans[slot].key, key, sizeof *key) == 0;
    if (hit) *algo = plans[slot].algo;
    pthread_mutex_unlock(&plans_lock);
    if (hit) return TG_OK;

    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    TG_CUBLAS_TRY(cublasLtMatmulAlgoGetHeuristic(lt, d->op, d->la, d->lb, d->lc, d->lc, d->pref, 1, &r, &found));
    if (found < 1)
        return tg_error(TG_EDEVICE, "cuda gemm: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld batch=%lld %s x %s -> %s",
                        (long long)a->m, (long long)a->n, (long long)a->k, (long long)a->batch,
                        tg_dtype_name(a->a_dt), tg_dtype_name(a->b_dt), tg_dtype_name(a->c_dt));
    *algo = r.algo;
    pthread_mutex_lock(&plans_lock);
    plans[slot] = (struct gemm_plan){.key = *key, .valid = 1, .algo = r.algo};
    pthread_mutex_unlock(&plans_lock);
    return TG_OK;
}

tg_status tg_cuda_gemm(tg_stream *s, const struct tg_gemm_args *a)
{
    if (a->a_dt != a->b_dt || (a->a_dt != TG_F32 && a->a_dt != TG_BF16) ||
        (a->c_dt != TG_F32 && a->c_dt != a->a_dt))
        return tg_error(TG_ENOTSUP, "cuda gemm: %s x %s -> %s is not supported (f32 or bf16 inputs, C f32 or theirs)",
                        tg_dtype_name(a->a_dt), tg_dtype_name(a->b_dt), tg_dtype_name(a->c_dt));
    if (a->m <= 0 || a->n <= 0 || a->batch <= 0) return TG_OK;
    cudaStream_t st = tg_cuda_stream(s);
    TG_CUDA_TRY(cudaSetDevice(s->dev.index));
    if (a->k <= 0) { /* an empty sum: C = beta * C */
        TG_CUDA_TRY(tg_cuda_scale_strided(a->c, a->c_dt, a->batch, a->m, a->n, a->ldc, a->stride_c, a->beta, st));
        return TG_OK;
    }

    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
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

    struct lt_descs d = {0};
    cublasLtMatmulAlgo_t algo;
    tg_status rc = descs_create(&d, a, &key, ws_bytes);
    if (rc == TG_OK) rc = choose_algo(lt, &d, a, &key, &algo);
    if (rc == TG_OK) {
        /* alpha and beta are read from the host now, so capture records their values */
        cublasStatus_t e = cublasLtMatmul(lt, d.op, &a->alpha, a->b, d.la, a->a, d.lb, &a->beta, a->c, d.lc, a->c, d.lc,
                                          &algo, ws, ws_bytes, st);
        if (e != CUBLAS_STATUS_SUCCESS) rc = tg_cublas_fail(e, __FILE__, __LINE__, "cublasLtMatmul(...)");
    }
    descs_destroy(&d);
    return rc;
}
