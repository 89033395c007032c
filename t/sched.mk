# t/sched.mk — the schedule executor (src/sched, tegraph.schedule.execute): plans on modules and
# graphed callables, errors naming the action, its spans in the trace, the zero-bubble example.
SCHED_TESTS = \
	t/sched-executor-matches-sequential.lua \
	t/sched-executor-errors-name-the-action.lua \
	t/sched-trace-is-chrome-json.lua \
	t/sched-zero-bubble-example-runs.sh
TESTS += $(SCHED_TESTS)
EXTRA_DIST += $(SCHED_TESTS) examples/zero_bubble.lua
