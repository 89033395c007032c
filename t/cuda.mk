# t/cuda.mk — tests of the CUDA backend; each prints "1..0 # SKIP no CUDA device" without a GPU.
# The ones that call the backend vtables directly link libtegraph statically (see t/core.mk).
check_PROGRAMS += \
	t/cuda-ops-match-cpu.t \
	t/cuda-capture-replay.t \
	t/cuda-allocator-caches-blocks.t
TESTS += \
	t/cuda-ops-match-cpu.t \
	t/cuda-capture-replay.t \
	t/cuda-allocator-caches-blocks.t

t_cuda_ops_match_cpu_t_SOURCES = t/cuda-ops-match-cpu.c
t_cuda_ops_match_cpu_t_LDADD = $(TG_TEST_LIBS)
t_cuda_ops_match_cpu_t_LDFLAGS = -static

t_cuda_capture_replay_t_SOURCES = t/cuda-capture-replay.c
t_cuda_capture_replay_t_LDADD = $(TG_TEST_LIBS)

t_cuda_allocator_caches_blocks_t_SOURCES = t/cuda-allocator-caches-blocks.c
t_cuda_allocator_caches_blocks_t_LDADD = $(TG_TEST_LIBS)
t_cuda_allocator_caches_blocks_t_LDFLAGS = -static
