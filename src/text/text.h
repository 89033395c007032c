/* text.h — tokenizers (tokenizer.c) and sampling from logits (sample.c); the declarations are public, in tegraph.h. */
#ifndef TG_TEXT_H
#define TG_TEXT_H

#include "core/core.h"

/* tg_tokenizer_gpt2 on the files' contents in memory: the vocabulary (vocab.json / encoder.json) and the merges
 * (merges.txt / vocab.bpe), each len bytes (not NUL-terminated), named in errors as vocab_name and
 * merges_name. */
tg_status tg_tokenizer_gpt2_memory(const char *vocab, size_t vocab_len, const char *vocab_name, const char *merges,
                                   size_t merges_len, const char *merges_name, tg_tokenizer **out);

#endif
