/* debug.h — test-only switches (internal): named flags that select a reference path or reproduce a bug on
 * purpose, set by tests (tg_debug_set, Lua tg.debug) or for a whole run by TG_DEBUG=name[,name...] (read
 * once, at the first use of any flag). */
#ifndef TG_DEBUG_H
#define TG_DEBUG_H

/* Each flag is read where its comment says, never per kernel replay. */
typedef enum tg_debug_flag {
    /* "skip_hooks_after_replay": graphed W replays dispatch no wgrad hooks (TransformerEngine's bug, for
     * the tests that prove the step check and ddp notice it); read by tg_graphed_new for the set it makes. */
    TG_DEBUG_SKIP_HOOKS_AFTER_REPLAY,
    /* "unfused_residual": the transformer layer's backward adds the residual gradients with separate adds
     * instead of in the norm backward; read per backward call. */
    TG_DEBUG_UNFUSED_RESIDUAL,
    /* "unfused_dgelu": LayerNormMLP's backward runs gelu_backward after the GEMM instead of the DGELU
     * epilogue; read per backward call. */
    TG_DEBUG_UNFUSED_DGELU,
    /* "fp8_unfused_producers": under FP8 delayed scaling, LayerNormLinear's and LayerNormMLP's norm and GELU
     * Linear write their high-precision outputs and the next Linear casts them, instead of writing that
     * Linear's FP8 input directly; read per forward call. */
    TG_DEBUG_FP8_UNFUSED_PRODUCERS,
    /* "gemm_blocked": the CPU GEMM runs its blocked loops where it would call CBLAS; read per GEMM. */
    TG_DEBUG_GEMM_BLOCKED,
    /* "epilogue_unfused": the CUDA GEMM runs bias / GELU / bias-grad / GELU-grad as separate kernels
     * instead of cuBLASLt epilogues (the path for combinations cuBLASLt refuses); read per GEMM. */
    TG_DEBUG_EPILOGUE_UNFUSED,
    /* "bgrad_unfused": the CUDA GEMM sums a bias gradient with the column-sum kernel at every size instead of
     * cuBLASLt's bias-grad epilogue below its size rule (to measure that rule); read per GEMM. */
    TG_DEBUG_BGRAD_UNFUSED,
    /* "alloc_direct": the CUDA allocator caches nothing (a cudaMalloc / cudaFree per block, so a memory
     * checker sees every overrun); read once, when the CUDA backend first probes its devices. */
    TG_DEBUG_ALLOC_DIRECT,
    /* "comm_check": every collective compares its arguments across the ranks first (without it, only a
     * communicator's creation and the first collective of each kind and label are checked); read per
     * collective. */
    TG_DEBUG_COMM_CHECK,
    /* "attention_mma_sync": the CUDA attention forward runs the mma.sync kernels where it would run the
     * wgmma ones (sm_90a build on a compute capability 9.0 device); read per forward call. */
    TG_DEBUG_ATTENTION_MMA_SYNC,
    /* "attention_two_pass": the CUDA attention backward on wgmma runs its two-kernel form (dQ, then dK and dV,
     * each recomputing the probabilities) where it would run the one-pass kernel that makes all three (head
     * dim 64); read per backward call. */
    TG_DEBUG_ATTENTION_TWO_PASS,
    /* "graph_share_any_order": a graphed set shares microbatch 1's graphs and buffers with every microbatch
     * even when its order interleaves microbatches (the reuse-too-early bug, for the test that proves the
     * lifetime check matters); read by tg_graphed_new for the set it makes. */
    TG_DEBUG_GRAPH_SHARE_ANY_ORDER,
    /* "graph_reuse_early": a graphed set that reuses static buffers across microbatches lets a buffer go at
     * its microbatch's B, ignoring the deferred W (and the earlier chunk's B) that still read it (the
     * reuse-too-early bug, for the test that proves the lifetimes matter); read by tg_graphed_new. */
    TG_DEBUG_GRAPH_REUSE_EARLY,
    /* The bf16 study (examples/bench/bf16_study.lua), CPU backend, f32 tensors only; read per kernel call.
     * "autocast_gemm": GEMMs compute as PyTorch's bf16 autocast does for an f32 model: operands and bias
     * rounded to bf16, the product (+ bias) rounded to bf16, the GELU output rounded, then beta * C added
     * in f32 (the residual add and the gradient accumulation stay f32); bias gradients from the rounded
     * operand, rounded.
     * "round_residual": with autocast_gemm, the residual stream is rounded to bf16 as a bf16 model keeps it:
     * the embedding output, the results of GEMMs that add a residual, the norms' input gradients.
     * "round_grads": with autocast_gemm, weight gradients are rounded to bf16 after each contribution, as
     * bf16 gradients without main_grad are accumulated.
     * "round_params": with autocast_gemm, the norms' gamma and beta and the embedding's tables are read
     * rounded to bf16, as a bf16 model stores them (autocast reads them in f32). */
    TG_DEBUG_AUTOCAST_GEMM,
    TG_DEBUG_ROUND_RESIDUAL,
    TG_DEBUG_ROUND_GRADS,
    TG_DEBUG_ROUND_PARAMS,
    TG_DEBUG_COUNT
} tg_debug_flag;

/* Whether flag is on. */
int tg_debug_get(tg_debug_flag flag);
/* Turns flag on or off; returns its previous setting. */
int tg_debug_set(tg_debug_flag flag, int on);
/* The flag's name ("alloc_direct", ...), NULL when out of range. */
const char *tg_debug_name(tg_debug_flag flag);
/* The flag named name, or -1. */
int tg_debug_lookup(const char *name);

#endif
