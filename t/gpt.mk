# t/gpt.mk — tests of the gpt area: tegraph.nn from Lua (modules, hooks, Lua layers, the microbatch protocol), the optimizer,
# token files, and the main job examples/gpt.lua.
GPT_LUA_TESTS = \
	t/lua-nn-modules-from-lua.lua \
	t/lua-nn-constructors-take-torch-names.lua \
	t/lua-hooks-fire-once-per-microbatch.lua \
	t/lua-custom-module-in-sequential.lua \
	t/lua-microbatch-protocol.lua \
	t/lm-head-fused-loss-matches-unfused.lua \
	t/adamw-matches-hand-computed-step.lua \
	t/adamw-foreach-matches-per-tensor.lua \
	t/adamw-capturable-replay-equals-eager-steps.lua \
	t/adamw-capturable-clipped-replay-equals-eager.lua \
	t/adamw-capturable-bad-use-errors.lua \
	t/data-bin-files-load-and-fail-clearly.lua \
	t/gpt-example-loss-falls.lua \
	t/gpt-graph-full-gives-the-eager-losses.lua \
	t/safetensors-round-trip-and-bad-files.lua \
	t/gpt2-weights-in-and-out.lua \
	t/gpt-refuses-bad-options-up-front.lua \
	t/gpt-resume-refuses-other-options-and-continues-its-log.lua \
	t/gpt-max-skips-stops-a-run-of-skipped-steps.lua \
	t/gpt-and-generate-refuse-bad-options.lua \
	t/optim-refuses-bad-arguments.lua \
	t/ops-copy-multi-copies-each-pair.lua \
	t/checkpoint-refuses-duplicate-parameter-names.lua \
	t/checkpoint-options-and-files-are-checked.lua \
	t/bf16-study-pairs-inputs-and-emulates-autocast.lua
GPT_SH_TESTS = \
	t/gpt-graph-without-hook-dispatch-fails-at-step-end.sh \
	t/gpt-on-nan-stops-or-skips.sh
TESTS += $(GPT_LUA_TESTS) $(GPT_SH_TESTS)
EXTRA_DIST += $(GPT_LUA_TESTS) $(GPT_SH_TESTS) examples/gpt.lua
# Text in and out: tokenizers, text files, generation with a KV cache.
TEXT_LUA_TESTS = \
	t/text-bpe-merges-by-rank-and-round-trips.lua \
	t/text-kv-cache-decoding-matches-full-recompute.lua \
	t/text-gpt-trains-on-a-text-file.lua \
	t/checkpoint-text-run-generates-from-its-checkpoint.lua
TESTS += $(TEXT_LUA_TESTS)
EXTRA_DIST += $(TEXT_LUA_TESTS) t/lib/small_bpe.lua examples/generate.lua
