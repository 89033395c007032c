/* cpu_impl.h — internals shared by the CPU backend files: command submission and kernel entries. */
#ifndef TG_CPU_IMPL_H
#define TG_CPU_IMPL_H

#include "backend/backend.h"

/* A kernel body: runs one call with its argument struct. Kernels do not fail
 * (arguments are validated before submission). */
typedef void (*cpu_fn)(const void *args);

/* Runs fn(args) at once, or, while s captures, appends {fn, a copy of the
 * `size` bytes at args} to the graph being recorded (replayed later with the
 * same addresses). Fails only with TG_ENOMEM while recording. */
tg_status cpu_submit(tg_stream *s, cpu_fn fn, const void *args, size_t size);

/* Elementwise loops above this many elements run with OpenMP; results never
 * depend on the thread count. */
#define CPU_PAR_MIN 65536

/* Kernel entries of the vtable (cpu_kernels.c, cpu_gemm.c). */
tg_status cpu_fill(tg_stream *s, const struct tg_fill_args *a);
tg_status cpu_cast(tg_stream *s, const struct tg_cast_args *a);
tg_status cpu_binary(tg_stream *s, const struct tg_binary_args *a);
tg_status cpu_axpby(tg_stream *s, const struct tg_axpby_args *a);
tg_status cpu_reduce(tg_stream *s, const struct tg_reduce_args *a);
tg_status cpu_rand(tg_stream *s, const struct tg_rand_args *a);
tg_status cpu_gemm(tg_stream *s, const struct tg_gemm_args *a);

/* Transformer kernel entries (cpu_nn.c). */
tg_status cpu_layernorm_forward(tg_stream *s, const struct tg_layernorm_forward_args *a);
tg_status cpu_layernorm_forward_fp8(tg_stream *s, const struct tg_layernorm_fp8_args *a);
tg_status cpu_layernorm_backward(tg_stream *s, const struct tg_layernorm_backward_args *a);
tg_status cpu_layernorm_backward_dw(tg_stream *s, const struct tg_layernorm_backward_dw_args *a);
tg_status cpu_rmsnorm_forward(tg_stream *s, const struct tg_rmsnorm_forward_args *a);
tg_status cpu_rmsnorm_backward(tg_stream *s, const struct tg_rmsnorm_backward_args *a);
tg_status cpu_rmsnorm_backward_dw(tg_stream *s, const struct tg_rmsnorm_backward_dw_args *a);
tg_status cpu_gelu_forward(tg_stream *s, const struct tg_gelu_forward_args *a);
tg_status cpu_gelu_backward(tg_stream *s, const struct tg_gelu_backward_args *a);
tg_status cpu_swiglu_forward(tg_stream *s, const struct tg_swiglu_forward_args *a);
tg_status cpu_swiglu_backward(tg_stream *s, const struct tg_swiglu_backward_args *a);
tg_status cpu_bias_add(tg_stream *s, const struct tg_bias_add_args *a);
tg_status cpu_bias_backward_dw(tg_stream *s, const struct tg_bias_backward_dw_args *a);
tg_status cpu_attention_forward(tg_stream *s, const struct tg_attention_forward_args *a);
tg_status cpu_attention_kv(tg_stream *s, const struct tg_attention_kv_args *a);
tg_status cpu_attention_backward(tg_stream *s, const struct tg_attention_backward_args *a);
tg_status cpu_embedding_forward(tg_stream *s, const struct tg_embedding_forward_args *a);
tg_status cpu_embedding_backward_dw(tg_stream *s, const struct tg_embedding_backward_dw_args *a);
tg_status cpu_cross_entropy_forward(tg_stream *s, const struct tg_cross_entropy_forward_args *a);
tg_status cpu_cross_entropy_backward(tg_stream *s, const struct tg_cross_entropy_backward_args *a);
tg_status cpu_cross_entropy_fused(tg_stream *s, const struct tg_cross_entropy_fused_args *a);
tg_status cpu_cross_entropy_mean(tg_stream *s, const struct tg_cross_entropy_mean_args *a);
tg_status cpu_adamw(tg_stream *s, const struct tg_adamw_args *a);
tg_status cpu_adamw_multi(tg_stream *s, const struct tg_adamw_multi_args *a);
tg_status cpu_adamw_count(tg_stream *s, const struct tg_adamw_count_args *a);
tg_status cpu_sumsq_multi(tg_stream *s, const struct tg_sumsq_multi_args *a);
tg_status cpu_zero_multi(tg_stream *s, const struct tg_zero_multi_args *a);
tg_status cpu_copy_multi(tg_stream *s, const struct tg_copy_multi_args *a);
tg_status cpu_fp8_scale_update(tg_stream *s, const struct tg_fp8_scale_update_args *a); /* cpu_fp8_scale.c */

/* FP8 kernel entries (cpu_fp8.c). */
tg_status cpu_fp8_cast(tg_stream *s, const struct tg_fp8_cast_args *a);
tg_status cpu_fp8_cast_gelu(tg_stream *s, const struct tg_fp8_cast_args *a);
tg_status cpu_fp8_dbias(tg_stream *s, const struct tg_fp8_dbias_args *a);
tg_status cpu_fp8_transpose(tg_stream *s, const struct tg_fp8_transpose_args *a);
tg_status cpu_fp8_dequantize(tg_stream *s, const struct tg_fp8_dequantize_args *a);
tg_status cpu_fp8_amax(tg_stream *s, const struct tg_fp8_amax_args *a);
tg_status cpu_fp8_gemm(tg_stream *s, const struct tg_fp8_gemm_args *a);

/* 64-byte aligned host memory for kernel workspaces (NULL on failure). */
void *cpu_aligned_alloc(size_t bytes);

#endif
