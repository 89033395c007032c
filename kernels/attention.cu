/* attention.cu — causal multi-head attention over packed qkv: flash-style forward saving logsumexp, backward recomputing the probabilities. */
#include "colsum.cuh"

#include <cuda_bf16.h>
#include <mma.h>
#include <string.h>

/* Two paths, both deterministic (no atomics; every sum in a fixed order):
 * - tensor cores (bf16, head dim 16/32/64/128, 16-byte aligned rows): one
 *   block per (batch*head, query tile), K/V tiles of 64 staged in shared
 *   memory, bf16 x bf16 -> f32, softmax in f32 registers.
 *   Backward = dd (rowsum dout*out) + a dK/dV kernel per key tile + a dQ
 *   kernel per query tile, so no tile's gradient is summed by two blocks.
 *   v4 (the default) is v3 with the block's rows per head dim (warps of 32
 *   rows at head dim 64) and dd computed by the dQ kernel, which runs first;
 *   v3 (TG_CUDA_ATTENTION=v3) is raw mma.sync m16n8k16 + ldmatrix with cp.async
 *   double buffering, probabilities never leaving registers; v2
 *   (TG_CUDA_ATTENTION=v2) is wmma with scores in registers (=pipe: plus
 *   cp.async double buffering); v1 (TG_CUDA_ATTENTION=v1) stages scores
 *   through shared memory and assumes nothing about fragment layouts.
 * - SIMT (f32, other head dims, or TG_CUDA_ATTENTION=simt): one warp per row,
 *   f32 arithmetic as the CPU reference. */

using namespace nvcuda;

#define ATT_TILE 64
#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_LDP 72 /* bf16 row stride of per-warp 16 x 64 probability tiles */
#define ATT_LDS 68 /* f32 row stride of per-warp 16 x 64 score tiles */

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_acc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> frag_b_col;

static __device__ __forceinline__ const __nv_bfloat16 *bf(const uint16_t *p) { return (const __nv_bfloat16 *)p; }

/* Rows [t0, t0 + 64) of a (T, stride) bf16 matrix, columns [0, D), into dst
 * (64 x LDB); rows >= T are zeros. 16-byte loads (the caller checked alignment). */
template <int D>
static __device__ __forceinline__ void att_load_tile(uint16_t *dst, const uint16_t *src, int t0, int T, int64_t stride)
{
    constexpr int LDB = D + 8, CPR = D / 8;
    for (int i = threadIdx.x; i < ATT_TILE * CPR; i += ATT_THREADS) {
        const int row = i / CPR, ch = i % CPR, t = t0 + row;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (t < T) v = *(const uint4 *)(src + (int64_t)t * stride + ch * 8);
        *(uint4 *)(dst + row * LDB + ch * 8) = v;
    }
}

/* S (16 x 64, f32, ld LDS) = A (16 x D rows of sA) . B^T, B = 64 rows of sB (both ld D + 8). */
template <int D, int LDS = ATT_LDS>
static __device__ __forceinline__ void att_scores(float *S, const uint16_t *sA, const uint16_t *sB)
{
    constexpr int LDB = D + 8;
    frag_acc acc[4];
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
    for (int k = 0; k < D / 16; k++) {
        frag_a a;
        wmma::load_matrix_sync(a, bf(sA + k * 16), LDB);
#pragma unroll
        for (int n = 0; n < 4; n++) {
            frag_b_col b;
            wmma::load_matrix_sync(b, bf(sB + n * 16 * LDB + k * 16), LDB);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
#pragma unroll
    for (int n = 0; n < 4; n++) wmma::store_matrix_sync(S + n * 16, acc[n], LDS, wmma::mem_row_major);
}

/* acc[n] += P (16 x 64 bf16, ld ATT_LDP) . M (64 x D rows of sM, ld D + 8), n over D / 16 column blocks. */
template <int D> static __device__ __forceinline__ void att_pv(frag_acc *acc, const uint16_t *P, const uint16_t *sM)
{
    constexpr int LDB = D + 8;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        frag_a a;
        wmma::load_matrix_sync(a, bf(P + k * 16), ATT_LDP);
#pragma unroll
        for (int n = 0; n < D / 16; n++) {
            frag_b_row b;
            wmma::load_matrix_sync(b, bf(sM + k * 16 * LDB + n * 16), LDB);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
}

/* Shared memory of the tensor-core kernels, in bytes. */
template <int D> static constexpr size_t att_fwd_smem()
{
    return 3 * ATT_TILE * (D + 8) * 2 + ATT_WARPS * 16 * ((D > 64 ? D : 64) + 4) * 4 + ATT_WARPS * 16 * ATT_LDP * 2;
}
template <int D> static constexpr size_t att_bwd_smem()
{
    return 4 * ATT_TILE * (D + 8) * 2 + ATT_WARPS * 2 * 16 * ATT_LDS * 4 + ATT_WARPS * 2 * 16 * ATT_LDP * 2 +
           2 * ATT_TILE * 4;
}

/* ------------------------------------------------------------------ forward, tensor cores */
template <int D>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_fwd_mma(uint16_t *out, float *lse, const uint16_t *qkv, int T, int C, int H, float scale)
{
    constexpr int LDB = D + 8, LDF = (D > 64 ? D : 64) + 4, OPL = D / 2;
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Qs = (uint16_t *)smem, *Ks = Qs + ATT_TILE * LDB, *Vs = Ks + ATT_TILE * LDB;
    float *Fw = (float *)(Vs + ATT_TILE * LDB);
    uint16_t *Pw = (uint16_t *)(Fw + ATT_WARPS * 16 * LDF);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane >> 1, half = lane & 1;
    const int qt = gridDim.x - 1 - blockIdx.x; /* the longest rows first */
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    float *F = Fw + warp * 16 * LDF;
    uint16_t *P = Pw + warp * 16 * ATT_LDP;
    const int qi = qt * ATT_TILE + warp * 16 + r;

    att_load_tile<D>(Qs, base, qt * ATT_TILE, T, C3);
    float m = -INFINITY, l = 0.0f, o[OPL];
#pragma unroll
    for (int e = 0; e < OPL; e++) o[e] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads(); /* the previous tile's K, V are no longer read */
        att_load_tile<D>(Ks, base + C, kt * ATT_TILE, T, C3);
        att_load_tile<D>(Vs, base + 2 * (int64_t)C, kt * ATT_TILE, T, C3);
        __syncthreads();
        att_scores<D, LDF>(F, Qs + warp * 16 * LDB, Ks);
        __syncwarp();
        /* online softmax of row r over columns [half * 32, half * 32 + 32) */
        float sv[32], tmax = -INFINITY;
#pragma unroll
        for (int c = 0; c < 32; c++) {
            const int col = half * 32 + c, kj = kt * ATT_TILE + col;
            float s = F[r * LDF + col] * scale;
            if (kj > qi || kj >= T) s = -INFINITY;
            sv[c] = s;
            tmax = fmaxf(tmax, s);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        const float mn = fmaxf(m, tmax); /* finite: key 0 is in tile 0 */
        const float corr = expf(m - mn);
        float ps = 0.0f;
#pragma unroll
        for (int c = 0; c < 32; c++) {
            float p = expf(sv[c] - mn);
            ps += p;
            P[r * ATT_LDP + half * 32 + c] = tgk_f32_to_bf16(p);
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        l = l * corr + ps;
        m = mn;
        __syncwarp();
        /* F (16 x D) = P . V, then o = o * corr + F */
        {
            frag_acc acc[D / 16];
#pragma unroll
            for (int n = 0; n < D / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
            att_pv<D>(acc, P, Vs);
#pragma unroll
            for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(F + n * 16, acc[n], LDF, wmma::mem_row_major);
        }
        __syncwarp();
#pragma unroll
        for (int e = 0; e < OPL; e++) o[e] = o[e] * corr + F[r * LDF + half * OPL + e];
        __syncwarp();
    }
    if (qi < T) {
        const float inv = 1.0f / l;
        uint16_t *orow = out + ((int64_t)b * T + qi) * C + (int64_t)h * D + half * OPL;
#pragma unroll
        for (int e = 0; e < OPL; e++) orow[e] = tgk_f32_to_bf16(o[e] * inv);
        if (half == 0) lse[(int64_t)bh * T + qi] = m + logf(l);
    }
}

/* ------------------------------------------------------------------ backward, tensor cores */

/* Stages per-row lse and dd of query rows [t0, t0 + 64) into shared memory (rows >= T: lse = +inf, dd = 0). */
static __device__ __forceinline__ void att_load_rowstats(float *lse_s, float *dd_s, const float *lse, const float *dd,
                                                         int t0, int T)
{
    for (int i = threadIdx.x; i < ATT_TILE; i += ATT_THREADS) {
        const int t = t0 + i;
        lse_s[i] = t < T ? lse[t] : INFINITY;
        dd_s[i] = t < T ? dd[t] : 0.0f;
    }
}

/* dK, dV of one key tile (blockIdx.x) from every query tile at or after it. */
template <int D>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_bwd_dkdv_mma(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse, const float *dd,
                     int T, int C, int H, float scale)
{
    constexpr int LDB = D + 8;
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Ks = (uint16_t *)smem, *Vs = Ks + ATT_TILE * LDB, *Qs = Vs + ATT_TILE * LDB, *dOs = Qs + ATT_TILE * LDB;
    float *Fw = (float *)(dOs + ATT_TILE * LDB);
    uint16_t *Bw = (uint16_t *)(Fw + ATT_WARPS * 2 * 16 * ATT_LDS);
    float *lse_s = (float *)(Bw + ATT_WARPS * 2 * 16 * ATT_LDP), *dd_s = lse_s + ATT_TILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane >> 1, half = lane & 1;
    const int kt = blockIdx.x, nt = (T + ATT_TILE - 1) / ATT_TILE;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const uint16_t *dobase = dout + (int64_t)b * T * C + (int64_t)h * D;
    float *St = Fw + warp * 2 * 16 * ATT_LDS, *dPt = St + 16 * ATT_LDS;
    uint16_t *Pt = Bw + warp * 2 * 16 * ATT_LDP, *dSt = Pt + 16 * ATT_LDP;
    const int kj = kt * ATT_TILE + warp * 16 + r;

    att_load_tile<D>(Ks, base + C, kt * ATT_TILE, T, C3);
    att_load_tile<D>(Vs, base + 2 * (int64_t)C, kt * ATT_TILE, T, C3);
    frag_acc dK[D / 16], dV[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
        wmma::fill_fragment(dK[n], 0.0f);
        wmma::fill_fragment(dV[n], 0.0f);
    }
    for (int qt = kt; qt < nt; qt++) {
        __syncthreads();
        att_load_tile<D>(Qs, base, qt * ATT_TILE, T, C3);
        att_load_tile<D>(dOs, dobase, qt * ATT_TILE, T, C);
        att_load_rowstats(lse_s, dd_s, lse + (int64_t)bh * T, dd + (int64_t)bh * T, qt * ATT_TILE, T);
        __syncthreads();
        att_scores<D>(St, Ks + warp * 16 * LDB, Qs);  /* S^T: keys x queries */
        att_scores<D>(dPt, Vs + warp * 16 * LDB, dOs); /* dP^T = V dO^T */
        __syncwarp();
#pragma unroll 8
        for (int c = 0; c < 32; c++) {
            const int col = half * 32 + c, qi = qt * ATT_TILE + col;
            float p = 0.0f;
            if (qi >= kj && qi < T && kj < T) p = expf(St[r * ATT_LDS + col] * scale - lse_s[col]);
            const float ds = p * (dPt[r * ATT_LDS + col] - dd_s[col]);
            Pt[r * ATT_LDP + col] = tgk_f32_to_bf16(p);
            dSt[r * ATT_LDP + col] = tgk_f32_to_bf16(ds);
        }
        __syncwarp();
        att_pv<D>(dV, Pt, dOs); /* dV += P^T dO */
        att_pv<D>(dK, dSt, Qs); /* dK += dS^T Q */
    }
    /* stage each result as f32 (16 x D, ld D + 4) in the warp's score space, then store bf16 */
    float *G = St;
#pragma unroll
    for (int which = 0; which < 2; which++) {
        __syncwarp();
#pragma unroll
        for (int n = 0; n < D / 16; n++)
            wmma::store_matrix_sync(G + n * 16, which ? dV[n] : dK[n], D + 4, wmma::mem_row_major);
        __syncwarp();
        if (kj < T) {
            uint16_t *row = dqkv + ((int64_t)b * T + kj) * C3 + (which ? 2 : 1) * (int64_t)C + (int64_t)h * D;
            const float f = which ? 1.0f : scale;
            for (int e = half * (D / 2); e < (half + 1) * (D / 2); e++) row[e] = tgk_f32_to_bf16(G[r * (D + 4) + e] * f);
        }
    }
}

/* dQ of one query tile from every key tile at or before it. */
template <int D>
static __global__ void __launch_bounds__(ATT_THREADS)
    att_bwd_dq_mma(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse, const float *dd, int T,
                   int C, int H, float scale)
{
    constexpr int LDB = D + 8;
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Qs = (uint16_t *)smem, *dOs = Qs + ATT_TILE * LDB, *Ks = dOs + ATT_TILE * LDB, *Vs = Ks + ATT_TILE * LDB;
    float *Fw = (float *)(Vs + ATT_TILE * LDB);
    uint16_t *Bw = (uint16_t *)(Fw + ATT_WARPS * 2 * 16 * ATT_LDS);
    float *lse_s = (float *)(Bw + ATT_WARPS * 2 * 16 * ATT_LDP), *dd_s = lse_s + ATT_TILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane >> 1, half = lane & 1;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const uint16_t *dobase = dout + (int64_t)b * T * C + (int64_t)h * D;
    float *S = Fw + warp * 2 * 16 * ATT_LDS, *dP = S + 16 * ATT_LDS;
    uint16_t *dS = Bw + warp * 2 * 16 * ATT_LDP;
    const int row = warp * 16 + r, qi = qt * ATT_TILE + row;

    att_load_tile<D>(Qs, base, qt * ATT_TILE, T, C3);
    att_load_tile<D>(dOs, dobase, qt * ATT_TILE, T, C);
    att_load_rowstats(lse_s, dd_s, lse + (int64_t)bh * T, dd + (int64_t)bh * T, qt * ATT_TILE, T);
    frag_acc dQ[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::fill_fragment(dQ[n], 0.0f);
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        att_load_tile<D>(Ks, base + C, kt * ATT_TILE, T, C3);
        att_load_tile<D>(Vs, base + 2 * (int64_t)C, kt * ATT_TILE, T, C3);
        __syncthreads();
        att_scores<D>(S, Qs + warp * 16 * LDB, Ks);
        att_scores<D>(dP, dOs + warp * 16 * LDB, Vs);
        __syncwarp();
        const float l_i = lse_s[row], d_i = dd_s[row];
#pragma unroll 8
        for (int c = 0; c < 32; c++) {
            const int col = half * 32 + c, kj = kt * ATT_TILE + col;
            float p = 0.0f;
            if (kj <= qi && kj < T && qi < T) p = expf(S[r * ATT_LDS + col] * scale - l_i);
            dS[r * ATT_LDP + col] = tgk_f32_to_bf16(p * (dP[r * ATT_LDS + col] - d_i));
        }
        __syncwarp();
        att_pv<D>(dQ, dS, Ks); /* dQ += dS K */
    }
    float *G = S;
    __syncwarp();
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::store_matrix_sync(G + n * 16, dQ[n], D + 4, wmma::mem_row_major);
    __syncwarp();
    if (qi < T) {
        uint16_t *out = dqkv + ((int64_t)b * T + qi) * C3 + (int64_t)h * D;
        for (int e = half * (D / 2); e < (half + 1) * (D / 2); e++) out[e] = tgk_f32_to_bf16(G[r * (D + 4) + e] * scale);
    }
}

/* ------------------------------------------------------------------ tensor cores, softmax in registers (v2)
 * The same tiles, but the score accumulators stay in registers: on sm_80+
 * a 16x16 f32 wmma accumulator holds, in lane L, element i at row
 * (L >> 2) + 8 ((i >> 1) & 1) and column 2 (L & 3) + (i & 1) + 8 (i >> 2)
 * (two m16n8 mma tiles). att_v2_ok() checks that on the device before
 * the launcher picks these kernels; otherwise the v1 kernels above run. Only
 * the bf16 probabilities go through shared memory (as the next product's A). */

static __device__ __forceinline__ int acc_row(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
static __device__ __forceinline__ int acc_col(int lane, int i) { return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2); }

static __device__ __forceinline__ uint32_t bf16x2(float lo, float hi)
{
    return (uint32_t)tgk_f32_to_bf16(lo) | (uint32_t)tgk_f32_to_bf16(hi) << 16;
}

/* acc (16 x 16) = A (16 x D rows of sA) . B^T where B^T's 16 columns are rows [0, 16) of sB (both ld D + 8). */
template <int D>
static __device__ __forceinline__ void att_scores16(frag_acc &acc, const uint16_t *sA, const uint16_t *sB)
{
    constexpr int LDB = D + 8;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < D / 16; k++) {
        frag_a a;
        frag_b_col b;
        wmma::load_matrix_sync(a, bf(sA + k * 16), LDB);
        wmma::load_matrix_sync(b, bf(sB + k * 16), LDB);
        wmma::mma_sync(acc, a, b, acc);
    }
}

/* Stores accumulators (16 x D) * f as bf16 rows of a global matrix (row stride ld elements), rows >= nrows skipped. */
template <int D>
static __device__ __forceinline__ void att_store_rows(uint16_t *dst, int64_t ld, int row0, int nrows, const frag_acc *acc,
                                                      float f, int lane)
{
#pragma unroll
    for (int n = 0; n < D / 16; n++)
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            const int r = row0 + acc_row(lane, i);
            if (r < nrows)
                *(uint32_t *)(dst + (int64_t)r * ld + n * 16 + acc_col(lane, i)) =
                    bf16x2(acc[n].x[i] * f, acc[n].x[i + 1] * f);
        }
}

/* cp.async (sm_80+): 16 bytes global -> shared without passing through registers, completed by wait_group. */
static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* att_load_tile, asynchronously when PIPE (rows >= T are zeroed by ordinary stores). */
template <int D, bool PIPE>
static __device__ __forceinline__ void att_fetch_tile(uint16_t *dst, const uint16_t *src, int t0, int T, int64_t stride)
{
    constexpr int LDB = D + 8, CPR = D / 8;
    for (int i = threadIdx.x; i < ATT_TILE * CPR; i += ATT_THREADS) {
        const int row = i / CPR, ch = i % CPR, t = t0 + row;
        uint16_t *d = dst + row * LDB + ch * 8;
        if (t >= T) *(uint4 *)d = make_uint4(0, 0, 0, 0);
        else if (PIPE) cp_async16(d, src + (int64_t)t * stride + ch * 8);
        else *(uint4 *)d = *(const uint4 *)(src + (int64_t)t * stride + ch * 8);
    }
}

/* With PIPE the kernels below double-buffer the tiles they stream (the next
 * tile is in flight while this one is multiplied): one more pair of tiles of
 * shared memory. */
template <int D, bool PIPE> static constexpr size_t att2_fwd_smem()
{
    return (PIPE ? 5 : 3) * ATT_TILE * (D + 8) * 2 + ATT_WARPS * 16 * ATT_LDP * 2;
}
template <int D, bool PIPE> static constexpr size_t att2_bwd_smem()
{
    return (PIPE ? 6 : 4) * ATT_TILE * (D + 8) * 2 + ATT_WARPS * 2 * 16 * ATT_LDP * 2 + (PIPE ? 4 : 2) * ATT_TILE * 4;
}

template <int D, bool PIPE>
static __global__ void __launch_bounds__(ATT_THREADS)
    att2_fwd(uint16_t *out, float *lse, const uint16_t *qkv, int T, int C, int H, float scale)
{
    constexpr int LDB = D + 8, TS = ATT_TILE * LDB;
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Qs = (uint16_t *)smem, *KV = Qs + TS; /* KV: [buffer][K | V] */
    uint16_t *P = KV + (PIPE ? 4 : 2) * TS + (threadIdx.x / 32) * 16 * ATT_LDP;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const int q0 = qt * ATT_TILE + warp * 16; /* the warp's first query */

    att_fetch_tile<D, false>(Qs, base, qt * ATT_TILE, T, C3);
    if (PIPE) {
        att_fetch_tile<D, true>(KV, base + C, 0, T, C3);
        att_fetch_tile<D, true>(KV + TS, base + 2 * (int64_t)C, 0, T, C3);
        cp_async_commit();
    }
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    frag_acc o[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::fill_fragment(o[n], 0.0f);

    for (int kt = 0; kt <= qt; kt++) {
        uint16_t *Ks = KV + (PIPE ? (kt & 1) * 2 * TS : 0), *Vs = Ks + TS;
        if (PIPE) {
            if (kt < qt) { /* the next K, V into the other buffer (its readers passed the barrier ending kt - 1) */
                uint16_t *nk = KV + ((kt + 1) & 1) * 2 * TS;
                att_fetch_tile<D, true>(nk, base + C, (kt + 1) * ATT_TILE, T, C3);
                att_fetch_tile<D, true>(nk + TS, base + 2 * (int64_t)C, (kt + 1) * ATT_TILE, T, C3);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
        } else {
            __syncthreads();
            att_fetch_tile<D, false>(Ks, base + C, kt * ATT_TILE, T, C3);
            att_fetch_tile<D, false>(Vs, base + 2 * (int64_t)C, kt * ATT_TILE, T, C3);
        }
        __syncthreads();
        frag_acc s[4];
#pragma unroll
        for (int n = 0; n < 4; n++) att_scores16<D>(s[n], Qs + warp * 16 * LDB, Ks + n * 16 * LDB);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int hr = (i >> 1) & 1, qi = q0 + acc_row(lane, i), kj = kt * ATT_TILE + n * 16 + acc_col(lane, i);
                float v = s[n].x[i] * scale;
                if (kj > qi || kj >= T) v = -INFINITY;
                s[n].x[i] = v;
                mx[hr] = fmaxf(mx[hr], v);
            }
        float corr[2], mn[2], ps[2] = {0.0f, 0.0f};
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
            mn[hr] = fmaxf(m[hr], mx[hr]); /* finite: key kt*64 <= every query of the tile */
            corr[hr] = expf(m[hr] - mn[hr]);
        }
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int i = 0; i < 8; i += 2) {
                const int hr = (i >> 1) & 1;
                const float p0 = expf(s[n].x[i] - mn[hr]), p1 = expf(s[n].x[i + 1] - mn[hr]);
                ps[hr] += p0 + p1;
                *(uint32_t *)(P + acc_row(lane, i) * ATT_LDP + n * 16 + acc_col(lane, i)) = bf16x2(p0, p1);
            }
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            ps[hr] += __shfl_xor_sync(0xffffffffu, ps[hr], 1);
            ps[hr] += __shfl_xor_sync(0xffffffffu, ps[hr], 2);
            l[hr] = l[hr] * corr[hr] + ps[hr];
            m[hr] = mn[hr];
        }
#pragma unroll
        for (int n = 0; n < D / 16; n++)
#pragma unroll
            for (int i = 0; i < 8; i++) o[n].x[i] *= corr[(i >> 1) & 1];
        __syncwarp();
        att_pv<D>(o, P, Vs);
        __syncwarp();
        if (PIPE) __syncthreads(); /* this buffer is refilled two tiles on */
    }
    /* out = o / l, then lse of the warp's rows (one lane of each row's four writes it) */
#pragma unroll
    for (int n = 0; n < D / 16; n++)
#pragma unroll
        for (int i = 0; i < 8; i++) o[n].x[i] /= l[(i >> 1) & 1];
    att_store_rows<D>(out + (int64_t)b * T * C + (int64_t)h * D, C, q0, T, o, 1.0f, lane);
    if ((lane & 3) == 0)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int qi = q0 + (lane >> 2) + 8 * hr;
            if (qi < T) lse[(int64_t)bh * T + qi] = m[hr] + logf(l[hr]);
        }
}

/* dK, dV of one key tile; per 16 x 16 block of (keys x queries) the probabilities and dS are formed in registers. */
template <int D, bool PIPE>
static __global__ void __launch_bounds__(ATT_THREADS)
    att2_bwd_dkdv(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse, const float *dd, int T,
                  int C, int H, float scale)
{
    constexpr int LDB = D + 8, TS = ATT_TILE * LDB;
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Ks = (uint16_t *)smem, *Vs = Ks + TS, *QD = Vs + TS; /* QD: [buffer][Q | dO] */
    uint16_t *Bw = QD + (PIPE ? 4 : 2) * TS;
    float *stats = (float *)(Bw + ATT_WARPS * 2 * 16 * ATT_LDP); /* [buffer][lse | dd] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kt = blockIdx.x, nt = (T + ATT_TILE - 1) / ATT_TILE;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const uint16_t *dobase = dout + (int64_t)b * T * C + (int64_t)h * D;
    const float *lse_bh = lse + (int64_t)bh * T, *dd_bh = dd + (int64_t)bh * T;
    uint16_t *Pt = Bw + warp * 2 * 16 * ATT_LDP, *dSt = Pt + 16 * ATT_LDP;
    const int k0 = kt * ATT_TILE + warp * 16; /* the warp's first key */

    att_fetch_tile<D, false>(Ks, base + C, kt * ATT_TILE, T, C3);
    att_fetch_tile<D, false>(Vs, base + 2 * (int64_t)C, kt * ATT_TILE, T, C3);
    if (PIPE) {
        att_fetch_tile<D, true>(QD, base, kt * ATT_TILE, T, C3);
        att_fetch_tile<D, true>(QD + TS, dobase, kt * ATT_TILE, T, C);
        cp_async_commit();
        att_load_rowstats(stats, stats + ATT_TILE, lse_bh, dd_bh, kt * ATT_TILE, T);
    }
    frag_acc dK[D / 16], dV[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
        wmma::fill_fragment(dK[n], 0.0f);
        wmma::fill_fragment(dV[n], 0.0f);
    }
    for (int qt = kt; qt < nt; qt++) {
        const int buf = PIPE ? (qt - kt) & 1 : 0;
        uint16_t *Qs = QD + buf * 2 * TS, *dOs = Qs + TS;
        const float *lse_s = stats + buf * 2 * ATT_TILE, *dd_s = lse_s + ATT_TILE;
        if (PIPE) {
            if (qt + 1 < nt) {
                const int nb = (qt + 1 - kt) & 1;
                att_fetch_tile<D, true>(QD + nb * 2 * TS, base, (qt + 1) * ATT_TILE, T, C3);
                att_fetch_tile<D, true>(QD + nb * 2 * TS + TS, dobase, (qt + 1) * ATT_TILE, T, C);
                cp_async_commit();
                att_load_rowstats(stats + nb * 2 * ATT_TILE, stats + nb * 2 * ATT_TILE + ATT_TILE, lse_bh, dd_bh,
                                  (qt + 1) * ATT_TILE, T);
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
        } else {
            __syncthreads();
            att_fetch_tile<D, false>(Qs, base, qt * ATT_TILE, T, C3);
            att_fetch_tile<D, false>(dOs, dobase, qt * ATT_TILE, T, C);
            att_load_rowstats((float *)lse_s, (float *)dd_s, lse_bh, dd_bh, qt * ATT_TILE, T);
        }
        __syncthreads();
#pragma unroll
        for (int n = 0; n < 4; n++) { /* queries [n*16, n*16 + 16) of the tile */
            frag_acc st, dpt;
            att_scores16<D>(st, Ks + warp * 16 * LDB, Qs + n * 16 * LDB);  /* S^T = K Q^T */
            att_scores16<D>(dpt, Vs + warp * 16 * LDB, dOs + n * 16 * LDB); /* dP^T = V dO^T */
#pragma unroll
            for (int i = 0; i < 8; i += 2) {
                const int kj = k0 + acc_row(lane, i), col = n * 16 + acc_col(lane, i), qi = qt * ATT_TILE + col;
                float p[2], ds[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    p[e] = 0.0f;
                    if (qi + e >= kj && qi + e < T && kj < T) p[e] = expf(st.x[i + e] * scale - lse_s[col + e]);
                    ds[e] = p[e] * (dpt.x[i + e] - dd_s[col + e]);
                }
                const int at = acc_row(lane, i) * ATT_LDP + col;
                *(uint32_t *)(Pt + at) = bf16x2(p[0], p[1]);
                *(uint32_t *)(dSt + at) = bf16x2(ds[0], ds[1]);
            }
        }
        __syncwarp();
        att_pv<D>(dV, Pt, dOs); /* dV += P^T dO */
        att_pv<D>(dK, dSt, Qs); /* dK += dS^T Q */
        __syncwarp();
        if (PIPE) __syncthreads();
    }
    uint16_t *rows = dqkv + (int64_t)b * T * C3 + (int64_t)h * D;
    att_store_rows<D>(rows + C, C3, k0, T, dK, scale, lane);
    att_store_rows<D>(rows + 2 * (int64_t)C, C3, k0, T, dV, 1.0f, lane);
}

/* dQ of one query tile. */
template <int D, bool PIPE>
static __global__ void __launch_bounds__(ATT_THREADS)
    att2_bwd_dq(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse, const float *dd, int T,
                int C, int H, float scale)
{
    constexpr int LDB = D + 8, TS = ATT_TILE * LDB;
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Qs = (uint16_t *)smem, *dOs = Qs + TS, *KV = dOs + TS; /* KV: [buffer][K | V] */
    uint16_t *Bw = KV + (PIPE ? 4 : 2) * TS;
    float *lse_s = (float *)(Bw + ATT_WARPS * 2 * 16 * ATT_LDP), *dd_s = lse_s + ATT_TILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const uint16_t *dobase = dout + (int64_t)b * T * C + (int64_t)h * D;
    uint16_t *dS = Bw + warp * 2 * 16 * ATT_LDP;
    const int q0 = qt * ATT_TILE + warp * 16;

    att_fetch_tile<D, false>(Qs, base, qt * ATT_TILE, T, C3);
    att_fetch_tile<D, false>(dOs, dobase, qt * ATT_TILE, T, C);
    att_load_rowstats(lse_s, dd_s, lse + (int64_t)bh * T, dd + (int64_t)bh * T, qt * ATT_TILE, T);
    if (PIPE) {
        att_fetch_tile<D, true>(KV, base + C, 0, T, C3);
        att_fetch_tile<D, true>(KV + TS, base + 2 * (int64_t)C, 0, T, C3);
        cp_async_commit();
    }
    __syncthreads();
    float lr[2], dr[2]; /* lse, dd of the lane's two rows */
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        lr[hr] = lse_s[warp * 16 + (lane >> 2) + 8 * hr];
        dr[hr] = dd_s[warp * 16 + (lane >> 2) + 8 * hr];
    }
    frag_acc dQ[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; n++) wmma::fill_fragment(dQ[n], 0.0f);
    for (int kt = 0; kt <= qt; kt++) {
        uint16_t *Ks = KV + (PIPE ? (kt & 1) * 2 * TS : 0), *Vs = Ks + TS;
        if (PIPE) {
            if (kt < qt) {
                uint16_t *nk = KV + ((kt + 1) & 1) * 2 * TS;
                att_fetch_tile<D, true>(nk, base + C, (kt + 1) * ATT_TILE, T, C3);
                att_fetch_tile<D, true>(nk + TS, base + 2 * (int64_t)C, (kt + 1) * ATT_TILE, T, C3);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
        } else {
            __syncthreads();
            att_fetch_tile<D, false>(Ks, base + C, kt * ATT_TILE, T, C3);
            att_fetch_tile<D, false>(Vs, base + 2 * (int64_t)C, kt * ATT_TILE, T, C3);
        }
        __syncthreads();
#pragma unroll
        for (int n = 0; n < 4; n++) { /* keys [n*16, n*16 + 16) of the tile */
            frag_acc sc, dp;
            att_scores16<D>(sc, Qs + warp * 16 * LDB, Ks + n * 16 * LDB);
            att_scores16<D>(dp, dOs + warp * 16 * LDB, Vs + n * 16 * LDB);
#pragma unroll
            for (int i = 0; i < 8; i += 2) {
                const int hr = (i >> 1) & 1, qi = q0 + acc_row(lane, i), col = n * 16 + acc_col(lane, i);
                const int kj = kt * ATT_TILE + col;
                float ds[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float p = 0.0f;
                    if (kj + e <= qi && kj + e < T && qi < T) p = expf(sc.x[i + e] * scale - lr[hr]);
                    ds[e] = p * (dp.x[i + e] - dr[hr]);
                }
                *(uint32_t *)(dS + acc_row(lane, i) * ATT_LDP + col) = bf16x2(ds[0], ds[1]);
            }
        }
        __syncwarp();
        att_pv<D>(dQ, dS, Ks); /* dQ += dS K */
        __syncwarp();
        if (PIPE) __syncthreads();
    }
    att_store_rows<D>(dqkv + (int64_t)b * T * C3 + (int64_t)h * D, C3, q0, T, dQ, scale, lane);
}

/* Whether wmma's accumulator layout is the one the v2 kernels assume: one warp loads a known 16 x 16 matrix. */
static __global__ void att_layout_probe(int *ok)
{
    __shared__ __align__(32) float mtx[16 * 16];
    for (int i = threadIdx.x; i < 256; i += 32) mtx[i] = (float)i;
    __syncwarp();
    frag_acc f;
    wmma::load_matrix_sync(f, mtx, 16, wmma::mem_row_major);
    int good = 1;
    for (int i = 0; i < f.num_elements; i++)
        good &= f.x[i] == (float)(acc_row(threadIdx.x, i) * 16 + acc_col(threadIdx.x, i));
    good = __all_sync(0xffffffffu, good) && f.num_elements == 8;
    if (threadIdx.x == 0) *ok = good;
}

/* ------------------------------------------------------------------ v3: mma.sync + ldmatrix + cp.async
 * FlashAttention-2 style. Layout facts relied on (PTX ISA: "Matrix fragments for mma.m16n8k16" with .bf16
 * operands, and "ldmatrix"); g = lane >> 2, t = lane & 3, (row, column):
 * - A (16 x 16, .row), four .b32: a0 = (g, 2t..2t+1), a1 = (g+8, 2t..2t+1), a2 = (g, 2t+8..2t+9), a3 = (g+8, 2t+8..2t+9);
 * - B (16 x 8, .col), two .b32: b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g);
 * - C, D (16 x 8, f32): c0, c1 = (g, 2t..2t+1), c2, c3 = (g+8, 2t..2t+1);
 * - a .b32 holds two bf16, the lower column (or k) in the low half;
 * - ldmatrix .x4: lanes 8i..8i+7 give the 16-byte row addresses of 8 x 8 matrix i, which lands in register i;
 *   each lane gets (row g, columns 2t, 2t+1) of it, with .trans (rows 2t, 2t+1, column g).
 * So the C tiles of columns 8j and 8j+8 of a 16-row block are, packed in pairs, the A fragment of k
 * 16j..16j+15: the probabilities go from the softmax into P V without leaving registers. Shared rows are
 * padded by 16 bytes (stride = 4 banks mod 32), so the 8 row addresses of each ldmatrix phase hit distinct banks.
 * Every warp owns 16 query (dQ; forward: 16 or 32) or key (dK/dV) rows of a query or key tile; the streamed 64-row tiles are
 * double-buffered with cp.async. Tiles of 64 x 64 mean only the diagonal tile needs the causal mask. */

#define ATT3_LOG2E 1.4426950408889634f

static __device__ __forceinline__ void ldsm4(uint32_t r[4], const uint16_t *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
static __device__ __forceinline__ void ldsm4t(uint32_t r[4], const uint16_t *p)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
/* c (16 x 8) += a (16 x 16) . b (16 x 8), bf16 in, f32 accumulate. */
static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* 2^x in one MUFU op (exp2f adds denormal handling; the probabilities need none: ftz, and 2^-inf = 0). */
static __device__ __forceinline__ float att3_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (lo) in the low half */
    return *(const uint32_t *)&v;
}

/* A fragment of k columns [16 kk, 16 kk + 16) of the 16 rows at s (ld LDB): matrix i = rows 8 (i & 1), columns 8 (i >> 1). */
template <int LDB> static __device__ __forceinline__ void att3_lda(uint32_t a[4], const uint16_t *s, int kk, int lane)
{
    ldsm4(a, s + (lane & 15) * LDB + kk * 16 + (lane >> 4) * 8);
}

/* c[NC / 8] = A (16 x D) . B^T, B = rows [0, NC) of sB (ld D + 8). A from registers (a[D / 16]) or, when
 * a is NULL, loaded from the 16 rows at sA. Per ldmatrix: rows 16 j + 8 (i >> 1), k 8 (i & 1) -> b0, b1 of
 * n-tile 2j and 2j + 1. */
template <int D, int NC>
static __device__ __forceinline__ void att3_abt(float (*c)[4], const uint32_t (*a)[4], const uint16_t *sA,
                                                const uint16_t *sB, int lane)
{
    constexpr int LDB = D + 8;
#pragma unroll
    for (int j = 0; j < NC / 8; j++) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t af[4];
        if (a) {
            af[0] = a[kk][0], af[1] = a[kk][1], af[2] = a[kk][2], af[3] = a[kk][3];
        } else {
            att3_lda<LDB>(af, sA, kk, lane);
        }
#pragma unroll
        for (int j = 0; j < NC / 16; j++) {
            uint32_t b[4];
            ldsm4(b, sB + (j * 16 + (lane & 7) + (lane >> 4) * 8) * LDB + kk * 16 + ((lane >> 3) & 1) * 8);
            mma16816(c[2 * j], af, b[0], b[1]);
            mma16816(c[2 * j + 1], af, b[2], b[3]);
        }
    }
}

/* acc[D / 8] += P (16 x KC, A fragments p[KC / 16]) . M, M = rows [0, KC) of sM (ld D + 8, row-major k x D).
 * Per ldmatrix.trans: k rows 16 kk + 8 (i & 1), columns 16 j + 8 (i >> 1) -> b0, b1 of n-tiles 2j, 2j + 1. */
template <int D, int KC>
static __device__ __forceinline__ void att3_pm(float (*acc)[4], const uint32_t (*p)[4], const uint16_t *sM, int lane)
{
    constexpr int LDB = D + 8;
#pragma unroll
    for (int kk = 0; kk < KC / 16; kk++)
#pragma unroll
        for (int j = 0; j < D / 16; j++) {
            uint32_t b[4];
            ldsm4t(b, sM + (kk * 16 + (lane & 15)) * LDB + j * 16 + (lane >> 4) * 8);
            mma16816(acc[2 * j], p[kk], b[0], b[1]);
            mma16816(acc[2 * j + 1], p[kk], b[2], b[3]);
        }
}

/* Accumulator tiles (16 x NC, f32) -> bf16 A fragments (16 x NC): tiles 2kk, 2kk + 1 make k-chunk kk. */
template <int NC> static __device__ __forceinline__ void att3_to_a(uint32_t (*p)[4], const float (*c)[4])
{
#pragma unroll
    for (int kk = 0; kk < NC / 16; kk++) {
        p[kk][0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
        p[kk][1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
        p[kk][2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        p[kk][3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

/* Rows [t0, t0 + R) of a (T, stride) bf16 matrix into dst (ld D + 8) by cp.async; rows >= T are zeroed
 * (finite, so masked products stay 0). The caller commits. */
template <int D, int R = ATT_TILE, int NTH = ATT_THREADS>
static __device__ __forceinline__ void att3_fetch(uint16_t *dst, const uint16_t *src, int t0, int T, int64_t stride)
{
    constexpr int LDB = D + 8, CPR = D / 8, RPP = NTH / CPR; /* 16-byte chunks per row, rows per pass */
    static_assert(NTH % CPR == 0, "each thread copies one column of chunks");
    const int r0 = threadIdx.x / CPR, ch = threadIdx.x % CPR;
    const uint16_t *s = src + (int64_t)(t0 + r0) * stride + ch * 8;
    uint16_t *d = dst + r0 * LDB + ch * 8;
#pragma unroll
    for (int r = r0; r < R; r += RPP, s += RPP * stride, d += RPP * LDB) {
        if (t0 + r < T) cp_async16(d, s);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
}

/* lse (times log2 e, +inf past T) and dd of rows [t0, t0 + 64) into shared memory. */
static __device__ __forceinline__ void att3_rowstats(float *lse_s, float *dd_s, const float *lse, const float *dd, int t0, int T)
{
    for (int i = threadIdx.x; i < ATT_TILE; i += ATT_THREADS) {
        const int t = t0 + i;
        lse_s[i] = t < T ? lse[t] * ATT3_LOG2E : INFINITY;
        dd_s[i] = t < T ? dd[t] : 0.0f;
    }
}

/* Writes acc (16 x D) * f as bf16 rows row0.. of dst (row stride ld), rows >= T skipped: staged in the warp's
 * own 16 rows of shared memory at s (ld D + 8, no other warp reads them), then copied 16 bytes at a time. */
template <int D>
static __device__ __forceinline__ void att3_store(uint16_t *dst, int64_t ld, int row0, int T, const float (*acc)[4], float f,
                                                  uint16_t *s, int lane)
{
    constexpr int LDB = D + 8, CPR = D / 8;
    __syncwarp();
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++)
            *(uint32_t *)(s + ((lane >> 2) + 8 * hr) * LDB + 8 * j + 2 * (lane & 3)) =
                pack_bf16(acc[j][2 * hr] * f, acc[j][2 * hr + 1] * f);
    __syncwarp();
    for (int i = lane; i < 16 * CPR; i += 32) {
        const int r = i / CPR, ch = i % CPR;
        if (row0 + r < T) *(uint4 *)(dst + (int64_t)(row0 + r) * ld + ch * 8) = *(const uint4 *)(s + r * LDB + ch * 8);
    }
}

template <int D, int W, int MT> static constexpr size_t att3_fwd_smem() { return (16 * MT * W + 4 * ATT_TILE) * (D + 8) * 2; }
template <int D> static constexpr size_t att3_bwd_smem() { return 6 * ATT_TILE * (D + 8) * 2 + 4 * ATT_TILE * 4; }

/* The forward's products for MT 16-row blocks of a warp at once: each K or V fragment read from shared
 * memory feeds MT mma's. c[mt] = A[mt] (16 x D, fragments) . B^T, B = rows [0, NC) of sB. */
template <int D, int NC, int MT>
static __device__ __forceinline__ void att3_abt_m(float (*c)[NC / 8][4], const uint32_t (*a)[D / 16][4], const uint16_t *sB,
                                                  int lane)
{
    constexpr int LDB = D + 8;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NC / 8; j++) c[mt][j][0] = c[mt][j][1] = c[mt][j][2] = c[mt][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
        for (int j = 0; j < NC / 16; j++) {
            uint32_t b[4];
            ldsm4(b, sB + (j * 16 + (lane & 7) + (lane >> 4) * 8) * LDB + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma16816(c[mt][2 * j], a[mt][kk], b[0], b[1]);
                mma16816(c[mt][2 * j + 1], a[mt][kk], b[2], b[3]);
            }
        }
}
/* acc[mt] += P[mt] (16 x KC, fragments) . M, M = rows [0, KC) of sM (k x D). */
template <int D, int KC, int MT>
static __device__ __forceinline__ void att3_pm_m(float (*acc)[D / 8][4], const uint32_t (*p)[KC / 16][4], const uint16_t *sM,
                                                 int lane)
{
    constexpr int LDB = D + 8;
#pragma unroll
    for (int kk = 0; kk < KC / 16; kk++)
#pragma unroll
        for (int j = 0; j < D / 16; j++) {
            uint32_t b[4];
            ldsm4t(b, sM + (kk * 16 + (lane & 15)) * LDB + j * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma16816(acc[mt][2 * j], p[mt][kk], b[0], b[1]);
                mma16816(acc[mt][2 * j + 1], p[mt][kk], b[2], b[3]);
            }
        }
}

/* Forward: one block of W warps per (batch*head = blockIdx.x, 16 MT W-query tile), each warp owning MT
 * 16-row blocks; blockIdx.y counts from the last tile, so the longest rows start first. Key tiles of 64;
 * a warp skips the tiles wholly after its rows and masks only those that reach past a block's first row.
 * Scores stay raw; the softmax works in log2 units (exp2 of s * scale * log2 e - m * scale * log2 e, one FMA). */
template <int D, int W, int MT, int MINB>
static __global__ void __launch_bounds__(W * 32, MINB)
    att3_fwd(uint16_t *out, float *lse, const uint16_t *qkv, int T, int C, int H, float scale)
{
    constexpr int LDB = D + 8, WR = 16 * MT, BM = WR * W, NTH = W * 32, TS = ATT_TILE * LDB;
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Qs = (uint16_t *)smem, *KV = Qs + BM * LDB; /* KV: [buffer][K | V] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int qt = gridDim.y - 1 - blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const int q0 = qt * BM + warp * WR;                         /* the warp's first query */
    const int nkt = (min(qt * BM + BM, T) - 1) / ATT_TILE + 1; /* key tiles up to the block's last row */
    const float sl2 = scale * ATT3_LOG2E;

    att3_fetch<D, BM, NTH>(Qs, base, qt * BM, T, C3);
    att3_fetch<D, ATT_TILE, NTH>(KV, base + C, 0, T, C3);
    att3_fetch<D, ATT_TILE, NTH>(KV + TS, base + 2 * (int64_t)C, 0, T, C3);
    cp_async_commit();

    uint32_t qf[MT][D / 16][4];
    float o[MT][D / 8][4], m[MT][2], l[MT][2]; /* l: this lane's part of the row sum */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
        for (int j = 0; j < D / 8; j++) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
    }

    for (int kt = 0; kt < nkt; kt++) {
        const uint16_t *Ks = KV + (kt & 1) * 2 * TS, *Vs = Ks + TS;
        if (kt + 1 < nkt) { /* the next K, V into the other buffer (its readers passed the barrier ending kt - 1) */
            uint16_t *nk = KV + ((kt + 1) & 1) * 2 * TS;
            att3_fetch<D, ATT_TILE, NTH>(nk, base + C, (kt + 1) * ATT_TILE, T, C3);
            att3_fetch<D, ATT_TILE, NTH>(nk + TS, base + 2 * (int64_t)C, (kt + 1) * ATT_TILE, T, C3);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt == 0)
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) att3_lda<LDB>(qf[mt][kk], Qs + (warp * WR + 16 * mt) * LDB, kk, lane);
        if (kt * ATT_TILE <= q0 + WR - 1) { /* some key of the tile is visible to some row of the warp */
            float s[MT][ATT_TILE / 8][4];
            att3_abt_m<D, ATT_TILE, MT>(s, qf, Ks, lane);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int r0 = q0 + 16 * mt; /* the 16-row block's first query */
                float mx[2] = {-INFINITY, -INFINITY};
                const bool diag = kt * ATT_TILE + ATT_TILE - 1 > r0;
#pragma unroll
                for (int j = 0; j < ATT_TILE / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (diag && kt * ATT_TILE + 8 * j + 2 * t4 + (e & 1) > r0 + g + 8 * (e >> 1))
                            s[mt][j][e] = -INFINITY;
                        mx[e >> 1] = fmaxf(mx[e >> 1], s[mt][j][e]);
                    }
                float corr[2], ms[2];
#pragma unroll
                for (int hr = 0; hr < 2; hr++) { /* the four lanes of a row: t = 0..3 */
                    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                    mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                    /* -inf only for a block wholly after this tile (then p = 0 below, o and l unchanged):
                     * key 0 is in tile 0 and before every row, so m is finite from tile 0 on */
                    const float mn = fmaxf(m[mt][hr], mx[hr]);
                    corr[hr] = mn == -INFINITY ? 1.0f : att3_exp2((m[mt][hr] - mn) * sl2);
                    m[mt][hr] = mn;
                    ms[hr] = mn == -INFINITY ? 0.0f : mn * sl2;
                    l[mt][hr] *= corr[hr];
                }
#pragma unroll
                for (int j = 0; j < ATT_TILE / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float p = att3_exp2(fmaf(s[mt][j][e], sl2, -ms[e >> 1]));
                        s[mt][j][e] = p;
                        l[mt][e >> 1] += p;
                    }
#pragma unroll
                for (int j = 0; j < D / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) o[mt][j][e] *= corr[e >> 1];
            }
            uint32_t pf[MT][ATT_TILE / 16][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) att3_to_a<ATT_TILE>(pf[mt], s[mt]);
            att3_pm_m<D, ATT_TILE, MT>(o, pf, Vs, lane);
        }
        __syncthreads(); /* this buffer is refilled two tiles on */
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            l[mt][hr] += __shfl_xor_sync(0xffffffffu, l[mt][hr], 1);
            l[mt][hr] += __shfl_xor_sync(0xffffffffu, l[mt][hr], 2);
        }
#pragma unroll
        for (int j = 0; j < D / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[mt][j][e] /= l[mt][e >> 1];
        const int r0 = q0 + 16 * mt;
        att3_store<D>(out + (int64_t)b * T * C + (int64_t)h * D, C, r0, T, o[mt], 1.0f, Qs + (warp * WR + 16 * mt) * LDB,
                      lane);
        if (t4 == 0)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const int qi = r0 + g + 8 * hr;
                if (qi < T) lse[(int64_t)bh * T + qi] = m[mt][hr] * scale + logf(l[mt][hr]);
            }
    }
}

/* dK, dV of one key tile (blockIdx.y; the first tiles have the most work and start first) from every query
 * tile at or after it. S^T = K Q^T and dP^T = V dO^T come out with keys as rows, so P^T and
 * dS^T = P^T (dP^T - dd) feed dV += P^T dO and dK += dS^T Q straight from registers. Queries go in chunks
 * of QC (32 at head dim 128, to bound registers; K and V fragments are then re-read from shared memory). */
template <int D>
static __global__ void __launch_bounds__(ATT_THREADS)
    att3_bwd_dkdv(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse, const float *dd, int T,
                  int C, int H, float scale)
{
    constexpr int LDB = D + 8, TS = ATT_TILE * LDB, QC = D > 64 ? 32 : 64;
    constexpr bool REG = D <= 64; /* K, V fragments kept in registers */
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Ks = (uint16_t *)smem, *Vs = Ks + TS, *QD = Vs + TS; /* QD: [buffer][Q | dO] */
    float *stats = (float *)(QD + 4 * TS);                           /* [buffer][lse | dd] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int kt = blockIdx.y, nt = (T + ATT_TILE - 1) / ATT_TILE;
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const uint16_t *dobase = dout + (int64_t)b * T * C + (int64_t)h * D;
    const float *lse_bh = lse + (int64_t)bh * T, *dd_bh = dd + (int64_t)bh * T;
    const int k0 = kt * ATT_TILE + warp * 16; /* the warp's first key */
    const uint16_t *Kw = Ks + warp * 16 * LDB, *Vw = Vs + warp * 16 * LDB;
    const float sl2 = scale * ATT3_LOG2E;

    att3_fetch<D>(Ks, base + C, kt * ATT_TILE, T, C3);
    att3_fetch<D>(Vs, base + 2 * (int64_t)C, kt * ATT_TILE, T, C3);
    att3_fetch<D>(QD, base, kt * ATT_TILE, T, C3);
    att3_fetch<D>(QD + TS, dobase, kt * ATT_TILE, T, C);
    cp_async_commit();
    att3_rowstats(stats, stats + ATT_TILE, lse_bh, dd_bh, kt * ATT_TILE, T);

    uint32_t kf[REG ? D / 16 : 1][4], vf[REG ? D / 16 : 1][4];
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.0f;

    for (int qt = kt; qt < nt; qt++) {
        const int buf = (qt - kt) & 1;
        const uint16_t *Qs = QD + buf * 2 * TS, *dOs = Qs + TS;
        const float *lse_s = stats + buf * 2 * ATT_TILE, *dd_s = lse_s + ATT_TILE;
        if (qt + 1 < nt) {
            const int nb = buf ^ 1;
            att3_fetch<D>(QD + nb * 2 * TS, base, (qt + 1) * ATT_TILE, T, C3);
            att3_fetch<D>(QD + nb * 2 * TS + TS, dobase, (qt + 1) * ATT_TILE, T, C);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (REG && qt == kt)
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                att3_lda<LDB>(kf[kk], Kw, kk, lane);
                att3_lda<LDB>(vf[kk], Vw, kk, lane);
            }
        /* lse, dd of the next tile: loaded now, stored after the products hid the latency (the other buffer's
         * readers passed the barrier ending qt - 1) */
        const int tn = (qt + 1) * ATT_TILE + threadIdx.x;
        float nls = INFINITY, ndd = 0.0f;
        if (threadIdx.x < ATT_TILE && tn < T) {
            nls = lse_bh[tn] * ATT3_LOG2E;
            ndd = dd_bh[tn];
        }
        const bool diag = qt == kt;
#pragma unroll
        for (int qc = 0; qc < ATT_TILE; qc += QC) {
            float st[QC / 8][4], dpt[QC / 8][4];
            att3_abt<D, QC>(st, REG ? kf : NULL, Kw, Qs + qc * LDB, lane);   /* S^T = K Q^T */
            att3_abt<D, QC>(dpt, REG ? vf : NULL, Vw, dOs + qc * LDB, lane); /* dP^T = V dO^T */
#pragma unroll
            for (int j = 0; j < QC / 8; j++) {
                const int col = qc + 8 * j + 2 * t4; /* query of elements e = 0, 2 (+1 for e = 1, 3) in the tile */
                const float2 ls = *(const float2 *)(lse_s + col), ds = *(const float2 *)(dd_s + col);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = att3_exp2(st[j][e] * sl2 - ((e & 1) ? ls.y : ls.x));
                    if (diag && qt * ATT_TILE + col + (e & 1) < k0 + g + 8 * (e >> 1)) p = 0.0f;
                    st[j][e] = p;
                    dpt[j][e] = p * (dpt[j][e] - ((e & 1) ? ds.y : ds.x));
                }
            }
            uint32_t pf[QC / 16][4], sf[QC / 16][4];
            att3_to_a<QC>(pf, st);
            att3_to_a<QC>(sf, dpt);
            att3_pm<D, QC>(dv, pf, dOs + qc * LDB, lane); /* dV += P^T dO */
            att3_pm<D, QC>(dk, sf, Qs + qc * LDB, lane);  /* dK += dS^T Q */
        }
        if (threadIdx.x < ATT_TILE && qt + 1 < nt) {
            float *ns = stats + (buf ^ 1) * 2 * ATT_TILE;
            ns[threadIdx.x] = nls;
            ns[ATT_TILE + threadIdx.x] = ndd;
        }
        __syncthreads(); /* this buffer is refilled two tiles on; the next stats are visible */
    }
    uint16_t *rows = dqkv + (int64_t)b * T * C3 + (int64_t)h * D;
    att3_store<D>(rows + C, C3, k0, T, dk, scale, (uint16_t *)Kw, lane);
    att3_store<D>(rows + 2 * (int64_t)C, C3, k0, T, dv, 1.0f, (uint16_t *)Vw, lane);
}

/* dQ of one query tile (blockIdx.y from the last) from every key tile at or before it: S = Q K^T,
 * dP = dO V^T, dS = P (dP - dd), dQ += dS K. Keys in chunks of KC (32 at head dim 128). */
template <int D>
static __global__ void __launch_bounds__(ATT_THREADS)
    att3_bwd_dq(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse, const float *dd, int T,
                int C, int H, float scale)
{
    constexpr int LDB = D + 8, TS = ATT_TILE * LDB, KC = D > 64 ? 32 : 64;
    constexpr bool REG = D <= 64; /* Q, dO fragments kept in registers */
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Qs = (uint16_t *)smem, *dOs = Qs + TS, *KV = dOs + TS; /* KV: [buffer][K | V] */
    float *lse_s = (float *)(KV + 4 * TS), *dd_s = lse_s + ATT_TILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int qt = gridDim.y - 1 - blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const uint16_t *dobase = dout + (int64_t)b * T * C + (int64_t)h * D;
    const int q0 = qt * ATT_TILE + warp * 16;
    const uint16_t *Qw = Qs + warp * 16 * LDB, *dOw = dOs + warp * 16 * LDB;
    const float sl2 = scale * ATT3_LOG2E;

    att3_fetch<D>(Qs, base, qt * ATT_TILE, T, C3);
    att3_fetch<D>(dOs, dobase, qt * ATT_TILE, T, C);
    att3_fetch<D>(KV, base + C, 0, T, C3);
    att3_fetch<D>(KV + TS, base + 2 * (int64_t)C, 0, T, C3);
    cp_async_commit();
    att3_rowstats(lse_s, dd_s, lse + (int64_t)bh * T, dd + (int64_t)bh * T, qt * ATT_TILE, T);

    uint32_t qf[REG ? D / 16 : 1][4], of[REG ? D / 16 : 1][4];
    float dq[D / 8][4], lr[2], dr[2]; /* lse, dd of the lane's rows g, g + 8 */
#pragma unroll
    for (int j = 0; j < D / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;

    for (int kt = 0; kt <= qt; kt++) {
        const uint16_t *Ks = KV + (kt & 1) * 2 * TS, *Vs = Ks + TS;
        if (kt < qt) {
            uint16_t *nk = KV + ((kt + 1) & 1) * 2 * TS;
            att3_fetch<D>(nk, base + C, (kt + 1) * ATT_TILE, T, C3);
            att3_fetch<D>(nk + TS, base + 2 * (int64_t)C, (kt + 1) * ATT_TILE, T, C3);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt == 0) {
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                lr[hr] = lse_s[warp * 16 + g + 8 * hr];
                dr[hr] = dd_s[warp * 16 + g + 8 * hr];
            }
            if (REG)
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    att3_lda<LDB>(qf[kk], Qw, kk, lane);
                    att3_lda<LDB>(of[kk], dOw, kk, lane);
                }
        }
        const bool diag = kt == qt;
#pragma unroll
        for (int kc = 0; kc < ATT_TILE; kc += KC) {
            float s[KC / 8][4], dp[KC / 8][4];
            att3_abt<D, KC>(s, REG ? qf : NULL, Qw, Ks + kc * LDB, lane);   /* S = Q K^T */
            att3_abt<D, KC>(dp, REG ? of : NULL, dOw, Vs + kc * LDB, lane); /* dP = dO V^T */
#pragma unroll
            for (int j = 0; j < KC / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = att3_exp2(s[j][e] * sl2 - lr[e >> 1]);
                    if (diag && kt * ATT_TILE + kc + 8 * j + 2 * t4 + (e & 1) > q0 + g + 8 * (e >> 1)) p = 0.0f;
                    s[j][e] = p * (dp[j][e] - dr[e >> 1]);
                }
            uint32_t sf[KC / 16][4];
            att3_to_a<KC>(sf, s);
            att3_pm<D, KC>(dq, sf, Ks + kc * LDB, lane); /* dQ += dS K */
        }
        __syncthreads(); /* this buffer is refilled two tiles on */
    }
    att3_store<D>(dqkv + (int64_t)b * T * C3 + (int64_t)h * D, C3, q0, T, dq, scale, (uint16_t *)Qw, lane);
}

/* ------------------------------------------------------------------ v4 (the default): v3's fragments, tiles sized per head dim
 * The same mma.sync / ldmatrix / cp.async building blocks as v3, with the block's own rows (keys for dK/dV,
 * queries for dQ) a template: W warps of 16 MT rows each. A warp of 32 rows (MT = 2) reads each streamed
 * fragment once for two mma's, halving shared-memory traffic per product; 8 warps over one block's rows
 * halve the streamed tiles fetched per row. The dQ kernel runs first and computes dd = rowsum(dO * O) of its
 * own rows (written to the scratch for the dK/dV kernel), so the backward is two launches. Streamed tiles stay
 * 64 rows; a warp skips chunks wholly masked for its rows and masks only chunks that cross its diagonal. */

/* c[mt] = A[mt] (16 x D) . B^T, B = rows [0, NC) of sB; A from registers (REG) or the 16 MT rows at sA. */
template <int D, int NC, int MT, bool REG>
static __device__ __forceinline__ void att4_abt(float (*c)[NC / 8][4], const uint32_t (*a)[D / 16][4], const uint16_t *sA,
                                                const uint16_t *sB, int lane)
{
    constexpr int LDB = D + 8;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NC / 8; j++) c[mt][j][0] = c[mt][j][1] = c[mt][j][2] = c[mt][j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            if constexpr (REG) {
                af[mt][0] = a[mt][kk][0], af[mt][1] = a[mt][kk][1], af[mt][2] = a[mt][kk][2], af[mt][3] = a[mt][kk][3];
            } else {
                att3_lda<LDB>(af[mt], sA + mt * 16 * LDB, kk, lane);
            }
        }
#pragma unroll
        for (int j = 0; j < NC / 16; j++) {
            uint32_t b[4];
            ldsm4(b, sB + (j * 16 + (lane & 7) + (lane >> 4) * 8) * LDB + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma16816(c[mt][2 * j], af[mt], b[0], b[1]);
                mma16816(c[mt][2 * j + 1], af[mt], b[2], b[3]);
            }
        }
    }
}

/* Sum over 8 bf16 pairs a[i] * b[i] in f32. */
static __device__ __forceinline__ float att4_dot8(uint4 a, uint4 b)
{
    const uint32_t x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s = fmaf(__uint_as_float(x[i] << 16), __uint_as_float(y[i] << 16), s);
        s = fmaf(__uint_as_float(x[i] & 0xffff0000u), __uint_as_float(y[i] & 0xffff0000u), s);
    }
    return s;
}

template <int D, int W, int MT> static constexpr size_t att4_dq_smem()
{
    return (2 * 16 * MT * W + 4 * ATT_TILE) * (D + 8) * 2 + 16 * MT * W * 4;
}
template <int D, int W, int MT> static constexpr size_t att4_dkdv_smem()
{
    return (2 * 16 * MT * W + 4 * ATT_TILE) * (D + 8) * 2 + 4 * ATT_TILE * 4;
}

/* dQ (and dd) of one block of 16 MT W queries (blockIdx.y from the last) from every key tile at or before
 * its last row: S = Q K^T, dP = dO V^T, dS = P (dP - dd), dQ += dS K. Keys in chunks of KC. */
template <int D, int W, int MT, int KC, bool REG, int MINB>
static __global__ void __launch_bounds__(W * 32, MINB)
    att4_bwd_dq(uint16_t *dqkv, float *dd, const uint16_t *dout, const uint16_t *out, const uint16_t *qkv,
                const float *lse, int T, int C, int H, float scale)
{
    constexpr int LDB = D + 8, TS = ATT_TILE * LDB, WR = 16 * MT, BQ = WR * W, NTH = W * 32;
    constexpr int CPR = D / 8, RPP = 32 / CPR; /* dd: lanes per row, rows per pass */
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Qs = (uint16_t *)smem, *dOs = Qs + BQ * LDB, *KV = dOs + BQ * LDB; /* KV: [buffer][K | V] */
    float *dd_s = (float *)(KV + 4 * TS);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int qt = gridDim.y - 1 - blockIdx.y;
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const int64_t obase = (int64_t)b * T * C + (int64_t)h * D;
    const int q0 = qt * BQ + warp * WR; /* the warp's first query */
    const int nkt = (min(qt * BQ + BQ, T) - 1) / ATT_TILE + 1;
    const uint16_t *Qw = Qs + warp * WR * LDB, *dOw = dOs + warp * WR * LDB;
    const float sl2 = scale * ATT3_LOG2E;

    att3_fetch<D, BQ, NTH>(Qs, base, qt * BQ, T, C3);
    att3_fetch<D, BQ, NTH>(dOs, dout + obase, qt * BQ, T, C);
    att3_fetch<D, ATT_TILE, NTH>(KV, base + C, 0, T, C3);
    att3_fetch<D, ATT_TILE, NTH>(KV + TS, base + 2 * (int64_t)C, 0, T, C3);
    cp_async_commit();

    /* dd of the warp's rows from global memory while the tiles arrive (not unrolled: registers) */
#pragma unroll 1
    for (int p = 0; p < WR / RPP; p++) {
        const int row = p * RPP + lane / CPR, q = q0 + row, ch = lane % CPR;
        float s = 0.0f;
        if (q < T)
            s = att4_dot8(*(const uint4 *)(dout + obase + (int64_t)q * C + ch * 8),
                          *(const uint4 *)(out + obase + (int64_t)q * C + ch * 8));
#pragma unroll
        for (int off = CPR / 2; off >= 1; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (ch == 0) {
            dd_s[warp * WR + row] = s;
            if (q < T) dd[(int64_t)bh * T + q] = s;
        }
    }
    float lr[MT][2], dr[MT][2]; /* lse (log2 units), dd of the lane's rows g, g + 8 of each block */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int q = q0 + 16 * mt + g + 8 * hr;
            lr[mt][hr] = q < T ? lse[(int64_t)bh * T + q] * ATT3_LOG2E : INFINITY;
        }

    uint32_t qf[MT][D / 16][4], of[MT][D / 16][4];
    float dq[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < D / 8; j++) dq[mt][j][0] = dq[mt][j][1] = dq[mt][j][2] = dq[mt][j][3] = 0.0f;

    for (int kt = 0; kt < nkt; kt++) {
        const uint16_t *Ks = KV + (kt & 1) * 2 * TS, *Vs = Ks + TS;
        if (kt + 1 < nkt) {
            uint16_t *nk = KV + ((kt + 1) & 1) * 2 * TS;
            att3_fetch<D, ATT_TILE, NTH>(nk, base + C, (kt + 1) * ATT_TILE, T, C3);
            att3_fetch<D, ATT_TILE, NTH>(nk + TS, base + 2 * (int64_t)C, (kt + 1) * ATT_TILE, T, C3);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (kt == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) dr[mt][hr] = dd_s[warp * WR + 16 * mt + g + 8 * hr];
            if constexpr (REG)
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int kk = 0; kk < D / 16; kk++) {
                        att3_lda<LDB>(qf[mt][kk], Qw + 16 * mt * LDB, kk, lane);
                        att3_lda<LDB>(of[mt][kk], dOw + 16 * mt * LDB, kk, lane);
                    }
        }
#pragma unroll
        for (int kc = 0; kc < ATT_TILE; kc += KC) {
            const int k = kt * ATT_TILE + kc; /* the chunk's first key */
            if (k > q0 + WR - 1) continue;   /* every key after every row of the warp */
            const bool diag = k + KC - 1 > q0;
            float s[MT][KC / 8][4], dp[MT][KC / 8][4];
            att4_abt<D, KC, MT, REG>(s, qf, Qw, Ks + kc * LDB, lane);   /* S = Q K^T */
            att4_abt<D, KC, MT, REG>(dp, of, dOw, Vs + kc * LDB, lane); /* dP = dO V^T */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < KC / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float p = att3_exp2(s[mt][j][e] * sl2 - lr[mt][e >> 1]);
                        if (diag && k + 8 * j + 2 * t4 + (e & 1) > q0 + 16 * mt + g + 8 * (e >> 1)) p = 0.0f;
                        s[mt][j][e] = p * (dp[mt][j][e] - dr[mt][e >> 1]);
                    }
            uint32_t sf[MT][KC / 16][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) att3_to_a<KC>(sf[mt], s[mt]);
            att3_pm_m<D, KC, MT>(dq, sf, Ks + kc * LDB, lane); /* dQ += dS K */
        }
        __syncthreads(); /* this buffer is refilled two tiles on */
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        att3_store<D>(dqkv + (int64_t)b * T * C3 + (int64_t)h * D, C3, q0 + 16 * mt, T, dq[mt], scale,
                      (uint16_t *)Qw + 16 * mt * LDB, lane);
}

/* dK, dV of one block of 16 MT W keys (blockIdx.y; the first blocks have the most work and start first) from
 * every query tile at or after its first key. S^T = K Q^T and dP^T = V dO^T come out with keys as rows, so
 * P^T and dS^T = P^T (dP^T - dd) feed dV += P^T dO and dK += dS^T Q straight from registers. Queries in
 * chunks of QC. */
template <int D, int W, int MT, int QC, bool REG, int MINB>
static __global__ void __launch_bounds__(W * 32, MINB)
    att4_bwd_dkdv(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse, const float *dd, int T,
                  int C, int H, float scale)
{
    constexpr int LDB = D + 8, TS = ATT_TILE * LDB, WR = 16 * MT, BK = WR * W, NTH = W * 32;
    static_assert(NTH >= ATT_TILE, "one thread per row of the streamed statistics");
    extern __shared__ __align__(128) unsigned char smem[];
    uint16_t *Ks = (uint16_t *)smem, *Vs = Ks + BK * LDB, *QD = Vs + BK * LDB; /* QD: [buffer][Q | dO] */
    float *stats = (float *)(QD + 4 * TS);                                     /* [buffer][lse | dd] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int kb = blockIdx.y, nt = (T + ATT_TILE - 1) / ATT_TILE;
    const int bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const uint16_t *dobase = dout + (int64_t)b * T * C + (int64_t)h * D;
    const float *lse_bh = lse + (int64_t)bh * T, *dd_bh = dd + (int64_t)bh * T;
    const int k0 = kb * BK + warp * WR, qt0 = kb * BK / ATT_TILE; /* the warp's first key; the first query tile */
    const uint16_t *Kw = Ks + warp * WR * LDB, *Vw = Vs + warp * WR * LDB;
    const float sl2 = scale * ATT3_LOG2E;

    att3_fetch<D, BK, NTH>(Ks, base + C, kb * BK, T, C3);
    att3_fetch<D, BK, NTH>(Vs, base + 2 * (int64_t)C, kb * BK, T, C3);
    att3_fetch<D, ATT_TILE, NTH>(QD, base, qt0 * ATT_TILE, T, C3);
    att3_fetch<D, ATT_TILE, NTH>(QD + TS, dobase, qt0 * ATT_TILE, T, C);
    cp_async_commit();
    if (threadIdx.x < ATT_TILE) {
        const int t = qt0 * ATT_TILE + threadIdx.x;
        stats[threadIdx.x] = t < T ? lse_bh[t] * ATT3_LOG2E : INFINITY;
        stats[ATT_TILE + threadIdx.x] = t < T ? dd_bh[t] : 0.0f;
    }

    uint32_t kf[MT][D / 16][4], vf[MT][D / 16][4];
    float dk[MT][D / 8][4], dv[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < D / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[mt][j][e] = dv[mt][j][e] = 0.0f;

    for (int qt = qt0; qt < nt; qt++) {
        const int buf = (qt - qt0) & 1;
        const uint16_t *Qs = QD + buf * 2 * TS, *dOs = Qs + TS;
        const float *lse_s = stats + buf * 2 * ATT_TILE, *dd_s = lse_s + ATT_TILE;
        if (qt + 1 < nt) {
            const int nb = buf ^ 1;
            att3_fetch<D, ATT_TILE, NTH>(QD + nb * 2 * TS, base, (qt + 1) * ATT_TILE, T, C3);
            att3_fetch<D, ATT_TILE, NTH>(QD + nb * 2 * TS + TS, dobase, (qt + 1) * ATT_TILE, T, C);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if constexpr (REG)
            if (qt == qt0)
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int kk = 0; kk < D / 16; kk++) {
                        att3_lda<LDB>(kf[mt][kk], Kw + 16 * mt * LDB, kk, lane);
                        att3_lda<LDB>(vf[mt][kk], Vw + 16 * mt * LDB, kk, lane);
                    }
        /* lse, dd of the next tile: loaded now, stored after the products hid the latency (the other buffer's
         * readers passed the barrier ending qt - 1) */
        const int tn = (qt + 1) * ATT_TILE + threadIdx.x;
        float nls = INFINITY, ndd = 0.0f;
        if (threadIdx.x < ATT_TILE && tn < T) {
            nls = lse_bh[tn] * ATT3_LOG2E;
            ndd = dd_bh[tn];
        }
#pragma unroll
        for (int qc = 0; qc < ATT_TILE; qc += QC) {
            const int q = qt * ATT_TILE + qc; /* the chunk's first query */
            if (q + QC - 1 < k0) continue;    /* every query before every key of the warp */
            const bool diag = q < k0 + WR - 1;
            float st[MT][QC / 8][4], dpt[MT][QC / 8][4];
            att4_abt<D, QC, MT, REG>(st, kf, Kw, Qs + qc * LDB, lane);   /* S^T = K Q^T */
            att4_abt<D, QC, MT, REG>(dpt, vf, Vw, dOs + qc * LDB, lane); /* dP^T = V dO^T */
#pragma unroll
            for (int j = 0; j < QC / 8; j++) {
                const int col = qc + 8 * j + 2 * t4; /* query of elements e = 0, 2 (+1 for e = 1, 3) in the tile */
                const float2 ls = *(const float2 *)(lse_s + col), ds = *(const float2 *)(dd_s + col);
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float p = att3_exp2(st[mt][j][e] * sl2 - ((e & 1) ? ls.y : ls.x));
                        if (diag && qt * ATT_TILE + col + (e & 1) < k0 + 16 * mt + g + 8 * (e >> 1)) p = 0.0f;
                        st[mt][j][e] = p;
                        dpt[mt][j][e] = p * (dpt[mt][j][e] - ((e & 1) ? ds.y : ds.x));
                    }
            }
            uint32_t pf[MT][QC / 16][4], sf[MT][QC / 16][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                att3_to_a<QC>(pf[mt], st[mt]);
                att3_to_a<QC>(sf[mt], dpt[mt]);
            }
            att3_pm_m<D, QC, MT>(dv, pf, dOs + qc * LDB, lane); /* dV += P^T dO */
            att3_pm_m<D, QC, MT>(dk, sf, Qs + qc * LDB, lane);  /* dK += dS^T Q */
        }
        if (threadIdx.x < ATT_TILE && qt + 1 < nt) {
            float *ns = stats + (buf ^ 1) * 2 * ATT_TILE;
            ns[threadIdx.x] = nls;
            ns[ATT_TILE + threadIdx.x] = ndd;
        }
        __syncthreads(); /* this buffer is refilled two tiles on; the next stats are visible */
    }
    uint16_t *rows = dqkv + (int64_t)b * T * C3 + (int64_t)h * D;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        att3_store<D>(rows + C, C3, k0 + 16 * mt, T, dk[mt], scale, (uint16_t *)Kw + 16 * mt * LDB, lane);
        att3_store<D>(rows + 2 * (int64_t)C, C3, k0 + 16 * mt, T, dv[mt], 1.0f, (uint16_t *)Vw + 16 * mt * LDB, lane);
    }
}

/* ------------------------------------------------------------------ SIMT path: one warp per row */

/* Row w of the (B, H, T) rows: its batch, head and position. */
struct att_row {
    int64_t b, h, t;
};
static __device__ __forceinline__ att_row att_row_of(int64_t w, int64_t H, int64_t T)
{
    att_row a;
    a.t = w % T;
    a.h = (w / T) % H;
    a.b = w / (T * H);
    return a;
}

/* lane's share of a head vector: elements lane + 32 k, k < DPL (zeros past D). */
template <int DPL>
static __device__ __forceinline__ void att_ld_vec(float *v, const void *p, tg_dtype dt, int64_t o, int D, int lane)
{
#pragma unroll
    for (int k = 0; k < DPL; k++) {
        const int e = lane + 32 * k;
        v[k] = e < D ? tgk_load(p, dt, o + e) : 0.0f;
    }
}

template <int DPL> static __device__ __forceinline__ float att_dot(const float *a, const float *b)
{
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < DPL; k++) s += a[k] * b[k];
    return tgk_warp_sum(s);
}

template <int DPL>
static __global__ void att_fwd_simt(void *out, float *lse, const void *qkv, tg_dtype dt, int64_t B, int64_t T,
                                    int64_t C, int64_t H, int D, float scale)
{
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (w >= B * H * T) return;
    const att_row a = att_row_of(w, H, T);
    const int64_t C3 = 3 * C, qo = (a.b * T + a.t) * C3 + a.h * D;
    float q[DPL], o[DPL], kv[DPL];
    att_ld_vec<DPL>(q, qkv, dt, qo, D, lane);
#pragma unroll
    for (int k = 0; k < DPL; k++) o[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j <= a.t; j++) {
        const int64_t ko = (a.b * T + j) * C3 + C + a.h * D;
        att_ld_vec<DPL>(kv, qkv, dt, ko, D, lane);
        const float s = att_dot<DPL>(q, kv) * scale;
        const float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
        att_ld_vec<DPL>(kv, qkv, dt, ko + C, D, lane);
#pragma unroll
        for (int k = 0; k < DPL; k++) o[k] = o[k] * corr + p * kv[k];
        m = mn;
    }
    const float inv = 1.0f / l;
    const int64_t oo = (a.b * T + a.t) * C + a.h * D;
#pragma unroll
    for (int k = 0; k < DPL; k++)
        if (lane + 32 * k < D) tgk_store(out, dt, oo + lane + 32 * k, o[k] * inv);
    if (lane == 0) lse[(a.b * H + a.h) * T + a.t] = m + logf(l);
}

/* dd[(b, h, t)] = dout_t . out_t over the head (f32, in order per lane then a fixed tree). */
template <int DPL>
static __global__ void att_dd_kernel(float *dd, const void *dout, const void *out, tg_dtype dt, int64_t B, int64_t T,
                                     int64_t C, int64_t H, int D)
{
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (w >= B * H * T) return;
    const att_row a = att_row_of(w, H, T);
    const int64_t oo = (a.b * T + a.t) * C + a.h * D;
    float x[DPL], y[DPL];
    att_ld_vec<DPL>(x, dout, dt, oo, D, lane);
    att_ld_vec<DPL>(y, out, dt, oo, D, lane);
    const float s = att_dot<DPL>(x, y);
    if (lane == 0) dd[w] = s;
}

/* dq of one query row: scale * sum_{j <= i} p_ij (dout_i . v_j - dd_i) k_j. */
template <int DPL>
static __global__ void att_bwd_dq_simt(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dd,
                                       tg_dtype dt, int64_t B, int64_t T, int64_t C, int64_t H, int D, float scale)
{
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (w >= B * H * T) return;
    const att_row a = att_row_of(w, H, T);
    const int64_t C3 = 3 * C, qo = (a.b * T + a.t) * C3 + a.h * D;
    float q[DPL], go[DPL], g[DPL], kv[DPL];
    att_ld_vec<DPL>(q, qkv, dt, qo, D, lane);
    att_ld_vec<DPL>(go, dout, dt, (a.b * T + a.t) * C + a.h * D, D, lane);
#pragma unroll
    for (int k = 0; k < DPL; k++) g[k] = 0.0f;
    const float l_i = lse[w], d_i = dd[w];
    for (int64_t j = 0; j <= a.t; j++) {
        const int64_t ko = (a.b * T + j) * C3 + C + a.h * D;
        att_ld_vec<DPL>(kv, qkv, dt, ko + C, D, lane);
        const float dp = att_dot<DPL>(go, kv);
        att_ld_vec<DPL>(kv, qkv, dt, ko, D, lane);
        const float p = expf(att_dot<DPL>(q, kv) * scale - l_i), ds = p * (dp - d_i);
#pragma unroll
        for (int k = 0; k < DPL; k++) g[k] += ds * kv[k];
    }
#pragma unroll
    for (int k = 0; k < DPL; k++)
        if (lane + 32 * k < D) tgk_store(dqkv, dt, qo + lane + 32 * k, g[k] * scale);
}

/* dk, dv of one key row j: sums over queries i >= j. */
template <int DPL>
static __global__ void att_bwd_dkdv_simt(void *dqkv, const void *dout, const void *qkv, const float *lse,
                                         const float *dd, tg_dtype dt, int64_t B, int64_t T, int64_t C, int64_t H, int D,
                                         float scale)
{
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (w >= B * H * T) return;
    const att_row a = att_row_of(w, H, T);
    const int64_t C3 = 3 * C, ko = (a.b * T + a.t) * C3 + C + a.h * D, vo = ko + C;
    const int64_t srow = (a.b * H + a.h) * T;
    float kk[DPL], vv[DPL], gk[DPL], gv[DPL], x[DPL], go[DPL];
    att_ld_vec<DPL>(kk, qkv, dt, ko, D, lane);
    att_ld_vec<DPL>(vv, qkv, dt, vo, D, lane);
#pragma unroll
    for (int k = 0; k < DPL; k++) gk[k] = gv[k] = 0.0f;
    for (int64_t i = a.t; i < T; i++) {
        att_ld_vec<DPL>(x, qkv, dt, (a.b * T + i) * C3 + a.h * D, D, lane);
        att_ld_vec<DPL>(go, dout, dt, (a.b * T + i) * C + a.h * D, D, lane);
        const float p = expf(att_dot<DPL>(x, kk) * scale - lse[srow + i]);
        const float ds = p * (att_dot<DPL>(go, vv) - dd[srow + i]);
#pragma unroll
        for (int k = 0; k < DPL; k++) {
            gk[k] += ds * x[k];
            gv[k] += p * go[k];
        }
    }
#pragma unroll
    for (int k = 0; k < DPL; k++)
        if (lane + 32 * k < D) {
            tgk_store(dqkv, dt, ko + lane + 32 * k, gk[k] * scale);
            tgk_store(dqkv, dt, vo + lane + 32 * k, gv[k]);
        }
}

/* ------------------------------------------------------------------ launchers */

/* Raises a kernel's dynamic shared-memory limit once per device (not a stream operation: legal while capturing). */
template <class K> static cudaError_t att_smem_limit(K kernel, size_t bytes, unsigned *done_mask)
{
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 32 && (*done_mask >> dev & 1u)) return cudaSuccess;
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess && dev < 32) *done_mask |= 1u << dev;
    return e;
}

/* 1: the v2 kernels may run on the current device (layout probe passed), 0: not, -1: unknown yet.
 * The probe synchronises, so it runs only outside stream capture; a call
 * that cannot probe takes the v1 kernels. */
static int att_v2_ok(cudaStream_t st)
{
    static int state[32]; /* per device: 0 unknown, 1 ok, 2 not */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev >= 32) return 0;
    if (state[dev]) return state[dev] == 1;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return 0;
    int *d = NULL, h = 0;
    cudaError_t e = cudaMalloc(&d, sizeof *d);
    if (e == cudaSuccess) {
        att_layout_probe<<<1, 32, 0, st>>>(d);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        cudaFree(d);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    state[dev] = h ? 1 : 2;
    return h != 0;
}

static bool att_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Whether the tensor-core path takes this call. */
static bool att_use_mma(tg_dtype dt, int D, int simt, const void *a, const void *b, const void *c)
{
    return simt != 1 && dt == TG_BF16 && (D == 16 || D == 32 || D == 64 || D == 128) && att_aligned(a) && att_aligned(b) &&
           att_aligned(c);
}

template <int D> static cudaError_t att_fwd_mma_launch(void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                                                       int64_t C, int H, float scale, cudaStream_t st)
{
    const size_t sm = att_fwd_smem<D>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att_fwd_mma<D>, sm, &done);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((T + ATT_TILE - 1) / ATT_TILE), (unsigned)(B * H));
    att_fwd_mma<D><<<grid, ATT_THREADS, sm, st>>>((uint16_t *)out, lse, (const uint16_t *)qkv, (int)T, (int)C, H, scale);
    return cudaGetLastError();
}

template <int DPL>
static cudaError_t att_fwd_simt_launch(void *out, float *lse, const void *qkv, tg_dtype dt, int64_t B, int64_t T,
                                       int64_t C, int H, int D, float scale, cudaStream_t st)
{
    const int64_t rows = B * H * T, per = TGK_THREADS / 32;
    att_fwd_simt<DPL><<<(unsigned)((rows + per - 1) / per), TGK_THREADS, 0, st>>>(out, lse, qkv, dt, B, T, C, H, D, scale);
    return cudaGetLastError();
}

template <int D, bool PIPE>
static cudaError_t att2_fwd_launch_p(void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t C, int H,
                                    float scale, cudaStream_t st)
{
    const size_t sm = att2_fwd_smem<D, PIPE>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att2_fwd<D, PIPE>, sm, &done);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((T + ATT_TILE - 1) / ATT_TILE), (unsigned)(B * H));
    att2_fwd<D, PIPE><<<grid, ATT_THREADS, sm, st>>>((uint16_t *)out, lse, (const uint16_t *)qkv, (int)T, (int)C, H,
                                                     scale);
    return cudaGetLastError();
}

/* TG_CUDA_ATTENTION=pipe: the v2 kernels with cp.async double buffering. Not the default: on the H200
 * (2025-11, examples/bench/RESULTS.md) it gained nothing at head dim 64 and made the D=128 backward 30%
 * slower (124 KB of shared memory: one block per multiprocessor instead of two). */
static bool att_pipe(void)
{
    const char *e = getenv("TG_CUDA_ATTENTION");
    return e && strcmp(e, "pipe") == 0;
}

template <int D> static cudaError_t att2_fwd_launch(void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                                                    int64_t C, int H, float scale, cudaStream_t st)
{
    return att_pipe() ? att2_fwd_launch_p<D, true>(out, lse, qkv, B, T, C, H, scale, st)
                      : att2_fwd_launch_p<D, false>(out, lse, qkv, B, T, C, H, scale, st);
}

template <int D, bool PIPE>
static cudaError_t att2_bwd_launch_p(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dd,
                                     int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    const size_t sm = att2_bwd_smem<D, PIPE>();
    static unsigned done_kv, done_q;
    cudaError_t e = att_smem_limit(att2_bwd_dkdv<D, PIPE>, sm, &done_kv);
    if (e == cudaSuccess) e = att_smem_limit(att2_bwd_dq<D, PIPE>, sm, &done_q);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((T + ATT_TILE - 1) / ATT_TILE), (unsigned)(B * H));
    att2_bwd_dkdv<D, PIPE><<<grid, ATT_THREADS, sm, st>>>((uint16_t *)dqkv, (const uint16_t *)dout,
                                                          (const uint16_t *)qkv, lse, dd, (int)T, (int)C, H, scale);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    att2_bwd_dq<D, PIPE><<<grid, ATT_THREADS, sm, st>>>((uint16_t *)dqkv, (const uint16_t *)dout, (const uint16_t *)qkv,
                                                        lse, dd, (int)T, (int)C, H, scale);
    return cudaGetLastError();
}

template <int D>
static cudaError_t att2_bwd_launch(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dd,
                                   int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    return att_pipe() ? att2_bwd_launch_p<D, true>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st)
                      : att2_bwd_launch_p<D, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
}

template <int D, int W, int MT, int MINB>
static cudaError_t att3_fwd_launch_w(void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t C, int H,
                                     float scale, cudaStream_t st)
{
    constexpr int BM = 16 * MT * W;
    const size_t sm = att3_fwd_smem<D, W, MT>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att3_fwd<D, W, MT, MINB>, sm, &done);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)(B * H), (unsigned)((T + BM - 1) / BM)); /* y is the slow index: longest rows first */
    att3_fwd<D, W, MT, MINB><<<grid, W * 32, sm, st>>>((uint16_t *)out, lse, (const uint16_t *)qkv, (int)T, (int)C, H, scale);
    return cudaGetLastError();
}
template <int D> static cudaError_t att3_fwd_launch(void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                                                    int64_t C, int H, float scale, cudaStream_t st)
{
    /* H200 (2026-11, b8 t1024 12 heads / b2 t2048 32 heads): head dim 64 runs best as 4 warps of 32 rows
     * (190 TFLOP/s; 16 rows: 183), 128 as 8 warps of 16 rows (232; 4 x 32 rows spills: 182). */
    if constexpr (D > 64) return att3_fwd_launch_w<D, 8, 1, 1>(out, lse, qkv, B, T, C, H, scale, st);
    else return att3_fwd_launch_w<D, 4, 2, 1>(out, lse, qkv, B, T, C, H, scale, st);
}

template <int D>
static cudaError_t att3_bwd_launch(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dd,
                                   int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    const size_t sm = att3_bwd_smem<D>();
    static unsigned done_kv, done_q;
    cudaError_t e = att_smem_limit(att3_bwd_dkdv<D>, sm, &done_kv);
    if (e == cudaSuccess) e = att_smem_limit(att3_bwd_dq<D>, sm, &done_q);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)(B * H), (unsigned)((T + ATT_TILE - 1) / ATT_TILE));
    att3_bwd_dkdv<D><<<grid, ATT_THREADS, sm, st>>>((uint16_t *)dqkv, (const uint16_t *)dout, (const uint16_t *)qkv,
                                                    lse, dd, (int)T, (int)C, H, scale);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    att3_bwd_dq<D><<<grid, ATT_THREADS, sm, st>>>((uint16_t *)dqkv, (const uint16_t *)dout, (const uint16_t *)qkv, lse,
                                                  dd, (int)T, (int)C, H, scale);
    return cudaGetLastError();
}

/* TG_ATT4=f,k,q picks other tile shapes of the v4 kernels for benchmarking (forward, dK/dV, dQ; each a
 * digit, 0 the default; see att4_*_launch); unset or malformed: the defaults. */
static int att4_preset(int which)
{
    const char *e = getenv("TG_ATT4");
    if (!e) return 0;
    for (int i = 0; *e; e++) {
        if (*e >= '0' && *e <= '9') {
            if (i == which) return *e - '0';
        } else if (*e == ',') {
            i++;
        } else {
            return 0;
        }
    }
    return 0;
}

template <int D> static cudaError_t att4_fwd_launch(void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                                                    int64_t C, int H, float scale, cudaStream_t st)
{
    const int p = att4_preset(0);
    if constexpr (D == 64) {
        switch (p) {
        case 1: return att3_fwd_launch_w<D, 8, 1, 1>(out, lse, qkv, B, T, C, H, scale, st);
        case 2: return att3_fwd_launch_w<D, 2, 2, 1>(out, lse, qkv, B, T, C, H, scale, st);
        case 3: return att3_fwd_launch_w<D, 8, 2, 1>(out, lse, qkv, B, T, C, H, scale, st);
        case 4: return att3_fwd_launch_w<D, 8, 1, 2>(out, lse, qkv, B, T, C, H, scale, st);
        case 5: return att3_fwd_launch_w<D, 4, 1, 4>(out, lse, qkv, B, T, C, H, scale, st);
        case 6: return att3_fwd_launch_w<D, 4, 1, 3>(out, lse, qkv, B, T, C, H, scale, st);
        default: break;
        }
    } else if constexpr (D == 128) {
        switch (p) {
        case 1: return att3_fwd_launch_w<D, 4, 1, 1>(out, lse, qkv, B, T, C, H, scale, st);
        default: break;
        }
    }
    return att3_fwd_launch<D>(out, lse, qkv, B, T, C, H, scale, st);
}

template <int D, int W, int MT, int KC, bool REG, int MINB = 1>
static cudaError_t att4_dq_launch_w(void *dqkv, float *dd, const void *dout, const void *out, const void *qkv,
                                    const float *lse, int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    constexpr int BQ = 16 * MT * W;
    const size_t sm = att4_dq_smem<D, W, MT>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att4_bwd_dq<D, W, MT, KC, REG, MINB>, sm, &done);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)(B * H), (unsigned)((T + BQ - 1) / BQ));
    att4_bwd_dq<D, W, MT, KC, REG, MINB><<<grid, W * 32, sm, st>>>((uint16_t *)dqkv, dd, (const uint16_t *)dout,
                                                             (const uint16_t *)out, (const uint16_t *)qkv, lse, (int)T,
                                                             (int)C, H, scale);
    return cudaGetLastError();
}

template <int D, int W, int MT, int QC, bool REG, int MINB = 1>
static cudaError_t att4_dkdv_launch_w(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dd,
                                      int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    constexpr int BK = 16 * MT * W;
    const size_t sm = att4_dkdv_smem<D, W, MT>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att4_bwd_dkdv<D, W, MT, QC, REG, MINB>, sm, &done);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)(B * H), (unsigned)((T + BK - 1) / BK));
    att4_bwd_dkdv<D, W, MT, QC, REG, MINB><<<grid, W * 32, sm, st>>>((uint16_t *)dqkv, (const uint16_t *)dout,
                                                               (const uint16_t *)qkv, lse, dd, (int)T, (int)C, H, scale);
    return cudaGetLastError();
}

/* v4 backward: dQ and dd first, then dK, dV (which read dd). Each kernel timed alone on the H200 (2026-11,
 * ops.lua, ms with ~0.05 of per-call cost; gpt2 b8 t1024 12 heads / large b2 t2048 32 heads), v3's tiles
 * (4 warps x 16 rows, 64-row chunks): dK/dV 0.160 / 0.488, dQ 0.104 / 0.434. Head dim 64: dK/dV best as
 * 4 warps x 32 keys (0.097; 8 x 16: 0.115, 2 x 32: 0.100, 32-query chunks in 168 registers: 0.100), dQ as
 * 8 warps x 16 queries with 32-key chunks in 128 registers (0.086; 4 x 32: 0.098, 4 x 16 in 128: 0.087).
 * Head dim 128 (a warp of 32 rows would need 256 accumulator registers): dK/dV stays 4 x 16 (8 x 16: 0.513,
 * 16-query chunks: 0.562), dQ keeps Q, dO fragments in registers (8 warps 0.384, 4: 0.389). Whole backward at
 * gpt2, the defaults 0.183 ms against: dK/dV over 256 keys (8 warps x 32, presets 8, 9) 0.195 / 0.203, dQ over
 * 256 queries (8 x 32, preset 8) 0.193, dQ as 4 warps x 32 queries in 128 registers (9) 0.186. v3 -> v4:
 * 0.215 -> 0.183 ms (gpt2), 0.976 -> 0.869 ms (large). TG_ATT4 presets (digits) select the alternatives. */
template <int D>
static cudaError_t att4_bwd_launch(void *dqkv, float *dd, const void *dout, const void *out, const void *qkv,
                                   const float *lse, int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    const int pk = att4_preset(1), pq = att4_preset(2);
    cudaError_t e = cudaSuccess;
    if constexpr (D == 64) {
        switch (pq) {
        case 1: e = att4_dq_launch_w<D, 8, 1, 64, true>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 2: e = att4_dq_launch_w<D, 4, 2, 32, true>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 3: e = att4_dq_launch_w<D, 2, 2, 32, true>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 4: e = att4_dq_launch_w<D, 4, 2, 32, false>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 5: e = att4_dq_launch_w<D, 4, 1, 32, true, 4>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 6: e = att4_dq_launch_w<D, 4, 1, 64, true>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 7: e = att4_dq_launch_w<D, 4, 1, 64, true, 3>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 8: e = att4_dq_launch_w<D, 8, 2, 16, false, 2>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 9: e = att4_dq_launch_w<D, 4, 2, 16, false, 4>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        default: e = att4_dq_launch_w<D, 8, 1, 32, true, 2>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        }
        if (e != cudaSuccess) return e;
        switch (pk) {
        case 1: return att4_dkdv_launch_w<D, 8, 1, 64, true>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 2: return att4_dkdv_launch_w<D, 4, 1, 64, true>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 3: return att4_dkdv_launch_w<D, 2, 2, 32, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 4: return att4_dkdv_launch_w<D, 4, 2, 16, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 5: return att4_dkdv_launch_w<D, 4, 1, 32, true, 3>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 6: return att4_dkdv_launch_w<D, 4, 1, 64, false, 3>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 7: return att4_dkdv_launch_w<D, 4, 1, 32, false, 3>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 8: return att4_dkdv_launch_w<D, 8, 2, 32, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 9: return att4_dkdv_launch_w<D, 8, 2, 16, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        default: return att4_dkdv_launch_w<D, 4, 2, 32, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        }
    } else if constexpr (D == 128) {
        switch (pq) {
        case 1: e = att4_dq_launch_w<D, 8, 1, 32, false>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 2: e = att4_dq_launch_w<D, 4, 1, 32, true>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        case 3: e = att4_dq_launch_w<D, 4, 1, 32, false>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        default: e = att4_dq_launch_w<D, 8, 1, 32, true>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st); break;
        }
        if (e != cudaSuccess) return e;
        switch (pk) {
        case 1: return att4_dkdv_launch_w<D, 8, 1, 32, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 2: return att4_dkdv_launch_w<D, 4, 1, 16, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        case 3: return att4_dkdv_launch_w<D, 8, 1, 16, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        default: return att4_dkdv_launch_w<D, 4, 1, 32, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
        }
    } else {
        e = att4_dq_launch_w<D, 4, 1, 64, true>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st);
        if (e != cudaSuccess) return e;
        return att4_dkdv_launch_w<D, 4, 1, 64, true>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
    }
}

extern "C" cudaError_t tg_cuda_attention_forward(void *out, float *lse, const void *qkv, tg_dtype dt, int64_t b,
                                                 int64_t t, int64_t c, int n_head, int simt, cudaStream_t st)
{
    if (b <= 0 || t <= 0 || c <= 0) return cudaSuccess;
    const int D = (int)(c / n_head);
    const float scale = 1.0f / sqrtf((float)D);
    if (t > INT32_MAX || 3 * c > INT32_MAX || b * n_head > 65535) return cudaErrorInvalidValue;
    if (att_use_mma(dt, D, simt, out, qkv, qkv) && simt == 0) {
        switch (D) {
        case 16: return att4_fwd_launch<16>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 32: return att4_fwd_launch<32>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 64: return att4_fwd_launch<64>(out, lse, qkv, b, t, c, n_head, scale, st);
        default: return att4_fwd_launch<128>(out, lse, qkv, b, t, c, n_head, scale, st);
        }
    }
    if (att_use_mma(dt, D, simt, out, qkv, qkv) && simt == 4) {
        switch (D) {
        case 16: return att3_fwd_launch<16>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 32: return att3_fwd_launch<32>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 64: return att3_fwd_launch<64>(out, lse, qkv, b, t, c, n_head, scale, st);
        default: return att3_fwd_launch<128>(out, lse, qkv, b, t, c, n_head, scale, st);
        }
    }
    if (att_use_mma(dt, D, simt, out, qkv, qkv) && simt == 3 && att_v2_ok(st)) {
        switch (D) {
        case 16: return att2_fwd_launch<16>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 32: return att2_fwd_launch<32>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 64: return att2_fwd_launch<64>(out, lse, qkv, b, t, c, n_head, scale, st);
        default: return att2_fwd_launch<128>(out, lse, qkv, b, t, c, n_head, scale, st);
        }
    }
    if (att_use_mma(dt, D, simt, out, qkv, qkv)) {
        switch (D) {
        case 16: return att_fwd_mma_launch<16>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 32: return att_fwd_mma_launch<32>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 64: return att_fwd_mma_launch<64>(out, lse, qkv, b, t, c, n_head, scale, st);
        default: return att_fwd_mma_launch<128>(out, lse, qkv, b, t, c, n_head, scale, st);
        }
    }
    if (D <= 32) return att_fwd_simt_launch<1>(out, lse, qkv, dt, b, t, c, n_head, D, scale, st);
    if (D <= 64) return att_fwd_simt_launch<2>(out, lse, qkv, dt, b, t, c, n_head, D, scale, st);
    if (D <= 128) return att_fwd_simt_launch<4>(out, lse, qkv, dt, b, t, c, n_head, D, scale, st);
    if (D <= 256) return att_fwd_simt_launch<8>(out, lse, qkv, dt, b, t, c, n_head, D, scale, st);
    return cudaErrorInvalidValue;
}

template <int D>
static cudaError_t att_bwd_mma_launch(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dd,
                                      int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    const size_t sm = att_bwd_smem<D>();
    static unsigned done_kv, done_q;
    cudaError_t e = att_smem_limit(att_bwd_dkdv_mma<D>, sm, &done_kv);
    if (e == cudaSuccess) e = att_smem_limit(att_bwd_dq_mma<D>, sm, &done_q);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((T + ATT_TILE - 1) / ATT_TILE), (unsigned)(B * H));
    att_bwd_dkdv_mma<D><<<grid, ATT_THREADS, sm, st>>>((uint16_t *)dqkv, (const uint16_t *)dout, (const uint16_t *)qkv,
                                                       lse, dd, (int)T, (int)C, H, scale);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    att_bwd_dq_mma<D><<<grid, ATT_THREADS, sm, st>>>((uint16_t *)dqkv, (const uint16_t *)dout, (const uint16_t *)qkv,
                                                     lse, dd, (int)T, (int)C, H, scale);
    return cudaGetLastError();
}

template <int DPL>
static cudaError_t att_bwd_simt_launch(void *dqkv, const void *dout, const void *out, const void *qkv, const float *lse,
                                       float *dd, tg_dtype dt, int64_t B, int64_t T, int64_t C, int H, int D,
                                       float scale, bool dd_only, cudaStream_t st)
{
    const int64_t rows = B * H * T, per = TGK_THREADS / 32;
    const unsigned g = (unsigned)((rows + per - 1) / per);
    att_dd_kernel<DPL><<<g, TGK_THREADS, 0, st>>>(dd, dout, out, dt, B, T, C, H, D);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || dd_only) return e;
    att_bwd_dq_simt<DPL><<<g, TGK_THREADS, 0, st>>>(dqkv, dout, qkv, lse, dd, dt, B, T, C, H, D, scale);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    att_bwd_dkdv_simt<DPL><<<g, TGK_THREADS, 0, st>>>(dqkv, dout, qkv, lse, dd, dt, B, T, C, H, D, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_attention_backward(void *dqkv, const void *dout, const void *out, const void *qkv,
                                                  const float *lse, tg_dtype dt, int64_t b, int64_t t, int64_t c,
                                                  int n_head, int simt, float *scratch, size_t scratch_bytes,
                                                  cudaStream_t st)
{
    if (b <= 0 || t <= 0 || c <= 0) return cudaSuccess;
    const int D = (int)(c / n_head);
    const float scale = 1.0f / sqrtf((float)D);
    if (t > INT32_MAX || 3 * c > INT32_MAX || b * n_head > 65535) return cudaErrorInvalidValue;
    if ((size_t)(b * n_head * t) * sizeof(float) > scratch_bytes) return cudaErrorInvalidValue; /* dd does not fit */
    float *dd = scratch;
    if (att_use_mma(dt, D, simt, dqkv, dout, qkv) && att_aligned(out) && simt == 0) {
        switch (D) { /* dd comes from the dQ kernel */
        case 16: return att4_bwd_launch<16>(dqkv, dd, dout, out, qkv, lse, b, t, c, n_head, scale, st);
        case 32: return att4_bwd_launch<32>(dqkv, dd, dout, out, qkv, lse, b, t, c, n_head, scale, st);
        case 64: return att4_bwd_launch<64>(dqkv, dd, dout, out, qkv, lse, b, t, c, n_head, scale, st);
        default: return att4_bwd_launch<128>(dqkv, dd, dout, out, qkv, lse, b, t, c, n_head, scale, st);
        }
    }
    if (att_use_mma(dt, D, simt, dqkv, dout, qkv) && att_aligned(out)) {
        cudaError_t e;
        const int v = simt == 4 ? 3 : simt == 3 && att_v2_ok(st) ? 2 : 1; /* v3, v2 or v1 kernels */
        switch (D) { /* dd through the SIMT kernel (DPL covers D), then the two tensor-core kernels */
        case 16:
            e = att_bwd_simt_launch<1>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, true, st);
            if (e != cudaSuccess) return e;
            return v == 3   ? att3_bwd_launch<16>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st)
                   : v == 2 ? att2_bwd_launch<16>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st)
                            : att_bwd_mma_launch<16>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st);
        case 32:
            e = att_bwd_simt_launch<1>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, true, st);
            if (e != cudaSuccess) return e;
            return v == 3   ? att3_bwd_launch<32>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st)
                   : v == 2 ? att2_bwd_launch<32>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st)
                            : att_bwd_mma_launch<32>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st);
        case 64:
            e = att_bwd_simt_launch<2>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, true, st);
            if (e != cudaSuccess) return e;
            return v == 3   ? att3_bwd_launch<64>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st)
                   : v == 2 ? att2_bwd_launch<64>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st)
                            : att_bwd_mma_launch<64>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st);
        default:
            e = att_bwd_simt_launch<4>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, true, st);
            if (e != cudaSuccess) return e;
            return v == 3   ? att3_bwd_launch<128>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st)
                   : v == 2 ? att2_bwd_launch<128>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st)
                            : att_bwd_mma_launch<128>(dqkv, dout, qkv, lse, dd, b, t, c, n_head, scale, st);
        }
    }
    if (D <= 32) return att_bwd_simt_launch<1>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, false, st);
    if (D <= 64) return att_bwd_simt_launch<2>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, false, st);
    if (D <= 128) return att_bwd_simt_launch<4>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, false, st);
    if (D <= 256) return att_bwd_simt_launch<8>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, false, st);
    return cudaErrorInvalidValue;
}
