# t/cuda.mk — tests of the CUDA backend; each prints "1..0 # SKIP no CUDA device" without a GPU.
# The ones that call the backend vtables directly link libtegraph statically (see t/core.mk).
check_PROGRAMS += \
	t/cuda-ops-match-cpu.t \
	t/cuda-capture-replay.t \
	t/cuda-allocator-caches-blocks.t \
	t/cuda-nn-ops-match-cpu.t \
	t/cuda-fp8-producers-match-cpu.t
TESTS += \
	t/cuda-ops-match-cpu.t \
	t/cuda-capture-replay.t \
	t/cuda-allocator-caches-blocks.t \
	t/cuda-nn-ops-match-cpu.t \
	t/cuda-fp8-producers-match-cpu.t

t_cuda_fp8_producers_match_cpu_t_SOURCES = t/cuda-fp8-producers-match-cpu.c t/cuda-test-util.c t/cuda-test-util.h
t_cuda_fp8_producers_match_cpu_t_LDADD = $(TG_TEST_LIBS)
t_cuda_fp8_producers_match_cpu_t_LDFLAGS = -static

t_cuda_ops_match_cpu_t_SOURCES = t/cuda-ops-match-cpu.c t/cuda-test-util.c t/cuda-test-util.h
t_cuda_ops_match_cpu_t_LDADD = $(TG_TEST_LIBS)
t_cuda_ops_match_cpu_t_LDFLAGS = -static

t_cuda_capture_replay_t_SOURCES = t/cuda-capture-replay.c
t_cuda_capture_replay_t_LDADD = $(TG_TEST_LIBS)

t_cuda_allocator_caches_blocks_t_SOURCES = t/cuda-allocator-caches-blocks.c
t_cuda_allocator_caches_blocks_t_LDADD = $(TG_TEST_LIBS)
t_cuda_allocator_caches_blocks_t_LDFLAGS = -static

t_cuda_nn_ops_match_cpu_t_SOURCES = t/cuda-nn-ops-match-cpu.c t/cuda-test-util.c t/cuda-test-util.h
t_cuda_nn_ops_match_cpu_t_LDADD = $(TG_TEST_LIBS)
t_cuda_nn_ops_match_cpu_t_LDFLAGS = -static

check_PROGRAMS += t/cuda-attention-wgmma-matches-cpu.t
TESTS += t/cuda-attention-wgmma-matches-cpu.t
t_cuda_attention_wgmma_matches_cpu_t_SOURCES = t/cuda-attention-wgmma-matches-cpu.c t/cuda-test-util.c t/cuda-test-util.h
t_cuda_attention_wgmma_matches_cpu_t_LDADD = $(TG_TEST_LIBS)
t_cuda_attention_wgmma_matches_cpu_t_LDFLAGS = -static

check_PROGRAMS += t/cuda-attention-wgmma-backward-matches-cpu.t
TESTS += t/cuda-attention-wgmma-backward-matches-cpu.t
t_cuda_attention_wgmma_backward_matches_cpu_t_SOURCES = t/cuda-attention-wgmma-backward-matches-cpu.c t/cuda-test-util.c t/cuda-test-util.h
t_cuda_attention_wgmma_backward_matches_cpu_t_LDADD = $(TG_TEST_LIBS)
t_cuda_attention_wgmma_backward_matches_cpu_t_LDFLAGS = -static

check_PROGRAMS += t/cuda-modules-match-cpu.t
TESTS += t/cuda-modules-match-cpu.t
t_cuda_modules_match_cpu_t_SOURCES = t/cuda-modules-match-cpu.c
t_cuda_modules_match_cpu_t_LDADD = $(TG_TEST_LIBS)
t_cuda_modules_match_cpu_t_LDFLAGS = -static

# Modules against PyTorch autograd (skips where torch is not importable).
TESTS += t/cuda-modules-match-torch.sh
EXTRA_DIST += t/cuda-modules-match-torch.sh t/torch-check.lua t/torch_check.py

# The CUPTI kernel profiler of examples/bench/gpu (skips without a device or CUPTI).
TESTS += t/cuda-kprof-counts-kernels.sh
EXTRA_DIST += t/cuda-kprof-counts-kernels.sh examples/bench/gpu/kprof.c examples/bench/gpu/kprof-build.sh

# Lua tests of the CUDA backend (they skip without a device).
CUDA_LUA_TESTS = t/cuda-bad-ids-fail-at-the-next-read.lua t/cuda-lm-head-fused-matches-cpu.lua
TESTS += $(CUDA_LUA_TESTS)
EXTRA_DIST += $(CUDA_LUA_TESTS)
