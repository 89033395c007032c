/* graphed.h — graphed callables: captured F / B / W graphs per (chunk, microbatch), replayed in order, hooks after wgrad replays. */
#ifndef TG_GRAPHED_H
#define TG_GRAPHED_H

#include "nn/nn.h"

/* One replay step: op 'F', 'B' or 'W' of chunk (1-based) for microbatch mb (1-based). */
struct tg_graph_action {
    char op;
    int chunk;
    int mb;
};

typedef struct tg_graphed tg_graphed;

/* Warm-up iterations when tg_graphed_opts.warmup is 0 (the Lua binding's default too). */
#define TG_GRAPHED_WARMUP 3

typedef struct tg_graphed_opts {
    const tg_tensor *const *samples; /* one sample input per chunk (shape and dtype of its input) */
    const tg_tensor *const *samples2; /* NULL, or per chunk NULL or a second sample input: the chunk takes two
                                         inputs (x, res), its F graph runs forward_res (y = res + f(x), the add
                                         fused where the module can), and the gradient of res is dy. In place,
                                         a chunk takes a residual input (and its B a residual gradient) when
                                         its parent hands it one (tg_module.parent_res) */
    const tg_tensor *const *const *tuples; /* NULL, or per chunk NULL or a list of ntuple[c] sample inputs (TE's
                                         sample_args tuples): the chunk's module takes several inputs and
                                         may return several outputs (tg_module_forward_n / backward_n;
                                         Lua-table modules). Static buffers for each input, output and
                                         gradient; inputs of a non-float dtype and inputs whose gradient
                                         backward does not return get none. samples[c] is tuples[c][0] */
    const int *ntuple;
    int microbatches;
    const struct tg_graph_action *order; /* NULL: all F in order, then B (and W) in reverse */
    int norder;
    int warmup;   /* eager warm-up iterations before capture; 0: the default, TG_GRAPHED_WARMUP.
                     One at least runs: it finds the output shapes and which chunks delay wgrad */
    tg_pool *pool; /* graph memory (shared between graphed sets); NULL: a new one */
    int no_share;  /* 1: one set of graphs and static buffers per microbatch even when the order would
                      let every microbatch share microbatch 1's (see tg_graphed_shared) */
    int share_overlap; /* 1: where microbatches overlap, those of a chunk whose lifetimes do not overlap still share
                          one set of graphs (fewer graphs; the pool holds what those graphs touch until the last
                          of them is done, so graph memory may grow); needs reuse, not with chain */
    int no_reuse;  /* 1: every (chunk, microbatch) keeps its static buffers for the set's life; 0 (default):
                      when microbatches do not share graphs, a static buffer's memory goes back to the pool
                      once its last reader in the order is captured, and later captures reuse it (see
                      tg_graphed_reused) */
    int in_place;  /* 1: partial capture. The chunks are modules inside a model that runs eagerly; after
                      capture their own calls (tg_module_forward / backward / backward_dw, as their parents
                      make them) replay the chunk's graphs, in the set's order; a residual a parent hands
                      them is added after the replay. Undone by tg_graphed_free. */
    int chain;     /* 1: the chunks form a chain (chunk c + 1 takes chunk c's output): for each microbatch,
                      chunk c + 1's static input is chunk c's static output and chunk c's static output
                      gradient is chunk c + 1's static input gradient, so handing one chunk's result to the
                      next copies nothing. An input given to chunk c + 1 that is not chunk c's output is
                      copied into that shared buffer. Ignored when microbatches share graphs or in place. */
} tg_graphed_opts;

/* Warms up (hooks silenced), discovers which chunks delay wgrad, then captures
 * every action of the order on the current stream of the chunks' device.
 * Parameters' gradients are left as they were before the call. */
tg_status tg_graphed_new(tg_module **chunks, int nchunks, const tg_graphed_opts *o, tg_graphed **out);
/* g must not be replaying (tg_graphed_running): its hooks run inside its
 * replays, which use the set after they return. */
void tg_graphed_free(tg_graphed *g);
/* Whether a replay call of g is under way (called from its hooks, or from
 * those of a module it replays for in place); what (n bytes, when not NULL)
 * gets the outermost one, e.g. "backward of chunk 2". */
int tg_graphed_running(const tg_graphed *g, char *what, size_t n);

/* Replays, with the modules' protocol: forward(x, mb), backward(dy, mb),
 * backward_dw(mb). Each call must be the next action of the captured order
 * (checked: "graphed replay out of order: expected B chunk 2 mb 1, got F
 * chunk 1 mb 3"); mb = 0 takes the next action's microbatch.
 * forward copies x into the static input unless x is that buffer and returns a
 * new handle on the static output (valid until that F graph replays again).
 * backward copies dy into the static output-gradient buffer and returns the
 * static input gradient (NULL for chunks whose input has no gradient, e.g.
 * token ids). After a B replay (chunks without delayed wgrad) and after a W
 * replay, the wgrad hooks of every parameter that graph computed fire. */
tg_status tg_graphed_forward(tg_graphed *g, int chunk, int mb, const tg_tensor *x, tg_tensor **y);
tg_status tg_graphed_backward(tg_graphed *g, int chunk, int mb, const tg_tensor *dy, tg_tensor **dx);
tg_status tg_graphed_backward_dw(tg_graphed *g, int chunk, int mb);
/* Two-input chunks: forward with the residual input res (copied into its
 * static buffer like x). backward_res: chunks whose B graph takes a residual
 * gradient (in place, under a parent that passes one): dx = dres + dgrad(dy),
 * the add inside the graph. Calls with the wrong number of inputs fail. */
tg_status tg_graphed_forward_res(tg_graphed *g, int chunk, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y);
tg_status tg_graphed_backward_res(tg_graphed *g, int chunk, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx);
/* 2 for chunks that take (x, res), else 1. */
int tg_graphed_inputs(const tg_graphed *g, int chunk);
/* Tuple chunks (tg_graphed_opts.tuples): forward_n copies each of the nx
 * inputs (the count, shapes and dtypes of the samples) into its static buffer
 * and hands out the *ny static outputs; backward_n copies each output gradient
 * (NULL: only for outputs without one, i.e. not float) and hands out nx input
 * gradients (NULL for inputs without one). */
tg_status tg_graphed_forward_n(tg_graphed *g, int chunk, int mb, const tg_tensor *const *x, int nx, tg_tensor **y, int *ny);
tg_status tg_graphed_backward_n(tg_graphed *g, int chunk, int mb, const tg_tensor *const *dy, int ndy, tg_tensor **dx, int nx);
/* Tuple chunks: the number of inputs and outputs; 0 for other chunks. */
int tg_graphed_tuple_inputs(const tg_graphed *g, int chunk);
int tg_graphed_tuple_outputs(const tg_graphed *g, int chunk);
/* The next replay call (forward, backward or backward_dw) runs on stream s
 * (NULL: the current stream of the set's device) after s waits for event wait
 * (NULL: nothing): its copies, zeroing and graph go on s, and its hooks fire
 * with s current. Consumed by that call, whether it succeeds or not. s must be
 * on the set's device (TG_EINVAL otherwise). */
tg_status tg_graphed_replay_on(tg_graphed *g, tg_stream *s, tg_event *wait);
/* Starts the order again from its first action. */
void tg_graphed_reset(tg_graphed *g);
/* Whether chunk has W graphs (some module of it delays wgrad). */
int tg_graphed_has_w(const tg_graphed *g, int chunk);
/* Graph memory: bytes the pool holds at most, and what the allocations would
 * take without reuse across microbatches whose buffers do not overlap. */
void tg_graphed_memory(const tg_graphed *g, size_t *peak, size_t *naive);
int tg_graphed_nchunks(const tg_graphed *g);
/* Whether the set captured microbatch 1's graphs only and replays them, with
 * its static buffers, for every microbatch. That is done when the order runs
 * the microbatches one after another, each the same sequence of actions as
 * microbatch 1 (no pipeline: a microbatch's F, B and W all come before the next
 * microbatch's first action), so no microbatch's buffers or saved activations
 * are live while another's are written; overwrite or accumulate is decided at
 * replay, so one graph serves every microbatch (Megatron's reuse_cudagraphs). */
int tg_graphed_shared(const tg_graphed *g);
/* Whether the set reuses static buffer memory across microbatches (orders
 * whose microbatches overlap, TransformerEngine's reuse of graph input and
 * output buffers): the static input, output and output gradient of a (chunk,
 * mb) are held until its last B or W, the input gradient until the
 * microbatch's last action in the order; after that later captures take
 * their memory. So the output forward returns is valid until that B / W,
 * and the input gradient backward returns until the microbatch's last action
 * of the set (a caller that holds them longer, such as a transfer to another
 * stage's set, makes the set with no_reuse). */
int tg_graphed_reused(const tg_graphed *g);
/* The number of graphs the set holds. */
int tg_graphed_ngraphs(const tg_graphed *g);
tg_module *tg_graphed_chunk(const tg_graphed *g, int chunk);

/* True while any graphed set warms up or captures (tg.graph.capturing()). */
int tg_graph_capturing(void);

#endif
