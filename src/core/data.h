/* data.h — token files: decoding the uint16 tokens of llm.c / nanoGPT .bin files (data.c). */
#ifndef TG_CORE_DATA_H
#define TG_CORE_DATA_H

#include "core/core.h"

/* Tokens are little-endian uint16; token i of a run starting at p is at
 * p + 2 i. */

/* The largest of the count tokens at p and the 0-based index of its first
 * occurrence (*max = 0, *at = 0 when count is 0). */
void tg_tokens_u16_max(const unsigned char *p, int64_t count, unsigned *max, int64_t *at);

/* Windows of t tokens from the bytes [0, len) whose tokens start at byte
 * first: row r of x (b, t) holds tokens starts[r] .. starts[r] + t - 1
 * (0-based token indices counted from first) and row r of y the same shifted
 * by one. Fails with TG_EINVAL naming the window when one reaches past the
 * last token. */
tg_status tg_tokens_u16_windows(const unsigned char *bytes, size_t len, int64_t first, const int64_t *starts, int64_t b,
                                int64_t t, int32_t *x, int32_t *y);

#endif
