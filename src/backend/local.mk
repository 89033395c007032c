# src/backend: the backend vtable; the CPU reference backend and the CUDA host side.
libtegraph_la_SOURCES += \
	%D%/backend.h \
	%D%/native.c \
	%D%/cpu.c \
	%D%/cpu_kernels.c \
	%D%/cpu_gemm.c \
	%D%/cpu_nn.c \
	%D%/cpu_fp8_scale.c \
	%D%/cpu_fp8.c \
	%D%/cpu_impl.h
if HAVE_CUDA
libtegraph_la_SOURCES += %D%/cuda.c %D%/cuda_alloc.c %D%/cuda_stream.c %D%/cuda_gemm.c %D%/cuda_fp8.c %D%/cuda_impl.h
endif
