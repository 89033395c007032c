/* kprof.c — a kernel-time profile for any CUDA program, for the device machine (which has no nsys):
 * LD_PRELOAD it and it records every kernel (graph-launched ones too) through CUPTI's activity API, and at
 * exit prints, per kernel name, total device ms, launches and mean µs, longest first, to KPROF_OUT (or stderr).
 *
 *   gcc -shared -fPIC -O2 -I$CUDA/include tools/device/kprof.c -o kprof.so -L$CUPTI_LIB -lcupti
 *   KPROF_OUT=prof.txt LD_PRELOAD=./kprof.so ./tegraph run examples/bench/layers.lua ...
 *
 * A tool, not part of the library: it is neither built nor installed by the project. */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct row {
    char *name;
    unsigned long long ns, n;
};
static struct row *rows;
static size_t nrows, cap;

static void add(const char *name, unsigned long long ns)
{
    for (size_t i = 0; i < nrows; i++)
        if (strcmp(rows[i].name, name) == 0) {
            rows[i].ns += ns, rows[i].n++;
            return;
        }
    if (nrows == cap) rows = realloc(rows, (cap = cap ? 2 * cap : 256) * sizeof *rows);
    rows[nrows++] = (struct row){strdup(name), ns, 1};
}

static void kprof_stop(void);

static void CUPTIAPI want_buffer(uint8_t **buf, size_t *size, size_t *max_records)
{
    /* the first buffer is asked for once CUDA is up: an atexit handler registered now runs before the CUDA
     * runtime's own teardown (registered earlier), while the records can still be flushed */
    static int registered;
    if (!registered) registered = 1, atexit(kprof_stop);
    *size = 16u << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI got_buffer(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS)
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const void *)r;
            add(k->name ? k->name : "?", k->end - k->start);
        }
    free(buf);
}

static int by_time(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

__attribute__((constructor)) static void kprof_start(void)
{
    if (cuptiActivityRegisterCallbacks(want_buffer, got_buffer) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
        fprintf(stderr, "kprof: CUPTI activity API unavailable\n");
}

static void kprof_stop(void)
{
    static int done;
    if (done) return;
    done = 1;
    cuptiActivityFlushAll(1);
    const char *path = getenv("KPROF_OUT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) f = stderr;
    qsort(rows, nrows, sizeof *rows, by_time);
    unsigned long long tot = 0;
    for (size_t i = 0; i < nrows; i++) tot += rows[i].ns;
    fprintf(f, "kprof: %.3f ms of kernels, %zu names\n", tot / 1e6, nrows);
    for (size_t i = 0; i < nrows; i++)
        fprintf(f, "%5.1f%% %10.3f ms %7llu x %9.2f us  %s\n", 100.0 * rows[i].ns / (tot ? tot : 1), rows[i].ns / 1e6,
                rows[i].n, rows[i].ns / 1e3 / rows[i].n, rows[i].name);
    if (f != stderr) fclose(f);
}
