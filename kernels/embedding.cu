/* embedding.cu — token + position embedding forward, and a deterministic wgrad: token ids sorted with their positions, then one warp per run of equal ids (and 256-column slice) summing its rows in position order. */
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

/* ------------------------------------------------------------------ runs of equal ids
 * After the stable sort, the tokens of one id are a run of sorted indices in
 * increasing position. A run is cut into chunks of R sorted indices; a warp
 * sums one chunk over one slice of 32 * VEC columns (VEC per lane, in double,
 * in position order). A run of one chunk is stored straight into dwte; a
 * longer one (a frequent id) leaves each chunk's sum in scratch and a second
 * kernel adds the chunks in order, so no warp walks a long run alone. Sorted
 * index s starts a chunk when it starts its run or lies a multiple of R after
 * the start. Scratch slots: 2 per window of R sorted indices (one for a run's
 * first chunk, one for a later chunk: a window holds at most one of each). */

#define EMB_VEC 8    /* columns per lane on the vector path: one 16-byte load of bf16 */
#define EMB_UNROLL 8 /* rows a lane has in flight */

/* VEC consecutive elements from i (VEC == 8: i a multiple of 8, p 16-byte aligned). */
template <int VEC> static __device__ __forceinline__ void emb_load(const void *p, tg_dtype dt, int64_t i, float *x)
{
    if (VEC == 8 && dt == TG_BF16) {
        const uint4 u = *(const uint4 *)((const uint16_t *)p + i);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            x[2 * k] = __uint_as_float(w[k] << 16);
            x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    } else if (VEC == 8) {
        const float4 a = *(const float4 *)((const float *)p + i), b = *(const float4 *)((const float *)p + i + 4);
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) x[k] = tgk_load(p, dt, i + k);
    }
}

/* p[i..i+VEC) = acc * p + g, element by element as tgk_store_wgrad. */
template <int VEC>
static __device__ __forceinline__ void emb_store_wgrad(void *p, tg_dtype dt, int64_t i, float acc, const double *g)
{
    float old[VEC], y[VEC];
    if (acc != 0.0f) emb_load<VEC>(p, dt, i, old);
#pragma unroll
    for (int k = 0; k < VEC; k++) y[k] = (float)(acc == 0.0f ? g[k] : (double)acc * old[k] + g[k]);
    if (VEC == 8 && dt == TG_BF16) {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = (uint32_t)tgk_f32_to_bf16(y[2 * k]) | (uint32_t)tgk_f32_to_bf16(y[2 * k + 1]) << 16;
        *(uint4 *)((uint16_t *)p + i) = make_uint4(w[0], w[1], w[2], w[3]);
    } else if (VEC == 8) {
        *(float4 *)((float *)p + i) = make_float4(y[0], y[1], y[2], y[3]);
        *(float4 *)((float *)p + i + 4) = make_float4(y[4], y[5], y[6], y[7]);
    } else {
#pragma unroll
        for (int k = 0; k < VEC; k++) tgk_store(p, dt, i + k, y[k]);
    }
}

/* First index in [0, n) whose key is >= key (the keys are sorted). */
static __device__ int64_t emb_lower_bound(const uint32_t *keys, int64_t n, uint32_t key)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (keys[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static __device__ __forceinline__ int64_t emb_slot(int64_t s, int64_t r, bool first) { return 2 * (s / r) + (first ? 1 : 0); }

/* Warp (s, slice): the chunk starting at sorted index s, if one does. */
template <int VEC>
static __global__ void embedding_dwte_chunks_kernel(void *dwte, tg_dtype dwte_dt, const void *dout, tg_dtype dt,
                                                    const uint32_t *keys, const int32_t *pos, int64_t bt, int64_t c,
                                                    uint32_t v, int64_t r, double *part, float accumulate)
{
    const int64_t nslices = (c + 32 * VEC - 1) / (32 * VEC);
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (warp >= bt * nslices) return; /* whole warps: blockDim is a multiple of 32 */
    const int64_t s = warp / nslices, col = (warp - s * nslices) * 32 * VEC + (int64_t)lane * VEC;
    const uint32_t key = keys[s];
    if (key >= v) return; /* ids outside the table sort last and are skipped */
    int64_t start = s;
    if (s > 0 && keys[s - 1] == key) {
        if (s < r || keys[s - r] != key) return; /* inside a chunk */
        start = emb_lower_bound(keys, s, key);
        if ((s - start) % r != 0) return;
    }
    const bool split = start + r < bt && keys[start + r] == key; /* the run is longer than a chunk */
    const int64_t end = s + r < bt ? s + r : bt;
    double acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = 0.0;
    for (int64_t base = s; base < end; base += 32) {
        /* the positions of the next 32 sorted tokens, one a lane; the run's are a prefix */
        const int64_t si = base + lane;
        const bool in = si < end && keys[si] == key;
        const int32_t p = in ? pos[si] : 0;
        const int n = __popc(__ballot_sync(0xffffffffu, in));
        for (int i = 0; i < n; i += EMB_UNROLL) {
            float x[EMB_UNROLL][VEC];
#pragma unroll
            for (int u = 0; u < EMB_UNROLL; u++) {
                const int64_t row = __shfl_sync(0xffffffffu, p, (i + u) & 31);
                if (i + u < n && col < c) emb_load<VEC>(dout, dt, row * c + col, x[u]);
            }
#pragma unroll
            for (int u = 0; u < EMB_UNROLL; u++)
                if (i + u < n)
#pragma unroll
                    for (int k = 0; k < VEC; k++) acc[k] += x[u][k];
        }
        if (n < 32) break;
    }
    if (col >= c) return;
    if (!split) {
        emb_store_wgrad<VEC>(dwte, dwte_dt, (int64_t)key * c + col, accumulate, acc);
        return;
    }
    double *dst = part + emb_slot(s, r, s == start) * c + col;
#pragma unroll
    for (int k = 0; k < VEC; k++) dst[k] = acc[k];
}

/* Warp (s, slice) for each run longer than a chunk, starting at s: its chunks' sums added in order. */
template <int VEC>
static __global__ void embedding_dwte_join_kernel(void *dwte, tg_dtype dwte_dt, const uint32_t *keys, int64_t bt,
                                                  int64_t c, uint32_t v, int64_t r, const double *part, float accumulate)
{
    const int64_t nslices = (c + 32 * VEC - 1) / (32 * VEC);
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (warp >= bt * nslices) return;
    const int64_t s = warp / nslices, col = (warp - s * nslices) * 32 * VEC + (int64_t)lane * VEC;
    const uint32_t key = keys[s];
    if (key >= v || (s > 0 && keys[s - 1] == key) || !(s + r < bt && keys[s + r] == key) || col >= c) return;
    double acc[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] = 0.0;
    for (int64_t q = s; q < bt && keys[q] == key; q += r) {
        const double *src = part + emb_slot(q, r, q == s) * c + col;
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] += src[k];
    }
    emb_store_wgrad<VEC>(dwte, dwte_dt, (int64_t)key * c + col, accumulate, acc);
}

/* Rows of dwte whose id does not occur: acc * dwte (zeros when acc is 0). One warp a row. */
template <int VEC>
static __global__ void embedding_dwte_absent_kernel(void *dwte, tg_dtype dwte_dt, const uint32_t *keys, int64_t bt,
                                                    int64_t c, int64_t v, float accumulate)
{
    const int lane = threadIdx.x & 31;
    const int64_t nwarps = (int64_t)gridDim.x * blockDim.x / 32;
    double zero[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) zero[k] = 0.0;
    for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < v; row += nwarps) {
        const int64_t at = emb_lower_bound(keys, bt, (uint32_t)row);
        if (at < bt && keys[at] == (uint32_t)row) continue;
        for (int64_t col = (int64_t)lane * VEC; col < c; col += 32 * VEC)
            emb_store_wgrad<VEC>(dwte, dwte_dt, row * c + col, accumulate, zero);
    }
}

/* dwpe rows [0, t) = acc * dwpe + sum over b of dout[b, t] (in order, in double); rows >= t = acc * dwpe.
 * A thread per VEC columns of a row: consecutive threads read consecutive 16 bytes of a dout row. */
template <int VEC>
static __global__ void embedding_dwpe_kernel(void *dwpe, tg_dtype dwpe_dt, const void *dout, tg_dtype dt, int64_t b,
                                             int64_t t, int64_t c, int64_t tmax, float accumulate)
{
    const int64_t groups = c / VEC;
    TGK_GRID_STRIDE(i, tmax * groups)
    {
        const int64_t tt = i / groups, j = (i - tt * groups) * VEC;
        double acc[VEC];
        float x[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) acc[k] = 0.0;
        if (tt < t)
            for (int64_t bb = 0; bb < b; bb++) {
                emb_load<VEC>(dout, dt, (bb * t + tt) * c + j, x);
#pragma unroll
                for (int k = 0; k < VEC; k++) acc[k] += x[k];
            }
        emb_store_wgrad<VEC>(dwpe, dwpe_dt, tt * c + j, accumulate, acc);
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

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Warps (s, slice) over the sorted tokens. */
template <int VEC>
static cudaError_t dwte_runs(void *dwte, tg_dtype dwte_dt, const void *dout, tg_dtype dt, const uint32_t *skeys,
                             const int32_t *svals, int64_t bt, int64_t c, int64_t v, int64_t r, double *part,
                             float accumulate, cudaStream_t st)
{
    const int64_t nslices = (c + 32 * VEC - 1) / (32 * VEC), warps = bt * nslices;
    const unsigned threads = 256, blocks = (unsigned)((warps * 32 + threads - 1) / threads);
    cudaError_t e;
    if (accumulate != 1.0f) { /* rows no token touches still get acc * dwte */
        const int64_t b = (v * 32 + threads - 1) / threads;
        embedding_dwte_absent_kernel<VEC><<<(unsigned)(b < 65536 ? b : 65536), threads, 0, st>>>(dwte, dwte_dt, skeys, bt, c,
                                                                                               v, accumulate);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (bt == 0) return cudaSuccess;
    embedding_dwte_chunks_kernel<VEC><<<blocks, threads, 0, st>>>(dwte, dwte_dt, dout, dt, skeys, svals, bt, c,
                                                                  (uint32_t)v, r, part, accumulate);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if (r >= bt) return cudaSuccess; /* no run is longer than a chunk */
    embedding_dwte_join_kernel<VEC><<<blocks, threads, 0, st>>>(dwte, dwte_dt, skeys, bt, c, (uint32_t)v, r, part,
                                                                accumulate);
    return cudaGetLastError();
}

#define EMB_CHUNK 64 /* sorted tokens a warp sums before a run is split */

extern "C" cudaError_t tg_cuda_embedding_backward_dw(void *dwte, void *dwpe, const void *dout, const int32_t *idx,
                                                     tg_dtype dt, tg_dtype dwte_dt, tg_dtype dwpe_dt, int64_t b,
                                                     int64_t t, int64_t c, int64_t v, int64_t tmax, float accumulate,
                                                     void *scratch, size_t scratch_bytes, cudaStream_t st)
{
    const int64_t bt = b * t;
    cudaError_t e;
    if (dwte && v > 0 && c > 0) {
        if (bt > INT32_MAX || v >= (int64_t)UINT32_MAX) return cudaErrorInvalidValue;
        /* scratch: keys, vals, sorted keys, sorted vals, cub's temporary storage, chunk sums */
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
            temp = align256(temp);
            if (4 * arr + temp > scratch_bytes) return cudaErrorInvalidValue; /* too many tokens for the scratch */
            embedding_keys_kernel<<<tgk_blocks(bt), TGK_THREADS, 0, st>>>(keys, vals, idx, bt, v);
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
            e = cub::DeviceRadixSort::SortPairs(p + 4 * arr, temp, keys, skeys, vals, svals, (int)bt, 0, end_bit, st);
            if (e != cudaSuccess) return e;
        }
        /* the chunk length: the smallest power of two from EMB_CHUNK whose sums fit the scratch
         * (a function of the shapes only, so the summation order is the same every run) */
        const size_t used = 4 * arr + temp, left = scratch_bytes > used ? scratch_bytes - used : 0;
        int64_t r = EMB_CHUNK;
        while (r < bt && (size_t)(2 * ((bt + r - 1) / r)) * (size_t)c * sizeof(double) > left) r *= 2;
        double *part = (double *)(p + used);
        const bool vec = c % EMB_VEC == 0 && aligned16(dwte) && aligned16(dout);
        e = vec ? dwte_runs<EMB_VEC>(dwte, dwte_dt, dout, dt, skeys, svals, bt, c, v, r, part, accumulate, st)
                : dwte_runs<1>(dwte, dwte_dt, dout, dt, skeys, svals, bt, c, v, r, part, accumulate, st);
        if (e != cudaSuccess) return e;
    }
    if (dwpe && tmax * c > 0) {
        if (c % EMB_VEC == 0 && aligned16(dwpe) && aligned16(dout))
            embedding_dwpe_kernel<EMB_VEC><<<tgk_blocks(tmax * c / EMB_VEC), TGK_THREADS, 0, st>>>(
                dwpe, dwpe_dt, dout, dt, b, t, c, tmax, accumulate);
        else
            embedding_dwpe_kernel<1><<<tgk_blocks(tmax * c), TGK_THREADS, 0, st>>>(dwpe, dwpe_dt, dout, dt, b, t, c,
                                                                                    tmax, accumulate);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    return cudaSuccess;
}
