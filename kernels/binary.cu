/* binary.cu — out = a op b elementwise (add, sub, mul, div) in f32, stored as f32 or bf16. */
#include "common.cuh"

/* The _rn intrinsics keep nvcc from fusing into FMAs, so results are the
 * CPU backend's to the bit. */
template <int OP> static __device__ __forceinline__ float apply(float x, float y)
{
    if (OP == TG_ADD) return __fadd_rn(x, y);
    if (OP == TG_SUB) return __fsub_rn(x, y);
    if (OP == TG_MUL) return __fmul_rn(x, y);
    return __fdiv_rn(x, y);
}

template <int OP> static __global__ void binary_kernel(const void *a, const void *b, void *out, tg_dtype dt, int64_t n)
{
    TGK_GRID_STRIDE(i, n) tgk_store(out, dt, i, apply<OP>(tgk_load(a, dt, i), tgk_load(b, dt, i)));
}

extern "C" cudaError_t tg_cuda_binary(tg_binop op, const void *a, const void *b, void *out, tg_dtype dt, int64_t n,
                                      cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (dt != TG_F32 && dt != TG_BF16) return cudaErrorInvalidValue;
    unsigned g = tgk_blocks(n);
    switch (op) {
    case TG_ADD: binary_kernel<TG_ADD><<<g, TGK_THREADS, 0, st>>>(a, b, out, dt, n); break;
    case TG_SUB: binary_kernel<TG_SUB><<<g, TGK_THREADS, 0, st>>>(a, b, out, dt, n); break;
    case TG_MUL: binary_kernel<TG_MUL><<<g, TGK_THREADS, 0, st>>>(a, b, out, dt, n); break;
    case TG_DIV: binary_kernel<TG_DIV><<<g, TGK_THREADS, 0, st>>>(a, b, out, dt, n); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
