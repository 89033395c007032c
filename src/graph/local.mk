# src/graph: graphed callables (capture per chunk and microbatch, checked replay, hooks after wgrad replays).
libtegraph_la_SOURCES += \
	%D%/graphed.h \
	%D%/graphed.c
