/* dtype.c — element types: sizes, names, bf16 conversion (round to nearest even). */
#include "core/core.h"

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
};

size_t tg_dtype_size(tg_dtype dt) { return (unsigned)dt < TG_DTYPE_COUNT ? dtypes[dt].size : 0; }

const char *tg_dtype_name(tg_dtype dt) { return (unsigned)dt < TG_DTYPE_COUNT ? dtypes[dt].name : "?"; }

int tg_dtype_parse(const char *s, tg_dtype *out)
{
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
