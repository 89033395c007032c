/* tokenizer_common.h — shared by the tokenizer fuzz targets: the round trip checked on any bytes, and a small
 * fixed GPT-2 vocabulary (the 256 bytes, a few merges, <|endoftext|>) written as vocab.json and merges.txt. */
#ifndef TG_FUZZ_TOKENIZER_COMMON_H
#define TG_FUZZ_TOKENIZER_COMMON_H

#include "fuzz.h"
#include "tegraph.h"

#include <stdint.h>
#include <string.h>

/* Encodes s, checks every id is a vocabulary id other than <|endoftext|>, that a second encoding (through the
 * piece cache) gives the same ids, and that decoding gives s back. */
static void round_trip(tg_tokenizer *t, const uint8_t *s, size_t n)
{
    int32_t *ids, *again;
    size_t nids, nagain;
    FUZZ_CHECK(tg_tokenizer_encode(t, (const char *)s, n, &ids, &nids, NULL, NULL) == TG_OK, "encode failed: %s",
               tg_last_error());
    int64_t v = tg_tokenizer_vocab_size(t), eot = tg_tokenizer_eot(t);
    FUZZ_CHECK(nids <= n, "%zu ids for %zu bytes", nids, n);
    for (size_t i = 0; i < nids; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < v && ids[i] != eot, "id %d at %zu (vocabulary %lld, eot %lld)", (int)ids[i], i,
                   (long long)v, (long long)eot);
    FUZZ_CHECK(tg_tokenizer_encode(t, (const char *)s, n, &again, &nagain, NULL, NULL) == TG_OK, "encode again failed");
    FUZZ_CHECK(nagain == nids && (nids == 0 || memcmp(again, ids, nids * sizeof *ids) == 0),
               "a second encoding differs (%zu ids, then %zu)", nids, nagain);
    free(again);
    char *text;
    size_t len;
    FUZZ_CHECK(tg_tokenizer_decode(t, ids, nids, &text, &len) == TG_OK, "decode failed: %s", tg_last_error());
    FUZZ_CHECK(len == n && (n == 0 || memcmp(text, s, n) == 0), "decode(encode(s)) != s (%zu bytes, %zu back)", n, len);
    FUZZ_CHECK(text[len] == 0, "decoded text is not NUL-terminated");
    free(text);
    free(ids);
}

/* GPT-2's byte-to-unicode map: printable bytes are themselves, the other 68 are 256, 257, ... in byte order. */
static void byte_code_points(uint32_t cp[256])
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = printable ? (uint32_t)b : next++;
    }
}

static size_t put_cp(char *o, uint32_t c)
{
    if (c < 0x80) return o[0] = (char)c, 1;
    o[0] = (char)(0xC0 | c >> 6);
    o[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

/* merges of the fixed vocabulary, in GPT-2's byte-to-unicode form: "\xc4\xa0" is the space, "\xc4\x8a" the
 * newline, "\xc3\x83" "\xc2\xa9" the two bytes of U+00E9 in UTF-8 */
static const char *const fixed_merges[][2] = {
    {"\xc4\xa0", "t"}, {"h", "e"}, {"\xc4\xa0t", "he"}, {"i", "n"}, {"in", "g"}, {"e", "r"}, {"a", "n"},
    {"\xc4\xa0", "a"}, {"o", "n"}, {"r", "e"}, {"\xc4\xa0", "\xc4\xa0"}, {"\xc4\xa0\xc4\xa0", "\xc4\xa0\xc4\xa0"},
    {"\xc4\x8a", "\xc4\x8a"}, {"1", "2"}, {"\xc3\x83", "\xc2\xa9"}, {"'", "s"}, {"\xc4\xa0the", "re"},
};
#define FIXED_MERGES (sizeof fixed_merges / sizeof fixed_merges[0])

/* Writes the fixed vocabulary's vocab.json into v and merges.txt into m (each at least 8192 bytes); their lengths. */
static void fixed_files(char *v, size_t *vn, char *m, size_t *mn)
{
    uint32_t cp[256];
    byte_code_points(cp);
    size_t n = 0;
    v[n++] = '{';
    for (int b = 0; b < 256; b++) {
        n += (size_t)sprintf(v + n, "%s\"", b ? ", " : "");
        if (b == '"' || b == '\\') v[n++] = '\\';
        n += put_cp(v + n, cp[b]);
        n += (size_t)sprintf(v + n, "\": %d", b);
    }
    size_t k = 0;
    m[k++] = '#', m[k++] = 'v', m[k++] = 'e', m[k++] = 'r', m[k++] = 's', m[k++] = 'i', m[k++] = 'o', m[k++] = 'n';
    m[k++] = '\n';
    for (size_t i = 0; i < FIXED_MERGES; i++) {
        n += (size_t)sprintf(v + n, ", \"%s%s\": %zu", fixed_merges[i][0], fixed_merges[i][1], 256 + i);
        k += (size_t)sprintf(m + k, "%s %s\n", fixed_merges[i][0], fixed_merges[i][1]);
    }
    n += (size_t)sprintf(v + n, ", \"<|endoftext|>\": %zu}\n", 256 + FIXED_MERGES);
    *vn = n;
    *mn = k;
}

#endif
