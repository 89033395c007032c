/* comm_nccl.c — the NCCL transport for CUDA tensors: a comm stream ordered by events, a watchdog that aborts on error or timeout. */
#include "dist/comm_impl.h"

#ifdef TG_HAVE_NCCL
#include "backend/backend.h"
#include "trace/trace.h"

#include <nccl.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

/* One NCCL communicator on one GPU. Ops run on `stream`, which waits (event
 * `ready`) for the work issued so far on the device's current stream; a
 * request's wait makes the then-current stream wait for the op's event, so
 * the host never blocks. The watchdog thread polls every op in flight and
 * NCCL's asynchronous error: an error, or an op older than the timeout (a
 * peer died or never joined), aborts the communicator, which releases the
 * kernels waiting for the peer; later ops fail naming the reason. */
struct watch {
    struct watch *next;
    tg_event *ev;
    double t0;
    char desc[128];
};

struct nccl_group {
    ncclComm_t comm;
    int dev, rank, size;
    tg_stream *ts;          /* the communication stream (a tegraph stream, for events and trace spans) */
    cudaStream_t stream;    /* its native handle, for NCCL */
    tg_event *ready;        /* recorded on the compute stream before each op */
    void *scratch;          /* (1) i32 on the device: barrier */
    pthread_t thread;
    int thread_on;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct watch *watch;    /* ops in flight (lock) */
    int stop;               /* lock */
    int aborted;            /* lock (read racily as a hint) */
    char why[512];          /* lock */
    int group_depth;        /* inside ncclGroupStart/End (main thread) */
    struct nccl_req **deferred; /* requests of the open group: their events are recorded at its end */
    int ndeferred, cap_deferred;
};

struct nccl_req {
    struct nccl_group *g;
    tg_event *done;         /* NULL while its group is open */
    int span;               /* trace span to end with the op (-1: none) */
    char desc[128];
};

static tg_status nccl_fail(ncclResult_t res, ncclComm_t comm, const char *what)
{
    const char *last = comm ? ncclGetLastError(comm) : NULL;
    return tg_error(TG_EDEVICE, "%s: NCCL: %s%s%s", what, ncclGetErrorString(res), last && *last ? ": " : "",
                    last ? last : "");
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Nonblocking communicators return ncclInProgress while a call completes in
 * the background: poll until it settles, within the timeout. */
static tg_status settle_within(ncclComm_t comm, ncclResult_t res, const char *what, double limit)
{
    double t0 = tg_comm_now();
    while (res == ncclInProgress) {
        if (tg_comm_now() - t0 > limit)
            return tg_error(TG_EDEVICE,
                            "%s did not complete within %g s: another rank died, failed or did not reach the same call "
                            "(timeout: TG_COMM_TIMEOUT or tg.comm.init{timeout=})",
                            what, limit);
        sleep_us(100);
        if (ncclCommGetAsyncError(comm, &res) != ncclSuccess) break;
    }
    return res == ncclSuccess ? TG_OK : nccl_fail(res, comm, what);
}

static tg_status settle(ncclComm_t comm, ncclResult_t res, const char *what)
{
    return settle_within(comm, res, what, tg_comm_timeout());
}

/* Set-up (communicator creation, connections) takes seconds on its own: it
 * gets at least a minute whatever the op timeout is. */
static double setup_timeout(void) { return tg_comm_timeout() > 60.0 ? tg_comm_timeout() : 60.0; }

static ncclDataType_t type_of(tg_dtype dt)
{
    switch (dt) {
    case TG_F32: return ncclFloat32;
    case TG_BF16: return ncclBfloat16;
    case TG_I32: return ncclInt32;
    default: TG_ASSERT(!"dtype checked by comm.c");
    }
    return ncclFloat32;
}

static ncclRedOp_t op_of(tg_comm_op op)
{
    switch (op) {
    case TG_COMM_AVG: return ncclAvg;
    case TG_COMM_MAX: return ncclMax;
    case TG_COMM_MIN: return ncclMin;
    default: return ncclSum;
    }
}

/* ------------------------------------------------------------------ abort and the watchdog */
/* Marks g aborted (first reason wins) and aborts the NCCL communicator. Lock not held. */
static void group_abort(struct nccl_group *g, const char *why, int print)
{
    pthread_mutex_lock(&g->lock);
    int first = !g->aborted;
    if (first) {
        __atomic_store_n(&g->aborted, 1, __ATOMIC_RELEASE);
        snprintf(g->why, sizeof g->why, "%s", why);
    }
    pthread_mutex_unlock(&g->lock);
    if (!first) return;
    /* the watchdog's message is the only trace when the main thread is stuck in a CUDA call */
    if (print) fprintf(stderr, "tegraph: rank %d: %s; aborting the NCCL communicator\n", g->rank, why);
    (void)ncclCommAbort(g->comm);
}

/* After the launcher tells of a departed rank: how long an op in flight may still take (what the
 * departed rank sent last arriving) before it is failed, naming that rank. */
#define DEPART_GRACE_S 3.0

static int is_aborted(struct nccl_group *g) { return __atomic_load_n(&g->aborted, __ATOMIC_ACQUIRE); }

static tg_status aborted_error(struct nccl_group *g, const char *what)
{
    pthread_mutex_lock(&g->lock);
    tg_status st = tg_error(TG_EDEVICE, "%s: the NCCL communicator was aborted: %s", what, g->why);
    pthread_mutex_unlock(&g->lock);
    return st;
}

static void *watchdog(void *arg)
{
    struct nccl_group *g = arg;
    char why[512];
    (void)tg_device_use((tg_device){TG_CUDA, g->dev});
    pthread_mutex_lock(&g->lock);
    while (!g->stop && !g->aborted) {
        why[0] = '\0';
        double now = tg_comm_now(), limit = tg_comm_timeout();
        for (struct watch **pp = &g->watch; *pp;) {
            struct watch *w = *pp;
            int done = 0;
            if (tg_event_query(w->ev, &done) != TG_OK) {
                snprintf(why, sizeof why, "%s failed: %s", w->desc, tg_last_error());
                break;
            }
            if (done) {
                *pp = w->next;
                tg_event_free(w->ev);
                free(w);
                continue;
            }
            double gone_since = 0;
            int gone = now - w->t0 > DEPART_GRACE_S ? tg_comm_departed(&gone_since) : -1;
            if (gone >= 0 && now - gone_since > DEPART_GRACE_S) {
                snprintf(why, sizeof why, "%s cannot complete: rank %d left the job (its script ended) %g s ago",
                         w->desc, gone, now - gone_since);
                break;
            }
            if (now - w->t0 > limit) {
                snprintf(why, sizeof why,
                         "%s did not complete within %g s: another rank died, failed or did not reach the same call",
                         w->desc, limit);
                break;
            }
            pp = &w->next;
        }
        if (!why[0]) {
            ncclResult_t ae = ncclSuccess;
            if (ncclCommGetAsyncError(g->comm, &ae) == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress)
                snprintf(why, sizeof why, "NCCL error: %s (%s)", ncclGetErrorString(ae), ncclGetLastError(g->comm));
        }
        if (why[0]) {
            pthread_mutex_unlock(&g->lock);
            group_abort(g, why, 1);
            pthread_mutex_lock(&g->lock);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cond, &g->lock, &ts);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* Hands the watchdog an event recorded on ts after the work issued there (an op on the comm stream). */
static tg_status watch_add_on(struct nccl_group *g, tg_stream *ts, const char *desc)
{
    struct watch *w = calloc(1, sizeof *w);
    if (!w) return tg_error(TG_ENOMEM, "out of host memory");
    tg_status st = tg_event_new((tg_device){TG_CUDA, g->dev}, 0, &w->ev);
    if (st == TG_OK) st = tg_event_record(w->ev, ts);
    if (st != TG_OK) {
        tg_event_free(w->ev);
        free(w);
        return st;
    }
    w->t0 = tg_comm_now();
    snprintf(w->desc, sizeof w->desc, "%s", desc);
    pthread_mutex_lock(&g->lock);
    struct watch **pp = &g->watch;
    while (*pp) pp = &(*pp)->next;
    *pp = w;
    pthread_mutex_unlock(&g->lock);
    return TG_OK;
}

static tg_status watch_add(struct nccl_group *g, const char *desc) { return watch_add_on(g, g->ts, desc); }

/* After a replay of a graph holding ops captured on this communicator: the watchdog watches the
 * replay's stream (whose work after the graph waits for those ops), so a peer that does not replay
 * aborts the communicator at the timeout instead of leaving the stream waiting. */
static tg_status n_watch_replay(void *impl, tg_stream *s)
{
    struct nccl_group *g = impl;
    char desc[128];
    if (is_aborted(g)) return aborted_error(g, "replay of a graph holding captured NCCL collectives");
    if (!s) return tg_error(TG_EDEVICE, "replay of a graph holding captured NCCL collectives: no stream on cuda:%d", g->dev);
    snprintf(desc, sizeof desc, "replay of a graph holding captured NCCL collectives (rank %d of %d)", g->rank, g->size);
    return watch_add_on(g, s, desc);
}

/* ------------------------------------------------------------------ setup */
tg_status tg_nccl_get_id(unsigned char id[TG_NCCL_ID_BYTES])
{
    ncclUniqueId u;
    _Static_assert(sizeof u.internal == TG_NCCL_ID_BYTES, "NCCL unique id size");
    ncclResult_t res = ncclGetUniqueId(&u);
    if (res != ncclSuccess) return nccl_fail(res, NULL, "ncclGetUniqueId");
    memcpy(id, u.internal, TG_NCCL_ID_BYTES);
    return TG_OK;
}

static void group_free(struct nccl_group *g)
{
    tg_device_free((tg_device){TG_CUDA, g->dev}, g->scratch);
    tg_event_free(g->ready);
    tg_stream_free(g->ts);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    free(g);
}

/* The stream, events, scratch and watchdog of a new communicator. */
static tg_status group_new(ncclComm_t comm, int dev, struct nccl_group **out)
{
    struct nccl_group *g = calloc(1, sizeof *g);
    if (!g) return tg_error(TG_ENOMEM, "out of host memory");
    g->comm = comm;
    g->dev = dev;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    tg_device d = {TG_CUDA, dev};
    tg_status st = tg_stream_new(d, "comm", &g->ts);
    if (st == TG_OK) st = tg_event_new(d, 0, &g->ready);
    if (st == TG_OK) {
        g->stream = (cudaStream_t)tg_stream_native(g->ts);
        st = tg_device_use(d);
        if (st == TG_OK) st = tg_device_alloc(d, sizeof(int), &g->scratch);
        if (st != TG_OK) tg_error_prefix(st, "NCCL comm stream setup");
    }
    ncclResult_t r1 = ncclCommUserRank(comm, &g->rank), r2 = ncclCommCount(comm, &g->size);
    if (st != TG_OK || r1 != ncclSuccess || r2 != ncclSuccess) {
        if (st == TG_OK) st = nccl_fail(r1 != ncclSuccess ? r1 : r2, comm, "ncclCommUserRank");
        group_free(g);
        return st;
    }
    if (pthread_create(&g->thread, NULL, watchdog, g) != 0) {
        group_free(g);
        return tg_error(TG_ENOMEM, "NCCL: cannot start the watchdog thread");
    }
    g->thread_on = 1;
    *out = g;
    return TG_OK;
}

static ncclConfig_t nonblocking_config(void)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* setup and ops return at once: we poll them within the timeout */
    return cfg;
}

tg_status tg_nccl_init(const unsigned char id[TG_NCCL_ID_BYTES], int rank, int size, int dev, void **impl)
{
    ncclUniqueId u;
    ncclComm_t comm = NULL;
    ncclConfig_t cfg = nonblocking_config();
    char what[96];
    memcpy(u.internal, id, TG_NCCL_ID_BYTES);
    TG_TRY(tg_device_use((tg_device){TG_CUDA, dev}));
    snprintf(what, sizeof what, "NCCL setup of rank %d of %d on cuda:%d", rank, size, dev);
    ncclResult_t res = ncclCommInitRankConfig(&comm, size, u, rank, &cfg);
    tg_status st = comm ? settle_within(comm, res, what, setup_timeout()) : nccl_fail(res, NULL, what);
    if (st != TG_OK) {
        if (comm) (void)ncclCommAbort(comm);
        return st;
    }
    struct nccl_group *g;
    st = group_new(comm, dev, &g);
    if (st != TG_OK) {
        (void)ncclCommAbort(comm);
        return st;
    }
    *impl = g;
    return TG_OK;
}

/* ------------------------------------------------------------------ ops */
/* Orders the comm stream after the work issued so far on the compute stream;
 * while tracing, the op's span starts there (after the wait). */
static tg_status begin(struct nccl_group *g, struct tg_comm_req *r)
{
    r->span = -1;
    if (is_aborted(g)) return aborted_error(g, r->desc);
    TG_TRY(tg_device_use((tg_device){TG_CUDA, g->dev}));
    tg_stream *s = tg_stream_current((tg_device){TG_CUDA, g->dev});
    if (!s) return tg_error(TG_EDEVICE, "%s: no stream on cuda:%d", r->desc, g->dev);
    /* While s captures, the comm stream joins the capture through this wait (a fork of the graph);
     * the request's wait joins it back. */
    TG_TRY(tg_event_record(g->ready, s));
    TG_TRY(tg_stream_wait_event(g->ts, g->ready));
    if (!r->captured) r->span = tg_comm_span_open(r, g->ts); /* the comm stream is no tegraph capture: no span */
    return TG_OK;
}

/* The op's completion event, recorded on the comm stream after it (and the end of its span). */
static tg_status record_done(struct nccl_group *g, struct nccl_req *q)
{
    tg_trace_close(q->span, g->ts);
    q->span = -1;
    TG_TRY(tg_event_new((tg_device){TG_CUDA, g->dev}, 0, &q->done));
    tg_status st = tg_event_record(q->done, g->ts);
    if (st != TG_OK) {
        tg_event_free(q->done);
        q->done = NULL;
    }
    return st;
}

/* After the NCCL call: settles it, records the request's event, watches it. */
static tg_status end(struct nccl_group *g, struct tg_comm_req *r, ncclResult_t res)
{
    tg_status st = settle(g->comm, res, r->desc);
    if (st != TG_OK) {
        group_abort(g, tg_last_error(), 0);
        return st;
    }
    struct nccl_req *q = calloc(1, sizeof *q);
    if (!q) return tg_error(TG_ENOMEM, "out of host memory");
    q->g = g;
    q->span = r->span;
    snprintf(q->desc, sizeof q->desc, "%s", r->desc);
    if (g->group_depth > 0) { /* launched at the group's end: record the event then */
        if (g->ndeferred == g->cap_deferred) {
            int cap = g->cap_deferred ? 2 * g->cap_deferred : 16;
            struct nccl_req **d = realloc(g->deferred, (size_t)cap * sizeof *d);
            if (!d) {
                free(q);
                return tg_error(TG_ENOMEM, "out of host memory");
            }
            g->deferred = d;
            g->cap_deferred = cap;
        }
        g->deferred[g->ndeferred++] = q;
        r->impl = q;
        return TG_OK;
    }
    st = record_done(g, q);
    if (st != TG_OK) {
        free(q);
        return st;
    }
    r->impl = q;
    /* the op is issued either way; only the watchdog would miss it. A captured op runs at replays,
     * and its event may not be queried while the capture lasts: not watched. */
    if (!r->captured) (void)watch_add(g, r->desc);
    return TG_OK;
}

static size_t count_of(const tg_tensor *t) { return (size_t)tg_tensor_numel(t); }

static tg_status n_all_reduce(void *impl, tg_tensor *t, tg_comm_op op, struct tg_comm_req *r)
{
    struct nccl_group *g = impl;
    TG_TRY(begin(g, r));
    void *p = tg_tensor_data(t);
    return end(g, r, ncclAllReduce(p, p, count_of(t), type_of(t->dtype), op_of(op), g->comm, g->stream));
}

static tg_status n_reduce_scatter(void *impl, tg_tensor *out, tg_tensor *in, tg_comm_op op, struct tg_comm_req *r)
{
    struct nccl_group *g = impl;
    TG_TRY(begin(g, r));
    /* in place when out is this rank's slice of in, as NCCL defines it */
    return end(g, r, ncclReduceScatter(tg_tensor_data(in), tg_tensor_data(out), count_of(out), type_of(in->dtype),
                                       op_of(op), g->comm, g->stream));
}

static tg_status n_all_gather(void *impl, tg_tensor *out, tg_tensor *in, struct tg_comm_req *r)
{
    struct nccl_group *g = impl;
    TG_TRY(begin(g, r));
    return end(g, r, ncclAllGather(tg_tensor_data(in), tg_tensor_data(out), count_of(in), type_of(in->dtype), g->comm,
                                   g->stream));
}

static tg_status n_broadcast(void *impl, tg_tensor *t, int root, struct tg_comm_req *r)
{
    struct nccl_group *g = impl;
    TG_TRY(begin(g, r));
    void *p = tg_tensor_data(t);
    return end(g, r, ncclBroadcast(p, p, count_of(t), type_of(t->dtype), root, g->comm, g->stream));
}

static tg_status n_send(void *impl, tg_tensor *t, int peer, struct tg_comm_req *r)
{
    struct nccl_group *g = impl;
    TG_TRY(begin(g, r));
    return end(g, r, ncclSend(tg_tensor_data(t), count_of(t), type_of(t->dtype), peer, g->comm, g->stream));
}

static tg_status n_recv(void *impl, tg_tensor *t, int peer, struct tg_comm_req *r)
{
    struct nccl_group *g = impl;
    TG_TRY(begin(g, r));
    return end(g, r, ncclRecv(tg_tensor_data(t), count_of(t), type_of(t->dtype), peer, g->comm, g->stream));
}

/* Host-side: an all-reduce of one integer, polled to completion within the timeout. */
static tg_status n_barrier(void *impl)
{
    struct nccl_group *g = impl;
    struct tg_comm_req r = {.desc = "barrier"};
    if (g->group_depth > 0) return tg_error(TG_ESTATE, "barrier inside a group of ops");
    TG_TRY(begin(g, &r));
    TG_TRY(end(g, &r, ncclAllReduce(g->scratch, g->scratch, 1, ncclInt32, ncclSum, g->comm, g->stream)));
    struct nccl_req *q = r.impl;
    double t0 = tg_comm_now(), limit = tg_comm_timeout();
    tg_status st = TG_OK;
    for (;;) {
        int done = 0;
        st = tg_event_query(q->done, &done);
        if (st != TG_OK) {
            tg_error_prefix(st, "barrier");
            break;
        }
        if (done) break;
        if (is_aborted(g)) {
            st = aborted_error(g, "barrier");
            break;
        }
        if (tg_comm_now() - t0 > limit) {
            st = tg_error(TG_EDEVICE, "barrier on rank %d of %d did not complete within %g s: another rank died, "
                          "failed or did not reach it", g->rank, g->size, limit);
            group_abort(g, tg_last_error(), 0);
            break;
        }
        sleep_us(100);
    }
    tg_event_free(q->done);
    free(q);
    return st;
}

static tg_status group_open_error(const char *what)
{
    return tg_error(TG_ESTATE, "%s: its group is still open (wait after tg.comm.group / tg_comm_group_end)", what);
}

static tg_status n_test(struct tg_comm_req *r, int *done)
{
    struct nccl_req *q = r->impl;
    *done = 0;
    if (is_aborted(q->g)) return aborted_error(q->g, r->desc);
    if (!q->done) return group_open_error(r->desc);
    tg_status st = tg_event_query(q->done, done);
    if (st != TG_OK) return tg_error_prefix(st, "%s", r->desc);
    if (*done) return TG_OK;
    if (is_aborted(q->g)) return aborted_error(q->g, r->desc);
    return TG_OK;
}

/* Device-side: the current stream waits for the op (the host goes on). */
static tg_status n_wait(struct tg_comm_req *r)
{
    struct nccl_req *q = r->impl;
    struct nccl_group *g = q->g;
    if (is_aborted(g)) return aborted_error(g, r->desc);
    if (!q->done) return group_open_error(r->desc);
    TG_TRY(tg_device_use((tg_device){TG_CUDA, g->dev}));
    tg_stream *s = tg_stream_current((tg_device){TG_CUDA, g->dev});
    if (!s) return tg_error(TG_EDEVICE, "%s: no stream on cuda:%d", r->desc, g->dev);
    return tg_stream_wait_event(s, q->done);
}

static void n_req_release(struct tg_comm_req *r)
{
    struct nccl_req *q = r->impl;
    if (!q) return;
    struct nccl_group *g = q->g;
    for (int i = 0; i < g->ndeferred; i++) /* freed before its group ended */
        if (g->deferred[i] == q) g->deferred[i--] = g->deferred[--g->ndeferred];
    tg_event_free(q->done); /* resources go once the event has completed */
    free(q);
    r->impl = NULL;
}

static tg_status n_group_begin(void *impl)
{
    struct nccl_group *g = impl;
    if (is_aborted(g)) return aborted_error(g, "group");
    if (g->group_depth++ == 0) {
        ncclResult_t res = ncclGroupStart();
        if (res != ncclSuccess) {
            g->group_depth = 0;
            return nccl_fail(res, g->comm, "ncclGroupStart");
        }
    }
    return TG_OK;
}

/* Launches the group, then records each of its requests' events. */
static tg_status n_group_end(void *impl)
{
    struct nccl_group *g = impl;
    if (g->group_depth == 0) return tg_error(TG_ESTATE, "group end without a group begin");
    if (--g->group_depth > 0) return TG_OK;
    tg_status st = settle(g->comm, ncclGroupEnd(), "NCCL group of ops");
    if (st != TG_OK) {
        group_abort(g, tg_last_error(), 0);
        g->ndeferred = 0; /* their waits report the abort */
        return st;
    }
    for (int i = 0; i < g->ndeferred; i++) {
        struct nccl_req *q = g->deferred[i];
        TG_TRY(record_done(g, q));
        (void)watch_add(g, q->desc);
    }
    g->ndeferred = 0;
    return TG_OK;
}

static tg_status n_split(void *impl, int color, int key, void **out, int *rank, int *size)
{
    struct nccl_group *g = impl;
    ncclComm_t comm = NULL;
    /* a blocking split: with a nonblocking config NCCL 2.28 hands back no
     * communicator handle to poll (seen on 2 H200s); split is a set-up call */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    if (is_aborted(g)) return aborted_error(g, "comm split");
    TG_TRY(tg_device_use((tg_device){TG_CUDA, g->dev}));
    ncclResult_t res = ncclCommSplit(g->comm, color, key, &comm, &cfg);
    tg_status st = settle(g->comm, res, "NCCL comm split");
    if (st == TG_OK && comm) st = settle(comm, ncclInProgress, "NCCL comm split");
    if (st == TG_OK && !comm) st = tg_error(TG_EDEVICE, "NCCL comm split: no communicator for color %d", color);
    struct nccl_group *s = NULL;
    if (st == TG_OK) st = group_new(comm, g->dev, &s);
    if (st != TG_OK) {
        if (comm) (void)ncclCommAbort(comm);
        return st;
    }
    *rank = s->rank;
    *size = s->size;
    *out = s;
    return TG_OK;
}

/* Waits (host) until every op issued on g has completed, or g was aborted,
 * or the timeout passed: the end of a rank's script must not report success
 * while its collectives are still pending or failed. */
static tg_status n_drain(void *impl)
{
    struct nccl_group *g = impl;
    double t0 = tg_comm_now(), limit = tg_comm_timeout();
    for (;;) {
        pthread_mutex_lock(&g->lock);
        int empty = g->watch == NULL;
        pthread_mutex_unlock(&g->lock);
        if (is_aborted(g)) return aborted_error(g, "pending NCCL operations");
        if (empty) return TG_OK;
        if (tg_comm_now() - t0 > limit + 1.0) /* the watchdog aborts first; this is a backstop */
            return tg_error(TG_EDEVICE, "pending NCCL operations on rank %d did not complete within %g s", g->rank, limit);
        sleep_us(1000);
    }
}

static void n_destroy(void *impl)
{
    struct nccl_group *g = impl;
    if (g->thread_on) {
        pthread_mutex_lock(&g->lock);
        g->stop = 1;
        pthread_cond_signal(&g->cond);
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->thread, NULL);
    }
    (void)tg_device_use((tg_device){TG_CUDA, g->dev});
    if (!is_aborted(g)) {
        tg_status st = settle(g->comm, ncclCommFinalize(g->comm), "NCCL finalize");
        if (st == TG_OK) (void)ncclCommDestroy(g->comm);
        else (void)ncclCommAbort(g->comm);
    }
    while (g->watch) {
        struct watch *w = g->watch;
        g->watch = w->next;
        tg_event_free(w->ev);
        free(w);
    }
    free(g->deferred);
    group_free(g);
}

static void n_abort(void *impl) { group_abort(impl, "the job is stopping after an error", 0); }

const struct tg_comm_transport tg_comm_nccl = {
    .name = "nccl",
    .all_reduce = n_all_reduce,
    .reduce_scatter = n_reduce_scatter,
    .all_gather = n_all_gather,
    .broadcast = n_broadcast,
    .send = n_send,
    .recv = n_recv,
    .barrier = n_barrier,
    .test = n_test,
    .wait = n_wait,
    .req_release = n_req_release,
    .split = n_split,
    .destroy = n_destroy,
    .abort = n_abort,
    .group_begin = n_group_begin,
    .group_end = n_group_end,
    .drain = n_drain,
    .stream_spans = 1,
    .capturable = 1,
    .watch_replay = n_watch_replay,
};

#endif /* TG_HAVE_NCCL */
