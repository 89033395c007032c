# src/sched: the schedule executor (per-stage action lists on modules or graphed callables) and its transports.
libtegraph_la_SOURCES += \
	%D%/executor.h \
	%D%/executor.c
libtegraph_la_SOURCES += %D%/transport_comm.h %D%/transport_comm.c
