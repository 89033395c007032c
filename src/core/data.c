/* data.c — token files: the uint16 tokens of llm.c / nanoGPT .bin files, decoded into i32 windows. */
#include "core/data.h"

static unsigned u16_at(const unsigned char *p, int64_t i) { return (unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8; }

void tg_tokens_u16_max(const unsigned char *p, int64_t count, unsigned *max, int64_t *at)
{
    *max = 0;
    *at = 0;
    for (int64_t i = 0; i < count; i++) {
        unsigned v = u16_at(p, i);
        if (v > *max || i == 0) *max = v, *at = i;
    }
}

tg_status tg_tokens_u16_windows(const unsigned char *bytes, size_t len, int64_t first, const int64_t *starts, int64_t b,
                                int64_t t, int32_t *x, int32_t *y)
{
    if (b < 1 || t < 1) return tg_error(TG_EINVAL, "token_windows: need at least one window of at least one token");
    int64_t ntok = first >= 0 && (size_t)first <= len ? (int64_t)((len - (size_t)first) / 2) : 0;
    for (int64_t r = 0; r < b; r++) {
        int64_t st = starts[r];
        if (st < 0 || st > ntok || t + 1 > ntok - st)
            return tg_error(TG_EINVAL, "token_windows: window %lld starts at %lld; it needs tokens up to %lld but there are %lld",
                            (long long)(r + 1), (long long)st, st < 0 || st > INT64_MAX - t - 1 ? (long long)INT64_MAX : (long long)(st + t + 1), (long long)ntok);
        const unsigned char *p = bytes + first + 2 * st;
        for (int64_t i = 0; i <= t; i++) {
            int32_t v = (int32_t)u16_at(p, i);
            if (i < t) x[r * t + i] = v;
            if (i > 0) y[r * t + i - 1] = v;
        }
    }
    return TG_OK;
}
