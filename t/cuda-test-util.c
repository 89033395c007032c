/* cuda-test-util.c — see cuda-test-util.h. */
#include "cuda-test-util.h"

#include "tap.h"

#ifdef TG_HAVE_CUDA
#include <math.h>
#include <stdlib.h>
#include <string.h>
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

struct pair pair_new(size_t bytes)
{
    struct pair p = {.bytes = bytes};
    p.c = cpu_alloc(bytes ? bytes : 4), p.g = gpu_alloc(bytes ? bytes : 4);
    return p;
}

void pair_free(struct pair *p)
{
    tg_backend_cpu.free(0, p->c);
    tg_backend_cuda.free(0, p->g);
}

void pair_set(struct pair *p, const void *host)
{
    if (!p->bytes) return;
    memcpy(p->c, host, p->bytes);
    h2d(p->g, host, p->bytes);
}

void *pair_gpu(const struct pair *p)
{
    void *h = malloc(p->bytes ? p->bytes : 4);
    if (!h) bail_out("out of host memory (%zu bytes)", p->bytes);
    if (p->bytes) d2h(h, p->g, p->bytes);
    return h;
}

void sync_both(void)
{
    if (tg_backend_cpu.stream_sync(cs) != TG_OK || tg_backend_cuda.stream_sync(gs) != TG_OK)
        bail_out("sync: %s", tg_last_error());
}

double elem(const void *p, tg_dtype dt, size_t i)
{
    switch (dt) {
    case TG_F32: return ((const float *)p)[i];
    case TG_BF16: return tg_bf16_to_f32(((const uint16_t *)p)[i]);
    case TG_I32: return ((const int32_t *)p)[i];
    default: return ((const uint16_t *)p)[i];
    }
}

double tol_of(tg_dtype dt) { return dt == TG_BF16 ? 1e-2 : 1e-5; }

void check_close(const struct pair *p, tg_dtype dt, size_t n, double tol, const char *what)
{
    void *g = pair_gpu(p);
    double num = 0, den = 0, maxd = 0;
    size_t nan_mismatch = 0, nans = 0;
    for (size_t i = 0; i < n; i++) {
        double x = elem(g, dt, i), y = elem(p->c, dt, i);
        if (isnan(x) || isnan(y)) {
            nan_mismatch += isnan(x) != isnan(y);
            nans++;
            continue;
        }
        num += (x - y) * (x - y), den += y * y;
        if (fabs(x - y) > maxd) maxd = fabs(x - y);
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    ok(nan_mismatch == 0 && rel <= tol, "%s: relative L2 %.3g <= %g", what, rel, tol);
    if (nan_mismatch) diag("%zu of %zu elements NaN on one backend only", nan_mismatch, n);
    if (nans == n && n > 1) diag("all %zu elements NaN on both backends", n);
    if (rel > tol) diag("max |diff| %.3g", maxd);
    free(g);
}

tg_tensor *mk(tg_device d, tg_dtype dt, int64_t r, int64_t c)
{
    int64_t shape[2] = {r, c};
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, c ? 2 : 1, shape, d, &t) != TG_OK) bail_out("tensor_new: %s", tg_last_error());
    return t;
}

void mk_pair(tg_dtype dt, int64_t r, int64_t c, const void *bytes, tg_tensor **tc, tg_tensor **tg)
{
    *tc = mk((tg_device){TG_CPU, 0}, dt, r, c), *tg = mk((tg_device){TG_CUDA, 0}, dt, r, c);
    size_t n = (size_t)tg_tensor_numel(*tc) * tg_dtype_size(dt);
    if (bytes && (tg_tensor_write(*tc, bytes, n) != TG_OK || tg_tensor_write(*tg, bytes, n) != TG_OK))
        bail_out("write: %s", tg_last_error());
}

void *read_all(const tg_tensor *t)
{
    size_t n = (size_t)tg_tensor_numel(t) * tg_dtype_size(tg_tensor_dtype(t));
    void *h = malloc(n ? n : 1);
    if (!h || tg_tensor_read(t, h, n) != TG_OK) bail_out("read: %s", h ? tg_last_error() : "out of host memory");
    return h;
}
#endif
