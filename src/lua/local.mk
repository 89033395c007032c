# src/lua: the Lua bindings (the only place that calls lua_*) and the embedding runtime.
libtegraph_la_SOURCES += \
	%D%/lua_impl.h \
	%D%/runtime.c \
	%D%/lua_core.c \
	%D%/lua_tensor.c \
	%D%/lua_stream.c \
	%D%/lua_bind.h %D%/lua_bind.c \
	%D%/lua_step.c \
	%D%/lua_nn.h %D%/lua_nn.c %D%/lua_param.c %D%/lua_module.c %D%/lua_nn_new.c %D%/lua_ops.c %D%/lua_fp8.c %D%/lua_fp8_recipe.c \
	%D%/lua_data.h %D%/lua_data.c \
	%D%/lua_graph.h %D%/lua_graph.c \
	%D%/lua_sched.h %D%/lua_sched.c \
	%D%/lua_trace.c \
	%D%/lua_io.c \
	%D%/lua_text.c \
	%D%/lua_comm.h %D%/lua_comm.c

# The C module for stock interpreters: require "tegraph" finds lua/tegraph/init.lua,
# which loads tegraph.core from this module (Lua's all-in-one loader: tegraph.so).
luacmod_LTLIBRARIES = lua/tegraph.la
lua_tegraph_la_SOURCES = %D%/module.c
lua_tegraph_la_LDFLAGS = -module -avoid-version -shared
lua_tegraph_la_LIBADD = libtegraph.la
