/* fp8_dbias.cu — the second stage of the bias gradient of an FP8 gradient cast (struct tg_fp8_dbias_args): the
 * chunks' column partials summed in double in a fixed order, and stored as a wgrad (colsum.cuh's second stage). */
#include "colsum.cuh"

extern "C" cudaError_t tg_cuda_fp8_dbias(const float *part, int64_t chunks, int64_t c, void *dbias, tg_dtype dw_dt,
                                         float accumulate, cudaStream_t st)
{
    if (c <= 0) return cudaSuccess;
    return tgk_colsum_final_launch<1>(part, chunks, c, dbias, NULL, dw_dt, accumulate, st);
}
