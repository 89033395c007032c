/* rng-is-deterministic.c — Philox fills: same seed same numbers, offsets advance, element i independent of n, right statistics. */
#include "backend/backend.h"
#include "tap.h"

#include <math.h>
#include <string.h>

static const tg_device cpu = {TG_CPU, 0};

static tg_tensor *vec(tg_dtype dt, int64_t n)
{
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, 1, &n, cpu, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    return t;
}

/* A fresh f32 vector of n elements filled by randn (normal) or rand (uniform) after seeding. */
static float *draw(uint64_t seed, int seeded, int normal, int64_t n, double a, double b)
{
    tg_tensor *t = vec(TG_F32, n);
    float *v = malloc((n ? n : 1) * sizeof *v);
    if (seeded) tg_manual_seed(seed);
    tg_status st = normal ? tg_randn(t, a, b) : tg_rand(t, a, b);
    if (st != TG_OK || tg_tensor_read(t, v, n * sizeof *v) != TG_OK) bail_out("draw: %s", tg_last_error());
    tg_tensor_free(t);
    return v;
}

static double unit(uint32_t w) { return ((double)(w >> 8) + 0.5) * 0x1p-24; }

int main(void)
{
    plan(NO_PLAN);

    /* Philox4x32-10 known answer (Random123 test vector: key 0, counter 0). */
    uint32_t w[4];
    tg_philox4x32(0, 0, w);
    ok(w[0] == 0x6627e8d5 && w[1] == 0xe169c58d && w[2] == 0xbc57ac4c && w[3] == 0x9b00dbd8,
       "philox4x32-10(key 0, counter 0) = 6627e8d5 e169c58d bc57ac4c 9b00dbd8 (got %08x %08x %08x %08x)", w[0], w[1],
       w[2], w[3]);

    /* Same seed, same numbers; another seed, other numbers. */
    float *a = draw(42, 1, 1, 1000, 0, 1), *b = draw(42, 1, 1, 1000, 0, 1), *c = draw(43, 1, 1, 1000, 0, 1);
    ok(memcmp(a, b, 1000 * sizeof *a) == 0, "randn: seed 42 twice gives bitwise the same 1000 numbers");
    int same = 0;
    for (int i = 0; i < 1000; i++) same += a[i] == c[i];
    ok(same < 5, "randn: seed 43 gives different numbers (%d of 1000 equal)", same);
    free(b), free(c);

    /* The offset advances by ceil(n/4) counters per fill, so the next fill differs. */
    uint64_t seed, off;
    tg_manual_seed(42);
    tg_rng_state(&seed, &off);
    ok(seed == 42 && off == 0, "manual_seed sets (seed 42, offset 0), got (%llu, %llu)", (unsigned long long)seed,
       (unsigned long long)off);
    b = draw(0, 0, 1, 1000, 0, 1);
    tg_rng_state(&seed, &off);
    is_int((long long)off, 250, "a fill of 1000 advances the offset by 250 counters");
    c = draw(0, 0, 1, 10, 0, 1);
    tg_rng_state(&seed, &off);
    is_int((long long)off, 253, "a fill of 10 advances it by 3 more");
    ok(memcmp(a, b, 1000 * sizeof *a) == 0, "the first fill after seeding is the seeded sequence");
    same = 0;
    for (int i = 0; i < 10; i++) same += c[i] == a[i];
    ok(same == 0, "the second fill continues the stream instead of repeating it");
    free(b), free(c);

    /* Element i depends on (seed, offset, i) only, not on n. */
    int prefix_ok = 1;
    static const int64_t ns[] = {1, 3, 10, 13, 999};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        float *p = draw(42, 1, 1, ns[i], 0, 1);
        if (memcmp(p, a, ns[i] * sizeof *p) != 0) {
            prefix_ok = 0;
            diag("randn of %lld is not a prefix of randn of 1000", (long long)ns[i]);
        }
        free(p);
    }
    ok(prefix_ok, "randn of 1, 3, 10, 13, 999 elements = the first elements of randn of 1000");
    float *u1 = draw(9, 1, 0, 10, -1, 1), *u2 = draw(9, 1, 0, 1000, -1, 1);
    ok(memcmp(u1, u2, 10 * sizeof *u1) == 0, "rand of 10 = the first 10 of rand of 1000");
    free(u1), free(u2);

    /* Exactly the documented scheme (struct tg_rand_args), element by element. */
    float *un = draw(1234, 1, 0, 4099, -2, 5), *nn = draw(1234, 1, 1, 4099, 3, 0.5);
    int ubad = 0, nbad = 0;
    for (int64_t i = 0; i < 4099; i++) {
        tg_philox4x32(1234, (uint64_t)(i / 4), w);
        float want = (float)(-2 + 7 * unit(w[i % 4]));
        ubad += memcmp(&want, &un[i], sizeof want) != 0;
        int j = (int)(i % 4) & ~1;
        double r = sqrt(-2 * log(unit(w[j]))), t = 2 * M_PI * unit(w[j + 1]);
        float wn = (float)(3 + 0.5 * (i % 2 ? r * sin(t) : r * cos(t)));
        nbad += fabsf(wn - nn[i]) > 1e-6f * fabsf(wn);
    }
    is_int(ubad, 0, "uniform element i = lo + (hi - lo) * ((w >> 8) + 0.5) * 2^-24 of word i %% 4 of counter i / 4");
    is_int(nbad, 0, "normal elements are Box-Muller of word pairs (w0, w1) and (w2, w3)");
    free(un), free(nn);

    /* bf16 fills are the f32 fills rounded. */
    tg_tensor *tb = vec(TG_BF16, 1001);
    uint16_t hb[1001];
    float *fv = draw(77, 1, 1, 1001, 0, 1);
    tg_manual_seed(77);
    int bbad = 0;
    if (tg_randn(tb, 0, 1) == TG_OK && tg_tensor_read(tb, hb, sizeof hb) == TG_OK) {
        for (int i = 0; i < 1001; i++) bbad += hb[i] != tg_f32_to_bf16(fv[i]);
    } else bbad = -1;
    is_int(bbad, 0, "bf16 randn = f32 randn rounded to bf16");
    free(fv), tg_tensor_free(tb);

    /* Statistics over a million draws. */
    const int64_t n = 1000000;
    float *z = draw(5, 1, 1, n, 0, 1);
    double s = 0, s2 = 0, within = 0;
    for (int64_t i = 0; i < n; i++) s += z[i], s2 += (double)z[i] * z[i], within += fabs(z[i]) < 1;
    double mean = s / n, sd = sqrt(s2 / n - mean * mean);
    is_near(mean, 0, 0.005, "randn(0, 1): mean %.4f", mean);
    is_near(sd, 1, 0.005, "randn(0, 1): std %.4f", sd);
    is_near(within / n, 0.682689, 0.003, "randn(0, 1): %.4f of draws within one std", within / n);
    free(z);

    z = draw(6, 1, 1, n, 3, 2);
    s = s2 = 0;
    for (int64_t i = 0; i < n; i++) s += z[i], s2 += (double)z[i] * z[i];
    mean = s / n, sd = sqrt(s2 / n - mean * mean);
    is_near(mean, 3, 0.01, "randn(3, 2): mean %.4f", mean);
    is_near(sd, 2, 0.01, "randn(3, 2): std %.4f", sd);
    free(z);

    z = draw(7, 1, 0, n, -2, 5);
    int out = 0, bins[7] = {0};
    s = s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        out += !(z[i] >= -2 && z[i] <= 5);
        s += z[i], s2 += (double)z[i] * z[i];
        int bi = (int)floor(z[i] + 2);
        if (bi >= 0 && bi < 7) bins[bi]++;
    }
    mean = s / n, sd = sqrt(s2 / n - mean * mean);
    is_int(out, 0, "rand(-2, 5): every draw in [-2, 5]");
    is_near(mean, 1.5, 0.01, "rand(-2, 5): mean %.4f", mean);
    is_near(sd, 7 / sqrt(12), 0.01, "rand(-2, 5): std %.4f", sd);
    int flat = 1;
    for (int i = 0; i < 7; i++) flat &= fabs(bins[i] - n / 7.0) < 0.01 * n / 7.0 * 3;
    ok(flat, "rand(-2, 5): each unit bin holds 1/7 of the draws within 3%% (%d %d %d %d %d %d %d)", bins[0], bins[1],
       bins[2], bins[3], bins[4], bins[5], bins[6]);
    free(z);

    free(a);
    return done_testing();
}
