# src/sched: the schedule executor (per-stage action lists on modules or graphed callables), transports, traces.
libtegraph_la_SOURCES += \
	%D%/executor.h \
	%D%/executor.c \
	%D%/trace.h \
	%D%/trace.c \
	%D%/devtrace.c
libtegraph_la_SOURCES += %D%/transport_comm.h %D%/transport_comm.c
