# src/core: tensors, storage and pools, streams and graphs, ops, errors, RNG, token-file decoding.
libtegraph_la_SOURCES += \
	%D%/core.h \
	%D%/checked.h \
	%D%/error.c \
	%D%/debug.h %D%/debug.c \
	%D%/dtype.c \
	%D%/device.c \
	%D%/memory.c \
	%D%/tensor.c \
	%D%/stream.c \
	%D%/event.c \
	%D%/ops.c \
	%D%/ops_check.h \
	%D%/ops_nn.h \
	%D%/ops_nn.c \
	%D%/ops_optim.h \
	%D%/ops_optim.c \
	%D%/ops_fp8_scale.c \
	%D%/ops_fp8.c \
	%D%/rng.c \
	%D%/data.h %D%/data.c
