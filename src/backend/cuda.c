/* cuda.c — the CUDA backend: devices, caching allocator, streams, graph capture and kernel dispatch. */
#include "backend/cuda_impl.h"
#include "core/debug.h"

#include "kernels.h" /* kernels/ is not on the C include path */

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

_Static_assert((int)TGK_REDUCE_SUM == (int)TG_REDUCE_SUM && (int)TGK_REDUCE_MAX_ABS == (int)TG_REDUCE_MAX_ABS &&
                   (int)TGK_REDUCE_MAX_ABS_DIFF == (int)TG_REDUCE_MAX_ABS_DIFF &&
                   (int)TGK_REDUCE_SUMSQ == (int)TG_REDUCE_SUMSQ,
               "kernels.h reduce codes follow backend.h");
_Static_assert((int)TGK_RAND_UNIFORM == (int)TG_RAND_UNIFORM && (int)TGK_RAND_NORMAL == (int)TG_RAND_NORMAL,
               "kernels.h rand codes follow backend.h");

/* ------------------------------------------------------------------ errors */

/* "src/backend/cuda.c" rather than the build's relative path to it. */
static const char *short_path(const char *file)
{
    const char *p = strstr(file, "src/");
    return p ? p : file;
}

tg_status tg_cuda_fail(cudaError_t e, const char *file, int line, const char *expr)
{
    (void)cudaGetLastError(); /* a non-sticky error must not fail the next unrelated call */
    return tg_error(TG_EDEVICE, "%s:%d: %s: %s (%s)", short_path(file), line, expr, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

tg_status tg_cublas_fail(cublasStatus_t e, const char *file, int line, const char *expr)
{
    return tg_error(TG_EDEVICE, "%s:%d: %s: %s", short_path(file), line, expr, cublasGetStatusString(e));
}

/* ------------------------------------------------------------------ devices */

struct cuda_block {
    void *ptr;
    size_t size; /* rounded to its size class */
    int cls;
    struct cuda_block *next; /* in a free list or a live-map bucket */
};

/* Memory freed while a stream captures (cudaFree is not capturable). */
struct cuda_deferred {
    void *ptr;
    struct cuda_deferred *next;
};

/* 8 size classes per power of two (at most 12.5% rounding), from 512 bytes. */
#define NCLASS 448
#define LIVE_BUCKETS 4096

struct cuda_dev {
    pthread_mutex_t lock;
    cublasLtHandle_t lt; /* NULL until the first GEMM */
    struct cuda_block *free_list[NCLASS];
    struct cuda_block *live[LIVE_BUCKETS]; /* handed-out blocks by address */
    size_t in_use, cached;
    uint64_t mallocs;
    struct cuda_deferred *deferred;
    struct tg_cuda_scratch *scratches; /* of live streams, by cudaStream_t */
};

static struct cuda_dev devs[TG_CUDA_MAX_DEVICES] = {[0 ... TG_CUDA_MAX_DEVICES - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER}};

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int ndevices;
static int alloc_direct; /* TG_DEBUG_ALLOC_DIRECT: no caching, for memory checkers */

static void probe(void)
{
    int n = 0;
    /* No driver or no GPU is a machine without CUDA devices, not an error. */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    ndevices = n > TG_CUDA_MAX_DEVICES ? TG_CUDA_MAX_DEVICES : n;
    alloc_direct = tg_debug_get(TG_DEBUG_ALLOC_DIRECT);
}

static int cuda_device_count(void)
{
    pthread_once(&probe_once, probe);
    return ndevices;
}

static tg_status use_device(int index)
{
    TG_CUDA_TRY(cudaSetDevice(index));
    return TG_OK;
}

static tg_status cuda_device_describe(int index, char *name, size_t n, size_t *total)
{
    struct cudaDeviceProp p;
    TG_CUDA_TRY(cudaGetDeviceProperties(&p, index));
    if (name && n) snprintf(name, n, "%s", p.name);
    if (total) *total = p.totalGlobalMem;
    return TG_OK;
}

tg_status tg_cuda_lt_handle(int dev, cublasLtHandle_t *out)
{
    struct cuda_dev *d = &devs[dev];
    tg_status st = TG_OK;
    pthread_mutex_lock(&d->lock);
    if (!d->lt) {
        cublasStatus_t e = cublasLtCreate(&d->lt);
        if (e != CUBLAS_STATUS_SUCCESS) {
            d->lt = NULL;
            st = tg_cublas_fail(e, __FILE__, __LINE__, "cublasLtCreate(&d->lt)");
        }
    }
    *out = d->lt;
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* ------------------------------------------------------------------ caching allocator
 * Freed blocks go to a free list of their size class and are handed out
 * again without cudaMalloc: once warm, allocation never touches the driver.
 * Blocks are reused in host order: a block freed while kernels on one stream
 * still use it must not be handed to work on another stream unless the
 * streams are ordered (events), as with any non-stream-aware cache. */

static size_t size_class(size_t bytes, int *cls)
{
    if (bytes <= 512) {
        *cls = 0;
        return 512;
    }
    int e = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^e < bytes <= 2^(e+1) */
    size_t step = ((size_t)1 << e) / 8;
    size_t rounded = (bytes + step - 1) / step * step;
    *cls = 1 + (e - 9) * 8 + (int)(rounded / step - 9);
    return rounded;
}

static size_t live_hash(const void *p) { return ((uintptr_t)p >> 8) % LIVE_BUCKETS; }

/* Frees now, or after the capture when a stream of the device captures. Lock held. */
static void release_locked(struct cuda_dev *d, int index, void *ptr)
{
    if (tg_device_capturing((tg_device){TG_CUDA, index})) {
        struct cuda_deferred *q = malloc(sizeof *q);
        TG_ASSERT(q);
        q->ptr = ptr;
        q->next = d->deferred;
        d->deferred = q;
        return;
    }
    while (d->deferred) {
        struct cuda_deferred *q = d->deferred;
        d->deferred = q->next;
        (void)cudaFree(q->ptr);
        free(q);
    }
    if (ptr) (void)cudaFree(ptr);
}

/* Gives every cached block back to the driver (before retrying a failed cudaMalloc). */
static void trim_locked(struct cuda_dev *d, int index)
{
    for (int c = 0; c < NCLASS; c++) {
        while (d->free_list[c]) {
            struct cuda_block *b = d->free_list[c];
            d->free_list[c] = b->next;
            d->cached -= b->size;
            release_locked(d, index, b->ptr);
            free(b);
        }
    }
}

static tg_status cuda_alloc(int index, size_t bytes, void **out)
{
    *out = NULL;
    struct cuda_dev *d = &devs[index];
    int cls;
    size_t size = size_class(bytes ? bytes : 1, &cls);
    if (alloc_direct) size = bytes ? bytes : 1;
    pthread_mutex_lock(&d->lock);
    struct cuda_block *b = alloc_direct ? NULL : d->free_list[cls];
    if (b) {
        d->free_list[cls] = b->next;
        d->cached -= b->size;
    } else {
        void *p = NULL;
        /* only the driver needs the current device: a cached block does not */
        cudaError_t e = cudaSetDevice(index);
        if (e == cudaSuccess) e = cudaMalloc(&p, size);
        if (e == cudaErrorMemoryAllocation && d->cached && !tg_device_capturing((tg_device){TG_CUDA, index})) {
            (void)cudaGetLastError();
            trim_locked(d, index);
            e = cudaMalloc(&p, size);
        }
        if (e != cudaSuccess) {
            size_t used = d->in_use, cached = d->cached;
            pthread_mutex_unlock(&d->lock);
            if (e == cudaErrorMemoryAllocation) {
                (void)cudaGetLastError();
                return tg_error(TG_ENOMEM, "cuda:%d: out of memory allocating %zu bytes (%zu in use, %zu cached)",
                                index, bytes, used, cached);
            }
            return tg_cuda_fail(e, __FILE__, __LINE__, "cudaSetDevice + cudaMalloc(&p, size)");
        }
        d->mallocs++;
        b = malloc(sizeof *b);
        TG_ASSERT(b);
        *b = (struct cuda_block){.ptr = p, .size = size, .cls = cls};
    }
    size_t h = live_hash(b->ptr);
    b->next = d->live[h];
    d->live[h] = b;
    d->in_use += b->size;
    *out = b->ptr;
    pthread_mutex_unlock(&d->lock);
    return TG_OK;
}

static void cuda_free(int index, void *ptr)
{
    if (!ptr) return;
    struct cuda_dev *d = &devs[index];
    pthread_mutex_lock(&d->lock);
    struct cuda_block **pp = &d->live[live_hash(ptr)];
    while (*pp && (*pp)->ptr != ptr) pp = &(*pp)->next;
    TG_ASSERT(*pp); /* freeing memory this allocator did not hand out */
    struct cuda_block *b = *pp;
    *pp = b->next;
    d->in_use -= b->size;
    if (alloc_direct) {
        release_locked(d, index, b->ptr);
        free(b);
    } else {
        b->next = d->free_list[b->cls];
        d->free_list[b->cls] = b;
        d->cached += b->size;
    }
    pthread_mutex_unlock(&d->lock);
}

void tg_cuda_alloc_stats(int dev, size_t *in_use, size_t *cached, uint64_t *mallocs)
{
    struct cuda_dev *d = &devs[dev];
    pthread_mutex_lock(&d->lock);
    if (in_use) *in_use = d->in_use;
    if (cached) *cached = d->cached;
    if (mallocs) *mallocs = d->mallocs;
    pthread_mutex_unlock(&d->lock);
}

/* ------------------------------------------------------------------ per-stream scratch */

static struct tg_cuda_scratch *scratch_new_locked(struct cuda_dev *d, int index, cudaStream_t st)
{
    struct tg_cuda_scratch *x = calloc(1, sizeof *x);
    TG_ASSERT(x);
    x->stream = st;
    x->dev = index;
    x->refs = 1; /* the stream's */
    x->next = d->scratches;
    d->scratches = x;
    return x;
}

static void scratch_release_locked(struct cuda_dev *d, struct tg_cuda_scratch *x)
{
    if (--x->refs > 0) return;
    release_locked(d, x->dev, x->gemm_ws);
    release_locked(d, x->dev, x->reduce_parts);
    release_locked(d, x->dev, x->nn_scratch);
    free(x);
}

tg_status tg_cuda_scratch_of(tg_stream *s, struct tg_cuda_scratch **out)
{
    struct cuda_dev *d = &devs[s->dev.index];
    cudaStream_t st = tg_cuda_stream(s);
    pthread_mutex_lock(&d->lock);
    struct tg_cuda_scratch *x = d->scratches;
    while (x && x->stream != st) x = x->next;
    if (!x) x = scratch_new_locked(d, s->dev.index, st); /* a stream not made by stream_init */
    pthread_mutex_unlock(&d->lock);
    *out = x;
    return TG_OK;
}

/* Allocates *buf (bytes) once, with cudaMalloc: legal during a relaxed capture. */
static tg_status scratch_buffer(tg_stream *s, void **buf, size_t bytes)
{
    struct cuda_dev *d = &devs[s->dev.index];
    tg_status st = TG_OK;
    pthread_mutex_lock(&d->lock);
    if (!*buf) {
        cudaError_t e = cudaMalloc(buf, bytes);
        if (e != cudaSuccess) {
            *buf = NULL;
            st = tg_cuda_fail(e, __FILE__, __LINE__, "cudaMalloc(buf, bytes)");
        }
    }
    pthread_mutex_unlock(&d->lock);
    return st;
}

tg_status tg_cuda_gemm_workspace(tg_stream *s, void **ws, size_t *bytes)
{
    struct tg_cuda_scratch *x;
    TG_TRY(tg_cuda_scratch_of(s, &x));
    TG_TRY(scratch_buffer(s, &x->gemm_ws, TG_CUDA_GEMM_WORKSPACE));
    *ws = x->gemm_ws;
    *bytes = TG_CUDA_GEMM_WORKSPACE;
    return TG_OK;
}

tg_status tg_cuda_reduce_scratch(tg_stream *s, double **parts)
{
    struct tg_cuda_scratch *x;
    TG_TRY(tg_cuda_scratch_of(s, &x));
    TG_TRY(scratch_buffer(s, (void **)&x->reduce_parts, TGK_REDUCE_BLOCKS * sizeof(double)));
    *parts = x->reduce_parts;
    return TG_OK;
}

tg_status tg_cuda_nn_scratch(tg_stream *s, void **buf, size_t *bytes)
{
    struct tg_cuda_scratch *x;
    TG_TRY(tg_cuda_scratch_of(s, &x));
    TG_TRY(scratch_buffer(s, &x->nn_scratch, TG_CUDA_NN_SCRATCH));
    *buf = x->nn_scratch;
    *bytes = TG_CUDA_NN_SCRATCH;
    return TG_OK;
}

/* ------------------------------------------------------------------ copies, streams, graphs */

static tg_status cuda_memcpy(tg_stream *s, void *dst, const void *src, size_t bytes, tg_memcpy_kind kind)
{
    static const enum cudaMemcpyKind kinds[] = {
        [TG_H2D] = cudaMemcpyHostToDevice, [TG_D2H] = cudaMemcpyDeviceToHost, [TG_D2D] = cudaMemcpyDeviceToDevice};
    if (bytes == 0) return TG_OK;
    cudaStream_t st = tg_cuda_stream(s);
    TG_TRY(use_device(s->dev.index));
    TG_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], st));
    if (kind != TG_D2D) TG_CUDA_TRY(cudaStreamSynchronize(st)); /* the host buffer is the caller's again */
    return TG_OK;
}

static tg_status cuda_stream_init(tg_stream *s)
{
    cudaStream_t st;
    TG_TRY(use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    s->impl = st;
    struct cuda_dev *d = &devs[s->dev.index];
    pthread_mutex_lock(&d->lock);
    scratch_new_locked(d, s->dev.index, st);
    pthread_mutex_unlock(&d->lock);
    return TG_OK;
}

static void cuda_stream_destroy(tg_stream *s)
{
    cudaStream_t st = tg_cuda_stream(s);
    if (!st) return;
    (void)cudaSetDevice(s->dev.index);
    (void)cudaStreamSynchronize(st);
    (void)cudaStreamDestroy(st);
    (void)cudaGetLastError();
    struct cuda_dev *d = &devs[s->dev.index];
    pthread_mutex_lock(&d->lock);
    /* Unlink first: the driver may hand the same handle to the next stream. */
    for (struct tg_cuda_scratch **pp = &d->scratches; *pp; pp = &(*pp)->next) {
        if ((*pp)->stream == st) {
            struct tg_cuda_scratch *x = *pp;
            *pp = x->next;
            scratch_release_locked(d, x);
            break;
        }
    }
    pthread_mutex_unlock(&d->lock);
    s->impl = NULL;
}

static tg_status cuda_stream_sync(tg_stream *s)
{
    TG_TRY(use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamSynchronize(tg_cuda_stream(s)));
    return TG_OK;
}

/* Relaxed mode: the pools' block allocations (cudaMalloc through cuda_alloc)
 * and the lazy scratch buffers stay legal while this thread captures; in the
 * global or thread-local modes cudaMalloc counts as "potentially unsafe" and
 * may invalidate the capture. Host transfers and syncs are refused by the
 * core (TG_ECAPTURE) before they reach CUDA. */
static tg_status cuda_capture_begin(tg_stream *s)
{
    TG_TRY(use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamBeginCapture(tg_cuda_stream(s), cudaStreamCaptureModeRelaxed));
    return TG_OK;
}

static tg_status cuda_capture_end(tg_stream *s, tg_graph *g)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    size_t nodes = 0;
    TG_TRY(use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamEndCapture(tg_cuda_stream(s), &graph));
    cudaError_t e = cudaGraphGetNodes(graph, NULL, &nodes);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph); /* the executable graph is independent of it */
    if (e != cudaSuccess) return tg_cuda_fail(e, __FILE__, __LINE__, "cudaGraphInstantiate(&exec, graph, 0)");
    struct tg_cuda_graph *cg = malloc(sizeof *cg);
    TG_ASSERT(cg);
    cg->exec = exec;
    TG_TRY(tg_cuda_scratch_of(s, &cg->scratch));
    struct cuda_dev *d = &devs[s->dev.index];
    pthread_mutex_lock(&d->lock);
    cg->scratch->refs++;
    pthread_mutex_unlock(&d->lock);
    g->impl = cg;
    g->ncmds = nodes;
    return TG_OK;
}

static tg_status cuda_graph_replay(tg_graph *g, tg_stream *s)
{
    struct tg_cuda_graph *cg = g->impl;
    if (!cg) return tg_error(TG_ESTATE, "cuda graph replay: the graph holds no captured work");
    TG_TRY(use_device(s->dev.index));
    TG_CUDA_TRY(cudaGraphLaunch(cg->exec, tg_cuda_stream(s)));
    return TG_OK;
}

static void cuda_graph_destroy(tg_graph *g)
{
    struct tg_cuda_graph *cg = g->impl;
    if (!cg) return;
    (void)cudaSetDevice(g->dev.index);
    (void)cudaGraphExecDestroy(cg->exec);
    struct cuda_dev *d = &devs[g->dev.index];
    pthread_mutex_lock(&d->lock);
    scratch_release_locked(d, cg->scratch);
    pthread_mutex_unlock(&d->lock);
    free(cg);
    g->impl = NULL;
}

/* ------------------------------------------------------------------ events */

static tg_status cuda_event_init(tg_event *e)
{
    cudaEvent_t ev;
    TG_TRY(use_device(e->dev.index));
    /* timing costs a timestamp write per record: only where elapsed is wanted */
    TG_CUDA_TRY(cudaEventCreateWithFlags(&ev, e->timing ? cudaEventDefault : cudaEventDisableTiming));
    e->impl = ev;
    return TG_OK;
}

static void cuda_event_destroy(tg_event *e)
{
    if (!e->impl) return;
    (void)cudaSetDevice(e->dev.index);
    (void)cudaEventDestroy((cudaEvent_t)e->impl);
    (void)cudaGetLastError();
    e->impl = NULL;
}

static tg_status cuda_event_record(tg_event *e, tg_stream *s)
{
    TG_TRY(use_device(s->dev.index));
    TG_CUDA_TRY(cudaEventRecord((cudaEvent_t)e->impl, tg_cuda_stream(s)));
    e->recorded = 1;
    return TG_OK;
}

static tg_status cuda_stream_wait_event(tg_stream *s, tg_event *e)
{
    TG_TRY(use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamWaitEvent(tg_cuda_stream(s), (cudaEvent_t)e->impl, 0));
    return TG_OK;
}

static tg_status cuda_event_query(tg_event *e, int *done)
{
    cudaError_t r = cudaEventQuery((cudaEvent_t)e->impl);
    *done = r == cudaSuccess;
    if (r == cudaSuccess || r == cudaErrorNotReady) return TG_OK;
    return tg_cuda_fail(r, __FILE__, __LINE__, "cudaEventQuery");
}

static tg_status cuda_event_sync(tg_event *e)
{
    TG_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)e->impl));
    return TG_OK;
}

static tg_status cuda_event_elapsed(tg_event *a, tg_event *b, double *ms)
{
    float f = 0;
    TG_TRY(use_device(a->dev.index));
    /* never recorded: said without asking CUDA (whose error a sanitizer would report as an API error) */
    if (!a->recorded || !b->recorded)
        return tg_error(TG_ESTATE, "event elapsed time: the %s event was never recorded (or its graph never replayed)",
                        !a->recorded ? "start" : "end");
    cudaError_t e = cudaEventElapsedTime(&f, (cudaEvent_t)a->impl, (cudaEvent_t)b->impl);
    /* the CPU backend's errors for the same misuse (not a device fault) */
    if (e == cudaErrorInvalidResourceHandle) {
        (void)cudaGetLastError();
        return tg_error(TG_ESTATE, "event elapsed time: an event was never recorded (or its graph never replayed)");
    }
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return tg_error(TG_ESTATE, "event elapsed time: an event has not completed yet (sync it first)");
    }
    TG_CUDA_TRY(e);
    *ms = f;
    return TG_OK;
}

/* ------------------------------------------------------------------ kernels */

#define LAUNCH(s, call)                                                                                \
    do {                                                                                               \
        TG_TRY(use_device((s)->dev.index));                                                            \
        TG_CUDA_TRY(call);                                                                             \
    } while (0)

static int is_float(tg_dtype dt) { return dt == TG_F32 || dt == TG_BF16; }

/* The fill value as the element's bits, converted as the CPU backend converts
 * (floats through f32; integers truncated, saturated, NaN to 0). */
static tg_status fill_bits(tg_dtype dt, double v, uint32_t *bits)
{
    float f = (float)v;
    switch (dt) {
    case TG_F32: memcpy(bits, &f, sizeof *bits); return TG_OK;
    case TG_BF16: *bits = tg_f32_to_bf16(f); return TG_OK;
    case TG_I32:
        *bits = (uint32_t)(isnan(v) ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v);
        return TG_OK;
    case TG_U16: *bits = isnan(v) ? 0 : v >= 65535.0 ? 65535 : v <= 0 ? 0 : (uint16_t)v; return TG_OK;
    default: return tg_error(TG_ENOTSUP, "cuda fill: dtype %s is not supported", tg_dtype_name(dt));
    }
}

static tg_status cuda_fill(tg_stream *s, const struct tg_fill_args *a)
{
    uint32_t bits = 0;
    TG_TRY(fill_bits(a->dt, a->value, &bits));
    LAUNCH(s, tg_cuda_fill(a->dst, tg_dtype_size(a->dt), bits, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_cast(tg_stream *s, const struct tg_cast_args *a)
{
    if (a->src_dt == TG_F16 || a->dst_dt == TG_F16)
        return tg_error(TG_ENOTSUP, "cuda cast: %s -> %s is not supported", tg_dtype_name(a->src_dt),
                        tg_dtype_name(a->dst_dt));
    LAUNCH(s, tg_cuda_cast(a->src, a->src_dt, a->dst, a->dst_dt, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_binary(tg_stream *s, const struct tg_binary_args *a)
{
    if (!is_float(a->dt)) return tg_error(TG_ENOTSUP, "cuda binary: dtype %s is not supported", tg_dtype_name(a->dt));
    LAUNCH(s, tg_cuda_binary(a->op, a->a, a->b, a->out, a->dt, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_axpby(tg_stream *s, const struct tg_axpby_args *a)
{
    if (!is_float(a->dt)) return tg_error(TG_ENOTSUP, "cuda axpby: dtype %s is not supported", tg_dtype_name(a->dt));
    LAUNCH(s, tg_cuda_axpby(a->x, a->y, a->dt, a->n, a->alpha, a->beta, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_reduce(tg_stream *s, const struct tg_reduce_args *a)
{
    if (!is_float(a->dt)) return tg_error(TG_ENOTSUP, "cuda reduce: dtype %s is not supported", tg_dtype_name(a->dt));
    double *parts;
    TG_TRY(tg_cuda_reduce_scratch(s, &parts));
    LAUNCH(s, tg_cuda_reduce(a->op, a->a, a->b, a->dt, a->n, a->out, parts, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_rand(tg_stream *s, const struct tg_rand_args *a)
{
    if (!is_float(a->dt)) return tg_error(TG_ENOTSUP, "cuda rand: dtype %s is not supported", tg_dtype_name(a->dt));
    LAUNCH(s, tg_cuda_rand(a->dst, a->dt, a->n, a->dist, a->a, a->b, a->seed, a->offset, tg_cuda_stream(s)));
    return TG_OK;
}

/* ------------------------------------------------------------------ transformer kernels (kernels/<op>.cu) */

static tg_status float_only(const char *what, tg_dtype dt)
{
    if (is_float(dt)) return TG_OK;
    return tg_error(TG_ENOTSUP, "cuda %s: dtype %s is not supported", what,
                    (unsigned)dt < TG_DTYPE_COUNT ? tg_dtype_name(dt) : "(invalid)");
}

/* A kernel that needs the stream's scratch: a failure there is a size limit, said plainly. */
#define LAUNCH_SCRATCH(s, what, call)                                                                  \
    do {                                                                                               \
        TG_TRY(use_device((s)->dev.index));                                                            \
        cudaError_t e_ = (call);                                                                       \
        if (e_ == cudaErrorInvalidValue)                                                               \
            return tg_error(TG_ENOTSUP, "cuda %s: the shapes exceed the kernel's limits or its %zu MiB scratch", \
                            what, TG_CUDA_NN_SCRATCH >> 20);                                           \
        if (e_ != cudaSuccess) return tg_cuda_fail(e_, __FILE__, __LINE__, #call);                     \
    } while (0)

static tg_status cuda_layernorm_forward(tg_stream *s, const struct tg_layernorm_forward_args *a)
{
    TG_TRY(float_only("layernorm_forward", a->dt));
    LAUNCH(s, tg_cuda_layernorm_forward(a->y, a->mean, a->rstd, a->x, a->gamma, a->beta, a->dt, a->n, a->c, a->eps,
                                        tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_layernorm_backward(tg_stream *s, const struct tg_layernorm_backward_args *a)
{
    TG_TRY(float_only("layernorm_backward", a->dt));
    LAUNCH(s, tg_cuda_layernorm_backward(a->dx, a->dy, a->dres, a->x, a->gamma, a->mean, a->rstd, a->dt, a->n, a->c,
                                         tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_layernorm_backward_dw(tg_stream *s, const struct tg_layernorm_backward_dw_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("layernorm_backward_dw", a->dt));
    TG_TRY(float_only("layernorm_backward_dw", a->dw_dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "layernorm_backward_dw",
                   tg_cuda_layernorm_backward_dw(a->dgamma, a->dbeta, a->dy, a->x, a->mean, a->rstd, a->dt, a->dw_dt,
                                                 a->n, a->c, a->accumulate, scr, bytes, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_rmsnorm_forward(tg_stream *s, const struct tg_rmsnorm_forward_args *a)
{
    TG_TRY(float_only("rmsnorm_forward", a->dt));
    LAUNCH(s, tg_cuda_rmsnorm_forward(a->y, a->rstd, a->x, a->gamma, a->dt, a->n, a->c, a->eps, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_rmsnorm_backward(tg_stream *s, const struct tg_rmsnorm_backward_args *a)
{
    TG_TRY(float_only("rmsnorm_backward", a->dt));
    LAUNCH(s, tg_cuda_rmsnorm_backward(a->dx, a->dy, a->dres, a->x, a->gamma, a->rstd, a->dt, a->n, a->c,
                                       tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_rmsnorm_backward_dw(tg_stream *s, const struct tg_rmsnorm_backward_dw_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("rmsnorm_backward_dw", a->dt));
    TG_TRY(float_only("rmsnorm_backward_dw", a->dw_dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "rmsnorm_backward_dw",
                   tg_cuda_rmsnorm_backward_dw(a->dgamma, a->dy, a->x, a->rstd, a->dt, a->dw_dt, a->n, a->c,
                                               a->accumulate, scr, bytes, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_gelu_forward(tg_stream *s, const struct tg_gelu_forward_args *a)
{
    TG_TRY(float_only("gelu_forward", a->dt));
    LAUNCH(s, tg_cuda_gelu_forward(a->y, a->x, a->dt, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_gelu_backward(tg_stream *s, const struct tg_gelu_backward_args *a)
{
    TG_TRY(float_only("gelu_backward", a->dt));
    LAUNCH(s, tg_cuda_gelu_backward(a->dx, a->dy, a->x, a->dt, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_swiglu_forward(tg_stream *s, const struct tg_swiglu_forward_args *a)
{
    TG_TRY(float_only("swiglu_forward", a->dt));
    LAUNCH(s, tg_cuda_swiglu_forward(a->y, a->x, a->dt, a->n, a->h, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_swiglu_backward(tg_stream *s, const struct tg_swiglu_backward_args *a)
{
    TG_TRY(float_only("swiglu_backward", a->dt));
    LAUNCH(s, tg_cuda_swiglu_backward(a->dx, a->dy, a->x, a->dt, a->n, a->h, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_bias_add(tg_stream *s, const struct tg_bias_add_args *a)
{
    TG_TRY(float_only("bias_add", a->dt));
    LAUNCH(s, tg_cuda_bias_add(a->y, a->bias, a->dt, a->n, a->c, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_bias_backward_dw(tg_stream *s, const struct tg_bias_backward_dw_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("bias_backward_dw", a->dt));
    TG_TRY(float_only("bias_backward_dw", a->dw_dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "bias_backward_dw",
                   tg_cuda_bias_backward_dw(a->dbias, a->dy, a->dt, a->dw_dt, a->n, a->c, a->accumulate, scr, bytes,
                                            tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_attention_forward(tg_stream *s, const struct tg_attention_forward_args *a)
{
    TG_TRY(float_only("attention_forward", a->dt));
    LAUNCH_SCRATCH(s, "attention_forward",
                   tg_cuda_attention_forward(a->out, a->lse, a->qkv, a->dt, a->b, a->t, a->c, a->n_head,
                                             tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_attention_backward(tg_stream *s, const struct tg_attention_backward_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("attention_backward", a->dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "attention_backward",
                   tg_cuda_attention_backward(a->dqkv, a->dout, a->out, a->qkv, a->lse, a->dt, a->b, a->t, a->c,
                                              a->n_head, scr, bytes, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_embedding_forward(tg_stream *s, const struct tg_embedding_forward_args *a)
{
    TG_TRY(float_only("embedding_forward", a->dt));
    LAUNCH(s, tg_cuda_embedding_forward(a->out, a->idx, a->wte, a->wpe, a->dt, a->b, a->t, a->c, a->v,
                                        tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_embedding_backward_dw(tg_stream *s, const struct tg_embedding_backward_dw_args *a)
{
    void *scr;
    size_t bytes;
    TG_TRY(float_only("embedding_backward_dw", a->dt));
    if (a->dwte) TG_TRY(float_only("embedding_backward_dw", a->dwte_dt));
    if (a->dwpe) TG_TRY(float_only("embedding_backward_dw", a->dwpe_dt));
    TG_TRY(tg_cuda_nn_scratch(s, &scr, &bytes));
    LAUNCH_SCRATCH(s, "embedding_backward_dw",
                   tg_cuda_embedding_backward_dw(a->dwte, a->dwpe, a->dout, a->idx, a->dt, a->dwte_dt, a->dwpe_dt, a->b,
                                                 a->t, a->c, a->v, a->tmax, a->accumulate, scr, bytes,
                                                 tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_cross_entropy_forward(tg_stream *s, const struct tg_cross_entropy_forward_args *a)
{
    TG_TRY(float_only("cross_entropy_forward", a->dt));
    LAUNCH(s, tg_cuda_cross_entropy_forward(a->loss, a->losses, a->logits, a->targets, a->dt, a->n, a->v,
                                            a->ignore_index, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_cross_entropy_backward(tg_stream *s, const struct tg_cross_entropy_backward_args *a)
{
    TG_TRY(float_only("cross_entropy_backward", a->dt));
    LAUNCH(s, tg_cuda_cross_entropy_backward(a->dlogits, a->logits, a->targets, a->loss, a->dt, a->n, a->v, a->dloss,
                                             a->ignore_index, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_adamw(tg_stream *s, const struct tg_adamw_args *a)
{
    TG_TRY(float_only("adamw", a->g_dt));
    LAUNCH(s, tg_cuda_adamw(a->p, a->m, a->v, a->p_lowp, a->g, a->g_dt, a->n, a->lr, a->beta1, a->beta2, a->eps,
                            a->weight_decay, a->grad_scale, a->step, a->lr_dev, a->step_dev, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_adamw_count(tg_stream *s, int32_t *step)
{
    LAUNCH(s, tg_cuda_adamw_count(step, tg_cuda_stream(s)));
    return TG_OK;
}

/* The kernels take backend.h's tables as they are (kernels.h cannot include backend.h). */
_Static_assert(sizeof(struct tgk_adamw_tensor) == sizeof(struct tg_adamw_multi_tensor) &&
                   offsetof(struct tgk_adamw_tensor, p_lowp) == offsetof(struct tg_adamw_multi_tensor, p_lowp) &&
                   offsetof(struct tgk_adamw_tensor, g) == offsetof(struct tg_adamw_multi_tensor, g) &&
                   offsetof(struct tgk_adamw_tensor, n) == offsetof(struct tg_adamw_multi_tensor, n) &&
                   offsetof(struct tgk_adamw_tensor, g_dt) == offsetof(struct tg_adamw_multi_tensor, g_dt) &&
                   offsetof(struct tgk_adamw_tensor, weight_decay) == offsetof(struct tg_adamw_multi_tensor, weight_decay),
               "kernels.h tgk_adamw_tensor follows backend.h");
_Static_assert(sizeof(struct tgk_sumsq_tensor) == sizeof(struct tg_sumsq_multi_tensor) &&
                   offsetof(struct tgk_sumsq_tensor, n) == offsetof(struct tg_sumsq_multi_tensor, n) &&
                   offsetof(struct tgk_sumsq_tensor, dt) == offsetof(struct tg_sumsq_multi_tensor, dt),
               "kernels.h tgk_sumsq_tensor follows backend.h");

static tg_status cuda_adamw_multi(tg_stream *s, const struct tg_adamw_multi_args *a)
{
    for (int k = 0; k < a->ntensors; k++) TG_TRY(float_only("adamw_multi", a->t[k].g_dt));
    LAUNCH(s, tg_cuda_adamw_multi((const struct tgk_adamw_tensor *)a->t, a->ntensors, a->lr, a->beta1, a->beta2,
                                  a->eps, a->grad_scale, a->step, a->clip_sumsq, a->max_norm, a->lr_dev,
                                  a->step_dev, tg_cuda_stream(s)));
    return TG_OK;
}

static tg_status cuda_sumsq_multi(tg_stream *s, const struct tg_sumsq_multi_args *a)
{
    double *parts;
    for (int k = 0; k < a->ntensors; k++) TG_TRY(float_only("sumsq_multi", a->t[k].dt));
    TG_TRY(tg_cuda_reduce_scratch(s, &parts));
    LAUNCH(s, tg_cuda_sumsq_multi((const struct tgk_sumsq_tensor *)a->t, a->ntensors, a->out, parts,
                                  tg_cuda_stream(s)));
    return TG_OK;
}

_Static_assert(sizeof(struct tgk_zero_buf) == sizeof(struct tg_zero_multi_buf) &&
                   offsetof(struct tgk_zero_buf, bytes) == offsetof(struct tg_zero_multi_buf, bytes),
               "kernels.h tgk_zero_buf follows backend.h");

static tg_status cuda_zero_multi(tg_stream *s, const struct tg_zero_multi_args *a)
{
    LAUNCH(s, tg_cuda_zero_multi((const struct tgk_zero_buf *)a->t, a->n, tg_cuda_stream(s)));
    return TG_OK;
}

const struct tg_backend tg_backend_cuda = {
    .name = "cuda",
    .type = TG_CUDA,
    .device_count = cuda_device_count,
    .device_describe = cuda_device_describe,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memcpy = cuda_memcpy,
    .stream_init = cuda_stream_init,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_replay = cuda_graph_replay,
    .graph_destroy = cuda_graph_destroy,
    .event_init = cuda_event_init,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .event_elapsed = cuda_event_elapsed,
    .fill = cuda_fill,
    .cast = cuda_cast,
    .binary = cuda_binary,
    .axpby = cuda_axpby,
    .gemm = tg_cuda_gemm,
    .reduce = cuda_reduce,
    .rand = cuda_rand,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .layernorm_backward_dw = cuda_layernorm_backward_dw,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .rmsnorm_backward_dw = cuda_rmsnorm_backward_dw,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .bias_add = cuda_bias_add,
    .bias_backward_dw = cuda_bias_backward_dw,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward_dw = cuda_embedding_backward_dw,
    .cross_entropy_forward = cuda_cross_entropy_forward,
    .cross_entropy_backward = cuda_cross_entropy_backward,
    .adamw = cuda_adamw,
    .adamw_multi = cuda_adamw_multi,
    .adamw_count = cuda_adamw_count,
    .sumsq_multi = cuda_sumsq_multi,
    .zero_multi = cuda_zero_multi,
};
