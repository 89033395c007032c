# src/trace: the trace recorder (spans on the compute, comm, host and pipeline-stage tracks) and its Chrome JSON writer.
libtegraph_la_SOURCES += \
	%D%/trace.h \
	%D%/trace.c \
	%D%/chrome.c
