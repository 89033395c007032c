/* dtype.c — element types: sizes, names, bf16 and FP8 (E4M3, E5M2) conversions (round to nearest even). */
#include "core/core.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name, *alias;
    size_t size;
} dtypes[TG_DTYPE_COUNT] = {
    [TG_F32] = {"f32", "float32", 4},
    [TG_BF16] = {"bf16", "bfloat16", 2},
    [TG_F16] = {"f16", "float16", 2},
    [TG_I32] = {"i32", "int32", 4},
    [TG_U16] = {"u16", "uint16", 2},
    [TG_E4M3] = {"e4m3", "float8_e4m3fn", 1},
    [TG_E5M2] = {"e5m2", "float8_e5m2", 1},
};

size_t tg_dtype_size(tg_dtype dt) { return (unsigned)dt < TG_DTYPE_COUNT ? dtypes[dt].size : 0; }

const char *tg_dtype_name(tg_dtype dt) { return (unsigned)dt < TG_DTYPE_COUNT ? dtypes[dt].name : "?"; }

int tg_dtype_parse(const char *s, tg_dtype *out)
{
    if (!s || !out) return -1;
    for (int i = 0; i < TG_DTYPE_COUNT; i++) {
        if (strcmp(s, dtypes[i].name) == 0 || strcmp(s, dtypes[i].alias) == 0) {
            *out = (tg_dtype)i;
            return 0;
        }
    }
    return -1;
}

float tg_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t tg_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep it quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* ties go to the even neighbour; overflow rounds to Inf */
    return (uint16_t)(u >> 16);
}

/* ------------------------------------------------------------------ FP8
 * A format has mbits mantissa bits and exponent bias; emin = 1 - bias is the
 * exponent of the smallest normal, whose quantum 2^(emin - mbits) is also
 * the subnormals' spacing. E4M3 (OCP fn): bias 7, codes 0x7f / 0xff are NaN,
 * no infinities, max 0x7e = 448. E5M2: bias 15, exponent 31 holds Inf and
 * NaN, max 0x7b = 57344. */
int tg_dtype_is_fp8(tg_dtype dt) { return dt == TG_E4M3 || dt == TG_E5M2; }

double tg_fp8_max(tg_dtype dt) { return dt == TG_E4M3 ? 448.0 : dt == TG_E5M2 ? 57344.0 : 0.0; }

uint8_t tg_fp8_from_f32(tg_dtype dt, float x)
{
    const int mbits = dt == TG_E4M3 ? 3 : 2, emin = dt == TG_E4M3 ? -6 : -14;
    const uint32_t max_bits = dt == TG_E4M3 ? 0x43e00000u : 0x47600000u; /* 448, 57344 as f32 */
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7f;                                   /* NaN */
    if (a >= max_bits) return sign | (dt == TG_E4M3 ? 0x7e : 0x7b);    /* saturate (infinities too) */
    int e = (int)(a >> 23) - 127;                                       /* f32 subnormals: far below, give 0 */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;                           /* value = m * 2^(e - 23) */
    /* q = value / quantum, quantum = 2^(max(e, emin) - mbits): m >> s, rounded to nearest, ties to even */
    int s = 23 - mbits + (e < emin ? emin - e : 0);
    if (s >= 25) return sign;                                           /* below half the smallest subnormal */
    uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    /* a subnormal's code is q; a normal's is its exponent field and q's mantissa bits, a q of 2^(mbits+1)
     * (rounded up into the next binade) carrying into the exponent field by the addition */
    if (e < emin) return sign | (uint8_t)q;
    return sign | (uint8_t)(((uint32_t)(e - emin + 1) << mbits) + q - (1u << mbits));
}

float tg_fp8_to_f32(tg_dtype dt, uint8_t code)
{
    int mbits = dt == TG_E4M3 ? 3 : 2, emin = dt == TG_E4M3 ? -6 : -14, ebits = 7 - mbits;
    int ef = (code & 0x7f) >> mbits, m = code & ((1 << mbits) - 1);
    double v;
    if (dt == TG_E4M3 && (code & 0x7f) == 0x7f) return NAN;
    if (dt == TG_E5M2 && ef == (1 << ebits) - 1) v = m ? NAN : INFINITY;
    else if (ef == 0) v = ldexp((double)m, emin - mbits);
    else v = ldexp((double)((1 << mbits) + m), ef + emin - 1 - mbits);
    return (float)((code & 0x80) ? -v : v);
}
