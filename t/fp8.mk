# t/fp8.mk — FP8 training: recipes and the scale update, modules in FP8, fp8_autocast, the mode matrix in FP8
# (t/graph.mk) and the amax reduce over two ranks (t/dist.mk).
FP8_TRAINING_TESTS = t/fp8-scale-update-matches-hand-computed.lua t/fp8-linear-equals-gemm-of-dequantized-operands.lua \
	t/fp8-autocast-and-module-option.lua
TESTS += $(FP8_TRAINING_TESTS) t/dist-fp8-amax-reduce-makes-the-scales-agree.sh
EXTRA_DIST += $(FP8_TRAINING_TESTS) t/dist-fp8-amax-reduce-makes-the-scales-agree.sh t/dist/fp8-amax-reduce.lua
