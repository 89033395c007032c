/* backend.h — the backend vtable (internal): memory, streams, capture and one entry per kernel. */
#ifndef TG_BACKEND_H
#define TG_BACKEND_H

#include "core/core.h"

/* Kernel arguments are plain structs of raw addresses and sizes, so a CPU
 * stream can record a call by copying the struct, and replay it later with
 * the addresses it was captured with. Shapes are already validated by the
 * op layer (src/core/ops.c); kernels do not fail on good arguments. */

struct tg_fill_args {
    void *dst; /* (n) */
    tg_dtype dt;
    int64_t n;
    double value;
};

/* dst = src converted. With check (an integer dst_dt), a source value that is not an integer of dst_dt's range
 * is noted in check (TG_INDEX_CAST; the CPU then leaves dst unchanged, a GPU stores it saturated). */
struct tg_cast_args {
    const void *src; /* (n) */
    tg_dtype src_dt;
    void *dst;       /* (n) */
    tg_dtype dst_dt;
    int64_t n;
    struct tg_index_check *check;
};

struct tg_binary_args {
    tg_binop op;
    const void *a, *b; /* (n) */
    void *out;         /* (n), may alias a or b */
    tg_dtype dt;
    int64_t n;
};

/* y = alpha * x + beta * y; beta == 0 overwrites. */
struct tg_axpby_args {
    const void *x; /* (n) */
    void *y;       /* (n) */
    tg_dtype dt;
    int64_t n;
    float alpha, beta;
};

/* Row-major batched GEMM: for each batch b,
 * C[b] (m, n) = alpha * op(A[b]) (m, k) @ op(B[b]) (k, n) + beta * C[b].
 * op(A) = A^T when trans_a (A is then stored (k, m) with leading dim lda).
 * Accumulation in f32; beta == 0 overwrites C.
 *
 * Epilogues, with v = alpha * op(A) op(B) + beta * C (f32, not rounded):
 *   NONE       C = v
 *   BIAS       C = v + bias[j], bias (n) broadcast over rows and batches
 *   BIAS_GELU  C = gelu_tanh(v + bias[j]) (the formula of the gelu kernels);
 *              when aux != NULL also aux[b] (m, n) = v + bias[j] in C's dtype
 *              (the pre-activation, for gelu_backward)
 *   BGRAD      C = v, and bgrad[b*m + i] = bgrad_acc * bgrad[b*m + i] + sum_p op(A[b])[i][p]
 *              (wgrad dW = dy^T x with A = dy, trans_a: db = column sums of dy),
 *              stored like the other wgrads (acc 0 overwrites, NaN ignored)
 *   DGELU      C = gelu_tanh'(aux[b][i][j]) * v (the derivative formula of the
 *              gelu_backward kernels), aux (m, n) in C's dtype, only read: the
 *              pre-activation BIAS_GELU saved (dgrad of a GEMM fed by gelu)
 * bias has C's dtype; bgrad is f32 or bf16 (bgrad_dt). Each value is
 * rounded once, on store. (tg_gemm_epilogue is public: tegraph.h.)
 * c_in, when not NULL, is the C that beta scales (same layout and dtype as
 * C, may equal it): C = alpha op(A) op(B) + beta c_in (+ epilogue), e.g. a
 * residual added by the GEMM that produces a block's output. */
struct tg_gemm_args {
    int trans_a, trans_b;
    int64_t m, n, k;
    int64_t batch;
    float alpha, beta;
    const void *a; int64_t lda, stride_a; tg_dtype a_dt;
    const void *b; int64_t ldb, stride_b; tg_dtype b_dt;
    void *c;       int64_t ldc, stride_c; tg_dtype c_dt;
    const void *c_in;                  /* (batch, m, n) like c, or NULL (C itself) */
    tg_gemm_epilogue epi;
    const void *bias;                  /* (n) c_dt: BIAS, BIAS_GELU */
    void *aux; int64_t ldaux, stride_aux; /* (batch, m, n) c_dt: BIAS_GELU (out, may be NULL), DGELU (in) */
    void *bgrad; tg_dtype bgrad_dt;    /* (batch, m): BGRAD */
    float bgrad_acc;
};

typedef enum tg_reduce_op { TG_REDUCE_SUM = 0, TG_REDUCE_MAX_ABS, TG_REDUCE_MAX_ABS_DIFF, TG_REDUCE_SUMSQ } tg_reduce_op;
/* *out (one f32 in device memory) = reduce(a) or reduce(|a - b|). */
struct tg_reduce_args {
    tg_reduce_op op;
    const void *a, *b; /* (n); b only for MAX_ABS_DIFF */
    tg_dtype dt;
    int64_t n;
    float *out;        /* (1), device memory */
};

/* *out = reduce(a) (or of |a - b|) read back to the host (op layer, ops.c):
 * blocking, refused while a stream of a's device captures; name is the op for messages. */
tg_status tg_reduce_to_host(tg_reduce_op op, const tg_tensor *a, const tg_tensor *b, double *out, const char *name);

typedef enum tg_rand_dist { TG_RAND_UNIFORM = 0, TG_RAND_NORMAL } tg_rand_dist;
/* Element i: from Philox words of counter (offset + i / 4), word i % 4.
 * uniform: lo + (hi - lo) * u, u = ((w >> 8) + 0.5) * 2^-24 in (0, 1).
 * normal: Box-Muller on word pairs (w0, w1) -> elements 4c, 4c+1 and (w2, w3)
 * -> 4c+2, 4c+3, computed in double: r = sqrt(-2 ln u0), z0 = r cos(2 pi u1),
 * z1 = r sin(2 pi u1); value = mean + std * z. */
struct tg_rand_args {
    void *dst; /* (n) */
    tg_dtype dt;
    int64_t n;
    tg_rand_dist dist;
    double a, b; /* uniform: lo, hi; normal: mean, std */
    uint64_t seed, offset;
};

/* ------------------------------------------------------------------ transformer kernels (ops_nn.h)
 * "Rows": n rows of c columns. Activations (x, y, dy, dx, gamma, beta, bias,
 * qkv, logits, wte, wpe) share one dtype `dt` (f32 or bf16: compute in f32,
 * round on store); statistics (mean, rstd, lse, losses, loss) are f32.
 * wgrad outputs ("dw") have their own dtype `dw_dt` (f32 or dt) and are
 * written as out = accumulate * out + grad, where accumulate == 0 overwrites
 * (NaN in out ignored). Every kernel is deterministic: bit-identical results
 * for the same inputs, whatever the thread count. */

/* y = (x - mean) * rstd * gamma + beta; saves mean, rstd. */
struct tg_layernorm_forward_args {
    void *y;                   /* (n, c) dt, may alias x */
    float *mean, *rstd;        /* (n) */
    const void *x;             /* (n, c) dt */
    const void *gamma, *beta;  /* (c) dt; beta may be NULL */
    tg_dtype dt;
    int64_t n, c;
    float eps;
};

/* dx = [dres +] rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma.
 * dres (a residual branch's gradient, fused in): the sum is formed in f32 from
 * the f32 dgrad and the loaded dres, then rounded once to dt. */
struct tg_layernorm_backward_args {
    void *dx;                  /* (n, c) dt, may alias dy or dres */
    const void *dy, *x;        /* (n, c) dt */
    const void *dres;          /* (n, c) dt, or NULL */
    const void *gamma;         /* (c) dt */
    const float *mean, *rstd;  /* (n) */
    tg_dtype dt;
    int64_t n, c;
};

/* dgamma = acc * dgamma + sum_n dy * xhat; dbeta = acc * dbeta + sum_n dy. */
struct tg_layernorm_backward_dw_args {
    void *dgamma, *dbeta;      /* (c) dw_dt; dbeta may be NULL */
    const void *dy, *x;        /* (n, c) dt */
    const float *mean, *rstd;  /* (n) */
    tg_dtype dt, dw_dt;
    int64_t n, c;
    float accumulate;
};

/* y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps); saves rstd. */
struct tg_rmsnorm_forward_args {
    void *y;                   /* (n, c) dt, may alias x */
    float *rstd;               /* (n) */
    const void *x;             /* (n, c) dt */
    const void *gamma;         /* (c) dt */
    tg_dtype dt;
    int64_t n, c;
    float eps;
};

/* dx = [dres +] rstd * (dxhat - xhat * mean(dxhat * xhat)), xhat = x * rstd, dxhat = dy * gamma
 * (dres as in layernorm_backward). */
struct tg_rmsnorm_backward_args {
    void *dx;                  /* (n, c) dt, may alias dy or dres */
    const void *dy, *x;        /* (n, c) dt */
    const void *dres;          /* (n, c) dt, or NULL */
    const void *gamma;         /* (c) dt */
    const float *rstd;         /* (n) */
    tg_dtype dt;
    int64_t n, c;
};

/* dgamma = acc * dgamma + sum_n dy * x * rstd. */
struct tg_rmsnorm_backward_dw_args {
    void *dgamma;              /* (c) dw_dt */
    const void *dy, *x;        /* (n, c) dt */
    const float *rstd;         /* (n) */
    tg_dtype dt, dw_dt;
    int64_t n, c;
    float accumulate;
};

/* GELU (tanh approximation), elementwise. */
struct tg_gelu_forward_args {
    void *y;                   /* (n) dt, may alias x */
    const void *x;             /* (n) dt */
    tg_dtype dt;
    int64_t n;
};

struct tg_gelu_backward_args {
    void *dx;                  /* (n) dt, may alias dy */
    const void *dy, *x;        /* (n) dt */
    tg_dtype dt;
    int64_t n;
};

/* SwiGLU: row r of x is [a | b] (2h); y[r] = silu(a) * b (h). */
struct tg_swiglu_forward_args {
    void *y;                   /* (n, h) dt */
    const void *x;             /* (n, 2h) dt */
    tg_dtype dt;
    int64_t n, h;
};

struct tg_swiglu_backward_args {
    void *dx;                  /* (n, 2h) dt */
    const void *dy;            /* (n, h) dt */
    const void *x;             /* (n, 2h) dt */
    tg_dtype dt;
    int64_t n, h;
};

/* y[r] += bias, in place. */
struct tg_bias_add_args {
    void *y;                   /* (n, c) dt */
    const void *bias;          /* (c) dt */
    tg_dtype dt;
    int64_t n, c;
};

/* dbias = acc * dbias + sum_n dy. */
struct tg_bias_backward_dw_args {
    void *dbias;               /* (c) dw_dt */
    const void *dy;            /* (n, c) dt */
    tg_dtype dt, dw_dt;
    int64_t n, c;
    float accumulate;
};

/* Causal attention over packed qkv, c = n_head * d, scale 1/sqrt(d);
 * lse[b,h,t] = logsumexp_j<=t (q_t . k_j * scale). */
struct tg_attention_forward_args {
    void *out;                 /* (b, t, c) dt */
    float *lse;                /* (b, n_head, t) */
    const void *qkv;           /* (b, t, 3c) dt */
    tg_dtype dt;
    int64_t b, t, c;
    int n_head;
};

/* dqkv from dout, recomputing the probabilities from qkv and lse. */
struct tg_attention_backward_args {
    void *dqkv;                /* (b, t, 3c) dt, overwritten */
    const void *dout, *out;    /* (b, t, c) dt */
    const void *qkv;           /* (b, t, 3c) dt */
    const float *lse;          /* (b, n_head, t) */
    tg_dtype dt;
    int64_t b, t, c;
    int n_head;
};

/* Incremental decoding: rows pos .. pos+tn-1 of the caches get the keys and values of qkv's tn new
 * positions, then out[b,i] = causal attention of q_i over cache rows 0 .. pos+i (scale 1/sqrt(d)). */
struct tg_attention_kv_args {
    void *out;                 /* (b, tn, c) dt */
    void *kcache, *vcache;     /* (b, tmax, c) dt */
    const void *qkv;           /* (b, tn, 3c) dt */
    tg_dtype dt;
    int64_t b, tn, tmax, pos, c;
    int n_head;
};

/* Ids outside their table, found by the kernels that take them: one record
 * per device, in its memory. first[k] is the smallest (position << 32 | id as
 * u32) seen by check k (TG_INDEX_*), ~0 when none; limit[k] the table size.
 * TG_INDEX_CAST notes a value that does not fit an integer dtype: the id is
 * the source value's bits (f32 bits for f32 and bf16 sources, the i32 as
 * u32), limit src_dt << 8 | dst_dt (tg_index_cast_code), written by the
 * writer that lowered first (so it stays the dtypes of that value).
 * Positions past 2^32 - 2 are noted as 2^32 - 1. TG_INDEX_STEP notes a
 * capturable step count at the i32 maximum (id: the count; not advanced).
 * The CPU op layer reads it right after the kernel, and a CPU replay right
 * after its work; otherwise it is read where the host next reads from the
 * device (tg_tensor_read, tg_reduce_to_host). */
enum { TG_INDEX_EMBEDDING, TG_INDEX_TARGET, TG_INDEX_CAST, TG_INDEX_STEP, TG_INDEX_CHECKS };
static inline long long tg_index_cast_code(tg_dtype src, tg_dtype dst) { return (long long)src << 8 | (long long)dst; }
struct tg_index_check {
    unsigned long long first[TG_INDEX_CHECKS];
    long long limit[TG_INDEX_CHECKS];
};
/* The record of s's device (allocated with the device's first stream). */
struct tg_index_check *tg_index_check_of(tg_stream *s);
/* Notes that a kernel with checks was issued (or captured) on the device. */
void tg_index_check_arm(tg_stream *s);
/* Reads and clears the record when armed: TG_EINVAL naming the first bad id
 * of each check, else TG_OK. s must not be capturing. */
tg_status tg_index_check_poll(tg_stream *s);

/* out[b,t] = wte[idx[b,t]] + wpe[t]; ids outside [0, v) give wte rows of zeros
 * and are noted in *check (TG_INDEX_EMBEDDING). */
struct tg_embedding_forward_args {
    void *out;                 /* (b, t, c) dt */
    const int32_t *idx;        /* (b, t) */
    const void *wte;           /* (v, c) dt */
    const void *wpe;           /* (tmax, c) dt, may be NULL */
    struct tg_index_check *check;
    tg_dtype dt;
    int64_t b, t, c, v;
};

/* dwte = acc * dwte + scatter-add of dout rows by idx (ids outside [0, v)
 * skipped); dwpe rows [0, t) = acc * dwpe + sum_b dout[b], rows >= t = acc * dwpe. */
struct tg_embedding_backward_dw_args {
    void *dwte;                /* (v, c) dwte_dt, may be NULL */
    void *dwpe;                /* (tmax, c) dwpe_dt, may be NULL */
    const void *dout;          /* (b, t, c) dt */
    const int32_t *idx;        /* (b, t) */
    tg_dtype dt, dwte_dt, dwpe_dt;
    int64_t b, t, c, v, tmax;
    float accumulate;
    struct tg_index_check *check; /* where ids outside [0, v) are noted (with dwte), or NULL */
};

/* losses[r] = logsumexp(logits[r]) - logits[r][target[r]] (0 when target[r] ==
 * ignore_index; NaN for any other target outside [0, v), which counts as valid);
 * loss = [mean of losses over valid rows (0 if none), number of valid rows]. */
struct tg_cross_entropy_forward_args {
    float *loss;               /* (2) */
    float *losses;             /* (n) */
    const void *logits;        /* (n, v) dt */
    const int32_t *targets;    /* (n) */
    struct tg_index_check *check; /* targets outside [0, v) other than ignore_index: TG_INDEX_TARGET */
    tg_dtype dt;
    int64_t n, v;
    int ignore_index;
};

/* dlogits[r] = dloss / loss[1] * (softmax(logits[r]) - onehot(target[r])), 0 rows
 * for ignored or out-of-range targets (the latter noted in *check). */
struct tg_cross_entropy_backward_args {
    void *dlogits;             /* (n, v) dt, may alias logits */
    const void *logits;        /* (n, v) dt */
    const int32_t *targets;    /* (n) */
    const float *loss;         /* (2): the count is read from loss[1] on the device */
    struct tg_index_check *check; /* targets outside [0, v) other than ignore_index: TG_INDEX_TARGET */
    tg_dtype dt;
    int64_t n, v;
    float dloss;
    int ignore_index;
};

/* The fused per-row pass of a chunk of rows: losses[r] as the forward's and, when dlogits is
 * not NULL, dlogits[r] = dloss / loss[1] * (softmax(logits[r]) - onehot(target[r])) as the
 * backward's (may alias logits), from one read of each row. */
struct tg_cross_entropy_fused_args {
    float *losses;             /* (n) */
    void *dlogits;             /* (n, v) dt or NULL */
    const void *logits;        /* (n, v) dt */
    const int32_t *targets;    /* (n) */
    const float *loss;         /* (2): the count is read from loss[1] on the device */
    struct tg_index_check *check; /* targets outside [0, v) other than ignore_index: TG_INDEX_TARGET */
    tg_dtype dt;
    int64_t n, v;
    float dloss;
    int ignore_index;
};

/* loss = [mean of losses over the rows whose target is not ignore_index (0 if none), their
 * number]; losses NULL: loss = [0, number]. Checks the targets against [0, v). */
struct tg_cross_entropy_mean_args {
    float *loss;               /* (2) */
    const float *losses;       /* (n) or NULL */
    const int32_t *targets;    /* (n) */
    struct tg_index_check *check; /* targets outside [0, v) other than ignore_index: TG_INDEX_TARGET */
    int64_t n, v;
    int ignore_index;
};

/* The capturable step count: *step += 1 on the device; at INT32_MAX it stays and is noted in *check
 * (TG_INDEX_STEP), never wraps. */
struct tg_adamw_count_args {
    int32_t *step;             /* (1) */
    struct tg_index_check *check;
};

/* One AdamW step (see tg_adamw_step in ops_nn.h); bias corrections from step. */
struct tg_adamw_args {
    float *p, *m, *v;          /* (n) */
    uint16_t *p_lowp;          /* (n) bf16 copy of p, may be NULL */
    const void *g;             /* (n) g_dt */
    tg_dtype g_dt;
    int64_t n;
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int64_t step;              /* >= 1 */
    /* Capturable: NULL, or lr (1) f32 and the step count (1) i32 read on the
     * device when the kernel runs (then lr and step above are unused), so a
     * replay sees the values of its time, not those of the capture. */
    const float *lr_dev;
    const int32_t *step_dev;
};

/* Many AdamW steps in one call (see tg_adamw_multi in ops_nn.h): shared
 * hyperparameters, per-tensor buffers and weight decay. The table follows the
 * struct (flexible array), so the CPU stream records the whole call by copying
 * tg_adamw_multi_args_size(n) bytes; CUDA passes it by value to its kernels. */
struct tg_adamw_multi_tensor {
    float *p, *m, *v;          /* (n) */
    uint16_t *p_lowp;          /* (n) bf16 copy of p, may be NULL */
    const void *g;             /* (n) g_dt */
    int64_t n;
    tg_dtype g_dt;
    float weight_decay;
};
struct tg_adamw_multi_args {
    float lr, beta1, beta2, eps, grad_scale;
    int64_t step;              /* >= 1 */
    /* Global-norm clip read on the device: NULL, or the sum of squares of the
     * gradients (1) f32; the gradient scale is then grad_scale * f (in double)
     * with f = 0 for a non-finite norm (and the step changes nothing), 1 for
     * norm <= max_norm, else max_norm / (norm + 1e-6), as optim.clip_factor. */
    const float *clip_sumsq;
    double max_norm;
    const float *lr_dev;       /* capturable, as tg_adamw_args: NULL or (1) f32 */
    const int32_t *step_dev;   /* NULL or (1) i32 */
    int ntensors;
    struct tg_adamw_multi_tensor t[];
};
#define tg_adamw_multi_args_size(n) (sizeof(struct tg_adamw_multi_args) + (size_t)(n) * sizeof(struct tg_adamw_multi_tensor))

/* *out (1) f32 = sum over the tensors of the sum of their squares, in a fixed
 * order (deterministic); table after the struct as above. */
struct tg_sumsq_multi_tensor {
    const void *x;             /* (n) dt */
    int64_t n;
    tg_dtype dt;
};
struct tg_sumsq_multi_args {
    float *out;                /* (1), device memory */
    int ntensors;
    struct tg_sumsq_multi_tensor t[];
};
#define tg_sumsq_multi_args_size(n) (sizeof(struct tg_sumsq_multi_args) + (size_t)(n) * sizeof(struct tg_sumsq_multi_tensor))

/* Zeroes many buffers of one device in one call (a graphed backward's
 * first-of-step wgrad targets); table after the struct as above. */
struct tg_zero_multi_buf {
    void *p;
    int64_t bytes;
};
struct tg_zero_multi_args {
    int n;
    struct tg_zero_multi_buf t[];
};
#define tg_zero_multi_args_size(n) (sizeof(struct tg_zero_multi_args) + (size_t)(n) * sizeof(struct tg_zero_multi_buf))

/* Many copies of one device in one call (tg_copy_multi): dst[i] = src[i] for n elements, f32 or bf16 each side
 * (f32 -> bf16 rounds to nearest even; the same dtype copies the bits); table after the struct as above. */
struct tg_copy_multi_pair {
    void *dst;
    const void *src;
    int64_t n;
    tg_dtype dst_dt, src_dt;
};
struct tg_copy_multi_args {
    int n;
    struct tg_copy_multi_pair t[];
};
#define tg_copy_multi_args_size(n) (sizeof(struct tg_copy_multi_args) + (size_t)(n) * sizeof(struct tg_copy_multi_pair))

/* FP8 delayed scaling (TransformerEngine's update), for n tensor roles at once:
 * history (len, n) f32 row-major, row 0 the amax being recorded. Per role j:
 * amax = max over the rows (TG_FP8_AMAX_MAX, NaN rows ignored) or row 0
 * (TG_FP8_AMAX_MOST_RECENT); the rows roll up by one: row i gets row i + 1,
 * the last row gets the old row 0, row 0 becomes 0. Then scale[j] =
 * (fp8_max[j] / amax) / 2^margin when amax is finite and > 0, else scale[j]
 * is kept; an infinite result becomes FLT_MAX; scale_inv[j] = 1 / scale[j]. */
struct tg_fp8_scale_update_args {
    float *history;            /* (len, n) */
    float *scale, *scale_inv;  /* (n) */
    int64_t len;
    int n;
    int most_recent;
    float margin_div;          /* 2^margin */
    float fp8_max[TG_FP8_MAX_ROLES];
};

/* ------------------------------------------------------------------ FP8 (ops_fp8.c; tegraph.h: tg_fp8_*)
 * amax words are f32 bits compared as unsigned integers (|x| has its sign bit
 * cleared, so NaN > Inf > numbers); accumulate: *amax = max(*amax, new) in
 * those terms, else *amax = new. */

/* y[r][c] = fp8(x[r][c] * scale[0]) and/or yt[c][r] = the same code; amax, scale_inv as tg_fp8_cast. */
struct tg_fp8_cast_args {
    const void *x;             /* (rows, cols) x_dt: f32 or bf16 */
    tg_dtype x_dt;
    void *y, *yt;              /* (rows, cols), (cols, rows) y_dt; either may be NULL */
    tg_dtype y_dt;             /* E4M3 or E5M2 */
    int64_t rows, cols;
    const float *scale;        /* (1) or NULL: 1 */
    float *amax;               /* (1) or NULL */
    float *scale_inv;          /* (1) or NULL: gets 1 / scale */
    int accumulate;
    /* The gradient forms of tg_fp8_cast_transpose_dbias: gelu_x (rows, cols) x_dt or NULL: the cast reads
     * g = x_dt(x * gelu'(gelu_x)) (tg_gelu_backward's formula and rounding) in place of x; dbias_part
     * (dbias_chunks, cols) f32 or NULL: row p = the column sums of g over the rows of chunk p
     * (tg_fp8_dbias_chunks: 64-row tiles t with t % dbias_chunks == p, rows in order). */
    const void *gelu_x;
    float *dbias_part;
    int64_t dbias_chunks;
};

/* A LayerNorm forward whose output goes straight to FP8 (tg_layernorm_forward_fp8): ln as
 * tg_layernorm_forward (ln.y unused), each output rounded to ln.dt as that op stores it, then
 * y8[r][c] = fp8(v * scale[0]) with amax = max|v| and scale_inv as tg_fp8_cast. */
struct tg_layernorm_fp8_args {
    struct tg_layernorm_forward_args ln;
    uint8_t *y8;               /* (n, c) y8_dt */
    tg_dtype y8_dt;            /* E4M3 or E5M2 */
    const float *scale;        /* (1) or NULL: 1 */
    float *amax;               /* (1) or NULL */
    float *scale_inv;          /* (1) or NULL: gets 1 / scale */
    int accumulate;
};

/* dbias[c] = accumulate * dbias[c] + the sum over the chunks of part[.][c], in double in a fixed order (the CPU:
 * chunk order), rounded once to dw_dt (tg_fp8_dbias_finish). */
struct tg_fp8_dbias_args {
    const float *part;         /* (chunks, c) */
    int64_t chunks, c;
    void *dbias;               /* (c) dw_dt: f32 or bf16 */
    tg_dtype dw_dt;
    float accumulate;
};

/* yt[c][r] = x[r][c], FP8 codes. */
struct tg_fp8_transpose_args {
    const uint8_t *x;          /* (rows, cols) */
    uint8_t *yt;               /* (cols, rows) */
    int64_t rows, cols;
};

/* y = f32(x) * scale_inv[0], rounded once to y_dt. */
struct tg_fp8_dequantize_args {
    const uint8_t *x;          /* (n) x_dt: E4M3 or E5M2 */
    tg_dtype x_dt;
    void *y;                   /* (n) y_dt: f32 or bf16 */
    tg_dtype y_dt;
    int64_t n;
    const float *scale_inv;    /* (1) or NULL: 1 */
};

/* *amax = max |x| (accumulated or written). */
struct tg_fp8_amax_args {
    const void *x;             /* (n) dt: f32 or bf16 */
    tg_dtype dt;
    int64_t n;
    float *amax;               /* (1) */
    int accumulate;
};

/* D (m, n) row-major = alpha * sa * sb * A (m, k) @ B (n, k)^T + beta * D, then
 * the epilogue (NONE, BIAS, BIAS_GELU as in tg_gemm_args, bias bf16), then
 * amax_d over the stored D. */
struct tg_fp8_gemm_args {
    int64_t m, n, k;
    const uint8_t *a; tg_dtype a_dt;   /* (m, k) */
    const uint8_t *b; tg_dtype b_dt;   /* (n, k) */
    const float *a_scale_inv, *b_scale_inv; /* (1) or NULL: 1 */
    void *d; tg_dtype d_dt;            /* (m, n) f32 or bf16 */
    const void *c;                     /* (m, n) d_dt: the C that beta scales; NULL: D */
    float alpha, beta;
    tg_gemm_epilogue epi;
    const uint16_t *bias;              /* (n) bf16: BIAS, BIAS_GELU */
    void *aux;                         /* (m, n) d_dt: BIAS_GELU (out), may be NULL */
    float *amax_d;                     /* (1) or NULL */
    int accumulate;                    /* for amax_d */
};

typedef enum tg_memcpy_kind { TG_H2D = 0, TG_D2H, TG_D2D } tg_memcpy_kind;

/* An event marks a point of a stream's work (public handle: tg_event). */
struct tg_event {
    tg_device dev;
    const struct tg_backend *be;
    int timing;  /* elapsed time can be asked for */
    int kept;    /* recorded inside a CPU capture: the graph writes it at each replay, so it is never freed */
    int recorded; /* CUDA: cudaEventRecord was called on it (directly or into a captured graph) */
    int refcount; /* its owner's, plus one per graph that recorded or waited for it while capturing */
    void *impl;  /* cudaEvent_t / CPU: struct with the host time of the record */
};

struct tg_backend {
    const char *name;
    tg_device_type type;

    /* devices */
    int (*device_count)(void);
    tg_status (*device_describe)(int index, char *name, size_t n, size_t *total);
    tg_status (*use_device)(int index); /* the calling thread's current device; NULL: nothing to do */

    /* memory (device allocator; NULL ptr on failure with status set) */
    tg_status (*alloc)(int index, size_t bytes, void **out);
    void (*free)(int index, void *ptr);
    /* stream-ordered copy; D2H/H2D calls synchronise */
    tg_status (*memcpy)(tg_stream *s, void *dst, const void *src, size_t bytes, tg_memcpy_kind kind);

    /* streams and capture */
    tg_status (*stream_init)(tg_stream *s);    /* fills s->impl */
    void (*stream_destroy)(tg_stream *s);
    tg_status (*stream_sync)(tg_stream *s);
    void *(*stream_native)(tg_stream *s);      /* the native handle (cudaStream_t); NULL: none */
    tg_status (*capture_begin)(tg_stream *s);  /* s->capture already set to the new graph */
    tg_status (*capture_end)(tg_stream *s, tg_graph *g); /* finalises g->impl, g->ncmds */
    tg_status (*graph_replay)(tg_graph *g, tg_stream *s);
    void (*graph_destroy)(tg_graph *g);
    /* Optional (NULL: not supported): host work in s's order (tg_stream_host_call). */
    tg_status (*host_call)(tg_stream *s, const struct tg_host_call *h);

    /* events: a record is stream work (on the CPU a command, so one recorded
     * in a captured graph takes its time at each replay) */
    tg_status (*event_init)(tg_event *e);      /* fills e->impl (e->timing set) */
    void (*event_destroy)(tg_event *e);
    tg_status (*event_record)(tg_event *e, tg_stream *s);
    tg_status (*stream_wait_event)(tg_stream *s, tg_event *e); /* later work on s waits for e */
    tg_status (*event_query)(tg_event *e, int *done);
    tg_status (*event_sync)(tg_event *e);
    /* ms from a to b (both recorded and complete, timing events) */
    tg_status (*event_elapsed)(tg_event *a, tg_event *b, double *ms);

    /* kernels */
    tg_status (*fill)(tg_stream *s, const struct tg_fill_args *a);
    tg_status (*cast)(tg_stream *s, const struct tg_cast_args *a);
    tg_status (*binary)(tg_stream *s, const struct tg_binary_args *a);
    tg_status (*axpby)(tg_stream *s, const struct tg_axpby_args *a);
    tg_status (*gemm)(tg_stream *s, const struct tg_gemm_args *a);
    tg_status (*reduce)(tg_stream *s, const struct tg_reduce_args *a);
    tg_status (*rand)(tg_stream *s, const struct tg_rand_args *a);

    /* transformer kernels (ops_nn.h) */
    tg_status (*layernorm_forward)(tg_stream *s, const struct tg_layernorm_forward_args *a);
    tg_status (*layernorm_backward)(tg_stream *s, const struct tg_layernorm_backward_args *a);
    tg_status (*layernorm_backward_dw)(tg_stream *s, const struct tg_layernorm_backward_dw_args *a);
    tg_status (*rmsnorm_forward)(tg_stream *s, const struct tg_rmsnorm_forward_args *a);
    tg_status (*rmsnorm_backward)(tg_stream *s, const struct tg_rmsnorm_backward_args *a);
    tg_status (*rmsnorm_backward_dw)(tg_stream *s, const struct tg_rmsnorm_backward_dw_args *a);
    tg_status (*gelu_forward)(tg_stream *s, const struct tg_gelu_forward_args *a);
    tg_status (*gelu_backward)(tg_stream *s, const struct tg_gelu_backward_args *a);
    tg_status (*swiglu_forward)(tg_stream *s, const struct tg_swiglu_forward_args *a);
    tg_status (*swiglu_backward)(tg_stream *s, const struct tg_swiglu_backward_args *a);
    tg_status (*bias_add)(tg_stream *s, const struct tg_bias_add_args *a);
    tg_status (*bias_backward_dw)(tg_stream *s, const struct tg_bias_backward_dw_args *a);
    tg_status (*attention_forward)(tg_stream *s, const struct tg_attention_forward_args *a);
    tg_status (*attention_backward)(tg_stream *s, const struct tg_attention_backward_args *a);
    tg_status (*attention_kv)(tg_stream *s, const struct tg_attention_kv_args *a);
    tg_status (*embedding_forward)(tg_stream *s, const struct tg_embedding_forward_args *a);
    tg_status (*embedding_backward_dw)(tg_stream *s, const struct tg_embedding_backward_dw_args *a);
    tg_status (*cross_entropy_forward)(tg_stream *s, const struct tg_cross_entropy_forward_args *a);
    tg_status (*cross_entropy_backward)(tg_stream *s, const struct tg_cross_entropy_backward_args *a);
    tg_status (*cross_entropy_fused)(tg_stream *s, const struct tg_cross_entropy_fused_args *a);
    tg_status (*cross_entropy_mean)(tg_stream *s, const struct tg_cross_entropy_mean_args *a);
    tg_status (*adamw)(tg_stream *s, const struct tg_adamw_args *a);
    tg_status (*adamw_multi)(tg_stream *s, const struct tg_adamw_multi_args *a);
    tg_status (*adamw_count)(tg_stream *s, const struct tg_adamw_count_args *a);
    tg_status (*sumsq_multi)(tg_stream *s, const struct tg_sumsq_multi_args *a);
    tg_status (*zero_multi)(tg_stream *s, const struct tg_zero_multi_args *a);
    tg_status (*copy_multi)(tg_stream *s, const struct tg_copy_multi_args *a);
    tg_status (*fp8_scale_update)(tg_stream *s, const struct tg_fp8_scale_update_args *a);

    /* FP8 */
    tg_status (*fp8_cast)(tg_stream *s, const struct tg_fp8_cast_args *a);
    /* tg_fp8_cast_transpose_gelu: the cast args with x = the pre-activation h (gelu_x, dbias_part unused); the cast
     * reads g = x_dt(gelu(h)) (tg_gelu_forward's formula and rounding) in place of x */
    tg_status (*fp8_cast_gelu)(tg_stream *s, const struct tg_fp8_cast_args *a);
    tg_status (*layernorm_forward_fp8)(tg_stream *s, const struct tg_layernorm_fp8_args *a);
    tg_status (*fp8_dbias)(tg_stream *s, const struct tg_fp8_dbias_args *a);
    tg_status (*fp8_transpose)(tg_stream *s, const struct tg_fp8_transpose_args *a);
    tg_status (*fp8_dequantize)(tg_stream *s, const struct tg_fp8_dequantize_args *a);
    tg_status (*fp8_amax)(tg_stream *s, const struct tg_fp8_amax_args *a);
    tg_status (*fp8_gemm)(tg_stream *s, const struct tg_fp8_gemm_args *a);
};

/* ------------------------------------------------------------------ native seam (native.c)
 * For code that drives a device's own library on tegraph's streams (the
 * NCCL transport, src/dist/comm_nccl.c) without knowing the backend's
 * internals; each goes through the device's backend. */
/* Makes dev the calling thread's current device (CUDA: cudaSetDevice; the CPU: nothing). */
tg_status tg_device_use(tg_device dev);
/* The native handle of s (CUDA: its cudaStream_t), or NULL when the backend has none (the CPU). */
void *tg_stream_native(tg_stream *s);
/* Device memory from the backend's allocator, outside any pool, and its release. */
tg_status tg_device_alloc(tg_device dev, size_t bytes, void **out);
void tg_device_free(tg_device dev, void *ptr);

extern const struct tg_backend tg_backend_cpu;
#ifdef TG_HAVE_CUDA
extern const struct tg_backend tg_backend_cuda;
#endif

#endif
