/* cuda-test-util.h — what the CUDA tests that compare with the CPU backend share: a host random generator
 * (xorshift64*) seeded from TG_TEST_SEED or the clock and process id (printed, so a failing run can be repeated),
 * the current streams of cpu:0 and cuda:0, backend allocation and copies that bail out on failure, and pairs of
 * buffers holding the same bytes on both backends with the comparisons of the two. */
#ifndef TG_CUDA_TEST_UTIL_H
#define TG_CUDA_TEST_UTIL_H

#include "backend/backend.h"

#include <stddef.h>
#include <stdint.h>

#ifdef TG_HAVE_CUDA
extern tg_stream *cs, *gs; /* the current streams of cpu:0 and cuda:0, set by cuda_test_setup */

/* Seeds the generator (a diag line names the seed) and takes both streams; bails out without them. */
void cuda_test_setup(void);

uint64_t rnd_u64(void);
double rnd_unit(void);   /* uniform in [0, 1) */
double rnd_normal(void); /* N(0, 1), Box-Muller */

/* Device memory through the backends' allocators. */
void *cpu_alloc(size_t bytes);
void *gpu_alloc(size_t bytes);
/* Copies on the cuda:0 stream; d2h also waits for it. */
void h2d(void *d, const void *h, size_t bytes);
void d2h(void *h, const void *d, size_t bytes);

/* The same bytes on both backends: a CPU backend buffer and a CUDA one of `bytes` (at least 4 allocated, so an
 * empty pair has addresses too). */
struct pair {
    void *c, *g; /* CPU backend memory, CUDA memory */
    size_t bytes;
};
struct pair pair_new(size_t bytes);
void pair_free(struct pair *p);
void pair_set(struct pair *p, const void *host); /* both copies = the host bytes */
void *pair_gpu(const struct pair *p);           /* the CUDA copy, on the host (caller frees) */
void sync_both(void);                           /* waits for both streams */
/* Element i of f32, bf16, i32 or u16 data, as a double. */
double elem(const void *p, tg_dtype dt, size_t i);
/* The relative L2 tolerance of a kernel's result in dt (f32 or bf16) against the CPU's. */
double tol_of(tg_dtype dt);
/* ||gpu - cpu|| / ||cpu|| over n elements <= tol, with NaN in the same places (a poisoned element left unwritten
 * shows): one TAP check named what. */
void check_close(const struct pair *p, tg_dtype dt, size_t n, double tol, const char *what);

/* Through the public API: a tensor of shape (r, c) on d ((r) where c is 0); the same shape on cpu:0 and cuda:0,
 * both holding `bytes` where not NULL; a tensor's bytes on the host (caller frees). Each bails out on failure. */
tg_tensor *mk(tg_device d, tg_dtype dt, int64_t r, int64_t c);
void mk_pair(tg_dtype dt, int64_t r, int64_t c, const void *bytes, tg_tensor **tc, tg_tensor **tg);
void *read_all(const tg_tensor *t);
#endif

#endif
