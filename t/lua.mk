# t/lua.mk — tests of the lua area: Lua scripts run by `tegraph run`, shell tests of the CLI,
# the stock interpreter and the embedding example.
LUA_TESTS = \
	t/lua-tensor-api.lua \
	t/lua-errors-name-the-problem.lua \
	t/lua-capture-replay.lua \
	t/cli-parse-accepts-gpt-flags-and-rejects-bad-ones.lua
LUA_SH_TESTS = \
	t/cli-exit-codes.sh \
	t/require-from-stock-lua.sh \
	t/embed-host-example.sh \
	t/examples-hello-runs.sh \
	t/program-finds-lua-only-where-installed.sh
TESTS += $(LUA_TESTS) $(LUA_SH_TESTS)
EXTRA_DIST += $(LUA_TESTS) $(LUA_SH_TESTS)
