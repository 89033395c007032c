/* core.h — internal definitions of tensors, storage, pools, streams, graphs and errors. */
#ifndef TG_CORE_H
#define TG_CORE_H

#include "config.h"
#include "tegraph.h"
#include "core/checked.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

struct tg_backend;

/* Invariant violations (bugs in tegraph, never bad input): abort with file:line. */
#define TG_ASSERT(x)                                                                                   \
    do {                                                                                               \
        if (!(x)) tg_assert_fail(__FILE__, __LINE__, #x);                                              \
    } while (0)
_Noreturn void tg_assert_fail(const char *file, int line, const char *expr);

/* tg_error (tegraph.h) with a va_list. */
tg_status tg_verror(tg_status st, const char *fmt, va_list ap);
/* Prefixes the current message with "what: " and returns st (for context). */
tg_status tg_error_prefix(tg_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Empties this thread's message (before calling out to code that reports its failures through tg_error, so a
 * failure without a message is told from one with a stale message). */
void tg_error_clear(void);

#define TG_TRY(expr)                                                                                   \
    do {                                                                                               \
        tg_status tg_try_st_ = (expr);                                                                 \
        if (tg_try_st_ != TG_OK) return tg_try_st_;                                                    \
    } while (0)

/* A public entry point refuses a NULL pointer argument p (named what) with TG_EINVAL naming the function. */
#define TG_NONNULL(p, what)                                                                            \
    do {                                                                                               \
        if (!(p)) return tg_error(TG_EINVAL, "%s: %s is NULL", __func__, what);                       \
    } while (0)

/* ------------------------------------------------------------------ memory */
struct tg_storage {
    void *data;         /* device (or host, for the CPU) address */
    size_t bytes;
    tg_device dev;
    int refcount;
    struct tg_pool *pool; /* NULL: the device allocator owns data */
    int range_returned;   /* pool storage whose range went back to the pool early (tg_storage_return_range) */
};

struct tg_tensor {
    struct tg_storage *storage;
    int64_t offset;               /* in elements, into storage */
    tg_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    char *name;
};

struct tg_pool_block {
    struct tg_pool_block *next;
    void *data;
    size_t size, used; /* bytes carved from the block so far (the rest is untouched) */
};

/* A free range inside one block of a pool (sorted by address, coalesced). */
struct tg_pool_free {
    struct tg_pool_free *next;
    struct tg_pool_block *block;
    char *ptr;
    size_t size;
};

/* Graph memory. Freed ranges are reused by later allocations: captures happen
 * in the order graphs replay, so memory freed at capture time (a microbatch's
 * saved activations after its backward) is not read again by earlier graphs
 * when a later graph reuses it. */
struct tg_pool {
    tg_device dev;
    int refcount;
    struct tg_pool_block *blocks;
    struct tg_pool_free *free_list;
    size_t used, peak, reserved;
    size_t total; /* bytes ever handed out: what the pool would hold without reuse */
    long defer_until;              /* >= 0: ranges freed now stay taken until tg_pool_release_deferred(p, pos >= it) */
    struct tg_pool_deferred *deferred; /* those ranges */
};

/* A range freed while the pool defers frees, and the position from which it may be reused. */
struct tg_pool_deferred {
    struct tg_pool_deferred *next;
    void *ptr;
    size_t bytes;
    long until;
};

tg_status tg_storage_new(tg_pool *pool, tg_device dev, size_t bytes, struct tg_storage **out);
void tg_storage_release(struct tg_storage *s);
/* Gives a pool storage's range back to its pool now, while its handles stay:
 * later allocations from the pool may take the range (the graph layer, for a
 * static buffer whose last reader in the capture order has been captured).
 * The storage keeps its pool reference; its last release frees nothing more.
 * No-op for storages outside pools or already returned. */
void tg_storage_return_range(struct tg_storage *s);
/* The pool pushed for dev on this thread, or NULL. */
tg_pool *tg_pool_current(tg_device dev);
/* 1 while p is on this thread's stack of pushed pools. */
int tg_pool_pushed(const tg_pool *p);
/* Allocation from a pool (256-byte aligned) and its release. */
tg_status tg_pool_alloc(tg_pool *p, size_t bytes, void **out);
void tg_pool_free_range(tg_pool *p, void *ptr, size_t bytes);
/* The graph layer's capture positions: while until >= 0, ranges freed go on a
 * deferred list instead of the free list (a graph that later microbatches
 * replay keeps every range it touched until its last replay's position);
 * -1 stops deferring. tg_pool_release_deferred frees those whose position has
 * come (until <= pos). */
void tg_pool_defer(tg_pool *p, long until);
void tg_pool_release_deferred(tg_pool *p, long pos);

/* ------------------------------------------------------------------ streams and graphs */
struct tg_stream {
    tg_device dev;
    const struct tg_backend *be;
    char name[32];
    struct tg_graph *capture; /* non-NULL while capturing: the graph being recorded */
    tg_status capture_error;  /* first op error while capturing (capture is then invalid) */
    char capture_msg[256];
    void *impl;               /* backend stream (cudaStream_t); NULL on the CPU */
};

/* A set of pointers (open addressing, power-of-two capacity; NULL is empty). */
struct tg_ptrset {
    void **slots;
    size_t cap, n;
};

/* Host work bound to a graph by a layer above the core (the step engine:
 * module work recorded while capturing). before runs ahead of each replay,
 * after once the replay is issued, both with s current on its device. */
struct tg_graph_host {
    tg_status (*before)(void *ud, tg_stream *s);
    tg_status (*after)(void *ud, tg_stream *s);
    void (*free_ud)(void *ud);
    void *ud;
};

/* Host work that can fail, and how a holder keeps its argument alive (tg_stream_host_call). */
struct tg_host_call {
    tg_status (*fn)(void *ud);
    void *ud;
    void (*retain)(void *ud);
    void (*drop)(void *ud);
};

struct tg_graph {
    tg_device dev;
    const struct tg_backend *be;
    size_t ncmds;
    tg_pool *pools[8]; /* pools kept alive by this graph (tg_graph_keep_pool) */
    int npools;
    struct tg_graph_host host; /* fn NULL: none */
    /* What the captured work reads and writes, retained while the graph lives:
     * storages from the device allocator, and the pools of pool storages
     * (a pool's ranges may be reused by later captures, its blocks stay). */
    struct tg_ptrset held_storages, held_pools, held_events;
    struct tg_host_call *after; /* (nafter) host work after each replay (tg_graph_after_replay) */
    int nafter, capafter;
    void *impl;        /* backend graph: CPU command list / cudaGraphExec_t */
};

/* The graph that work issued on dev's current stream now goes to: the current
 * stream's capture, else the capture of the stream of dev that began
 * capturing last; NULL when dev does not capture. */
tg_graph *tg_device_capture_graph(tg_device dev);

/* Retains t's storage (or its pool) for the graph work on its device now goes
 * to (tg_device_capture_graph), if any; called by tg_tensor_data. */
void tg_capture_hold(const tg_tensor *t);
/* Retains e for g (an event recorded or waited for inside g's capture). */
tg_status tg_graph_hold_event(tg_graph *g, tg_event *e);
/* Host work run after each replay of g, with the replay's stream current, in the order added (once
 * per fn and ud: adding the same pair again does nothing); g retains ud and drops it when freed.
 * Layers under the graph use it (the NCCL watchdog watches a replay that holds captured ops). */
tg_status tg_graph_after_replay(tg_graph *g, const struct tg_host_call *h);

/* Per-device bookkeeping: current stream, default stream, capture count. */
int tg_device_valid(tg_device d);
const struct tg_backend *tg_backend_for(tg_device d);
void tg_device_capture_count(tg_stream *s, int delta);
/* Name of a stream of d that captures now (for messages). */
const char *tg_device_capturer_name(tg_device d);
void tg_device_forget_stream(tg_stream *s);
/* tg_device_stats: one op issued on s (not counted while s captures; gemm: a GEMM), one graph
 * replay on s, bytes taken from (add) or given back to a device's allocator. */
void tg_device_count_op(tg_stream *s, int gemm);
void tg_device_count_replay(tg_stream *s);
void tg_device_count_memory(tg_device dev, size_t bytes, int add);
/* Makes the device's index-check record (backend.h) with its first stream. */
void tg_device_index_init(tg_stream *s);
/* Remembers the first op error while s captures (end_capture then fails); returns st. */
tg_status tg_stream_note_error(tg_stream *s, tg_status st);

/* Host work in stream order that can fail: fn(ud) runs now, or, while s captures, is recorded into
 * the graph and runs at each replay (its failure fails the replay). The graph holds ud: retain(ud)
 * when it is recorded (also into an enclosing capture when the graph is replayed inside one),
 * drop(ud) when the graph is freed. Backends without it (CUDA) fail with TG_ENOTSUP. */

tg_status tg_stream_host_call(tg_stream *s, const struct tg_host_call *h);

/* TG_OK when v is exactly representable in dt's integers (f32 and bf16: always; FP8: within the format's
 * largest finite value, not NaN);
 * else TG_EINVAL "what: value v [at index i] does not fit dt" (index < 0: none). */
tg_status tg_value_fits(tg_dtype dt, double v, const char *what, long long index);

/* Copies/converts raw elements; used by host transfers and the CPU backend. */
float tg_bf16_to_f32(uint16_t h);
uint16_t tg_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN (quiet) */

/* ------------------------------------------------------------------ RNG (Philox4x32-10) */
/* Four 32-bit words for (key, counter): the same function on every backend. */
void tg_philox4x32(uint64_t key, uint64_t counter, uint32_t out[4]);
/* Reserves `n` counters of the global generator: returns (seed, first counter). */
void tg_rng_reserve(uint64_t n, uint64_t *seed, uint64_t *offset);

/* Small helpers */
static inline int64_t tg_numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}
static inline size_t tg_tensor_bytes(const tg_tensor *t)
{
    return (size_t)tg_tensor_numel(t) * tg_dtype_size(t->dtype);
}

#endif
