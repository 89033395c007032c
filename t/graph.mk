# t/graph.mk — graphed callables: the mode matrix, the TransformerEngine regression, bad use.
GRAPH_LUA_TESTS = t/graph-mode-matrix.lua t/graph-mode-matrix-fp8.lua t/graph-mode-matrix-fp8-current.lua t/graph-full-iteration-capture-equals-eager.lua t/graph-mode-matrix-transformer-layers.lua t/graph-bad-use-errors.lua \
	t/capture-keeps-the-hook-contract.lua t/graph-replay-on-stream-free-and-delay-switch.lua \
	t/forward-pre-hooks-fire-before-forward-and-replay.lua t/graph-shares-microbatch-graphs-only-when-lifetimes-allow.lua \
	t/train-graph-modules-matches-eager.lua t/graph-chain-hands-outputs-on-without-copies.lua \
	t/graph-reuses-static-buffers-across-microbatches.lua t/graph-chunks-take-several-inputs.lua t/graph-chunks-take-lists-of-inputs.lua \
	t/train-graph-full-iteration-matches-eager.lua
TESTS += $(GRAPH_LUA_TESTS)
EXTRA_DIST += $(GRAPH_LUA_TESTS) t/lib/mode_matrix.lua
