/* embedding.cu — token + position embedding forward, and a deterministic wgrad: a stable sort of tokens by id, then one block per vocabulary row. */
#include "colsum.cuh"

#include <cub/cub.cuh>

static __global__ void embedding_forward_kernel(void *out, const int32_t *idx, const void *wte, const void *wpe,
                                                tg_dtype dt, int64_t bt, int64_t t, int64_t c, int64_t v)
{
    TGK_GRID_STRIDE(i, bt * c)
    {
        const int64_t r = i / c, j = i - r * c, id = idx[r];
        float x = id >= 0 && id < v ? tgk_load(wte, dt, id * c + j) : 0.0f;
        if (wpe) x += tgk_load(wpe, dt, (r % t) * c + j);
        tgk_store(out, dt, i, x);
    }
}

/* keys[r] = id (ids outside [0, v) get key v and sort last), vals[r] = r. */
static __global__ void embedding_keys_kernel(uint32_t *keys, int32_t *vals, const int32_t *idx, int64_t bt, int64_t v)
{
    TGK_GRID_STRIDE(r, bt)
    {
        const int32_t id = idx[r];
        keys[r] = id >= 0 && id < v ? (uint32_t)id : (uint32_t)v;
        vals[r] = (int32_t)r;
    }
}

/* Row `row` of dwte: acc * dwte + the dout rows of its tokens, summed in
 * increasing position (the stable sort kept that order), in double: the CPU
 * reference's order, so the result is the same. */
static __global__ void embedding_dwte_kernel(void *dwte, tg_dtype dwte_dt, const void *dout, tg_dtype dt,
                                             const uint32_t *keys, const int32_t *pos, int64_t bt, int64_t c, int64_t v,
                                             float accumulate)
{
    for (int64_t row = blockIdx.x; row < v; row += gridDim.x) {
        int64_t lo = 0, hi = bt; /* first sorted key >= row */
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (keys[mid] < (uint32_t)row) lo = mid + 1;
            else hi = mid;
        }
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
            double acc = 0.0;
            for (int64_t s = lo; s < bt && keys[s] == (uint32_t)row; s++) acc += tgk_load(dout, dt, (int64_t)pos[s] * c + j);
            tgk_store_wgrad(dwte, dwte_dt, row * c + j, accumulate, acc);
        }
    }
}

/* dwpe rows [0, t) = acc * dwpe + sum over b of dout[b, t]; rows >= t = acc * dwpe. */
static __global__ void embedding_dwpe_kernel(void *dwpe, tg_dtype dwpe_dt, const void *dout, tg_dtype dt, int64_t b,
                                             int64_t t, int64_t c, int64_t tmax, float accumulate)
{
    TGK_GRID_STRIDE(i, tmax * c)
    {
        const int64_t tt = i / c, j = i - tt * c;
        double acc = 0.0;
        if (tt < t)
            for (int64_t k = 0; k < b; k++) acc += tgk_load(dout, dt, (k * t + tt) * c + j);
        tgk_store_wgrad(dwpe, dwpe_dt, i, accumulate, acc);
    }
}

extern "C" cudaError_t tg_cuda_embedding_forward(void *out, const int32_t *idx, const void *wte, const void *wpe,
                                                 tg_dtype dt, int64_t b, int64_t t, int64_t c, int64_t v,
                                                 cudaStream_t st)
{
    if (b * t * c <= 0) return cudaSuccess;
    embedding_forward_kernel<<<tgk_blocks(b * t * c), TGK_THREADS, 0, st>>>(out, idx, wte, wpe, dt, b * t, t, c, v);
    return cudaGetLastError();
}

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

extern "C" cudaError_t tg_cuda_embedding_backward_dw(void *dwte, void *dwpe, const void *dout, const int32_t *idx,
                                                     tg_dtype dt, tg_dtype dwte_dt, tg_dtype dwpe_dt, int64_t b,
                                                     int64_t t, int64_t c, int64_t v, int64_t tmax, float accumulate,
                                                     void *scratch, size_t scratch_bytes, cudaStream_t st)
{
    const int64_t bt = b * t;
    cudaError_t e;
    if (dwte && v > 0 && c > 0) {
        if (bt > INT32_MAX || v >= (int64_t)UINT32_MAX) return cudaErrorInvalidValue;
        /* scratch: keys, vals, sorted keys, sorted vals, cub's temporary storage */
        const size_t arr = align256((size_t)(bt > 0 ? bt : 1) * 4);
        char *p = (char *)scratch;
        uint32_t *keys = (uint32_t *)p, *skeys = (uint32_t *)(p + 2 * arr);
        int32_t *vals = (int32_t *)(p + arr), *svals = (int32_t *)(p + 3 * arr);
        int end_bit = 1;
        while (end_bit < 32 && ((uint64_t)1 << end_bit) <= (uint64_t)v) end_bit++; /* keys <= v */
        size_t temp = 0;
        if (bt > 0) {
            e = cub::DeviceRadixSort::SortPairs(NULL, temp, keys, skeys, vals, svals, (int)bt, 0, end_bit, st);
            if (e != cudaSuccess) return e;
            if (4 * arr + temp > scratch_bytes) return cudaErrorInvalidValue; /* too many tokens for the scratch */
            embedding_keys_kernel<<<tgk_blocks(bt), TGK_THREADS, 0, st>>>(keys, vals, idx, bt, v);
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
            e = cub::DeviceRadixSort::SortPairs(p + 4 * arr, temp, keys, skeys, vals, svals, (int)bt, 0, end_bit, st);
            if (e != cudaSuccess) return e;
        }
        const unsigned grid = (unsigned)(v < 65536 * 4 ? v : 65536 * 4);
        const unsigned threads = c >= 256 ? 256 : (unsigned)((c + 31) / 32 * 32);
        embedding_dwte_kernel<<<grid, threads, 0, st>>>(dwte, dwte_dt, dout, dt, skeys, svals, bt, c, v, accumulate);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (dwpe && tmax * c > 0) {
        embedding_dwpe_kernel<<<tgk_blocks(tmax * c), TGK_THREADS, 0, st>>>(dwpe, dwpe_dt, dout, dt, b, t, c, tmax,
                                                                            accumulate);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    return cudaSuccess;
}
