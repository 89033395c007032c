# src/dist: communicators (MPI for CPU tensors, NCCL for CUDA tensors) and grad buffers.
libtegraph_la_SOURCES += \
	%D%/comm.h %D%/comm_impl.h \
	%D%/comm.c \
	%D%/comm_mpi.c \
	%D%/comm_nccl.c \
	%D%/gradbuf.c
