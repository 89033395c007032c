/* executor.h — runs pipeline schedules (per-stage action lists) on modules or graphed callables, with pluggable transfers. */
#ifndef TG_EXECUTOR_H
#define TG_EXECUTOR_H

#include "graph/graphed.h"
#include "nn/nn.h"

/* ------------------------------------------------------------------ plans
 * The C form of a lua/tegraph/schedule plan. Chunks are global model chunks
 * 1..nchunks in model order (chunk c feeds chunk c+1, the last one's output
 * goes to the loss); owner[c-1] is the stage that computes chunk c. A
 * transfer is named by the chunk that produced the tensor on both ends:
 * send_fwd/recv_fwd chunk c carry chunk c's output, send_bwd/recv_bwd
 * chunk c carry the gradient of chunk c's input. */
enum tg_sched_op {
    TG_SCHED_F,
    TG_SCHED_B,
    TG_SCHED_W,
    TG_SCHED_SEND_FWD,
    TG_SCHED_RECV_FWD,
    TG_SCHED_SEND_BWD,
    TG_SCHED_RECV_BWD,
};

struct tg_sched_action {
    enum tg_sched_op op;
    int chunk; /* 1-based global chunk */
    int mb;    /* 1-based microbatch */
    int peer;  /* transfers: the other stage (1-based) */
    int w;     /* B only: the backward computes the weight gradient too (fused B+W) */
};

typedef struct tg_sched_plan {
    int stages, nchunks, microbatches;
    const int *owner;                              /* (nchunks) 1-based stages */
    const struct tg_sched_action *const *actions;  /* (stages) each stage's ordered list */
    const int *nactions;                           /* (stages) */
} tg_sched_plan;

/* "F", "B", "W", "send_fwd", ... */
const char *tg_sched_op_name(enum tg_sched_op op);
/* Parses those names; returns 0 on success. */
int tg_sched_op_parse(const char *s, enum tg_sched_op *out);
/* "B+W chunk 2 mb 1", "recv_fwd chunk 1 mb 3 from stage 1" (like plan.describe in Lua). */
const char *tg_sched_action_str(const struct tg_sched_action *a, char *buf, size_t n);

/* ------------------------------------------------------------------ transports
 * How send/recv actions move tensors between stages. The executor calls
 * send when a stage reaches a send action and recv when one reaches a recv.
 * In-process (all stages in this process) transfers go through a mailbox;
 * a communicator-backed transport (src/dist) implements the same calls with
 * point-to-point sends for stages in other processes. */
struct tg_sched_xfer {
    int bwd;          /* 0: activation (send_fwd/recv_fwd), 1: gradient (send_bwd/recv_bwd) */
    int chunk, mb;    /* the producing chunk and the microbatch */
    int from, to;     /* stages */
};

struct tg_sched_transport {
    /* Hands t over to x->to. The transport keeps its own handle or a copy;
     * the caller keeps t. */
    tg_status (*send)(void *ud, const struct tg_sched_xfer *x, const tg_tensor *t);
    /* The tensor of x, as a new handle the caller frees. *out = NULL with
     * TG_OK means "not sent yet": the stage blocks there and the executor
     * runs another stage (a transport that waits for the data instead never
     * answers NULL). */
    tg_status (*recv)(void *ud, const struct tg_sched_xfer *x, tg_tensor **out);
    /* After the last action: TG_ESTATE naming a transfer sent but never
     * received, if any (may be NULL). */
    tg_status (*finish)(void *ud);
    void (*free)(void *ud); /* may be NULL */
    void *ud;
};

/* The in-process mailbox for a plan of nchunks chunks and microbatches
 * microbatches: one slot per (direction, chunk, microbatch). A send to a full
 * slot fails (duplicate send); recv of an empty slot answers NULL. */
tg_status tg_sched_transport_local(int nchunks, int microbatches, struct tg_sched_transport *out);

/* ------------------------------------------------------------------ running */
typedef struct tg_sched_opts {
    tg_module **chunks;        /* (nchunks) the model chunks; required for eager chunks */
    /* Graphed execution: the graphed set of each chunk and the chunk's index
     * in it ((nchunks) each; NULL entries run eagerly). One set for all
     * chunks captured in tg_sched_order's order, or one per stage captured
     * in that stage's compute order, both replay in their captured order. */
    tg_graphed **graphed;
    const int *graphed_chunk;
    /* Chunk 1's input for mb: a new handle the executor frees. */
    tg_status (*input)(void *ud, int mb, tg_tensor **x);
    /* The last chunk's output y for mb -> d(loss)/dy, a new handle the
     * executor frees; *dy = NULL runs the backward with dy = NULL (a chunk
     * that computes its loss itself). */
    tg_status (*loss_grad)(void *ud, int mb, const tg_tensor *y, tg_tensor **dy);
    void *ud;
    /* Stages this process runs ((stages) flags, NULL: all). */
    const int *local;
    /* NULL: the in-process mailbox. Not freed by the executor. */
    struct tg_sched_transport *transport;
    /* While a trace runs (tg_trace_begin), every action is a span on its
     * stage's track, hook dispatches inside it land there too, and each
     * in-process transfer is an async span from send to recv. trace_pid: the
     * trace process of the run's spans (< 0: the rank). */
    int trace_pid;
    /* Synchronise the device after each compute action, so the trace shows
     * device time rather than launch time (no effect on the CPU). */
    int sync;
} tg_sched_opts;

/* Runs every local stage's action list. Stages are interleaved the way
 * lua/tegraph/schedule/engine.lua does: each stage runs until it reaches a
 * recv whose send has not happened yet, then the next stage runs; when no
 * stage can move the run fails with TG_ESTATE "schedule deadlock: ..."
 * naming each stuck stage's action. So the result does not depend on a
 * lucky global order.
 * F calls the chunk's forward (or graphed forward), B its backward (dgrad;
 * wgrad now unless delayed; a fused B also runs its microbatch's queued
 * wgrad), W its backward_dw of the action's microbatch (or W-graph replay;
 * nothing when the chunk queued none). Hooks fire inside those calls per the
 * hook contract. The plan's structure (chunks on their owners, peers,
 * ranges) and each chunk's W order (a chunk's wgrad store is a FIFO in B
 * order: every W, and the W of a fused B+W, must take its head) are checked
 * before anything runs; errors name the stage and action: "stage 2 action 3
 * (B chunk 2 mb 1): ...", "stage 1 action 7 (W chunk 1 mb 2): W of chunk 1
 * must follow its B order; the wgrad store's head is mb 1". Leaves steps to
 * the caller. */
tg_status tg_sched_run(const tg_sched_plan *plan, const tg_sched_opts *o);

/* The compute actions of all stages in the order tg_sched_run executes them
 * with the in-process mailbox, each fused B followed by its W: the replay
 * order for a graphed set holding every chunk (W entries of chunks without
 * W graphs are skipped by the graph layer). *out is malloc'ed. */
tg_status tg_sched_order(const tg_sched_plan *plan, struct tg_graph_action **out, int *n);

#endif
