/* cuda-test-util.c — see cuda-test-util.h. */
#include "cuda-test-util.h"

#include "tap.h"

#ifdef TG_HAVE_CUDA
#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

tg_stream *cs, *gs;
static uint64_t rs;

void cuda_test_setup(void)
{
    const char *env = getenv("TG_TEST_SEED");
    rs = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    if (!rs) rs = 1;
    diag("random inputs from TG_TEST_SEED=%llu", (unsigned long long)rs);
    cs = tg_stream_current((tg_device){TG_CPU, 0});
    gs = tg_stream_current((tg_device){TG_CUDA, 0});
    if (!cs || !gs) bail_out("streams: %s", tg_last_error());
}

uint64_t rnd_u64(void)
{
    rs ^= rs >> 12, rs ^= rs << 25, rs ^= rs >> 27;
    return rs * 2685821657736338717ull;
}
double rnd_unit(void) { return (double)(rnd_u64() >> 11) * 0x1p-53; }
double rnd_normal(void) { return sqrt(-2 * log(1 - rnd_unit())) * cos(6.283185307179586 * rnd_unit()); }

void *cpu_alloc(size_t bytes)
{
    void *p = NULL;
    if (tg_backend_cpu.alloc(0, bytes, &p) != TG_OK) bail_out("cpu alloc %zu: %s", bytes, tg_last_error());
    return p;
}
void *gpu_alloc(size_t bytes)
{
    void *p = NULL;
    if (tg_backend_cuda.alloc(0, bytes, &p) != TG_OK) bail_out("cuda alloc %zu: %s", bytes, tg_last_error());
    return p;
}
void h2d(void *d, const void *h, size_t bytes)
{
    if (tg_backend_cuda.memcpy(gs, d, h, bytes, TG_H2D) != TG_OK) bail_out("H2D: %s", tg_last_error());
}
void d2h(void *h, const void *d, size_t bytes)
{
    if (tg_backend_cuda.memcpy(gs, h, d, bytes, TG_D2H) != TG_OK || tg_backend_cuda.stream_sync(gs) != TG_OK)
        bail_out("D2H: %s", tg_last_error());
}
#endif
