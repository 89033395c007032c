/* text.h — tokenizers (tokenizer.c) and sampling from logits (sample.c); the declarations are public, in tegraph.h. */
#ifndef TG_TEXT_H
#define TG_TEXT_H

#include "core/core.h"

#endif
