/* kprof.c — a kernel-time profiler on CUPTI's activity API, loaded into a CUDA program from outside.
 *
 * It records every kernel (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: kernels of CUDA graphs too), memcpy and
 * memset with their device start and end, and when the program exits prints one table sorted by total time:
 * calls, total ms, mean us and share of GPU time per kernel, the wall-clock span of the recorded work, the
 * time the GPU was busy in it, and the totals of groups of kernels (GEMM, attention, norm, elementwise,
 * cross-entropy, optimizer, memcpy/memset, other).
 *
 * Build (CUPTI's header and library are in $CUDA/extras/CUPTI/{include,lib64} or $CUDA/{include,lib64}):
 *
 *   gcc -O2 -shared -fPIC -o kprof.so kprof.c -I$CUDA/include -I$CUPTI_INC -L$CUPTI_LIB -Wl,-rpath,$CUPTI_LIB \
 *       -lcupti -ldl -lpthread
 *
 * Run: CUDA_INJECTION64_PATH=/abs/path/kprof.so ./program   (the driver loads it at cuInit, whether the
 * program links libcudart dynamically or statically, and only in processes that use CUDA). LD_PRELOAD also
 * works; then every process of the command line loads it, and those that record nothing write nothing.
 *
 * Environment:
 *   KPROF_OUT=FILE        write the table there (default stderr); %p in FILE becomes the process id
 *   KPROF_SKIP_FIRST=N    drop the first N kernels (by start time) and every memcpy/memset before them: a warm-up
 *   KPROF_DELAY_MS=D      drop what starts in the first D ms after the profiler started
 *   KPROF_STEPS=S         divide calls and times by S, so that rows read "per step"
 *   KPROF_RAW=FILE        also write the kept totals per kernel (calls, ns) to FILE, for KPROF_BASELINE
 *   KPROF_BASELINE=FILE   subtract a KPROF_RAW file of another run before dividing by KPROF_STEPS: two runs of
 *                         the same program, with a and b steps, give exactly the b - a steady steps (start-up,
 *                         capture and the last step's extra work cancel)
 *   KPROF_TOP=K           rows printed (default 40; 0: all)
 *   KPROF_WIDTH=W         kernel names shortened to W characters (default 90)
 *   KPROF_BUFFER_MB=M     size of one activity buffer (default 8)
 *
 * Overhead: the activity API timestamps kernels on the device and hands full buffers to a CUPTI thread, which
 * copies two timestamps and a name id per record here; nothing else runs during the program. Kernel times do
 * not change measurably; host-bound (eager) launch rates can drop slightly, which shows in the span. */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kp_kernel_rec;
typedef CUpti_ActivityMemcpy6 kp_memcpy_rec;
#else
typedef CUpti_ActivityKernel9 kp_kernel_rec;
typedef CUpti_ActivityMemcpy5 kp_memcpy_rec;
#endif
typedef CUpti_ActivityMemset4 kp_memset_rec;

enum { KP_KERNEL, KP_MEMCPY, KP_MEMSET };

typedef struct {
    uint64_t start, end;
    uint32_t name; /* index into names */
    uint8_t kind, graph;
} kp_rec;

typedef struct {
    char *raw;  /* CUPTI's (mangled) name, or a [memcpy ...] label */
    char *show; /* demangled, without the parameter list */
    uint64_t hash;
} kp_name;

static pthread_mutex_t kp_lock = PTHREAD_MUTEX_INITIALIZER;
static kp_rec *kp_recs;
static size_t kp_nrecs, kp_caprecs;
static kp_name *kp_names;
static size_t kp_nnames, kp_capnames;
static uint32_t *kp_slots; /* open-addressed hash of names: index + 1, 0 empty */
static size_t kp_nslots;
static uint64_t kp_dropped, kp_t0;
static size_t kp_bufsize = 8u << 20;
static int kp_started, kp_done;

static void kp_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("kprof: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void *kp_grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return p;
    size_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    void *q = realloc(p, n * elem);
    if (!q) return NULL;
    *cap = n;
    return q;
}

static uint64_t kp_fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Index of name s (interned; CUPTI's strings are copied). UINT32_MAX when out of memory. Under kp_lock. */
static uint32_t kp_intern(const char *s)
{
    if (!s) s = "(unnamed)";
    uint64_t h = kp_fnv(s);
    if (2 * (kp_nnames + 1) > kp_nslots) {
        size_t n = kp_nslots ? 2 * kp_nslots : 4096;
        uint32_t *t = calloc(n, sizeof *t);
        if (!t) return UINT32_MAX;
        for (size_t i = 0; i < kp_nnames; i++) {
            size_t j = kp_names[i].hash & (n - 1);
            while (t[j]) j = (j + 1) & (n - 1);
            t[j] = (uint32_t)i + 1;
        }
        free(kp_slots);
        kp_slots = t, kp_nslots = n;
    }
    size_t j = h & (kp_nslots - 1);
    for (; kp_slots[j]; j = (j + 1) & (kp_nslots - 1)) {
        kp_name *e = &kp_names[kp_slots[j] - 1];
        if (e->hash == h && strcmp(e->raw, s) == 0) return kp_slots[j] - 1;
    }
    kp_name *nn = kp_grow(kp_names, &kp_capnames, kp_nnames + 1, sizeof *kp_names);
    char *copy = strdup(s);
    if (!nn || !copy) {
        free(copy);
        if (nn) kp_names = nn;
        return UINT32_MAX;
    }
    kp_names = nn;
    kp_names[kp_nnames] = (kp_name){ copy, NULL, h };
    kp_slots[j] = (uint32_t)++kp_nnames;
    return (uint32_t)(kp_nnames - 1);
}

static void kp_finish(void);
static pthread_once_t kp_exit_once = PTHREAD_ONCE_INIT;
static void kp_register_exit(void)
{
    atexit(kp_finish);
}

/* The first buffer is asked for once CUDA is up: the report's atexit handler, registered then, runs before the
 * CUDA runtime's and driver's own exit handlers (registered earlier), while the context still exists. */
static void CUPTIAPI kp_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    pthread_once(&kp_exit_once, kp_register_exit);
    *buffer = aligned_alloc(8, kp_bufsize);
    *size = *buffer ? kp_bufsize : 0;
    *max_records = 0;
}

static const char *kp_copy_kind(int k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[memcpy DtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "[memcpy PtoP]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "[memcpy HtoH]";
    default: return "[memcpy]";
    }
}

static void kp_add(uint64_t start, uint64_t end, const char *name, int kind, int graph)
{
    kp_rec *r = kp_grow(kp_recs, &kp_caprecs, kp_nrecs + 1, sizeof *kp_recs);
    uint32_t id = r ? kp_intern(name) : UINT32_MAX;
    if (r) kp_recs = r;
    if (id == UINT32_MAX) {
        kp_dropped++;
        return;
    }
    kp_recs[kp_nrecs++] = (kp_rec){ start, end, id, (uint8_t)kind, (uint8_t)graph };
}

static void CUPTIAPI kp_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    CUpti_Activity *a = NULL;
    pthread_mutex_lock(&kp_lock);
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        switch (a->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const kp_kernel_rec *k = (const kp_kernel_rec *)a;
            kp_add(k->start, k->end, k->name, KP_KERNEL, k->graphId != 0);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const kp_memcpy_rec *m = (const kp_memcpy_rec *)a;
            kp_add(m->start, m->end, kp_copy_kind(m->copyKind), KP_MEMCPY, m->graphId != 0);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const kp_memset_rec *m = (const kp_memset_rec *)a;
            kp_add(m->start, m->end, "[memset]", KP_MEMSET, m->graphId != 0);
            break;
        }
        default: break;
        }
    }
    size_t d = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &d) == CUPTI_SUCCESS) kp_dropped += d;
    pthread_mutex_unlock(&kp_lock);
    (void)size;
    free(buffer);
}

/* ------------------------------------------------------------------------------------------ names */

typedef char *(*kp_demangle_fn)(const char *, char *, size_t *, int *);

static char *kp_shorten(const char *raw)
{
    static kp_demangle_fn dem;
    static int looked;
    if (!looked) {
        looked = 1;
        dem = (kp_demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
        if (!dem) {
            void *h = dlopen("libstdc++.so.6", RTLD_LAZY);
            if (h) dem = (kp_demangle_fn)dlsym(h, "__cxa_demangle");
        }
    }
    int st = -1;
    char *d = (dem && raw[0] == '_' && raw[1] == 'Z') ? dem(raw, NULL, NULL, &st) : NULL;
    char *s = (d && st == 0) ? d : strdup(raw);
    if (s != d) free(d);
    if (!s) return NULL;
    if (strncmp(s, "void ", 5) == 0) memmove(s, s + 5, strlen(s + 5) + 1);
    for (char *a; (a = strstr(s, "(anonymous namespace)::"));) memmove(a, a + 23, strlen(a + 23) + 1);
    /* cut the parameter list: the first '(' outside template arguments that is not "(anonymous namespace)" */
    int depth = 0;
    for (char *p = s; *p; p++) {
        if (*p == '<') depth++;
        else if (*p == '>' && depth > 0) depth--;
        else if (*p == '(' && depth == 0 && strncmp(p, "(anonymous namespace)", 21) != 0) {
            *p = '\0';
            break;
        }
    }
    return s;
}

static const char *kp_show(uint32_t id)
{
    kp_name *n = &kp_names[id];
    if (!n->show) n->show = kp_shorten(n->raw);
    return n->show ? n->show : n->raw;
}

/* ------------------------------------------------------------------------------------------ groups */

enum { G_GEMM, G_ATTN, G_NORM, G_ELEM, G_XENT, G_OPTIM, G_COPY, G_OTHER, G_N };
static const char *const kp_group_names[G_N] = { "GEMM", "attention", "norm", "elementwise", "cross-entropy",
                                                 "optimizer", "memcpy/memset", "other" };

static int kp_has(const char *s, const char *const *words)
{
    for (; *words; words++)
        if (strstr(s, *words)) return 1;
    return 0;
}

/* The group of a kernel from its name (lowercase substrings, first match wins). */
static int kp_group(const char *name, int kind)
{
    static const char *const gemm[] = { "gemm", "cutlass", "cublas", "nvjet", "xmma", "splitk", "matmul", NULL };
    static const char *const attn[] = { "attention", "attn", "flash", "fmha", "sdpa", "kv_append", "kv_attend", NULL };
    static const char *const xent[] = { "cross_entropy", "crossentropy", "ce_forward", "ce_backward", "ce_rows", "xent",
                                        "lm_head", "logsumexp", "nll", NULL };
    static const char *const optim[] = { "adam", "sgd", "lamb", "optim", "sumsq", "clip", "multi_tensor", NULL };
    static const char *const norm[] = { "norm", NULL };
    static const char *const elem[] = { "gelu", "swiglu", "silu", "bias", "binary", "axpby", "cast", "copy", "fill",
                                        "scale", "elementwise", "vectorized", "unrolled", "zero", "rand", "dropout",
                                        "add", "mul", NULL };
    if (kind != KP_KERNEL) return G_COPY;
    char low[512];
    size_t i = 0;
    for (; name[i] && i < sizeof low - 1; i++) low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    low[i] = '\0';
    if (kp_has(low, gemm)) return G_GEMM;
    /* the function's own name (after the last "::" before its template arguments): att<digit> or att_ */
    const char *base = low, *lt = strchr(low, '<');
    for (const char *p = low; *p && (!lt || p < lt); p++)
        if (p[0] == ':' && p[1] == ':') base = p + 2;
    if (kp_has(low, attn) || (strncmp(base, "att", 3) == 0 && ((base[3] >= '0' && base[3] <= '9') || base[3] == '_')))
        return G_ATTN;
    if (kp_has(low, xent)) return G_XENT;
    if (kp_has(low, optim)) return G_OPTIM;
    if (kp_has(low, norm)) return G_NORM;
    if (kp_has(low, elem)) return G_ELEM;
    return G_OTHER;
}

/* ------------------------------------------------------------------------------------------ report */

typedef struct {
    const char *name; /* shown name (the key) */
    int kind;
    double calls, ns;
} kp_row;

static int kp_by_start(const void *a, const void *b)
{
    const kp_rec *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int kp_by_ns(const void *a, const void *b)
{
    const kp_row *x = a, *y = b;
    if (x->ns != y->ns) return x->ns > y->ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int kp_by_name(const void *a, const void *b)
{
    const kp_row *x = a, *y = b;
    return strcmp(x->name, y->name);
}

static long kp_env_long(const char *name, long dflt, long min)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < min) {
        kp_warn("%s=%s is not an integer >= %ld; using %ld", name, v, min, dflt);
        return dflt;
    }
    return x;
}

/* "FILE" with %p replaced by the process id */
static char *kp_path(const char *tmpl)
{
    size_t n = 10 * strlen(tmpl) + 32; /* each %p (2 characters) becomes at most 20 */
    char *out = malloc(n), *o = out;
    if (!out) return NULL;
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            o += sprintf(o, "%ld", (long)getpid());
            p++;
        } else
            *o++ = *p;
    }
    *o = '\0';
    return out;
}

/* Rows of one run merged by shown name; *nrows set. */
static kp_row *kp_merge(kp_row *rows, size_t n, size_t *nout)
{
    qsort(rows, n, sizeof *rows, kp_by_name);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && strcmp(rows[m - 1].name, rows[i].name) == 0) {
            rows[m - 1].calls += rows[i].calls, rows[m - 1].ns += rows[i].ns;
        } else
            rows[m++] = rows[i];
    }
    *nout = m;
    return rows;
}

/* Subtracts a KPROF_RAW file from rows (growing them with the names only it has), span and busy: the whole file
 * is checked first, so a bad one changes nothing. 0 on success. */
static int kp_subtract(const char *path, kp_row **rows, size_t *n, double *span, double *busy)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        kp_warn("KPROF_BASELINE: cannot open %s", path);
        return -1;
    }
    char line[8192];
    size_t cap = *n;
    int bad = 0;
    for (int apply = 0; apply < 2 && !bad; apply++) {
        rewind(f);
        for (int lineno = 1; !bad && fgets(line, sizeof line, f); lineno++) {
            line[strcspn(line, "\n")] = '\0';
            double v, calls, ns;
            int kind, off = 0;
            if (lineno == 1) {
                if (strcmp(line, "# kprof raw 1") != 0) {
                    kp_warn("KPROF_BASELINE: %s is not a KPROF_RAW file (first line '%s')", path, line);
                    bad = 1;
                }
            } else if (sscanf(line, "span_ns %lf", &v) == 1) {
                if (apply) *span -= v;
            } else if (sscanf(line, "busy_ns %lf", &v) == 1) {
                if (apply) *busy -= v;
            } else if (sscanf(line, "%d\t%lf\t%lf\t%n", &kind, &calls, &ns, &off) != 3 || off == 0) {
                kp_warn("KPROF_BASELINE: %s:%d: not 'kind<TAB>calls<TAB>ns<TAB>name'", path, lineno);
                bad = 1;
            } else if (apply) {
                const char *name = line + off;
                size_t i = 0;
                while (i < *n && strcmp((*rows)[i].name, name) != 0) i++;
                if (i == *n) {
                    kp_row *r = kp_grow(*rows, &cap, *n + 1, sizeof **rows);
                    char *copy = r ? strdup(name) : NULL;
                    if (r) *rows = r;
                    if (!copy) {
                        kp_warn("KPROF_BASELINE: out of memory; '%s' not subtracted", name);
                        continue;
                    }
                    (*rows)[(*n)++] = (kp_row){ copy, kind, 0, 0 };
                }
                (*rows)[i].calls -= calls, (*rows)[i].ns -= ns;
            }
        }
    }
    fclose(f);
    return bad ? -1 : 0;
}

static void kp_fmt_calls(char *buf, size_t n, double c)
{
    if (c == (double)(long long)c) snprintf(buf, n, "%lld", (long long)c);
    else snprintf(buf, n, "%.2f", c);
}

static void kp_report(void)
{
    pthread_mutex_lock(&kp_lock);
    size_t nrec = kp_nrecs;
    if (nrec == 0) {
        pthread_mutex_unlock(&kp_lock);
        return; /* a process that ran no device work (a wrapper shell under LD_PRELOAD) writes nothing */
    }
    qsort(kp_recs, nrec, sizeof *kp_recs, kp_by_start);

    long skip = kp_env_long("KPROF_SKIP_FIRST", 0, 0), delay = kp_env_long("KPROF_DELAY_MS", 0, 0);
    long steps = kp_env_long("KPROF_STEPS", 1, 1), top = kp_env_long("KPROF_TOP", 40, 0);
    long width = kp_env_long("KPROF_WIDTH", 90, 20);
    uint64_t cut = delay ? kp_t0 + (uint64_t)delay * 1000000u : 0;
    size_t first = 0;
    if (skip > 0) {
        long seen = 0;
        size_t i = 0;
        for (; i < nrec; i++)
            if (kp_recs[i].kind == KP_KERNEL && seen++ == skip) break;
        if (i == nrec) kp_warn("KPROF_SKIP_FIRST=%ld drops every one of the %ld kernels recorded", skip, seen);
        if (i < nrec && kp_recs[i].start > cut) cut = kp_recs[i].start;
        if (i == nrec) cut = UINT64_MAX;
    }
    while (first < nrec && kp_recs[first].start < cut) first++;

    /* per name, span, busy time (the union of the intervals), graph kernels */
    size_t nn = kp_nnames;
    kp_row *rows = calloc(nn ? nn : 1, sizeof *rows);
    uint64_t lo = UINT64_MAX, hi = 0, busy = 0, cur_s = 0, cur_e = 0, graphk = 0, kernels = 0;
    for (size_t i = 0; rows && i < nn; i++) rows[i].name = kp_show((uint32_t)i);
    for (size_t i = first; rows && i < nrec; i++) {
        const kp_rec *r = &kp_recs[i];
        rows[r->name].calls += 1, rows[r->name].ns += (double)(r->end - r->start), rows[r->name].kind = r->kind;
        if (r->kind == KP_KERNEL) kernels++, graphk += r->graph;
        if (r->start < lo) lo = r->start;
        if (r->end > hi) hi = r->end;
        if (r->start > cur_e) {
            busy += cur_e - cur_s;
            cur_s = r->start, cur_e = r->end;
        } else if (r->end > cur_e)
            cur_e = r->end;
    }
    busy += cur_e - cur_s;
    uint64_t dropped = kp_dropped;
    pthread_mutex_unlock(&kp_lock);
    if (!rows) {
        kp_warn("out of memory for the report");
        return;
    }
    size_t nr = 0;
    for (size_t i = 0; i < nn; i++)
        if (rows[i].calls > 0) rows[nr++] = rows[i];
    rows = kp_merge(rows, nr, &nr);
    double span = hi > lo ? (double)(hi - lo) : 0, busyd = (double)busy;

    const char *rawp = getenv("KPROF_RAW");
    if (rawp && *rawp) {
        char *p = kp_path(rawp);
        FILE *f = p ? fopen(p, "w") : NULL;
        if (!f) kp_warn("KPROF_RAW: cannot write %s", p ? p : rawp);
        else {
            fprintf(f, "# kprof raw 1\nspan_ns %.0f\nbusy_ns %.0f\n", span, busyd);
            for (size_t i = 0; i < nr; i++) fprintf(f, "%d\t%.0f\t%.0f\t%s\n", rows[i].kind, rows[i].calls, rows[i].ns, rows[i].name);
            fclose(f);
        }
        free(p);
    }
    const char *base = getenv("KPROF_BASELINE");
    int based = 0;
    if (base && *base) {
        if (kp_subtract(base, &rows, &nr, &span, &busyd) == 0) based = 1;
        else kp_warn("the table below is of this run alone (no baseline subtracted)");
    }

    double total = 0, gtot[G_N] = { 0 }, gcalls[G_N] = { 0 }, kcalls = 0;
    int negative = 0;
    size_t kept = 0; /* rows whose calls the baseline cancels are left out: what time is left is run-to-run noise */
    for (size_t i = 0; i < nr; i++)
        if (rows[i].calls != 0) rows[kept++] = rows[i];
    nr = kept;
    for (size_t i = 0; i < nr; i++) {
        rows[i].calls /= (double)steps, rows[i].ns /= (double)steps;
        if (rows[i].calls < 0 || rows[i].ns < 0) negative = 1;
        int g = kp_group(rows[i].name, rows[i].kind);
        total += rows[i].ns, gtot[g] += rows[i].ns, gcalls[g] += rows[i].calls;
        if (rows[i].kind == KP_KERNEL) kcalls += rows[i].calls;
    }
    span /= (double)steps, busyd /= (double)steps;
    qsort(rows, nr, sizeof *rows, kp_by_ns);

    const char *outp = getenv("KPROF_OUT");
    char *path = outp && *outp ? kp_path(outp) : NULL;
    FILE *out = path ? fopen(path, "w") : stderr;
    if (!out) {
        kp_warn("KPROF_OUT: cannot write %s; writing to stderr", path);
        out = stderr;
    }
    const char *per = steps > 1 || based ? " per step" : "";
    fprintf(out, "kprof: %zu device activities recorded, %zu kept (%" PRIu64 " kernels, %" PRIu64 " of them in CUDA graphs)",
            nrec, nrec - first, kernels, graphk);
    if (first) fprintf(out, "; dropped the first %zu (KPROF_SKIP_FIRST=%ld, KPROF_DELAY_MS=%ld)", first, skip, delay);
    fputc('\n', out);
    if (dropped) fprintf(out, "kprof: WARNING: CUPTI dropped %" PRIu64 " records; totals are low\n", dropped);
    if (based) fprintf(out, "kprof: minus the baseline run %s, ", base);
    else fprintf(out, "kprof: ");
    fprintf(out, "divided by %ld step%s\n", steps, steps == 1 ? "" : "s");
    if (negative) fprintf(out, "kprof: WARNING: rows below zero: the baseline run did work this run did not\n");
    char calls[32];
    kp_fmt_calls(calls, sizeof calls, kcalls);
    fprintf(out, "GPU time%s %.3f ms in %s kernel calls; wall-clock span %.3f ms, GPU busy %.3f ms (%.1f%% of the span)\n\n",
            per, total / 1e6, calls, span / 1e6, busyd / 1e6, span > 0 ? 100.0 * busyd / span : 0.0);
    fprintf(out, "%10s %6s %9s %10s  %-13s %s\n", "total ms", "%", "calls", "mean us", "group", "kernel");
    size_t shown = top > 0 && (size_t)top < nr ? (size_t)top : nr;
    for (size_t i = 0; i < shown; i++) {
        const kp_row *r = &rows[i];
        kp_fmt_calls(calls, sizeof calls, r->calls);
        int w = (int)strlen(r->name) > width ? (int)width - 3 : (int)strlen(r->name);
        fprintf(out, "%10.3f %6.2f %9s %10.2f  %-13s %.*s%s\n", r->ns / 1e6, total > 0 ? 100.0 * r->ns / total : 0.0,
                calls, r->calls != 0 ? r->ns / r->calls / 1e3 : 0.0, kp_group_names[kp_group(r->name, r->kind)], w,
                r->name, w < (int)strlen(r->name) ? "..." : "");
    }
    if (shown < nr) {
        double rest = 0, rc = 0;
        for (size_t i = shown; i < nr; i++) rest += rows[i].ns, rc += rows[i].calls;
        kp_fmt_calls(calls, sizeof calls, rc);
        fprintf(out, "%10.3f %6.2f %9s %10s  %-13s (%zu more kernels; KPROF_TOP=0 lists all)\n", rest / 1e6,
                total > 0 ? 100.0 * rest / total : 0.0, calls, "", "", nr - shown);
    }
    fprintf(out, "\n%10s %6s %9s  %s\n", "total ms", "%", "calls", "group");
    int order[G_N];
    for (int g = 0; g < G_N; g++) order[g] = g;
    for (int a = 1; a < G_N; a++) /* groups by total time */
        for (int b = a; b > 0 && gtot[order[b]] > gtot[order[b - 1]]; b--) {
            int x = order[b];
            order[b] = order[b - 1], order[b - 1] = x;
        }
    for (int o = 0; o < G_N; o++) {
        int g = order[o];
        if (gcalls[g] == 0 && gtot[g] == 0) continue;
        kp_fmt_calls(calls, sizeof calls, gcalls[g]);
        fprintf(out, "%10.3f %6.2f %9s  %s\n", gtot[g] / 1e6, total > 0 ? 100.0 * gtot[g] / total : 0.0, calls,
                kp_group_names[g]);
    }
    if (out != stderr) fclose(out);
    else fflush(out);
    free(path);
    free(rows);
}

/* ------------------------------------------------------------------------------------------ start, stop */

static void kp_finish(void)
{
    if (!kp_started || kp_done) return;
    kp_done = 1;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    kp_report();
}

/* Records are flushed when a context is about to go away (a program that destroys its contexts before exit). */
static void CUPTIAPI kp_callback(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void *data)
{
    (void)ud, (void)data;
    if (dom == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

static int kp_check(CUptiResult r, const char *what)
{
    if (r == CUPTI_SUCCESS) return 0;
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    kp_warn("%s failed: %s", what, s ? s : "unknown CUPTI error");
    return -1;
}

static int kp_start(void)
{
    if (kp_started) return 1;
    long mb = kp_env_long("KPROF_BUFFER_MB", 8, 1);
    kp_bufsize = (size_t)mb << 20;
    if (kp_check(cuptiActivityRegisterCallbacks(kp_buffer_requested, kp_buffer_completed), "cuptiActivityRegisterCallbacks"))
        return 0;
    if (kp_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records")) return 0;
    kp_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enabling memcpy records");
    kp_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enabling memset records");
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, kp_callback, NULL) == CUPTI_SUCCESS)
        cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    cuptiGetTimestamp(&kp_t0);
    kp_started = 1;
    return 1;
}

/* The entry point the CUDA driver calls for CUDA_INJECTION64_PATH. */
int InitializeInjection(void)
{
    return kp_start();
}

/* Under LD_PRELOAD: start when loaded. Under CUDA_INJECTION64_PATH the driver calls InitializeInjection. */
__attribute__((constructor)) static void kp_ctor(void)
{
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    if (!inj || !*inj) kp_start();
}

/* At unload without the atexit handler (no buffer was ever asked for): no CUPTI call, only what is held here. */
__attribute__((destructor)) static void kp_dtor(void)
{
    if (kp_done || kp_nrecs == 0) return;
    kp_done = 1;
    kp_report();
}
