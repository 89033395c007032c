# t/core.mk — tests of the core area: tensors, dtypes, RNG, the CPU backend's kernels, GEMM, capture/replay.
# Tests that use internal helpers (core.h, the backend vtable) link libtegraph statically (-static:
# libtool then links the uninstalled libtegraph.a, whose hidden symbols stay reachable).
check_PROGRAMS += \
	t/bf16-rounding-edge-cases.t \
	t/gemm-matches-f64-reference.t \
	t/rng-is-deterministic.t \
	t/capture-replay-matches-eager.t \
	t/tensor-views-share-storage.t \
	t/capi-null-arguments-are-refused.t \
	t/capi-devices-that-do-not-exist-are-refused.t \
	t/elementwise-ops.t \
	t/bad-ids-fail-the-replay-on-the-cpu-and-every-host-read.t
TESTS += \
	t/bf16-rounding-edge-cases.t \
	t/gemm-matches-f64-reference.t \
	t/rng-is-deterministic.t \
	t/capture-replay-matches-eager.t \
	t/tensor-views-share-storage.t \
	t/capi-null-arguments-are-refused.t \
	t/capi-devices-that-do-not-exist-are-refused.t \
	t/elementwise-ops.t \
	t/bad-ids-fail-the-replay-on-the-cpu-and-every-host-read.t

t_bf16_rounding_edge_cases_t_SOURCES = t/bf16-rounding-edge-cases.c
t_bf16_rounding_edge_cases_t_LDADD = $(TG_TEST_LIBS)
t_bf16_rounding_edge_cases_t_LDFLAGS = -static

t_gemm_matches_f64_reference_t_SOURCES = t/gemm-matches-f64-reference.c
t_gemm_matches_f64_reference_t_LDADD = $(TG_TEST_LIBS)
t_gemm_matches_f64_reference_t_LDFLAGS = -static

t_rng_is_deterministic_t_SOURCES = t/rng-is-deterministic.c
t_rng_is_deterministic_t_LDADD = $(TG_TEST_LIBS)
t_rng_is_deterministic_t_LDFLAGS = -static

t_capture_replay_matches_eager_t_SOURCES = t/capture-replay-matches-eager.c
t_capture_replay_matches_eager_t_LDADD = $(TG_TEST_LIBS)

t_tensor_views_share_storage_t_SOURCES = t/tensor-views-share-storage.c
t_tensor_views_share_storage_t_LDADD = $(TG_TEST_LIBS)

t_capi_null_arguments_are_refused_t_SOURCES = t/capi-null-arguments-are-refused.c
t_capi_null_arguments_are_refused_t_LDADD = $(TG_TEST_LIBS)

t_capi_devices_that_do_not_exist_are_refused_t_SOURCES = t/capi-devices-that-do-not-exist-are-refused.c
t_capi_devices_that_do_not_exist_are_refused_t_LDADD = $(TG_TEST_LIBS)

t_elementwise_ops_t_SOURCES = t/elementwise-ops.c
t_elementwise_ops_t_LDADD = $(TG_TEST_LIBS)
t_elementwise_ops_t_LDFLAGS = -static

t_bad_ids_fail_the_replay_on_the_cpu_and_every_host_read_t_SOURCES = t/bad-ids-fail-the-replay-on-the-cpu-and-every-host-read.c
t_bad_ids_fail_the_replay_on_the_cpu_and_every_host_read_t_LDADD = $(TG_TEST_LIBS)
t_bad_ids_fail_the_replay_on_the_cpu_and_every_host_read_t_LDFLAGS = -static
