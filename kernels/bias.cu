/* bias.cu — bias add over rows (in place), the bias wgrad as deterministic column sums, and the GEMM bias-grad helpers. */
#include "colsum.cuh"

static __global__ void bias_add_kernel(void *y, const void *bias, tg_dtype dt, int64_t n, int64_t c)
{
    TGK_GRID_STRIDE(i, n * c)
    {
        const int64_t j = i % c;
        tgk_store(y, dt, i, tgk_load(y, dt, i) + tgk_load(bias, dt, j));
    }
}

/* bf16 with c a multiple of 8 and 16-byte aligned buffers: 8 elements (one row segment) per 16-byte access. */
static __global__ void bias_add_vec8(uint4 *y, const uint4 *bias, int64_t n8, int64_t c8)
{
    TGK_GRID_STRIDE(i, n8)
    {
        const uint4 u = y[i], b = bias[i % c8];
        const uint32_t w[4] = {u.x, u.y, u.z, u.w}, v[4] = {b.x, b.y, b.z, b.w};
        uint32_t o[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float lo = tgk_bf16_to_f32((uint16_t)(w[k] & 0xffffu)) + tgk_bf16_to_f32((uint16_t)(v[k] & 0xffffu));
            float hi = tgk_bf16_to_f32((uint16_t)(w[k] >> 16)) + tgk_bf16_to_f32((uint16_t)(v[k] >> 16));
            o[k] = (uint32_t)tgk_f32_to_bf16(lo) | (uint32_t)tgk_f32_to_bf16(hi) << 16;
        }
        y[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}

extern "C" cudaError_t tg_cuda_bias_add(void *y, const void *bias, tg_dtype dt, int64_t n, int64_t c, cudaStream_t st)
{
    if (n <= 0 || c <= 0) return cudaSuccess;
    if (dt == TG_BF16 && c % 8 == 0 && (((uintptr_t)y | (uintptr_t)bias) & 15) == 0) {
        bias_add_vec8<<<tgk_blocks(n * c / 8), TGK_THREADS, 0, st>>>((uint4 *)y, (const uint4 *)bias, n * c / 8, c / 8);
        return cudaGetLastError();
    }
    bias_add_kernel<<<tgk_blocks(n * c), TGK_THREADS, 0, st>>>(y, bias, dt, n, c);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_bias_backward_dw(void *dbias, const void *dy, tg_dtype dt, tg_dtype dw_dt, int64_t n,
                                                int64_t c, float accumulate, float *scratch, size_t scratch_bytes,
                                                cudaStream_t st)
{
    return tgk_colsum_rows(dy, dt, c, n, c, dbias, dw_dt, accumulate, scratch, scratch_bytes, st);
}

/* A GEMM operand's bias grad: term (p, i) is op(A)[i][p], A stored (k, m) when trans_a else (m, k). */
struct gemm_bgrad_term {
    const void *a;
    tg_dtype dt;
    int64_t lda;
    int trans_a;
    __device__ void operator()(int64_t p, int64_t i, float *acc) const
    {
        acc[0] += tgk_load(a, dt, trans_a ? p * lda + i : i * lda + p);
    }
};

extern "C" cudaError_t tg_cuda_gemm_bgrad(void *bgrad, tg_dtype bgrad_dt, const void *a, tg_dtype a_dt, int trans_a,
                                          int64_t lda, int64_t m, int64_t k, float accumulate, float *scratch,
                                          size_t scratch_bytes, cudaStream_t st)
{
    /* trans_a: A is (k, m) with rows of m contiguous, a plain column sum (the wgrad's dy) */
    if (trans_a) return tgk_colsum_rows(a, a_dt, lda, k, m, bgrad, bgrad_dt, accumulate, scratch, scratch_bytes, st);
    gemm_bgrad_term f = {a, a_dt, lda, trans_a};
    return tgk_colsum<1>(f, k, m, bgrad, NULL, bgrad_dt, accumulate, scratch, scratch_bytes, st);
}

static __global__ void bias_accumulate_kernel(void *out, tg_dtype out_dt, const void *part, tg_dtype part_dt, int64_t n,
                                              float accumulate)
{
    TGK_GRID_STRIDE(i, n) { tgk_store_wgrad(out, out_dt, i, accumulate, tgk_load(part, part_dt, i)); }
}

extern "C" cudaError_t tg_cuda_bias_accumulate(void *out, tg_dtype out_dt, const void *part, tg_dtype part_dt, int64_t n,
                                               float accumulate, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    bias_accumulate_kernel<<<tgk_blocks(n), TGK_THREADS, 0, st>>>(out, out_dt, part, part_dt, n, accumulate);
    return cudaGetLastError();
}
