# t/fp8-ops.mk — tests of the FP8 tensor layer: the E4M3 / E5M2 casts, the FP8 GEMM (CPU; the CUDA ones skip
# without a device).
check_PROGRAMS += \
	t/fp8-cast-rounds-to-nearest-even-and-saturates.t \
	t/fp8-cast-dbias-equals-gelu-backward-cast-and-column-sums.t \
	t/fp8-producer-casts-equal-the-unfused-ops.t \
	t/fp8-gemm-equals-f64-product-of-dequantized.t \
	t/fp8-scale-update-refuses-shared-memory.t
TESTS += \
	t/fp8-cast-rounds-to-nearest-even-and-saturates.t \
	t/fp8-cast-dbias-equals-gelu-backward-cast-and-column-sums.t \
	t/fp8-producer-casts-equal-the-unfused-ops.t \
	t/fp8-gemm-equals-f64-product-of-dequantized.t \
	t/fp8-scale-update-refuses-shared-memory.t

t_fp8_cast_rounds_to_nearest_even_and_saturates_t_SOURCES = t/fp8-cast-rounds-to-nearest-even-and-saturates.c
t_fp8_cast_rounds_to_nearest_even_and_saturates_t_LDADD = $(TG_TEST_LIBS)
t_fp8_cast_rounds_to_nearest_even_and_saturates_t_LDFLAGS = -static

t_fp8_cast_dbias_equals_gelu_backward_cast_and_column_sums_t_SOURCES = t/fp8-cast-dbias-equals-gelu-backward-cast-and-column-sums.c \
	t/nn-ops-util.c
t_fp8_cast_dbias_equals_gelu_backward_cast_and_column_sums_t_LDADD = $(TG_TEST_LIBS)
t_fp8_cast_dbias_equals_gelu_backward_cast_and_column_sums_t_LDFLAGS = -static

t_fp8_producer_casts_equal_the_unfused_ops_t_SOURCES = t/fp8-producer-casts-equal-the-unfused-ops.c t/nn-ops-util.c
t_fp8_producer_casts_equal_the_unfused_ops_t_LDADD = $(TG_TEST_LIBS)
t_fp8_producer_casts_equal_the_unfused_ops_t_LDFLAGS = -static

t_fp8_gemm_equals_f64_product_of_dequantized_t_SOURCES = t/fp8-gemm-equals-f64-product-of-dequantized.c
t_fp8_gemm_equals_f64_product_of_dequantized_t_LDADD = $(TG_TEST_LIBS)
t_fp8_gemm_equals_f64_product_of_dequantized_t_LDFLAGS = -static

check_PROGRAMS += t/cuda-fp8-matches-cpu.t
TESTS += t/cuda-fp8-matches-cpu.t
t_cuda_fp8_matches_cpu_t_SOURCES = t/cuda-fp8-matches-cpu.c t/cuda-test-util.c t/cuda-test-util.h
t_cuda_fp8_matches_cpu_t_LDADD = $(TG_TEST_LIBS)
t_cuda_fp8_matches_cpu_t_LDFLAGS = -static

FP8_LUA_TESTS = t/fp8-lua-ops-cast-dequantize-and-gemm.lua t/fp8-casts-of-empty-matrices.lua
TESTS += $(FP8_LUA_TESTS)
EXTRA_DIST += $(FP8_LUA_TESTS)

t_fp8_scale_update_refuses_shared_memory_t_SOURCES = t/fp8-scale-update-refuses-shared-memory.c
t_fp8_scale_update_refuses_shared_memory_t_LDADD = $(TG_TEST_LIBS)
