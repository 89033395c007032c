/* fp8-cast-rounds-to-nearest-even-and-saturates.c — f32 -> E4M3 / E5M2: every code decodes to its hand value,
 * grid points round-trip, midpoints tie to even, values beyond the largest finite one saturate (infinities too),
 * NaN stays NaN, subnormals are exact; checked against an independent nearest-code search on a dense sweep. The
 * tensor ops: cast with scale, amax (written, accumulated, NaN), scale_inv, cast_transpose, transpose,
 * dequantize, amax, fill (values past the max refused) and copy casts (saturating), a replay reading the scale
 * of its time, and the errors. */
#include "core/core.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const tg_device cpu = {TG_CPU, 0};

static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Hand formula of a code's value: (-1)^s 2^(E - bias) (1 + M / 2^mbits), subnormals 2^(1 - bias) M / 2^mbits. */
static double hand_value(tg_dtype dt, int code)
{
    int mbits = dt == TG_E4M3 ? 3 : 2, bias = dt == TG_E4M3 ? 7 : 15;
    int e = (code & 0x7f) >> mbits, m = code & ((1 << mbits) - 1);
    double v = e == 0 ? ldexp(m, 1 - bias - mbits) : ldexp(1.0 + (double)m / (1 << mbits), e - bias);
    return code & 0x80 ? -v : v;
}

static int is_nan_code(tg_dtype dt, int c)
{
    return dt == TG_E4M3 ? (c & 0x7f) == 0x7f : (c & 0x7c) == 0x7c && (c & 3) != 0;
}
static int is_inf_code(tg_dtype dt, int c) { return dt == TG_E5M2 && (c & 0x7f) == 0x7c; }

/* Independent reference: the finite code nearest to x (the even code on a tie), after clamping to +-max. */
static int ref_code(tg_dtype dt, float x)
{
    if (isnan(x)) return 0x7f;
    double mx = tg_fp8_max(dt), v = x;
    if (v > mx) v = mx;
    if (v < -mx) v = -mx;
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        if (is_nan_code(dt, c) || is_inf_code(dt, c)) continue;
        if ((c & 0x80) != (signbit(x) ? 0x80 : 0)) continue; /* the sign is kept (-0 included) */
        double d = fabs(hand_value(dt, c) - v);
        if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = c;
    }
    return best;
}

static void scalar_tests(tg_dtype dt)
{
    const char *nm = tg_dtype_name(dt);
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        float v = tg_fp8_to_f32(dt, (uint8_t)c);
        if (is_nan_code(dt, c)) bad += !isnan(v);
        else if (is_inf_code(dt, c)) bad += !(isinf(v) && (v < 0) == !!(c & 0x80));
        else bad += (double)v != hand_value(dt, c) || tg_fp8_from_f32(dt, v) != c; /* decode, and round-trip */
    }
    is_int(bad, 0, "%s: every code decodes to its hand-computed value and each finite value encodes back to its code", nm);

    /* midpoints of neighbouring positive codes tie to the even code; one f32 ulp away they go to the nearer */
    int ties = 0, near = 0, nmid = 0;
    for (int c = 0; c < 0x7f; c++) {
        if (is_nan_code(dt, c + 1) || is_inf_code(dt, c + 1)) break;
        double lo = hand_value(dt, c), hi = hand_value(dt, c + 1);
        float mid = (float)((lo + hi) / 2); /* exact in f32 */
        nmid++;
        ties += tg_fp8_from_f32(dt, mid) != ((c & 1) ? c + 1 : c);
        near += tg_fp8_from_f32(dt, nextafterf(mid, 0)) != c || tg_fp8_from_f32(dt, nextafterf(mid, INFINITY)) != c + 1;
        near += tg_fp8_from_f32(dt, -mid) != (((c & 1) ? c + 1 : c) | 0x80);
    }
    is_int(ties, 0, "%s: all %d midpoints between neighbouring codes round to the even code", nm, nmid);
    is_int(near, 0, "%s: one f32 ulp below / above a midpoint rounds down / up, negatives mirror", nm);

    /* a dense sweep against the independent nearest-code search: every 4099th f32 bit pattern, both signs */
    int diff = 0;
    uint32_t first = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += 4099) {
        float x = f_of((uint32_t)u);
        int got = tg_fp8_from_f32(dt, x), want = ref_code(dt, x);
        if (got != want && !diff++) first = (uint32_t)u;
    }
    if (!ok(diff == 0, "%s: a sweep of every 4099th f32 bit pattern (over a million) (all exponents, NaN, Inf) matches the nearest-code search", nm))
        diag("first difference at f32 bits 0x%08x: got 0x%02x, want 0x%02x", first, tg_fp8_from_f32(dt, f_of(first)),
             ref_code(dt, f_of(first)));
}

static tg_tensor *t_new(tg_dtype dt, int nd, const int64_t *shape)
{
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, nd, shape, cpu, &t) != TG_OK) bail_out("tensor_new: %s", tg_last_error());
    return t;
}

static tg_tensor *t_vals(tg_dtype dt, int nd, const int64_t *shape, const double *v)
{
    tg_tensor *t = t_new(dt, nd, shape);
    if (tg_tensor_write_f64(t, v, (size_t)tg_tensor_numel(t)) != TG_OK) bail_out("write: %s", tg_last_error());
    return t;
}

static tg_tensor *scalar(double v)
{
    int64_t one = 1;
    return t_vals(TG_F32, 1, &one, &v);
}

static float get1(const tg_tensor *t)
{
    float f = 0;
    if (tg_tensor_read(t, &f, sizeof f) != TG_OK) bail_out("read: %s", tg_last_error());
    return f;
}

static void set1(tg_tensor *t, float f)
{
    if (tg_tensor_write(t, &f, sizeof f) != TG_OK) bail_out("write: %s", tg_last_error());
}

static void tensor_tests(void)
{
    int64_t s4 = 4, s23[2] = {2, 3}, s32[2] = {3, 2};
    double xv[4] = {1.0, -3.0, 0.3, 1000.0};
    tg_tensor *x = t_vals(TG_F32, 1, &s4, xv), *y = t_new(TG_E4M3, 1, &s4);
    tg_tensor *scale = scalar(2.0), *amax = scalar(-1.0), *si = scalar(0.0);
    ok(tg_fp8_cast(y, x, scale, amax, si, 0) == TG_OK, "fp8_cast runs: %s", tg_last_error());
    uint8_t codes[4];
    tg_tensor_read(y, codes, 4);
    int want[4] = {tg_fp8_from_f32(TG_E4M3, 2.0f), tg_fp8_from_f32(TG_E4M3, -6.0f), tg_fp8_from_f32(TG_E4M3, 0.3f * 2.0f), 0x7e};
    ok(codes[0] == 0x40 && codes[1] == 0xcc && codes[2] == want[2] && codes[3] == 0x7e,
       "fp8_cast: y = e4m3(x * scale): 2 -> 0x40, -6 -> 0xcc, 0.6 -> 0x%02x, 2000 saturates to 448 (0x7e): got %02x %02x %02x %02x",
       want[2], codes[0], codes[1], codes[2], codes[3]);
    is_near(get1(amax), 1000.0, 0, "fp8_cast: amax = max|x| of the unscaled input, overwriting the old value");
    is_near(get1(si), 0.5, 0, "fp8_cast: scale_inv = 1 / scale");

    set1(amax, 5000.0f);
    tg_fp8_cast(y, x, scale, amax, NULL, TG_FP8_AMAX_ACCUMULATE);
    is_near(get1(amax), 5000.0, 0, "accumulating keeps a larger old amax");
    set1(amax, 10.0f);
    tg_fp8_cast(y, x, NULL, amax, NULL, TG_FP8_AMAX_ACCUMULATE);
    is_near(get1(amax), 1000.0, 0, "accumulating takes a larger new amax (and scale NULL casts unscaled)");
    tg_tensor_read(y, codes, 4);
    is_int(codes[3], 0x7e, "unscaled 1000 saturates to e4m3 448 too");

    double nv[4] = {1.0, NAN, INFINITY, -2.0};
    tg_tensor *xn = t_vals(TG_F32, 1, &s4, nv), *y5 = t_new(TG_E5M2, 1, &s4);
    tg_fp8_cast(y5, xn, NULL, amax, NULL, 0);
    tg_tensor_read(y5, codes, 4);
    ok(codes[0] == 0x3c && codes[1] == 0x7f && codes[2] == 0x7b && codes[3] == 0xc0,
       "e5m2 cast: 1 -> 0x3c, NaN -> 0x7f, Inf saturates to 57344 (0x7b), -2 -> 0xc0: got %02x %02x %02x %02x", codes[0],
       codes[1], codes[2], codes[3]);
    ok(isnan(get1(amax)), "a NaN in x makes the amax NaN (it wins over Inf)");

    /* bf16 input, cast_transpose of a 2x3 matrix */
    double mv[6] = {1, 2, 3, -4, 0.125, 5e-3};
    tg_tensor *xb = t_vals(TG_BF16, 2, s23, mv), *yb = t_new(TG_E4M3, 2, s23), *ytb = t_new(TG_E4M3, 2, s32);
    ok(tg_fp8_cast_transpose(yb, ytb, xb, NULL, amax, NULL, 0) == TG_OK, "fp8_cast_transpose runs on a bf16 x");
    uint8_t yc[6], ytc[6];
    tg_tensor_read(yb, yc, 6);
    tg_tensor_read(ytb, ytc, 6);
    int tbad = 0;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++)
            tbad += yc[r * 3 + c] != tg_fp8_from_f32(TG_E4M3, tg_bf16_to_f32(tg_f32_to_bf16((float)mv[r * 3 + c]))) ||
                    ytc[c * 2 + r] != yc[r * 3 + c];
    is_int(tbad, 0, "cast_transpose: y is the cast of the bf16 values and y_t[c][r] = y[r][c]");
    is_near(get1(amax), 4.0, 0, "cast_transpose: amax of the bf16 input");
    tg_tensor *yt2 = t_new(TG_E4M3, 2, s32);
    ok(tg_fp8_cast_transpose(NULL, yt2, xb, NULL, NULL, NULL, 0) == TG_OK, "cast_transpose with y NULL writes only y_t");
    uint8_t yt2c[6];
    tg_tensor_read(yt2, yt2c, 6);
    ok(memcmp(yt2c, ytc, 6) == 0, "... the same y_t");
    tg_tensor *yt3 = t_new(TG_E4M3, 2, s32);
    ok(tg_fp8_transpose(yt3, yb) == TG_OK, "fp8_transpose runs");
    tg_tensor_read(yt3, yt2c, 6);
    ok(memcmp(yt2c, ytc, 6) == 0, "fp8_transpose of y equals cast_transpose's y_t");

    /* dequantize */
    tg_tensor *dq = t_new(TG_F32, 2, s23), *dqb = t_new(TG_BF16, 2, s23), *half = scalar(0.5);
    ok(tg_fp8_dequantize(dq, yb, half) == TG_OK && tg_fp8_dequantize(dqb, yb, half) == TG_OK, "fp8_dequantize runs (f32 and bf16)");
    double dv[6], dbv[6];
    tg_tensor_read_f64(dq, dv, 6);
    tg_tensor_read_f64(dqb, dbv, 6);
    int dbad = 0;
    for (int i = 0; i < 6; i++)
        dbad += dv[i] != (double)(tg_fp8_to_f32(TG_E4M3, yc[i]) * 0.5f) ||
                dbv[i] != (double)tg_bf16_to_f32(tg_f32_to_bf16(tg_fp8_to_f32(TG_E4M3, yc[i]) * 0.5f));
    is_int(dbad, 0, "dequantize: y = value(code) * scale_inv, rounded once to f32 or bf16");

    /* amax op */
    tg_tensor *am = scalar(3.0);
    ok(tg_fp8_amax(am, xb, TG_FP8_AMAX_ACCUMULATE) == TG_OK && get1(am) == 4.0f, "fp8_amax accumulates max|x| (3 -> 4)");
    set1(am, 9.0f);
    tg_fp8_amax(am, xb, 0);
    is_near(get1(am), 4.0, 0, "fp8_amax without the flag overwrites (9 -> 4)");

    /* host conversions of whole tensors: fill, copy (casts, unscaled), read_f64 */
    tg_tensor *f8 = t_new(TG_E5M2, 1, &s4);
    ok(tg_fill(f8, 1e9) == TG_EINVAL && strstr(tg_last_error(), "fill: value 1000000000 is outside e5m2's range"),
       "fill of an e5m2 tensor past its max is refused, naming the value (not saturated): %s", tg_last_error());
    ok(tg_fill(f8, 57344) == TG_OK, "fill of an e5m2 tensor with its max");
    double fv[4];
    tg_tensor_read_f64(f8, fv, 4);
    is_near(fv[0], 57344, 0, "fill stores e5m2's max and reads back through read_f64");
    ok(tg_copy(f8, x) == TG_OK, "copy f32 -> e5m2 casts");
    tg_tensor_read_f64(f8, fv, 4);
    ok(fv[0] == 1.0 && fv[1] == -3.0 && fv[2] == (double)tg_fp8_to_f32(TG_E5M2, tg_fp8_from_f32(TG_E5M2, 0.3f)) && fv[3] == 1024.0,
       "copy rounds to the e5m2 grid (1000 -> 1024): %g %g %g %g", fv[0], fv[1], fv[2], fv[3]);

    /* a captured cast reads the scale at replay, writes the amax and scale_inv of that time */
    tg_stream *s = tg_stream_current(cpu);
    tg_graph *g = NULL;
    set1(scale, 1.0f);
    tg_stream_begin_capture(s);
    tg_fp8_cast(y, x, scale, amax, si, 0);
    ok(tg_stream_end_capture(s, &g) == TG_OK, "fp8_cast captures");
    set1(scale, 0.25f);
    set1(amax, 0.0f);
    tg_graph_replay(g, s);
    tg_tensor_read(y, codes, 4);
    ok(codes[1] == tg_fp8_from_f32(TG_E4M3, -0.75f) && get1(si) == 4.0f && get1(amax) == 1000.0f,
       "the replay used the scale written after capture (-3 * 0.25), set scale_inv = 4 and amax = 1000");
    tg_graph_free(g);

    /* errors name the op, the tensors and what was expected */
    tg_tensor *i32 = t_new(TG_I32, 1, &s4), *y3 = t_new(TG_E4M3, 1, (int64_t[]){3}), *sc2 = t_new(TG_F32, 1, (int64_t[]){2});
    ok(tg_fp8_cast(y, i32, NULL, NULL, NULL, 0) == TG_EINVAL, "cast of an i32 x is refused");
    like(tg_last_error(), "fp8_cast: x [4] i32 must be an f32 or bf16 tensor", "... naming x, its shape and dtype");
    ok(tg_fp8_cast(x, x, NULL, NULL, NULL, 0) == TG_EINVAL, "cast into an f32 y is refused");
    like(tg_last_error(), "fp8_cast: y [4] f32 must be an e4m3 or e5m2 tensor", "... naming y");
    ok(tg_fp8_cast(y3, x, NULL, NULL, NULL, 0) == TG_EINVAL, "a y of another size is refused");
    like(tg_last_error(), "x [4] f32 vs y [3] e4m3", "... naming both");
    ok(tg_fp8_cast(y, x, sc2, NULL, NULL, 0) == TG_EINVAL, "a scale of 2 elements is refused");
    like(tg_last_error(), "scale [2] f32 (scale of 1 f32 expected)", "... naming the scale");
    ok(tg_fp8_cast(y, x, scale, scale, NULL, 0) == TG_EINVAL, "an amax sharing the scale's memory is refused");
    like(tg_last_error(), "share memory", "... saying so");
    ok(tg_fp8_cast(y, x, NULL, NULL, NULL, 7) == TG_EINVAL, "unknown flags are refused");
    ok(tg_fp8_cast_transpose(yb, yb, xb, NULL, NULL, NULL, 0) == TG_EINVAL, "a y_t of x's shape (not transposed) is refused");
    like(tg_last_error(), "y_t [3,2] e4m3 expected", "... naming the expected shape");
    ok(tg_fp8_cast_transpose(NULL, NULL, xb, NULL, NULL, NULL, 0) == TG_EINVAL, "cast_transpose with no output is refused");
    ok(tg_fp8_dequantize(y, x, NULL) == TG_EINVAL, "dequantize of an f32 x is refused");
    like(tg_last_error(), "fp8_dequantize: x [4] f32 must be an e4m3 or e5m2 tensor", "... naming x");
    ok(tg_fp8_transpose(yt3, xb) == TG_EINVAL, "fp8_transpose of a bf16 x is refused");

    /* the other ops refuse FP8 tensors, naming dtype and shape */
    tg_tensor *y2 = t_new(TG_E4M3, 1, &s4);
    ok(tg_binary(TG_ADD, y2, y, y) == TG_EINVAL, "add of e4m3 tensors is refused");
    like(tg_last_error(), "add: dtype e4m3 is not a float type (f32 or bf16; tensor [4] e4m3 on cpu)",
         "... naming the op, the dtype and the shape");
    ok(tg_gemm(yb, yb, 0, ytb, 0, 1, 0) == TG_EINVAL, "tg_gemm of e4m3 tensors is refused (tg_fp8_gemm is the FP8 GEMM)");
    like(tg_last_error(), "[2,3] e4m3", "... naming shape and dtype");
    double d;
    ok(tg_sum(y, &d) == TG_EINVAL, "sum of an e4m3 tensor is refused");
    like(tg_last_error(), "e4m3", "... naming the dtype");
    ok(tg_randn(y, 0, 1) == TG_EINVAL, "randn into an e4m3 tensor is refused");
    like(tg_last_error(), "randn: dtype e4m3 is not a float type (f32 or bf16; tensor [4] e4m3 on cpu)", "... naming it");
    ok(tg_axpby(y2, 1, y, 1) == TG_EINVAL, "axpby of e4m3 tensors is refused");
    like(tg_last_error(), "tensor [4] e4m3", "... naming the tensor");

    tg_tensor *all[] = {x, y, scale, amax, si, xn, y5, xb, yb, ytb, yt2, yt3, dq, dqb, half, am, f8, i32, y3, sc2, y2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tg_tensor_free(all[i]);
}

static void dtype_tests(void)
{
    tg_dtype dt;
    ok(tg_dtype_parse("e4m3", &dt) == 0 && dt == TG_E4M3 && tg_dtype_parse("float8_e4m3fn", &dt) == 0 && dt == TG_E4M3,
       "\"e4m3\" and \"float8_e4m3fn\" parse to TG_E4M3");
    ok(tg_dtype_parse("e5m2", &dt) == 0 && dt == TG_E5M2 && tg_dtype_parse("float8_e5m2", &dt) == 0 && dt == TG_E5M2,
       "\"e5m2\" and \"float8_e5m2\" parse to TG_E5M2");
    ok(strcmp(tg_dtype_name(TG_E4M3), "e4m3") == 0 && strcmp(tg_dtype_name(TG_E5M2), "e5m2") == 0, "their names");
    ok(tg_dtype_size(TG_E4M3) == 1 && tg_dtype_size(TG_E5M2) == 1, "one byte each");
    ok(tg_fp8_max(TG_E4M3) == 448 && tg_fp8_max(TG_E5M2) == 57344 && tg_fp8_max(TG_F32) == 0, "largest finite values 448, 57344");
    ok(tg_dtype_parse("fp8", &dt) != 0, "a bare \"fp8\" is not a dtype (which format would it be?)");

    /* hand-computed values */
    struct { tg_dtype dt; float x; int code; const char *what; } cases[] = {
        {TG_E4M3, 1.0f, 0x38, "1"},
        {TG_E4M3, 448.0f, 0x7e, "448 (max)"},
        {TG_E4M3, 464.0f, 0x7e, "464 (the tie above max) saturates"},
        {TG_E4M3, 1e30f, 0x7e, "1e30 saturates"},
        {TG_E4M3, INFINITY, 0x7e, "+Inf saturates"},
        {TG_E4M3, -INFINITY, 0xfe, "-Inf saturates to -448"},
        {TG_E4M3, NAN, 0x7f, "NaN"},
        {TG_E4M3, 1.0625f, 0x38, "1.0625 (tie between 1 and 1.125) goes to even 1"},
        {TG_E4M3, 1.1875f, 0x3a, "1.1875 (tie between 1.125 and 1.25) goes to even 1.25"},
        {TG_E4M3, 0x1p-9f, 0x01, "2^-9 (smallest subnormal)"},
        {TG_E4M3, 0x1p-10f, 0x00, "2^-10 (half the smallest subnormal) ties to 0"},
        {TG_E4M3, 0x1.8p-9f, 0x02, "1.5 * 2^-9 ties to even 2 * 2^-9"},
        {TG_E4M3, 0x1.cp-7f, 0x07, "7 * 2^-9 (largest subnormal)"},
        {TG_E4M3, 0x1p-6f, 0x08, "2^-6 (smallest normal)"},
        {TG_E4M3, 0x1.ep-7f, 0x08, "7.5 * 2^-9 (tie between largest subnormal and smallest normal) goes to even 0x08"},
        {TG_E4M3, -0.0f, 0x80, "-0"},
        {TG_E4M3, -1e-10f, 0x80, "a tiny negative rounds to -0"},
        {TG_E5M2, 1.0f, 0x3c, "1"},
        {TG_E5M2, 57344.0f, 0x7b, "57344 (max)"},
        {TG_E5M2, 61440.0f, 0x7b, "61440 (the tie above max) saturates"},
        {TG_E5M2, INFINITY, 0x7b, "+Inf saturates (TE's saturating cast)"},
        {TG_E5M2, NAN, 0x7f, "NaN"},
        {TG_E5M2, 1.125f, 0x3c, "1.125 (tie between 1 and 1.25) goes to even 1"},
        {TG_E5M2, 1.375f, 0x3e, "1.375 (tie between 1.25 and 1.5) goes to even 1.5"},
        {TG_E5M2, 0x1p-16f, 0x01, "2^-16 (smallest subnormal)"},
        {TG_E5M2, 0x1p-17f, 0x00, "2^-17 ties to 0"},
        {TG_E5M2, 0x1p-14f, 0x04, "2^-14 (smallest normal)"},
        {TG_E5M2, -3.0f, 0xc2, "-3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int got = tg_fp8_from_f32(cases[i].dt, cases[i].x);
        ok(got == cases[i].code, "%s %s -> 0x%02x (got 0x%02x)", tg_dtype_name(cases[i].dt), cases[i].what, cases[i].code, got);
    }
    ok(isnan(tg_fp8_to_f32(TG_E4M3, 0xff)) && isnan(tg_fp8_to_f32(TG_E5M2, 0x7d)) && isinf(tg_fp8_to_f32(TG_E5M2, 0xfc)),
       "decoding: e4m3 0xff is NaN, e5m2 0x7d NaN, 0xfc -Inf");
    (void)u_of;
}

int main(void)
{
    dtype_tests();
    scalar_tests(TG_E4M3);
    scalar_tests(TG_E5M2);
    tensor_tests();
    return done_testing();
}
