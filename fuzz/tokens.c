/* tokens.c — fuzz target: the input is a token file's bytes (llm.c .bin, or nanoGPT's headerless uint16 tokens);
 * tg_tokens_parse (the check tegraph.data.open runs on a file's contents) validates it without a vocabulary and
 * with one taken from the header's unused bytes, and windows are decoded at starts and lengths taken from the
 * input (some past the end). Checks: the tokens found lie inside the file, no id reaches the vocabulary, the
 * largest id is the largest, and a decoded window's y is its x shifted by one token, both equal to the file's. */
#include "core/data.h"
#include "fuzz.h"

#include <stdint.h>
#include <string.h>

static unsigned tok(const uint8_t *p, int64_t i) { return (unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8; }

static void windows(const uint8_t *data, size_t size, const tg_token_file *tf)
{
    /* the starts and the length from the header's unused bytes 16.. (or the first tokens of a headerless file) */
    const uint8_t *ctl = data + (tf->first ? 16 : 0);
    size_t nctl = tf->first ? 64 : (size < 16 ? size : 16);
    int64_t b = nctl > 0 ? ctl[0] % 5 + 1 : 1;
    int64_t t = nctl > 1 ? ctl[1] % 17 + 1 : 1;
    int64_t starts[5];
    for (int64_t r = 0; r < b; r++) {
        unsigned v = 2 + 2 * r < nctl ? (unsigned)ctl[2 + 2 * r] | (unsigned)ctl[3 + 2 * r] << 8 : 0;
        starts[r] = (int64_t)(v % (unsigned)(tf->ntok + 4)) - 2; /* a few before the start and past the end */
    }
    int32_t x[5 * 17], y[5 * 17];
    tg_status st = tg_tokens_u16_windows(data, size, tf->first, starts, b, t, x, y);
    int64_t all = (int64_t)((size - (size_t)tf->first) / 2); /* the header's count and any tokens after them */
    int inside = 1;
    for (int64_t r = 0; r < b; r++) inside &= starts[r] >= 0 && starts[r] + t + 1 <= all;
    FUZZ_CHECK((st == TG_OK) == inside, "windows (%lld of %lld tokens) %s but they are %s the file", (long long)b,
               (long long)t, st == TG_OK ? "decoded" : "refused", inside ? "inside" : "not inside");
    if (st != TG_OK) return;
    const uint8_t *p = data + tf->first;
    for (int64_t r = 0; r < b; r++)
        for (int64_t i = 0; i < t; i++) {
            FUZZ_CHECK(x[r * t + i] == (int32_t)tok(p, starts[r] + i), "window %lld token %lld differs from the file",
                       (long long)r, (long long)i);
            FUZZ_CHECK(y[r * t + i] == (int32_t)tok(p, starts[r] + i + 1), "window %lld: y is not x shifted", (long long)r);
        }
}

static void check(const uint8_t *data, size_t size, int64_t vocab)
{
    tg_token_file tf;
    if (tg_tokens_parse(data, size, "fuzz.bin", vocab, &tf) != TG_OK) return;
    FUZZ_CHECK(tf.ntok >= 2 && tf.first >= 0 && (size_t)tf.first + 2 * (size_t)tf.ntok <= size,
               "%lld tokens from byte %lld do not fit the %zu bytes", (long long)tf.ntok, (long long)tf.first, size);
    FUZZ_CHECK(vocab < 0 || tf.vocab == vocab, "vocabulary %lld given, %lld kept", (long long)vocab, (long long)tf.vocab);
    FUZZ_CHECK(tf.max_at >= 0 && tf.max_at < tf.ntok && tok(data + tf.first, tf.max_at) == tf.max,
               "the largest id %u is not at its position %lld", tf.max, (long long)tf.max_at);
    FUZZ_CHECK((int64_t)tf.max < tf.vocab, "id %u passed a vocabulary of %lld", tf.max, (long long)tf.vocab);
    for (int64_t i = 0; i < tf.ntok; i++)
        FUZZ_CHECK(tok(data + tf.first, i) <= tf.max && (i >= tf.max_at || tok(data + tf.first, i) < tf.max),
                   "token %lld passes the largest id %u found at %lld", (long long)i, tf.max, (long long)tf.max_at);
    windows(data, size, &tf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size, -1);
    /* a vocabulary from bytes 12..13 (unused in the llm.c header; tokens of a headerless file) */
    int64_t vocab = size >= 14 ? ((int64_t)data[12] | (int64_t)data[13] << 8) + 1 : 256;
    check(data, size, vocab);
    return 0;
}
