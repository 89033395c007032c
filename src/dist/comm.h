/* comm.h — communicators (MPI for CPU tensors, NCCL for CUDA tensors), async requests and grad buffers. */
#ifndef TG_DIST_COMM_H
#define TG_DIST_COMM_H

#include "core/core.h"

struct tg_param;

/* A communicator is a group of ranks. The world communicator is set up once
 * per process (tg_comm_world) from the launcher's environment:
 *   - under mpirun (OMPI_COMM_WORLD_*, PMI_*, PMIX_RANK): MPI; plus NCCL for
 *     CUDA tensors when a GPU is present (its unique id broadcast over MPI);
 *   - under `tegraph run -n N` on GPUs (TG_RANK, TG_WORLD_SIZE, TG_NCCL_ID):
 *     NCCL only (CUDA tensors);
 *   - otherwise a single rank ("self"): every op completes at once.
 * CPU tensors go over MPI, CUDA tensors over NCCL; an op fails (TG_ENOTSUP)
 * when the communicator has no transport for the tensor's device. All ranks
 * of a communicator must issue the same collectives in the same order. */
typedef struct tg_comm tg_comm;
/* An issued operation. Tensors it reads or writes stay referenced until it
 * completes; they must not be written (nor, for outputs, read) before then. */
typedef struct tg_comm_req tg_comm_req;

typedef enum tg_comm_op { TG_COMM_SUM = 0, TG_COMM_AVG, TG_COMM_MAX, TG_COMM_MIN } tg_comm_op;
/* "sum"/"avg"/"max"/"min" -> op; 0 on success. */
int tg_comm_op_parse(const char *s, tg_comm_op *out);
const char *tg_comm_op_name(tg_comm_op op);

/* The world communicator, set up at the first call (collective: every rank
 * calls it). Owned by the library until tg_world_finalize. */
tg_status tg_comm_world(tg_comm **out);
/* Whether the world communicator is set up. */
int tg_comm_world_ready(void);

int tg_comm_rank(const tg_comm *c);
int tg_comm_size(const tg_comm *c);
/* Rank among the ranks of this node, and their number (world: from the
 * launcher; sub-communicators: those of the node in the group). */
int tg_comm_local_rank(const tg_comm *c);
int tg_comm_local_size(const tg_comm *c);
/* "self", "mpi", "nccl" or "mpi+nccl". */
const char *tg_comm_backend(const tg_comm *c);
/* The CUDA device NCCL runs on ({TG_CPU, 0} without NCCL). */
tg_device tg_comm_cuda_device(const tg_comm *c);

/* Seconds a blocking wait may take before it fails (and an NCCL op is
 * aborted): TG_COMM_TIMEOUT from the environment, default 600. */
double tg_comm_timeout(void);
void tg_comm_set_timeout(double seconds);

/* Sub-communicator of the ranks that pass the same color, ordered by key
 * (then by rank); collective over c. The caller frees it. */
tg_status tg_comm_split(tg_comm *c, int color, int key, tg_comm **out);
/* Frees a sub-communicator (the world one is kept: this is a no-op on it). */
void tg_comm_free(tg_comm *c);

/* Operations. req NULL: blocking (returns when the result can be used: on
 * CUDA, when the current stream of the device is ordered after it). req
 * non-NULL: issued asynchronously, *req completes it (tg_comm_req_wait).
 * Tensors: f32, bf16 or i32 (avg: not i32), on the communicator's devices.
 * While the tensors' device captures (on the current stream), the four
 * collectives become part of the graph and run at each replay: on CUDA,
 * NCCL on the capturing stream (the request's wait orders the stream after
 * it in the graph; it cannot be tested); on the CPU, a command of the graph
 * that runs the same blocking call at each replay (the request completes at
 * once). Send, recv and barrier are refused while capturing (TG_ECAPTURE),
 * and so are collectives inside a group. */
/* t = op over ranks of t (in place). */
tg_status tg_comm_all_reduce(tg_comm *c, tg_tensor *t, tg_comm_op op, tg_comm_req **req);
/* out (n) = rank's n-slice of op over ranks of in (size * n). out may be
 * that slice of in (in place). */
tg_status tg_comm_reduce_scatter(tg_comm *c, tg_tensor *out, tg_tensor *in, tg_comm_op op, tg_comm_req **req);
/* out (size * n) = concatenation over ranks of in (n). in may be the rank's
 * slice of out (in place). */
tg_status tg_comm_all_gather(tg_comm *c, tg_tensor *out, tg_tensor *in, tg_comm_req **req);
/* t = root's t. */
tg_status tg_comm_broadcast(tg_comm *c, tg_tensor *t, int root, tg_comm_req **req);
/* Point-to-point: matched in issue order between a pair of ranks. */
tg_status tg_comm_send(tg_comm *c, tg_tensor *t, int peer, tg_comm_req **req);
tg_status tg_comm_recv(tg_comm *c, tg_tensor *t, int peer, tg_comm_req **req);
/* Returns when every rank has entered it (host-side; within the timeout). */
tg_status tg_comm_barrier(tg_comm *c);
/* Ops issued between begin and end are launched together at end (NCCL
 * ncclGroupStart/End), so sends and receives that would wait for each other
 * one by one (a ring exchange) do not deadlock. Requests of the group can be
 * waited for after end. Nests. MPI ops are nonblocking anyway: a no-op. */
tg_status tg_comm_group_begin(tg_comm *c);
tg_status tg_comm_group_end(tg_comm *c);

/* Names the next op issued by this thread in a trace ("ddp bucket 2"); NULL
 * or "" clears it. Each op takes (and clears) the name. */
void tg_comm_label_next(const char *label);

/* Completes r: for CPU tensors the result is in place when it returns; for
 * CUDA the current stream of the device is ordered after the op. Fails with
 * TG_EDEVICE naming the op when it failed or took longer than the timeout.
 * Waiting twice is fine. */
tg_status tg_comm_req_wait(tg_comm_req *r);
/* *done = whether r has completed (does not block). */
tg_status tg_comm_req_test(tg_comm_req *r, int *done);
/* "all_reduce" etc. */
const char *tg_comm_req_what(const tg_comm_req *r);
/* Frees r, waiting for it first when it has not completed (errors dropped). */
void tg_comm_req_free(tg_comm_req *r);

/* The process-level calls (tg_world_nccl_id, tg_world_drain, tg_world_abort,
 * tg_world_finalize) are public: src/tegraph.h. */

/* ------------------------------------------------------------------ grad buffers
 * One contiguous f32 buffer holding the main_grad of a list of parameters
 * (Megatron's param-and-grad buffer): each parameter's main_grad becomes a
 * view into it, laid out in backward order (the reverse of the list, which
 * is in forward order: parameters()), and the buffer is split into buckets
 * of about bucket_numel elements (a parameter is never split; a bucket
 * closes once it holds at least bucket_numel). Parameters get fused wgrad
 * accumulation, so wgrads go straight into the buffer; make the buffer
 * before capturing graphs (captured wgrads keep the addresses they saw). */
struct tg_gradbuf_bucket {
    int64_t start; /* first element in the buffer */
    int64_t numel; /* elements, padding included (a multiple of pad_to) */
    int first;     /* index of its first parameter, in buffer order */
    int nparams;
};

typedef struct tg_gradbuf {
    tg_tensor *data;          /* (numel) f32: all main_grads */
    int64_t numel;
    struct tg_param **params; /* (nparams) in buffer (backward) order; references */
    int64_t *offset;          /* (nparams) first element of each parameter */
    int *bucket_of;           /* (nparams) bucket index of each parameter */
    int nparams;
    struct tg_gradbuf_bucket *buckets; /* (nbuckets) in buffer order */
    int nbuckets;
} tg_gradbuf;

typedef struct tg_gradbuf_opts {
    int64_t bucket_numel; /* <= 0: one bucket */
    int64_t align;        /* each parameter starts at a multiple of this (elements; default 64) */
    int64_t pad_to;       /* each bucket's numel is a multiple of this (e.g. the data-parallel size) */
} tg_gradbuf_opts;

/* params: in forward order, duplicates (tied weights) kept once, all on one
 * device. The buffer starts with the parameters' current main_grad (or
 * zero). */
tg_status tg_gradbuf_new(struct tg_param **params, int n, const tg_gradbuf_opts *o, tg_gradbuf **out);
void tg_gradbuf_free(tg_gradbuf *g);
/* Index of p in buffer order, or -1. */
int tg_gradbuf_index(const tg_gradbuf *g, const struct tg_param *p);

/* Collectives run on c so far: eager calls and, on the CPU, each replay of a
 * captured one (those captured on CUDA run without the host: not counted).
 * Every rank of a correct program has the same count; the cross-rank check
 * compares it. */
int64_t tg_comm_seq(const tg_comm *c);

/* Monotonic seconds (op timeouts). */
double tg_comm_now(void);
/* A rank of the job that has left it (its script ended) while this one runs, as told by the launcher
 * (`tegraph run -n` on GPUs: TG_DEPARTED_FD); -1 when none. *since: when this rank learned it. Safe
 * from any thread. */
int tg_comm_departed(double *since);

#endif
