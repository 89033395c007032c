/* rand.cu — counter-based uniform / normal fills (Philox4x32-10), the same numbers as the CPU backend. */
#include "common.cuh"

#include <math.h>

/* Philox4x32-10 (Salmon et al., Random123), as tg_philox4x32 in src/core/rng.c:
 * counter words (lo32(ctr), hi32(ctr), 0, 0), key (lo32(key), hi32(key)). */
static __device__ __forceinline__ void philox4x32_10(uint64_t key, uint64_t ctr, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
#pragma unroll
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* A word to a double in (0, 1): 24 high bits, centred in their interval. */
static __device__ __forceinline__ double unit(uint32_t w) { return ((double)(w >> 8) + 0.5) * 0x1p-24; }

template <int DIST>
static __global__ void rand_kernel(void *dst, tg_dtype dt, int64_t n, double a, double b, uint64_t seed,
                                   uint64_t offset)
{
    int64_t ncounters = (n + 3) / 4;
    TGK_GRID_STRIDE(c, ncounters)
    {
        uint32_t w[4];
        philox4x32_10(seed, offset + (uint64_t)c, w);
        double v[4];
        if (DIST == TGK_RAND_UNIFORM) {
            for (int j = 0; j < 4; j++) v[j] = a + (b - a) * unit(w[j]);
        } else {
            for (int j = 0; j < 4; j += 2) {
                double r = sqrt(-2.0 * log(unit(w[j]))), th = 2.0 * M_PI * unit(w[j + 1]);
                v[j] = a + b * (r * cos(th));
                v[j + 1] = a + b * (r * sin(th));
            }
        }
        for (int j = 0; j < 4; j++) {
            int64_t i = 4 * c + j;
            if (i < n) tgk_store(dst, dt, i, (float)v[j]);
        }
    }
}

extern "C" cudaError_t tg_cuda_rand(void *dst, tg_dtype dt, int64_t n, int dist, double a, double b, uint64_t seed,
                                    uint64_t offset, cudaStream_t st)
{
    if (n <= 0) return cudaSuccess;
    if (dt != TG_F32 && dt != TG_BF16) return cudaErrorInvalidValue;
    unsigned g = tgk_blocks((n + 3) / 4);
    if (dist == TGK_RAND_UNIFORM)
        rand_kernel<TGK_RAND_UNIFORM><<<g, TGK_THREADS, 0, st>>>(dst, dt, n, a, b, seed, offset);
    else if (dist == TGK_RAND_NORMAL)
        rand_kernel<TGK_RAND_NORMAL><<<g, TGK_THREADS, 0, st>>>(dst, dt, n, a, b, seed, offset);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}
