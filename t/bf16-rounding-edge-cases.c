/* bf16-rounding-edge-cases.c — f32 -> bf16 rounds to nearest even (ties, NaN, Inf, overflow, subnormals, -0), scalar and through tensor casts. */
#include "core/core.h"
#include "tap.h"

#include <math.h>
#include <string.h>

static const tg_device cpu = {TG_CPU, 0};

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0; }

/* Independent reference: pick the nearer of the two bf16 neighbours of a
 * finite f (by exact double arithmetic), the even one on a tie. */
static uint16_t ref_round(float f)
{
    uint32_t u = u_of(f);
    if (isnan(f)) return 0x7fc0;
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1); /* toward zero, away from zero */
    if ((u & 0xffff) == 0) return lo;
    double a = fabs((double)f), vlo = fabs((double)tg_bf16_to_f32(lo));
    double vhi = (lo & 0x7fff) == 0x7f7f ? ldexp(1.0, 128) : fabs((double)tg_bf16_to_f32(hi)); /* above max: Inf */
    double dlo = a - vlo, dhi = vhi - a;
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) ? hi : lo;
}

struct edge {
    uint32_t f32;
    uint16_t want;
    const char *what;
};

static const struct edge edges[] = {
    {0x3f800000, 0x3f80, "1.0 is exact"},
    {0x3f808000, 0x3f80, "tie 1.00390625 goes to the even 0x3f80"},
    {0x3f818000, 0x3f82, "tie above an odd neighbour goes up to 0x3f82"},
    {0x3f808001, 0x3f81, "just above a tie rounds up"},
    {0x3f807fff, 0x3f80, "just below a tie rounds down"},
    {0xbf808000, 0xbf80, "negative tie goes to the even -1.0"},
    {0xbf818000, 0xbf82, "negative tie above an odd neighbour goes to 0xbf82"},
    {0x40490fdb, 0x4049, "pi rounds to 3.140625"},
    {0x7f800000, 0x7f80, "+Inf stays +Inf"},
    {0xff800000, 0xff80, "-Inf stays -Inf"},
    {0x7f7fffff, 0x7f80, "FLT_MAX overflows to +Inf"},
    {0xff7fffff, 0xff80, "-FLT_MAX overflows to -Inf"},
    {0x7f7f8000, 0x7f80, "tie between the bf16 max (odd) and Inf rounds to Inf"},
    {0x7f7f7fff, 0x7f7f, "just below that tie stays the bf16 max"},
    {0x00000000, 0x0000, "+0 stays +0"},
    {0x80000000, 0x8000, "-0 stays -0"},
    {0x00000001, 0x0000, "smallest f32 subnormal rounds to +0"},
    {0x80000001, 0x8000, "smallest negative subnormal rounds to -0"},
    {0x00008000, 0x0000, "subnormal tie goes to the even 0"},
    {0x00018000, 0x0002, "subnormal tie above odd goes up"},
    {0x0000c000, 0x0001, "subnormal above half rounds up to the smallest bf16 subnormal"},
    {0x00010000, 0x0001, "bf16 subnormal is exact"},
    {0x007fffff, 0x0080, "largest subnormal rounds up into the smallest normal"},
};

int main(void)
{
    plan(NO_PLAN);
    size_t nedge = sizeof edges / sizeof edges[0];

    /* ---- scalar helper */
    for (size_t i = 0; i < nedge; i++) {
        uint16_t got = tg_f32_to_bf16(f_of(edges[i].f32));
        ok(got == edges[i].want, "scalar: %s (0x%08x -> 0x%04x)", edges[i].what, edges[i].f32, edges[i].want);
        if (got != edges[i].want) diag("got 0x%04x", got);
    }
    static const uint32_t nans[] = {0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7f810000, 0x7fffffff};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = tg_f32_to_bf16(f_of(nans[i]));
        ok(bf16_is_nan(h), "scalar: NaN 0x%08x stays NaN (got 0x%04x)", nans[i], h);
        ok((h >> 15) == (nans[i] >> 31), "scalar: NaN 0x%08x keeps its sign", nans[i]);
    }
    ok(signbit(tg_bf16_to_f32(0x8000)) && tg_bf16_to_f32(0x8000) == 0.0f, "bf16 -0 widens to f32 -0");
    is_near(tg_bf16_to_f32(0x4049), 3.140625, 0, "bf16 0x4049 widens to 3.140625");
    ok(isinf(tg_bf16_to_f32(0xff80)) && tg_bf16_to_f32(0xff80) < 0, "bf16 -Inf widens to -Inf");
    is_near(tg_bf16_to_f32(0x0001), ldexp(1.0, -133), 0, "smallest bf16 subnormal widens to 2^-133");

    int roundtrip_bad = 0, nan_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t back = tg_f32_to_bf16(tg_bf16_to_f32((uint16_t)h));
        if (bf16_is_nan((uint16_t)h)) nan_bad += !bf16_is_nan(back);
        else roundtrip_bad += back != h;
    }
    is_int(roundtrip_bad, 0, "every non-NaN bf16 survives bf16 -> f32 -> bf16");
    is_int(nan_bad, 0, "every bf16 NaN stays NaN through f32");

    /* Random bit patterns against the independent reference. */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int ref_bad = 0;
    for (int i = 0; i < 1000000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t u = (uint32_t)(x >> 32);
        if (i & 1) u = (u & 0xffff0000u) | 0x8000u; /* half of them exact ties */
        float f = f_of(u);
        uint16_t got = tg_f32_to_bf16(f);
        if (isnan(f) ? !bf16_is_nan(got) : got != ref_round(f)) {
            if (ref_bad++ < 5) diag("0x%08x: got 0x%04x, want 0x%04x", u, got, ref_round(f));
        }
    }
    is_int(ref_bad, 0, "1e6 random f32 (half of them ties) round like the reference");

    /* ---- through tensors: tg_copy f32 -> bf16 is the cast kernel */
    size_t n = nedge + sizeof nans / sizeof nans[0];
    float *src = malloc(n * sizeof *src);
    uint16_t *h = malloc(n * sizeof *h);
    float *back = malloc(n * sizeof *back);
    for (size_t i = 0; i < nedge; i++) src[i] = f_of(edges[i].f32);
    for (size_t i = nedge; i < n; i++) src[i] = f_of(nans[i - nedge]);

    int64_t shape[1] = {(int64_t)n};
    tg_tensor *tf = NULL, *tb = NULL, *tf2 = NULL;
    ok(tg_tensor_new(TG_F32, 1, shape, cpu, &tf) == TG_OK && tg_tensor_new(TG_BF16, 1, shape, cpu, &tb) == TG_OK &&
           tg_tensor_new(TG_F32, 1, shape, cpu, &tf2) == TG_OK,
       "tensors created");
    if (!tf || !tb || !tf2) bail_out("cannot create tensors: %s", tg_last_error());
    ok(tg_tensor_write(tf, src, n * sizeof *src) == TG_OK, "write f32 edge values");
    ok(tg_copy(tb, tf) == TG_OK, "tg_copy f32 -> bf16");
    ok(tg_tensor_read(tb, h, n * sizeof *h) == TG_OK, "read bf16 bits");
    int tbad = 0;
    for (size_t i = 0; i < nedge; i++)
        if (h[i] != edges[i].want) {
            tbad++;
            diag("tensor cast: %s: got 0x%04x", edges[i].what, h[i]);
        }
    is_int(tbad, 0, "tensor cast f32 -> bf16 rounds every edge case like the scalar helper");
    int tnan = 0;
    for (size_t i = nedge; i < n; i++) tnan += bf16_is_nan(h[i]);
    is_int(tnan, (int)(n - nedge), "tensor cast keeps NaNs NaN");

    ok(tg_copy(tf2, tb) == TG_OK && tg_tensor_read(tf2, back, n * sizeof *back) == TG_OK, "tg_copy bf16 -> f32");
    int wbad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = tg_bf16_to_f32(h[i]);
        if (!(isnan(want) ? isnan(back[i]) : u_of(back[i]) == u_of(want))) wbad++;
    }
    is_int(wbad, 0, "tensor cast bf16 -> f32 widens exactly (including -0, Inf, NaN)");

    /* A large cast (parallel path) against the scalar helper. */
    int64_t big[1] = {300001};
    tg_tensor *bf = NULL, *bb = NULL;
    float *bsrc = malloc(big[0] * sizeof *bsrc);
    uint16_t *bh = malloc(big[0] * sizeof *bh);
    for (int64_t i = 0; i < big[0]; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        bsrc[i] = f_of((uint32_t)(x >> 32));
    }
    int bbad = 0;
    if (tg_tensor_new(TG_F32, 1, big, cpu, &bf) == TG_OK && tg_tensor_new(TG_BF16, 1, big, cpu, &bb) == TG_OK &&
        tg_tensor_write(bf, bsrc, big[0] * sizeof *bsrc) == TG_OK && tg_copy(bb, bf) == TG_OK &&
        tg_tensor_read(bb, bh, big[0] * sizeof *bh) == TG_OK) {
        for (int64_t i = 0; i < big[0]; i++) {
            uint16_t want = tg_f32_to_bf16(bsrc[i]);
            bbad += isnan(bsrc[i]) ? !bf16_is_nan(bh[i]) : bh[i] != want;
        }
    } else {
        bbad = -1;
        diag("%s", tg_last_error());
    }
    is_int(bbad, 0, "a 300001-element cast matches the scalar helper element by element");

    /* Host conversions and fill round the same way. */
    double ties[3] = {1.00390625, -1.01171875, 3.4e38};
    uint16_t th[3];
    tg_tensor *t3 = NULL;
    int64_t s3[1] = {3};
    ok(tg_tensor_new(TG_BF16, 1, s3, cpu, &t3) == TG_OK && tg_tensor_write_f64(t3, ties, 3) == TG_OK &&
           tg_tensor_read(t3, th, sizeof th) == TG_OK,
       "write_f64 into a bf16 tensor");
    ok(th[0] == 0x3f80 && th[1] == 0xbf82 && th[2] == 0x7f80, "write_f64 rounds ties to even and 3.4e38 (above the bf16 max) to Inf (0x%04x 0x%04x 0x%04x)",
       th[0], th[1], th[2]);
    ok(tg_fill(t3, 1.00390625) == TG_OK && tg_tensor_read(t3, th, sizeof th) == TG_OK, "fill a bf16 tensor with a tie");
    ok(th[0] == 0x3f80 && th[1] == 0x3f80 && th[2] == 0x3f80, "fill rounds the tie to even (0x%04x)", th[0]);
    ok(tg_fill(t3, -0.0) == TG_OK && tg_tensor_read(t3, th, sizeof th) == TG_OK, "fill a bf16 tensor with -0");
    ok(th[0] == 0x8000 && th[2] == 0x8000, "fill with -0 stores bf16 -0 (0x%04x)", th[0]);

    tg_tensor_free(tf), tg_tensor_free(tb), tg_tensor_free(tf2), tg_tensor_free(bf), tg_tensor_free(bb), tg_tensor_free(t3);
    free(src), free(h), free(back), free(bsrc), free(bh);
    return done_testing();
}
