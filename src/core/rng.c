/* rng.c — Philox4x32-10 (Salmon et al., SC'11) and the global generator's seed and counter. */
#include "core/core.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static uint64_t rng_seed = 0x5eed, rng_offset;

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* counter words (lo32(ctr), hi32(ctr), 0, 0), key (lo32(seed), hi32(seed)), 10 rounds */
void tg_philox4x32(uint64_t key, uint64_t counter, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(PHILOX_M0, c0, &hi0);
        uint32_t lo1 = mulhilo(PHILOX_M1, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

void tg_manual_seed(uint64_t seed)
{
    rng_seed = seed;
    rng_offset = 0;
}

void tg_rng_state(uint64_t *seed, uint64_t *offset)
{
    if (seed) *seed = rng_seed;
    if (offset) *offset = rng_offset;
}

void tg_rng_reserve(uint64_t n, uint64_t *seed, uint64_t *offset)
{
    *seed = rng_seed;
    *offset = rng_offset;
    rng_offset += n;
}

void tg_rng_set_state(uint64_t seed, uint64_t offset)
{
    rng_seed = seed;
    rng_offset = offset;
}
