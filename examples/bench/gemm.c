/* gemm.c — benchmark: CPU GEMM GFLOP/s for square sizes, f32 and bf16 operands, default (CBLAS) and blocked paths. */
#include "core/debug.h" /* the blocked path: an internal switch (linked statically) */
#include <tegraph.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* GFLOP/s of C (n, n) = A (n, n) @ B (n, n) in dtype dt (C f32), or -1 on error. */
static double bench(int64_t n, tg_dtype dt)
{
    const tg_device cpu = {TG_CPU, 0};
    int64_t shape[2] = {n, n};
    tg_tensor *a = NULL, *b = NULL, *c = NULL;
    double gflops = -1;
    if (tg_tensor_new(dt, 2, shape, cpu, &a) || tg_tensor_new(dt, 2, shape, cpu, &b) ||
        tg_tensor_new(TG_F32, 2, shape, cpu, &c) || tg_randn(a, 0, 1) || tg_randn(b, 0, 1) ||
        tg_gemm(c, a, 0, b, 0, 1.0, 0.0) /* warm up */)
        goto out;
    int reps = 0;
    double t0 = now(), t;
    do {
        if (tg_gemm(c, a, 0, b, 0, 1.0, 0.0)) goto out;
        reps++;
        t = now() - t0;
    } while (t < 0.5 || reps < 3);
    gflops = 2.0 * n * n * n * reps / t * 1e-9;
out:
    if (gflops < 0) fprintf(stderr, "gemm %lld: %s\n", (long long)n, tg_last_error());
    tg_tensor_free(a), tg_tensor_free(b), tg_tensor_free(c);
    return gflops;
}

int main(int argc, char **argv)
{
    int64_t sizes[16] = {256, 512, 1024};
    int nsizes = 3;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 16; i++) sizes[nsizes++] = atoll(argv[i]);
    }
    int has_blas = strstr(tg_build_options(), "blas=yes") != NULL;
    printf("tegraph %s (%s)\n", tg_version(), tg_build_options());
    printf("%-8s %-6s %-8s %10s\n", "size", "dtype", "path", "GFLOP/s");
    for (int pass = 0; pass < (has_blas ? 2 : 1); pass++) {
        const char *path = pass == 0 ? "default" : "blocked"; /* default: CBLAS for f32 when built with it */
        tg_debug_set(TG_DEBUG_GEMM_BLOCKED, pass == 1);
        for (int i = 0; i < nsizes; i++)
            for (int d = 0; d < 2; d++) {
                tg_dtype dt = d ? TG_BF16 : TG_F32;
                printf("%-8lld %-6s %-8s %10.1f\n", (long long)sizes[i], tg_dtype_name(dt), path, bench(sizes[i], dt));
                fflush(stdout);
            }
    }
    return 0;
}
