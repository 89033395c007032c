# src/text: tokenizers (byte-level, GPT-2 byte-level BPE) and sampling from logits.
libtegraph_la_SOURCES += \
	%D%/text.h \
	%D%/tokenizer.c \
	%D%/sample.c
