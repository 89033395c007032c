/* cuda-test-util.h — what the CUDA tests that compare with the CPU backend share: a host random generator
 * (xorshift64*) seeded from TG_TEST_SEED or the clock and process id (printed, so a failing run can be repeated),
 * the current streams of cpu:0 and cuda:0, and backend allocation and copies that bail out on failure. */
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
#endif

#endif
