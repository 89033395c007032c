# examples: the main job, an embedding host, benchmarks.
EXTRA_DIST += examples/hello.lua examples/gpt.lua examples/zero_bubble.lua examples/custom_reduce.lua \
	examples/bench/RESULTS.md examples/bench/layers.lua examples/bench/ops.lua examples/bench/graph_replay.lua examples/bench/allreduce.lua \
	examples/bench/optim.lua examples/bench/zero1_overlap.lua examples/bench/graph_memory.lua examples/bench/graph_full_iteration.lua examples/bench/lm_head.lua examples/bench/gpu/run.sh \
	examples/bench/peers/common.py examples/bench/peers/layers.py examples/bench/peers/gpt2.py \
	examples/bench/peers/allreduce.py examples/bench/peers/kernels.py examples/bench/peers/fp8_gemm.py examples/bench/peers/gpt2_hf_export.py \
	examples/bench/gpt2_hf_check.lua \
	examples/bench/bf16_study.lua examples/bench/bf16_study.sh examples/bench/dp_scaling.sh examples/bench/dp_faults.sh examples/bench/dp_common.sh examples/bench/bf16_grad_error.lua examples/bench/peers/gpt_twin.py

# The embedding example: a C host using the public headers only (built by make check,
# run by t/embed-host-example.sh).
check_PROGRAMS += examples/embed/host
examples_embed_host_SOURCES = examples/embed/host.c
examples_embed_host_CPPFLAGS = $(AM_CPPFLAGS)
examples_embed_host_LDADD = libtegraph.la $(LUA_LIBS) -lm

# A CPU GEMM benchmark (not run by make check): examples/bench/gemm [SIZES...]
noinst_PROGRAMS += examples/bench/gemm
examples_bench_gemm_SOURCES = examples/bench/gemm.c
examples_bench_gemm_LDADD = libtegraph.la
examples_bench_gemm_LDFLAGS = -static

# GPU FP8 and bf16 GEMM TFLOP/s (not run by make check): examples/bench/fp8_gemm [N [ITERS]]
noinst_PROGRAMS += examples/bench/fp8_gemm
examples_bench_fp8_gemm_SOURCES = examples/bench/fp8_gemm.c
examples_bench_fp8_gemm_LDADD = libtegraph.la

# Host cost of an eager kernel, layer by layer (not run by make check): examples/bench/launch [DEVICE]
# Uses internal headers, so it links libtegraph statically like the tests that do.
noinst_PROGRAMS += examples/bench/launch
examples_bench_launch_SOURCES = examples/bench/launch.c
examples_bench_launch_LDADD = libtegraph.la
examples_bench_launch_LDFLAGS = -static

# Tokenizer throughput on one core (not run by make check): examples/bench/tokenize [--tokenizer DIR] [FILE]
noinst_PROGRAMS += examples/bench/tokenize
examples_bench_tokenize_SOURCES = examples/bench/tokenize.c
examples_bench_tokenize_LDADD = libtegraph.la -lm
