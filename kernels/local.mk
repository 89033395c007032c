# kernels: one CUDA op per file, each with a launcher taking the stream.
EXTRA_DIST += %D%/kernels.h %D%/common.cuh %D%/colsum.cuh %D%/norm.cuh %D%/fp8.cuh %D%/fp8_cast.cuh %D%/gelu.cuh
if HAVE_CUDA
libtegraph_la_SOURCES += \
	%D%/fill.cu \
	%D%/cast.cu \
	%D%/binary.cu \
	%D%/axpby.cu \
	%D%/reduce.cu \
	%D%/rand.cu \
	%D%/layernorm.cu \
	%D%/rmsnorm.cu \
	%D%/gelu.cu \
	%D%/swiglu.cu \
	%D%/bias.cu \
	%D%/attention.cu \
	%D%/attention_kv.cu \
	%D%/embedding.cu \
	%D%/cross_entropy.cu \
	%D%/index_check.cu \
	%D%/cast_check.cu \
	%D%/adamw.cu \
	%D%/sumsq_multi.cu \
	%D%/zero_multi.cu \
	%D%/copy_multi.cu \
	%D%/fp8_cast.cu \
	%D%/fp8_cast_gelu.cu \
	%D%/fp8_layernorm.cu \
	%D%/fp8_dbias.cu \
	%D%/fp8_transpose.cu \
	%D%/fp8_dequantize.cu \
	%D%/fp8_amax.cu \
	%D%/fp8_scale_update.cu
# nvcc has no dependency tracking here: the objects follow the headers they include.
%D%/layernorm.lo %D%/rmsnorm.lo %D%/fp8_layernorm.lo: %D%/norm.cuh %D%/fp8.cuh
%D%/layernorm.lo %D%/rmsnorm.lo %D%/fp8_layernorm.lo %D%/bias.lo %D%/attention.lo %D%/embedding.lo %D%/fp8_dbias.lo: %D%/colsum.cuh
%D%/fill.lo %D%/cast.lo %D%/binary.lo %D%/axpby.lo %D%/reduce.lo %D%/rand.lo %D%/layernorm.lo %D%/rmsnorm.lo \
%D%/gelu.lo %D%/swiglu.lo %D%/bias.lo %D%/attention.lo %D%/embedding.lo %D%/cross_entropy.lo %D%/index_check.lo %D%/cast_check.lo %D%/adamw.lo \
%D%/sumsq_multi.lo %D%/zero_multi.lo %D%/copy_multi.lo %D%/attention_kv.lo %D%/fp8_cast.lo %D%/fp8_transpose.lo %D%/fp8_dequantize.lo \
%D%/fp8_amax.lo %D%/fp8_scale_update.lo %D%/fp8_dbias.lo %D%/fp8_cast_gelu.lo %D%/fp8_layernorm.lo: %D%/common.cuh %D%/kernels.h
%D%/fp8_cast.lo %D%/fp8_cast_gelu.lo %D%/fp8_dequantize.lo %D%/fp8_amax.lo: %D%/fp8.cuh
%D%/fp8_cast.lo %D%/fp8_cast_gelu.lo: %D%/fp8_cast.cuh
%D%/gelu.lo %D%/fp8_cast.lo %D%/fp8_cast_gelu.lo: %D%/gelu.cuh
# attention's wgmma forward needs the sm_90a image: with the sm_90 target, attention.cu builds it plus compute_90
# PTX (configure's CUDA_ARCH_SM90A; other targets build as the rest).
%D%/attention.lo: NVCC_ARCH = $(CUDA_ARCH_SM90A)
# nvcc's host code (kernel registration, static guards) needs the C++ runtime.
libtegraph_la_LIBADD += -lstdc++
endif
