# t/fp8.mk — FP8 training: recipes and the scale update, modules in FP8, fp8_autocast, the amax reduce over two
# ranks (mpirun; skips without MPI) and the GPU against the CPU (skips without a device). The mode matrix in FP8
# is in t/graph.mk.
FP8_TRAINING_TESTS = t/fp8-scale-update-matches-hand-computed.lua t/fp8-producers-equal-the-unfused-chain.lua t/fp8-linear-equals-gemm-of-dequantized-operands.lua t/cuda-fp8-layer-matches-cpu.lua \
	t/fp8-autocast-and-module-option.lua t/fp8-evaluation-between-steps-keeps-the-scaling-state.lua
TESTS += $(FP8_TRAINING_TESTS) t/dist-fp8-amax-reduce-makes-the-scales-agree.sh t/checkpoint-fp8-resume-is-exact.sh
EXTRA_DIST += $(FP8_TRAINING_TESTS) t/dist-fp8-amax-reduce-makes-the-scales-agree.sh t/checkpoint-fp8-resume-is-exact.sh t/dist/fp8-amax-reduce.lua

check_PROGRAMS += t/fp8-set-fp8-refusals-have-the-documented-status.t
TESTS += t/fp8-set-fp8-refusals-have-the-documented-status.t
t_fp8_set_fp8_refusals_have_the_documented_status_t_SOURCES = t/fp8-set-fp8-refusals-have-the-documented-status.c
t_fp8_set_fp8_refusals_have_the_documented_status_t_LDADD = $(TG_TEST_LIBS) $(LUA_LIBS)
