/* tokenizer.c — fuzz target: the input is a GPT-2 tokenizer's two files, the vocabulary (vocab.json /
 * encoder.json) and the merges (merges.txt / vocab.bpe), separated by the input's first NUL byte; each is
 * parsed from a buffer of its exact size (tg_tokenizer_gpt2_memory, the code tg_tokenizer_gpt2 runs on the
 * files' contents). A tokenizer that loads must round-trip any bytes: the input itself is encoded and
 * decoded, decode(encode(s)) == s, every id in the vocabulary and none <|endoftext|>. */
#include "text/text.h"
#include "tokenizer_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t vn = nul ? (size_t)(nul - data) : size, mn = nul ? size - vn - 1 : 0;
    char *v = malloc(vn ? vn : 1), *m = malloc(mn ? mn : 1);
    FUZZ_CHECK(v && m, "out of memory");
    memcpy(v, data, vn);
    if (mn) memcpy(m, nul + 1, mn);
    tg_tokenizer *t;
    if (tg_tokenizer_gpt2_memory(v, vn, "vocab.json", m, mn, "merges.txt", &t) == TG_OK) {
        FUZZ_CHECK(tg_tokenizer_vocab_size(t) >= 256 && tg_tokenizer_num_merges(t) > 0, "vocabulary %lld, %lld merges",
                   (long long)tg_tokenizer_vocab_size(t), (long long)tg_tokenizer_num_merges(t));
        int seen[256] = {0};
        for (int64_t id = 0; id < tg_tokenizer_vocab_size(t); id++) {
            size_t len = 0;
            const unsigned char *p = tg_tokenizer_token(t, id, &len);
            FUZZ_CHECK(p != NULL, "id %lld of %lld has no bytes", (long long)id, (long long)tg_tokenizer_vocab_size(t));
            if (len == 1) seen[p[0]] = 1;
        }
        for (int b = 0; b < 256; b++) FUZZ_CHECK(seen[b], "byte 0x%02x has no token in a vocabulary that loaded", b);
        round_trip(t, data, size);
        tg_tokenizer_free(t);
    }
    free(v);
    free(m);
    return 0;
}
