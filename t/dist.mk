# t/dist.mk — tests of src/dist, lua/tegraph/reduce and the launcher. The mpirun ones run 2 ranks
# (`$TG_MPIRUN -np 2 --oversubscribe tegraph run t/dist/*.lua`) and skip without MPI.
DIST_LUA_TESTS = \
	t/dist-grad-buffer-layout.lua
DIST_SH_TESTS = \
	t/dist-comm-ops.sh \
	t/dist-collectives-captured-replay-like-eager.sh \
	t/dist-captured-collective-replayed-alone-fails.sh \
	t/dist-gpt-graph-full-on-ranks-gives-the-eager-losses.sh \
	t/dist-ddp-matches-single-process.sh \
	t/dist-zero1-matches-ddp.sh \
	t/dist-ddp-zero1-refuse-ranks-with-other-parameters.sh \
	t/dist-custom-reduce.sh \
	t/dist-failing-rank-stops-the-job.sh \
	t/dist-launcher-stops-ranks.sh \
	t/dist-launcher-passes-stop-signals-to-the-ranks.sh \
	t/dist-pipeline-matches-single-process.sh \
	t/dist-pipeline-peer-stops-the-run.sh \
	t/checkpoint-resume-is-exact.sh \
	t/dist-gpt-modes-give-the-eager-losses.sh \
	t/dist-zero-bubble-on-ranks.sh \
	t/dist-rank-exit-with-a-request-in-flight.sh \
	t/dist-gpt-rank-killed-mid-step.sh \
	t/dist-gpt-launchers-give-the-same-losses.sh \
	t/dist-gpt-bucket-size-sets-the-reduces-per-step.sh \
	t/dist-dp-scaling-bench-prints-the-table.sh \
	t/dist-dp-faults-bench-reports-the-lost-rank.sh
TESTS += $(DIST_LUA_TESTS) $(DIST_SH_TESTS)

check_PROGRAMS += t/dist-world-calls-outside-a-job.t
TESTS += t/dist-world-calls-outside-a-job.t
t_dist_world_calls_outside_a_job_t_SOURCES = t/dist-world-calls-outside-a-job.c
t_dist_world_calls_outside_a_job_t_LDADD = $(TG_TEST_LIBS)
EXTRA_DIST += $(DIST_LUA_TESTS) $(DIST_SH_TESTS) \
	t/dist/comm-ops.lua \
	t/dist/comm-capture.lua \
	t/dist/ddp-matches-single-process.lua \
	t/dist/zero1-matches-ddp.lua \
	t/dist/pipeline-matches-single-process.lua t/dist/pipeline-peer-stops.lua \
	t/lib/dist.sh t/lib/tap.sh t/lib/dist_tap.lua \
	examples/custom_reduce.lua
