# t/lua.mk — tests of the lua area: Lua scripts run by `tegraph run`, shell tests of the CLI,
# the stock interpreter and the embedding example.
LUA_TESTS = \
	t/lua-tensor-api.lua \
	t/lua-errors-name-the-problem.lua \
	t/lua-capture-replay.lua \
	t/debug-switches-are-named-and-read-once.lua \
	t/cli-parse-accepts-gpt-flags-and-rejects-bad-ones.lua \
	t/lifetimes-across-the-lua-boundary.lua \
	t/size-arithmetic-is-checked.lua \
	t/accepted-but-wrong-is-refused.lua \
	t/lua-library-errors-name-the-argument.lua
LUA_SH_TESTS = \
	t/cli-exit-codes.sh \
	t/cli-run-help-and-e-on-ranks.sh \
	t/cli-progress-on-ranks-without-a-terminal-is-plain-lines.sh \
	t/require-from-stock-lua.sh \
	t/embed-host-example.sh \
	t/pkg-config-links-the-static-library.sh \
	t/examples-hello-runs.sh \
	t/program-finds-lua-only-where-installed.sh
TESTS += $(LUA_TESTS) $(LUA_SH_TESTS)

check_PROGRAMS += t/runtime-call-passes-arguments.t
TESTS += t/runtime-call-passes-arguments.t
t_runtime_call_passes_arguments_t_SOURCES = t/runtime-call-passes-arguments.c
t_runtime_call_passes_arguments_t_LDADD = $(TG_TEST_LIBS)

check_PROGRAMS += t/runtime-loads-lua-source-only.t
TESTS += t/runtime-loads-lua-source-only.t
t_runtime_loads_lua_source_only_t_SOURCES = t/runtime-loads-lua-source-only.c
t_runtime_loads_lua_source_only_t_LDADD = $(TG_TEST_LIBS)

check_PROGRAMS += t/step-ends-with-the-lua-state-that-began-it.t
TESTS += t/step-ends-with-the-lua-state-that-began-it.t
t_step_ends_with_the_lua_state_that_began_it_t_SOURCES = t/step-ends-with-the-lua-state-that-began-it.c
t_step_ends_with_the_lua_state_that_began_it_t_LDADD = $(TG_TEST_LIBS)
EXTRA_DIST += $(LUA_TESTS) $(LUA_SH_TESTS)
