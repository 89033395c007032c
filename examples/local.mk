# examples: the main job, an embedding host, benchmarks.
EXTRA_DIST += examples/hello.lua examples/gpt.lua examples/zero_bubble.lua examples/custom_reduce.lua \
	examples/bench/RESULTS.md examples/bench/layers.lua examples/bench/ops.lua examples/bench/graph_replay.lua examples/bench/allreduce.lua \
	examples/bench/optim.lua

# The embedding example: a C host using the public headers only (built by make check,
# run by t/embed-host-example.sh).
check_PROGRAMS += examples/embed/host
examples_embed_host_SOURCES = examples/embed/host.c
examples_embed_host_CPPFLAGS = $(AM_CPPFLAGS)
examples_embed_host_LDADD = libtegraph.la $(LUA_LIBS)

# A CPU GEMM benchmark (not run by make check): examples/bench/gemm [SIZES...]
noinst_PROGRAMS += examples/bench/gemm
examples_bench_gemm_SOURCES = examples/bench/gemm.c
examples_bench_gemm_LDADD = libtegraph.la
