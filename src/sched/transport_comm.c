/* transport_comm.c — schedule transfers between processes: a small header, then the tensor, by tg_comm_send/recv to the peer stage's rank. */
#include "sched/transport_comm.h"

#include <stdint.h>
#include <string.h>
#include <time.h> /* nanosleep */

#define PIPE_MAGIC 0x54477070 /* "TGpp": both ends speak this transport */

/* A transfer's header: what the receiver allocates, and which transfer it is. */
enum { H_MAGIC, H_BWD, H_CHUNK, H_MB, H_DTYPE, H_DEV, H_NDIM, H_DIM0, HDR_N = H_DIM0 + TG_MAX_DIMS };
/* A plan's summary, compared across ranks before the run. */
enum { P_MAGIC, P_STAGES, P_CHUNKS, P_MBS, P_HASH, PLAN_N };

struct pipe {
    tg_comm *comm;
    int rank, size;
    tg_device hdev;           /* headers: the CPU (over MPI) or comm's CUDA device (NCCL only) */
    tg_tensor *hsend, *hrecv; /* (HDR_N) i32 on hdev */
};

/* Completes r so that the host can read its result: MPI waits on the host
 * anyway (within the timeout); an NCCL op is polled until its event
 * completes (the watchdog aborts it after the timeout, failing the test). */
static tg_status host_complete(struct pipe *pp, tg_comm_req *r)
{
    tg_status st = TG_OK;
    if (pp->hdev.type == TG_CUDA) {
        double t0 = tg_comm_now(), limit = tg_comm_timeout() + 10.0;
        for (;;) {
            int done = 0;
            st = tg_comm_req_test(r, &done);
            if (st != TG_OK || done) break;
            if (tg_comm_now() - t0 > limit) {
                st = tg_error(TG_EDEVICE, "%s did not complete within %g s", tg_comm_req_what(r), limit);
                break;
            }
            struct timespec ts = {0, 50000}; /* 50 us */
            nanosleep(&ts, NULL);
        }
    }
    if (st == TG_OK) st = tg_comm_req_wait(r);
    tg_comm_req_free(r);
    return st;
}

/* FNV-1a over the plan's placement and every stage's actions. */
static uint32_t plan_hash(const tg_sched_plan *p)
{
    uint32_t h = 2166136261u;
#define MIX(v) (h = (h ^ (uint32_t)(v)) * 16777619u)
    for (int c = 0; c < p->nchunks; c++) MIX(p->owner[c]);
    for (int s = 0; s < p->stages; s++) {
        MIX(p->nactions[s]);
        for (int i = 0; i < p->nactions[s]; i++) {
            const struct tg_sched_action *a = &p->actions[s][i];
            MIX(a->op);
            MIX(a->chunk);
            MIX(a->mb);
            MIX(a->peer);
            MIX(a->w);
        }
    }
#undef MIX
    return h;
}

/* All ranks of the pipeline hold the same plan (an all-gather of its summary). */
static tg_status check_same_plan(struct pipe *pp, const tg_sched_plan *p)
{
    int32_t mine[PLAN_N] = {PIPE_MAGIC, p->stages, p->nchunks, p->microbatches, (int32_t)plan_hash(p)};
    int64_t n1 = PLAN_N, nall = (int64_t)PLAN_N * pp->size;
    int32_t *all = malloc((size_t)nall * sizeof *all);
    tg_tensor *in = NULL, *out = NULL;
    tg_comm_req *r = NULL;
    tg_status st = all ? TG_OK : tg_error(TG_ENOMEM, "out of host memory");
    if (st == TG_OK) st = tg_tensor_new(TG_I32, 1, &n1, pp->hdev, &in);
    if (st == TG_OK) st = tg_tensor_new(TG_I32, 1, &nall, pp->hdev, &out);
    if (st == TG_OK) st = tg_tensor_write(in, mine, sizeof mine);
    if (st == TG_OK) st = tg_comm_all_gather(pp->comm, out, in, &r);
    if (st == TG_OK) st = host_complete(pp, r);
    if (st == TG_OK) st = tg_tensor_read(out, all, (size_t)nall * sizeof *all);
    if (st != TG_OK) st = tg_error_prefix(st, "schedule: comparing the plans of the pipeline ranks");
    for (int q = 0; st == TG_OK && q < pp->size; q++) {
        const int32_t *o = &all[q * PLAN_N];
        if (memcmp(o, mine, sizeof mine) == 0) continue;
        if (o[P_MAGIC] != PIPE_MAGIC) {
            st = tg_error(TG_EINVAL, "schedule: rank %d of the pipeline communicator is not running a schedule", q);
            break;
        }
        st = tg_error(TG_EINVAL,
                      "schedule: the pipeline ranks run different plans: rank %d has %d stages, %d chunks, %d "
                      "microbatches (actions hash %08x), rank %d has %d stages, %d chunks, %d microbatches (actions "
                      "hash %08x)",
                      pp->rank, mine[P_STAGES], mine[P_CHUNKS], mine[P_MBS], (uint32_t)mine[P_HASH], q, o[P_STAGES],
                      o[P_CHUNKS], o[P_MBS], (uint32_t)o[P_HASH]);
    }
    tg_tensor_free(in);
    tg_tensor_free(out);
    free(all);
    return st;
}

static const char *what_of(int bwd) { return bwd ? "the input gradient" : "the output"; }

static tg_status p_send(void *ud, const struct tg_sched_xfer *x, const tg_tensor *t)
{
    struct pipe *pp = ud;
    int32_t h[HDR_N] = {PIPE_MAGIC, x->bwd, x->chunk, x->mb, (int32_t)tg_tensor_dtype(t), (int32_t)tg_tensor_device(t).type,
                        tg_tensor_ndim(t)};
    for (int i = 0; i < tg_tensor_ndim(t); i++) {
        if (tg_tensor_dim(t, i) > INT32_MAX)
            return tg_error(TG_EINVAL, "send: dimension %d of %s of chunk %d mb %d is too large (%lld)", i, what_of(x->bwd),
                            x->chunk, x->mb, (long long)tg_tensor_dim(t, i));
        h[H_DIM0 + i] = (int32_t)tg_tensor_dim(t, i);
    }
    tg_tensor *payload = NULL;
    TG_TRY(tg_tensor_write(pp->hsend, h, sizeof h));
    tg_status st = tg_comm_send(pp->comm, pp->hsend, x->to - 1, NULL);
    if (st != TG_OK) return tg_error_prefix(st, "header of the transfer");
    TG_TRY(tg_tensor_ref(t, &payload)); /* the comm API takes a mutable handle; sends only read it */
    st = tg_comm_send(pp->comm, payload, x->to - 1, NULL);
    tg_tensor_free(payload);
    return st;
}

static tg_status p_recv(void *ud, const struct tg_sched_xfer *x, tg_tensor **out)
{
    struct pipe *pp = ud;
    int32_t h[HDR_N];
    tg_comm_req *r = NULL;
    *out = NULL;
    tg_status st = tg_comm_recv(pp->comm, pp->hrecv, x->from - 1, &r);
    if (st == TG_OK) st = host_complete(pp, r);
    if (st == TG_OK) st = tg_tensor_read(pp->hrecv, h, sizeof h);
    if (st != TG_OK) return tg_error_prefix(st, "header of the transfer");
    if (h[H_MAGIC] != PIPE_MAGIC)
        return tg_error(TG_ESTATE, "stage %d sent something that is not a schedule transfer (another call of its rank's "
                                   "is talking to this one)",
                        x->from);
    if (h[H_BWD] != x->bwd || h[H_CHUNK] != x->chunk || h[H_MB] != x->mb)
        return tg_error(TG_ESTATE,
                        "expected %s of chunk %d mb %d, but stage %d sent %s of chunk %d mb %d (the ranks' action "
                        "lists are out of step)",
                        what_of(x->bwd), x->chunk, x->mb, x->from, what_of(h[H_BWD]), h[H_CHUNK], h[H_MB]);
    tg_dtype dt = (tg_dtype)h[H_DTYPE];
    int ndim = h[H_NDIM];
    if (!(dt == TG_F32 || dt == TG_BF16 || dt == TG_I32) || ndim < 0 || ndim > TG_MAX_DIMS ||
        !(h[H_DEV] == TG_CPU || h[H_DEV] == TG_CUDA))
        return tg_error(TG_ESTATE, "stage %d sent a malformed header (dtype %d, %d dims, device type %d)", x->from, h[H_DTYPE],
                        ndim, h[H_DEV]);
    int64_t shape[TG_MAX_DIMS];
    for (int i = 0; i < ndim; i++) shape[i] = h[H_DIM0 + i];
    /* the tensor lands on the same kind of device it left: this rank's NCCL device for CUDA */
    tg_device dev = h[H_DEV] == TG_CUDA ? tg_comm_cuda_device(pp->comm) : (tg_device){TG_CPU, 0};
    if (h[H_DEV] == TG_CUDA && dev.type != TG_CUDA)
        return tg_error(TG_ENOTSUP, "stage %d sends CUDA tensors, and this rank's communicator has no NCCL", x->from);
    tg_tensor *t = NULL;
    TG_TRY(tg_tensor_new(dt, ndim, shape, dev, &t));
    st = tg_comm_recv(pp->comm, t, x->from - 1, NULL);
    if (st != TG_OK) {
        tg_tensor_free(t);
        return st;
    }
    *out = t;
    return TG_OK;
}

static void p_free(void *ud)
{
    struct pipe *pp = ud;
    if (!pp) return;
    tg_tensor_free(pp->hsend);
    tg_tensor_free(pp->hrecv);
    free(pp);
}

tg_status tg_sched_transport_comm(tg_comm *comm, const tg_sched_plan *plan, struct tg_sched_transport *out)
{
    memset(out, 0, sizeof *out);
    int size = tg_comm_size(comm), rank = tg_comm_rank(comm);
    if (size != plan->stages)
        return tg_error(TG_EINVAL,
                        "schedule: the plan has %d stages but the pipeline communicator has %d ranks (stage s runs on its "
                        "rank s-1: pass comm.split{pp=%d}.pp)",
                        plan->stages, size, plan->stages);
    struct pipe *pp = calloc(1, sizeof *pp);
    if (!pp) return tg_error(TG_ENOMEM, "out of host memory");
    pp->comm = comm;
    pp->rank = rank;
    pp->size = size;
    /* CPU headers need MPI; a communicator over NCCL only carries them on its GPU */
    pp->hdev = strncmp(tg_comm_backend(comm), "nccl", 4) == 0 ? tg_comm_cuda_device(comm) : (tg_device){TG_CPU, 0};
    int64_t n = HDR_N;
    tg_status st = tg_tensor_new(TG_I32, 1, &n, pp->hdev, &pp->hsend);
    if (st == TG_OK) st = tg_tensor_new(TG_I32, 1, &n, pp->hdev, &pp->hrecv);
    if (st == TG_OK && size > 1) st = check_same_plan(pp, plan);
    if (st != TG_OK) {
        p_free(pp);
        return st;
    }
    *out = (struct tg_sched_transport){p_send, p_recv, NULL, p_free, pp};
    return TG_OK;
}
