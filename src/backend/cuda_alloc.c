/* cuda_alloc.c — the CUDA backend's memory: a caching allocator per device and each stream's scratch buffers. */
#include "backend/cuda_impl.h"
#include "core/debug.h"

#include "kernels.h" /* kernels/ is not on the C include path */

#include <pthread.h>
#include <stdlib.h>

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
    struct cuda_block *free_list[NCLASS];
    struct cuda_block *live[LIVE_BUCKETS]; /* handed-out blocks by address */
    size_t in_use, cached;
    uint64_t mallocs;
    struct cuda_deferred *deferred;
    struct tg_cuda_scratch *scratches; /* of live streams, by cudaStream_t */
};

static struct cuda_dev devs[TG_CUDA_MAX_DEVICES] = {[0 ... TG_CUDA_MAX_DEVICES - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER}};
static int alloc_direct; /* TG_DEBUG_ALLOC_DIRECT: no caching, for memory checkers */

void tg_cuda_alloc_init(void) { alloc_direct = tg_debug_get(TG_DEBUG_ALLOC_DIRECT); }

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

tg_status tg_cuda_alloc(int index, size_t bytes, void **out)
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

void tg_cuda_free(int index, void *ptr)
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

void tg_cuda_scratch_attach(int index, cudaStream_t st)
{
    struct cuda_dev *d = &devs[index];
    pthread_mutex_lock(&d->lock);
    scratch_new_locked(d, index, st);
    pthread_mutex_unlock(&d->lock);
}

void tg_cuda_scratch_detach(int index, cudaStream_t st)
{
    struct cuda_dev *d = &devs[index];
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
}

void tg_cuda_scratch_retain(struct tg_cuda_scratch *x)
{
    struct cuda_dev *d = &devs[x->dev];
    pthread_mutex_lock(&d->lock);
    x->refs++;
    pthread_mutex_unlock(&d->lock);
}

void tg_cuda_scratch_release(struct tg_cuda_scratch *x)
{
    struct cuda_dev *d = &devs[x->dev];
    pthread_mutex_lock(&d->lock);
    scratch_release_locked(d, x);
    pthread_mutex_unlock(&d->lock);
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
