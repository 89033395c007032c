/* comm.c — communicators: world setup from the launcher's environment, argument checks, dispatch to MPI / NCCL, requests. */
#include "trace/trace.h"
#include "dist/comm_impl.h"
#include "nn/nn.h"
#include "core/debug.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static tg_comm *world;
static tg_comm *live;          /* every live communicator (world included) */
static tg_comm_req *live_reqs; /* every request not yet freed */
static double timeout_s = -1;  /* < 0: not read from the environment yet */
static int finalized;

/* ------------------------------------------------------------------ small helpers */
double tg_comm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const op_names[] = {"sum", "avg", "max", "min"};

int tg_comm_op_parse(const char *s, tg_comm_op *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, op_names[i]) == 0) {
            *out = (tg_comm_op)i;
            return 0;
        }
    return -1;
}

const char *tg_comm_op_name(tg_comm_op op) { return (unsigned)op < 4 ? op_names[op] : "?"; }

double tg_comm_timeout(void)
{
    if (timeout_s < 0) {
        const char *e = getenv("TG_COMM_TIMEOUT");
        char *end;
        double v = e ? strtod(e, &end) : 0;
        timeout_s = (e && end != e && v > 0) ? v : 600.0;
    }
    return timeout_s;
}

void tg_comm_set_timeout(double seconds)
{
    if (seconds > 0) timeout_s = seconds;
}


/* Departures told by the launcher: it writes "R\n" on this rank's pipe (fd TG_DEPARTED_FD) when
 * rank R exits successfully while others still run. */
static pthread_mutex_t departed_lock = PTHREAD_MUTEX_INITIALIZER;
static int departed_fd = -2; /* -2: not read from the environment yet; -1: none */
static int departed_rank = -1;
static double departed_since;

int tg_comm_departed(double *since)
{
    pthread_mutex_lock(&departed_lock);
    if (departed_fd == -2) {
        const char *e = getenv("TG_DEPARTED_FD");
        departed_fd = e && *e ? atoi(e) : -1;
        if (departed_fd >= 0 && fcntl(departed_fd, F_SETFL, fcntl(departed_fd, F_GETFL) | O_NONBLOCK) != 0)
            departed_fd = -1;
    }
    char buf[64];
    ssize_t n;
    while (departed_fd >= 0 && departed_rank < 0 && (n = read(departed_fd, buf, sizeof buf - 1)) > 0) {
        buf[n] = '\0';
        departed_rank = atoi(buf);
        departed_since = tg_comm_now();
    }
    int r = departed_rank;
    if (since) *since = departed_since;
    pthread_mutex_unlock(&departed_lock);
    return r;
}

/* Started by an MPI launcher (mpirun, mpiexec, srun with PMI). */
static int under_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static void link_comm(tg_comm *c)
{
    c->next = live;
    live = c;
}

static void unlink_comm(tg_comm *c)
{
    for (tg_comm **pp = &live; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            return;
        }
}

static void destroy_comm(tg_comm *c)
{
    unlink_comm(c);
    if (c->nccl) c->nccl_tr->destroy(c->nccl);
    if (c->mpi) c->mpi_tr->destroy(c->mpi);
    free(c->checked);
    free(c->p2p_count);
    free(c);
}

static void release_comm(tg_comm *c)
{
    if (c && --c->refcount == 0) destroy_comm(c);
}

/* ------------------------------------------------------------------ the world */
#ifdef TG_HAVE_NCCL
static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* NCCL on the GPU of this local rank, its id from the launcher or over MPI. */
#ifdef TG_HAVE_MPI
/* Rank 0 of an MPI group makes an NCCL id; every rank gets it by broadcast. */
static tg_status nccl_id_over_mpi(void *mpi, int rank, unsigned char id[TG_NCCL_ID_BYTES])
{
    if (rank == 0) TG_TRY(tg_nccl_get_id(id));
    return tg_mpi_bcast_bytes(mpi, id, TG_NCCL_ID_BYTES, 0);
}
#endif

static tg_status world_nccl(tg_comm *c)
{
    int ndev = tg_device_count(TG_CUDA);
    const char *dev_env = getenv("TG_DEVICE");
    if (ndev == 0 || c->size == 1) return TG_OK;
    if (dev_env && strcmp(dev_env, "cpu") == 0) return TG_OK;
    if (c->local_size > ndev)
        return tg_error(TG_EINVAL,
                        "NCCL setup: %d ranks on this host but %d GPU(s) visible: NCCL needs a GPU of its own per rank; "
                        "run fewer ranks, or the ranks on the CPU (--device cpu or TG_DEVICE=cpu)",
                        c->local_size, ndev);
    int dev = (c->local_rank >= 0 ? c->local_rank : c->rank) % ndev;
    char name[32];
    /* Tensors of this rank default to its GPU (respecting CUDA_VISIBLE_DEVICES). */
    snprintf(name, sizeof name, "cuda:%d", dev);
    if (!dev_env || strncmp(dev_env, "cuda", 4) == 0) setenv("TG_DEVICE", name, 1);
    unsigned char id[TG_NCCL_ID_BYTES];
    const char *hex = getenv("TG_NCCL_ID");
    if (hex && *hex) {
        if (strlen(hex) != 2 * TG_NCCL_ID_BYTES)
            return tg_error(TG_EINVAL, "TG_NCCL_ID: expected %d hex digits, got %zu", 2 * TG_NCCL_ID_BYTES, strlen(hex));
        for (int i = 0; i < TG_NCCL_ID_BYTES; i++) {
            int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
            if (hi < 0 || lo < 0) return tg_error(TG_EINVAL, "TG_NCCL_ID: not a hex string");
            id[i] = (unsigned char)(hi << 4 | lo);
        }
    } else {
#ifdef TG_HAVE_MPI
        if (!c->mpi)
            return tg_error(TG_ESTATE, "NCCL setup: %d ranks but no NCCL id (TG_NCCL_ID) and no MPI to share one",
                            c->size);
        TG_TRY(nccl_id_over_mpi(c->mpi, c->rank, id));
#else
        return tg_error(TG_ESTATE, "NCCL setup: %d ranks but no NCCL id (TG_NCCL_ID): start with tegraph run -n",
                        c->size);
#endif
    }
    TG_TRY(tg_nccl_init(id, c->rank, c->size, dev, &c->nccl));
    c->nccl_tr = &tg_comm_nccl;
    c->cuda_dev = (tg_device){TG_CUDA, dev};
    return TG_OK;
}
#endif

static tg_status check_creation(tg_comm *c, const char *what);

static void finalize_at_exit(void) { tg_world_finalize(); }

int tg_comm_world_ready(void) { return world != NULL; }

tg_status tg_comm_world(tg_comm **out)
{
    *out = NULL;
    if (world) {
        *out = world;
        return TG_OK;
    }
    if (finalized) return tg_error(TG_ESTATE, "comm: the world communicator was finalised");
    tg_comm *c = calloc(1, sizeof *c);
    if (!c) return tg_error(TG_ENOMEM, "out of host memory");
    c->refcount = 1;
    c->is_world = 1;
    c->cuda_dev = (tg_device){TG_CPU, 0};
    c->rank = tg_launch_env(TG_ENV_RANK, 0);
    c->size = tg_launch_env(TG_ENV_WORLD_SIZE, 1);
    c->local_rank = tg_launch_env(TG_ENV_LOCAL_RANK, c->rank);
    c->local_size = tg_launch_env(TG_ENV_LOCAL_SIZE, c->size);
    tg_status st = TG_OK;
    if (under_mpi()) {
#ifdef TG_HAVE_MPI
        st = tg_mpi_world(&c->mpi, &c->rank, &c->size, &c->local_rank, &c->local_size);
        if (st == TG_OK) c->mpi_tr = &tg_comm_mpi;
#else
        if (c->size > 1)
            st = tg_error(TG_ENOTSUP, "comm: started by an MPI launcher (%d ranks) but this tegraph was built without MPI",
                          c->size);
#endif
    }
    if (c->rank < 0 || c->size < 1 || c->rank >= c->size)
        st = tg_error(TG_EINVAL, "comm: rank %d of %d from the environment is not valid", c->rank, c->size);
    if (st == TG_OK) {
        static int registered;
        if (!registered) atexit(finalize_at_exit);
        registered = 1;
        link_comm(c);
    }
#ifdef TG_HAVE_NCCL
    if (st == TG_OK) st = world_nccl(c);
#endif
    if (st == TG_OK && c->size > 1 && !c->mpi && !c->nccl)
        st = tg_error(TG_ENOTSUP,
                      "comm: %d ranks (TG_WORLD_SIZE) but no transport between them: CPU ranks need MPI (start them "
                      "with mpirun, or `tegraph run -n N` in a build with MPI); GPU ranks need NCCL and a visible GPU",
                      c->size);
    if (st != TG_OK) {
        unlink_comm(c);
        if (c->nccl) c->nccl_tr->destroy(c->nccl);
        /* an MPI world stays initialised: MPI cannot be set up twice */
        free(c);
        return st;
    }
    world = c;
    *out = c;
    return check_creation(c, "comm world");
}

int tg_comm_rank(const tg_comm *c) { return c->rank; }
int tg_comm_size(const tg_comm *c) { return c->size; }
int tg_comm_local_rank(const tg_comm *c) { return c->local_rank; }
int tg_comm_local_size(const tg_comm *c) { return c->local_size; }
tg_device tg_comm_cuda_device(const tg_comm *c) { return c->cuda_dev; }

const char *tg_comm_backend(const tg_comm *c)
{
    if (c->mpi && c->nccl) return "mpi+nccl";
    if (c->mpi) return "mpi";
    if (c->nccl) return "nccl";
    return "self";
}

/* ------------------------------------------------------------------ sub-communicators */
#ifdef TG_HAVE_NCCL
/* A split with NCCL but no MPI (tegraph run -n on GPUs): every rank learns every
 * rank's (color, key), then each group's first rank shares a fresh NCCL id,
 * both through all-gathers on the parent. (ncclCommSplit gave no communicator
 * with NCCL 2.28 on 2 H200s.) Groups of one rank need no NCCL communicator. */
static tg_status nccl_split_by_exchange(tg_comm *c, int color, int key, tg_comm *s)
{
    enum { IDW = TG_NCCL_ID_BYTES / 4 }; /* the id as 32-bit words */
    int n = c->size;
    tg_device dev = c->cuda_dev;
    int64_t n2 = 2, all2 = 2 * (int64_t)n, nid = IDW, allid = (int64_t)IDW * n;
    tg_tensor *mine = NULL, *all = NULL, *idm = NULL, *ida = NULL;
    int32_t *ck = malloc(sizeof(int32_t) * 2 * (size_t)n), *ids = malloc(sizeof(int32_t) * IDW * (size_t)n);
    int32_t v[2] = {color, key}, myid[IDW];
    tg_status st = ck && ids ? TG_OK : tg_error(TG_ENOMEM, "out of host memory");
    if (st == TG_OK) st = tg_tensor_new(TG_I32, 1, &n2, dev, &mine);
    if (st == TG_OK) st = tg_tensor_new(TG_I32, 1, &all2, dev, &all);
    if (st == TG_OK) st = tg_tensor_write(mine, v, sizeof v);
    if (st == TG_OK) st = tg_comm_all_gather(c, all, mine, NULL);
    if (st == TG_OK) st = tg_tensor_read(all, ck, sizeof(int32_t) * 2 * (size_t)n);
    int size = 0, me = 0, leader = -1;
    for (int r = 0; st == TG_OK && r < n; r++) {
        if (ck[2 * r] != color) continue;
        /* my place: members before me in (key, rank) order */
        if (r != c->rank && (ck[2 * r + 1] < key || (ck[2 * r + 1] == key && r < c->rank))) me++;
        if (leader < 0 || ck[2 * r + 1] < ck[2 * leader + 1]) leader = r;
        size++;
    }
    if (st == TG_OK && size > 1) {
        memset(myid, 0, sizeof myid);
        if (c->rank == leader) st = tg_nccl_get_id((unsigned char *)myid);
        if (st == TG_OK) st = tg_tensor_new(TG_I32, 1, &nid, dev, &idm);
        if (st == TG_OK) st = tg_tensor_new(TG_I32, 1, &allid, dev, &ida);
        if (st == TG_OK) st = tg_tensor_write(idm, myid, sizeof myid);
        if (st == TG_OK) st = tg_comm_all_gather(c, ida, idm, NULL);
        if (st == TG_OK) st = tg_tensor_read(ida, ids, sizeof(int32_t) * IDW * (size_t)n);
        if (st == TG_OK)
            st = tg_nccl_init((const unsigned char *)(ids + (size_t)IDW * leader), me, size, dev.index, &s->nccl);
        if (st == TG_OK) s->nccl_tr = c->nccl_tr;
    }
    if (st == TG_OK) {
        s->rank = me;
        s->size = size;
    }
    tg_tensor_free(mine);
    tg_tensor_free(all);
    tg_tensor_free(idm);
    tg_tensor_free(ida);
    free(ck);
    free(ids);
    return st;
}
#endif

static tg_status check_split(tg_comm *c);

tg_status tg_comm_split(tg_comm *c, int color, int key, tg_comm **out)
{
    *out = NULL;
    if (finalized) return tg_error(TG_ESTATE, "comm split: the communicators were finalised");
    if (color < 0) return tg_error(TG_EINVAL, "comm split: color must be >= 0 (got %d)", color);
    /* the transports' splits block until every rank calls them: compared first, within the timeout */
    TG_TRY(check_split(c));
    tg_comm *s = calloc(1, sizeof *s);
    if (!s) return tg_error(TG_ENOMEM, "out of host memory");
    s->refcount = 1;
    s->cuda_dev = c->cuda_dev;
    s->rank = 0;
    s->size = 1;
    tg_status st = TG_OK;
    int r = 0, n = 1;
    if (c->mpi) {
        st = c->mpi_tr->split(c->mpi, color, key, &s->mpi, &r, &n);
        if (st == TG_OK) {
            s->mpi_tr = c->mpi_tr;
            s->rank = r;
            s->size = n;
        }
    }
#if defined(TG_HAVE_MPI) && defined(TG_HAVE_NCCL)
    /* With MPI at hand, the group's NCCL communicator is made like the world's:
     * a fresh id shared over the MPI sub-communicator (ncclCommSplit gave no
     * communicator with NCCL 2.28 on 2 H200s). A group of one needs none. */
    if (st == TG_OK && c->nccl && s->mpi) {
        if (s->size > 1) {
            unsigned char id[TG_NCCL_ID_BYTES];
            st = nccl_id_over_mpi(s->mpi, s->rank, id);
            if (st == TG_OK) st = tg_nccl_init(id, s->rank, s->size, c->cuda_dev.index, &s->nccl);
            if (st == TG_OK) s->nccl_tr = c->nccl_tr;
        }
    } else
#endif
#ifdef TG_HAVE_NCCL
    if (st == TG_OK && c->nccl && !c->mpi) {
        st = nccl_split_by_exchange(c, color, key, s);
    } else
#endif
    if (st == TG_OK && c->nccl) {
        st = c->nccl_tr->split(c->nccl, color, key, &s->nccl, &r, &n);
        if (st == TG_OK) {
            s->nccl_tr = c->nccl_tr;
            if (s->mpi && (r != s->rank || n != s->size))
                st = tg_error(TG_EDEVICE, "comm split: MPI and NCCL disagree (rank %d of %d vs %d of %d)", s->rank,
                              s->size, r, n);
            s->rank = r;
            s->size = n;
        }
    }
    if (st == TG_OK && c->size > 1 && !c->mpi && !c->nccl) st = tg_error(TG_ESTATE, "comm split: no transport");
    s->local_rank = s->rank;
    s->local_size = s->size;
#ifdef TG_HAVE_MPI
    if (st == TG_OK && s->mpi) st = tg_mpi_local(s->mpi, &s->local_rank, &s->local_size);
#endif
    if (st != TG_OK) {
        if (s->nccl) s->nccl_tr->destroy(s->nccl);
        if (s->mpi) s->mpi_tr->destroy(s->mpi);
        free(s);
        return st;
    }
    link_comm(s);
    *out = s;
    return check_creation(s, "comm split");
}

void tg_comm_free(tg_comm *c)
{
    if (!c || c->is_world) return;
    release_comm(c);
}

/* ------------------------------------------------------------------ argument checks */
static int dtype_ok(tg_dtype dt) { return dt == TG_F32 || dt == TG_BF16 || dt == TG_I32; }

static void describe(char *buf, size_t n, const char *what, const tg_tensor *t, const char *extra)
{
    char dev[32];
    snprintf(buf, n, "%s of %lld %s%s on %s", what, (long long)tg_tensor_numel(t), tg_dtype_name(t->dtype),
             extra ? extra : "", tg_device_str(tg_tensor_device(t), dev, sizeof dev));
}

/* The transport for t (NULL on a one-rank communicator). */
/* cap (NULL: the op cannot be captured, p2p): set to 1 when t's device captures and the op is to be
 * recorded into the capture (CPU: host work run at each replay; CUDA: NCCL on the capturing stream). */
static tg_status pick(tg_comm *c, const char *what, const tg_tensor *t, const struct tg_comm_transport **tr, void **impl,
                      int *cap)
{
    char dev[32];
    tg_device d = tg_tensor_device(t);
    *tr = NULL;
    *impl = NULL;
    if (cap) *cap = 0;
    if (finalized) return tg_error(TG_ESTATE, "%s: the communicators were finalised", what);
    if (!dtype_ok(t->dtype))
        return tg_error(TG_EINVAL, "%s: dtype %s is not supported (f32, bf16 or i32)", what, tg_dtype_name(t->dtype));
    if (c->size == 1) return TG_OK; /* one rank: nothing is issued, so a capture may hold the call (a full-iteration step) */
    if (tg_device_capturing(d)) {
        if (!cap)
            return tg_error(TG_ECAPTURE,
                            "%s: not allowed while %s captures (stream '%s'): sends, receives and barriers are not "
                            "captured; issue it outside the capture",
                            what, tg_device_str(d, dev, sizeof dev), tg_device_capturer_name(d));
        tg_stream *s = tg_stream_current(d);
        if (!s || !tg_stream_capturing(s))
            return tg_error(TG_ECAPTURE,
                            "%s: %s captures on stream '%s' but the current stream is '%s': issue the collective on "
                            "the capturing stream",
                            what, tg_device_str(d, dev, sizeof dev), tg_device_capturer_name(d), s ? s->name : "(none)");
        if (c->group_depth > 0)
            return tg_error(TG_ECAPTURE, "%s: not allowed inside a group of ops while %s captures (stream '%s')", what,
                            tg_device_str(d, dev, sizeof dev), tg_device_capturer_name(d));
        *cap = 1;
    }
    if (d.type == TG_CPU) {
        if (!c->mpi)
            return tg_error(TG_ENOTSUP,
                            "%s: a CPU tensor needs MPI, and this communicator runs over NCCL only (use CUDA tensors, "
                            "or start the ranks with mpirun)",
                            what);
        *tr = c->mpi_tr;
        *impl = c->mpi;
        return TG_OK;
    }
    if (!c->nccl)
        return tg_error(TG_ENOTSUP, "%s: a CUDA tensor (%s) needs NCCL, and this communicator has %s", what,
                        tg_device_str(d, dev, sizeof dev), c->mpi ? "MPI only (CPU tensors)" : "no NCCL");
    if (d.index != c->cuda_dev.index) {
        char mine[32];
        return tg_error(TG_EINVAL, "%s: the tensor is on %s but this rank's NCCL communicator is on %s", what,
                        tg_device_str(d, dev, sizeof dev), tg_device_str(c->cuda_dev, mine, sizeof mine));
    }
    if (cap && *cap && !c->nccl_tr->capturable)
        return tg_error(TG_ECAPTURE, "%s: the %s transport cannot issue collectives while %s captures", what,
                        c->nccl_tr->name, tg_device_str(d, dev, sizeof dev));
    *tr = c->nccl_tr;
    *impl = c->nccl;
    return TG_OK;
}

static int same_device(const tg_tensor *a, const tg_tensor *b)
{
    tg_device x = tg_tensor_device(a), y = tg_tensor_device(b);
    return x.type == y.type && x.index == y.index;
}

/* Whether [a, a+na) and [b, b+nb) elements of the same storage overlap. */
static int overlap(const tg_tensor *a, const tg_tensor *b)
{
    if (a->storage != b->storage) return 0;
    int64_t a0 = a->offset, a1 = a0 + tg_tensor_numel(a), b0 = b->offset, b1 = b0 + tg_tensor_numel(b);
    return a0 < b1 && b0 < a1;
}

/* ------------------------------------------------------------------ cross-rank argument check */
/* A collective whose ranks pass different sizes, dtypes or ops fails inside the transport in ways that
 * do not say what differed (a truncation error, or a wrong result on some ranks). Before such a call,
 * the ranks all-gather a small signature of their arguments and compare: always at a communicator's
 * creation and at the first call of each kind and label (each ddp bucket's first all-reduce), and at
 * every call while the comm_check debug flag is on. The decision to check depends only on what the
 * ranks are meant to share (call kind, label, the flag), so matching programs check the same calls. */
enum { SIG_WORDS = 16, SIG_MAGIC = 0x74677367 };
enum { K_CREATE, K_ALL_REDUCE, K_REDUCE_SCATTER, K_ALL_GATHER, K_BROADCAST, K_BARRIER, K_SEND, K_RECV, K_SPLIT };
static const char *const kind_names[] = {"creation",  "all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                         "barrier",   "send",       "recv",           "split"};
static _Thread_local char next_label[64];
static int comms_made; /* communicators this process made: the same count on every rank of a job */

/* "all_reduce of 4096 f32 (sum) on cpu 'ddp bucket 2'" from a signature. */
static void sig_describe(const int32_t *w, char *buf, size_t n)
{
    char label[33];
    memcpy(label, w + 8, 32);
    label[32] = '\0';
    int kind = w[2];
    if (w[0] != SIG_MAGIC || kind < 0 || (kind > K_BARRIER && kind != K_SPLIT)) {
        snprintf(buf, n, "(not a tegraph collective)");
        return;
    }
    if (kind == K_CREATE) {
        snprintf(buf, n, "communicator #%d of %d ranks (tegraph %d.%d.%d)", w[1], w[3], w[4] >> 16, (w[4] >> 8) & 255,
                 w[4] & 255);
        return;
    }
    if (kind == K_BARRIER || kind == K_SPLIT) {
        snprintf(buf, n, "call #%d: %s%s%s%s", w[1], kind_names[kind], label[0] ? " '" : "", label, label[0] ? "'" : "");
        return;
    }
    int64_t numel = (int64_t)(uint32_t)w[5] | (int64_t)w[6] << 32;
    char extra[32] = "";
    if (kind == K_BROADCAST) snprintf(extra, sizeof extra, " (root %d)", w[3]);
    else if (kind != K_ALL_GATHER) snprintf(extra, sizeof extra, " (%s)", tg_comm_op_name((tg_comm_op)w[3]));
    snprintf(buf, n, "call #%d: %s of %lld %s%s on %s%s%s%s", w[1], kind_names[kind], (long long)numel,
             tg_dtype_name((tg_dtype)w[4]), extra, w[7] == TG_CPU ? "cpu" : "cuda", label[0] ? " '" : "", label,
             label[0] ? "'" : "");
}

/* All-gathers this rank's signature over c and compares; names two ranks that differ. */
static tg_status sig_exchange(tg_comm *c, const char *what, const int32_t *mine, tg_device dev)
{
    int64_t n1 = SIG_WORDS, nall = (int64_t)SIG_WORDS * c->size;
    tg_tensor *a = NULL, *all = NULL;
    int32_t *w = malloc(sizeof(int32_t) * (size_t)nall);
    char saved[sizeof next_label];
    memcpy(saved, next_label, sizeof saved);
    next_label[0] = '\0';
    tg_status st = w ? TG_OK : tg_error(TG_ENOMEM, "out of host memory");
    if (st == TG_OK) st = tg_tensor_new(TG_I32, 1, &n1, dev, &a);
    if (st == TG_OK) st = tg_tensor_new(TG_I32, 1, &nall, dev, &all);
    if (st == TG_OK) st = tg_tensor_write(a, mine, sizeof(int32_t) * SIG_WORDS);
    if (st == TG_OK) {
        c->checking = 1;
        st = tg_comm_all_gather(c, all, a, NULL);
        c->checking = 0;
        if (st != TG_OK) st = tg_error_prefix(st, "%s: comparing the ranks' arguments", what);
    }
    if (st == TG_OK) st = tg_tensor_read(all, w, sizeof(int32_t) * (size_t)nall);
    memcpy(next_label, saved, sizeof saved);
    for (int r = 1; st == TG_OK && r < c->size; r++) {
        if (memcmp(w, w + (size_t)r * SIG_WORDS, sizeof(int32_t) * SIG_WORDS) == 0) continue;
        char d0[160], dr[160];
        sig_describe(w, d0, sizeof d0);
        sig_describe(w + (size_t)r * SIG_WORDS, dr, sizeof dr);
        st = tg_error(TG_EINVAL, "%s: the ranks disagree: rank 0 has %s; rank %d has %s", what, d0, r, dr);
    }
    tg_tensor_free(a);
    tg_tensor_free(all);
    free(w);
    return st;
}

/* The device a check's tensors live on: the host when MPI is there, else this rank's GPU. */
static tg_device check_device(const tg_comm *c) { return c->mpi ? (tg_device){TG_CPU, 0} : c->cuda_dev; }

static tg_status check_creation(tg_comm *c, const char *what)
{
    int32_t w[SIG_WORDS] = {SIG_MAGIC, comms_made++, K_CREATE, c->size, 0};
    int maj = 0, min = 0, pat = 0;
    sscanf(tg_version(), "%d.%d.%d", &maj, &min, &pat);
    w[4] = maj << 16 | min << 8 | pat;
    if (c->size == 1 || (!c->mpi && !c->nccl)) return TG_OK;
    return sig_exchange(c, what, w, check_device(c));
}

/* A split, checked at every call: the transports' splits are blocking calls that would wait forever for a
 * rank that does not make them (ended, or in another call). The label (split{dp=,pp=} puts the layout
 * there) is part of the signature, so ranks asking for different layouts fail too. */
static tg_status check_split(tg_comm *c)
{
    int32_t w[SIG_WORDS] = {SIG_MAGIC, (int32_t)c->seq++, K_SPLIT};
    memcpy(w + 8, next_label, strnlen(next_label, 32));
    next_label[0] = '\0';
    if (c->size == 1 || (!c->mpi && !c->nccl)) return TG_OK;
    return sig_exchange(c, "comm split", w, check_device(c));
}

/* Called by each collective after its own argument checks, before anything is issued (t NULL: a barrier). */
static tg_status cross_check(tg_comm *c, int kind, const tg_tensor *t, tg_comm_op op, int root)
{
    if (c->checking) return TG_OK;
    /* a collective captured into a CUDA graph runs at each replay without the host: it is not counted,
     * and compared at capture only where the comparison needs no device work (over MPI) */
    int in_capture = t && tg_device_capturing(tg_tensor_device(t));
    if (in_capture && tg_device_capturing(check_device(c))) return TG_OK;
    int64_t seq = in_capture ? c->seq : c->seq++;
    if (c->size == 1) return TG_OK;
    char key[40];
    snprintf(key, sizeof key, "%d %.36s", kind, next_label);
    int first = 1;
    for (int i = 0; i < c->nchecked && first; i++) first = strcmp(c->checked[i], key) != 0;
    if (!first && !tg_debug_get(TG_DEBUG_COMM_CHECK)) return TG_OK;
    /* inside a group ops launch together at its end (NCCL): no blocking exchange there; the next call
     * of the kind outside a group is checked instead */
    if (c->group_depth > 0) return TG_OK;
    if (first) {
        if (c->nchecked == c->capchecked) {
            int cap = c->capchecked ? 2 * c->capchecked : 16;
            void *p = realloc(c->checked, sizeof *c->checked * (size_t)cap);
            if (!p) return tg_error(TG_ENOMEM, "out of host memory");
            c->checked = p;
            c->capchecked = cap;
        }
        memcpy(c->checked[c->nchecked++], key, sizeof key);
    }
    if (!t) {
        int32_t w[SIG_WORDS] = {SIG_MAGIC, (int32_t)seq, kind};
        memcpy(w + 8, next_label, strnlen(next_label, 32));
        return sig_exchange(c, kind_names[kind], w, check_device(c));
    }
    int64_t numel = tg_tensor_numel(t);
    int32_t w[SIG_WORDS] = {SIG_MAGIC, (int32_t)seq, kind, kind == K_BROADCAST ? root : kind == K_ALL_GATHER ? 0 : (int32_t)op,
                            (int32_t)t->dtype, (int32_t)(uint32_t)numel, (int32_t)(numel >> 32),
                            (int32_t)tg_tensor_device(t).type};
    memcpy(w + 8, next_label, strnlen(next_label, 32)); /* the label's first 32 bytes, zero-padded */
    return sig_exchange(c, kind_names[kind], w, tg_tensor_device(t));
}

/* ------------------------------------------------------------------ point-to-point argument check
 * A recv whose buffer differs from the matching send's tensor fails inside the transport without
 * saying what differed (a truncation error), or completes with part of the data. A checked send or
 * recv exchanges a signature with its peer (kind, the count of sends or receives so far between the
 * two, both ranks, dtype, shape, label) on channels of their own, issued with the op and compared
 * when it completes, so no rank blocks at issue and ring exchanges stay free of deadlock. Checked:
 * the first send and the first recv between each pair of ranks in each direction, and every one
 * while the comm_check debug flag is on. Over a transport with channels (MPI; also the signatures
 * of NCCL ops when MPI is there) both sides compare and fail naming both; over NCCL alone the
 * sender's signature goes ahead of its data and the receiver compares. */
enum { P2P_MAGIC = 0x74677032 };

static tg_status req_new(tg_comm *c, const char *what, const char *desc, tg_tensor *a, tg_tensor *b, tg_comm_req **out);
static tg_status req_fail(tg_comm_req *r, tg_status st);
static void span_done(tg_comm_req *r);
static void req_drop_tensors(tg_comm_req *r);

/* "send #0 of f32 (2, 3) to rank 1 'label'" from a p2p signature. */
static void p2p_describe(const int32_t *w, char *buf, size_t n)
{
    if (w[0] != P2P_MAGIC || (w[2] != K_SEND && w[2] != K_RECV) || w[6] < 0 || w[6] > TG_MAX_DIMS) {
        snprintf(buf, n, "(not a tegraph send or recv)");
        return;
    }
    char shape[96] = "(", label[33];
    size_t at = 1;
    for (int d = 0; d < w[6]; d++) {
        int64_t v = (int64_t)(uint32_t)w[8 + 2 * d] | (int64_t)w[9 + 2 * d] << 32;
        at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", d ? ", " : "", (long long)v);
        if (at >= sizeof shape) at = sizeof shape - 1;
    }
    snprintf(shape + at, sizeof shape - at, ")");
    memcpy(label, w + 16, 32);
    label[32] = '\0';
    int send = w[2] == K_SEND;
    snprintf(buf, n, "%s #%d of %s %s %s rank %d%s%s%s", send ? "send" : "recv", w[1], tg_dtype_name((tg_dtype)w[5]), shape,
             send ? "to" : "from", send ? w[4] : w[3], label[0] ? " '" : "", label, label[0] ? "'" : "");
}

/* Issues one signature message of a check (an i32 tensor) on its channel. */
static tg_status sig_p2p(tg_comm *c, int is_send, tg_tensor *t, int peer, int channel, tg_comm_req **out)
{
    const struct tg_comm_transport *tr = c->mpi ? c->mpi_tr : c->nccl_tr;
    void *impl = c->mpi ? c->mpi : c->nccl;
    tg_comm_req *r;
    *out = NULL;
    c->checking = 1; /* the check is no op of the program's: no span */
    tg_status st = req_new(c, is_send ? "send" : "recv", "the signature of a send or recv", t, NULL, &r);
    c->checking = 0;
    TG_TRY(st);
    r->tr = tr;
    r->channel = channel;
    st = is_send ? tr->send(impl, t, peer, r) : tr->recv(impl, t, peer, r);
    if (st != TG_OK) {
        r->done = 1;
        r->tr = NULL;
        tg_comm_req_free(r);
        return st;
    }
    *out = r;
    return TG_OK;
}

/* Counts the op and, when it is checked, issues r's signature exchange (before the op itself); label: the op's. */
static tg_status p2p_check_issue(tg_comm *c, int is_send, const tg_tensor *t, int peer, const char *label, tg_comm_req *r)
{
    if (!c->p2p_count && !(c->p2p_count = calloc(2 * (size_t)c->size, sizeof *c->p2p_count)))
        return tg_error(TG_ENOMEM, "out of host memory");
    int64_t nth = c->p2p_count[(is_send ? 0 : c->size) + peer]++;
    if (nth > 0 && !tg_debug_get(TG_DEBUG_COMM_CHECK)) return TG_OK;
    const struct tg_comm_transport *ctr = c->mpi ? c->mpi_tr : c->nccl_tr;
    if (!ctr) return TG_OK;
    int32_t *w = r->sig_mine;
    memset(w, 0, sizeof r->sig_mine);
    w[0] = P2P_MAGIC;
    w[1] = (int32_t)nth;
    w[2] = is_send ? K_SEND : K_RECV;
    w[3] = is_send ? c->rank : peer; /* the sender */
    w[4] = is_send ? peer : c->rank; /* the receiver */
    w[5] = (int32_t)t->dtype;
    w[6] = t->ndim;
    w[7] = (int32_t)tg_tensor_device(t).type;
    for (int d = 0; d < t->ndim && d < TG_MAX_DIMS; d++) {
        w[8 + 2 * d] = (int32_t)(uint32_t)t->shape[d];
        w[9 + 2 * d] = (int32_t)(t->shape[d] >> 32);
    }
    memcpy(w + 16, label, strnlen(label, 32));
    int64_t nw = TG_P2P_SIG_WORDS;
    tg_device dev = check_device(c);
    int mine_goes = is_send || ctr->channels, theirs_comes = !is_send || ctr->channels;
    tg_tensor *mine = NULL;
    tg_status st = TG_OK;
    if (mine_goes) {
        st = tg_tensor_new(TG_I32, 1, &nw, dev, &mine);
        if (st == TG_OK) st = tg_tensor_write(mine, w, sizeof r->sig_mine);
        if (st == TG_OK) st = sig_p2p(c, 1, mine, peer, is_send ? TG_P2P_SENDER_SIG : TG_P2P_RECEIVER_SIG, &r->sig_out);
        tg_tensor_free(mine); /* the request holds it */
    }
    if (st == TG_OK && theirs_comes) {
        st = tg_tensor_new(TG_I32, 1, &nw, dev, &r->sig_theirs);
        if (st == TG_OK)
            st = sig_p2p(c, 0, r->sig_theirs, peer, is_send ? TG_P2P_RECEIVER_SIG : TG_P2P_SENDER_SIG, &r->sig_in);
    }
    return st;
}

/* Compares the peer's signature (theirs) with this rank's (w) of op what: TG_EINVAL naming both when they differ. */
static tg_status p2p_compare(const tg_comm *c, const char *what, const int32_t *w, const int32_t *theirs)
{
    /* the same pair, the same count, the same dtype and shape; the kinds a send and a recv */
    int same = theirs[0] == P2P_MAGIC && theirs[1] == w[1] && theirs[2] == (w[2] == K_SEND ? K_RECV : K_SEND) &&
               theirs[3] == w[3] && theirs[4] == w[4] && memcmp(theirs + 5, w + 5, sizeof(int32_t) * 2) == 0 &&
               memcmp(theirs + 8, w + 8, sizeof(int32_t) * 8) == 0;
    if (same) return TG_OK;
    int me = c->rank, peer = w[2] == K_SEND ? w[4] : w[3];
    char dm[160], dp[160];
    p2p_describe(w, dm, sizeof dm);
    p2p_describe(theirs, dp, sizeof dp);
    /* the lower rank first: both ranks print the same text */
    return tg_error(TG_EINVAL, "%s: the ranks disagree: rank %d has %s; rank %d has %s", what, me < peer ? me : peer,
                    me < peer ? dm : dp, me < peer ? peer : me, me < peer ? dp : dm);
}

/* Completes r's signature exchange and compares: TG_EINVAL naming both ranks' ops when they differ.
 * A send waits for its receiver's signature, except when the receiver is itself sending to this rank
 * (its sender's signature is waiting here): both ranks sending before they receive is legal with MPI's
 * eager small sends, and waiting there would deadlock both. Then the receiver's signature is parked on
 * the communicator and compared at this rank's next blocking recv from that peer (see p2p_settle). */
static tg_status p2p_check_finish(tg_comm_req *r)
{
    tg_status st = TG_OK;
    if (r->sig_out) st = tg_comm_req_wait(r->sig_out);
    const int32_t *w = r->sig_mine;
    tg_comm_req *in = r->sig_in;
    if (st == TG_OK && in && w[2] == K_SEND && in->tr && in->tr->wait_or_arrival && !in->done) {
        int arrived = 0;
        st = in->tr->wait_or_arrival(in, TG_P2P_SENDER_SIG, &arrived);
        if (st != TG_OK) st = req_fail(in, st);
        else if (arrived) {
            memcpy(in->sig_mine, w, sizeof in->sig_mine);
            in->sig_theirs = r->sig_theirs;
            in->what = r->what;
            in->parked_next = r->comm->parked;
            r->comm->parked = in;
            r->sig_in = NULL;
            r->sig_theirs = NULL;
            return TG_OK;
        } else {
            in->done = 1;
            span_done(in);
            req_drop_tensors(in);
        }
    }
    if (st == TG_OK && in) st = tg_comm_req_wait(in);
    int32_t theirs[TG_P2P_SIG_WORDS];
    if (st == TG_OK && in) st = tg_tensor_read(r->sig_theirs, theirs, sizeof theirs);
    if (st != TG_OK) return tg_error_prefix(st, "%s: comparing the two ranks' arguments", r->what);
    if (!in) return TG_OK;
    return p2p_compare(r->comm, r->what, w, theirs);
}

/* Completes and compares the parked checks of sends to peer (after a recv from it: by then the peer
 * has reached its recvs, which send the signatures). */
static tg_status p2p_settle(tg_comm *c, int peer)
{
    tg_status st = TG_OK;
    for (tg_comm_req **pp = &c->parked; *pp && st == TG_OK;) {
        tg_comm_req *p = *pp;
        if (p->sig_mine[4] != peer) {
            pp = &p->parked_next;
            continue;
        }
        *pp = p->parked_next;
        int32_t theirs[TG_P2P_SIG_WORDS];
        st = tg_comm_req_wait(p);
        if (st == TG_OK) st = tg_tensor_read(p->sig_theirs, theirs, sizeof theirs);
        if (st != TG_OK) st = tg_error_prefix(st, "%s: comparing the two ranks' arguments", p->what);
        else st = p2p_compare(c, p->what, p->sig_mine, theirs);
        tg_comm_req_free(p);
    }
    return st;
}

/* Frees r's signature exchange. */
static void p2p_check_free(tg_comm_req *r)
{
    tg_comm_req_free(r->sig_out);
    tg_comm_req_free(r->sig_in);
    tg_tensor_free(r->sig_theirs);
    r->sig_out = r->sig_in = NULL;
    r->sig_theirs = NULL;
}

/* ------------------------------------------------------------------ requests */

void tg_comm_label_next(const char *label)
{
    snprintf(next_label, sizeof next_label, "%s", label ? label : "");
}

/* While tracing: the span's name and arguments (op, bytes of the input, label, step). */
static void span_describe(tg_comm_req *r, const char *what, const tg_tensor *in)
{
    char label[64];
    r->span = -1;
    if (!tg_trace_on) {
        next_label[0] = '\0';
        return;
    }
    snprintf(label, sizeof label, "%s", next_label);
    next_label[0] = '\0';
    for (char *c = label; *c; c++)
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) *c = '_'; /* JSON-safe */
    snprintf(r->span_name, sizeof r->span_name, "%s%s%s", what, label[0] ? " " : "", label);
    snprintf(r->span_args, sizeof r->span_args, "\"op\":\"%s\",\"bytes\":%zu,\"label\":\"%s\",\"step\":%lld",
             what, in ? tg_tensor_bytes(in) : (size_t)0, label, (long long)tg_step_index());
}

int tg_comm_span_open(tg_comm_req *r, tg_stream *s)
{
    if (!tg_trace_on || !r->span_name[0]) return -1;
    struct tg_trace_about a = {.args = r->span_args};
    return tg_trace_open(s, TG_TRACK_COMM, r->span_name, &a);
}

/* Host-timed transports (MPI): the span ends when completion is first observed. */
static void span_done(tg_comm_req *r)
{
    if (r->span >= 0 && r->tr && !r->tr->stream_spans) tg_trace_close(r->span, NULL);
    r->span = -1;
}

static tg_status req_new(tg_comm *c, const char *what, const char *desc, tg_tensor *a, tg_tensor *b, tg_comm_req **out)
{
    tg_comm_req *r = calloc(1, sizeof *r);
    if (!r) return tg_error(TG_ENOMEM, "out of host memory");
    r->comm = c;
    c->refcount++;
    r->live_next = live_reqs;
    if (live_reqs) live_reqs->live_prev = r;
    live_reqs = r;
    r->what = what;
    snprintf(r->desc, sizeof r->desc, "%s", desc);
    span_describe(r, what, b ? b : a);
    if (c->checking) r->span_name[0] = '\0'; /* the argument check is no op of the program's */
    tg_status st = TG_OK;
    if (a) st = tg_tensor_ref(a, &r->keep[0]);
    if (st == TG_OK && b) st = tg_tensor_ref(b, &r->keep[1]);
    if (st != TG_OK) {
        tg_comm_req_free(r);
        return st;
    }
    *out = r;
    return TG_OK;
}

static void req_drop_tensors(tg_comm_req *r)
{
    for (int i = 0; i < 2; i++) {
        tg_tensor_free(r->keep[i]);
        r->keep[i] = NULL;
    }
}

static tg_status req_fail(tg_comm_req *r, tg_status st)
{
    r->done = 1;
    r->failed = 1;
    r->err = st;
    snprintf(r->errmsg, sizeof r->errmsg, "%s", tg_last_error());
    return st;
}

tg_status tg_comm_req_wait(tg_comm_req *r)
{
    if (r->done) return r->err == TG_OK ? TG_OK : tg_error(r->err, "%s", r->errmsg);
    if (r->sig_out || r->sig_in) {
        tg_status st = p2p_check_finish(r);
        p2p_check_free(r);
        if (st != TG_OK) return req_fail(r, st);
    }
    if (r->tr) {
        tg_status st = r->tr->wait(r);
        if (st != TG_OK) return req_fail(r, st);
    }
    r->done = 1;
    span_done(r);
    req_drop_tensors(r);
    if (r->recv_from && r->comm->parked) return p2p_settle(r->comm, r->recv_from - 1);
    return TG_OK;
}

tg_status tg_comm_req_test(tg_comm_req *r, int *done)
{
    *done = 1;
    if (r->done) return r->err == TG_OK ? TG_OK : tg_error(r->err, "%s", r->errmsg);
    if (!r->tr) return tg_comm_req_wait(r);
    if (r->captured)
        return tg_error(TG_ECAPTURE, "test of %s: it was captured into a graph and completes at each replay on the "
                        "device; wait for it instead (the stream waits for it in the graph)", r->desc);
    tg_status st = TG_OK;
    for (int k = 0; k < 2; k++) { /* the signatures first: the op completes once they compared */
        tg_comm_req *s = k ? r->sig_in : r->sig_out;
        int sd = 1;
        if (s && (st = tg_comm_req_test(s, &sd)) != TG_OK) return tg_comm_req_wait(r);
        if (!sd) {
            *done = 0;
            return TG_OK;
        }
    }
    if (r->sig_out || r->sig_in) {
        st = p2p_check_finish(r);
        p2p_check_free(r);
        if (st != TG_OK) return req_fail(r, st);
    }
    st = r->tr->test(r, done);
    if (st != TG_OK) return req_fail(r, st);
    if (*done) {
        r->done = 1;
        span_done(r);
        req_drop_tensors(r);
    }
    return TG_OK;
}

const char *tg_comm_req_what(const tg_comm_req *r) { return r->what; }

void tg_comm_req_free(tg_comm_req *r)
{
    if (!r) return;
    if (!r->done) (void)tg_comm_req_wait(r);
    p2p_check_free(r);
    if (r->tr) r->tr->req_release(r);
    /* after a failure the transport may still use the buffers: keep them */
    if (!r->failed) req_drop_tensors(r);
    release_comm(r->comm);
    if (r->live_prev) r->live_prev->live_next = r->live_next;
    else if (live_reqs == r) live_reqs = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    free(r);
}

/* A graph holding ops captured on a capturable transport (NCCL): after each replay the transport
 * watches the replay's stream, so a peer that does not replay fails the job at the timeout. */
static tg_status replay_watch(void *ud)
{
    tg_comm *c = ud;
    if (!c->nccl || !c->nccl_tr->watch_replay) return TG_OK; /* finalised */
    return c->nccl_tr->watch_replay(c->nccl, tg_stream_current(c->cuda_dev));
}

static void comm_retain(void *ud) { ((tg_comm *)ud)->refcount++; }
static void comm_drop(void *ud) { release_comm(ud); }

/* Issues through issue() on a request; completes it at once when the caller
 * wants a blocking call (out == NULL). */
static tg_status finish_issue(tg_comm_req *r, tg_status st, tg_comm_req **out)
{
    if (st == TG_OK && r->captured && r->tr && r->tr->watch_replay) {
        tg_graph *g = tg_device_capture_graph(r->comm->cuda_dev);
        struct tg_host_call h = {replay_watch, r->comm, comm_retain, comm_drop};
        if (g) (void)tg_graph_after_replay(g, &h); /* the op is captured either way; only the watch would miss it */
    }
    if (st != TG_OK) {
        r->done = 1;
        r->failed = 0;
        r->tr = NULL; /* nothing was issued */
        tg_comm_req_free(r);
        return st;
    }
    if (r->tr && !r->tr->stream_spans) r->span = tg_comm_span_open(r, NULL); /* issued: in flight from now */
    if (out) {
        *out = r;
        return TG_OK;
    }
    st = tg_comm_req_wait(r);
    tg_comm_req_free(r);
    return st;
}

/* ------------------------------------------------------------------ collectives in a CPU capture
 * A collective on CPU tensors issued while the CPU device captures is recorded into the graph as host
 * work: at each replay it runs as the same blocking call (same communicator, tensors, op and label),
 * in the graph's order, through the checked path of an eager call (its place in the communicator's
 * sequence, the cross-rank comparison of its first call, the timeout and departed-peer errors). A
 * replay that fails there (a peer that does not replay) fails the replay. Nothing runs at capture:
 * an async request of it completes at once (the work is in the graph). */
struct captured_op {
    int refs;
    tg_comm *comm;     /* a reference */
    int kind;          /* K_ALL_REDUCE ... K_BROADCAST */
    tg_tensor *a, *b;  /* references: the tensor (all_reduce, broadcast) or out; in */
    tg_comm_op op;
    int root;
    char label[64];
};

static void captured_retain(void *ud) { ((struct captured_op *)ud)->refs++; }

static void captured_drop(void *ud)
{
    struct captured_op *k = ud;
    if (--k->refs > 0) return;
    tg_tensor_free(k->a);
    tg_tensor_free(k->b);
    release_comm(k->comm);
    free(k);
}

static tg_status captured_run(void *ud)
{
    struct captured_op *k = ud;
    tg_status st;
    tg_comm_label_next(k->label);
    switch (k->kind) {
    case K_ALL_REDUCE: st = tg_comm_all_reduce(k->comm, k->a, k->op, NULL); break;
    case K_REDUCE_SCATTER: st = tg_comm_reduce_scatter(k->comm, k->a, k->b, k->op, NULL); break;
    case K_ALL_GATHER: st = tg_comm_all_gather(k->comm, k->a, k->b, NULL); break;
    default: st = tg_comm_broadcast(k->comm, k->a, k->root, NULL); break;
    }
    if (st != TG_OK) return tg_error_prefix(st, "replay of a captured %s", kind_names[k->kind]);
    return TG_OK;
}

/* Records the op into the capture of a's device; *req (when wanted) is a completed request. */
static tg_status capture_op(tg_comm *c, int kind, const char *what, const char *desc, tg_tensor *a, tg_tensor *b,
                            tg_comm_op op, int root, tg_comm_req **req)
{
    struct captured_op *k = calloc(1, sizeof *k);
    if (!k) return tg_error(TG_ENOMEM, "out of host memory");
    k->refs = 1;
    k->comm = c;
    c->refcount++;
    k->kind = kind;
    k->op = op;
    k->root = root;
    memcpy(k->label, next_label, sizeof k->label);
    tg_status st = tg_tensor_ref(a, &k->a);
    if (st == TG_OK && b) st = tg_tensor_ref(b, &k->b);
    if (st == TG_OK) {
        tg_capture_hold(a);
        if (b) tg_capture_hold(b);
        struct tg_host_call h = {captured_run, k, captured_retain, captured_drop};
        st = tg_stream_host_call(tg_stream_current(tg_tensor_device(a)), &h);
    }
    captured_drop(k); /* the graph holds its own reference */
    if (st != TG_OK) {
        next_label[0] = '\0';
        return st;
    }
    tg_comm_req *r;
    TG_TRY(req_new(c, what, desc, a, b, &r));
    r->captured = 1;
    return finish_issue(r, TG_OK, req);
}

int64_t tg_comm_seq(const tg_comm *c) { return c->seq; }

/* ------------------------------------------------------------------ operations */
/* Inside a group (NCCL) ops only launch at the group's end: a blocking call
 * there could never complete, so it is refused before anything is queued. */
static tg_status no_blocking_in_group(const tg_comm *c, tg_comm_req **req, const char *what)
{
    if (!req && c->group_depth > 0)
        return tg_error(TG_ESTATE, "%s inside a group of ops must be async (it completes at the group's end)", what);
    return TG_OK;
}

tg_status tg_comm_all_reduce(tg_comm *c, tg_tensor *t, tg_comm_op op, tg_comm_req **req)
{
    TG_TRY(no_blocking_in_group(c, req, "all_reduce"));
    const struct tg_comm_transport *tr;
    void *impl;
    char desc[128], extra[16];
    tg_comm_req *r;
    if (req) *req = NULL;
    int cap;
    TG_TRY(pick(c, "all_reduce", t, &tr, &impl, &cap));
    if ((unsigned)op > TG_COMM_MIN) return tg_error(TG_EINVAL, "all_reduce: bad reduce op %d", (int)op);
    if (op == TG_COMM_AVG && t->dtype == TG_I32) return tg_error(TG_EINVAL, "all_reduce: avg of i32 (use sum)");
    snprintf(extra, sizeof extra, " (%s)", tg_comm_op_name(op));
    describe(desc, sizeof desc, "all_reduce", t, extra);
    if (cap && tr && !tr->capturable) return capture_op(c, K_ALL_REDUCE, "all_reduce", desc, t, NULL, op, 0, req);
    TG_TRY(cross_check(c, K_ALL_REDUCE, t, op, 0));
    TG_TRY(req_new(c, "all_reduce", desc, t, NULL, &r));
    r->tr = tr;
    r->captured = cap;
    return finish_issue(r, tr ? tr->all_reduce(impl, t, op, r) : TG_OK, req);
}

tg_status tg_comm_reduce_scatter(tg_comm *c, tg_tensor *out, tg_tensor *in, tg_comm_op op, tg_comm_req **req)
{
    TG_TRY(no_blocking_in_group(c, req, "reduce_scatter"));
    const struct tg_comm_transport *tr;
    void *impl;
    char desc[128], extra[16];
    tg_comm_req *r;
    if (req) *req = NULL;
    int cap;
    TG_TRY(pick(c, "reduce_scatter", in, &tr, &impl, &cap));
    int64_t n = tg_tensor_numel(out);
    if (out->dtype != in->dtype || !same_device(out, in))
        return tg_error(TG_EINVAL, "reduce_scatter: out (%s) and in (%s) differ in dtype or device",
                        tg_dtype_name(out->dtype), tg_dtype_name(in->dtype));
    if (tg_tensor_numel(in) != n * c->size)
        return tg_error(TG_EINVAL, "reduce_scatter: in has %lld elements, expected %d ranks x %lld (out)",
                        (long long)tg_tensor_numel(in), c->size, (long long)n);
    if (overlap(out, in) && out->offset != in->offset + (int64_t)c->rank * n)
        return tg_error(TG_EINVAL, "reduce_scatter: out overlaps in but is not rank %d's slice of it", c->rank);
    if ((unsigned)op > TG_COMM_MIN) return tg_error(TG_EINVAL, "reduce_scatter: bad reduce op %d", (int)op);
    if (op == TG_COMM_AVG && in->dtype == TG_I32) return tg_error(TG_EINVAL, "reduce_scatter: avg of i32 (use sum)");
    snprintf(extra, sizeof extra, " (%s)", tg_comm_op_name(op));
    describe(desc, sizeof desc, "reduce_scatter", in, extra);
    if (cap && tr && !tr->capturable) return capture_op(c, K_REDUCE_SCATTER, "reduce_scatter", desc, out, in, op, 0, req);
    TG_TRY(cross_check(c, K_REDUCE_SCATTER, in, op, 0));
    TG_TRY(req_new(c, "reduce_scatter", desc, out, in, &r));
    r->tr = tr;
    r->captured = cap;
    tg_status st = TG_OK;
    if (tr) st = tr->reduce_scatter(impl, out, in, op, r);
    else if (!tg_tensor_same_memory(out, in)) st = tg_copy(out, in);
    return finish_issue(r, st, req);
}

tg_status tg_comm_all_gather(tg_comm *c, tg_tensor *out, tg_tensor *in, tg_comm_req **req)
{
    TG_TRY(no_blocking_in_group(c, req, "all_gather"));
    const struct tg_comm_transport *tr;
    void *impl;
    char desc[128];
    tg_comm_req *r;
    if (req) *req = NULL;
    int cap;
    TG_TRY(pick(c, "all_gather", in, &tr, &impl, &cap));
    int64_t n = tg_tensor_numel(in);
    if (out->dtype != in->dtype || !same_device(out, in))
        return tg_error(TG_EINVAL, "all_gather: out (%s) and in (%s) differ in dtype or device",
                        tg_dtype_name(out->dtype), tg_dtype_name(in->dtype));
    if (tg_tensor_numel(out) != n * c->size)
        return tg_error(TG_EINVAL, "all_gather: out has %lld elements, expected %d ranks x %lld (in)",
                        (long long)tg_tensor_numel(out), c->size, (long long)n);
    if (overlap(out, in) && in->offset != out->offset + (int64_t)c->rank * n)
        return tg_error(TG_EINVAL, "all_gather: in overlaps out but is not rank %d's slice of it", c->rank);
    describe(desc, sizeof desc, "all_gather", in, NULL);
    if (cap && tr && !tr->capturable) return capture_op(c, K_ALL_GATHER, "all_gather", desc, out, in, TG_COMM_SUM, 0, req);
    TG_TRY(cross_check(c, K_ALL_GATHER, in, TG_COMM_SUM, 0));
    TG_TRY(req_new(c, "all_gather", desc, out, in, &r));
    r->tr = tr;
    r->captured = cap;
    tg_status st = TG_OK;
    if (tr) st = tr->all_gather(impl, out, in, r);
    else if (!tg_tensor_same_memory(out, in)) st = tg_copy(out, in);
    return finish_issue(r, st, req);
}

tg_status tg_comm_broadcast(tg_comm *c, tg_tensor *t, int root, tg_comm_req **req)
{
    TG_TRY(no_blocking_in_group(c, req, "broadcast"));
    const struct tg_comm_transport *tr;
    void *impl;
    char desc[128], extra[24];
    tg_comm_req *r;
    if (req) *req = NULL;
    if (root < 0 || root >= c->size)
        return tg_error(TG_EINVAL, "broadcast: root %d is not a rank of this communicator (0..%d)", root, c->size - 1);
    int cap;
    TG_TRY(pick(c, "broadcast", t, &tr, &impl, &cap));
    snprintf(extra, sizeof extra, " (root %d)", root);
    describe(desc, sizeof desc, "broadcast", t, extra);
    if (cap && tr && !tr->capturable) return capture_op(c, K_BROADCAST, "broadcast", desc, t, NULL, TG_COMM_SUM, root, req);
    TG_TRY(cross_check(c, K_BROADCAST, t, TG_COMM_SUM, root));
    TG_TRY(req_new(c, "broadcast", desc, t, NULL, &r));
    r->tr = tr;
    r->captured = cap;
    return finish_issue(r, tr ? tr->broadcast(impl, t, root, r) : TG_OK, req);
}

static tg_status p2p(tg_comm *c, int is_send, tg_tensor *t, int peer, tg_comm_req **req)
{
    const struct tg_comm_transport *tr;
    void *impl;
    char desc[128], extra[24];
    const char *what = is_send ? "send" : "recv";
    tg_comm_req *r;
    if (req) *req = NULL;
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return tg_error(TG_EINVAL, "%s: peer %d is not another rank of this communicator (rank %d of %d)", what, peer,
                        c->rank, c->size);
    TG_TRY(pick(c, what, t, &tr, &impl, NULL));
    snprintf(extra, sizeof extra, is_send ? " (to %d)" : " (from %d)", peer);
    describe(desc, sizeof desc, what, t, extra);
    char label[sizeof next_label];
    memcpy(label, next_label, sizeof label); /* taken by the op's request */
    TG_TRY(req_new(c, what, desc, t, NULL, &r));
    r->tr = tr;
    if (!is_send) r->recv_from = peer + 1;
    tg_status st = p2p_check_issue(c, is_send, t, peer, label, r);
    if (st == TG_OK) st = is_send ? tr->send(impl, t, peer, r) : tr->recv(impl, t, peer, r);
    return finish_issue(r, st, req);
}

tg_status tg_comm_send(tg_comm *c, tg_tensor *t, int peer, tg_comm_req **req)
{
    TG_TRY(no_blocking_in_group(c, req, "send"));
    return p2p(c, 1, t, peer, req);
}

tg_status tg_comm_recv(tg_comm *c, tg_tensor *t, int peer, tg_comm_req **req)
{
    TG_TRY(no_blocking_in_group(c, req, "recv"));
    return p2p(c, 0, t, peer, req);
}

/* Host-side comm work (a barrier, a group) refused while a device of c captures: it would run at capture only, not
 * at the replays. Refused on one rank too, where nothing would be issued: the same script must not be accepted on
 * one rank and refused on several. One rank has no device of its own, so the default device counts as well. */
static tg_status not_capturing(const tg_comm *c, const char *what, const char *hint)
{
    tg_device cpu = {TG_CPU, 0}, d = cpu;
    if (tg_device_capturing(cpu)) d = cpu;
    else if (tg_device_capturing(c->cuda_dev)) d = c->cuda_dev;
    else if (c->size == 1 && tg_device_capturing(tg_default_device())) d = tg_default_device();
    else return TG_OK;
    char dev[32];
    return tg_error(TG_ECAPTURE, "%s: not allowed while %s captures (stream '%s'): %s", what,
                    tg_device_str(d, dev, sizeof dev), tg_device_capturer_name(d), hint);
}

tg_status tg_comm_barrier(tg_comm *c)
{
    if (finalized) return tg_error(TG_ESTATE, "barrier: the communicators were finalised");
    if (c->size > 1 && c->group_depth > 0)
        return tg_error(TG_ESTATE, "barrier inside a group of ops (they only launch at the group's end)");
    TG_TRY(not_capturing(c, "barrier",
                         "a barrier is host work that would run at capture only, not at the replays; issue it outside "
                         "the capture"));
    tg_status st = cross_check(c, K_BARRIER, NULL, TG_COMM_SUM, 0);
    next_label[0] = '\0'; /* the barrier's label: used */
    TG_TRY(st);
    if (c->size == 1) return TG_OK;
    if (c->mpi) return c->mpi_tr->barrier(c->mpi);
    return c->nccl_tr->barrier(c->nccl);
}

tg_status tg_comm_group_begin(tg_comm *c)
{
    TG_TRY(not_capturing(c, "group",
                         "a group's ops launch at its end, on the host; issue the collectives one by one in the "
                         "capture, or the group outside it"));
    if (c->nccl && c->nccl_tr->group_begin) TG_TRY(c->nccl_tr->group_begin(c->nccl));
    c->group_depth++;
    return TG_OK;
}

tg_status tg_comm_group_end(tg_comm *c)
{
    if (c->group_depth == 0) return tg_error(TG_ESTATE, "group end without a group begin");
    c->group_depth--;
    if (c->nccl && c->nccl_tr->group_end) return c->nccl_tr->group_end(c->nccl);
    return TG_OK;
}

/* ------------------------------------------------------------------ process level */
tg_status tg_world_nccl_id(char *hex, size_t n)
{
#ifdef TG_HAVE_NCCL
    unsigned char id[TG_NCCL_ID_BYTES];
    if (n < 2 * TG_NCCL_ID_BYTES + 1) return tg_error(TG_EINVAL, "nccl id: buffer too small");
    TG_TRY(tg_nccl_get_id(id));
    for (int i = 0; i < TG_NCCL_ID_BYTES; i++) snprintf(hex + 2 * i, 3, "%02x", id[i]);
    return TG_OK;
#else
    (void)hex;
    (void)n;
    return tg_error(TG_ENOTSUP, "this tegraph was built without NCCL");
#endif
}

void tg_world_abort(int code)
{
    if (!world || world->size == 1) return;
    for (tg_comm *c = live; c; c = c->next)
        if (c->nccl) c->nccl_tr->abort(c->nccl);
#ifdef TG_HAVE_MPI
    if (world->mpi) tg_mpi_abort_job(code);
#endif
    (void)code;
}

tg_status tg_world_drain(void)
{
    for (tg_comm *c = live; c; c = c->next)
        if (c->nccl && c->nccl_tr->drain) TG_TRY(c->nccl_tr->drain(c->nccl));
    return TG_OK;
}

void tg_world_finalize(void)
{
    if (finalized) return;
    /* Requests still in flight (a rank exiting with an async collective pending):
     * complete them first (the transport's timeout bounds the wait). One that
     * cannot complete may still be in use by the transport: then the
     * communicators are left as they are and MPI is not finalised (the
     * launcher ends the job), rather than freeing what it uses. */
    int stuck = 0;
    for (tg_comm_req *r = live_reqs; r; r = r->live_next) {
        if (r->done && !r->failed) continue;
        if (!r->done && tg_comm_req_wait(r) == TG_OK) continue;
        if (!stuck)
            fprintf(stderr, "tegraph: rank %d exits with a request that did not complete: %s (communicators and MPI are "
                            "left for the launcher to end)\n",
                    world ? world->rank : 0, r->errmsg[0] ? r->errmsg : tg_last_error());
        stuck = 1;
    }
    finalized = 1;
    if (stuck) return;
    /* communicators still referenced by Lua or requests are torn down here;
     * their owners must not use them afterwards (the process is ending). */
    while (live) {
        tg_comm *c = live;
        live = c->next;
        if (c->nccl) c->nccl_tr->destroy(c->nccl);
        if (c->mpi) c->mpi_tr->destroy(c->mpi);
        c->nccl = c->mpi = NULL;
        c->next = NULL;
    }
#ifdef TG_HAVE_MPI
    tg_mpi_finalize();
#endif
}
