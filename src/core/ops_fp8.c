/* ops_fp8.c — the FP8 op layer: casts with amax (and transposed copies), dequantize, amax, the FP8 GEMM. */
#include "core/ops_check.h"
#include "core/ops_nn.h"

/* A high-precision input: f32 or bf16, at least 1-D. */
static tg_status hp_input(const char *op, const char *name, const tg_tensor *t)
{
    char x[96];
    TG_TRY(need(op, name, t));
    if (!float_dtype(t->dtype) || t->ndim < 1)
        return tg_error(TG_EINVAL, "%s: %s %s must be an f32 or bf16 tensor", op, name, desc(t, x, sizeof x));
    return TG_OK;
}

/* An FP8 tensor (E4M3 or E5M2) on ref's device. */
static tg_status fp8_tensor(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *t)
{
    char x[96];
    TG_TRY(need(op, name, t));
    TG_TRY(on_dev(op, rn, ref, name, t));
    if (!tg_dtype_is_fp8(t->dtype))
        return tg_error(TG_EINVAL, "%s: %s %s must be an e4m3 or e5m2 tensor", op, name, desc(t, x, sizeof x));
    return TG_OK;
}

/* An optional f32 (1) scale, scale_inv or amax on ref's device. */
static tg_status scalar_opt(const char *op, const char *rn, const tg_tensor *ref, const char *name, const tg_tensor *t)
{
    return t ? stat(op, rn, ref, name, t, 1) : TG_OK;
}

static tg_status flags_ok(const char *op, int flags)
{
    if (flags & ~TG_FP8_AMAX_ACCUMULATE) return tg_error(TG_EINVAL, "%s: unknown flags 0x%x", op, (unsigned)flags);
    return TG_OK;
}

/* The shared part of cast and cast_transpose; y or yt may be NULL. */
static tg_status cast_checks(const char *op, tg_tensor *y, tg_tensor *yt, const tg_tensor *x, const tg_tensor *scale,
                             tg_tensor *amax, tg_tensor *scale_inv, int flags)
{
    char a[96], b[96];
    TG_TRY(hp_input(op, "x", x));
    TG_TRY(flags_ok(op, flags));
    if (!y && !yt) return tg_error(TG_EINVAL, "%s: y and y_t are both NULL", op);
    if (y) {
        TG_TRY(fp8_tensor(op, "x", x, "y", y));
        if (tg_tensor_numel(y) != tg_tensor_numel(x))
            return tg_error(TG_EINVAL, "%s: x %s vs y %s (same number of elements expected)", op, desc(x, a, sizeof a),
                            desc(y, b, sizeof b));
    }
    if (yt) {
        TG_TRY(fp8_tensor(op, "x", x, "y_t", yt));
        if (yt->ndim != 2 || yt->shape[0] != cols(x) || yt->shape[1] != rows(x) || (y && y->dtype != yt->dtype))
            return tg_error(TG_EINVAL, "%s: x %s vs y_t %s (y_t [%lld,%lld] %s expected: x's last dimension first)", op,
                            desc(x, a, sizeof a), desc(yt, b, sizeof b), (long long)cols(x), (long long)rows(x),
                            tg_dtype_name(y ? y->dtype : yt->dtype));
    }
    TG_TRY(scalar_opt(op, "x", x, "scale", scale));
    TG_TRY(scalar_opt(op, "x", x, "amax", amax));
    TG_TRY(scalar_opt(op, "x", x, "scale_inv", scale_inv));
    const tg_tensor *outs[] = {y, yt, amax, scale_inv};
    const char *names[] = {"y", "y_t", "amax", "scale_inv"};
    for (int i = 0; i < 4; i++) {
        TG_TRY(no_overlap(op, "x", x, names[i], outs[i]));
        TG_TRY(no_overlap(op, "scale", scale, names[i], outs[i]));
        for (int j = i + 1; j < 4; j++) TG_TRY(no_overlap(op, names[i], outs[i], names[j], outs[j]));
    }
    return TG_OK;
}

/* The gradient forms' extra inputs: gelu_x like x, dbias_part f32 (tg_fp8_dbias_chunks(rows), cols); neither
 * may share memory with the outputs. */
static tg_status dbias_checks(const char *op, tg_tensor *y, tg_tensor *yt, const tg_tensor *x, const tg_tensor *gelu_x,
                              tg_tensor *amax, tg_tensor *scale_inv, tg_tensor *part)
{
    char a[96], b[96];
    const tg_tensor *outs[] = {y, yt, amax, scale_inv};
    const char *names[] = {"y", "y_t", "amax", "scale_inv"};
    if (gelu_x) {
        TG_TRY(like(op, "dy", x, "gelu_x", gelu_x));
        for (int i = 0; i < 4; i++) TG_TRY(no_overlap(op, "gelu_x", gelu_x, names[i], outs[i]));
    }
    if (!part) return TG_OK;
    TG_TRY(on_dev(op, "dy", x, "dbias_part", part));
    const int64_t p = tg_fp8_dbias_chunks(rows(x));
    if (part->dtype != TG_F32 || part->ndim != 2 || part->shape[0] != p || part->shape[1] != cols(x))
        return tg_error(TG_EINVAL, "%s: dy %s vs dbias_part %s (dbias_part [%lld,%lld] f32 expected: tg_fp8_dbias_chunks "
                        "rows of dy's last dimension)", op, desc(x, a, sizeof a), desc(part, b, sizeof b), (long long)p,
                        (long long)cols(x));
    TG_TRY(no_overlap(op, "dy", x, "dbias_part", part));
    TG_TRY(no_overlap(op, "gelu_x", gelu_x, "dbias_part", part));
    for (int i = 0; i < 4; i++) TG_TRY(no_overlap(op, names[i], outs[i], "dbias_part", part));
    return TG_OK;
}

static tg_status cast_issue(const char *op, tg_tensor *y, tg_tensor *yt, const tg_tensor *x, const tg_tensor *gelu_x,
                            const tg_tensor *scale, tg_tensor *amax, tg_tensor *scale_inv, tg_tensor *part, int flags)
{
    tg_stream *s;
    TG_TRY(stream_for(op, "x", x, &s));
    tg_status st = cast_checks(op, y, yt, x, scale, amax, scale_inv, flags);
    if (st == TG_OK) st = dbias_checks(op, y, yt, x, gelu_x, amax, scale_inv, part);
    struct tg_fp8_cast_args a = {0};
    if (st == TG_OK)
        a = (struct tg_fp8_cast_args){.x = tg_tensor_data(x), .x_dt = x->dtype, .y = y ? tg_tensor_data(y) : NULL,
                                      .yt = yt ? tg_tensor_data(yt) : NULL, .y_dt = y ? y->dtype : yt->dtype,
                                      .rows = rows(x), .cols = cols(x), .scale = scale ? tg_tensor_data(scale) : NULL,
                                      .amax = amax ? tg_tensor_data(amax) : NULL,
                                      .scale_inv = scale_inv ? tg_tensor_data(scale_inv) : NULL,
                                      .accumulate = flags & TG_FP8_AMAX_ACCUMULATE,
                                      .gelu_x = gelu_x ? tg_tensor_data(gelu_x) : NULL,
                                      .dbias_part = part ? tg_tensor_data(part) : NULL,
                                      .dbias_chunks = part ? part->shape[0] : 0};
    ISSUE(s, op, fp8_cast, &a, st);
}

int64_t tg_fp8_dbias_chunks(int64_t rows)
{
    const int64_t tiles = rows / 64 + (rows % 64 > 0); /* (rows + 63 would wrap near INT64_MAX) */
    return tiles < 1 ? 1 : tiles > 1024 ? 1024 : tiles;
}

tg_status tg_fp8_cast_transpose_dbias(tg_tensor *y, tg_tensor *y_t, const tg_tensor *dy, const tg_tensor *gelu_x,
                                      const tg_tensor *scale, tg_tensor *amax, tg_tensor *scale_inv,
                                      tg_tensor *dbias_part, int flags)
{
    return cast_issue("fp8_cast_transpose_dbias", y, y_t, dy, gelu_x, scale, amax, scale_inv, dbias_part, flags);
}

tg_status tg_fp8_dbias_finish(tg_tensor *dbias, const tg_tensor *part, double accumulate)
{
    const char *op = "fp8_dbias_finish";
    char a[96], b[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "dbias_part", part, &s));
    tg_status st = need(op, "dbias", dbias);
    if (st == TG_OK) st = on_dev(op, "dbias_part", part, "dbias", dbias);
    if (st == TG_OK && (part->dtype != TG_F32 || part->ndim != 2 || dbias->ndim != 1 || !float_dtype(dbias->dtype) ||
                        dbias->shape[0] != part->shape[1]))
        st = tg_error(TG_EINVAL, "%s: dbias_part %s vs dbias %s (dbias_part [chunks,c] f32 and dbias [c] f32 or bf16 "
                      "expected)", op, desc(part, a, sizeof a), desc(dbias, b, sizeof b));
    if (st == TG_OK) st = finite_arg(op, "accumulate", accumulate);
    if (st == TG_OK) st = no_overlap(op, "dbias_part", part, "dbias", dbias);
    struct tg_fp8_dbias_args ar = {0};
    if (st == TG_OK)
        ar = (struct tg_fp8_dbias_args){.part = tg_tensor_data(part), .chunks = part->shape[0], .c = part->shape[1],
                                        .dbias = tg_tensor_data(dbias), .dw_dt = dbias->dtype,
                                        .accumulate = (float)accumulate};
    ISSUE(s, op, fp8_dbias, &ar, st);
}

tg_status tg_fp8_cast(tg_tensor *y, const tg_tensor *x, const tg_tensor *scale, tg_tensor *amax, tg_tensor *scale_inv,
                      int flags)
{
    if (!y) return tg_error(TG_EINVAL, "fp8_cast: y is NULL");
    return cast_issue("fp8_cast", y, NULL, x, NULL, scale, amax, scale_inv, NULL, flags);
}

tg_status tg_fp8_cast_transpose(tg_tensor *y, tg_tensor *y_t, const tg_tensor *x, const tg_tensor *scale,
                                tg_tensor *amax, tg_tensor *scale_inv, int flags)
{
    return cast_issue("fp8_cast_transpose", y, y_t, x, NULL, scale, amax, scale_inv, NULL, flags);
}

tg_status tg_fp8_transpose(tg_tensor *y_t, const tg_tensor *x)
{
    const char *op = "fp8_transpose";
    char a[96], b[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "x", x, &s));
    tg_status st = fp8_tensor(op, "x", x, "x", x);
    if (st == TG_OK) st = fp8_tensor(op, "x", x, "y_t", y_t);
    if (st == TG_OK && (x->ndim < 1 || y_t->ndim != 2 || y_t->shape[0] != cols(x) || y_t->shape[1] != rows(x) ||
                        y_t->dtype != x->dtype))
        st = tg_error(TG_EINVAL, "%s: x %s vs y_t %s (y_t [%lld,%lld] %s expected: x's last dimension first)", op,
                      desc(x, a, sizeof a), desc(y_t, b, sizeof b), (long long)cols(x), (long long)rows(x),
                      tg_dtype_name(x->dtype));
    if (st == TG_OK) st = no_overlap(op, "x", x, "y_t", y_t);
    struct tg_fp8_transpose_args ar = {0};
    if (st == TG_OK)
        ar = (struct tg_fp8_transpose_args){.x = tg_tensor_data(x), .yt = tg_tensor_data(y_t), .rows = rows(x),
                                            .cols = cols(x)};
    ISSUE(s, op, fp8_transpose, &ar, st);
}

tg_status tg_fp8_dequantize(tg_tensor *y, const tg_tensor *x, const tg_tensor *scale_inv)
{
    const char *op = "fp8_dequantize";
    char a[96], b[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "x", x, &s));
    tg_status st = fp8_tensor(op, "x", x, "x", x);
    if (st == TG_OK) st = hp_input(op, "y", y);
    if (st == TG_OK) st = on_dev(op, "x", x, "y", y);
    if (st == TG_OK && tg_tensor_numel(y) != tg_tensor_numel(x))
        st = tg_error(TG_EINVAL, "%s: x %s vs y %s (same number of elements expected)", op, desc(x, a, sizeof a),
                      desc(y, b, sizeof b));
    if (st == TG_OK) st = scalar_opt(op, "x", x, "scale_inv", scale_inv);
    if (st == TG_OK) st = no_overlap(op, "x", x, "y", y);
    if (st == TG_OK) st = no_overlap(op, "scale_inv", scale_inv, "y", y);
    struct tg_fp8_dequantize_args ar = {0};
    if (st == TG_OK)
        ar = (struct tg_fp8_dequantize_args){.x = tg_tensor_data(x), .x_dt = x->dtype, .y = tg_tensor_data(y),
                                             .y_dt = y->dtype, .n = tg_tensor_numel(x),
                                             .scale_inv = scale_inv ? tg_tensor_data(scale_inv) : NULL};
    ISSUE(s, op, fp8_dequantize, &ar, st);
}

tg_status tg_fp8_amax(tg_tensor *amax, const tg_tensor *x, int flags)
{
    const char *op = "fp8_amax";
    tg_stream *s;
    TG_TRY(stream_for(op, "x", x, &s));
    tg_status st = hp_input(op, "x", x);
    if (st == TG_OK) st = flags_ok(op, flags);
    if (st == TG_OK) st = stat(op, "x", x, "amax", amax, 1);
    if (st == TG_OK) st = no_overlap(op, "x", x, "amax", amax);
    struct tg_fp8_amax_args ar = {0};
    if (st == TG_OK)
        ar = (struct tg_fp8_amax_args){.x = tg_tensor_data(x), .dt = x->dtype, .n = tg_tensor_numel(x),
                                       .amax = tg_tensor_data(amax), .accumulate = flags & TG_FP8_AMAX_ACCUMULATE};
    ISSUE(s, op, fp8_amax, &ar, st);
}

static tg_status gemm_checks(tg_tensor *d, const tg_tensor *a, int trans_a, const tg_tensor *a_si, const tg_tensor *b,
                             int trans_b, const tg_tensor *b_si, double alpha, double beta, tg_gemm_epilogue epi,
                             const tg_tensor *bias, tg_tensor *aux, tg_tensor *amax_d, int flags)
{
    const char *op = "fp8_gemm";
    char x[96], y[96], z[96];
    TG_TRY(need(op, "D", d));
    TG_TRY(fp8_tensor(op, "D", d, "A", a));
    TG_TRY(fp8_tensor(op, "D", d, "B", b));
    TG_TRY(flags_ok(op, flags));
    TG_TRY(finite_arg(op, "alpha", alpha));
    TG_TRY(finite_arg(op, "beta", beta));
    if (trans_a || !trans_b)
        return tg_error(TG_EINVAL,
                        "%s: A %s (trans_a = %d) and B %s (trans_b = %d): FP8 GEMMs take A (m,k) and B (n,k), both "
                        "K-major (trans_a = 0, trans_b = 1); tg_fp8_cast_transpose makes the transposed copies",
                        op, desc(a, x, sizeof x), trans_a, desc(b, y, sizeof y), trans_b);
    if (a->dtype == TG_E5M2 && b->dtype == TG_E5M2)
        return tg_error(TG_EINVAL, "%s: A %s and B %s are both e5m2 (at most one operand may be e5m2)", op,
                        desc(a, x, sizeof x), desc(b, y, sizeof y));
    if (d->dtype != TG_F32 && d->dtype != TG_BF16)
        return tg_error(TG_EINVAL, "%s: D %s must be f32 or bf16", op, desc(d, x, sizeof x));
    if (a->ndim != 2 || b->ndim != 2 || d->ndim != 2 || a->shape[1] != b->shape[1] || d->shape[0] != a->shape[0] ||
        d->shape[1] != b->shape[0])
        return tg_error(TG_EINVAL, "%s: shapes A %s, B %s, D %s (2-D A (m,k), B (n,k), D (m,n) expected)", op,
                        desc(a, x, sizeof x), desc(b, y, sizeof y), desc(d, z, sizeof z));
    int64_t n = d->shape[1];
    if (epi != TG_EPI_NONE && epi != TG_EPI_BIAS && epi != TG_EPI_BIAS_GELU)
        return tg_error(TG_EINVAL, "%s: epilogue %d is not available for FP8 GEMMs (none, bias or bias_gelu)", op, (int)epi);
    if (epi == TG_EPI_NONE && bias)
        return tg_error(TG_EINVAL, "%s: bias %s given without a bias epilogue", op, desc(bias, x, sizeof x));
    if (epi != TG_EPI_NONE) TG_TRY(vec(op, "D", d, "bias", bias, n, TG_BF16));
    if (aux) {
        if (epi != TG_EPI_BIAS_GELU)
            return tg_error(TG_EINVAL, "%s: aux %s given without the bias_gelu epilogue", op, desc(aux, x, sizeof x));
        TG_TRY(like(op, "D", d, "aux", aux));
        TG_TRY(no_overlap(op, "D", d, "aux", aux));
    }
    TG_TRY(scalar_opt(op, "D", d, "a_scale_inv", a_si));
    TG_TRY(scalar_opt(op, "D", d, "b_scale_inv", b_si));
    TG_TRY(scalar_opt(op, "D", d, "amax_d", amax_d));
    TG_TRY(no_overlap(op, "D", d, "A", a));
    TG_TRY(no_overlap(op, "D", d, "B", b));
    TG_TRY(no_overlap(op, "D", d, "amax_d", amax_d));
    TG_TRY(no_overlap(op, "aux", aux, "amax_d", amax_d));
    return TG_OK;
}

tg_status tg_fp8_gemm(tg_tensor *d, const tg_tensor *a, int trans_a, const tg_tensor *a_scale_inv, const tg_tensor *b,
                      int trans_b, const tg_tensor *b_scale_inv, double alpha, double beta, tg_gemm_epilogue epi,
                      const tg_tensor *bias, tg_tensor *aux, tg_tensor *amax_d, int flags)
{
    return tg_fp8_gemm_in(d, NULL, a, trans_a, a_scale_inv, b, trans_b, b_scale_inv, alpha, beta, epi, bias, aux, amax_d,
                          flags);
}

tg_status tg_fp8_gemm_in(tg_tensor *d, const tg_tensor *c, const tg_tensor *a, int trans_a, const tg_tensor *a_scale_inv,
                         const tg_tensor *b, int trans_b, const tg_tensor *b_scale_inv, double alpha, double beta,
                         tg_gemm_epilogue epi, const tg_tensor *bias, tg_tensor *aux, tg_tensor *amax_d, int flags)
{
    tg_stream *s;
    TG_TRY(stream_for("fp8_gemm", "D", d, &s));
    tg_status st = gemm_checks(d, a, trans_a, a_scale_inv, b, trans_b, b_scale_inv, alpha, beta, epi, bias, aux, amax_d,
                               flags);
    if (st == TG_OK && c) st = like("fp8_gemm", "D", d, "C", c);
    if (st == TG_OK && c) st = no_overlap("fp8_gemm", "C", c, "D", d);
    if (st == TG_OK && c) st = no_overlap("fp8_gemm", "C", c, "aux", aux);
    struct tg_fp8_gemm_args g = {0};
    if (st == TG_OK)
        g = (struct tg_fp8_gemm_args){
            .m = d->shape[0], .n = d->shape[1], .k = a->shape[1],
            .a = tg_tensor_data(a), .a_dt = a->dtype, .b = tg_tensor_data(b), .b_dt = b->dtype,
            .a_scale_inv = a_scale_inv ? tg_tensor_data(a_scale_inv) : NULL,
            .b_scale_inv = b_scale_inv ? tg_tensor_data(b_scale_inv) : NULL,
            .d = tg_tensor_data(d), .d_dt = d->dtype, .c = c ? tg_tensor_data(c) : NULL, .alpha = (float)alpha, .beta = (float)beta, .epi = epi,
            .bias = bias ? tg_tensor_data(bias) : NULL, .aux = aux ? tg_tensor_data(aux) : NULL,
            .amax_d = amax_d ? tg_tensor_data(amax_d) : NULL, .accumulate = flags & TG_FP8_AMAX_ACCUMULATE};
    ISSUE(s, "fp8_gemm", fp8_gemm, &g, st);
}

/* ------------------------------------------------------------------ producers that write FP8 */
tg_status tg_fp8_cast_transpose_gelu(tg_tensor *y, tg_tensor *y_t, const tg_tensor *h, const tg_tensor *scale,
                                     tg_tensor *amax, tg_tensor *scale_inv, int flags)
{
    const char *op = "fp8_cast_transpose_gelu";
    tg_stream *s;
    TG_TRY(stream_for(op, "h", h, &s));
    tg_status st = cast_checks(op, y, y_t, h, scale, amax, scale_inv, flags);
    struct tg_fp8_cast_args a = {0};
    if (st == TG_OK)
        a = (struct tg_fp8_cast_args){.x = tg_tensor_data(h), .x_dt = h->dtype, .y = y ? tg_tensor_data(y) : NULL,
                                      .yt = y_t ? tg_tensor_data(y_t) : NULL, .y_dt = y ? y->dtype : y_t->dtype,
                                      .rows = rows(h), .cols = cols(h), .scale = scale ? tg_tensor_data(scale) : NULL,
                                      .amax = amax ? tg_tensor_data(amax) : NULL,
                                      .scale_inv = scale_inv ? tg_tensor_data(scale_inv) : NULL,
                                      .accumulate = flags & TG_FP8_AMAX_ACCUMULATE};
    ISSUE(s, op, fp8_cast_gelu, &a, st);
}

tg_status tg_layernorm_forward_fp8(tg_tensor *y8, tg_tensor *mean, tg_tensor *rstd, const tg_tensor *x,
                                   const tg_tensor *gamma, const tg_tensor *beta, double eps, const tg_tensor *scale,
                                   tg_tensor *amax, tg_tensor *scale_inv, int flags)
{
    const char *op = "layernorm_forward_fp8";
    char a[96], b[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "x", x, &s));
    tg_status st = activation(op, "x", x);
    if (st == TG_OK) st = flags_ok(op, flags);
    if (st == TG_OK) st = fp8_tensor(op, "x", x, "y", y8);
    if (st == TG_OK && (y8->ndim < 1 || rows(y8) != rows(x) || cols(y8) != cols(x)))
        st = tg_error(TG_EINVAL, "%s: x %s vs y %s (the same rows and last dimension expected)", op, desc(x, a, sizeof a),
                      desc(y8, b, sizeof b));
    if (st == TG_OK) st = vec(op, "x", x, "gamma", gamma, cols(x), x->dtype);
    if (st == TG_OK && beta) st = vec(op, "x", x, "beta", beta, cols(x), x->dtype);
    if (st == TG_OK) st = stat(op, "x", x, "mean", mean, rows(x));
    if (st == TG_OK) st = stat(op, "x", x, "rstd", rstd, rows(x));
    if (st == TG_OK && (!(eps >= 0) || !isfinite(eps)))
        st = tg_error(TG_EINVAL, "%s: eps = %g must be finite and >= 0", op, eps);
    if (st == TG_OK) st = scalar_opt(op, "x", x, "scale", scale);
    if (st == TG_OK) st = scalar_opt(op, "x", x, "amax", amax);
    if (st == TG_OK) st = scalar_opt(op, "x", x, "scale_inv", scale_inv);
    const tg_tensor *outs[] = {y8, mean, rstd, amax, scale_inv};
    const char *names[] = {"y", "mean", "rstd", "amax", "scale_inv"};
    for (int i = 0; i < 5 && st == TG_OK; i++) {
        st = no_overlap(op, "x", x, names[i], outs[i]);
        if (st == TG_OK) st = no_overlap(op, "scale", scale, names[i], outs[i]);
        for (int j = i + 1; j < 5 && st == TG_OK; j++) st = no_overlap(op, names[i], outs[i], names[j], outs[j]);
    }
    struct tg_layernorm_fp8_args ar = {0};
    if (st == TG_OK)
        ar = (struct tg_layernorm_fp8_args){
            .ln = {.mean = tg_tensor_data(mean), .rstd = tg_tensor_data(rstd), .x = tg_tensor_data(x),
                   .gamma = tg_tensor_data(gamma), .beta = beta ? tg_tensor_data(beta) : NULL, .dt = x->dtype,
                   .n = rows(x), .c = cols(x), .eps = (float)eps},
            .y8 = tg_tensor_data(y8), .y8_dt = y8->dtype, .scale = scale ? tg_tensor_data(scale) : NULL,
            .amax = amax ? tg_tensor_data(amax) : NULL, .scale_inv = scale_inv ? tg_tensor_data(scale_inv) : NULL,
            .accumulate = flags & TG_FP8_AMAX_ACCUMULATE};
    ISSUE(s, op, layernorm_forward_fp8, &ar, st);
}
