# src/core: tensors, storage and pools, streams and graphs, ops, errors, RNG.
libtegraph_la_SOURCES += \
	%D%/core.h \
	%D%/error.c \
	%D%/debug.h %D%/debug.c \
	%D%/dtype.c \
	%D%/device.c \
	%D%/memory.c \
	%D%/tensor.c \
	%D%/stream.c \
	%D%/event.c \
	%D%/span.h %D%/span.c \
	%D%/ops.c \
	%D%/ops_nn.h \
	%D%/ops_nn.c \
	%D%/rng.c
