/* nn.h — modules with forward / dgrad / wgrad, parameters, the wgrad store, hooks and the step engine. */
#ifndef TG_NN_H
#define TG_NN_H

#include "core/core.h"
#include "core/ops_nn.h"

typedef struct tg_module tg_module;
typedef struct tg_param tg_param;

/* ------------------------------------------------------------------ hooks
 * The hook contract (docs/ARCHITECTURE.md): for every parameter p, every step, every
 * microbatch m, p's wgrad hooks fire exactly once, after p's wgrad for m is in
 * p's gradient buffer (issued on the stream), never before, and never as real
 * hooks while the device captures. */
typedef struct tg_hook_info {
    int microbatch; /* 1-based microbatch index of the wgrad that just finished */
    int last;       /* 1 when this is p's last wgrad of the step (count == microbatches); 1 outside steps */
    int chunk;      /* pipeline chunk of the module (module option, default 1) */
    int64_t step;   /* 1-based step index (0 outside steps) */
} tg_hook_info;

/* A hook returns TG_OK or an error (message set), which aborts the backward
 * that fired it and is returned to its caller. */
typedef tg_status (*tg_hook_fn)(void *ud, tg_param *p, const tg_hook_info *info);

struct tg_hook {
    tg_hook_fn fn;
    void *ud;
    void (*free_ud)(void *ud); /* called when the parameter goes; may be NULL */
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
    int refcount;
    tg_module *owner;     /* not a reference; NULL once the owning module is gone */
    /* engine bookkeeping (src/nn/engine.c) */
    int64_t step_seen;    /* step of the counts below (0: outside steps) */
    int contributed;      /* wgrad contributions issued this step (0: the next one overwrites) */
    int *contrib_mb;      /* (microbatches) contributions per microbatch this step */
    int fired;            /* hook dispatches this step */
    int *fired_mb;        /* (microbatches) wgrads finished per microbatch this step */
    int fired_cap;
    struct tg_param *next_live; /* engine's list of live parameters */
    struct tg_param *prev_live;
};

/* New parameter (refcount 1) holding data (taken over, also on failure).
 * Allocates grad (and master when data is bf16, copied from data; main_grad
 * when fused), zeroed; contributors 1; linked into the engine's live list. */
tg_status tg_param_new(const char *name, tg_tensor *data, int fuse_wgrad_accumulation, tg_param **out);
tg_param *tg_param_retain(tg_param *p);
void tg_param_release(tg_param *p);
tg_status tg_param_add_hook(tg_param *p, tg_hook_fn fn, void *ud, void (*free_ud)(void *));
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
/* Zeroes grad and main_grad. */
tg_status tg_param_zero_grad(tg_param *p);

/* ------------------------------------------------------------------ engine (steps and the hook check) */
/* Opens a step of `microbatches` microbatches. Fails if one is open. */
tg_status tg_step_begin(int microbatches);
/* Closes the step. With the hook check on, fails (TG_ESTATE) when a parameter
 * that has hooks and whose module ran forward in this step did not fire exactly
 * once per microbatch; the message names every such parameter, what it got per
 * microbatch and the module's execution mode. */
tg_status tg_step_end(void);
int tg_step_open(void);
int64_t tg_step_index(void);
int tg_step_microbatches(void);
void tg_hook_check_set(int on); /* default on */
int tg_hook_check_get(void);
/* Test-only switch reproducing TransformerEngine's bug: when on, hooks are not
 * dispatched after W-graph replays (graph layer honours it). */
void tg_debug_skip_hooks_after_replay(int on);
int tg_debug_skip_hooks_after_replay_get(void);

/* The graph layer learns which parameters a captured graph computes wgrad
 * for: while the device captures, tg_param_wgrad_done calls the observer
 * (if any) instead of recording or firing. */
typedef tg_status (*tg_capture_observer)(void *ud, tg_param *p, int mb);
void tg_engine_set_capture_observer(tg_capture_observer fn, void *ud);
/* Graph warm-up: while quiet, wgrads are neither recorded nor fired and
 * always accumulate (the graph layer restores the gradients afterwards). */
void tg_engine_set_quiet(int on);
/* Tracing (src/sched): told before (phase 0) and after (phase 1) every
 * dispatch of a parameter's hooks (parameters with hooks only). NULL: none. */
typedef void (*tg_hook_observer)(void *ud, const tg_param *p, const tg_hook_info *info, int phase);
void tg_engine_set_hook_observer(tg_hook_observer fn, void *ud);

/* Records that one wgrad contribution of p for microbatch mb is issued; when
 * all p->contributors contributions of mb are in, fires p's hooks. While the
 * device captures nothing is recorded or fired. Called by modules after their
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
} tg_module_opts;

/* Fills defaults. */
void tg_module_opts_default(tg_module_opts *o);

/* One saved forward context (per module, per microbatch) and one queued wgrad item. */
struct tg_saved {
    int mb;
    tg_tensor *t[8];  /* saved tensors (owned) */
    int n;
    int64_t ival;     /* a module-specific integer (LM head: ignore_index) */
    struct tg_saved *next;
};

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
    /* Leaf modules with parameters: compute one wgrad item (popped from the
     * store by the generic code, or handed over directly when not delayed),
     * then call tg_param_wgrad_done for each parameter written, after all
     * its kernels are issued (this fires the hooks). The generic code frees
     * the item. Composites and parameterless leaves: NULL. */
    tg_status (*wgrad)(tg_module *m, struct tg_saved *item);
    void (*destroy)(tg_module *m);
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
    void *impl;                  /* module-specific state */
};

/* Generic module calls (all modules, composites included). */
tg_status tg_module_forward(tg_module *m, int mb, const tg_tensor *x, tg_tensor **y);
/* Forward with a residual: y = res + forward(x), for composites whose input
 * also bypasses m. res (NULL: plain forward) is only read. Modules with
 * forward_res fuse the add (Linear: its GEMM reads res as the C that beta = 1
 * scales; chains hand res to their last child); others run forward, then one
 * add. Saves and hooks exactly like tg_module_forward. */
tg_status tg_module_forward_res(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *res, tg_tensor **y);
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
 * switch below) the residual's shape is checked by the add, after the module
 * ran: a wrong res then fails the call with the microbatch's forward context
 * or wgrad already used (its hooks may have fired), like any failure inside
 * a backward. The fused paths check it first. */
/* Test switch: when on, tg_module_forward_res and tg_module_backward_res
 * never fuse (forward or backward, then add), to compare against the fused
 * paths. Default off. */
void tg_debug_unfused_residual(int on);
/* Pops one queued wgrad (leaf: its own; composite: one of each child that has
 * one, children in reverse order like backward), computes it, then fires the
 * hooks of its parameters. Fails with TG_ESTATE "backward_dw with nothing
 * queued on <module>" when nothing is queued.
 * Errors of these calls are prefixed once, by the innermost module that
 * failed: "Linear 'h.0.mlp.fc1' backward (microbatch 2): dy is ...".
 * The engine is single-threaded (one host thread drives the modules). */
tg_status tg_module_backward_dw(tg_module *m);
int tg_module_need_backward_dw(const tg_module *m);
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
void tg_module_release(tg_module *m);

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
/* LayerNorm or RMSNorm by name ("layernorm" (also NULL) | "rmsnorm"). */
tg_status tg_norm_new_by_name(const char *norm, int64_t c, const tg_module_opts *o, tg_module **m);
/* Linear on an existing weight (LM head tied to an embedding): no bias; the
 * weight is retained but not listed among the module's own parameters. */
tg_status tg_linear_new_shared(tg_param *weight, const tg_module_opts *o, tg_module **m);
/* Linear followed by GELU, fused (LayerNormMLP's fc1): y = gelu(x W^T + b) in
 * one GEMM epilogue saving the pre-activation; backward applies gelu' first. */
tg_status tg_linear_gelu_new(int64_t in, int64_t out, const tg_module_opts *o, tg_module **m);
/* Backward of the Linear m (tg_module_backward: spans, hooks, wgrad as usual)
 * whose input is gelu_src's gelu output: m's dgrad GEMM applies gelu' of
 * gelu_src's saved pre-activation (DGELU epilogue), so *dx is dh, and
 * gelu_src's next backward of mb takes dh as its dy (no gelu_backward). */
tg_status tg_linear_backward_dgelu(tg_module *m, int mb, const tg_tensor *dy, tg_module *gelu_src, tg_tensor **dx);
/* Test switch: when on, LayerNormMLP(gelu) runs gelu_backward on its own
 * again (no DGELU in fc2's dgrad), to compare against the fused path. Default off. */
void tg_debug_unfused_dgelu(int on);
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
/* norm ("layernorm"|"rmsnorm") then Linear; TE LayerNormLinear. */
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
 * backward takes dy = NULL (dloss = 1) and returns dx. */
tg_status tg_lm_head_forward_loss(tg_module *m, int mb, const tg_tensor *x, const tg_tensor *targets, int ignore_index,
                                  tg_tensor **loss);
/* Backward of a forward_loss with d(loss)/d(mean loss) = dloss (e.g. 1/M to
 * average over microbatches); tg_module_backward with dy NULL is dloss = 1. */
tg_status tg_lm_head_backward_loss(tg_module *m, int mb, double dloss, tg_tensor **dx);
tg_status tg_sequential_new(tg_module **children, int n, const tg_module_opts *o, tg_module **m);

/* A module implemented by callbacks (Lua tables, via src/lua): the engine
 * fires the hooks of `params` after backward (not delayed) or backward_dw. */
struct tg_callback_module_fns {
    tg_status (*forward)(void *ud, int mb, const tg_tensor *x, tg_tensor **y);
    tg_status (*backward)(void *ud, int mb, const tg_tensor *dy, tg_tensor **dx);
    tg_status (*backward_dw)(void *ud, int mb); /* may be NULL: wgrad done inside backward */
    void (*free_ud)(void *ud);
};
/* The module retains params (and becomes the owner of those without one);
 * it calls free_ud(ud) when it goes. On failure ud stays the caller's. */
tg_status tg_callback_module_new(const struct tg_callback_module_fns *fns, void *ud, tg_param **params, int nparams,
                                 const tg_module_opts *o, tg_module **m);

#endif
