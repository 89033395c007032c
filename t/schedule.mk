# t/schedule.mk — tests of the pipeline schedule library (lua/tegraph/schedule), run by `tegraph run`.
SCHEDULE_TESTS = \
	t/schedule-generators-pass-validate.lua \
	t/schedule-bubbles-match-formulas.lua \
	t/schedule-validate-names-the-offender.lua \
	t/schedule-svg-and-cli.lua \
	t/schedule-cli-bounds-its-input.lua \
	t/schedule-generators-bound-their-sizes.lua
TESTS += $(SCHEDULE_TESTS)
EXTRA_DIST += $(SCHEDULE_TESTS)
