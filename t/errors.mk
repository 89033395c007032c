# t/errors.mk — bad inputs whose errors must say what and where: the library's Lua errors at the user's
# line, long messages with their cause, names and sizes in allocation and file errors, collectives whose
# ranks disagree or depart, sends and barriers whose ranks disagree.
ERRORS_LUA_TESTS = \
	t/errors-library-points-at-the-callers-line.lua \
	t/errors-say-what-and-where.lua
ERRORS_SH_TESTS = \
	t/dist-ranks-disagree-or-depart.sh \
	t/dist-p2p-and-barrier-disagree.sh \
	t/launcher-tells-ranks-of-a-departed-peer.sh
TESTS += $(ERRORS_LUA_TESTS) $(ERRORS_SH_TESTS)
EXTRA_DIST += $(ERRORS_LUA_TESTS) $(ERRORS_SH_TESTS)

check_PROGRAMS += t/errors-long-messages-keep-their-cause.t
TESTS += t/errors-long-messages-keep-their-cause.t
t_errors_long_messages_keep_their_cause_t_SOURCES = t/errors-long-messages-keep-their-cause.c
t_errors_long_messages_keep_their_cause_t_LDADD = $(TG_TEST_LIBS)
t_errors_long_messages_keep_their_cause_t_LDFLAGS = -static
