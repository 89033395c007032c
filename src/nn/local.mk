# src/nn: modules (forward / dgrad / wgrad), parameters, wgrad store, hooks, step engine.
libtegraph_la_SOURCES += \
	%D%/nn.h \
	%D%/engine.c \
	%D%/param.c \
	%D%/module.c \
	%D%/sequential.c \
	%D%/linear.c \
	%D%/fp8.c \
	%D%/norm.c \
	%D%/layernorm_linear.c \
	%D%/layernorm_mlp.c \
	%D%/attention.c \
	%D%/transformer_layer.c \
	%D%/embedding.c \
	%D%/lm_head.c \
	%D%/callback.c
