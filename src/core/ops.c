/* ops.c — the op layer: checks shapes, dtypes and devices, then issues kernels on the current stream. */
#include "backend/backend.h"
#include "core/ops_check.h"
#include "core/ops_nn.h"

#include <string.h>

static tg_stream *stream_of(const tg_tensor *t) { return tg_stream_current(tg_tensor_device(t)); }

static tg_status need_kernel(const void *fn, tg_stream *s, const char *op)
{
    if (!fn) return tg_error(TG_ENOTSUP, "%s is not implemented by the %s backend", op, s->be->name);
    tg_device_count_op(s, fn == (const void *)s->be->gemm);
    return TG_OK;
}

/* "[2,3] bf16 on cpu" for messages */
static const char *describe(const tg_tensor *t, char *buf, size_t n)
{
    char sh[64], d[32];
    snprintf(buf, n, "%s %s on %s", tg_tensor_shape_str(t, sh, sizeof sh), tg_dtype_name(t->dtype),
             tg_device_str(tg_tensor_device(t), d, sizeof d));
    return buf;
}

static tg_status check_pair(const char *op, const tg_tensor *a, const tg_tensor *b, int same_dtype)
{
    char x[96], y[96];
    if (!same_dev(a, b)) return tg_error(TG_EINVAL, "%s: tensors on different devices (%s vs %s)", op, describe(a, x, sizeof x), describe(b, y, sizeof y));
    if (!tg_tensor_same_shape(a, b)) return tg_error(TG_EINVAL, "%s: shapes differ (%s vs %s)", op, describe(a, x, sizeof x), describe(b, y, sizeof y));
    if (same_dtype && a->dtype != b->dtype) return tg_error(TG_EINVAL, "%s: dtypes differ (%s vs %s)", op, describe(a, x, sizeof x), describe(b, y, sizeof y));
    return TG_OK;
}

tg_status tg_fill(tg_tensor *t, double value)
{
    TG_NONNULL(t, "t");
    tg_stream *s = stream_of(t);
    if (!s) return TG_ENOMEM;
    struct tg_fill_args a = {.dst = tg_tensor_data(t), .dt = t->dtype, .n = tg_tensor_numel(t), .value = value};
    tg_status st = need_kernel((const void *)s->be->fill, s, "fill");
    if (st == TG_OK && t->dtype == TG_F16) st = tg_error(TG_ENOTSUP, "fill: f16 is not supported yet");
    if (st == TG_OK) st = tg_value_fits(t->dtype, value, "fill", -1);
    if (st == TG_OK) st = s->be->fill(s, &a);
    return tg_stream_note_error(s, st);
}

static tg_status copy_across_devices(tg_tensor *dst, const tg_tensor *src)
{
    size_t n = (size_t)tg_tensor_numel(src);
    if (dst->dtype == src->dtype) {
        size_t bytes = tg_tensor_bytes(src);
        void *tmp = malloc(bytes ? bytes : 1);
        if (!tmp) return tg_error(TG_ENOMEM, "out of host memory");
        tg_status st = tg_tensor_read(src, tmp, bytes);
        if (st == TG_OK) st = tg_tensor_write(dst, tmp, bytes);
        free(tmp);
        return st;
    }
    double *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp) return tg_error(TG_ENOMEM, "out of host memory");
    tg_status st = tg_tensor_read_f64(src, tmp, n);
    if (st == TG_OK) st = tg_tensor_write_f64(dst, tmp, n);
    free(tmp);
    return st;
}

tg_status tg_copy(tg_tensor *dst, const tg_tensor *src)
{
    char x[96], y[96];
    TG_NONNULL(dst, "dst");
    TG_NONNULL(src, "src");
    tg_stream *s = stream_of(dst);
    if (!s) return TG_ENOMEM;
    tg_status st = TG_OK;
    if (tg_tensor_numel(dst) != tg_tensor_numel(src))
        st = tg_error(TG_EINVAL, "copy: sizes differ (destination %s, source %s)", describe(dst, x, sizeof x), describe(src, y, sizeof y));
    else if (dst->dtype == TG_F16 || src->dtype == TG_F16)
        st = tg_error(TG_ENOTSUP, "copy: f16 is not supported yet");
    else if (dst->dtype != src->dtype && (tg_dtype_is_fp8(dst->dtype) || tg_dtype_is_fp8(src->dtype)) &&
             !float_dtype(tg_dtype_is_fp8(dst->dtype) ? src->dtype : dst->dtype))
        st = tg_error(TG_EINVAL, "copy: %s into %s: FP8 tensors copy from and to f32 or bf16 (unscaled; tg_fp8_cast scales)",
                      describe(src, y, sizeof y), describe(dst, x, sizeof x));
    else if (!same_dev(dst, src))
        st = copy_across_devices(dst, src);
    else if (tg_tensor_same_memory(dst, src))
        st = TG_OK;
    else if (overlaps(dst, src)) /* a view shifted over its source: the copy would read what it wrote */
        st = no_overlap("copy", "destination", dst, "source", src);
    else if (dst->dtype == src->dtype)
        st = s->be->memcpy(s, tg_tensor_data(dst), tg_tensor_data(src), tg_tensor_bytes(src), TG_D2D);
    else {
        /* Into an integer dtype, a value that is not an integer of its range (1.5, 3e9, NaN into i32, 70000
         * into u16) is refused, as tg_tensor_write refuses it: the kernel notes the first in the device's
         * check record, read now on the CPU, else at the device's next host read (as bad token ids). */
        const int check = (dst->dtype == TG_I32 || dst->dtype == TG_U16) && !(src->dtype == TG_U16 && dst->dtype == TG_I32);
        struct tg_cast_args a = {.src = tg_tensor_data(src), .src_dt = src->dtype, .dst = tg_tensor_data(dst),
                                 .dst_dt = dst->dtype, .n = tg_tensor_numel(src),
                                 .check = check ? tg_index_check_of(s) : NULL};
        st = need_kernel((const void *)s->be->cast, s, "cast");
        if (st == TG_OK) st = s->be->cast(s, &a);
        if (st == TG_OK && a.check) tg_index_check_arm(s);
        if (st == TG_OK && a.check && s->be->type == TG_CPU && !s->capture) st = tg_index_check_poll(s);
    }
    return tg_stream_note_error(s, st);
}

tg_status tg_binary(tg_binop op, tg_tensor *out, const tg_tensor *a, const tg_tensor *b)
{
    static const char *names[] = {"add", "sub", "mul", "div"};
    TG_NONNULL(out, "out");
    TG_NONNULL(a, "a");
    TG_NONNULL(b, "b");
    tg_stream *s = stream_of(out);
    if (!s) return TG_ENOMEM;
    const char *name = (unsigned)op < 4 ? names[op] : "binary";
    tg_status st = (unsigned)op < 4 ? TG_OK : tg_error(TG_EINVAL, "binary: unknown op %d", (int)op);
    if (st == TG_OK) st = check_pair(name, a, b, 1);
    if (st == TG_OK) st = check_pair(name, out, a, 1);
    if (st == TG_OK) st = no_partial_overlap(name, "out", out, "a", a);
    if (st == TG_OK) st = no_partial_overlap(name, "out", out, "b", b);
    char d[96];
    if (st == TG_OK && !float_dtype(a->dtype))
        st = tg_error(TG_EINVAL, "%s: dtype %s is not a float type (f32 or bf16; tensor %s)", name, tg_dtype_name(a->dtype),
                      describe(a, d, sizeof d));
    if (st == TG_OK) st = need_kernel((const void *)s->be->binary, s, name);
    if (st == TG_OK) {
        struct tg_binary_args args = {.op = op, .a = tg_tensor_data(a), .b = tg_tensor_data(b), .out = tg_tensor_data(out),
                                      .dt = a->dtype, .n = tg_tensor_numel(a)};
        st = s->be->binary(s, &args);
    }
    return tg_stream_note_error(s, st);
}

tg_status tg_axpby(tg_tensor *y, double alpha, const tg_tensor *x, double beta)
{
    TG_NONNULL(y, "y");
    TG_NONNULL(x, "x");
    tg_stream *s = stream_of(y);
    if (!s) return TG_ENOMEM;
    tg_status st = check_pair("axpby", y, x, 1);
    if (st == TG_OK) st = no_partial_overlap("axpby", "y", y, "x", x);
    char d[96];
    if (st == TG_OK && !float_dtype(x->dtype))
        st = tg_error(TG_EINVAL, "axpby: dtype %s is not a float type (f32 or bf16; tensor %s)", tg_dtype_name(x->dtype),
                      describe(x, d, sizeof d));
    if (st == TG_OK) st = need_kernel((const void *)s->be->axpby, s, "axpby");
    if (st == TG_OK) {
        struct tg_axpby_args a = {.x = tg_tensor_data(x), .y = tg_tensor_data(y), .dt = x->dtype, .n = tg_tensor_numel(x),
                                  .alpha = (float)alpha, .beta = (float)beta};
        st = s->be->axpby(s, &a);
    }
    return tg_stream_note_error(s, st);
}

/* Matrix dims of a 2-D or 3-D operand: rows, cols, batch (1 for 2-D). */
static int mat_dims(const tg_tensor *t, int64_t *rows, int64_t *cols, int64_t *batch)
{
    if (t->ndim == 2) {
        *batch = 1, *rows = t->shape[0], *cols = t->shape[1];
        return 1;
    }
    if (t->ndim == 3) {
        *batch = t->shape[0], *rows = t->shape[1], *cols = t->shape[2];
        return 1;
    }
    return 0;
}

/* The epilogue's tensors against C (m, n) x batch: messages name their shapes. */
static tg_status check_epilogue(const tg_tensor *c, int64_t m, int64_t n, int64_t batch, tg_gemm_epilogue epi,
                                const tg_tensor *bias, const tg_tensor *aux, const tg_tensor *bgrad)
{
    static const char *names[] = {"none", "bias", "bias_gelu", "bgrad", "dgelu"};
    char x[96], z[96];
    if ((unsigned)epi > TG_EPI_DGELU) return tg_error(TG_EINVAL, "gemm: unknown epilogue %d", (int)epi);
    int wants_bias = epi == TG_EPI_BIAS || epi == TG_EPI_BIAS_GELU;
    if (!wants_bias && bias) return tg_error(TG_EINVAL, "gemm: a bias was given but the epilogue is %s", names[epi]);
    if (epi != TG_EPI_BIAS_GELU && epi != TG_EPI_DGELU && aux)
        return tg_error(TG_EINVAL, "gemm: an aux tensor was given but the epilogue is %s", names[epi]);
    if (epi != TG_EPI_BGRAD && bgrad) return tg_error(TG_EINVAL, "gemm: a bgrad output was given but the epilogue is %s", names[epi]);
    if (epi == TG_EPI_DGELU && !aux)
        return tg_error(TG_EINVAL, "gemm: epilogue dgelu needs aux, the pre-activation (C's shape %s)", describe(c, z, sizeof z));
    if (wants_bias) {
        if (!bias) return tg_error(TG_EINVAL, "gemm: epilogue %s needs a bias", names[epi]);
        if (!same_dev(bias, c) || bias->dtype != c->dtype || bias->ndim != 1 || bias->shape[0] != n)
            return tg_error(TG_EINVAL, "gemm: the bias must be (%lld) %s on C's device, like C's columns (bias %s, C %s)",
                            (long long)n, tg_dtype_name(c->dtype), describe(bias, x, sizeof x), describe(c, z, sizeof z));
    }
    if (aux) {
        if (!same_dev(aux, c) || aux->dtype != c->dtype || !tg_tensor_same_shape(aux, c))
            return tg_error(TG_EINVAL, "gemm: aux must have C's shape, dtype and device (aux %s, C %s)",
                            describe(aux, x, sizeof x), describe(c, z, sizeof z));
        if (overlaps(aux, c))
            return tg_error(TG_EINVAL, "gemm: aux %s shares memory with C %s", describe(aux, x, sizeof x),
                            describe(c, z, sizeof z));
    }
    if (epi == TG_EPI_BGRAD) {
        if (!bgrad) return tg_error(TG_EINVAL, "gemm: epilogue bgrad needs a bgrad output");
        int shape_ok = c->ndim == 2 ? bgrad->ndim == 1 && bgrad->shape[0] == m
                                    : bgrad->ndim == 2 && bgrad->shape[0] == batch && bgrad->shape[1] == m;
        if (!same_dev(bgrad, c) || !float_dtype(bgrad->dtype) || !shape_ok)
            return tg_error(TG_EINVAL, "gemm: bgrad must be (%s%lld) f32 or bf16 on C's device, one per row of op(A) (bgrad %s, C %s)",
                            c->ndim == 2 ? "" : "batch, ", (long long)m, describe(bgrad, x, sizeof x), describe(c, z, sizeof z));
    }
    return TG_OK;
}

tg_status tg_gemm_in(tg_tensor *c, const tg_tensor *c_in, const tg_tensor *a, int trans_a, const tg_tensor *b,
                     int trans_b, double alpha, double beta, tg_gemm_epilogue epi, const tg_tensor *bias, tg_tensor *aux,
                     tg_tensor *bgrad, double bgrad_accumulate)
{
    char x[96], y[96], z[96];
    if (!c || !a || !b) return tg_error(TG_EINVAL, "gemm: %s is NULL", !c ? "c" : !a ? "a" : "b");
    tg_stream *s = stream_of(c);
    if (!s) return TG_ENOMEM;
    int64_t ar = 0, ac = 0, ab = 0, br = 0, bc = 0, bb = 0, cr = 0, cc = 0, cb = 0;
    tg_status st = TG_OK;
    if (c_in && (!same_dev(c_in, c) || !tg_tensor_same_shape(c_in, c) || c_in->dtype != c->dtype))
        st = tg_error(TG_EINVAL, "gemm: the C input %s must have C's shape, dtype and device (C %s)",
                      describe(c_in, x, sizeof x), describe(c, z, sizeof z));
    else if (c_in && overlaps(c_in, c) && !tg_tensor_same_memory(c_in, c))
        st = tg_error(TG_EINVAL, "gemm: the C input %s partly overlaps C %s (it may be C itself, or apart from it)",
                      describe(c_in, x, sizeof x), describe(c, z, sizeof z));
    if (st != TG_OK) return tg_stream_note_error(s, st);
    if (!mat_dims(a, &ar, &ac, &ab) || !mat_dims(b, &br, &bc, &bb) || !mat_dims(c, &cr, &cc, &cb))
        st = tg_error(TG_EINVAL, "gemm: operands must be 2-D or 3-D (A %s, B %s, C %s)", describe(a, x, sizeof x), describe(b, y, sizeof y), describe(c, z, sizeof z));
    else if (!same_dev(a, c) || !same_dev(b, c))
        st = tg_error(TG_EINVAL, "gemm: operands on different devices (A %s, B %s, C %s)", describe(a, x, sizeof x), describe(b, y, sizeof y), describe(c, z, sizeof z));
    else if (a->dtype != b->dtype || !float_dtype(a->dtype) || (c->dtype != TG_F32 && c->dtype != a->dtype))
        st = tg_error(TG_EINVAL, "gemm: dtypes must be A = B in {f32, bf16} and C f32 or the same (A %s, B %s, C %s)", describe(a, x, sizeof x), describe(b, y, sizeof y), describe(c, z, sizeof z));
    if (st != TG_OK) return tg_stream_note_error(s, st);
    int64_t m = trans_a ? ac : ar, k = trans_a ? ar : ac;
    int64_t kb = trans_b ? bc : br, n = trans_b ? br : bc;
    if (k != kb || cr != m || cc != n || (ab != cb && ab != 1) || (bb != cb && bb != 1) || (c->ndim == 2 && (ab != 1 || bb != 1)))
        st = tg_error(TG_EINVAL, "gemm: shapes do not match: C %s = op(A) %s%s @ op(B) %s%s", describe(c, z, sizeof z),
                      describe(a, x, sizeof x), trans_a ? "^T" : "", describe(b, y, sizeof y), trans_b ? "^T" : "");
    if (st == TG_OK) st = check_epilogue(c, m, n, cb, epi, bias, aux, bgrad);
    /* the outputs are written while A and B (and the epilogue's inputs) are read, tile by tile */
    if (st == TG_OK) st = no_overlap("gemm", "C", c, "A", a);
    if (st == TG_OK) st = no_overlap("gemm", "C", c, "B", b);
    if (st == TG_OK) st = no_overlap("gemm", "C", c, "bias", bias);
    if (st == TG_OK && epi == TG_EPI_BIAS_GELU) st = no_overlap("gemm", "aux", aux, "A", a);
    if (st == TG_OK && epi == TG_EPI_BIAS_GELU) st = no_overlap("gemm", "aux", aux, "B", b);
    if (st == TG_OK) st = no_overlap("gemm", "bgrad", bgrad, "A", a);
    if (st == TG_OK) st = no_overlap("gemm", "bgrad", bgrad, "B", b);
    if (st == TG_OK) st = no_overlap("gemm", "bgrad", bgrad, "C", c);
    if (st == TG_OK) st = need_kernel((const void *)s->be->gemm, s, "gemm");
    if (st == TG_OK) {
        struct tg_gemm_args g = {
            .trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k, .batch = cb,
            .alpha = (float)alpha, .beta = (float)beta,
            .a = tg_tensor_data(a), .lda = ac, .stride_a = ab == 1 && cb > 1 ? 0 : ar * ac, .a_dt = a->dtype,
            .b = tg_tensor_data(b), .ldb = bc, .stride_b = bb == 1 && cb > 1 ? 0 : br * bc, .b_dt = b->dtype,
            .c = tg_tensor_data(c), .ldc = cc, .stride_c = cr * cc, .c_dt = c->dtype,
            .c_in = c_in ? tg_tensor_data(c_in) : NULL,
            .epi = epi,
            .bias = bias ? tg_tensor_data(bias) : NULL,
            .aux = aux ? tg_tensor_data(aux) : NULL, .ldaux = cc, .stride_aux = cr * cc,
            .bgrad = bgrad ? tg_tensor_data(bgrad) : NULL, .bgrad_dt = bgrad ? bgrad->dtype : TG_F32,
            .bgrad_acc = (float)bgrad_accumulate,
        };
        st = s->be->gemm(s, &g);
    }
    return tg_stream_note_error(s, st);
}

tg_status tg_gemm_ex(tg_tensor *c, const tg_tensor *a, int trans_a, const tg_tensor *b, int trans_b, double alpha,
                     double beta, tg_gemm_epilogue epi, const tg_tensor *bias, tg_tensor *aux, tg_tensor *bgrad,
                     double bgrad_accumulate)
{
    return tg_gemm_in(c, NULL, a, trans_a, b, trans_b, alpha, beta, epi, bias, aux, bgrad, bgrad_accumulate);
}

tg_status tg_gemm(tg_tensor *c, const tg_tensor *a, int trans_a, const tg_tensor *b, int trans_b, double alpha, double beta)
{
    return tg_gemm_ex(c, a, trans_a, b, trans_b, alpha, beta, TG_EPI_NONE, NULL, NULL, NULL, 0.0);
}

/* Runs a reduction into a one-float scratch buffer and reads it back. */
tg_status tg_reduce_to_host(tg_reduce_op op, const tg_tensor *a, const tg_tensor *b, double *out, const char *name)
{
    char d[32];
    if (!a || !out) return tg_error(TG_EINVAL, "%s: %s is NULL", name, !a ? "the tensor" : "out");
    tg_device dev = tg_tensor_device(a);
    tg_stream *s = stream_of(a);
    if (!s) return TG_ENOMEM;
    if (tg_device_capturing(dev))
        return tg_stream_note_error(s, tg_error(TG_ECAPTURE, "%s: reads a result to the host, which is not capturable (stream '%s' of %s is capturing)", name, tg_device_capturer_name(dev), tg_device_str(dev, d, sizeof d)));
    char what[96];
    if (!float_dtype(a->dtype))
        return tg_error(TG_EINVAL, "%s: dtype %s is not a float type (tensor %s)", name, tg_dtype_name(a->dtype),
                        describe(a, what, sizeof what));
    TG_TRY(need_kernel((const void *)s->be->reduce, s, name));
    struct tg_storage *scratch;
    TG_TRY(tg_storage_new(NULL, dev, sizeof(float), &scratch));
    struct tg_reduce_args r = {.op = op, .a = tg_tensor_data(a), .b = b ? tg_tensor_data(b) : NULL, .dt = a->dtype,
                               .n = tg_tensor_numel(a), .out = scratch->data};
    float v = 0;
    tg_status st = s->be->reduce(s, &r);
    if (st == TG_OK) st = s->be->memcpy(s, &v, scratch->data, sizeof v, TG_D2H);
    tg_storage_release(scratch);
    *out = v;
    if (st == TG_OK) st = tg_index_check_poll(s); /* a host read like tg_tensor_read: ids outside their table before it */
    return st;
}

tg_status tg_sum(const tg_tensor *t, double *out) { return tg_reduce_to_host(TG_REDUCE_SUM, t, NULL, out, "sum"); }
tg_status tg_max_abs(const tg_tensor *t, double *out) { return tg_reduce_to_host(TG_REDUCE_MAX_ABS, t, NULL, out, "max_abs"); }

tg_status tg_max_abs_diff(const tg_tensor *a, const tg_tensor *b, double *out)
{
    TG_NONNULL(a, "a");
    TG_NONNULL(b, "b");
    TG_TRY(check_pair("max_abs_diff", a, b, 1));
    return tg_reduce_to_host(TG_REDUCE_MAX_ABS_DIFF, a, b, out, "max_abs_diff");
}

static tg_status rand_fill(tg_tensor *t, tg_rand_dist dist, double a, double b, const char *name)
{
    if (!t) return tg_error(TG_EINVAL, "%s: the tensor is NULL", name);
    tg_stream *s = stream_of(t);
    if (!s) return TG_ENOMEM;
    char d[96];
    tg_status st = float_dtype(t->dtype) ? TG_OK
                                         : tg_error(TG_EINVAL, "%s: dtype %s is not a float type (f32 or bf16; tensor %s)",
                                                    name, tg_dtype_name(t->dtype), describe(t, d, sizeof d));
    /* randn: mean and std >= 0 finite (std = -1 drew from N(mean, 1), NaN filled NaN); rand: lo <= hi finite */
    if (st == TG_OK && dist == TG_RAND_NORMAL && !(isfinite(a) && isfinite(b) && b >= 0))
        st = tg_error(TG_EINVAL, "%s: mean = %g and std = %g must be finite, std >= 0", name, a, b);
    if (st == TG_OK && dist == TG_RAND_UNIFORM && !(isfinite(a) && isfinite(b) && a <= b))
        st = tg_error(TG_EINVAL, "%s: lo = %g and hi = %g must be finite, lo <= hi", name, a, b);
    if (st == TG_OK) st = need_kernel((const void *)s->be->rand, s, name);
    if (st == TG_OK) {
        int64_t n = tg_tensor_numel(t);
        struct tg_rand_args r = {.dst = tg_tensor_data(t), .dt = t->dtype, .n = n, .dist = dist, .a = a, .b = b};
        tg_rng_reserve((uint64_t)(n + 3) / 4, &r.seed, &r.offset);
        st = s->be->rand(s, &r);
    }
    return tg_stream_note_error(s, st);
}

tg_status tg_randn(tg_tensor *t, double mean, double std) { return rand_fill(t, TG_RAND_NORMAL, mean, std, "randn"); }
tg_status tg_rand(tg_tensor *t, double lo, double hi) { return rand_fill(t, TG_RAND_UNIFORM, lo, hi, "rand"); }
