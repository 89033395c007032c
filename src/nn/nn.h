/* nn.h — modules with forward / dgrad / wgrad, parameters, the wgrad store, hooks and the step engine. */
#ifndef TG_NN_H
#define TG_NN_H

#include "core/core.h"
#include "core/ops_nn.h"

/* tg_module is declared in tegraph.h (forward pre-hooks are public). */

/* ------------------------------------------------------------------ hooks
 * The hook contract (docs/ARCHITECTURE.md), the info a hook gets and the hook
 * API (add, remove) are public: see "parameters and wgrad hooks" in tegraph.h. */
struct tg_hook {
    tg_hook_fn fn;
    void *ud;
    void (*free_ud)(void *ud); /* called when the hook is removed or the parameter goes; may be NULL */
    int id;                    /* the handle tg_param_add_hook gave (> 0) */
};

/* A forward pre-hook (tegraph.h). */
struct tg_pre_hook {
    tg_forward_pre_hook_fn fn;
    void *ud;
    void (*free_ud)(void *ud);
    int id;
};

struct tg_param {
    char *name;           /* "h.0.attn.qkv.weight" */
    tg_tensor *data;      /* (shape) compute dtype (f32 or bf16) */
    tg_tensor *master;    /* (shape) f32 master weights when data is bf16, else NULL */
    tg_tensor *grad;      /* (shape) data's dtype: wgrad target when not fused */
    tg_tensor *main_grad; /* (shape) f32: wgrad target when fuse_wgrad_accumulation */
    int fuse_wgrad_accumulation;
    int contributors;     /* wgrad contributions per microbatch: 1, or 2 for a tied embedding
                             (hooks fire when all contributions of a microbatch are in) */
    struct tg_hook *hooks;
    int nhooks;
    int last_hook_id;     /* ids handed out so far */
    int dispatching;      /* the engine is running p's hooks (they cannot be removed meanwhile) */
    int grad_written;     /* a wgrad was computed into it, or its gradient was handed to a script */
    int refcount;
    tg_module *owner;     /* not a reference; NULL once the owning module is gone */
    /* engine bookkeeping (src/nn/engine.c) */
    int64_t step_seen;    /* step of the counts below (0: outside steps) */
    int contributed;      /* wgrad contributions issued this step (0: the next one overwrites) */
    int *contrib_mb;      /* (microbatches) contributions per microbatch this step */
    int fired;            /* hook dispatches this step */
    int *fired_mb;        /* (microbatches) wgrads finished per microbatch this step */
    int fired_cap;
    int *slot_mb;         /* outside steps: the microbatch each counter slot counts (nslots of them) */
    int nslots;
    struct tg_param *next_live; /* engine's list of live parameters */
    struct tg_param *prev_live;
};

/* New parameter (refcount 1) holding data (taken over, also on failure).
 * Allocates grad (and master when data is bf16, copied from data; main_grad
 * when fused), zeroed; contributors 1; linked into the engine's live list. */
tg_status tg_param_new(const char *name, tg_tensor *data, int fuse_wgrad_accumulation, tg_param **out);
tg_param *tg_param_retain(tg_param *p);
void tg_param_release(tg_param *p);
/* The buffer the wgrad of p goes to (main_grad when fused, else grad). */
tg_tensor *tg_param_wgrad_target(tg_param *p);
/* 0 when p's next wgrad must overwrite its target (first wgrad contribution of
 * p in the current step), 1 when it accumulates (later ones; always outside
 * steps, and always while p's device captures: captured work replays with the
 * value baked in, so graphed wgrads accumulate into buffers zeroed per step). */
double tg_param_wgrad_accumulate(const tg_param *p);
/* Replaces main_grad by a view, in p's shape, of `view`'s first numel(p)
 * elements (grad buffers, DDP): p takes its own handle, the caller keeps view. */
tg_status tg_param_set_main_grad(tg_param *p, tg_tensor *view);
/* The f32 master copy of a low-precision parameter becomes a view of view's storage (ZeRO's parameter buffer). */
tg_status tg_param_set_master(tg_param *p, tg_tensor *view);
/* Zeroes grad and main_grad. */
tg_status tg_param_zero_grad(tg_param *p);

/* ------------------------------------------------------------------ engine (steps and the hook check) */
/* Opens a step of `microbatches` microbatches for owner (the Lua state that
 * begins it, an identity only: a process has one step at a time, shared by its
 * runtimes; tg_step_begin: owner NULL, C code). Fails if one is open (saying so
 * when another owner's is), when called from a hook, or while a delayed wgrad
 * queued outside steps waits (naming it). */
tg_status tg_step_begin_by(int microbatches, const void *owner);
tg_status tg_step_begin(int microbatches);
/* Closes owner's open step without its checks, dropping the delayed wgrads
 * queued and the contexts saved in it: its owner went away (a Lua state closed
 * mid-step). Does nothing when no step of owner is open. */
void tg_step_abandon(const void *owner);
/* Closes owner's step (tg_step_end: owner NULL). Fails (TG_ESTATE), leaving the
 * step open, when another owner began it, when called from a
 * hook or while a delayed wgrad queued in this step has not run (naming the
 * modules and microbatches). With the hook check on, fails (TG_ESTATE, the step
 * closed) when a parameter that has hooks and whose module ran forward in this
 * step did not fire exactly once per microbatch; the message names every such
 * parameter, what it got per microbatch and the module's execution mode. */
tg_status tg_step_end_by(const void *owner);
tg_status tg_step_end(void);
int tg_step_open(void);
int64_t tg_step_index(void);
/* 1 while the engine runs wgrad hooks. */
int tg_hooks_running(void);
/* A hook's returned status as the engine reports it: st, with a message saying
 * so when the hook set none, or TG_EINVAL for a value that is not a tg_status.
 * (The engine empties the message before each hook.) */
tg_status tg_engine_hook_status(tg_status st);
int tg_step_microbatches(void);
void tg_hook_check_set(int on); /* default on */
int tg_hook_check_get(void);

/* The graph layer learns which parameters a captured graph computes wgrad
 * for: while the device captures, tg_param_wgrad_done calls the observer
 * (if any) instead of recording or firing. */
typedef tg_status (*tg_capture_observer)(void *ud, tg_param *p, int mb);
void tg_engine_set_capture_observer(tg_capture_observer fn, void *ud);
/* After a forward of m: marks m as run in the open step (for the hook check),
 * or, while m's device captures outside the graph layer, records m in the
 * graph being captured (its replays mark it). */
tg_status tg_engine_note_forward(tg_module *m);
/* Before a forward of m for mb: runs m's forward pre-hooks, or, while m's
 * device captures outside the graph layer, records them in the graph being
 * captured (they run before each of its replays). Nothing while quiet or while
 * the graph layer captures (its F replays run them). */
tg_status tg_engine_forward_pre(tg_module *m, int mb);
/* Runs the forward pre-hooks of m and of every module under it, in forward
 * (pre-)order, for mb: before the replay of an F graph holding m. */
tg_status tg_module_run_forward_pre_hooks(tg_module *m, int mb);
/* Graph warm-up: while quiet, wgrads are neither recorded nor fired and
 * always accumulate (the graph layer restores the gradients afterwards). */
void tg_engine_set_quiet(int on);
/* Full-iteration capture of a step of `microbatches` (0: off). While on, work
 * captured outside the graph layer behaves as in an eager step: overwrite or
 * accumulate is decided as eagerly (a step is open), hooks and forward
 * pre-hooks run during the capture, so their device work (a reduce, a gather)
 * is captured, and forwards mark the step. The graph records the forwards and
 * the wgrad contributions; its replay, which must run in an open step of that
 * many microbatches, zeroes nothing, runs no hooks, and counts the recorded
 * contributions and forwards, so the step check holds. */
void tg_engine_set_full_capture(int microbatches);
int tg_engine_full_capture(void);

/* Records that one wgrad contribution of p for microbatch mb is issued; when
 * all p->contributors contributions of mb are in, fires p's hooks. While the
 * device captures nothing is counted or fired: the graph layer's observer is
 * told, or, for a plain stream capture, the contribution is recorded in the
 * graph and reported at each of its replays (after the targets of first
 * contributions of the step were zeroed). Called by modules after their
 * wgrad kernels, and by the graph layer after replays. Inside a step mb must
 * be in 1..microbatches (TG_EINVAL otherwise). Outside steps step = 0 and
 * every firing has last = 1 (the engine knows of no later microbatch). */
tg_status tg_param_wgrad_done(tg_param *p, int mb);

/* ------------------------------------------------------------------ modules */
typedef struct tg_module_opts {
    tg_dtype dtype;              /* compute dtype: TG_F32 or TG_BF16 (default F32) */
    tg_device device;            /* where params live (default tg_default_device()) */
    int bias;                    /* default 1 */
    int delay_wgrad;             /* TE delay_wgrad_compute */
    int fuse_wgrad_accumulation; /* wgrad GEMM into f32 main_grad */
    int chunk;                   /* pipeline chunk (default 1) */
    const char *name;            /* prefix of parameter names */
    double eps;                  /* norms (default 1e-5) */
    double init_std;             /* weight init std (default 0.02) */
    tg_fp8_recipe fp8;           /* FP8 recipe of its Linears (scaling TG_FP8_OFF: none) */
} tg_module_opts;

/* Fills defaults. */
void tg_module_opts_default(tg_module_opts *o);

/* One saved forward context (per module, per microbatch) and one queued wgrad item. */
struct tg_saved {
    int mb;
    int64_t step;     /* tg_step_index() when queued in the wgrad store (0: outside steps) */
    tg_tensor *t[8];  /* saved tensors (owned) */
    int n;
    int64_t ival;     /* a module-specific integer (LM head: ignore_index and its path) */
    double dval;      /* a module-specific number (LM head: the d(loss) its forward_loss was promised) */
    struct tg_saved *next;
};

#define TG_MAX_IO 16 /* inputs or outputs of one call of a module with several */
struct tg_module_vtbl {
    const char *type; /* "Linear", ... */
    /* y = forward(x) for microbatch mb; saves what backward needs under mb. */
    tg_status (*forward)(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y);
    /* Optional: forward returning y = res + forward(x) with the add fused (res
     * non-NULL, only read). NULL: tg_module_forward_res runs forward, then adds. */
    tg_status (*forward_res)(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y);
    /* dx = dgrad(dy) for microbatch mb (dx NULL allowed for the first module,
     * e.g. Embedding); then wgrad now, or queued when delay_wgrad. */
    tg_status (*backward)(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx);
    /* Optional: backward returning dx = dres + dgrad(dy) with the add fused
     * (dres non-NULL, like dx; held by the caller and not written). NULL:
     * tg_module_backward_res runs backward, then adds. */
    tg_status (*backward_res)(tg_module *m, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx);
    /* Optional: several inputs and outputs (tuple chunks). forward_n reads nx
     * inputs and writes *ny (1 .. TG_MAX_IO) outputs into y; backward_n reads
     * ny output gradients (NULL entries: none) and writes nx input gradients
     * (NULL: the input gets none). NULL: the module takes one input. */
    tg_status (*forward_n)(tg_module *m, int mb, const tg_tensor *const *x, int nx, tg_tensor **y, int *ny);
    tg_status (*backward_n)(tg_module *m, int mb, const tg_tensor *const *dy, int ny, tg_tensor **dx, int nx);
    /* Leaf modules with parameters: compute one wgrad item (popped from the
     * store by the generic code, or handed over directly when not delayed),
     * then call tg_param_wgrad_done for each parameter written, after all
     * its kernels are issued (this fires the hooks). The generic code frees
     * the item. Composites and parameterless leaves: NULL. */
    tg_status (*wgrad)(tg_module *m, struct tg_saved *item);
    void (*destroy)(tg_module *m);
    /* Optional: whether the leaf can delay its wgrad (NULL: leaves with wgrad can). */
    int (*can_delay)(const tg_module *m);
};

/* Partial capture: a module whose own calls replay chunk `chunk` of a graphed
 * set (src/graph), so the parent that holds it runs the rest eagerly and calls
 * the graphs in place of the child. The graph layer fills it in; nn only calls
 * through it. */
#define TG_PARENT_RES_FORWARD 1
#define TG_PARENT_RES_BACKWARD 2
struct tg_module_route {
    void *ctx;
    int chunk;
    int has_w; /* the chunk has W graphs: each backward leaves one backward_dw waiting */
    int res;   /* the F graph takes the parent's residual (else it is added after the replay) */
    int dres;  /* the B graph takes the parent's residual gradient (else it is added after the replay) */
    tg_status (*forward)(void *ctx, int chunk, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y);
    tg_status (*backward)(void *ctx, int chunk, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx);
    tg_status (*backward_dw)(void *ctx, int chunk, int mb);
};

struct tg_module {
    const struct tg_module_vtbl *vt;
    char *name;
    int refcount;
    tg_module_opts opts;
    const char *exec_mode;       /* "eager" or "graphed" (set by the graph layer) */
    tg_param **params;           /* own parameters */
    int nparams;
    tg_param *shared;            /* another module's parameter this one's wgrad also writes
                                    (the tied LM head projection: the embedding's table) */
    tg_module **children;        /* composites: submodules (references) */
    int nchildren;
    struct tg_saved *saved;      /* forward contexts by microbatch */
    struct tg_saved *wq_head, *wq_tail; /* wgrad store (FIFO) */
    int64_t forward_step;        /* step of the last forward (for the hook check) */
    struct tg_pre_hook *pre_hooks; /* forward pre-hooks, in the order added */
    int npre, last_pre_id;
    int pre_dispatching;         /* the engine runs m's pre-hooks (they cannot be removed meanwhile) */
    /* microbatch bookkeeping for calls with mb = 0 (src/nn/module.c) */
    int64_t mb_step;             /* step that fwd_last belongs to */
    int fwd_last;                /* microbatch of m's last forward in that step */
    int *open_mb;                /* microbatches forwarded and not yet backwarded, oldest first */
    int nopen, open_cap;
    const struct tg_module_route *route; /* set while a graphed set replays m's calls (partial capture) */
    int route_wpend;             /* routed backwards whose backward_dw has not run */
    int tuple_io;                /* 1 once called with a list of inputs (tg_module_forward_n) */
    int parent_res;              /* how its parent calls it: TG_PARENT_RES_FORWARD (forward_res), _BACKWARD
                                    (backward_res); set by the parent, read by partial capture */
    void *impl;                  /* module-specific state */
    struct tg_fp8_state *fp8;    /* a Linear's FP8 scaling state and weight cache (src/nn/fp8.c), or NULL */
    int fp8_exempt;              /* never runs FP8 (the LM head's projection) */
    /* FP8 producers (src/nn/fp8.c, tg_fp8_chain_forward_res), set by the parent around one forward call:
     * fp8_in: a Linear's input already cast (it skips its cast); fp8_out: where a producer (LayerNorm, a
     * GELU Linear) writes the next Linear's input instead of its high-precision output. */
    const struct tg_fp8_input *fp8_in, *fp8_out;
    int fp8_in_first;            /* a composite whose forward hands fp8_in to its first child */
};

/* Generic module calls (all modules, composites included).
 *
 * The microbatch protocol: forward(x, mb) -> y, backward(dy, mb) -> dx,
 * backward_dw(mb). Microbatches count from 1; mb = 0 (in Lua: mb omitted)
 * asks the engine for the next one:
 *   forward:     one past m's last forward in the open step (1 for the first);
 *                outside steps always 1 (a forward again replaces the context
 *                saved for it, so evaluation loops keep one);
 *   backward:    the oldest microbatch m ran forward for and has not run
 *                backward for ("backward with no forward waiting" otherwise);
 *   backward_dw: the head of m's wgrad store (the oldest delayed backward).
 * A failed backward leaves its microbatch waiting (a rejected dy can be given
 * again). The engine keeps this per module (composites and their children
 * alike); Lua and C callers pass mb through. */
tg_status tg_module_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y);
/* Forward with a residual: y = res + forward(x), for composites whose input
 * also bypasses m. res (NULL: plain forward) is only read. Modules with
 * forward_res fuse the add (Linear: its GEMM reads res as the C that beta = 1
 * scales; chains hand res to their last child); others run forward, then one
 * add. Saves and hooks exactly like tg_module_forward. */
tg_status tg_module_forward_res(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y);
/* Several inputs and outputs (modules with forward_n / backward_n: Lua-table
 * modules): y gets *ny outputs (room for TG_MAX_IO), dx nx input gradients
 * (NULL entries: none). */
tg_status tg_module_forward_n(tg_module *m, int mb, const tg_tensor *const *x, int nx, tg_tensor **y, int *ny);
tg_status tg_module_backward_n(tg_module *m, int mb, const tg_tensor *const *dy, int ny, tg_tensor **dx, int nx);
tg_status tg_module_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx);
/* Backward with a residual gradient: dx = dres + dgrad(dy), for composites
 * whose input also bypasses m (y = x + f(x) gives dx = dy + f'(dy)). dres
 * (like dx, NULL: plain backward) is only read. Modules with backward_res fuse
 * the add (LayerNorm, RMSNorm in their dgrad kernel; chains hand dres to their
 * first child, which runs last); others run backward, then one add (in place
 * when dx is held by no one else). Same wgrad, hooks and delayed-wgrad
 * behaviour as tg_module_backward. Fails when m returns no dx. */
tg_status tg_module_backward_res(tg_module *m, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx);
/* On the unfused path (a module without forward_res / backward_res, or the
 * test switch TG_DEBUG_UNFUSED_RESIDUAL, core/debug.h) the residual's shape is checked by the add, after the module
 * ran: a wrong res then fails the call with the microbatch's forward context
 * or wgrad already used (its hooks may have fired), like any failure inside
 * a backward. The fused paths check it first. */
/* Pops the queued wgrad of microbatch mb (leaf: its own; composite: one of
 * each child that has one, children in reverse order like backward),
 * computes it, then fires the hooks of its parameters. The wgrad store is a
 * FIFO in backward order, so W must follow B order: when a store's head is
 * another microbatch the call fails (TG_ESTATE) before anything is popped,
 * naming both: "Linear 'h.0.fc' backward_dw (microbatch 2): the wgrad store's
 * head is microbatch 1 (W must follow B order)"; a composite checks every
 * child first. mb = 0 pops each head. Fails with TG_ESTATE "backward_dw with
 * nothing queued on <module>" when nothing is queued. The check holds while
 * a graphed set warms up and captures too (its order must keep B order).
 * Errors of these calls are prefixed once, by the innermost module that
 * failed: "Linear 'h.0.mlp.fc1' backward (microbatch 2): dy is ...".
 * The engine is single-threaded (one host thread drives the modules). */
tg_status tg_module_backward_dw(tg_module *m, int mb);
int tg_module_need_backward_dw(const tg_module *m);
/* Switches delayed wgrad on or off for m and every module under it, for the
 * backwards that follow (TransformerEngine's WeightGradStore enable/disable).
 * Refused (TG_ESTATE, nothing changed) while wgrad work of m is queued (naming
 * the module and the microbatch), while m is part of a graphed set (its graphs
 * were captured with the old setting), and while m's device captures; turning
 * it on is refused for a module written in Lua without backward_dw. */
tg_status tg_module_set_delay_wgrad(tg_module *m, int on);
/* All parameters, own then children's in order, each once (caller frees the
 * array, not the params). A tied table is listed by its embedding only. */
tg_status tg_module_parameters(tg_module *m, tg_param ***out, int *n);
/* The wgrad contributions one backward (or backward_dw) of m makes per
 * microbatch, one entry each: its parameters plus shared ones (a tied table
 * appears in both the embedding's and the head's lists). The graph layer calls
 * tg_param_wgrad_done on each after replaying m's wgrad. */
tg_status tg_module_wgrad_params(tg_module *m, tg_param ***out, int *n);
tg_module *tg_module_retain(tg_module *m);
/* Drops every saved forward context and queued wgrad item of m and its
 * children (after a failed capture: none of them may run later). */
void tg_module_drop_state(tg_module *m);
/* Drops the saved forward contexts and the queued delayed wgrads of microbatch
 * mb (0: all) of m and its children: an evaluation forward that no backward
 * follows, or a step given up. */
void tg_module_drop_saved(tg_module *m, int mb);
/* Drops what step `step` left on m (not its children): the delayed wgrads
 * queued in it and, when m's forwards belong to it, the contexts they saved. */
void tg_module_drop_step(tg_module *m, int64_t step);
void tg_module_release(tg_module *m);

/* The microbatch a forward of m with mb = 0 runs (see the protocol above). */
int tg_module_next_forward(const tg_module *m);

/* Helpers for module implementations (src/nn/module.c). */
/* A module of type vt with options o (NULL: defaults), refcount 1, exec_mode "eager". */
tg_status tg_module_alloc(const struct tg_module_vtbl *vt, const tg_module_opts *o, tg_module **out);
/* A parameter "<m's name>.<suffix>" owned by m: normal(0, init_std) when init_std > 0,
 * else filled with init_const; drawn in f32, then rounded to m's dtype. */
tg_status tg_module_add_param(tg_module *m, const char *suffix, int ndim, const int64_t *shape, double init_std,
                              double init_const, tg_param **out);
tg_status tg_module_add_child(tg_module *m, tg_module *child);
/* Saves tensors for (m, mb): takes ownership of t[0..n) (also on failure;
 * NULL entries are allowed). A context already saved for mb is replaced:
 * a forward run again (or without backward, e.g. for generation) drops
 * the older one. */
tg_status tg_module_save(tg_module *m, int mb, tg_tensor **t, int n);
/* Takes the saved context of (m, mb): "backward of microbatch 3 before its forward" otherwise. */
tg_status tg_module_take(tg_module *m, int mb, struct tg_saved **out);
/* Like take, leaving it saved (validate dy before committing to the backward). */
tg_status tg_module_peek(tg_module *m, int mb, struct tg_saved **out);
void tg_saved_free(struct tg_saved *s);
/* After a leaf's dgrad: computes item's wgrad now and fires hooks, or queues
 * it (delay_wgrad). Takes ownership of item. */
tg_status tg_module_wgrad_or_queue(tg_module *m, struct tg_saved *item);
/* tg_param_wgrad_done(p, mb) for each of m's own parameters. */
tg_status tg_module_wgrad_done_all(tg_module *m, int mb);
/* Tensor allocation for module code: on the module's device, from the current pool. */
tg_status tg_module_tensor(tg_module *m, tg_dtype dt, int ndim, const int64_t *shape, tg_tensor **out);
/* "Linear 'h.0.fc'" (or "Linear" when unnamed), for messages. */
const char *tg_module_label(const tg_module *m, char *buf, size_t n);

/* Shape helpers for module code. Messages name `what` and both shapes. */
/* t is (..., last) with 2..4 dims, dtype dt. */
tg_status tg_nn_check_rows(const char *what, const tg_tensor *t, tg_dtype dt, int64_t last);
/* t has like's leading dims, then `last`, dtype dt (dy against a saved input). */
tg_status tg_nn_check_like(const char *what, const tg_tensor *t, const tg_tensor *like, int64_t last, tg_dtype dt);
/* New tensor with like's leading dims and last dimension `last`. */
tg_status tg_nn_new_like(tg_module *m, const tg_tensor *like, int64_t last, tg_dtype dt, tg_tensor **out);
/* A 2-D view (N, C) of a (..., C) tensor. */
tg_status tg_nn_rows(const tg_tensor *t, tg_tensor **out);
/* Options of a child named "<m's name>.<suffix>" (or suffix when m is unnamed);
 * the name lives in buf. */
void tg_nn_child_opts(const tg_module *m, const char *suffix, tg_module_opts *o, char *buf, size_t n);
/* Chain composites (Sequential, LayerNormLinear, LayerNormMLP, attention):
 * forward through the children in order, backward in reverse. */
tg_status tg_chain_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y);
tg_status tg_chain_backward(tg_module *m, int mb, const tg_tensor *dy, tg_tensor **dx);
/* *dx = dres + *dx (or *y = res + *y), the order forward or backward +
 * tg_binary always used: in place when no other handle shares the storage,
 * else into a new tensor on *dx's device. Fails when *dx is NULL. */
tg_status tg_nn_add_residual(const tg_tensor *dres, tg_tensor **dx);
/* Chain forward with res handed to the last child. */
tg_status tg_chain_forward_res(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y);
/* Chain backward with dres handed to the first child (the last to run). */
tg_status tg_chain_backward_res(tg_module *m, int mb, const tg_tensor *dy, const tg_tensor *dres, tg_tensor **dx);
/* LayerNorm or RMSNorm by name ("LayerNorm" (also NULL) | "RMSNorm"). */
tg_status tg_norm_new_by_name(const char *norm, int64_t c, const tg_module_opts *o, tg_module **m);
/* Linear on an existing weight (LM head tied to an embedding): no bias; the
 * weight is retained but not listed among the module's own parameters. */
/* The weight parameter of a Linear (NULL when m is not one). */
tg_param *tg_linear_weight(tg_module *m);
tg_status tg_linear_new_shared(tg_param *weight, const tg_module_opts *o, tg_module **m);
/* Linear followed by GELU, fused (LayerNormMLP's fc1): y = gelu(x W^T + b) in
 * one GEMM epilogue saving the pre-activation; backward applies gelu' first. */
tg_status tg_linear_gelu_new(int64_t in, int64_t out, const tg_module_opts *o, tg_module **m);
/* Backward of the Linear m (tg_module_backward: spans, hooks, wgrad as usual)
 * whose input is gelu_src's gelu output: m's dgrad GEMM applies gelu' of
 * gelu_src's saved pre-activation (DGELU epilogue), so *dx is dh, and
 * gelu_src's next backward of mb takes dh as its dy (no gelu_backward). */
tg_status tg_linear_backward_dgelu(tg_module *m, int mb, const tg_tensor *dy, tg_module *gelu_src, tg_tensor **dx);
/* ------------------------------------------------------------------ FP8 (src/nn/fp8.c)
 * A Linear's scaling state: roles input, weight, grad_output; history (len, 3),
 * scale and scale_inv (3) f32 on the module's device, with (1) views per role
 * (amax = the role's element of history row 0); the weight's FP8 copy and its
 * transpose, cast once per step, with their scale_inv. */
enum { TG_FP8_ROLE_INPUT = 0, TG_FP8_ROLE_WEIGHT, TG_FP8_ROLE_GRAD, TG_FP8_ROLES };
struct tg_fp8_state {
    tg_fp8_recipe r;
    tg_tensor *history, *scale, *scale_inv;
    tg_tensor *amax_v[TG_FP8_ROLES], *scale_v[TG_FP8_ROLES], *scale_inv_v[TG_FP8_ROLES];
    tg_tensor *w8, *w8_t, *w_scale_inv; /* (out, in), (in, out) fwd format; (1) */
    int w_valid;                        /* w8 holds a cast of the weight (made at a microbatch 1) */
};
/* The recipe m runs with now (the autocast setting, else its option), or NULL. */
const tg_fp8_recipe *tg_fp8_effective(const tg_module *m);
/* The FP8 dtype of a role under r. */
tg_dtype tg_fp8_role_dtype(const tg_fp8_recipe *r, int role);
/* m->fp8 for recipe r and a weight (out, in): kept when it was made for r,
 * else made fresh (refused while m's device captures). */
tg_status tg_fp8_state_ensure(tg_module *m, const tg_fp8_recipe *r, int64_t out, int64_t in);
void tg_fp8_state_free(struct tg_fp8_state *s);
/* Delayed scaling: the scale update of all three roles (microbatch 1). */
tg_status tg_fp8_state_update(struct tg_fp8_state *s);
/* Casts x (rows (N, C)) for a role: y (N, C) and/or y_t (C, N) in the role's
 * format, y_scale_inv (1) = the factor that dequantizes them. Delayed: with the
 * role's scale, its amax max-accumulated into history row 0; current: the
 * scale from x's amax first. */
tg_status tg_fp8_state_cast(struct tg_fp8_state *s, int role, const tg_tensor *x, tg_tensor *y, tg_tensor *y_t,
                            tg_tensor *y_scale_inv);
/* The gradient role's cast of dy (rows (N, C)) as tg_fp8_state_cast, in one
 * pass with the bias gradient's column partials (dbias_part, may be NULL:
 * tg_fp8_cast_transpose_dbias) and, with gelu_x (delayed scaling only), the
 * GELU derivative applied first. */
tg_status tg_fp8_state_cast_grad(struct tg_fp8_state *s, const tg_tensor *dy, const tg_tensor *gelu_x, tg_tensor *y,
                                 tg_tensor *y_t, tg_tensor *y_scale_inv, tg_tensor *dbias_part);
/* An FP8 input cast by its producer for the Linear after it (delayed scaling): x8 (rows, in) and its
 * transpose x8_t (in, rows) in the Linear's input format, scale_inv (1); scale and amax are the Linear's
 * input-role views, which the producer's cast uses and accumulates into. */
struct tg_fp8_input {
    tg_tensor *x8, *x8_t, *scale_inv;
    const tg_tensor *scale;
    tg_tensor *amax;
};
/* Whether Linear m's next forward can take its input cast by the module before it: FP8 with delayed
 * scaling, its own weight, not routed to a graph, no forward pre-hooks. */
int tg_linear_takes_fp8_input(const tg_module *m);
/* For such an m and microbatch mb: the step's scale update and weight cast now (at microbatch 1, or when
 * no cast is cached), as its forward would run them, then the input tensors for rows rows. */
tg_status tg_linear_fp8_input_begin(tg_module *m, int mb, int64_t rows, struct tg_fp8_input *in);
/* Whether m can write the next Linear's FP8 input: a LayerNorm (tg_layernorm_forward_fp8, then
 * tg_fp8_transpose) or a GELU Linear running FP8 with delayed scaling (tg_fp8_cast_transpose_gelu of its
 * pre-activation); neither routed to a graph nor with forward pre-hooks. Such a producer's forward, with
 * fp8_out set, returns a tensor that only gives the consumer its input's shape and dtype (the norm's input,
 * the Linear's pre-activation). */
int tg_norm_writes_fp8(const tg_module *m);
int tg_linear_writes_fp8(const tg_module *m);
void tg_fp8_input_free(struct tg_fp8_input *in);
/* The chain forward of LayerNormLinear and LayerNormMLP: as tg_chain_forward_res, but where a producer is
 * followed by a Linear that takes an FP8 input, the producer writes it (the Linear's cast of a bf16 input
 * is skipped); outputs, gradients and amaxes bit for bit those of the chain. The test switch
 * TG_DEBUG_FP8_UNFUSED_PRODUCERS runs the plain chain. A composite with fp8_in_first hands m->fp8_in to
 * its first child. */
tg_status tg_fp8_chain_forward_res(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y);
tg_status tg_fp8_chain_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y);
/* One step of such a chain: c's forward (mb, x, res; its FP8 input in, or NULL) where next takes c's output;
 * when c can write the FP8 input of the Linear next starts with, it does, into *out (free it with
 * tg_fp8_input_free after next's forward, which takes it as next->fp8_in), else *out stays empty. */
tg_status tg_fp8_forward_into(tg_module *c, tg_module *next, int mb, const tg_tensor *x, const tg_tensor *res,
                              const struct tg_fp8_input *in, struct tg_fp8_input *out, tg_tensor **y);
/* The scaling tensors (history, scale, scale_inv) of every FP8 state under m,
 * in module order (caller frees the array). */
tg_status tg_module_fp8_tensors(tg_module *m, tg_tensor ***out, int *n);
/* Makes the scaling states that m and the modules under it need under the
 * current autocast setting (before a graphed set backs them up). */
tg_status tg_module_fp8_prepare(tg_module *m);

/* The engine's list of live parameters (param.c links and unlinks). */
void tg_engine_link(tg_param *p);
void tg_engine_unlink(tg_param *p);

/* ------------------------------------------------------------------ module constructors
 * x and y are (B, T, C) or (N, C) in the module's dtype unless said. Weights
 * are drawn normal(0, init_std) in f32 with tg_randn (then rounded for bf16),
 * norm gammas are 1, betas and biases 0. opts.bias covers linear biases and
 * LayerNorm betas. Children inherit the options, named "<name>.<child>". */
tg_status tg_linear_new(int64_t in, int64_t out, const tg_module_opts *o, tg_module **m);
tg_status tg_layernorm_new(int64_t c, const tg_module_opts *o, tg_module **m);
tg_status tg_rmsnorm_new(int64_t c, const tg_module_opts *o, tg_module **m);
/* norm ("LayerNorm"|"RMSNorm") then Linear; TE LayerNormLinear. */
tg_status tg_layernorm_linear_new(int64_t in, int64_t out, const char *norm, const tg_module_opts *o, tg_module **m);
/* norm, fc1 (to hidden, or 2*hidden for swiglu), activation ("gelu"|"swiglu"), fc2; TE LayerNormMLP. */
tg_status tg_layernorm_mlp_new(int64_t c, int64_t hidden, const char *norm, const char *activation,
                               const tg_module_opts *o, tg_module **m);
/* Fused QKV projection (C -> 3C), causal attention with n_head heads, output projection (C -> C). */
tg_status tg_attention_new(int64_t c, int n_head, const tg_module_opts *o, tg_module **m);
/* Pre-norm block: h = x + attn(norm(x)), y = h + mlp(h), the MLP with its own
 * norm. Children: <name>.attn_norm, <name>.attn (qkv, core, proj), <name>.mlp
 * (norm, fc1, gelu|swiglu, fc2). */
tg_status tg_transformer_layer_new(int64_t c, int n_head, int64_t hidden, const char *norm, const char *activation,
                                   const tg_module_opts *o, tg_module **m);
/* idx (B, T) i32 -> (B, T, C): token + learned position (max_t positions). */
tg_status tg_embedding_new(int64_t vocab, int64_t c, int64_t max_t, const tg_module_opts *o, tg_module **m);
/* The token table (V, C) of an Embedding (NULL if m is not one). */
tg_param *tg_embedding_token_table(tg_module *m);
/* Final norm + projection to the vocabulary (no bias) + softmax cross-entropy.
 * tied: uses the embedding's token table (V, C) as the weight (its wgrad adds
 * into it, and the table's hooks fire once both halves of a microbatch are in);
 * the table stays the embedding's parameter: the head does not list it.
 * Parameter names: <name>.norm.weight/.bias, <name>.weight (untied).
 * A plain forward returns logits (..., V) (generation). */
tg_status tg_lm_head_new(int64_t c, int64_t vocab, tg_module *tied_embedding, const char *norm,
                         const tg_module_opts *o, tg_module **m);
/* LM head with targets: loss (2) f32 = [mean loss, valid count] (device). Its
 * backward takes dy = NULL (dloss = 1) and returns dx. mb = 0 picks the
 * microbatch as tg_module_forward / tg_module_backward do. */
tg_status tg_lm_head_forward_loss(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *targets, int ignore_index,
                                  tg_tensor **loss);
/* Backward of a forward_loss with d(loss)/d(mean loss) = dloss (e.g. 1/M to
 * average over microbatches); tg_module_backward with dy NULL is dloss = 1. */
tg_status tg_lm_head_backward_loss(tg_module *m, int mb, double dloss, tg_tensor **dx);
/* The fused loss (on by default): forward_loss computes the logits in chunks of rows (chunk_rows
 * rows each, the last one shorter; 0: chunks of at most 256 MiB of logits, of equal size), never
 * the whole (N, V). fused 0: the logits of all rows, saved for the backward (the unfused path).
 * Refused while a forward_loss waits for its backward. */
tg_status tg_lm_head_set_fused(tg_module *m, int fused, int64_t chunk_rows);
/* forward_loss whose backward_loss will take dloss (e.g. 1/M): with the fused loss the chunks
 * compute the backward at once (dlogits consumed by the dX and dW GEMMs as they are made); the
 * weight's hooks still fire in backward_loss, which must then be given the same dloss. */
tg_status tg_lm_head_forward_loss_grad(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *targets,
                                       int ignore_index, double dloss, tg_tensor **loss);
tg_status tg_sequential_new(tg_module **children, int n, const tg_module_opts *o, tg_module **m);

/* A module implemented by callbacks (Lua tables, via src/lua): the engine
 * fires the hooks of `params` after backward (not delayed) or backward_dw.
 * The engine tells the callback computing the wgrad whether to overwrite
 * (accumulate 0: the first wgrad of the module's parameters in the step) or
 * to add to (1: later ones; always outside steps and while capturing) the
 * parameters' wgrad targets, from tg_param_wgrad_accumulate of its params
 * (which must agree: a parameter listed by two modules is refused there; a
 * module without params gets 0). That is backward_dw, or backward itself
 * when backward_dw is NULL (it gets -1 otherwise). */
struct tg_callback_module_fns {
    tg_status (*forward)(void *ud, int mb, const tg_tensor *x, tg_tensor **y);
    tg_status (*backward)(void *ud, int mb, const tg_tensor *dy, tg_tensor **dx, int accumulate);
    tg_status (*backward_dw)(void *ud, int mb, int accumulate); /* may be NULL: wgrad done inside backward */
    /* optional: several inputs and outputs (tg_module_forward_n / backward_n) */
    tg_status (*forward_n)(void *ud, int mb, const tg_tensor *const *x, int nx, tg_tensor **y, int *ny);
    tg_status (*backward_n)(void *ud, int mb, const tg_tensor *const *dy, int ny, tg_tensor **dx, int nx, int accumulate);
    void (*free_ud)(void *ud);
};
/* The module retains params (and becomes the owner of those without one);
 * it calls free_ud(ud) when it goes. On failure ud stays the caller's. */
tg_status tg_callback_module_new(const struct tg_callback_module_fns *fns, void *ud, tg_param **params, int nparams,
                                 const tg_module_opts *o, tg_module **m);

#endif
