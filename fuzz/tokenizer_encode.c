/* tokenizer_encode.c — fuzz target: the input is any bytes (invalid UTF-8 included), encoded and decoded by a
 * GPT-2 tokenizer with a small fixed vocabulary (loaded once, from files made in memory) and by the byte-level
 * tokenizer. Checks: decode(encode(s)) == s, every id is in the vocabulary and none is <|endoftext|>, a second
 * encoding (through the piece cache) gives the same ids, and the pre-tokenizer's pieces cover s in order. */
#include "text/text.h"
#include "tokenizer_common.h"

static tg_tokenizer *bpe, *bytes;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    static char v[16384], m[8192];
    size_t vn, mn;
    fixed_files(v, &vn, m, &mn);
    if (tg_tokenizer_gpt2_memory(v, vn, "vocab.json", m, mn, "merges.txt", &bpe) != TG_OK ||
        tg_tokenizer_bytes(&bytes) != TG_OK) {
        fprintf(stderr, "fuzz: the fixed tokenizer: %s\n", tg_last_error());
        abort();
    }
    FUZZ_CHECK(tg_tokenizer_num_merges(bpe) == (int64_t)FIXED_MERGES, "%lld merges read", (long long)tg_tokenizer_num_merges(bpe));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    round_trip(bpe, data, size);
    round_trip(bytes, data, size);
    size_t ends[4096];
    size_t np = tg_tokenizer_pieces((const char *)data, size, ends, sizeof ends / sizeof ends[0]);
    FUZZ_CHECK(np <= size, "%zu pieces of %zu bytes", np, size);
    size_t stored = np < sizeof ends / sizeof ends[0] ? np : sizeof ends / sizeof ends[0];
    for (size_t i = 0; i < stored; i++)
        FUZZ_CHECK(ends[i] > (i ? ends[i - 1] : 0) && ends[i] <= size, "piece %zu ends at %zu (previous %zu, %zu bytes)", i,
                   ends[i], i ? ends[i - 1] : 0, size);
    FUZZ_CHECK(size == 0 || (np == stored && stored > 0 && ends[stored - 1] == size), "the pieces end at %zu of %zu bytes",
               stored ? ends[stored - 1] : 0, size);
    return 0;
}
