/* cuda_fp8.c — the CUDA backend's FP8 ops: casts, transpose, dequantize and amax (kernels/fp8_*.cu), and the FP8
 * GEMM through cuBLASLt (scale pointers, bias / bias+GELU epilogues), capturable. */
#include "backend/cuda_impl.h"
#include "core/debug.h"

#include "kernels.h" /* kernels/ is not on the C include path */

#include <pthread.h>
#include <string.h>

#define LAUNCH(s, what, call)                                                                          \
    do {                                                                                               \
        TG_TRY(tg_cuda_use_device((s)->dev.index));                                                    \
        cudaError_t e_ = (call);                                                                       \
        if (e_ == cudaErrorInvalidValue)                                                               \
            return tg_error(TG_ENOTSUP, "cuda %s: the sizes exceed the kernel's limits", what);        \
        if (e_ != cudaSuccess) return tg_cuda_fail(e_, __FILE__, __LINE__, #call);                     \
    } while (0)

tg_status tg_cuda_fp8_cast_op(tg_stream *s, const struct tg_fp8_cast_args *a)
{
    LAUNCH(s, "fp8_cast", tg_cuda_fp8_cast(a->x, a->x_dt, a->gelu_x, a->y, a->yt, a->y_dt, a->rows, a->cols, a->scale,
                                           a->amax, a->scale_inv, a->accumulate, a->dbias_part, a->dbias_chunks,
                                           tg_cuda_stream(s)));
    return TG_OK;
}

tg_status tg_cuda_fp8_cast_gelu_op(tg_stream *s, const struct tg_fp8_cast_args *a)
{
    LAUNCH(s, "fp8_cast_transpose_gelu", tg_cuda_fp8_cast_gelu(a->x, a->x_dt, a->y, a->yt, a->y_dt, a->rows, a->cols,
                                                               a->scale, a->amax, a->scale_inv, a->accumulate,
                                                               tg_cuda_stream(s)));
    return TG_OK;
}

tg_status tg_cuda_layernorm_forward_fp8_op(tg_stream *s, const struct tg_layernorm_fp8_args *a)
{
    const struct tg_layernorm_forward_args *l = &a->ln;
    LAUNCH(s, "layernorm_forward_fp8",
           tg_cuda_layernorm_forward_fp8(a->y8, a->y8_dt, l->mean, l->rstd, l->x, l->gamma, l->beta, l->dt, l->n, l->c,
                                         l->eps, a->scale, a->amax, a->scale_inv, a->accumulate, tg_cuda_stream(s)));
    return TG_OK;
}

tg_status tg_cuda_fp8_dbias_op(tg_stream *s, const struct tg_fp8_dbias_args *a)
{
    LAUNCH(s, "fp8_dbias_finish",
           tg_cuda_fp8_dbias(a->part, a->chunks, a->c, a->dbias, a->dw_dt, a->accumulate, tg_cuda_stream(s)));
    return TG_OK;
}

tg_status tg_cuda_fp8_transpose_op(tg_stream *s, const struct tg_fp8_transpose_args *a)
{
    LAUNCH(s, "fp8_transpose", tg_cuda_fp8_transpose(a->x, a->yt, a->rows, a->cols, tg_cuda_stream(s)));
    return TG_OK;
}

tg_status tg_cuda_fp8_dequantize_op(tg_stream *s, const struct tg_fp8_dequantize_args *a)
{
    LAUNCH(s, "fp8_dequantize",
           tg_cuda_fp8_dequantize(a->x, a->x_dt, a->y, a->y_dt, a->n, a->scale_inv, tg_cuda_stream(s)));
    return TG_OK;
}

tg_status tg_cuda_fp8_amax_op(tg_stream *s, const struct tg_fp8_amax_args *a)
{
    LAUNCH(s, "fp8_amax", tg_cuda_fp8_amax(a->x, a->dt, a->n, a->amax, a->accumulate, tg_cuda_stream(s)));
    return TG_OK;
}

/* ------------------------------------------------------------------ GEMM
 * Row-major D (m,n) = A (m,k) B (n,k)^T is column-major D^T (n,m) = B A^T; in
 * cuBLASLt's terms its A is our B, stored column-major (k, n) with ld k and
 * transposed (op T), its B is our A, column-major (k, m) with ld k, not
 * transposed: the "TN" layout FP8 kernels require. So cuBLASLt's A scale is
 * our b_scale_inv and its B scale our a_scale_inv. One plan (descriptors and
 * algorithm) per shape and epilogue is kept; the scale, bias and aux pointers
 * are set on it before each call, under the lock. */
struct fp8_key {
    int dev, a_dt, b_dt, d_dt, epi, has_aux, beta_zero;
    int64_t m, n, k;
    uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
    uint64_t ws_bytes;
};

struct fp8_plan {
    struct fp8_key key;
    int valid, supported;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulAlgo_t algo;
};

#define FP8_PLANS 64
static struct fp8_plan fp8_plans[FP8_PLANS];
static unsigned fp8_evict;
static pthread_mutex_t fp8_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t align_of(const void *p)
{
    uintptr_t bits = (uintptr_t)p | 256;
    return (uint32_t)(bits & -bits);
}

static cudaDataType_t lt_type(tg_dtype dt)
{
    switch (dt) {
    case TG_E4M3: return CUDA_R_8F_E4M3;
    case TG_E5M2: return CUDA_R_8F_E5M2;
    case TG_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

static void plan_destroy(struct fp8_plan *p)
{
    if (p->pref) cublasLtMatmulPreferenceDestroy(p->pref);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

static tg_status plan_make(cublasLtHandle_t lt, const struct fp8_key *key, struct fp8_plan *p)
{
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = key->epi == TG_EPI_BIAS ? CUBLASLT_EPILOGUE_BIAS
                             : key->epi == TG_EPI_BIAS_GELU ? (key->has_aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                                            : CUBLASLT_EPILOGUE_GELU_BIAS)
                                                            : CUBLASLT_EPILOGUE_DEFAULT;
    TG_CUBLAS_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
        int32_t bt = CUDA_R_16BF;
        TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        if (key->has_aux) {
            int64_t ldaux = key->n;
            TG_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldaux, sizeof ldaux));
        }
    }
    TG_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->la, lt_type((tg_dtype)key->b_dt), (uint64_t)key->k, (uint64_t)key->n, key->k));
    TG_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lb, lt_type((tg_dtype)key->a_dt), (uint64_t)key->k, (uint64_t)key->m, key->k));
    /* C has D's type (bf16 C for bf16 D, as cuBLASLt's FP8 table asks) */
    TG_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->lc, lt_type((tg_dtype)key->d_dt), (uint64_t)key->n, (uint64_t)key->m, key->n));
    TG_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p->ld, lt_type((tg_dtype)key->d_dt), (uint64_t)key->n, (uint64_t)key->m, key->n));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&p->pref));
    size_t ws = (size_t)key->ws_bytes;
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->align_b,
                                                       sizeof key->align_b));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->align_a,
                                                       sizeof key->align_a));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->align_d,
                                                       sizeof key->align_d));
    TG_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->align_d,
                                                       sizeof key->align_d));
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t ce = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->lc, p->ld, p->pref, 1, &r, &found);
    if (ce != CUBLAS_STATUS_SUCCESS && ce != CUBLAS_STATUS_NOT_SUPPORTED)
        return tg_cublas_fail(ce, __FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic(...)");
    p->supported = ce == CUBLAS_STATUS_SUCCESS && found >= 1;
    if (p->supported) p->algo = r.algo;
    return TG_OK;
}

/* The plan for key, fp8_lock held. */
static tg_status plan_get(cublasLtHandle_t lt, const struct fp8_key *key, struct fp8_plan **out)
{
    struct fp8_plan *free_slot = NULL;
    for (int i = 0; i < FP8_PLANS; i++) {
        if (fp8_plans[i].valid && memcmp(&fp8_plans[i].key, key, sizeof *key) == 0) {
            *out = &fp8_plans[i];
            return TG_OK;
        }
        if (!fp8_plans[i].valid && !free_slot) free_slot = &fp8_plans[i];
    }
    struct fp8_plan *p = free_slot ? free_slot : &fp8_plans[fp8_evict++ % FP8_PLANS];
    plan_destroy(p);
    p->key = *key;
    tg_status st = plan_make(lt, key, p);
    if (st != TG_OK) {
        plan_destroy(p);
        return st;
    }
    p->valid = 1;
    *out = p;
    return TG_OK;
}

/* One cuBLASLt call with epilogue epi (NONE, BIAS or BIAS_GELU); *done = 0 when cuBLASLt has no algorithm for
 * an epilogue (nothing issued; the caller falls back). */
static tg_status fp8_lt(tg_stream *s, const struct tg_fp8_gemm_args *a, tg_gemm_epilogue epi, const void *bias,
                        void *aux, int *done)
{
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
    *done = 0;
    TG_TRY(tg_cuda_lt_handle(s->dev.index, &lt));
    TG_TRY(tg_cuda_gemm_workspace(s, &ws, &ws_bytes));
    struct fp8_key key;
    memset(&key, 0, sizeof key);
    key.dev = s->dev.index, key.a_dt = a->a_dt, key.b_dt = a->b_dt, key.d_dt = a->d_dt, key.epi = epi;
    key.has_aux = aux != NULL, key.beta_zero = a->beta == 0.0f;
    key.m = a->m, key.n = a->n, key.k = a->k;
    key.align_a = align_of(a->a), key.align_b = align_of(a->b), key.align_d = align_of(a->d);
    key.align_c = align_of(a->c ? a->c : a->d);
    key.align_bias = bias ? align_of(bias) : 0, key.align_aux = aux ? align_of(aux) : 0;
    key.ws_bytes = ws_bytes;

    pthread_mutex_lock(&fp8_lock);
    struct fp8_plan *p = NULL;
    tg_status rc = plan_get(lt, &key, &p);
    if (rc == TG_OK && !p->supported && epi == TG_EPI_NONE)
        rc = tg_error(TG_EDEVICE, "cuda fp8_gemm: cuBLASLt has no FP8 algorithm for m=%lld n=%lld k=%lld %s x %s -> %s",
                      (long long)a->m, (long long)a->n, (long long)a->k, tg_dtype_name(a->a_dt),
                      tg_dtype_name(a->b_dt), tg_dtype_name(a->d_dt));
    if (rc == TG_OK && p->supported) {
        /* this call's device pointers; the scales are read by the kernel when it runs (capturable) */
        const void *sa = a->b_scale_inv, *sb = a->a_scale_inv;
        cublasStatus_t ce = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
        if (ce == CUBLAS_STATUS_SUCCESS)
            ce = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
        if (ce == CUBLAS_STATUS_SUCCESS && epi != TG_EPI_NONE)
            ce = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        if (ce == CUBLAS_STATUS_SUCCESS && aux)
            ce = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
        if (ce == CUBLAS_STATUS_SUCCESS)
            ce = cublasLtMatmul(lt, p->op, &a->alpha, a->b, p->la, a->a, p->lb, &a->beta, a->c ? a->c : a->d, p->lc, a->d, p->ld,
                                &p->algo, ws, ws_bytes, tg_cuda_stream(s));
        if (ce == CUBLAS_STATUS_SUCCESS) *done = 1;
        else if (!(ce == CUBLAS_STATUS_NOT_SUPPORTED && epi != TG_EPI_NONE))
            rc = tg_cublas_fail(ce, __FILE__, __LINE__, "cublasLtMatmul(fp8)");
    }
    pthread_mutex_unlock(&fp8_lock);
    return rc;
}

static tg_status launched(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) return tg_cuda_fail(e, __FILE__, __LINE__, what);
    return TG_OK;
}

/* The epilogue as separate kernels after the plain FP8 GEMM: bias add (a bf16 bias is first cast to f32 in the
 * stream's scratch for an f32 D), copy of the pre-activation to aux, gelu. */
static tg_status fp8_epilogue_unfused(tg_stream *s, const struct tg_fp8_gemm_args *a)
{
    cudaStream_t st = tg_cuda_stream(s);
    const void *bias = a->bias;
    if (a->d_dt != TG_BF16) {
        void *scr;
        size_t bytes;
        TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
        if (bytes < (size_t)a->n * sizeof(float))
            return tg_error(TG_ENOTSUP, "cuda fp8_gemm: a bias of %lld exceeds the scratch", (long long)a->n);
        TG_TRY(launched(tg_cuda_cast(a->bias, TG_BF16, scr, TG_F32, a->n, st), "cast of the bias"));
        bias = scr;
    }
    TG_TRY(launched(tg_cuda_bias_add(a->d, bias, a->d_dt, a->m, a->n, st), "bias_add"));
    if (a->epi != TG_EPI_BIAS_GELU) return TG_OK;
    if (a->aux)
        TG_CUDA_TRY(cudaMemcpyAsync(a->aux, a->d, (size_t)(a->m * a->n) * tg_dtype_size(a->d_dt), cudaMemcpyDeviceToDevice, st));
    return launched(tg_cuda_gelu_forward(a->d, a->d, a->d_dt, a->m * a->n, st), "gelu_forward");
}

/* k not a multiple of 16 (cuBLASLt's FP8 GEMM needs one; a wgrad's k is the tokens of a microbatch): A and B are
 * copied into the stream's scratch with k zero-padded to kp (zero codes add nothing), B whole and A in chunks of
 * rows as the scratch holds, and each chunk of rows of D is an FP8 GEMM of its own (D's rows are contiguous).
 * The scratch's first bytes are left to the unfused epilogue's f32 bias; stream order keeps a chunk's copy after
 * the previous chunk's GEMM. amax_d is taken once, over the whole D. */
static tg_status fp8_gemm_padded_k(tg_stream *s, const struct tg_fp8_gemm_args *a)
{
    const int64_t kp = (a->k + 15) / 16 * 16;
    void *scr;
    size_t bytes;
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    const size_t off_b = ((size_t)a->n * sizeof(float) + 255) / 256 * 256;
    const size_t off_a = off_b + ((size_t)(a->n * kp) + 255) / 256 * 256;
    const int64_t rows = off_a < bytes ? (int64_t)((bytes - off_a) / (size_t)kp) : 0;
    if (rows < 1)
        return tg_error(TG_ENOTSUP,
                        "cuda fp8_gemm: k = %lld is not a multiple of 16 and B [%lld,%lld] zero-padded to k = %lld "
                        "(%zu bytes) does not fit the %zu-byte scratch (A [%lld,%lld] %s, D [%lld,%lld] %s)",
                        (long long)a->k, (long long)a->n, (long long)a->k, (long long)kp, off_a, bytes,
                        (long long)a->m, (long long)a->k, tg_dtype_name(a->a_dt), (long long)a->m, (long long)a->n,
                        tg_dtype_name(a->d_dt));
    cudaStream_t st = tg_cuda_stream(s);
    uint8_t *bp = (uint8_t *)scr + off_b, *ap = (uint8_t *)scr + off_a;
    const size_t k = (size_t)a->k, es = tg_dtype_size(a->d_dt);
    TG_CUDA_TRY(cudaMemsetAsync(bp, 0, (size_t)(a->n * kp), st));
    TG_CUDA_TRY(cudaMemcpy2DAsync(bp, (size_t)kp, a->b, k, k, (size_t)a->n, cudaMemcpyDeviceToDevice, st));
    for (int64_t m0 = 0; m0 < a->m; m0 += rows) {
        const int64_t mc = a->m - m0 < rows ? a->m - m0 : rows;
        TG_CUDA_TRY(cudaMemsetAsync(ap, 0, (size_t)(mc * kp), st));
        TG_CUDA_TRY(cudaMemcpy2DAsync(ap, (size_t)kp, a->a + (size_t)m0 * k, k, k, (size_t)mc, cudaMemcpyDeviceToDevice, st));
        struct tg_fp8_gemm_args c = *a;
        const size_t dro = (size_t)(m0 * a->n) * es; /* byte offset of the chunk's rows of D, C and aux */
        c.m = mc, c.k = kp, c.a = ap, c.b = bp, c.amax_d = NULL;
        c.d = (char *)a->d + dro;
        if (a->c) c.c = (const char *)a->c + dro;
        if (a->aux) c.aux = (char *)a->aux + dro;
        TG_TRY(tg_cuda_fp8_gemm_op(s, &c));
    }
    if (a->amax_d)
        TG_TRY(launched(tg_cuda_fp8_amax(a->d, a->d_dt, a->m * a->n, a->amax_d, a->accumulate, st), "amax_d"));
    return TG_OK;
}

tg_status tg_cuda_fp8_gemm_op(tg_stream *s, const struct tg_fp8_gemm_args *a)
{
    if (a->n % 16 != 0)
        return tg_error(TG_ENOTSUP,
                        "cuda fp8_gemm: cuBLASLt's FP8 GEMM needs n to be a multiple of 16 (A [%lld,%lld] %s, B "
                        "[%lld,%lld] %s, D [%lld,%lld] %s)",
                        (long long)a->m, (long long)a->k, tg_dtype_name(a->a_dt), (long long)a->n, (long long)a->k,
                        tg_dtype_name(a->b_dt), (long long)a->m, (long long)a->n, tg_dtype_name(a->d_dt));
    const int padded = a->k % 16 != 0 && a->m > 0 && a->n > 0; /* (A and B are then copied: any alignment) */
    if ((!padded && (align_of(a->a) < 16 || align_of(a->b) < 16)) || align_of(a->d) < 16 || (a->c && align_of(a->c) < 16))
        return tg_error(TG_ENOTSUP, "cuda fp8_gemm: A, B, C and D must start on 16-byte boundaries (views at odd offsets "
                                    "are not taken)");
    TG_TRY(tg_cuda_use_device(s->dev.index));
    if (padded) return fp8_gemm_padded_k(s, a);
    cudaStream_t st = tg_cuda_stream(s);
    if (a->m > 0 && a->n > 0) {
        if (a->k == 0) {
            if (a->c && a->beta != 0.0f)
                TG_CUDA_TRY(cudaMemcpyAsync(a->d, a->c, (size_t)(a->m * a->n) * tg_dtype_size(a->d_dt),
                                            cudaMemcpyDeviceToDevice, st));
            TG_CUDA_TRY(tg_cuda_scale_strided(a->d, a->d_dt, 1, a->m, a->n, a->n, a->m * a->n, a->beta, st));
            if (a->epi != TG_EPI_NONE) TG_TRY(fp8_epilogue_unfused(s, a));
        } else {
            int done = 0;
            /* fused: bias always when aligned; bias+GELU for bf16 D only (cuBLASLt's GELU is its own
             * approximation, which f32 would show: f32 keeps the gelu kernel, the CPU's formula) */
            int fuse = a->epi == TG_EPI_BIAS || (a->epi == TG_EPI_BIAS_GELU && a->d_dt == TG_BF16);
            if (fuse && (align_of(a->bias) < 16 || (a->aux && align_of(a->aux) < 16))) fuse = 0;
            if (fuse && tg_debug_get(TG_DEBUG_EPILOGUE_UNFUSED)) fuse = 0;
            if (fuse) TG_TRY(fp8_lt(s, a, a->epi, a->bias, a->aux, &done));
            if (!done) {
                TG_TRY(fp8_lt(s, a, TG_EPI_NONE, NULL, NULL, &done));
                if (a->epi != TG_EPI_NONE) TG_TRY(fp8_epilogue_unfused(s, a));
            }
        }
    }
    if (a->amax_d) TG_TRY(launched(tg_cuda_fp8_amax(a->d, a->d_dt, a->m * a->n, a->amax_d, a->accumulate, st), "amax_d"));
    return TG_OK;
}
