# src/io: files and the process around training: safetensors (with a small strict JSON reader), atomic writes, opt-in signal catching.
libtegraph_la_SOURCES += \
	%D%/file.h %D%/file.c \
	%D%/json.h %D%/json.c \
	%D%/safetensors.h %D%/safetensors.c \
	%D%/signals.c
