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

/* The llm.c .bin layout: a header of 256 little-endian int32 (magic, version, token count, unused), then the
 * tokens. */
#define TG_TOKENS_MAGIC 20240520
#define TG_TOKENS_VERSION 1
#define TG_TOKENS_HEADER_BYTES 1024

/* Where the tokens of a token file lie and what they hold. */
typedef struct tg_token_file {
    int64_t first;  /* byte offset of the first token */
    int64_t ntok;   /* number of tokens */
    int64_t vocab;  /* the vocabulary size given, or without one the largest id + 1, at least 256 */
    unsigned max;   /* the largest id */
    int64_t max_at; /* its first 0-based position */
} tg_token_file;

/* Validates the len bytes of the token file path (the name used in errors): an llm.c .bin file (the header
 * above) or, when vocab >= 0 is given (-1: none), nanoGPT's headerless uint16 tokens. Fails (TG_EINVAL,
 * naming path) when it is shorter than its header, has a bad magic (without vocab) or version, a negative
 * token count, fewer tokens than the header says, an odd size (headerless), fewer than 2 tokens, or an id
 * >= vocab. */
tg_status tg_tokens_parse(const unsigned char *bytes, size_t len, const char *path, int64_t vocab, tg_token_file *out);

#endif
