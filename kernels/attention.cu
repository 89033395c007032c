/* attention.cu — causal multi-head attention over packed qkv: flash-style forward saving logsumexp, backward recomputing the probabilities. */
#include "colsum.cuh" /* tgk_warp_sum */
extern "C" {
#include "core/debug.h"
}

#include <cuda_bf16.h>
#include <cudaTypedefs.h> /* CUtensorMap, PFN_cuTensorMapEncodeTiled */

#include <algorithm>

/* Three paths, all deterministic (every sum in a fixed order):
 * - Hopper forward (bf16, head dim 64/128, sm_90a build on a compute capability 9.0 device): wgmma with Q, K, V
 *   brought by TMA through an mbarrier ring, a producer warpgroup and two consumer warpgroups taking turns
 *   (att6_fwd; att5_fwd, the cp.async version, where the driver cannot encode tensor maps); the backward on
 *   wgmma: at head dim 64 one kernel for dQ, dK and dV (att9_bwd, dQ summed across key blocks in key-block order
 *   through a scratch), else (or where the scratch, the tensor maps or the debug switch attention_two_pass say
 *   no) two: dQ and dd with a cp.async ring (att7_bwd_dq), then dK and dV with Q / dO tiles from TMA and an
 *   mbarrier ring (att8_bwd_dkdv; att7_bwd_dkdv, a cp.async ring, where the tensor maps or the scratch layout
 *   are not available).
 * - tensor cores (bf16, head dim 16/32/64/128, 16-byte aligned buffers): mma.sync m16n8k16 + ldmatrix,
 *   the streamed 64-row tiles double-buffered with cp.async, probabilities never leaving registers, softmax
 *   in f32. The forward runs one block per (batch*head, query block). The backward runs a dQ kernel per
 *   query block, which also computes dd = rowsum(dout * out) of its rows, then a dK/dV kernel per key
 *   block, so no gradient row is summed by two blocks. The blocks' rows are sized per head dim (launchers).
 * - SIMT (f32, other head dims up to 256, or buffers not 16-byte aligned): one warp per row, f32
 *   arithmetic as the CPU reference. */

#define ATT_TILE 64 /* rows of a streamed K/V (forward, dQ) or Q/dO (dK/dV) tile */

/* cp.async (sm_80+): 16 bytes global -> shared without passing through registers, completed by wait_group. */
static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem));
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* ------------------------------------------------------------------ tensor cores: mma.sync + ldmatrix + cp.async
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
 * Every warp owns 16 or 32 query (forward, dQ) or key (dK/dV) rows of its block; the streamed 64-row tiles are
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
template <int D, int R, int NTH>
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

/* ------------------------------------------------------------------ backward: tiles sized per head dim
 * The same mma.sync / ldmatrix / cp.async building blocks as the forward, with the block's own rows (keys for dK/dV,
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

/* ------------------------------------------------------------------ forward on Hopper: wgmma (sm_90a)
 * Built only into the sm_90a image (the launcher takes it on devices of compute capability 9.0 when the build
 * has that image; otherwise the mma.sync forward above runs). One block of NWG warpgroups per (batch*head,
 * 64 NWG-query tile), each warpgroup owning 64 query rows; key/value tiles of BN rows in a 3-stage ring filled
 * by cp.async from all threads. Shared tiles use the wgmma-canonical 128-byte swizzle: a tile of R rows and
 * D columns is D / 64 column blocks of R x 128 bytes, the 16-byte chunk c of row r at chunk c ^ (r & 7), every
 * block 1024-byte aligned, so:
 * - S = Q K^T takes both operands K-major from shared memory (descriptor: stride 1024 bytes between 8-row
 *   groups; the k-step of 16 columns advances the start address by 32 bytes inside the 128-byte row);
 * - O += P V takes P from registers (the m64nNk16 A fragment of a warp is the mma.m16n8k16 one of its 16 rows,
 *   so the S accumulator converts in place, as in the mma.sync path) and V MN-major (transposed B: 1024 bytes
 *   between 8-key groups, R x 128 bytes between 64-column blocks).
 * The accumulator of m64nN gives warp w of the group rows 16 w + g, 16 w + g + 8 (g = lane / 4) and columns
 * 8 j + 2 t, 8 j + 2 t + 1 (t = lane % 4) in registers 4 j .. 4 j + 3: the mma.sync C layout, so masking and the
 * online softmax are the mma.sync path's. Each iteration issues S of tile k and P V of tile k - 1 together
 * and runs the softmax of tile k while P V runs (waits: S first, then P V before O is rescaled). */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
/* Keeps the compiler from moving reads or writes of accumulator registers across an issue or a wait. */
template <int N> static __device__ __forceinline__ void wg_pin(float (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N> static __device__ __forceinline__ void wg_pin(uint32_t (&d)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+r"(d[i][e])::"memory");
}
/* Shared-memory matrix descriptor: start address, leading and stride byte offsets (>> 4), swizzle (the layout
 * field: 1 the 128-byte swizzle, rows of 128 bytes in 1024-byte atoms; 2 the 64-byte one, rows of 64 bytes in
 * 512-byte atoms). */
static __device__ __forceinline__ uint64_t wg_desc(const void *p, uint32_t lbo, uint32_t sbo, uint64_t swizzle = 1)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | swizzle << 62;
}
/* Orders this thread's generic-proxy shared writes (cp.async, stores) before later async-proxy (wgmma) reads. */
static __device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* d (64 x 128, f32) = (acc ? d : 0) + A . B^T: A (64 x 16), B (128 x 16), both K-major in shared memory. */
static __device__ __forceinline__ void wg_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc));
}
/* d (64 x 64, f32) += A . B: A (64 x 16) in registers (per warp the mma.m16n8k16 A fragment of its 16 rows),
 * B (16 x 64) MN-major in shared memory. */
static __device__ __forceinline__ void wg_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
/* d (64 x 128, f32) += A . B: A (64 x 16) in registers (per warp the mma.m16n8k16 A fragment of its 16 rows),
 * B (16 x 128) MN-major in shared memory. */
static __device__ __forceinline__ void wg_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* Rows [t0, t0 + R) of a (T, stride) bf16 matrix into dst in the swizzled layout; rows >= T are zeroed. */
template <int D, int R, int NTH>
static __device__ __forceinline__ void att5_fetch(unsigned char *dst, const uint16_t *src, int t0, int T, int64_t stride)
{
    constexpr int CPR = D / 8; /* 16-byte chunks per row */
#pragma unroll
    for (int i = threadIdx.x; i < R * CPR; i += NTH) {
        const int r = i / CPR, c = i % CPR;
        unsigned char *d = dst + (c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
        if (t0 + r < T) cp_async16(d, src + (int64_t)(t0 + r) * stride + c * 8);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
}

/* S (64 x BN) = Q rows of the warpgroup . K^T. */
template <int D, int BM, int BN>
static __device__ __forceinline__ void att5_qk(float (&s)[BN / 2], const unsigned char *Qw, const unsigned char *Ks)
{
    static_assert(BN == 128, "S tiles of 128 keys");
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        wg_ss_n128(s, wg_desc(Qw + (kk >> 2) * (BM * 128) + (kk & 3) * 32, 16, 1024),
                   wg_desc(Ks + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024), kk > 0);
}
/* O (64 x D) += P (64 x BN, registers) . V. */
template <int D, int BN>
static __device__ __forceinline__ void att5_pv(float (&o)[D / 2], const uint32_t (&p)[BN / 16][4], const unsigned char *Vs)
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        const uint64_t dv = wg_desc(Vs + kk * 16 * 128, BN * 128, 1024);
        if constexpr (D == 128) wg_rs_n128(o, p[kk], dv);
        else wg_rs_n64(o, p[kk], dv);
    }
}
/* Online softmax of one S tile (keys k0..k0 + BN - 1) for this lane's rows r0, r0 + 8 of a warpgroup whose first
 * row is qw0: the causal mask where the tile reaches past qw0, the running max m, the lane's part of the row
 * sums l (rescaled), the rescale factor of O (corr), and the probabilities in place of the scores. Scores stay
 * raw; exp2 of s * scale * log2 e - m * scale * log2 e, one FMA. */
template <int BN>
static __device__ __forceinline__ void att5_softmax(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&corr)[2],
                                                    int k0, int qw0, int r0, int t4, float sl2)
{
    float mx[2] = {-INFINITY, -INFINITY};
    const bool diag = k0 + BN - 1 > qw0;
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (diag && k0 + 8 * j + 2 * t4 + (e & 1) > r0 + 8 * (e >> 1)) s[4 * j + e] = -INFINITY;
            mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * j + e]);
        }
    float ms[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) { /* the four lanes of a row: t = 0..3 */
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
        /* -inf only for rows with no key up to this tile (then p = 0, o and l unchanged) */
        const float mn = fmaxf(m[hr], mx[hr]);
        corr[hr] = mn == -INFINITY ? 1.0f : att3_exp2((m[hr] - mn) * sl2);
        m[hr] = mn;
        ms[hr] = mn == -INFINITY ? 0.0f : mn * sl2;
        l[hr] *= corr[hr];
    }
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float pe = att3_exp2(fmaf(s[4 * j + e], sl2, -ms[e >> 1]));
            s[4 * j + e] = pe;
            l[e >> 1] += pe;
        }
}
/* The probabilities (accumulator layout) as bf16 A fragments of P V: k-chunk kk is column tiles 2 kk, 2 kk + 1. */
template <int BN> static __device__ __forceinline__ void att5_to_p(uint32_t (&p)[BN / 16][4], const float (&s)[BN / 2])
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        p[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
        p[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
        p[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
        p[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
    }
}
#endif

template <int D, int NWG, int BN> static constexpr size_t att5_fwd_smem()
{
    return 1024 + (size_t)64 * NWG * D * 2 + (size_t)3 * 2 * BN * D * 2; /* alignment slack, Q, 3 x (K, V) */
}

template <int D, int NWG, int BN>
static __global__ void __launch_bounds__(NWG * 128, 1)
    att5_fwd(uint16_t *out, float *lse, const uint16_t *qkv, int T, int C, int H, float scale)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = 64 * NWG, NTH = NWG * 128, TB = BN * D * 2; /* TB: bytes of one K or V tile */
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Qs = smem_raw + ((1024 - ((uint32_t)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    unsigned char *KV = Qs + BM * D * 2; /* stage i: K at KV + 2 i TB, V at KV + (2 i + 1) TB */
    /* the warpgroup index through a shuffle: the compiler then knows it is the same across the warp, so the
     * wgmma under the conditions below is not taken for divergent code (which it would serialize) */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), warp = (threadIdx.x / 32) % 4,
              lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int qt = gridDim.y - 1 - blockIdx.y, bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const int qw0 = qt * BM + wg * 64; /* the warpgroup's first query */
    const int nkt = (min(qt * BM + BM, T) - 1) / BN + 1;
    /* tiles this warpgroup computes: those with a key at or before its last row (none when its rows are past T) */
    const int nact = qw0 >= T ? 0 : min(nkt, (qw0 + 63) / BN + 1);
    const float sl2 = scale * ATT3_LOG2E;

    att5_fetch<D, BM, NTH>(Qs, base, qt * BM, T, C3);
    att5_fetch<D, BN, NTH>(KV, base + C, 0, T, C3);
    att5_fetch<D, BN, NTH>(KV + TB, base + 2 * (int64_t)C, 0, T, C3);
    cp_async_commit();

    float o[D / 2], s[BN / 2], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, corr[2];
    uint32_t p[BN / 16][4];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < BN / 2; i++) s[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < BN / 16; i++) p[i][0] = p[i][1] = p[i][2] = p[i][3] = 0u;
    const unsigned char *Qw = Qs + wg * 64 * 128;
    const int r0 = qw0 + warp * 16 + g; /* this lane's rows: r0, r0 + 8 */

    for (int kt = 0; kt <= nkt; kt++) {
        cp_async_wait<0>(); /* tile kt (and Q) landed */
        fence_proxy_async();
        __syncthreads();
        if (kt + 1 < nkt) { /* tile kt + 1 into the stage of tile kt - 2, whose P V every warpgroup finished in
                             * iteration kt - 1 (before the barrier above); it lands while tile kt is computed */
            unsigned char *st = KV + ((kt + 1) % 3) * 2 * TB;
            att5_fetch<D, BN, NTH>(st, base + C, (kt + 1) * BN, T, C3);
            att5_fetch<D, BN, NTH>(st + TB, base + 2 * (int64_t)C, (kt + 1) * BN, T, C3);
            cp_async_commit();
        }
        /* per warpgroup: S of tile kt for kt < nact, P V of tile kt - 1 for 1 <= kt <= nact; each case is one
         * straight sequence of issue, commit and wait (a wait under a condition makes the compiler serialize) */
        if (kt == 0 && nact > 0) {
            wg_fence();
            att5_qk<D, BM, BN>(s, Qw, KV);
            wg_commit();
            wg_wait<0>();
            wg_pin(s);
            att5_softmax<BN>(s, m, l, corr, kt * BN, qw0, r0, t4, sl2);
            att5_to_p<BN>(p, s);
        } else if (kt > 0 && kt < nact) {
            wg_pin(o);
            wg_pin(p);
            wg_fence();
            att5_qk<D, BM, BN>(s, Qw, KV + (kt % 3) * 2 * TB);
            wg_commit();
            att5_pv<D, BN>(o, p, KV + ((kt - 1) % 3) * 2 * TB + TB);
            wg_commit();
            wg_wait<1>();
            wg_pin(s);
            att5_softmax<BN>(s, m, l, corr, kt * BN, qw0, r0, t4, sl2);
            wg_wait<0>();
            wg_pin(o);
            wg_pin(p);
#pragma unroll
            for (int j = 0; j < D / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[4 * j + e] *= corr[e >> 1];
            att5_to_p<BN>(p, s);
        } else if (kt > 0 && kt == nact) {
            wg_pin(o);
            wg_pin(p);
            wg_fence();
            att5_pv<D, BN>(o, p, KV + ((kt - 1) % 3) * 2 * TB + TB);
            wg_commit();
            wg_wait<0>();
            wg_pin(o);
        }
    }
    /* Epilogue: O / l as bf16 through shared memory (the K/V stages are free after the last barrier below),
     * 64 rows per warpgroup, then 16-byte row stores. */
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
    }
    __syncthreads();
    constexpr int LDO = D + 8;
    uint16_t *so = (uint16_t *)KV + wg * 64 * LDO;
    const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++)
            *(uint32_t *)(so + (warp * 16 + g + 8 * hr) * LDO + 8 * j + 2 * t4) =
                pack_bf16(o[4 * j + 2 * hr] * inv[hr], o[4 * j + 2 * hr + 1] * inv[hr]);
    __syncthreads();
    uint16_t *ob = out + (int64_t)b * T * C + (int64_t)h * D;
    for (int i = threadIdx.x % 128; i < 64 * (D / 8); i += 128) {
        const int r = i / (D / 8), ch = i % (D / 8);
        if (qw0 + r < T) *(uint4 *)(ob + (int64_t)(qw0 + r) * C + ch * 8) = *(const uint4 *)(so + r * LDO + ch * 8);
    }
    if (t4 == 0)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int qi = r0 + 8 * hr;
            if (qi < T) lse[(int64_t)bh * T + qi] = m[hr] * scale + logf(l[hr]);
        }
#endif
}


/* ------------------------------------------------------------------ forward on Hopper, warp-specialized (sm_90a)
 * The same products and softmax as att5_fwd, with the tiles brought by the tensor copy engine (TMA:
 * cp.async.bulk.tensor, 64 x 64 boxes in the 128-byte swizzle, completing on mbarriers) from one producer
 * warpgroup, so the NWG consumer warpgroups never wait on each other: stage i of the ring has a "K full", a
 * "V full" (transaction-count barriers the producer arms) and an "empty" barrier (every consumer thread arrives
 * once it is done with the tile, or, for a tile its rows do not reach, once the tile has landed). The producer
 * gives its registers to the consumers (setmaxnreg). qkv is seen as a (B, T, 3C) tensor: rows past T read as
 * zeros. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ void mb_init(uint32_t bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mb_expect(uint32_t bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mb_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* Waits for the completion of the barrier's phase of this parity. */
static __device__ __forceinline__ void mb_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* One 64 x 64 box of the (B, T, 3C) tensor at (column c0, row t0, batch b) into dst, completing on bar. */
static __device__ __forceinline__ void tma_box(uint32_t dst, const CUtensorMap *tm, uint32_t bar, int c0, int t0, int b)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
                 ::"r"(dst), "l"((uint64_t)tm), "r"(bar), "r"(c0), "r"(t0), "r"(b)
                 : "memory");
}
/* A tile of R rows from row t0, columns col0 .. col0 + D - 1, in the swizzled layout (D / 64 column blocks). */
template <int D, int R>
static __device__ __forceinline__ void tma_tile(uint32_t dst, const CUtensorMap *tm, uint32_t bar, int col0, int t0, int b)
{
#pragma unroll
    for (int cb = 0; cb < D / 64; cb++)
#pragma unroll
        for (int i = 0; i < R / 64; i++) tma_box(dst + cb * R * 128 + i * 64 * 128, tm, bar, col0 + 64 * cb, t0 + 64 * i, b);
}
#endif

template <int D, int NWG, int BN, int S> static constexpr size_t att6_fwd_smem()
{
    return 1024 + (size_t)64 * NWG * D * 2 + (size_t)S * 2 * BN * D * 2 + 8 * (1 + 3 * S);
}

template <int D, int NWG, int BN, int S, bool PP>
static __global__ void __launch_bounds__((NWG + 1) * 128, 1)
    att6_fwd(const __grid_constant__ CUtensorMap tm, uint16_t *out, float *lse, int T, int C, int H, float scale)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = 64 * NWG, TB = BN * D * 2;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Qs = smem_raw + ((1024 - ((uint32_t)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    unsigned char *KV = Qs + BM * D * 2; /* stage i: K at KV + 2 i TB, V at KV + (2 i + 1) TB */
    const uint32_t qs_a = (uint32_t)__cvta_generic_to_shared(Qs), kv_a = qs_a + BM * D * 2;
    const uint32_t bars = kv_a + S * 2 * TB; /* q full, then per stage: K full, V full, empty */
#define ATT6_KF(i) (bars + 8 + 24 * (i))
#define ATT6_VF(i) (bars + 16 + 24 * (i))
#define ATT6_EM(i) (bars + 24 + 24 * (i))
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    const int qt = gridDim.y - 1 - blockIdx.y, bh = blockIdx.x, b = bh / H, h = bh % H;
    const int nkt = (min(qt * BM + BM, T) - 1) / BN + 1;
    if (threadIdx.x == 0) {
        mb_init(bars, 1);
        for (int i = 0; i < S; i++) {
            mb_init(ATT6_KF(i), 1);
            mb_init(ATT6_VF(i), 1);
            mb_init(ATT6_EM(i), NWG * 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (threadIdx.x == 0) {
            mb_expect(bars, BM * D * 2);
            tma_tile<D, BM>(qs_a, &tm, bars, h * D, qt * BM, b);
            for (int kt = 0; kt < nkt; kt++) {
                const int s = kt % S;
                if (kt >= S) mb_wait(ATT6_EM(s), ((kt / S) + 1) & 1); /* the consumers are done with tile kt - S */
                const uint32_t kd = kv_a + s * 2 * TB;
                mb_expect(ATT6_KF(s), TB);
                tma_tile<D, BN>(kd, &tm, ATT6_KF(s), C + h * D, kt * BN, b);
                mb_expect(ATT6_VF(s), TB);
                tma_tile<D, BN>(kd + TB, &tm, ATT6_VF(s), 2 * C + h * D, kt * BN, b);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    const int c = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int qw0 = qt * BM + c * 64;
    const int nact = qw0 >= T ? 0 : min(nkt, (qw0 + 63) / BN + 1);
    const float sl2 = scale * ATT3_LOG2E;
    float o[D / 2], s[BN / 2], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, corr[2];
    uint32_t p[BN / 16][4];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
    const unsigned char *Qw = Qs + c * 64 * 128;
    const int r0 = qw0 + warp * 16 + g;
    /* PP (two consumers): the warpgroups take turns issuing their products (named barriers 3 and 4, each
     * completed by one group's sync and the other's arrive), so one's softmax runs under the other's products.
     * Every iteration is a turn, work or not; the second group opens the first turn, and skips its last
     * arrive, so each barrier sees as many arrives as syncs. */
    static_assert(!PP || NWG == 2, "turns between two consumer warpgroups");
    if constexpr (PP)
        if (c == 1) asm volatile("bar.arrive 3, 256;\n" ::: "memory");
    mb_wait(bars, 0);
    for (int kt = 0; kt <= nkt; kt++) {
        if constexpr (PP) asm volatile("bar.sync %0, 256;\n" ::"r"(3 + c) : "memory");
        bool passed = !PP;
        const auto pass = [&]() {
            if constexpr (PP)
                if (!passed && (c == 0 || kt < nkt)) asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - c) : "memory");
            passed = true;
        };
        if (kt == 0 && nact > 0) {
            mb_wait(ATT6_KF(0), 0);
            wg_fence();
            att5_qk<D, BM, BN>(s, Qw, KV);
            wg_commit();
            pass();
            wg_wait<0>();
            wg_pin(s);
            att5_softmax<BN>(s, m, l, corr, 0, qw0, r0, t4, sl2);
            att5_to_p<BN>(p, s);
        } else if (kt > 0 && kt < nact) {
            const int sk = kt % S, sv = (kt - 1) % S;
            mb_wait(ATT6_KF(sk), (kt / S) & 1);
            mb_wait(ATT6_VF(sv), ((kt - 1) / S) & 1);
            wg_pin(o);
            wg_pin(p);
            wg_fence();
            att5_qk<D, BM, BN>(s, Qw, KV + sk * 2 * TB);
            wg_commit();
            att5_pv<D, BN>(o, p, KV + sv * 2 * TB + TB);
            wg_commit();
            pass();
            wg_wait<1>();
            wg_pin(s);
            att5_softmax<BN>(s, m, l, corr, kt * BN, qw0, r0, t4, sl2);
            wg_wait<0>();
            wg_pin(o);
            wg_pin(p);
            mb_arrive(ATT6_EM(sv));
#pragma unroll
            for (int j = 0; j < D / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[4 * j + e] *= corr[e >> 1];
            att5_to_p<BN>(p, s);
        } else if (kt > 0 && kt == nact) {
            const int sv = (kt - 1) % S;
            mb_wait(ATT6_VF(sv), ((kt - 1) / S) & 1);
            wg_pin(o);
            wg_pin(p);
            wg_fence();
            att5_pv<D, BN>(o, p, KV + sv * 2 * TB + TB);
            wg_commit();
            pass();
            wg_wait<0>();
            wg_pin(o);
            mb_arrive(ATT6_EM(sv));
        }
        pass();
        if (kt >= nact && kt < nkt) { /* a tile past this warpgroup's rows: released once it has landed */
            mb_wait(ATT6_VF(kt % S), (kt / S) & 1);
            mb_arrive(ATT6_EM(kt % S));
        }
    }
#undef ATT6_KF
#undef ATT6_VF
#undef ATT6_EM
    /* Epilogue: O / l as bf16 into this warpgroup's own Q rows (same swizzle), then 16-byte row stores. */
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
        l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
    }
    const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
    unsigned char *so = Qs + c * 64 * 128;
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int r = warp * 16 + g + 8 * hr, ch = j & 7;
            *(uint32_t *)(so + (j >> 3) * (BM * 128) + r * 128 + ((ch ^ (r & 7)) << 4) + 4 * t4) =
                pack_bf16(o[4 * j + 2 * hr] * inv[hr], o[4 * j + 2 * hr + 1] * inv[hr]);
        }
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + c) : "memory"); /* this warpgroup's 128 threads */
    uint16_t *ob = out + (int64_t)b * T * C + (int64_t)h * D;
    for (int i = threadIdx.x % 128; i < 64 * (D / 8); i += 128) {
        const int r = i / (D / 8), ch = i % (D / 8);
        if (qw0 + r < T)
            *(uint4 *)(ob + (int64_t)(qw0 + r) * C + ch * 8) =
                *(const uint4 *)(so + (ch >> 3) * (BM * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
    }
    if (t4 == 0)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int qi = r0 + 8 * hr;
            if (qi < T) lse[(int64_t)bh * T + qi] = m[hr] * scale + logf(l[hr]);
        }
#endif
}

/* ------------------------------------------------------------------ backward on Hopper: wgmma (sm_90a)
 * The mma.sync backward's two kernels with their products on wgmma; same outputs, same order of work (dQ and dd
 * first, then dK, dV), still no atomics: each block owns its gradient rows and sums its tiles in order. NWG
 * warpgroups per block, each owning 64 rows (queries for dQ, keys for dK/dV) held in shared memory for the whole
 * block; the other side streamed in 64-row tiles through an S-stage cp.async ring (tile i + 2 fetched while tile
 * i is computed, into the stage of tile i - 2), all tiles in the forward's 128-byte swizzle.
 * - dQ: S = Q K^T and dP = dO V^T (both operands from shared memory, N = 64), dS = P (dP - dd) in the
 *   accumulators' layout (rows are queries), then dQ += dS K with dS as the register A operand and K as the
 *   transposed B (the forward's P V).
 * - dK/dV: S^T = K Q^T and dP^T = V dO^T (rows are keys), P^T and dS^T = P^T (dP^T - dd) as register A
 *   operands of dV += P^T dO and dK += dS^T Q.
 * Each iteration issues the two score products of tile i and the gradient products of tile i - 1 together and
 * runs the elementwise work of tile i while the latter run. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* d (64 x 64, f32) = (acc ? d : 0) + A . B^T: A (64 x 16), B (64 x 16), both K-major in shared memory. */
static __device__ __forceinline__ void wg_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
}
/* d (64 x 32, f32) = (acc ? d : 0) + A . B: A (64 x 16) K-major, B (16 x 32) MN-major, both in shared memory. */
static __device__ __forceinline__ void wg_ss_n32_tb(float (&d)[16], uint64_t da, uint64_t db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
                 "}, %16, %17, p, 1, 1, 0, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db), "r"(acc));
}
/* c (64 x 64) = A . B^T: A the 64 rows at Aw of a swizzled tile of RA rows, B a swizzled tile of 64 rows. */
template <int D, int RA>
static __device__ __forceinline__ void att7_abt(float (&c)[32], const unsigned char *Aw, const unsigned char *Bs)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        wg_ss_n64(c, wg_desc(Aw + (kk >> 2) * (RA * 128) + (kk & 3) * 32, 16, 1024),
                  wg_desc(Bs + (kk >> 2) * (64 * 128) + (kk & 3) * 32, 16, 1024), kk > 0);
}
/* dQ side: S (64 queries x 64 keys from k0) becomes dS = P (dP - dd) for this lane's queries r0, r0 + 8 of a
 * warpgroup whose first query is qw0 (lr: their lse in log2 units, dr: their dd); P = 0 for keys after the query. */
static __device__ __forceinline__ void att7_ds(float (&s)[32], const float (&dp)[32], const float (&lr)[2],
                                               const float (&dr)[2], int k0, int qw0, int r0, int t4, float sl2)
{
    const bool diag = k0 + 63 > qw0;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = att3_exp2(s[4 * j + e] * sl2 - lr[e >> 1]);
            if (diag && k0 + 8 * j + 2 * t4 + (e & 1) > r0 + 8 * (e >> 1)) p = 0.0f;
            s[4 * j + e] = p * (dp[4 * j + e] - dr[e >> 1]);
        }
}
/* dK/dV side: S^T, dP^T (64 keys x 64 queries from q0) become P^T and dS^T for this lane's keys r0, r0 + 8 of a
 * warpgroup whose first key is kw0; ls, dd: the tile's lse (log2 units) and dd per query; P = 0 for queries
 * before the key. */
static __device__ __forceinline__ void att7_pds(float (&s)[32], float (&dp)[32], const float *ls, const float *dd,
                                                int q0, int kw0, int r0, int t4, float sl2)
{
    const bool diag = q0 < kw0 + 63;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int col = 8 * j + 2 * t4;
        const float2 l2 = *(const float2 *)(ls + col), d2 = *(const float2 *)(dd + col);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = att3_exp2(s[4 * j + e] * sl2 - ((e & 1) ? l2.y : l2.x));
            if (diag && q0 + col + (e & 1) < r0 + 8 * (e >> 1)) p = 0.0f;
            s[4 * j + e] = p;
            dp[4 * j + e] = p * (dp[4 * j + e] - ((e & 1) ? d2.y : d2.x));
        }
    }
}
/* acc (64 x D) * f as bf16 into the warpgroup's 64 rows at w of a swizzled tile of R rows (the accumulator
 * layout: warp rows 16 warp + g, + 8). */
template <int D, int R>
static __device__ __forceinline__ void att7_put(unsigned char *w, const float (&acc)[D / 2], float f, int warp, int g,
                                                int t4)
{
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int r = warp * 16 + g + 8 * hr, ch = j & 7;
            *(uint32_t *)(w + (j >> 3) * (R * 128) + r * 128 + ((ch ^ (r & 7)) << 4) + 4 * t4) =
                pack_bf16(acc[4 * j + 2 * hr] * f, acc[4 * j + 2 * hr + 1] * f);
        }
}
/* The 64 rows at w (as att7_put wrote them) to rows row0.. of dst (row stride ld), rows >= T skipped; 16-byte
 * stores by the warpgroup's 128 threads. */
template <int D, int R>
static __device__ __forceinline__ void att7_copy_out(uint16_t *dst, int64_t ld, int row0, int T, const unsigned char *w)
{
    for (int i = threadIdx.x % 128; i < 64 * (D / 8); i += 128) {
        const int r = i / (D / 8), ch = i % (D / 8);
        if (row0 + r < T)
            *(uint4 *)(dst + (int64_t)(row0 + r) * ld + ch * 8) =
                *(const uint4 *)(w + (ch >> 3) * (R * 128) + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
    }
}

/* The dK/dV side's work on one streamed tile (Q at Qt, dO at Qt + 64 D 2 bytes; ls: its lse / dd rows), for the
 * warpgroup's 64 keys at Kw / Vw of tiles of BK rows, in three forms that every dK/dV kernel shares:
 * - kv_first: S^T = K Q^T and dP^T = V dO^T of the tile, then P^T and dS^T and their A fragments (pf, sf);
 * - kv_step: the same, issued together with the previous tile's gradient products (kv_grads, from Qp), the
 *   elementwise work running under the latter; done() once every product has finished (the previous tile's
 *   stage may be refilled), then the new fragments;
 * - kv_last: the previous tile's gradient products alone, then done().
 * kv_grads: dV += P^T dO, dK += dS^T Q, and with DQ (the one-pass kernel) dQ^T (this group's 32 queries) =
 * K^T dS^T, K^T at Kt (D rows of 128 keys), dS^T at dSr (this group's half, 64-byte swizzle). */
template <int D, bool DQ>
static __device__ __forceinline__ void kv_grads(float (&dk)[D / 2], float (&dv)[D / 2], const uint32_t (&pf)[4][4],
                                                const uint32_t (&sf)[4][4], float (&dq)[16], const unsigned char *Qp,
                                                const unsigned char *Kt, const unsigned char *dSr)
{
    att5_pv<D, 64>(dv, pf, Qp + 64 * D * 2);
    att5_pv<D, 64>(dk, sf, Qp);
    if constexpr (DQ)
#pragma unroll
        for (int kk = 0; kk < 128 / 16; kk++)
            wg_ss_n32_tb(dq, wg_desc(Kt + (kk >> 2) * (D * 128) + (kk & 3) * 32, 16, 1024),
                         wg_desc(dSr + kk * 16 * 64, 128 * 64, 512, 2), kk > 0);
}
/* The dK/dV kernels' accumulators and fragments, zeroed before the first tile. */
template <int D>
static __device__ __forceinline__ void kv_zero(float (&dk)[D / 2], float (&dv)[D / 2], float (&st)[32], float (&dpt)[32],
                                               uint32_t (&pf)[4][4], uint32_t (&sf)[4][4])
{
#pragma unroll
    for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++) st[i] = dpt[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) pf[i][e] = sf[i][e] = 0u;
}
/* Keeps the accumulators and fragments of the gradient products in place across an issue or a wait. */
template <int D, bool DQ>
static __device__ __forceinline__ void kv_pin(float (&dk)[D / 2], float (&dv)[D / 2], uint32_t (&pf)[4][4],
                                              uint32_t (&sf)[4][4], float (&dq)[16])
{
    wg_pin(dk);
    wg_pin(dv);
    wg_pin(pf);
    wg_pin(sf);
    if constexpr (DQ) wg_pin(dq);
}
template <int D, int BK>
static __device__ __forceinline__ void kv_first(float (&st)[32], float (&dpt)[32], uint32_t (&pf)[4][4],
                                                uint32_t (&sf)[4][4], const unsigned char *Kw, const unsigned char *Vw,
                                                const unsigned char *Qt, const float *ls, int q0, int kw0, int r0,
                                                int t4, float sl2)
{
    wg_fence();
    att7_abt<D, BK>(st, Kw, Qt);
    att7_abt<D, BK>(dpt, Vw, Qt + 64 * D * 2);
    wg_commit();
    wg_wait<0>();
    wg_pin(st);
    wg_pin(dpt);
    att7_pds(st, dpt, ls, ls + 64, q0, kw0, r0, t4, sl2);
    att5_to_p<64>(pf, st);
    att5_to_p<64>(sf, dpt);
}
template <int D, int BK, bool DQ, class Done>
static __device__ __forceinline__ void kv_step(float (&dk)[D / 2], float (&dv)[D / 2], float (&st)[32], float (&dpt)[32],
                                               uint32_t (&pf)[4][4], uint32_t (&sf)[4][4], float (&dq)[16],
                                               const unsigned char *Kw, const unsigned char *Vw, const unsigned char *Qt,
                                               const unsigned char *Qp, const unsigned char *Kt, const unsigned char *dSr,
                                               const float *ls, int q0, int kw0, int r0, int t4, float sl2, Done done)
{
    kv_pin<D, DQ>(dk, dv, pf, sf, dq);
    wg_fence();
    att7_abt<D, BK>(st, Kw, Qt);
    att7_abt<D, BK>(dpt, Vw, Qt + 64 * D * 2);
    wg_commit();
    kv_grads<D, DQ>(dk, dv, pf, sf, dq, Qp, Kt, dSr);
    wg_commit();
    wg_wait<1>();
    wg_pin(st);
    wg_pin(dpt);
    att7_pds(st, dpt, ls, ls + 64, q0, kw0, r0, t4, sl2);
    wg_wait<0>();
    kv_pin<D, DQ>(dk, dv, pf, sf, dq);
    done();
    att5_to_p<64>(pf, st);
    att5_to_p<64>(sf, dpt);
}
template <int D, bool DQ, class Done>
static __device__ __forceinline__ void kv_last(float (&dk)[D / 2], float (&dv)[D / 2], uint32_t (&pf)[4][4],
                                               uint32_t (&sf)[4][4], float (&dq)[16], const unsigned char *Qp,
                                               const unsigned char *Kt, const unsigned char *dSr, Done done)
{
    kv_pin<D, DQ>(dk, dv, pf, sf, dq);
    wg_fence();
    kv_grads<D, DQ>(dk, dv, pf, sf, dq, Qp, Kt, dSr);
    wg_commit();
    wg_wait<0>();
    wg_pin(dk);
    wg_pin(dv);
    if constexpr (DQ) wg_pin(dq);
    done();
}
#endif

/* Query q's entries of the rows the TMA-fed dK/dV kernels read (2 tp floats per (batch, head) bh, tp = T rounded up
 * to 64): lse in log2 units at q, dd at tp + q; +inf and dd for q >= T (where dd is 0), so padded queries add
 * nothing. */
static __device__ __forceinline__ void att_stats_put(float *stats, int64_t bh, int tp, int q, int T, const float *lse,
                                                     float dd)
{
    float *row = stats + bh * 2 * tp;
    row[q] = q < T ? lse[bh * T + q] * ATT3_LOG2E : INFINITY;
    row[tp + q] = dd;
}

template <int D, int NWG, int S> static constexpr size_t att7_dq_smem()
{
    return 1024 + (size_t)2 * 64 * NWG * D * 2 + (size_t)S * 2 * 64 * D * 2 + (size_t)64 * NWG * 4;
}
template <int D, int NWG, int S> static constexpr size_t att7_dkdv_smem()
{
    return 1024 + (size_t)2 * 64 * NWG * D * 2 + (size_t)S * 2 * 64 * D * 2 + (size_t)S * 2 * 64 * 4;
}

/* dQ and dd of 64 NWG queries (blockIdx.y from the last), key tiles of 64 up to the block's last query. */
template <int D, int NWG, int S, bool PAD>
static __global__ void __launch_bounds__(NWG * 128, 1)
    att7_bwd_dq(uint16_t *dqkv, float *dd, const uint16_t *dout, const uint16_t *out, const uint16_t *qkv,
                const float *lse, int T, int C, int H, float scale)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = 64 * NWG, NTH = NWG * 128, TB = 64 * D * 2; /* TB: bytes of one K or V tile */
    static_assert(S >= 4, "the stage of tile i - 1 is read while tile i + 2 arrives");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Qs = smem_raw + ((1024 - ((uint32_t)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    unsigned char *dOs = Qs + BM * D * 2, *KV = dOs + BM * D * 2; /* stage i: K at KV + 2 i TB, V at + TB */
    float *dd_s = (float *)(KV + S * 2 * TB);
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), warp = (threadIdx.x / 32) % 4,
              lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int qt = gridDim.y - 1 - blockIdx.y, bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const int64_t obase = (int64_t)b * T * C + (int64_t)h * D;
    const int qw0 = qt * BM + wg * 64; /* the warpgroup's first query */
    const int nkt = (min(qt * BM + BM, T) - 1) / 64 + 1;
    const int nact = qw0 >= T ? 0 : min(nkt, qw0 / 64 + 1); /* key tiles this warpgroup computes */
    const float sl2 = scale * ATT3_LOG2E;
    const auto fetch = [&](int kt) {
        unsigned char *st = KV + (kt % S) * 2 * TB;
        att5_fetch<D, 64, NTH>(st, base + C, kt * 64, T, C3);
        att5_fetch<D, 64, NTH>(st + TB, base + 2 * (int64_t)C, kt * 64, T, C3);
        cp_async_commit();
    };
    att5_fetch<D, BM, NTH>(Qs, base, qt * BM, T, C3);
    att5_fetch<D, BM, NTH>(dOs, dout + obase, qt * BM, T, C);
    fetch(0);
    if (nkt > 1) fetch(1);

    { /* dd of the warpgroup's rows, two threads a row, while the tiles arrive */
        const int r = (threadIdx.x % 128) / 2, hf = threadIdx.x & 1, q = qw0 + r;
        float s = 0.0f;
        if (q < T)
#pragma unroll 4
            for (int ch = hf * (D / 16); ch < (hf + 1) * (D / 16); ch++)
                s += att4_dot8(*(const uint4 *)(dout + obase + (int64_t)q * C + ch * 8),
                               *(const uint4 *)(out + obase + (int64_t)q * C + ch * 8));
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        if (hf == 0) {
            dd_s[wg * 64 + r] = s;
            if constexpr (PAD) { /* rows of 64 per (batch, head): lse (log2 units), then dd, rows past T inert */
                const int tp = (T + 63) / 64 * 64;
                if (q < tp) att_stats_put(dd, bh, tp, q, T, lse, s);
            } else if (q < T) {
                dd[(int64_t)bh * T + q] = s;
            }
        }
    }
    const int r0 = qw0 + warp * 16 + g; /* this lane's rows: r0, r0 + 8 */
    float lr[2], dr[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) lr[hr] = r0 + 8 * hr < T ? lse[(int64_t)bh * T + r0 + 8 * hr] * ATT3_LOG2E : INFINITY;
    float dq[D / 2], s[32], dp[32];
    uint32_t sf[4][4];
#pragma unroll
    for (int i = 0; i < D / 2; i++) dq[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; i++) s[i] = dp[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) sf[i][0] = sf[i][1] = sf[i][2] = sf[i][3] = 0u;
    const unsigned char *Qw = Qs + wg * 64 * 128, *dOw = dOs + wg * 64 * 128;

    for (int kt = 0; kt <= nkt; kt++) {
        if (kt + 1 < nkt) cp_async_wait<1>(); /* tile kt (and Q, dO) landed */
        else cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (kt + 2 < nkt) fetch(kt + 2); /* the stage of tile kt - 2, whose products finished in iteration kt - 1 */
        if (kt == 0) dr[0] = dd_s[wg * 64 + warp * 16 + g], dr[1] = dd_s[wg * 64 + warp * 16 + g + 8];
        const unsigned char *Ks = KV + (kt % S) * 2 * TB, *Kp = KV + ((kt + S - 1) % S) * 2 * TB;
        if (kt == 0 && nact > 0) {
            wg_fence();
            att7_abt<D, BM>(s, Qw, Ks);
            att7_abt<D, BM>(dp, dOw, Ks + TB);
            wg_commit();
            wg_wait<0>();
            wg_pin(s);
            wg_pin(dp);
            att7_ds(s, dp, lr, dr, 0, qw0, r0, t4, sl2);
            att5_to_p<64>(sf, s);
        } else if (kt > 0 && kt < nact) {
            wg_pin(dq);
            wg_pin(sf);
            wg_fence();
            att7_abt<D, BM>(s, Qw, Ks);
            att7_abt<D, BM>(dp, dOw, Ks + TB);
            wg_commit();
            att5_pv<D, 64>(dq, sf, Kp); /* dQ += dS K of tile kt - 1 */
            wg_commit();
            wg_wait<1>();
            wg_pin(s);
            wg_pin(dp);
            att7_ds(s, dp, lr, dr, kt * 64, qw0, r0, t4, sl2);
            wg_wait<0>();
            wg_pin(dq);
            wg_pin(sf);
            att5_to_p<64>(sf, s);
        } else if (kt > 0 && kt == nact) {
            wg_pin(dq);
            wg_pin(sf);
            wg_fence();
            att5_pv<D, 64>(dq, sf, Kp);
            wg_commit();
            wg_wait<0>();
            wg_pin(dq);
        }
    }
    /* dQ * scale as bf16 into the warpgroup's own Q rows, then 16-byte row stores */
    unsigned char *w = Qs + wg * 64 * 128;
    att7_put<D, BM>(w, dq, scale, warp, g, t4);
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    att7_copy_out<D, BM>(dqkv + (int64_t)b * T * C3 + (int64_t)h * D, C3, qw0, T, w);
#endif
}

/* dK, dV of 64 NWG keys (blockIdx.y; the first blocks have the most work and start first), query tiles of 64
 * from the block's first key on. */
template <int D, int NWG, int S>
static __global__ void __launch_bounds__(NWG * 128, 1)
    att7_bwd_dkdv(uint16_t *dqkv, const uint16_t *dout, const uint16_t *qkv, const float *lse, const float *dd, int T,
                  int C, int H, float scale)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BK = 64 * NWG, NTH = NWG * 128, TB = 64 * D * 2; /* TB: bytes of one Q or dO tile */
    static_assert(S >= 4, "the stage of tile i - 1 is read while tile i + 2 arrives");
    static_assert(NTH >= 64, "one thread per query of the streamed statistics");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Ks = smem_raw + ((1024 - ((uint32_t)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    unsigned char *Vs = Ks + BK * D * 2, *QD = Vs + BK * D * 2; /* stage i: Q at QD + 2 i TB, dO at + TB */
    float *stats = (float *)(QD + S * 2 * TB);                  /* stage i: lse (log2 units) at 128 i, dd at 128 i + 64 */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), warp = (threadIdx.x / 32) % 4,
              lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int kb = blockIdx.y, bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const uint16_t *base = qkv + (int64_t)b * T * C3 + (int64_t)h * D;
    const uint16_t *dobase = dout + (int64_t)b * T * C + (int64_t)h * D;
    const float *lse_bh = lse + (int64_t)bh * T, *dd_bh = dd + (int64_t)bh * T;
    const int kw0 = kb * BK + wg * 64, qt0 = kb * NWG, n = (T + 63) / 64 - qt0; /* n: query tiles of the block */
    const int a0 = kw0 < T ? wg : n; /* the first tile this warpgroup computes (the tile of its first key) */
    const float sl2 = scale * ATT3_LOG2E;
    const auto fetch = [&](int i) {
        const int t0 = (qt0 + i) * 64, st = i % S;
        unsigned char *q = QD + st * 2 * TB;
        att5_fetch<D, 64, NTH>(q, base, t0, T, C3);
        att5_fetch<D, 64, NTH>(q + TB, dobase, t0, T, C);
        cp_async_commit();
        if (threadIdx.x < 64) {
            const int t = t0 + threadIdx.x;
            stats[st * 128 + threadIdx.x] = t < T ? lse_bh[t] * ATT3_LOG2E : INFINITY;
            stats[st * 128 + 64 + threadIdx.x] = t < T ? dd_bh[t] : 0.0f;
        }
    };
    att5_fetch<D, BK, NTH>(Ks, base + C, kb * BK, T, C3);
    att5_fetch<D, BK, NTH>(Vs, base + 2 * (int64_t)C, kb * BK, T, C3);
    fetch(0);
    if (n > 1) fetch(1);

    float dk[D / 2], dv[D / 2], st[32], dpt[32], nodq[16]; /* (nodq: no dQ here) */
    uint32_t pf[4][4], sf[4][4];
    kv_zero<D>(dk, dv, st, dpt, pf, sf);
    const unsigned char *Kw = Ks + wg * 64 * 128, *Vw = Vs + wg * 64 * 128;
    const int r0 = kw0 + warp * 16 + g; /* this lane's keys: r0, r0 + 8 */

    for (int i = 0; i <= n; i++) {
        if (i + 1 < n) cp_async_wait<1>(); /* tile i (and K, V) landed */
        else cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (i + 2 < n) fetch(i + 2); /* the stage of tile i - 2, whose products finished in iteration i - 1 */
        const int q0 = (qt0 + i) * 64;
        const unsigned char *Qt = QD + (i % S) * 2 * TB, *Qp = QD + ((i + S - 1) % S) * 2 * TB;
        const float *ls = stats + (i % S) * 128;
        if (i == a0 && i < n) {
            kv_first<D, BK>(st, dpt, pf, sf, Kw, Vw, Qt, ls, q0, kw0, r0, t4, sl2);
        } else if (i > a0 && i < n) {
            kv_step<D, BK, false>(dk, dv, st, dpt, pf, sf, nodq, Kw, Vw, Qt, Qp, nullptr, nullptr, ls, q0, kw0, r0, t4, sl2,
                                  [] {});
        } else if (i == n && a0 < n) {
            kv_last<D, false>(dk, dv, pf, sf, nodq, Qp, nullptr, nullptr, [] {});
        }
    }
    /* dK * scale and dV as bf16 into the warpgroup's own K and V rows, then 16-byte row stores */
    unsigned char *wk = Ks + wg * 64 * 128, *wv = Vs + wg * 64 * 128;
    att7_put<D, BK>(wk, dk, scale, warp, g, t4);
    att7_put<D, BK>(wv, dv, 1.0f, warp, g, t4);
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    uint16_t *rows = dqkv + (int64_t)b * T * C3 + (int64_t)h * D;
    att7_copy_out<D, BK>(rows + C, C3, kw0, T, wk);
    att7_copy_out<D, BK>(rows + 2 * (int64_t)C, C3, kw0, T, wv);
#endif
}

/* dK/dV with the streamed tiles brought by the tensor copy engine: thread 0 issues each tile's Q and dO boxes and
 * the bulk copy of its lse and dd rows (laid out by the dQ kernel in rows of 64 per (batch, head), so every copy
 * is aligned) onto the stage's "full" barrier; every consumer thread arrives on the stage's "empty" barrier once
 * its products of the tile are done (or at once for a tile wholly before its keys), and thread 0 waits for that
 * before refilling the stage. The warpgroups are then bound to each other only through the ring (two tiles of
 * slack), not by a block barrier every tile. tq maps qkv as (B, T, 3C), to maps dout as (B, T, C). */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
/* The TMA-fed dK/dV kernels' loads (one thread issues them): the block's K and V rows (BK from row k0 of batch b,
 * head h) to ks onto barrier kv; and a streamed tile into ring stage s, its Q and dO rows t0 .. t0 + 63 at qd
 * (two 64-row tiles a stage) and their lse / dd rows (from srow, tp apart) at sts (512 bytes a stage), onto
 * barrier full. */
template <int D, int BK>
static __device__ __forceinline__ void kv_load_kv(uint32_t ks, const CUtensorMap *tq, uint32_t kv, int C, int h, int k0,
                                                  int b)
{
    mb_expect(kv, 2 * BK * D * 2);
    tma_tile<D, BK>(ks, tq, kv, C + h * D, k0, b);
    tma_tile<D, BK>(ks + BK * D * 2, tq, kv, 2 * C + h * D, k0, b);
}
template <int D>
static __device__ __forceinline__ void kv_load_tile(uint32_t qd, uint32_t sts, int s, const CUtensorMap *tq,
                                                    const CUtensorMap *to, uint32_t full, const float *srow, int tp,
                                                    int t0, int h, int b)
{
    mb_expect(full, 2 * 64 * D * 2 + 512);
    tma_tile<D, 64>(qd + s * 2 * (64 * D * 2), tq, full, h * D, t0, b);
    tma_tile<D, 64>(qd + s * 2 * (64 * D * 2) + 64 * D * 2, to, full, h * D, t0, b);
    bulk_copy(sts + s * 512, srow + t0, 256, full);
    bulk_copy(sts + s * 512 + 256, srow + tp + t0, 256, full);
}
#endif

template <int D, int NWG, int S> static constexpr size_t att8_dkdv_smem()
{
    return 1024 + (size_t)2 * 64 * NWG * D * 2 + (size_t)S * (2 * 64 * D * 2 + 512) + 8 * (1 + 2 * S);
}

template <int D, int NWG, int S>
static __global__ void __launch_bounds__(NWG * 128, 1)
    att8_bwd_dkdv(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap to, uint16_t *dqkv,
                  const float *stats_g, int T, int C, int H, float scale)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BK = 64 * NWG, TB = 64 * D * 2; /* TB: bytes of one Q or dO tile */
    static_assert(S >= 4, "the stage of tile i - 1 is read while tile i + 2 arrives");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Ks = smem_raw + ((1024 - ((uint32_t)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    unsigned char *Vs = Ks + BK * D * 2, *QD = Vs + BK * D * 2; /* stage i: Q at QD + 2 i TB, dO at + TB */
    float *stats = (float *)(QD + S * 2 * TB);                  /* stage i: lse (log2 units) at 128 i, dd at 128 i + 64 */
    const uint32_t ks_a = (uint32_t)__cvta_generic_to_shared(Ks), qd_a = ks_a + 2 * BK * D * 2;
    const uint32_t st_a = qd_a + S * 2 * TB, bars = st_a + S * 512; /* K, V full; then per stage: full, empty */
#define ATT8_FU(i) (bars + 8 + 16 * (i))
#define ATT8_EM(i) (bars + 16 + 16 * (i))
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), warp = (threadIdx.x / 32) % 4,
              lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    const int kb = blockIdx.y, bh = blockIdx.x, b = bh / H, h = bh % H;
    const int64_t C3 = 3 * (int64_t)C;
    const int tp = (T + 63) / 64 * 64;
    const float *srow = stats_g + (int64_t)bh * 2 * tp;
    const int kw0 = kb * BK + wg * 64, qt0 = kb * NWG, n = tp / 64 - qt0; /* n: query tiles of the block */
    const int a0 = kw0 < T ? wg : n; /* the first tile this warpgroup computes (the tile of its first key) */
    const float sl2 = scale * ATT3_LOG2E;
    if (threadIdx.x == 0) {
        mb_init(bars, 1);
        for (int i = 0; i < S; i++) {
            mb_init(ATT8_FU(i), 1);
            mb_init(ATT8_EM(i), NWG * 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const auto issue = [&](int i) { /* thread 0: tile i into its stage */
        const int s = i % S, t0 = (qt0 + i) * 64;
        if (i >= S) mb_wait(ATT8_EM(s), ((i / S) - 1) & 1); /* every consumer is done with tile i - S */
        kv_load_tile<D>(qd_a, st_a, s, &tq, &to, ATT8_FU(s), srow, tp, t0, h, b);
    };
    if (threadIdx.x == 0) {
        kv_load_kv<D, BK>(ks_a, &tq, bars, C, h, kb * BK, b);
        issue(0);
        if (n > 1) issue(1);
    }

    float dk[D / 2], dv[D / 2], st[32], dpt[32], nodq[16]; /* (nodq: no dQ here) */
    uint32_t pf[4][4], sf[4][4];
    kv_zero<D>(dk, dv, st, dpt, pf, sf);
    const unsigned char *Kw = Ks + wg * 64 * 128, *Vw = Vs + wg * 64 * 128;
    const int r0 = kw0 + warp * 16 + g; /* this lane's keys: r0, r0 + 8 */
    mb_wait(bars, 0);

    for (int i = 0; i <= n; i++) {
        if (threadIdx.x == 0 && i + 2 < n) issue(i + 2);
        const int s = i % S, sp = (i + S - 1) % S, q0 = (qt0 + i) * 64;
        const unsigned char *Qt = QD + s * 2 * TB, *Qp = QD + sp * 2 * TB;
        const float *ls = stats + s * 128;
        if (i == a0 && i < n) {
            mb_wait(ATT8_FU(s), (i / S) & 1);
            kv_first<D, BK>(st, dpt, pf, sf, Kw, Vw, Qt, ls, q0, kw0, r0, t4, sl2);
        } else if (i > a0 && i < n) {
            mb_wait(ATT8_FU(s), (i / S) & 1);
            kv_step<D, BK, false>(dk, dv, st, dpt, pf, sf, nodq, Kw, Vw, Qt, Qp, nullptr, nullptr, ls, q0, kw0, r0, t4, sl2,
                                  [&] { mb_arrive(ATT8_EM(sp)); });
        } else if (i == n && a0 < n) {
            kv_last<D, false>(dk, dv, pf, sf, nodq, Qp, nullptr, nullptr, [&] { mb_arrive(ATT8_EM(sp)); });
        }
        if (i < a0 && i < n) { /* a tile wholly before this warpgroup's keys: released once it has landed */
            mb_wait(ATT8_FU(s), (i / S) & 1);
            mb_arrive(ATT8_EM(s));
        }
    }
#undef ATT8_FU
#undef ATT8_EM
    /* dK * scale and dV as bf16 into the warpgroup's own K and V rows, then 16-byte row stores */
    unsigned char *wk = Ks + wg * 64 * 128, *wv = Vs + wg * 64 * 128;
    att7_put<D, BK>(wk, dk, scale, warp, g, t4);
    att7_put<D, BK>(wv, dv, 1.0f, warp, g, t4);
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    uint16_t *rows = dqkv + (int64_t)b * T * C3 + (int64_t)h * D;
    att7_copy_out<D, BK>(rows + C, C3, kw0, T, wk);
    att7_copy_out<D, BK>(rows + 2 * (int64_t)C, C3, kw0, T, wv);
#endif
}

/* ------------------------------------------------------------------ one-pass backward on Hopper (sm_90a)
 * dQ, dK and dV from one kernel that computes each tile's probabilities once (5 matrix products per tile against
 * the two-kernel form's 7), still deterministic. A block owns 128 keys (two consumer warpgroups of 64), streams
 * the query tiles through a TMA ring (last tile first) and makes dK, dV as att8_bwd_dkdv does. For dQ it also
 * writes each tile's dS^T (bf16, its 128 keys x 64 queries) to shared memory and computes dQ^T (D x 64) =
 * K^T dS^T there, each warpgroup one half of the queries, with K^T (A, K-major) transposed once into shared
 * memory and dS^T as the transposed B in the 64-byte swizzle (a half is 32 queries, one swizzle atom wide).
 * The consumers leave each tile's dQ^T (f32) in one of three shared buffers; a producer warpgroup (one working
 * thread, which also issues the loads) copies it into the tile's 64 x 64 block of a f32 scratch with the tensor
 * copy engine: stored by the block of key block 0, added at the L2 (cp.reduce.async.bulk) by key block kb only
 * once the blocks of key blocks 0 .. kb - 1 have added theirs, so every element is summed in the same order every
 * run. Each (batch, head) and query tile has a counter the producer raises (release) when its copy has landed.
 * Blocks take their work from a ticket counter, key block 0 of every (batch, head) first, so a block only ever
 * waits on blocks that took earlier tickets and are running: no deadlock whatever the order the hardware starts
 * blocks in. Every block reaches query tile j at the same iteration (last tile first), so the waits are short. A
 * kernel before it computes dd and the lse / dd rows (and zeroes the counters); one after it writes
 * dQ = scale dQ^T^T as bf16 into dqkv. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ int ld_acquire(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ void st_release(int *p, int v)
{
    asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
/* bytes of shared memory at src to global dst by the tensor copy engine: stored, or added (f32) at the L2 */
static __device__ __forceinline__ void bulk_store(void *dst, uint32_t src, uint32_t bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void bulk_add_f32(void *dst, uint32_t src, uint32_t bytes)
{
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
#endif

template <int D, int S> static constexpr size_t att9_bwd_smem()
{
    /* alignment slack; K, V (128 rows); K^T (D rows of 128 keys); the ring (Q, dO tiles, lse / dd rows); dS^T
     * twice (two halves of 128 keys x 32 queries); dQ^T three times (64 x 64 f32); the barriers and the ticket */
    return 1024 + (size_t)2 * 128 * D * 2 + (size_t)D * 128 * 2 + (size_t)S * (2 * 64 * D * 2 + 512) +
           (size_t)2 * 128 * 64 * 2 + (size_t)3 * 64 * 64 * 4 + 8 * (1 + 2 * S + 4) + 16;
}

/* dd = rowsum(dout * out) and the rows of 64 per (batch, head) the one-pass kernel reads (lse in log2 units,
 * +inf past T; dd, 0 past T), 8 threads a row; zeroes the n_ctrl counters. */
template <int D>
static __global__ void att9_prep(float *stats, int *ctrl, int n_ctrl, const uint16_t *dout, const uint16_t *out,
                                 const float *lse, int BH, int T, int C, int H)
{
    const int64_t gt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (gt < n_ctrl) ctrl[gt] = 0;
    const int tp = (T + 63) / 64 * 64, l8 = threadIdx.x & 7;
    const int64_t row = gt / 8;
    if (row >= (int64_t)BH * tp) return;
    const int bh = (int)(row / tp), q = (int)(row % tp), b = bh / H, h = bh % H;
    float s = 0.0f;
    if (q < T) {
        const int64_t o = ((int64_t)b * T + q) * C + (int64_t)h * D;
#pragma unroll
        for (int ch = l8; ch < D / 8; ch += 8) s += att4_dot8(*(const uint4 *)(dout + o + ch * 8), *(const uint4 *)(out + o + ch * 8));
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if (l8 == 0) att_stats_put(stats, bh, tp, q, T, lse, s);
}

/* dQ (bf16, times scale) into dqkv from the f32 dQ^T tiles of the (batch, head) pairs from bh0: a block per pair
 * and query tile, through a transposing shared tile. */
template <int D>
static __global__ void __launch_bounds__(256) att9_dq_out(uint16_t *dqkv, const float *dqacc, int bh0, int T, int C,
                                                          int H, float scale)
{
    static_assert(D == 64, "tiles of 64 x 64");
    __shared__ float tile[D][65];
    const int tp = (T + 63) / 64 * 64, q0 = blockIdx.y * 64, bh = bh0 + blockIdx.x, b = bh / H, h = bh % H;
    const float *src = dqacc + (int64_t)blockIdx.x * D * tp + (int64_t)blockIdx.y * 4096;
    for (int i = threadIdx.x; i < D * 16; i += 256) {
        const int d = i / 16, c = i % 16, q = (4 * c) ^ ((d & 7) << 3); /* (the swizzle keeps runs of 8) */
        const float4 v = *(const float4 *)(src + d * 64 + 4 * c);
        tile[d][q] = v.x, tile[d][q + 1] = v.y, tile[d][q + 2] = v.z, tile[d][q + 3] = v.w;
    }
    __syncthreads();
    const int64_t C3 = 3 * (int64_t)C;
    for (int i = threadIdx.x; i < 64 * (D / 8); i += 256) {
        const int q = i / (D / 8), c = i % (D / 8);
        if (q0 + q >= T) continue;
        uint4 w;
        w.x = pack_bf16(tile[8 * c][q] * scale, tile[8 * c + 1][q] * scale);
        w.y = pack_bf16(tile[8 * c + 2][q] * scale, tile[8 * c + 3][q] * scale);
        w.z = pack_bf16(tile[8 * c + 4][q] * scale, tile[8 * c + 5][q] * scale);
        w.w = pack_bf16(tile[8 * c + 6][q] * scale, tile[8 * c + 7][q] * scale);
        *(uint4 *)(dqkv + ((int64_t)b * T + q0 + q) * C3 + (int64_t)h * D + 8 * c) = w;
    }
}

/* The one-pass kernel: nb * ceil(T / 128) blocks of 384 threads for the nb (batch, head) pairs from bh0; ticket:
 * this launch's counter, sems: one counter per (batch, head) and query tile of 64, dqacc: the pairs' dQ^T, 64 x 64
 * f32 per query tile (tile j at 4096 j; column q of row d at q ^ 8 (d % 8)). */
template <int D, int S>
static __global__ void __launch_bounds__(3 * 128, 1)
    att9_bwd(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap to, uint16_t *dqkv,
             const float *stats_g, float *dqacc, int *ticket, int *sems, int nb, int bh0, int T, int C, int H,
             float scale)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(D == 64, "dQ^T as one 64-row product per warpgroup: head dim 64");
    constexpr int NWG = 2, BK = 128, TB = 64 * D * 2; /* TB: bytes of one Q or dO tile */
    constexpr int DSB = BK * 64 * 2;                 /* bytes of one dS^T buffer (two halves of BK x 32) */
    static_assert(S >= 4, "the stage of tile i - 1 is read while tile i + 2 arrives");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char *Ks = smem_raw + ((1024 - ((uint32_t)__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
    unsigned char *Vs = Ks + BK * D * 2, *Kt = Vs + BK * D * 2, *QD = Kt + D * BK * 2, *dSb = QD + S * 2 * TB;
    float *dqb = (float *)(dSb + 2 * DSB);    /* dQ^T of tile i - 1 at dqb + 4096 ((i - 1) % 3), as in dqacc */
    float *stats = dqb + 3 * 4096;           /* stage i: lse (log2 units) at 128 i, dd at 128 i + 64 */
    const uint32_t ks_a = (uint32_t)__cvta_generic_to_shared(Ks), qd_a = (uint32_t)__cvta_generic_to_shared(QD);
    const uint32_t st_a = (uint32_t)__cvta_generic_to_shared(stats), bars = st_a + S * 512;
    const uint32_t dqb_a = (uint32_t)__cvta_generic_to_shared(dqb);
    int *tk_s = (int *)((unsigned char *)stats + S * 512 + 8 * (1 + 2 * S + 4));
#define ATT9_FU(i) (bars + 8 + 16 * (i))
#define ATT9_EM(i) (bars + 16 + 16 * (i))
#define ATT9_RD(i) (bars + 8 + 16 * S + 8 * (i))
#define ATT9_DF (bars + 8 + 16 * S + 24)
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), warp = (threadIdx.x / 32) % 4,
              lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
    if (threadIdx.x == 0) {
        *tk_s = atomicAdd(ticket, 1);
        mb_init(bars, 1);
        for (int i = 0; i < S; i++) {
            mb_init(ATT9_FU(i), 1);
            mb_init(ATT9_EM(i), NWG * 128);
        }
        for (int i = 0; i < 3; i++) mb_init(ATT9_RD(i), NWG * 128);
        mb_init(ATT9_DF, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int tk = *tk_s, kb = tk / nb, bhl = tk % nb, bh = bh0 + bhl, b = bh / H, h = bh % H;
    const int tp = (T + 63) / 64 * 64, ntq = tp / 64;
    const float *srow = stats_g + (int64_t)bh * 2 * tp;
    int *sem = sems + (int64_t)bh * ntq;
    float *dqa = dqacc + (int64_t)bhl * D * tp; /* tile j's 64 x 64 at dqa + 4096 j */
    const int kw0 = kb * BK + wg * 64, qt0 = kb * NWG, n = ntq - qt0; /* n: query tiles of the block */
    const float sl2 = scale * ATT3_LOG2E;
    const auto tile = [&](int i) { return qt0 + n - 1 - i; }; /* query tile of iteration i: the last first */
    const auto issue = [&](int i) {                            /* the producer: tile i into its stage */
        const int s = i % S, t0 = tile(i) * 64;
        if (i >= S) mb_wait(ATT9_EM(s), ((i / S) - 1) & 1); /* every consumer is done with tile i - S */
        kv_load_tile<D>(qd_a, st_a, s, &tq, &to, ATT9_FU(s), srow, tp, t0, h, b);
    };
    if (threadIdx.x >= NWG * 128) {
        /* The producer warpgroup (one thread works; the registers go to the consumers): K, V and the first three
         * tiles; then, as the consumers finish iteration i (their adds of tile i - 1 done: "ready" barrier
         * i % 3), raises tile i - 1's counter (release) and brings tile i + 3 into the stage tile i - 1 left.
         * The consumers wait for that tile in iteration i + 3, so they are at most two iterations ahead, and
         * the three ready barriers never hold two phases. */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (threadIdx.x == NWG * 128) {
            kv_load_kv<D, BK>(ks_a, &tq, bars, C, h, kb * BK, b);
            for (int i = 0; i < 3 && i < n; i++) issue(i);
            int pend = -1; /* the tile whose copy is in flight, its counter not yet raised */
            for (int i = 0; i <= n; i++) {
                mb_wait(ATT9_RD(i % 3), (i / 3) & 1);
                const int jq = i > 0 ? tile(i - 1) : -1;
                if (i > 0) { /* tile i - 1's dQ^T into the f32 rows, after the blocks of key blocks 0 .. kb - 1 */
                    if (kb > 0) {
                        while (ld_acquire(sem + jq) < kb) {
                        }
                        asm volatile("fence.proxy.async.global;\n" ::: "memory");
                    }
                    if (kb == 0) bulk_store(dqa + (int64_t)jq * 4096, dqb_a + ((i - 1) % 3) * 16384, 16384);
                    else bulk_add_f32(dqa + (int64_t)jq * 4096, dqb_a + ((i - 1) % 3) * 16384, 16384);
                    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
                    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); /* its buffer is free */
                }
                /* the consumers refill buffer (i - 1) % 3 in iteration i + 3, after tile i + 3 has come, or, in the
                 * last iteration (n), once told */
                if (i + 3 < n) issue(i + 3);
                else if (i + 3 == n && i > 0) mb_arrive(ATT9_DF);
                if (pend >= 0) { /* the previous copy has landed: raise its tile's counter */
                    asm volatile("cp.async.bulk.wait_group 1;\n" ::: "memory");
                    asm volatile("fence.proxy.async.global;\n" ::: "memory");
                    st_release(sem + pend, kb + 1);
                }
                pend = jq;
            }
            asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
            asm volatile("fence.proxy.async.global;\n" ::: "memory");
            st_release(sem + pend, kb + 1);
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    float dk[D / 2], dv[D / 2], st[32], dpt[32], dq[16];
    uint32_t pf[4][4], sf[4][4];
    kv_zero<D>(dk, dv, st, dpt, pf, sf);
#pragma unroll
    for (int i = 0; i < 16; i++) dq[i] = 0.0f;
    const unsigned char *Kw = Ks + wg * 64 * 128, *Vw = Vs + wg * 64 * 128;
    const int r0 = kw0 + warp * 16 + g; /* this lane's keys: r0, r0 + 8 */
    mb_wait(bars, 0);
    /* K^T: element (key k, d) of the K tile to row d, column k of two column blocks of D x 128 bytes */
    for (int i = threadIdx.x; i < BK * (D / 8); i += NWG * 128) {
        const int k = i / (D / 8), c = i % (D / 8);
        const uint4 v = *(const uint4 *)(Ks + (c >> 3) * (BK * 128) + k * 128 + (((c & 7) ^ (k & 7)) << 4));
        const uint16_t e[8] = {(uint16_t)v.x, (uint16_t)(v.x >> 16), (uint16_t)v.y, (uint16_t)(v.y >> 16),
                               (uint16_t)v.z, (uint16_t)(v.z >> 16), (uint16_t)v.w, (uint16_t)(v.w >> 16)};
        const int kc = k >> 6, kk = k & 63;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int d = 8 * c + j;
            *(uint16_t *)(Kt + kc * (D * 128) + d * 128 + (((kk >> 3) ^ (d & 7)) << 4) + (kk & 7) * 2) = e[j];
        }
    }
    fence_proxy_async();
    asm volatile("bar.sync 3, 256;\n" ::: "memory"); /* the consumers (the producer warp has left) */

    /* dS^T of tile i (this lane's keys, queries 8 j + 2 t4, + 1) into the half of queries j / 4, 64-byte swizzle */
    const auto put_ds = [&](int i) {
        unsigned char *dSw = dSb + (i & 1) * DSB;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const int R = wg * 64 + warp * 16 + g + 8 * hr;
                *(uint32_t *)(dSw + (j >> 2) * (DSB / 2) + R * 64 + (((j & 3) ^ ((R >> 1) & 3)) << 4) + 4 * t4) =
                    sf[j >> 1][2 * (j & 1) + hr];
            }
    };
    /* dQ^T of tile i - 1 (rows d, this group's 32 queries) into its shared buffer; column q of row d at
     * q ^ 8 (d % 8), so the eight rows a store instruction touches fall on different banks */
    const auto put_dq = [&](int i) {
        float *w = dqb + ((i - 1) % 3) * 4096;
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const int d = warp * 16 + g + 8 * hr, q = 32 * wg + 8 * j + 2 * t4;
                *(float2 *)(w + d * 64 + (q ^ ((d & 7) << 3))) = make_float2(dq[4 * j + 2 * hr], dq[4 * j + 2 * hr + 1]);
            }
    };
    for (int i = 0; i <= n; i++) {
        const int s = i % S, sp = (i + S - 1) % S, q0 = tile(i) * 64;
        const unsigned char *Qt = QD + s * 2 * TB;
        const float *ls = stats + s * 128;
        const unsigned char *Qp = QD + sp * 2 * TB, *dSr = dSb + ((i + 1) & 1) * DSB + wg * (DSB / 2);
        if (i == 0) {
            mb_wait(ATT9_FU(s), 0);
            kv_first<D, BK>(st, dpt, pf, sf, Kw, Vw, Qt, ls, q0, kw0, r0, t4, sl2);
            put_ds(i);
        } else if (i < n) {
            mb_wait(ATT9_FU(s), (i / S) & 1);
            kv_step<D, BK, true>(dk, dv, st, dpt, pf, sf, dq, Kw, Vw, Qt, Qp, Kt, dSr, ls, q0, kw0, r0, t4, sl2,
                                 [&] { mb_arrive(ATT9_EM(sp)); });
            put_ds(i);
            put_dq(i);
        } else {
            kv_last<D, true>(dk, dv, pf, sf, dq, Qp, Kt, dSr, [&] {
                mb_arrive(ATT9_EM(sp));
                if (n >= 4) mb_wait(ATT9_DF, 0); /* the producer has read buffer (n - 1) % 3 (tile n - 4's) */
            });
            put_dq(i);
        }
        fence_proxy_async(); /* the dS^T and dQ^T stores before the products and the producer's copy read them */
        mb_arrive(ATT9_RD(i % 3));
        asm volatile("bar.sync 3, 256;\n" ::: "memory");
    }
#undef ATT9_FU
#undef ATT9_EM
#undef ATT9_RD
#undef ATT9_DF
    /* dK * scale and dV as bf16 into the warpgroup's own K and V rows, then 16-byte row stores */
    unsigned char *wk = Ks + wg * 64 * 128, *wv = Vs + wg * 64 * 128;
    att7_put<D, BK>(wk, dk, scale, warp, g, t4);
    att7_put<D, BK>(wv, dv, 1.0f, warp, g, t4);
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    uint16_t *rows = dqkv + (int64_t)b * T * 3 * (int64_t)C + (int64_t)h * D;
    att7_copy_out<D, BK>(rows + C, 3 * (int64_t)C, kw0, T, wk);
    att7_copy_out<D, BK>(rows + 2 * (int64_t)C, 3 * (int64_t)C, kw0, T, wv);
#endif
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

static bool att_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Whether the tensor-core kernels take this call (otherwise the SIMT ones do). */
static bool att_use_mma(tg_dtype dt, int D, const void *a, const void *b, const void *c)
{
    return dt == TG_BF16 && (D == 16 || D == 32 || D == 64 || D == 128) && att_aligned(a) && att_aligned(b) &&
           att_aligned(c);
}

template <int DPL>
static cudaError_t att_fwd_simt_launch(void *out, float *lse, const void *qkv, tg_dtype dt, int64_t B, int64_t T,
                                       int64_t C, int H, int D, float scale, cudaStream_t st)
{
    const int64_t rows = B * H * T, per = TGK_THREADS / 32;
    att_fwd_simt<DPL><<<(unsigned)((rows + per - 1) / per), TGK_THREADS, 0, st>>>(out, lse, qkv, dt, B, T, C, H, D, scale);
    return cudaGetLastError();
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

/* Backward: dQ and dd first, then dK, dV (which read dd). Each kernel timed alone on the H200 (2026-11,
 * ops.lua, ms with ~0.05 of per-call cost; gpt2 b8 t1024 12 heads / large b2 t2048 32 heads), with blocks of
 * 4 warps x 16 rows and 64-row chunks: dK/dV 0.160 / 0.488, dQ 0.104 / 0.434. Head dim 64: dK/dV best as
 * 4 warps x 32 keys (0.097; 8 x 16: 0.115, 2 x 32: 0.100, 32-query chunks in 168 registers: 0.100), dQ as
 * 8 warps x 16 queries with 32-key chunks in 128 registers (0.086; 4 x 32: 0.098, 4 x 16 in 128: 0.087).
 * Head dim 128 (a warp of 32 rows would need 256 accumulator registers): dK/dV stays 4 x 16 (8 x 16: 0.513,
 * 16-query chunks: 0.562), dQ keeps Q, dO fragments in registers (8 warps 0.384, 4: 0.389). Whole backward at
 * gpt2, these 0.183 ms against: dK/dV over 256 keys (8 warps x 32) 0.195 / 0.203, dQ over 256 queries
 * (8 x 32) 0.193, dQ as 4 warps x 32 queries in 128 registers 0.186; with 4 x 16-row blocks for both kernels
 * and dd a separate pass: 0.215 ms (gpt2), 0.976 ms (large) against 0.183, 0.869. */
template <int D>
static cudaError_t att4_bwd_launch(void *dqkv, float *dd, const void *dout, const void *out, const void *qkv,
                                   const float *lse, int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    cudaError_t e = cudaSuccess;
    if constexpr (D == 64) {
        e = att4_dq_launch_w<D, 8, 1, 32, true, 2>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st);
        if (e != cudaSuccess) return e;
        return att4_dkdv_launch_w<D, 4, 2, 32, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
    } else if constexpr (D == 128) {
        e = att4_dq_launch_w<D, 8, 1, 32, true>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st);
        if (e != cudaSuccess) return e;
        return att4_dkdv_launch_w<D, 4, 1, 32, false>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
    } else {
        e = att4_dq_launch_w<D, 4, 1, 64, true>(dqkv, dd, dout, out, qkv, lse, B, T, C, H, scale, st);
        if (e != cudaSuccess) return e;
        return att4_dkdv_launch_w<D, 4, 1, 64, true>(dqkv, dout, qkv, lse, dd, B, T, C, H, scale, st);
    }
}

template <int D, int NWG>
static cudaError_t att5_fwd_launch(void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t C, int H,
                                   float scale, cudaStream_t st)
{
    constexpr int BN = 128, BM = 64 * NWG;
    const size_t sm = att5_fwd_smem<D, NWG, BN>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att5_fwd<D, NWG, BN>, sm, &done);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)(B * H), (unsigned)((T + BM - 1) / BM)); /* y is the slow index: longest rows first */
    att5_fwd<D, NWG, BN><<<grid, NWG * 128, sm, st>>>((uint16_t *)out, lse, (const uint16_t *)qkv, (int)T, (int)C, H,
                                                      scale);
    return cudaGetLastError();
}

/* cuTensorMapEncodeTiled from the driver (through the runtime: no link to libcuda), NULL where missing. */
static PFN_cuTensorMapEncodeTiled_v12000 att6_encoder()
{
    static PFN_cuTensorMapEncodeTiled_v12000 fn;
    static int asked;
    if (!asked) {
        cudaDriverEntryPointQueryResult q;
        void *f = NULL;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)f;
        asked = 1;
    }
    return fn;
}

/* The warp-specialized kernel (2 consumer warpgroups, 128 queries a block, S stages of 128 keys) when the driver
 * encodes the tensor map, else the cp.async one (att5). */
template <int D, int S>
static cudaError_t att6_fwd_launch(void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t C, int H,
                                   float scale, cudaStream_t st)
{
    constexpr int NWG = 2, BN = 128, BM = 64 * NWG;
    PFN_cuTensorMapEncodeTiled_v12000 enc = att6_encoder();
    CUtensorMap tm;
    const cuuint64_t dims[3] = {(cuuint64_t)(3 * C), (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[2] = {(cuuint64_t)(3 * C * 2), (cuuint64_t)(T * 3 * C * 2)}; /* bytes, dims 1 and 2 */
    const cuuint32_t box[3] = {64, 64, 1}, estr[3] = {1, 1, 1};
    if (!enc ||
        enc(&tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)qkv, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    {
        if constexpr (D == 64) return att5_fwd_launch<D, 3>(out, lse, qkv, B, T, C, H, scale, st);
        else return att5_fwd_launch<D, 2>(out, lse, qkv, B, T, C, H, scale, st);
    }
    const size_t sm = att6_fwd_smem<D, NWG, BN, S>();
    dim3 grid((unsigned)(B * H), (unsigned)((T + BM - 1) / BM));
    /* turns between the consumers (PP) on: H200 (2026-12, ops.lua) 431 TFLOP/s at head dim 128 (b2 t2048 32 heads)
     * and 223 at 64 (b8 t1024 12 heads), against 368 and 198 without */
    static unsigned done;
    cudaError_t e = att_smem_limit(att6_fwd<D, NWG, BN, S, true>, sm, &done);
    if (e != cudaSuccess) return e;
    att6_fwd<D, NWG, BN, S, true><<<grid, (NWG + 1) * 128, sm, st>>>(tm, (uint16_t *)out, lse, (int)T, (int)C, H, scale);
    return cudaGetLastError();
}

/* A tensor map of a (B, T, cols) bf16 tensor in 64 x 64 boxes, 128-byte swizzle; false where it cannot be encoded. */
static bool att_tmap(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap *tm, const void *p, int64_t cols, int64_t T,
                     int64_t B)
{
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[2] = {(cuuint64_t)(cols * 2), (cuuint64_t)(T * cols * 2)}; /* bytes, dims 1 and 2 */
    const cuuint32_t box[3] = {64, 64, 1}, estr[3] = {1, 1, 1};
    return enc && enc(tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)p, dims, strides, box, estr,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int D, int NWG, int S, bool PAD>
static cudaError_t att7_dq_launch(void *dqkv, float *dd, const void *dout, const void *out, const void *qkv,
                                  const float *lse, int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    const dim3 grid((unsigned)(B * H), (unsigned)((T + 64 * NWG - 1) / (64 * NWG)));
    const size_t sm = att7_dq_smem<D, NWG, S>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att7_bwd_dq<D, NWG, S, PAD>, sm, &done);
    if (e != cudaSuccess) return e;
    att7_bwd_dq<D, NWG, S, PAD><<<grid, NWG * 128, sm, st>>>((uint16_t *)dqkv, dd, (const uint16_t *)dout,
                                                             (const uint16_t *)out, (const uint16_t *)qkv, lse, (int)T,
                                                             (int)C, H, scale);
    return cudaGetLastError();
}
template <int D, int NWG, int S>
static cudaError_t att7_dkdv_launch(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dd,
                                    int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    const dim3 grid((unsigned)(B * H), (unsigned)((T + 64 * NWG - 1) / (64 * NWG)));
    const size_t sm = att7_dkdv_smem<D, NWG, S>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att7_bwd_dkdv<D, NWG, S>, sm, &done);
    if (e != cudaSuccess) return e;
    att7_bwd_dkdv<D, NWG, S><<<grid, NWG * 128, sm, st>>>((uint16_t *)dqkv, (const uint16_t *)dout,
                                                          (const uint16_t *)qkv, lse, dd, (int)T, (int)C, H, scale);
    return cudaGetLastError();
}
template <int D, int NWG, int S>
static cudaError_t att8_dkdv_launch(const CUtensorMap &tq, const CUtensorMap &to, void *dqkv, const float *stats,
                                    int64_t B, int64_t T, int64_t C, int H, float scale, cudaStream_t st)
{
    const dim3 grid((unsigned)(B * H), (unsigned)((T + 64 * NWG - 1) / (64 * NWG)));
    const size_t sm = att8_dkdv_smem<D, NWG, S>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att8_bwd_dkdv<D, NWG, S>, sm, &done);
    if (e != cudaSuccess) return e;
    att8_bwd_dkdv<D, NWG, S><<<grid, NWG * 128, sm, st>>>(tq, to, (uint16_t *)dqkv, stats, (int)T, (int)C, H, scale);
    return cudaGetLastError();
}
/* The one-pass backward: the lse / dd rows (and zeroed counters), then per launch of as many (batch, head) pairs as
 * the scratch holds f32 dQ^T rows for (after the rows and the counters), the one-pass kernel and the dQ writer.
 * *taken stays false (nothing launched) where not one pair fits, more than 64 launches would be needed or the
 * query tiles exceed a grid dimension. */
template <int D, int S>
static cudaError_t att9_bwd_launch(const CUtensorMap &tq, const CUtensorMap &to, void *dqkv, float *scratch,
                                   size_t scratch_bytes, const void *dout, const void *out, const float *lse, int64_t B,
                                   int64_t T, int64_t C, int H, float scale, cudaStream_t st, bool *taken)
{
    constexpr int MAXL = 64; /* launch counters */
    const int64_t BH = B * H, tp = (T + 63) / 64 * 64, ntq = tp / 64, nkb = (T + 127) / 128;
    const size_t stats_b = (size_t)(2 * BH * tp) * sizeof(float), n_ctrl = MAXL + (size_t)(BH * ntq);
    const size_t ctrl_b = (n_ctrl * sizeof(int) + 255) / 256 * 256, per = (size_t)(D * tp) * sizeof(float);
    *taken = false;
    if (ntq > 65535 || stats_b + ctrl_b + per > scratch_bytes) return cudaSuccess;
    const int64_t nb = std::min<int64_t>(BH, (int64_t)((scratch_bytes - stats_b - ctrl_b) / per));
    const int64_t nl = (BH + nb - 1) / nb;
    if (nl > MAXL) return cudaSuccess;
    int *ctrl = (int *)((char *)scratch + stats_b); /* launch counters, then one per (batch, head) and query tile */
    float *dqacc = (float *)((char *)ctrl + ctrl_b);
    const size_t sm = att9_bwd_smem<D, S>();
    static unsigned done;
    cudaError_t e = att_smem_limit(att9_bwd<D, S>, sm, &done);
    if (e != cudaSuccess) return e;
    *taken = true;
    const int64_t threads = std::max<int64_t>(BH * tp * 8, (int64_t)n_ctrl);
    att9_prep<D><<<(unsigned)((threads + 255) / 256), 256, 0, st>>>(scratch, ctrl, (int)n_ctrl, (const uint16_t *)dout,
                                                                 (const uint16_t *)out, lse, (int)BH, (int)T, (int)C, H);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    for (int64_t l = 0; l < nl; l++) {
        const int64_t bh0 = l * nb, cnt = std::min<int64_t>(nb, BH - bh0);
        att9_bwd<D, S><<<(unsigned)(cnt * nkb), 3 * 128, sm, st>>>(tq, to, (uint16_t *)dqkv, scratch, dqacc, ctrl + l,
                                                               ctrl + MAXL, (int)cnt, (int)bh0, (int)T, (int)C, H, scale);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        att9_dq_out<D><<<dim3((unsigned)cnt, (unsigned)ntq), 256, 0, st>>>((uint16_t *)dqkv, dqacc, (int)bh0, (int)T,
                                                                         (int)C, H, scale);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* The wgmma backward: at head dim 64 the one-pass kernel (att9_bwd_launch) where it applies; else dQ and dd first,
 * then dK, dV; 4-stage rings of 64-row tiles, two warpgroups a block. The
 * dK/dV kernel takes its tiles from the tensor copy engine (att8_bwd_dkdv), reading lse and dd from the scratch
 * in rows of 64 per (batch, head) that the dQ kernel lays out; where that layout does not fit the scratch or the
 * driver cannot encode the tensor maps, the cp.async dK/dV kernel (att7_bwd_dkdv) reads them as they are. */
template <int D>
static cudaError_t att7_bwd_launch(void *dqkv, float *scratch, size_t scratch_bytes, const void *dout, const void *out,
                                   const void *qkv, const float *lse, int64_t B, int64_t T, int64_t C, int H, float scale,
                                   cudaStream_t st)
{
    const int64_t tp = (T + 63) / 64 * 64;
    CUtensorMap tq, to;
    PFN_cuTensorMapEncodeTiled_v12000 enc = att6_encoder();
    const bool tma = (size_t)(2 * B * H * tp) * sizeof(float) <= scratch_bytes && att_tmap(enc, &tq, qkv, 3 * C, T, B) &&
                     att_tmap(enc, &to, dout, C, T, B);
    if constexpr (D == 64) {
        if (tma && !tg_debug_get(TG_DEBUG_ATTENTION_TWO_PASS)) {
            bool taken = false;
            cudaError_t e = att9_bwd_launch<D, 4>(tq, to, dqkv, scratch, scratch_bytes, dout, out, lse, B, T, C, H,
                                                  scale, st, &taken);
            if (e != cudaSuccess || taken) return e;
        }
    }
    cudaError_t e = tma ? att7_dq_launch<D, 2, 4, true>(dqkv, scratch, dout, out, qkv, lse, B, T, C, H, scale, st)
                        : att7_dq_launch<D, 2, 4, false>(dqkv, scratch, dout, out, qkv, lse, B, T, C, H, scale, st);
    if (e != cudaSuccess) return e;
    if (tma) return att8_dkdv_launch<D, 2, 4>(tq, to, dqkv, scratch, B, T, C, H, scale, st);
    return att7_dkdv_launch<D, 2, 4>(dqkv, dout, qkv, lse, scratch, B, T, C, H, scale, st);
}

/* Whether the forward and the backward take the wgmma kernels on the current device: the build has the sm_90a
 * image (TG_CUDA_SM90A, set with the sm_90 target) and the device is of compute capability 9.0 (which loads it);
 * the debug switch attention_mma_sync sends both to the mma.sync kernels. */
extern "C" int tg_cuda_attention_wgmma(void)
{
#if defined(TG_CUDA_SM90A)
    static int cc[32]; /* per device: 0 not asked yet, 1 compute capability 9.0, 2 other */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return 0;
    if (dev < 32 && !cc[dev]) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
            return 0;
        cc[dev] = major == 9 && minor == 0 ? 1 : 2;
    }
    return dev < 32 && cc[dev] == 1 && !tg_debug_get(TG_DEBUG_ATTENTION_MMA_SYNC);
#else
    return 0;
#endif
}

extern "C" cudaError_t tg_cuda_attention_forward(void *out, float *lse, const void *qkv, tg_dtype dt, int64_t b,
                                                 int64_t t, int64_t c, int n_head, cudaStream_t st)
{
    if (b <= 0 || t <= 0 || c <= 0) return cudaSuccess;
    const int D = (int)(c / n_head);
    const float scale = 1.0f / sqrtf((float)D);
    if (t > INT32_MAX || 3 * c > INT32_MAX || b * n_head > 65535) return cudaErrorInvalidValue;
    if (att_use_mma(dt, D, out, qkv, qkv) && (D == 64 || D == 128) && tg_cuda_attention_wgmma()) {
        if (D == 64) return att6_fwd_launch<64, 4>(out, lse, qkv, b, t, c, n_head, scale, st);
        return att6_fwd_launch<128, 3>(out, lse, qkv, b, t, c, n_head, scale, st);
    }
    if (att_use_mma(dt, D, out, qkv, qkv)) {
        switch (D) {
        case 16: return att3_fwd_launch<16>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 32: return att3_fwd_launch<32>(out, lse, qkv, b, t, c, n_head, scale, st);
        case 64: return att3_fwd_launch<64>(out, lse, qkv, b, t, c, n_head, scale, st);
        default: return att3_fwd_launch<128>(out, lse, qkv, b, t, c, n_head, scale, st);
        }
    }
    if (D <= 32) return att_fwd_simt_launch<1>(out, lse, qkv, dt, b, t, c, n_head, D, scale, st);
    if (D <= 64) return att_fwd_simt_launch<2>(out, lse, qkv, dt, b, t, c, n_head, D, scale, st);
    if (D <= 128) return att_fwd_simt_launch<4>(out, lse, qkv, dt, b, t, c, n_head, D, scale, st);
    if (D <= 256) return att_fwd_simt_launch<8>(out, lse, qkv, dt, b, t, c, n_head, D, scale, st);
    return cudaErrorInvalidValue;
}

template <int DPL>
static cudaError_t att_bwd_simt_launch(void *dqkv, const void *dout, const void *out, const void *qkv, const float *lse,
                                       float *dd, tg_dtype dt, int64_t B, int64_t T, int64_t C, int H, int D,
                                       float scale, cudaStream_t st)
{
    const int64_t rows = B * H * T, per = TGK_THREADS / 32;
    const unsigned g = (unsigned)((rows + per - 1) / per);
    att_dd_kernel<DPL><<<g, TGK_THREADS, 0, st>>>(dd, dout, out, dt, B, T, C, H, D);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    att_bwd_dq_simt<DPL><<<g, TGK_THREADS, 0, st>>>(dqkv, dout, qkv, lse, dd, dt, B, T, C, H, D, scale);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    att_bwd_dkdv_simt<DPL><<<g, TGK_THREADS, 0, st>>>(dqkv, dout, qkv, lse, dd, dt, B, T, C, H, D, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_attention_backward(void *dqkv, const void *dout, const void *out, const void *qkv,
                                                  const float *lse, tg_dtype dt, int64_t b, int64_t t, int64_t c,
                                                  int n_head, float *scratch, size_t scratch_bytes, cudaStream_t st)
{
    if (b <= 0 || t <= 0 || c <= 0) return cudaSuccess;
    const int D = (int)(c / n_head);
    const float scale = 1.0f / sqrtf((float)D);
    if (t > INT32_MAX || 3 * c > INT32_MAX || b * n_head > 65535) return cudaErrorInvalidValue;
    if ((size_t)(b * n_head * t) * sizeof(float) > scratch_bytes) return cudaErrorInvalidValue; /* dd does not fit */
    float *dd = scratch;
    if (att_use_mma(dt, D, dqkv, dout, qkv) && att_aligned(out) && (D == 64 || D == 128) && tg_cuda_attention_wgmma()) {
        if (D == 64) return att7_bwd_launch<64>(dqkv, scratch, scratch_bytes, dout, out, qkv, lse, b, t, c, n_head, scale, st);
        return att7_bwd_launch<128>(dqkv, scratch, scratch_bytes, dout, out, qkv, lse, b, t, c, n_head, scale, st);
    }
    if (att_use_mma(dt, D, dqkv, dout, qkv) && att_aligned(out)) {
        switch (D) { /* dd comes from the dQ kernel */
        case 16: return att4_bwd_launch<16>(dqkv, dd, dout, out, qkv, lse, b, t, c, n_head, scale, st);
        case 32: return att4_bwd_launch<32>(dqkv, dd, dout, out, qkv, lse, b, t, c, n_head, scale, st);
        case 64: return att4_bwd_launch<64>(dqkv, dd, dout, out, qkv, lse, b, t, c, n_head, scale, st);
        default: return att4_bwd_launch<128>(dqkv, dd, dout, out, qkv, lse, b, t, c, n_head, scale, st);
        }
    }
    if (D <= 32) return att_bwd_simt_launch<1>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, st);
    if (D <= 64) return att_bwd_simt_launch<2>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, st);
    if (D <= 128) return att_bwd_simt_launch<4>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, st);
    if (D <= 256) return att_bwd_simt_launch<8>(dqkv, dout, out, qkv, lse, dd, dt, b, t, c, n_head, D, scale, st);
    return cudaErrorInvalidValue;
}
