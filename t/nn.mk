# t/nn.mk — tests of the nn area: modules against float64 finite differences, delayed vs immediate wgrad,
# hooks and the step check, bad input, bf16 against f32, W in B order. They use internal headers (src/nn/nn.h), so they
# link libtegraph statically (-static: libtool links the uninstalled libtegraph.a, hidden symbols included).
NN_TESTS = \
	t/nn-modules-match-finite-differences.t \
	t/nn-delayed-wgrad-is-bit-identical.t \
	t/nn-hooks-fire-once-after-wgrad.t \
	t/nn-bad-input-errors.t \
	t/nn-bf16-modules-match-f32.t \
	t/transformer-layer-backward-fuses-residual-adds.t \
	t/layernorm-mlp-gelu-backward-fuses-dgelu.t \
	t/nn-backward-dw-follows-b-order.t
check_PROGRAMS += $(NN_TESTS)
TESTS += $(NN_TESTS)
EXTRA_DIST += t/nn-ref.h

t_nn_modules_match_finite_differences_t_SOURCES = t/nn-modules-match-finite-differences.c t/nn-ref.c t/nn-ref.h
t_nn_modules_match_finite_differences_t_LDADD = $(TG_TEST_LIBS)
t_nn_modules_match_finite_differences_t_LDFLAGS = -static

t_nn_delayed_wgrad_is_bit_identical_t_SOURCES = t/nn-delayed-wgrad-is-bit-identical.c
t_nn_delayed_wgrad_is_bit_identical_t_LDADD = $(TG_TEST_LIBS)
t_nn_delayed_wgrad_is_bit_identical_t_LDFLAGS = -static

t_nn_hooks_fire_once_after_wgrad_t_SOURCES = t/nn-hooks-fire-once-after-wgrad.c
t_nn_hooks_fire_once_after_wgrad_t_LDADD = $(TG_TEST_LIBS)
t_nn_hooks_fire_once_after_wgrad_t_LDFLAGS = -static

t_nn_bad_input_errors_t_SOURCES = t/nn-bad-input-errors.c
t_nn_bad_input_errors_t_LDADD = $(TG_TEST_LIBS)
t_nn_bad_input_errors_t_LDFLAGS = -static

t_nn_bf16_modules_match_f32_t_SOURCES = t/nn-bf16-modules-match-f32.c
t_nn_bf16_modules_match_f32_t_LDADD = $(TG_TEST_LIBS)
t_nn_bf16_modules_match_f32_t_LDFLAGS = -static

t_transformer_layer_backward_fuses_residual_adds_t_SOURCES = t/transformer-layer-backward-fuses-residual-adds.c t/nn-ops-util.c
t_transformer_layer_backward_fuses_residual_adds_t_LDADD = $(TG_TEST_LIBS)
t_transformer_layer_backward_fuses_residual_adds_t_LDFLAGS = -static

t_layernorm_mlp_gelu_backward_fuses_dgelu_t_SOURCES = t/layernorm-mlp-gelu-backward-fuses-dgelu.c t/nn-ops-util.c
t_layernorm_mlp_gelu_backward_fuses_dgelu_t_LDADD = $(TG_TEST_LIBS)
t_layernorm_mlp_gelu_backward_fuses_dgelu_t_LDFLAGS = -static

t_nn_backward_dw_follows_b_order_t_SOURCES = t/nn-backward-dw-follows-b-order.c
t_nn_backward_dw_follows_b_order_t_LDADD = $(TG_TEST_LIBS)
t_nn_backward_dw_follows_b_order_t_LDFLAGS = -static
