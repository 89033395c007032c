# t/nn-ops.mk — tests of the transformer ops (ops_nn.h) on the CPU backend.
# They call internal functions (ops_nn.h), so they link libtegraph statically (-static: libtool then
# links the uninstalled libtegraph.a, whose hidden symbols stay reachable).
NN_OPS_TESTS = \
	t/nn-ops-match-finite-differences.t \
	t/nn-ops-bf16-close-to-f32.t \
	t/nn-ops-reject-bad-shapes.t \
	t/nn-ops-wgrad-overwrite-then-accumulate.t \
	t/nn-ops-bit-identical-across-runs-threads-and-replay.t \
	t/cross-entropy-ignores-index-and-averages-valid-rows.t \
	t/attention-is-causal.t \
	t/adamw-matches-hand-computed-step.t \
	t/adamw-multi-bit-identical-to-per-tensor.t \
	t/zero-multi-zeroes-each-tensor-and-nothing-around-it.t \
	t/gemm-epilogues-match-unfused-ops.t \
	t/norm-backward-res-equals-backward-plus-add.t

check_PROGRAMS += $(NN_OPS_TESTS)
TESTS += $(NN_OPS_TESTS)
EXTRA_DIST += t/nn-ops-util.h

t_nn_ops_match_finite_differences_t_SOURCES = t/nn-ops-match-finite-differences.c t/nn-ops-util.c
t_nn_ops_match_finite_differences_t_LDADD = $(TG_TEST_LIBS)
t_nn_ops_match_finite_differences_t_LDFLAGS = -static

t_nn_ops_bf16_close_to_f32_t_SOURCES = t/nn-ops-bf16-close-to-f32.c t/nn-ops-util.c
t_nn_ops_bf16_close_to_f32_t_LDADD = $(TG_TEST_LIBS)
t_nn_ops_bf16_close_to_f32_t_LDFLAGS = -static

t_nn_ops_reject_bad_shapes_t_SOURCES = t/nn-ops-reject-bad-shapes.c t/nn-ops-util.c
t_nn_ops_reject_bad_shapes_t_LDADD = $(TG_TEST_LIBS)
t_nn_ops_reject_bad_shapes_t_LDFLAGS = -static

t_nn_ops_wgrad_overwrite_then_accumulate_t_SOURCES = t/nn-ops-wgrad-overwrite-then-accumulate.c t/nn-ops-util.c
t_nn_ops_wgrad_overwrite_then_accumulate_t_LDADD = $(TG_TEST_LIBS)
t_nn_ops_wgrad_overwrite_then_accumulate_t_LDFLAGS = -static

t_nn_ops_bit_identical_across_runs_threads_and_replay_t_SOURCES = t/nn-ops-bit-identical-across-runs-threads-and-replay.c t/nn-ops-util.c
t_nn_ops_bit_identical_across_runs_threads_and_replay_t_LDADD = $(TG_TEST_LIBS)
t_nn_ops_bit_identical_across_runs_threads_and_replay_t_LDFLAGS = -static

t_cross_entropy_ignores_index_and_averages_valid_rows_t_SOURCES = t/cross-entropy-ignores-index-and-averages-valid-rows.c t/nn-ops-util.c
t_cross_entropy_ignores_index_and_averages_valid_rows_t_LDADD = $(TG_TEST_LIBS)
t_cross_entropy_ignores_index_and_averages_valid_rows_t_LDFLAGS = -static

t_attention_is_causal_t_SOURCES = t/attention-is-causal.c t/nn-ops-util.c
t_attention_is_causal_t_LDADD = $(TG_TEST_LIBS)
t_attention_is_causal_t_LDFLAGS = -static

t_adamw_matches_hand_computed_step_t_SOURCES = t/adamw-matches-hand-computed-step.c t/nn-ops-util.c
t_adamw_matches_hand_computed_step_t_LDADD = $(TG_TEST_LIBS)
t_adamw_matches_hand_computed_step_t_LDFLAGS = -static

t_adamw_multi_bit_identical_to_per_tensor_t_SOURCES = t/adamw-multi-bit-identical-to-per-tensor.c t/nn-ops-util.c
t_adamw_multi_bit_identical_to_per_tensor_t_LDADD = $(TG_TEST_LIBS)
t_adamw_multi_bit_identical_to_per_tensor_t_LDFLAGS = -static

t_zero_multi_zeroes_each_tensor_and_nothing_around_it_t_SOURCES = t/zero-multi-zeroes-each-tensor-and-nothing-around-it.c
t_zero_multi_zeroes_each_tensor_and_nothing_around_it_t_LDADD = $(TG_TEST_LIBS)
t_zero_multi_zeroes_each_tensor_and_nothing_around_it_t_LDFLAGS = -static

t_gemm_epilogues_match_unfused_ops_t_SOURCES = t/gemm-epilogues-match-unfused-ops.c t/nn-ops-util.c
t_gemm_epilogues_match_unfused_ops_t_LDADD = $(TG_TEST_LIBS)
t_gemm_epilogues_match_unfused_ops_t_LDFLAGS = -static

t_norm_backward_res_equals_backward_plus_add_t_SOURCES = t/norm-backward-res-equals-backward-plus-add.c t/nn-ops-util.c
t_norm_backward_res_equals_backward_plus_add_t_LDADD = $(TG_TEST_LIBS)
t_norm_backward_res_equals_backward_plus_add_t_LDFLAGS = -static
