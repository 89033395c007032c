/* comm_mpi.c — the MPI transport for CPU tensors: nonblocking collectives and p2p, polled waits with a timeout. */
#include "dist/comm_impl.h"

#ifdef TG_HAVE_MPI
#include <mpi.h>

#include <sched.h>
#include <string.h>
#include <time.h>

#define TG_MPI_TAG 0x7467 /* p2p tag, + the request's channel: sends and receives match in issue order per pair and channel */

struct mpi_group {
    MPI_Comm comm;
    int rank, size;
};

/* What completes an op: the MPI request, and the finishing work (avg divides
 * the sum; an in-place reduce_scatter lands in a temporary first). */
struct mpi_req {
    MPI_Request req;
    struct mpi_group *g;
    int peer;           /* p2p: the other rank (in g); -1: a collective */
    int avg;            /* divide the result by size */
    tg_tensor *result;  /* what avg divides / tmp is copied into */
    void *tmp;          /* host temporary (reduce_scatter in place) */
};

static int we_initialised;

/* Departures: a rank whose script ends tells every other rank, on a communicator of its own, before
 * MPI_Finalize. A rank waiting on an op that needs a departed rank fails after DEPART_GRACE_S (time
 * for what the departed rank sent last to arrive) instead of waiting out the timeout. */
#define TG_MPI_TAG_DEPART 0x7468
#define DEPART_GRACE_S 3.0
static MPI_Comm ctl = MPI_COMM_NULL;
static MPI_Request ctl_rq = MPI_REQUEST_NULL;
static int ctl_msg, world_rank, world_size;
static double *gone_at; /* per world rank: when its departure was seen (0: still here) */

static void departures_start(void)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (world_size < 2 || ctl != MPI_COMM_NULL) return;
    gone_at = calloc((size_t)world_size, sizeof *gone_at);
    if (!gone_at || MPI_Comm_dup(MPI_COMM_WORLD, &ctl) != MPI_SUCCESS) {
        ctl = MPI_COMM_NULL;
        return;
    }
    MPI_Comm_set_errhandler(ctl, MPI_ERRORS_RETURN);
    if (MPI_Irecv(&ctl_msg, 1, MPI_INT, MPI_ANY_SOURCE, TG_MPI_TAG_DEPART, ctl, &ctl_rq) != MPI_SUCCESS)
        ctl_rq = MPI_REQUEST_NULL;
}

/* Takes in the departures that arrived. */
static void departures_poll(void)
{
    while (ctl_rq != MPI_REQUEST_NULL) {
        int flag = 0;
        MPI_Status stt;
        if (MPI_Test(&ctl_rq, &flag, &stt) != MPI_SUCCESS || !flag) return;
        if (stt.MPI_SOURCE >= 0 && stt.MPI_SOURCE < world_size && gone_at[stt.MPI_SOURCE] == 0)
            gone_at[stt.MPI_SOURCE] = tg_comm_now();
        if (MPI_Irecv(&ctl_msg, 1, MPI_INT, MPI_ANY_SOURCE, TG_MPI_TAG_DEPART, ctl, &ctl_rq) != MPI_SUCCESS)
            ctl_rq = MPI_REQUEST_NULL;
    }
}

/* A departed world rank that the op on g (with peer, or any member when peer < 0) needs, gone for
 * longer than the grace period; -1 when none. */
static int departed_peer(const struct mpi_group *g, int peer)
{
    if (!gone_at) return -1;
    departures_poll();
    double now = tg_comm_now();
    MPI_Group wg, gg;
    int found = -1;
    for (int r = 0; r < world_size && found < 0; r++) {
        if (gone_at[r] == 0 || now - gone_at[r] < DEPART_GRACE_S) continue;
        int in_g = MPI_UNDEFINED;
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Comm_group(g->comm, &gg);
        MPI_Group_translate_ranks(wg, 1, &r, gg, &in_g);
        MPI_Group_free(&wg);
        MPI_Group_free(&gg);
        if (in_g != MPI_UNDEFINED && (peer < 0 || in_g == peer)) found = r;
    }
    return found;
}

/* Tells the other ranks this one is leaving (its script ended), then stops listening. */
static void departures_end(void)
{
    if (ctl == MPI_COMM_NULL) return;
    MPI_Request *rq = calloc((size_t)world_size, sizeof *rq);
    int n = 0;
    for (int r = 0; rq && r < world_size; r++)
        if (r != world_rank && MPI_Isend(&world_rank, 1, MPI_INT, r, TG_MPI_TAG_DEPART, ctl, &rq[n]) == MPI_SUCCESS) n++;
    double t0 = tg_comm_now();
    int all = 0;
    while (n > 0 && !all && tg_comm_now() - t0 < 2.0) {
        if (MPI_Testall(n, rq, &all, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
        if (!all) sched_yield();
    }
    for (int i = 0; !all && i < n; i++)
        if (rq[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&rq[i]);
            MPI_Request_free(&rq[i]);
        }
    free(rq);
    if (ctl_rq != MPI_REQUEST_NULL) {
        MPI_Cancel(&ctl_rq);
        MPI_Wait(&ctl_rq, MPI_STATUS_IGNORE);
    }
    MPI_Comm_free(&ctl);
    free(gone_at);
    gone_at = NULL;
}
static MPI_Datatype bf16_type = MPI_DATATYPE_NULL;
static MPI_Op bf16_op[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}; /* sum, max, min */

static tg_status mpi_fail(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    return tg_error(TG_EDEVICE, "%s: %s", what, msg);
}

#define MPI_TRY(call, what)                                                                            \
    do {                                                                                               \
        int tg_mpi_rc_ = (call);                                                                       \
        if (tg_mpi_rc_ != MPI_SUCCESS) return mpi_fail(tg_mpi_rc_, what);                              \
    } while (0)

/* bf16 reductions: each step rounds through f32, like NCCL's bf16 sum. */
static void bf16_reduce(void *in, void *inout, int *len, int kind)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) {
        float x = tg_bf16_to_f32(a[i]), y = tg_bf16_to_f32(b[i]);
        float r = kind == 0 ? x + y : kind == 1 ? (x > y ? x : y) : (x < y ? x : y);
        b[i] = tg_f32_to_bf16(r);
    }
}
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)dt, bf16_reduce(in, inout, len, 0); }
static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)dt, bf16_reduce(in, inout, len, 1); }
static void bf16_min(void *in, void *inout, int *len, MPI_Datatype *dt) { (void)dt, bf16_reduce(in, inout, len, 2); }

static tg_status types_init(void)
{
    if (bf16_type != MPI_DATATYPE_NULL) return TG_OK;
    MPI_TRY(MPI_Type_contiguous(2, MPI_BYTE, &bf16_type), "MPI_Type_contiguous");
    MPI_TRY(MPI_Type_commit(&bf16_type), "MPI_Type_commit");
    MPI_TRY(MPI_Op_create(bf16_sum, 1, &bf16_op[0]), "MPI_Op_create");
    MPI_TRY(MPI_Op_create(bf16_max, 1, &bf16_op[1]), "MPI_Op_create");
    MPI_TRY(MPI_Op_create(bf16_min, 1, &bf16_op[2]), "MPI_Op_create");
    return TG_OK;
}

static MPI_Datatype type_of(tg_dtype dt)
{
    switch (dt) {
    case TG_F32: return MPI_FLOAT;
    case TG_BF16: return bf16_type;
    case TG_I32: return MPI_INT;
    default: TG_ASSERT(!"dtype checked by comm.c");
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op op_of(tg_dtype dt, tg_comm_op op)
{
    int k = op == TG_COMM_MAX ? 1 : op == TG_COMM_MIN ? 2 : 0; /* avg: a sum, divided at completion */
    if (dt == TG_BF16) return bf16_op[k];
    return k == 1 ? MPI_MAX : k == 2 ? MPI_MIN : MPI_SUM;
}

static tg_status group_new(MPI_Comm comm, struct mpi_group **out)
{
    struct mpi_group *g = calloc(1, sizeof *g);
    if (!g) return tg_error(TG_ENOMEM, "out of host memory");
    g->comm = comm;
    /* errors come back as codes (and then Lua errors) instead of aborting */
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &g->rank);
    MPI_Comm_size(comm, &g->size);
    *out = g;
    return TG_OK;
}

tg_status tg_mpi_world(void **impl, int *rank, int *size, int *local_rank, int *local_size)
{
    int inited = 0, provided;
    MPI_Comm dup;
    struct mpi_group *g;
    MPI_Initialized(&inited);
    if (!inited) {
        MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
        we_initialised = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    TG_TRY(types_init());
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
    departures_start();
    TG_TRY(group_new(dup, &g));
    *rank = g->rank;
    *size = g->size;
    TG_TRY(tg_mpi_local(g, local_rank, local_size));
    *impl = g;
    return TG_OK;
}

tg_status tg_mpi_local(void *impl, int *local_rank, int *local_size)
{
    struct mpi_group *g = impl;
    MPI_Comm node;
    MPI_TRY(MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    MPI_Comm_rank(node, local_rank);
    MPI_Comm_size(node, local_size);
    MPI_Comm_free(&node);
    return TG_OK;
}

/* Polls r until it completes or the timeout passes (never blocks inside MPI,
 * so a dead or missing peer turns into an error, not a hang). tag >= 0: returns early with *arrived = 1
 * when a message with that tag from peer is waiting. */
static tg_status poll_wait_or(MPI_Request *rq, const char *desc, const struct mpi_group *g, int peer, int tag,
                              int *arrived)
{
    double t0 = tg_comm_now(), limit = tg_comm_timeout();
    unsigned spins = 0;
    for (;;) {
        int flag = 0;
        int rc = MPI_Test(rq, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, desc);
        if (flag) return TG_OK;
        if (tag >= 0) {
            int there = 0;
            if (MPI_Iprobe(peer, tag, g->comm, &there, MPI_STATUS_IGNORE) == MPI_SUCCESS && there) {
                *arrived = 1;
                return TG_OK;
            }
        }
        if (++spins < 2000) {
            sched_yield();
            continue;
        }
        int gone = departed_peer(g, peer);
        if (gone >= 0)
            return tg_error(TG_EDEVICE,
                            "%s on rank %d of %d cannot complete: rank %d left the job (its script ended) %g s ago "
                            "without making this call",
                            desc, g->rank, g->size, gone, tg_comm_now() - gone_at[gone]);
        if (tg_comm_now() - t0 > limit)
            return tg_error(TG_EDEVICE,
                            "%s on rank %d of %d did not complete within %g s: another rank died, failed or did not "
                            "reach the same call (timeout: TG_COMM_TIMEOUT or tg.comm.init{timeout=})",
                            desc, g->rank, g->size, limit);
        struct timespec ts = {0, 100000}; /* 0.1 ms */
        nanosleep(&ts, NULL);
    }
}

static tg_status poll_wait(MPI_Request *rq, const char *desc, const struct mpi_group *g, int peer)
{
    return poll_wait_or(rq, desc, g, peer, -1, NULL);
}

tg_status tg_mpi_bcast_bytes(void *impl, void *buf, size_t n, int root)
{
    struct mpi_group *g = impl;
    MPI_Request rq;
    MPI_TRY(MPI_Ibcast(buf, (int)n, MPI_BYTE, root, g->comm, &rq), "broadcast of the NCCL id");
    return poll_wait(&rq, "broadcast of the NCCL id", g, -1);
}

static tg_status req_start(struct mpi_group *g, struct tg_comm_req *r, struct mpi_req **out)
{
    struct mpi_req *m = calloc(1, sizeof *m);
    *out = NULL;
    if (!m) return tg_error(TG_ENOMEM, "out of host memory");
    m->req = MPI_REQUEST_NULL;
    m->g = g;
    m->peer = -1;
    r->impl = m;
    *out = m;
    return TG_OK;
}

/* An op that failed to issue leaves no request behind. */
static tg_status issued(struct tg_comm_req *r, int rc)
{
    if (rc == MPI_SUCCESS) return TG_OK;
    struct mpi_req *m = r->impl;
    free(m->tmp);
    free(m);
    r->impl = NULL;
    return mpi_fail(rc, r->desc);
}

static int count_of(const tg_tensor *t)
{
    int64_t n = tg_tensor_numel(t);
    TG_ASSERT(n <= INT32_MAX);
    return (int)n;
}

static tg_status m_all_reduce(void *impl, tg_tensor *t, tg_comm_op op, struct tg_comm_req *r)
{
    struct mpi_group *g = impl;
    struct mpi_req *m = NULL;
    if (tg_tensor_numel(t) > INT32_MAX) return tg_error(TG_EINVAL, "%s: more than 2^31 elements", r->desc);
    TG_TRY(req_start(g, r, &m));
    m->avg = op == TG_COMM_AVG;
    m->result = r->keep[0]; /* the request's own handle: the caller's may go first */
    return issued(r, MPI_Iallreduce(MPI_IN_PLACE, tg_tensor_data(t), count_of(t), type_of(t->dtype),
                                    op_of(t->dtype, op), g->comm, &m->req));
}

static tg_status m_reduce_scatter(void *impl, tg_tensor *out, tg_tensor *in, tg_comm_op op, struct tg_comm_req *r)
{
    struct mpi_group *g = impl;
    struct mpi_req *m = NULL;
    if (tg_tensor_numel(in) > INT32_MAX) return tg_error(TG_EINVAL, "%s: more than 2^31 elements", r->desc);
    TG_TRY(req_start(g, r, &m));
    m->avg = op == TG_COMM_AVG;
    m->result = r->keep[0];
    void *dst = tg_tensor_data(out);
    if (out->storage == in->storage) { /* in place (comm.c checked it is this rank's slice): via a temporary */
        m->tmp = malloc(tg_tensor_bytes(out) ? tg_tensor_bytes(out) : 1);
        if (!m->tmp) return issued(r, MPI_ERR_NO_MEM);
        dst = m->tmp;
    }
    return issued(r, MPI_Ireduce_scatter_block(tg_tensor_data(in), dst, count_of(out), type_of(in->dtype),
                                               op_of(in->dtype, op), g->comm, &m->req));
}

static tg_status m_all_gather(void *impl, tg_tensor *out, tg_tensor *in, struct tg_comm_req *r)
{
    struct mpi_group *g = impl;
    struct mpi_req *m = NULL;
    if (tg_tensor_numel(out) > INT32_MAX) return tg_error(TG_EINVAL, "%s: more than 2^31 elements", r->desc);
    TG_TRY(req_start(g, r, &m));
    /* MPI_IN_PLACE only when in is exactly this rank's slice of out; other
     * (non-overlapping) parts of the same storage are sent from where they are */
    int in_place = out->storage == in->storage && in->offset == out->offset + (int64_t)g->rank * tg_tensor_numel(in);
    const void *src = in_place ? MPI_IN_PLACE : tg_tensor_data(in);
    return issued(r, MPI_Iallgather(src, count_of(in), type_of(in->dtype), tg_tensor_data(out), count_of(in),
                                    type_of(in->dtype), g->comm, &m->req));
}

static tg_status m_broadcast(void *impl, tg_tensor *t, int root, struct tg_comm_req *r)
{
    struct mpi_group *g = impl;
    struct mpi_req *m = NULL;
    TG_TRY(req_start(g, r, &m));
    return issued(r, MPI_Ibcast(tg_tensor_data(t), count_of(t), type_of(t->dtype), root, g->comm, &m->req));
}

static tg_status m_send(void *impl, tg_tensor *t, int peer, struct tg_comm_req *r)
{
    struct mpi_group *g = impl;
    struct mpi_req *m = NULL;
    TG_TRY(req_start(g, r, &m));
    m->peer = peer;
    return issued(r, MPI_Isend(tg_tensor_data(t), count_of(t), type_of(t->dtype), peer, TG_MPI_TAG + r->channel, g->comm,
                            &m->req));
}

static tg_status m_recv(void *impl, tg_tensor *t, int peer, struct tg_comm_req *r)
{
    struct mpi_group *g = impl;
    struct mpi_req *m = NULL;
    TG_TRY(req_start(g, r, &m));
    m->peer = peer;
    return issued(r, MPI_Irecv(tg_tensor_data(t), count_of(t), type_of(t->dtype), peer, TG_MPI_TAG + r->channel, g->comm,
                            &m->req));
}

static tg_status m_barrier(void *impl)
{
    struct mpi_group *g = impl;
    MPI_Request rq;
    MPI_TRY(MPI_Ibarrier(g->comm, &rq), "barrier");
    return poll_wait(&rq, "barrier", g, -1);
}

/* The finishing work of a completed op. */
static void finish(struct mpi_req *m)
{
    tg_tensor *t = m->result;
    if (m->tmp) {
        memcpy(tg_tensor_data(t), m->tmp, tg_tensor_bytes(t));
        free(m->tmp);
        m->tmp = NULL;
    }
    if (m->avg) {
        int64_t n = tg_tensor_numel(t);
        float d = (float)m->g->size;
        if (t->dtype == TG_F32) {
            float *x = tg_tensor_data(t);
            for (int64_t i = 0; i < n; i++) x[i] /= d;
        } else {
            uint16_t *x = tg_tensor_data(t);
            for (int64_t i = 0; i < n; i++) x[i] = tg_f32_to_bf16(tg_bf16_to_f32(x[i]) / d);
        }
        m->avg = 0;
    }
}

static tg_status m_test(struct tg_comm_req *r, int *done)
{
    struct mpi_req *m = r->impl;
    int rc = MPI_Test(&m->req, done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, r->desc);
    if (*done) finish(m);
    return TG_OK;
}

static tg_status m_wait(struct tg_comm_req *r)
{
    struct mpi_req *m = r->impl;
    TG_TRY(poll_wait(&m->req, r->desc, m->g, m->peer));
    finish(m);
    return TG_OK;
}

static tg_status m_wait_or_arrival(struct tg_comm_req *r, int channel, int *arrived)
{
    struct mpi_req *m = r->impl;
    *arrived = 0;
    TG_TRY(poll_wait_or(&m->req, r->desc, m->g, m->peer, TG_MPI_TAG + channel, arrived));
    if (!*arrived) finish(m);
    return TG_OK;
}

static void m_req_release(struct tg_comm_req *r)
{
    struct mpi_req *m = r->impl;
    if (!m) return;
    if (r->failed) return; /* MPI may still write into the buffers: leave them (the job is failing) */
    free(m->tmp);
    free(m);
    r->impl = NULL;
}

static tg_status m_split(void *impl, int color, int key, void **out, int *rank, int *size)
{
    struct mpi_group *g = impl, *s;
    MPI_Comm c;
    MPI_TRY(MPI_Comm_split(g->comm, color, key, &c), "comm split");
    tg_status st = group_new(c, &s);
    if (st != TG_OK) {
        MPI_Comm_free(&c);
        return st;
    }
    *rank = s->rank;
    *size = s->size;
    *out = s;
    return TG_OK;
}

static void m_destroy(void *impl)
{
    struct mpi_group *g = impl;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&g->comm);
    free(g);
}

static void m_abort(void *impl) { (void)impl; }

void tg_mpi_abort_job(int code)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) MPI_Abort(MPI_COMM_WORLD, code);
}

void tg_mpi_finalize(void)
{
    int fin = 0;
    if (!we_initialised) return;
    MPI_Finalized(&fin);
    if (fin) return;
    departures_end();
    if (bf16_type != MPI_DATATYPE_NULL) {
        for (int i = 0; i < 3; i++) MPI_Op_free(&bf16_op[i]);
        MPI_Type_free(&bf16_type);
    }
    MPI_Finalize();
}

const struct tg_comm_transport tg_comm_mpi = {
    .name = "mpi",
    .all_reduce = m_all_reduce,
    .reduce_scatter = m_reduce_scatter,
    .all_gather = m_all_gather,
    .broadcast = m_broadcast,
    .send = m_send,
    .recv = m_recv,
    .barrier = m_barrier,
    .test = m_test,
    .wait = m_wait,
    .wait_or_arrival = m_wait_or_arrival,
    .req_release = m_req_release,
    .split = m_split,
    .destroy = m_destroy,
    .abort = m_abort,
    .channels = 1,
};

#endif /* TG_HAVE_MPI */
