# t/trace.mk — backend events and the trace (tg.trace): CPU, one process, 2 MPI ranks, GPU.
check_PROGRAMS += \
	t/event-times-stream-work-and-captured-replays.t \
	t/cuda-events-and-trace-time-device-work.t \
	t/trace-ends-with-the-lua-state-that-began-it.t \
	t/trace-file-is-json-whatever-the-spans-say.t
TRACE_LUA_TESTS = \
	t/trace-has-a-span-per-module-phase.lua
TRACE_SH_TESTS = \
	t/dist-trace-shows-reduce-per-bucket.sh
TESTS += \
	t/event-times-stream-work-and-captured-replays.t \
	t/cuda-events-and-trace-time-device-work.t \
	t/trace-ends-with-the-lua-state-that-began-it.t \
	t/trace-file-is-json-whatever-the-spans-say.t \
	$(TRACE_LUA_TESTS) $(TRACE_SH_TESTS)
EXTRA_DIST += $(TRACE_LUA_TESTS) $(TRACE_SH_TESTS) t/dist/trace-ddp.lua t/lib/json.lua

t_event_times_stream_work_and_captured_replays_t_SOURCES = t/event-times-stream-work-and-captured-replays.c
t_event_times_stream_work_and_captured_replays_t_LDADD = $(TG_TEST_LIBS)

t_cuda_events_and_trace_time_device_work_t_SOURCES = t/cuda-events-and-trace-time-device-work.c
t_cuda_events_and_trace_time_device_work_t_LDADD = $(TG_TEST_LIBS)

t_trace_ends_with_the_lua_state_that_began_it_t_SOURCES = t/trace-ends-with-the-lua-state-that-began-it.c
t_trace_ends_with_the_lua_state_that_began_it_t_LDADD = $(TG_TEST_LIBS) $(LUA_LIBS)

t_trace_file_is_json_whatever_the_spans_say_t_SOURCES = t/trace-file-is-json-whatever-the-spans-say.c
t_trace_file_is_json_whatever_the_spans_say_t_LDADD = $(TG_TEST_LIBS)
t_trace_file_is_json_whatever_the_spans_say_t_LDFLAGS = -static
