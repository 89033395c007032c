/* fp8-gemm-equals-f64-product-of-dequantized.c — the CPU FP8 GEMM (E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3; f32
 * and bf16 D) equals the f64 product of the dequantized inputs, times alpha and both scale_invs, to the rounding
 * of D; beta accumulates, on D or on a separate C; the bias and bias+GELU epilogues (with aux) and amax_d follow their formulas; a replay
 * reads the scale_invs of its time; bad layouts, dtypes and shapes are refused naming them. */
#include "core/core.h"
#include "core/ops_nn.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const tg_device cpu = {TG_CPU, 0};

static tg_tensor *t_new(tg_dtype dt, int64_t r, int64_t c)
{
    int64_t shape[2] = {r, c};
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, c ? 2 : 1, shape, cpu, &t) != TG_OK) bail_out("tensor_new: %s", tg_last_error());
    return t;
}

static tg_tensor *scalar(float v)
{
    tg_tensor *t = t_new(TG_F32, 1, 0);
    tg_tensor_write(t, &v, sizeof v);
    return t;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* random finite codes (no NaN / Inf) of dt */
static tg_tensor *random_fp8(tg_dtype dt, int64_t r, int64_t c, uint8_t *codes)
{
    for (int64_t i = 0; i < r * c; i++) {
        uint8_t q;
        do q = (uint8_t)next();
        while (isnan(tg_fp8_to_f32(dt, q)) || isinf(tg_fp8_to_f32(dt, q)) || fabsf(tg_fp8_to_f32(dt, q)) > 64.0f);
        codes[i] = q;
    }
    tg_tensor *t = t_new(dt, r, c);
    tg_tensor_write(t, codes, (size_t)(r * c));
    return t;
}

/* the f64 product of the dequantized inputs, element (i, j) */
static double ref_dot(tg_dtype adt, const uint8_t *a, tg_dtype bdt, const uint8_t *b, int64_t k, int64_t i, int64_t j)
{
    long double s = 0; /* a different order and a wider sum than the kernel's */
    for (int64_t p = k - 1; p >= 0; p--)
        s += (long double)tg_fp8_to_f32(adt, a[i * k + p]) * (long double)tg_fp8_to_f32(bdt, b[j * k + p]);
    return (double)s;
}

static float gelu(float u) { return 0.5f * u * (1.0f + tanhf(0.7978845608028654f * (u + 0.044715f * u * u * u))); }

static void product_case(tg_dtype adt, tg_dtype bdt, tg_dtype ddt, int64_t m, int64_t n, int64_t k)
{
    uint8_t *ac = malloc((size_t)(m * k)), *bc = malloc((size_t)(n * k));
    tg_tensor *a = random_fp8(adt, m, k, ac), *b = random_fp8(bdt, n, k, bc), *d = t_new(ddt, m, n);
    tg_tensor *sa = scalar(0.375f), *sb = scalar(3.0f), *amax = scalar(0.0f);
    double alpha = 0.5;
    tg_status st = tg_fp8_gemm(d, a, 0, sa, b, 1, sb, alpha, 0.0, TG_EPI_NONE, NULL, NULL, amax, 0);
    double *dv = malloc(sizeof(double) * (size_t)(m * n));
    tg_tensor_read_f64(d, dv, (size_t)(m * n));
    double worst = 0, mx = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double r = alpha * 0.375 * 3.0 * ref_dot(adt, ac, bdt, bc, k, i, j);
            double ulp = ddt == TG_F32 ? ldexp(1, -24) : ldexp(1, -8); /* half an ulp, relative */
            double err = fabs(dv[i * n + j] - r) / (fabs(r) * ulp + 1e-30);
            if (err > worst) worst = err;
            if (fabs(dv[i * n + j]) > mx) mx = fabs(dv[i * n + j]);
        }
    ok(st == TG_OK && worst <= 1.0 + 1e-9,
       "%s x %s -> %s, m=%lld n=%lld k=%lld: D equals alpha * sa * sb * the f64 product of the dequantized inputs "
       "within half an ulp of D (worst %.3f half-ulps)", tg_dtype_name(adt), tg_dtype_name(bdt), tg_dtype_name(ddt),
       (long long)m, (long long)n, (long long)k, worst);
    float am;
    tg_tensor_read(amax, &am, sizeof am);
    ok((double)am == mx, "... amax_d = max|D| as stored (%g)", mx);
    tg_tensor *all[] = {a, b, d, sa, sb, amax};
    for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
    free(ac), free(bc), free(dv);
}

static void epilogue_and_beta(void)
{
    int64_t m = 5, n = 7, k = 19;
    uint8_t ac[5 * 19], bc[7 * 19];
    tg_tensor *a = random_fp8(TG_E4M3, m, k, ac), *b = random_fp8(TG_E4M3, n, k, bc);
    tg_tensor *d = t_new(TG_F32, m, n), *aux = t_new(TG_F32, m, n), *bias = t_new(TG_BF16, n, 0);
    double bv[7] = {1, -2, 0.5, 3, -0.25, 0, 7}, dv[35], xv[35], c0[35];
    tg_tensor_write_f64(bias, bv, 7);
    for (int i = 0; i < 35; i++) c0[i] = (double)(i % 5) - 2.0;
    tg_tensor_write_f64(d, c0, 35);
    tg_tensor *amax = scalar(100.0f);
    ok(tg_fp8_gemm(d, a, 0, NULL, b, 1, NULL, 1.0, 2.0, TG_EPI_BIAS, bias, NULL, amax, TG_FP8_AMAX_ACCUMULATE) == TG_OK,
       "bias epilogue with beta = 2 runs");
    tg_tensor_read_f64(d, dv, 35);
    int bad = 0;
    double mx = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float want = (float)(ref_dot(TG_E4M3, ac, TG_E4M3, bc, k, i, j) + 2.0 * c0[i * n + j] + bv[j]);
            bad += dv[i * n + j] != (double)want;
            if (fabs(dv[i * n + j]) > mx) mx = fabs(dv[i * n + j]);
        }
    is_int(bad, 0, "bias: D = product + beta * D + bias[j], rounded once");
    float am;
    tg_tensor_read(amax, &am, sizeof am);
    ok(am == (float)(mx > 100 ? mx : 100), "amax_d accumulates into the old value (100 vs max|D| %g)", mx);

    /* C apart from D (tg_fp8_gemm_in): the same bits as beta on a D holding C, C left as it was */
    tg_tensor *cin = t_new(TG_F32, m, n), *d2 = t_new(TG_F32, m, n);
    double cv[35];
    tg_tensor_write_f64(cin, c0, 35);
    ok(tg_fp8_gemm_in(d2, cin, a, 0, NULL, b, 1, NULL, 1.0, 2.0, TG_EPI_BIAS, bias, NULL, NULL, 0) == TG_OK,
       "fp8_gemm_in with a separate C runs");
    tg_tensor_read_f64(d2, xv, 35);
    tg_tensor_read_f64(cin, cv, 35);
    bad = 0;
    for (int i = 0; i < 35; i++) bad += xv[i] != dv[i] || cv[i] != c0[i];
    is_int(bad, 0, "fp8_gemm_in: D = product + beta * C + bias, equal to beta on a D holding C; C unchanged");
    ok(tg_fp8_gemm_in(d2, d2, a, 0, NULL, b, 1, NULL, 1.0, 1.0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL,
       "a C sharing D's memory is refused (beta on D is that)");
    ok(tg_fp8_gemm_in(d2, bias, a, 0, NULL, b, 1, NULL, 1.0, 1.0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL,
       "a C of another shape is refused");
    tg_tensor_free(cin);
    tg_tensor_free(d2);

    ok(tg_fp8_gemm(d, a, 0, NULL, b, 1, NULL, 1.0, 0.0, TG_EPI_BIAS_GELU, bias, aux, NULL, 0) == TG_OK,
       "bias_gelu epilogue with aux runs");
    tg_tensor_read_f64(d, dv, 35);
    tg_tensor_read_f64(aux, xv, 35);
    bad = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float pre = (float)(ref_dot(TG_E4M3, ac, TG_E4M3, bc, k, i, j) + bv[j]);
            bad += xv[i * n + j] != (double)pre || dv[i * n + j] != (double)gelu(pre);
        }
    is_int(bad, 0, "bias_gelu: aux = product + bias, D = gelu_tanh(aux)");

    /* a replay reads the scale_invs of its time */
    tg_tensor *sa = scalar(1.0f);
    tg_stream *s = tg_stream_current(cpu);
    tg_graph *g = NULL;
    tg_stream_begin_capture(s);
    tg_fp8_gemm(d, a, 0, sa, b, 1, NULL, 1.0, 0.0, TG_EPI_NONE, NULL, NULL, NULL, 0);
    ok(tg_stream_end_capture(s, &g) == TG_OK, "fp8_gemm captures");
    float four = 4.0f;
    tg_tensor_write(sa, &four, sizeof four);
    tg_graph_replay(g, s);
    tg_tensor_read_f64(d, dv, 35);
    ok(dv[8] == (double)(float)(4.0 * ref_dot(TG_E4M3, ac, TG_E4M3, bc, k, 1, 1)), "the replay used a_scale_inv = 4, written after capture");
    tg_graph_free(g);

    /* refusals */
    tg_tensor *at = t_new(TG_E4M3, k, m), *b5 = t_new(TG_E5M2, n, k), *a5 = t_new(TG_E5M2, m, k), *bf = t_new(TG_BF16, m, k);
    tg_tensor *d8 = t_new(TG_E4M3, m, n), *dn = t_new(TG_F32, m, n + 1), *bias32 = t_new(TG_F32, n, 0);
    ok(tg_fp8_gemm(d, at, 1, NULL, b, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL, "trans_a = 1 is refused");
    like(tg_last_error(), "FP8 GEMMs take A (m,k) and B (n,k), both K-major (trans_a = 0, trans_b = 1)", "... saying which layouts are taken");
    like(tg_last_error(), "A [19,5] e4m3", "... naming A");
    ok(tg_fp8_gemm(d, a, 0, NULL, b, 0, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL, "trans_b = 0 is refused");
    ok(tg_fp8_gemm(d, a5, 0, NULL, b5, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL, "e5m2 x e5m2 is refused");
    like(tg_last_error(), "both e5m2", "... saying so");
    ok(tg_fp8_gemm(d, a5, 0, NULL, b, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_OK, "e5m2 x e4m3 runs");
    ok(tg_fp8_gemm(d, bf, 0, NULL, b, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL, "a bf16 A is refused");
    like(tg_last_error(), "fp8_gemm: A [5,19] bf16 must be an e4m3 or e5m2 tensor", "... naming A");
    ok(tg_fp8_gemm(d8, a, 0, NULL, b, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL, "an e4m3 D is refused");
    like(tg_last_error(), "D [5,7] e4m3 must be f32 or bf16", "... naming D");
    ok(tg_fp8_gemm(dn, a, 0, NULL, b, 1, NULL, 1, 0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL, "a D of the wrong shape is refused");
    like(tg_last_error(), "shapes A [5,19] e4m3, B [7,19] e4m3, D [5,8] f32", "... naming all three shapes");
    ok(tg_fp8_gemm(d, a, 0, NULL, b, 1, NULL, 1, 0, TG_EPI_BIAS, bias32, NULL, NULL, 0) == TG_EINVAL, "an f32 bias is refused");
    like(tg_last_error(), "bf16 expected", "... bf16 is expected");
    ok(tg_fp8_gemm(d, a, 0, NULL, b, 1, NULL, 1, 0, TG_EPI_BGRAD, NULL, NULL, NULL, 0) == TG_EINVAL, "the bgrad epilogue is refused");
    like(tg_last_error(), "not available for FP8 GEMMs", "... saying so");
    ok(tg_fp8_gemm(d, a, 0, NULL, b, 1, NULL, 1, 0, TG_EPI_BIAS, bias, aux, NULL, 0) == TG_EINVAL, "aux without bias_gelu is refused");
    ok(tg_fp8_gemm(d, a, 0, NULL, b, 1, NULL, NAN, 0, TG_EPI_NONE, NULL, NULL, NULL, 0) == TG_EINVAL, "a NaN alpha is refused");

    tg_tensor *all[] = {a, b, d, aux, bias, amax, sa, at, b5, a5, bf, d8, dn, bias32};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
}

int main(void)
{
    product_case(TG_E4M3, TG_E4M3, TG_F32, 13, 11, 37);
    product_case(TG_E4M3, TG_E5M2, TG_F32, 8, 16, 64);
    product_case(TG_E5M2, TG_E4M3, TG_F32, 3, 5, 129);
    product_case(TG_E4M3, TG_E4M3, TG_BF16, 17, 9, 31);
    product_case(TG_E4M3, TG_E5M2, TG_BF16, 1, 1, 1);
    epilogue_and_beta();
    return done_testing();
}
