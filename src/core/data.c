/* data.c — token files: the uint16 tokens of llm.c / nanoGPT .bin files, decoded into i32 windows. */
#include "core/data.h"

#include <stdio.h>
#include <string.h>

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

static int32_t i32_at(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

tg_status tg_tokens_parse(const unsigned char *bytes, size_t len, const char *path, int64_t vocab, tg_token_file *out)
{
    memset(out, 0, sizeof *out);
    if (!bytes) len = 0;
    int has_magic = len >= 4 && i32_at(bytes) == TG_TOKENS_MAGIC;
    int64_t first, ntok;
    if (has_magic || (vocab < 0 && len < TG_TOKENS_HEADER_BYTES)) {
        if (len < TG_TOKENS_HEADER_BYTES)
            return tg_error(TG_EINVAL, "%s: truncated token file: %zu bytes, shorter than the %d-byte llm.c header", path, len,
                            TG_TOKENS_HEADER_BYTES);
        int32_t version = i32_at(bytes + 4), n = i32_at(bytes + 8);
        if (version != TG_TOKENS_VERSION)
            return tg_error(TG_EINVAL, "%s: unsupported version %d (expected %d: uint16 tokens)", path, (int)version,
                            TG_TOKENS_VERSION);
        if (n < 0) return tg_error(TG_EINVAL, "%s: negative token count %d in the header", path, (int)n);
        size_t have = (len - TG_TOKENS_HEADER_BYTES) / 2;
        if (have < (size_t)n)
            return tg_error(TG_EINVAL, "%s: truncated token file: the header says %d tokens but the file holds %zu (%zu bytes)",
                            path, (int)n, have, len);
        first = TG_TOKENS_HEADER_BYTES;
        ntok = n;
    } else if (vocab >= 0) {
        if (len % 2 != 0) return tg_error(TG_EINVAL, "%s: %zu bytes: not a headerless uint16 token file (odd size)", path, len);
        first = 0;
        ntok = (int64_t)(len / 2);
    } else {
        char m[16] = "(none)";
        if (len >= 4) snprintf(m, sizeof m, "%d", (int)i32_at(bytes));
        return tg_error(TG_EINVAL,
                        "%s: bad magic %s in the header (expected %d: an llm.c .bin token file; a headerless nanoGPT .bin "
                        "loads when the vocabulary size is given: --vocab)",
                        path, m, TG_TOKENS_MAGIC);
    }
    if (ntok < 2) return tg_error(TG_EINVAL, "%s: %lld tokens, need at least 2", path, (long long)ntok);
    tg_tokens_u16_max(bytes + first, ntok, &out->max, &out->max_at);
    if (vocab >= 0) {
        if ((int64_t)out->max >= vocab)
            return tg_error(TG_EINVAL, "%s: token id %u at position %lld is >= the vocabulary size %lld", path, out->max,
                            (long long)out->max_at, (long long)vocab);
    } else {
        vocab = out->max + 1 > 256 ? (int64_t)out->max + 1 : 256;
    }
    out->first = first;
    out->ntok = ntok;
    out->vocab = vocab;
    return TG_OK;
}
