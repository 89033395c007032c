/* comm_impl.h — internals of the communicators: the transport vtable (MPI, NCCL) and request state. */
#ifndef TG_DIST_COMM_IMPL_H
#define TG_DIST_COMM_IMPL_H

#include "dist/comm.h"

struct tg_comm_req;

/* A transport moves tensors of one device type between the ranks of a
 * group. Ops issue work and fill r->impl; test/wait complete it (and do any
 * finishing work, such as MPI's division for avg); req_release frees r->impl
 * after completion, or abandons it after a failure. Arguments are validated
 * by comm.c: dtypes, sizes, in-place layouts, peers. */
struct tg_comm_transport {
    const char *name;
    tg_status (*all_reduce)(void *impl, tg_tensor *t, tg_comm_op op, struct tg_comm_req *r);
    tg_status (*reduce_scatter)(void *impl, tg_tensor *out, tg_tensor *in, tg_comm_op op, struct tg_comm_req *r);
    tg_status (*all_gather)(void *impl, tg_tensor *out, tg_tensor *in, struct tg_comm_req *r);
    tg_status (*broadcast)(void *impl, tg_tensor *t, int root, struct tg_comm_req *r);
    tg_status (*send)(void *impl, tg_tensor *t, int peer, struct tg_comm_req *r);
    tg_status (*recv)(void *impl, tg_tensor *t, int peer, struct tg_comm_req *r);
    tg_status (*barrier)(void *impl);
    tg_status (*test)(struct tg_comm_req *r, int *done);
    tg_status (*wait)(struct tg_comm_req *r);
    void (*req_release)(struct tg_comm_req *r);
    /* New group of the ranks with the same color; its rank and size. */
    tg_status (*split)(void *impl, int color, int key, void **out, int *rank, int *size);
    void (*destroy)(void *impl);
    void (*abort)(void *impl);
    /* Optional: ops between begin and end are launched together (NCCL groups). */
    tg_status (*group_begin)(void *impl);
    tg_status (*group_end)(void *impl);
    /* optional: waits until every issued op completed (error if one failed or was aborted) */
    tg_status (*drain)(void *impl);
    /* 1: the transport times its ops on its stream (r->span_name when set);
     * 0: comm.c times them on the host, from issue to observed completion */
    int stream_spans;
    /* 1: send/recv keep r->channel's messages apart from the others (MPI tags), so the check of a
     * send and its recv can go both ways; 0: one ordered stream per pair (NCCL): only the sender's
     * signature travels, ahead of its data */
    int channels;
    /* 1: collectives can be issued on a capturing stream and become part of its graph (NCCL);
     * 0: comm.c records them as host work of the capture, run at each replay (MPI on the CPU) */
    int capturable;
    /* optional (capturable transports): watches the work issued on s so far — a replay of a graph
     * holding captured ops — like an op of its own (timeout, departed peers) */
    tg_status (*watch_replay)(void *impl, tg_stream *s);
    /* optional (transports with channels): waits for r like wait, but returns early with *arrived = 1
     * when a message from r's peer on channel is waiting to be received (0 when r completed) */
    tg_status (*wait_or_arrival)(struct tg_comm_req *r, int channel, int *arrived);
};

/* p2p channels (tg_comm_req.channel): the data; a sender's signature to its receiver; a receiver's
 * signature back to the sender. */
enum { TG_P2P_DATA = 0, TG_P2P_SENDER_SIG = 1, TG_P2P_RECEIVER_SIG = 2 };
/* The signature of a send or recv (comm.c): 32-bit words. */
#define TG_P2P_SIG_WORDS 24

struct tg_comm {
    int rank, size, local_rank, local_size;
    int refcount;                            /* the owner + each pending request */
    int is_world;
    void *mpi;                               /* CPU tensors (NULL: none) */
    const struct tg_comm_transport *mpi_tr;
    void *nccl;                              /* CUDA tensors on cuda_dev (NULL: none) */
    const struct tg_comm_transport *nccl_tr;
    tg_device cuda_dev;
    int group_depth;                         /* open tg_comm_group_begin calls */
    int64_t seq;                             /* collectives issued on this communicator */
    int checking;                            /* inside a cross-rank argument check */
    char (*checked)[40];                     /* the "kind label" pairs whose first call was checked */
    int nchecked, capchecked;
    int64_t *p2p_count;                      /* (2 * size) sends to, then receives from, each rank */
    struct tg_comm_req *parked;              /* sends whose receiver's signature is compared later (chained
                                              * by parked_next): see p2p_check_finish */
    struct tg_comm *next;                    /* all live communicators (abort, finalize) */
};

struct tg_comm_req {
    tg_comm *comm;                           /* a reference */
    const struct tg_comm_transport *tr;      /* NULL: completed when issued (one rank) */
    void *impl;
    const char *what;                        /* "all_reduce" */
    char desc[128];                          /* "all_reduce of 4096 f32 (sum) on cpu": for messages */
    tg_tensor *keep[2];                      /* references held until completion */
    int done;                                /* completed (successfully or not) */
    int failed;                              /* completion failed: buffers may still be in use */
    tg_status err;
    char errmsg[512];
    /* trace span (while tracing; span_name "" otherwise) */
    int span;                                /* -1: none */
    char span_name[96];                      /* "all_reduce ddp bucket 2" */
    char span_args[224];                     /* JSON members: op, bytes, label, step */
    struct tg_comm_req *live_prev, *live_next; /* every request not yet freed (tg_world_finalize completes them) */
    int channel;                             /* p2p: TG_P2P_DATA or a signature's channel */
    /* a checked send / recv: its signature's exchange with the peer, compared before the op completes */
    struct tg_comm_req *sig_out, *sig_in;    /* sending ours, receiving theirs (either may be NULL) */
    tg_tensor *sig_theirs;                   /* (TG_P2P_SIG_WORDS) i32: the peer's signature */
    int32_t sig_mine[TG_P2P_SIG_WORDS];
    int captured;                            /* issued into a capturing stream: it completes in the graph */
    struct tg_comm_req *parked_next;         /* a parked signature check (on comm->parked) */
    int recv_from;                           /* a program's recv: its peer + 1 (0: another request) */
};

/* Opens r's trace span on s (NULL: host time) when it has one; returns its id or -1. */
int tg_comm_span_open(tg_comm_req *r, tg_stream *s);


#ifdef TG_HAVE_MPI
extern const struct tg_comm_transport tg_comm_mpi;
/* MPI_Init (unless the host did) and a duplicate of MPI_COMM_WORLD. */
tg_status tg_mpi_world(void **impl, int *rank, int *size, int *local_rank, int *local_size);
/* Local rank and size of the group (ranks on this node). */
tg_status tg_mpi_local(void *impl, int *local_rank, int *local_size);
/* Blocking broadcast of raw bytes (NCCL unique ids), within the timeout. */
tg_status tg_mpi_bcast_bytes(void *impl, void *buf, size_t n, int root);
void tg_mpi_abort_job(int code);
void tg_mpi_finalize(void);
#endif

#ifdef TG_HAVE_NCCL
extern const struct tg_comm_transport tg_comm_nccl;
#define TG_NCCL_ID_BYTES 128
tg_status tg_nccl_get_id(unsigned char id[TG_NCCL_ID_BYTES]);
/* An NCCL communicator on CUDA device dev (collective over the group). */
tg_status tg_nccl_init(const unsigned char id[TG_NCCL_ID_BYTES], int rank, int size, int dev, void **impl);
#endif

#endif
