/* fp8_cast.cuh — the cast-transpose kernel the FP8 casts share (fp8_cast.cu: a tensor or a gradient, with gelu'
 * and the bias partials; fp8_cast_gelu.cu: a GELU output from its pre-activation). For g = x, x_dt(x * gelu'(gx))
 * or x_dt(gelu(x)) (gelu.cuh's formulas, rounded as the unfused ops store them): y = fp8(g * scale) and/or its
 * transpose y_t, amax = max|g| and scale_inv = 1 / scale, through a shared 64 x 64 tile so the reads and both writes
 * are coalesced; the gradient form also writes the column sums of g per chunk of 64-row tiles (the bias gradient's
 * first stage). Each thread loads both of its 8-element groups of a tile (16-byte vectors where the shape and
 * pointers allow it, element by element otherwise: the same codes, amax and sums either way) before converting
 * either, and bf16 blocks are held to 32-40 registers so 6-8 of them share an SM: occupancy, not loads per thread,
 * is what keeps enough bytes in flight here (a variant that also prefetched the next tile, at 48-56 registers,
 * was slower on every shape measured). */
#ifndef TG_KERNELS_FP8_CAST_CUH
#define TG_KERNELS_FP8_CAST_CUH

#include "fp8.cuh"
#include "gelu.cuh"

#define TGK_CT_TILE 64                                     /* the rows of tg_fp8_dbias_chunks' tiles */
#define TGK_CT_THREADS 256                                 /* 8 groups across a tile row x 32 rows */
#define TGK_CT_ROWS (TGK_CT_THREADS / (TGK_CT_TILE / TGK_VEC)) /* tile rows per pass */
#define TGK_CT_PASSES (TGK_CT_TILE / TGK_CT_ROWS)

enum { TGK_CT_DBIAS = 1, TGK_CT_DGELU = 2, TGK_CT_GELU = 4 };
/* Blocks an SM must hold (the register budget) on whole bf16 tiles: 8 (32 registers), 6 with bias sums or a second
 * input; no bound on edge tiles or f32. */
#define TGK_CT_MIN_BLOCKS(MODE, BF16) ((BF16) ? ((MODE) & (TGK_CT_DBIAS | TGK_CT_DGELU) ? 6 : 8) : 1)

/* 8 elements as stored: bf16 bits in pairs (4 words) or f32 bits (8 words). */
template <bool BF16> struct tgk_raw8 {
    uint32_t w[BF16 ? 4 : 8];
};

/* The n (<= 8) elements of x from i, the rest 0; one vector load when vec and n == 8, nothing read when n == 0. */
template <bool BF16> static __device__ __forceinline__ tgk_raw8<BF16> tgk_raw_load(const void *x, int64_t i, int n, int vec)
{
    tgk_raw8<BF16> r;
    if (vec && n == TGK_VEC) {
        const uint4 *p = (const uint4 *)((const char *)x + i * (BF16 ? 2 : 4));
#pragma unroll
        for (int q = 0; q < (BF16 ? 1 : 2); q++) {
            const uint4 u = p[q];
            r.w[4 * q] = u.x, r.w[4 * q + 1] = u.y, r.w[4 * q + 2] = u.z, r.w[4 * q + 3] = u.w;
        }
        return r;
    }
#pragma unroll
    for (int k = 0; k < (BF16 ? 4 : 8); k++) r.w[k] = 0;
#pragma unroll
    for (int k = 0; k < TGK_VEC; k++)
        if (k < n) {
            if (BF16)
                r.w[k / 2] |= (uint32_t)((const uint16_t *)x)[i + k] << (16 * (k % 2));
            else
                r.w[k] = ((const uint32_t *)x)[i + k];
        }
    return r;
}

template <bool BF16> static __device__ __forceinline__ void tgk_raw_unpack(const tgk_raw8<BF16> &r, float v[TGK_VEC])
{
#pragma unroll
    for (int k = 0; k < TGK_VEC; k++)
        v[k] = BF16 ? __uint_as_float(k % 2 ? r.w[k / 2] & 0xffff0000u : r.w[k / 2] << 16) : __uint_as_float(r.w[k]);
}

/* Tile t's groups of this thread (rows t * 64 + ri + 32 p, columns c .. c + cn): x, and gx when DGELU. */
template <bool DGELU, bool BF16, bool FULL>
static __device__ __forceinline__ void tgk_ct_fetch(const void *x, const void *gx, int64_t t, int ri, int64_t c, int cn,
                                                    int64_t rows, int64_t cols, int vec, tgk_raw8<BF16> a[],
                                                    tgk_raw8<BF16> h[])
{
#pragma unroll
    for (int p = 0; p < TGK_CT_PASSES; p++) {
        const int64_t r = t * TGK_CT_TILE + ri + p * TGK_CT_ROWS, i = r * cols + c;
        const int n = FULL || r < rows ? cn : 0;
        a[p] = tgk_raw_load<BF16>(x, i, n, FULL || vec);
        if (DGELU) h[p] = tgk_raw_load<BF16>(gx, i, n, FULL || vec);
    }
}

/* The n (<= 8) codes of (lo, hi) to y + i: one 8-byte store when vec and n == 8. */
static __device__ __forceinline__ void tgk_ct_store(uint8_t *y, int64_t i, int n, int vec, uint32_t lo, uint32_t hi)
{
    if (vec && n == TGK_VEC) {
        *(uint2 *)(y + i) = make_uint2(lo, hi);
        return;
    }
    for (int k = 0; k < n; k++) y[i + k] = (uint8_t)((k < 4 ? lo >> (8 * k) : hi >> (8 * (k - 4))) & 0xffu);
}

/* vec_in: cols % 8 == 0 and x, gx, y aligned (row groups go as vectors); vec_out: rows % 8 == 0 and yt aligned
 * (transposed groups go as 8 bytes); FULL: both, and whole tiles (rows and cols multiples of 64), so no element is
 * tested against an edge. Block y visits the row tiles blockIdx.y, + gridDim.y, ...; with DBIAS,
 * gridDim.y is the number of chunks and part[blockIdx.y][col] gets the block's column sums (each thread's rows in
 * tile order, then the threads of a column in order). Elements past the edges load as 0, which gives g = 0 in every
 * mode, so they add nothing to amax or the sums. */
template <int MODE, bool BF16, bool FULL>
static __global__ void __launch_bounds__(TGK_CT_THREADS, TGK_CT_MIN_BLOCKS(MODE, BF16 && FULL))
    tgk_cast_transpose_kernel(const void *__restrict__ x, const void *__restrict__ gx, uint8_t *__restrict__ y,
                              uint8_t *__restrict__ yt, tg_dtype y_dt, int64_t rows, int64_t cols, int vec_in,
                              int vec_out, const float *scale, float *amax, float *scale_inv, float *__restrict__ part)
{
    constexpr bool DBIAS = MODE & TGK_CT_DBIAS, DGELU = MODE & TGK_CT_DGELU, GELU = MODE & TGK_CT_GELU;
    constexpr int T = TGK_CT_TILE, P = TGK_CT_PASSES;
    __shared__ uint8_t tile[T][T + 4];
    __shared__ float colsum[DBIAS ? TGK_CT_ROWS : 1][DBIAS ? T + 1 : 1];
    const float s = scale ? *scale : 1.0f;
    unsigned m = 0;
    float acc[TGK_VEC];
#pragma unroll
    for (int k = 0; k < TGK_VEC; k++) acc[k] = 0.0f;
    const int gi = threadIdx.x % (T / TGK_VEC) * TGK_VEC, ri = threadIdx.x / (T / TGK_VEC); /* group column, row */
    const int64_t tiles_r = (rows + T - 1) / T, c0 = (int64_t)blockIdx.x * T, c = c0 + gi;
    const int cn = FULL ? TGK_VEC : cols - c <= 0 ? 0 : cols - c < TGK_VEC ? (int)(cols - c) : TGK_VEC;
    tgk_raw8<BF16> a[P], h[DGELU ? P : 1];
    for (int64_t t = blockIdx.y; t < tiles_r; t += gridDim.y) {
        const int64_t r0 = t * T;
        tgk_ct_fetch<DGELU, BF16, FULL>(x, gx, t, ri, c, cn, rows, cols, vec_in, a, h);
#pragma unroll
        for (int p = 0; p < P; p++) {
            const int j = ri + p * TGK_CT_ROWS;
            float v[TGK_VEC];
            tgk_raw_unpack<BF16>(a[p], v);
            if (DGELU) {
                float hv[TGK_VEC];
                tgk_raw_unpack<BF16>(h[p], hv);
#pragma unroll
                for (int k = 0; k < TGK_VEC; k++) {
                    const float g = __fmul_rn(v[k], tgk_gelu_grad(hv[k]));
                    v[k] = BF16 ? tgk_round_bf16(g) : g;
                }
            }
            if (GELU) {
#pragma unroll
                for (int k = 0; k < TGK_VEC; k++) v[k] = BF16 ? tgk_round_bf16(tgk_gelu(v[k])) : tgk_gelu(v[k]);
            }
#pragma unroll
            for (int k = 0; k < TGK_VEC; k++) m = max(m, tgk_abs_bits(v[k]));
            if (DBIAS) {
#pragma unroll
                for (int k = 0; k < TGK_VEC; k++) acc[k] += v[k];
            }
            const uint32_t lo = tgk_to_fp8x2(v[0] * s, v[1] * s, y_dt) | tgk_to_fp8x2(v[2] * s, v[3] * s, y_dt) << 16;
            const uint32_t hi = tgk_to_fp8x2(v[4] * s, v[5] * s, y_dt) | tgk_to_fp8x2(v[6] * s, v[7] * s, y_dt) << 16;
            *(uint32_t *)&tile[j][gi] = lo; /* rows of T + 4 bytes: 4-byte aligned */
            *(uint32_t *)&tile[j][gi + 4] = hi;
            if (y && (FULL || (r0 + j < rows && cn > 0))) tgk_ct_store(y, (r0 + j) * cols + c, cn, FULL || vec_in, lo, hi);
        }
        __syncthreads();
        if (yt) {
#pragma unroll
            for (int p = 0; p < P; p++) {
                const int j = ri + p * TGK_CT_ROWS; /* column within the tile: row j of y_t's tile */
                const int64_t cc = c0 + j, r = r0 + gi;
                if (!FULL && (cc >= cols || r >= rows)) continue;
                const int n = FULL ? TGK_VEC : rows - r < TGK_VEC ? (int)(rows - r) : TGK_VEC;
                uint32_t lo = 0, hi = 0;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    lo |= (uint32_t)tile[gi + k][j] << (8 * k);
                    hi |= (uint32_t)tile[gi + 4 + k][j] << (8 * k);
                }
                tgk_ct_store(yt, cc * rows + r, n, FULL || vec_out, lo, hi);
            }
        }
        __syncthreads();
    }
    if (DBIAS) {
#pragma unroll
        for (int k = 0; k < TGK_VEC; k++) colsum[ri][gi + k] = acc[k];
        __syncthreads();
        if (threadIdx.x < T && (FULL || c0 + threadIdx.x < cols)) {
            float sum = colsum[0][threadIdx.x];
            for (int q = 1; q < TGK_CT_ROWS; q++) sum += colsum[q][threadIdx.x];
            part[(int64_t)blockIdx.y * cols + c0 + threadIdx.x] = sum;
        }
    }
    if (amax) tgk_amax_block(m, amax);
    if (scale_inv && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
}

/* Launches the kernel for MODE on x of x_dt (bf16 or f32): amax zeroed first unless accumulated; gridDim.y the
 * dbias chunks, or the row tiles (at most 65535). */
template <int MODE>
static cudaError_t tgk_cast_transpose_launch(const void *x, const void *gx, tg_dtype x_dt, void *y, void *yt,
                                             tg_dtype y_dt, int64_t rows, int64_t cols, const float *scale,
                                             float *amax, float *scale_inv, int accumulate, float *part,
                                             int64_t chunks, cudaStream_t st)
{
    cudaError_t e = tgk_amax_reset(amax, accumulate, st);
    if (e != cudaSuccess) return e;
    const int vec_in = cols % TGK_VEC == 0 && tgk_aligned(x, 16) && tgk_aligned(gx, 16) && tgk_aligned(y, 8);
    const int vec_out = rows % TGK_VEC == 0 && tgk_aligned(yt, 8);
    const int64_t tc = (cols + TGK_CT_TILE - 1) / TGK_CT_TILE, tr = (rows + TGK_CT_TILE - 1) / TGK_CT_TILE;
    if (tc > 2147483647) return cudaErrorInvalidValue;
    if (part && (chunks < 1 || chunks > 65535)) return cudaErrorInvalidValue;
    /* an empty x still gets its scale_inv (one block, no tiles) */
    const dim3 grid((unsigned)(tc < 1 ? 1 : tc), (unsigned)(part ? chunks : tr < 1 ? 1 : tr > 65535 ? 65535 : tr));
    uint8_t *y8 = (uint8_t *)y, *yt8 = (uint8_t *)yt;
    const int full = vec_in && (vec_out || !yt) && rows > 0 && cols > 0 && rows % TGK_CT_TILE == 0 &&
                     cols % TGK_CT_TILE == 0;
#define TGK_CT_GO(BF16, FULL)                                                                                   \
    tgk_cast_transpose_kernel<MODE, BF16, FULL><<<grid, TGK_CT_THREADS, 0, st>>>(x, gx, y8, yt8, y_dt, rows, cols, \
                                                                                  vec_in, vec_out, scale, amax,     \
                                                                                  scale_inv, part)
    if (x_dt == TG_BF16 && full)
        TGK_CT_GO(true, true);
    else if (x_dt == TG_BF16)
        TGK_CT_GO(true, false);
    else
        TGK_CT_GO(false, false);
#undef TGK_CT_GO
    return cudaGetLastError();
}

#endif
