/* nn-bad-input-errors.c — wrong shapes and dtypes to every module, backward before forward, backward_dw with nothing
 * queued, misuse of steps and bad constructor arguments fail with a status and a message naming what is wrong. */
#include "nn/nn.h"
#include "tap.h"

#include <string.h>

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        if ((call) != TG_OK) bail_out("%s: %s", #call, tg_last_error());                               \
    } while (0)

static const tg_device CPU = {TG_CPU, 0};

static tg_tensor *tensor(tg_dtype dt, int nd, int64_t a, int64_t b, int64_t c)
{
    int64_t shape[3] = {a, b, c};
    tg_tensor *t;
    CHECK(tg_tensor_new(dt, nd, shape, CPU, &t));
    CHECK(tg_fill(t, dt == TG_I32 ? 0 : 0.25));
    return t;
}

/* st must be want, and the message must contain each of the (NULL-terminated) fragments. */
static void expect(tg_status st, tg_status want, const char *what, const char *frag1, const char *frag2)
{
    const char *msg = st == TG_OK ? "(no error)" : tg_last_error();
    int good = st == want && strstr(msg, frag1) && (!frag2 || strstr(msg, frag2));
    ok(good, "%s", what);
    if (!good) diag("status %s, message: %s (wanted \"%s\"%s%s%s)", tg_status_name(st), msg, frag1, frag2 ? ", \"" : "",
                    frag2 ? frag2 : "", frag2 ? "\"" : "");
}

static tg_module_opts opts(const char *name, int delay)
{
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = CPU;
    o.name = name;
    o.delay_wgrad = delay;
    return o;
}

int main(void)
{
    plan(NO_PLAN);
    tg_module *fc, *ln, *rms, *lnl, *mlp, *attn, *layer, *emb, *head, *seq;
    tg_module_opts o = opts("fc", 1);
    CHECK(tg_linear_new(8, 5, &o, &fc));
    o = opts("ln", 0);
    CHECK(tg_layernorm_new(8, &o, &ln));
    o = opts("rms", 0);
    CHECK(tg_rmsnorm_new(8, &o, &rms));
    o = opts("lnl", 0);
    CHECK(tg_layernorm_linear_new(8, 4, "LayerNorm", &o, &lnl));
    o = opts("mlp", 0);
    CHECK(tg_layernorm_mlp_new(8, 16, "RMSNorm", "swiglu", &o, &mlp));
    o = opts("attn", 0);
    CHECK(tg_attention_new(8, 2, &o, &attn));
    o = opts("h.0", 1);
    CHECK(tg_transformer_layer_new(8, 2, 16, "LayerNorm", "gelu", &o, &layer));
    o = opts("emb", 0);
    CHECK(tg_embedding_new(11, 8, 4, &o, &emb));
    o = opts("head", 0);
    CHECK(tg_lm_head_new(8, 11, emb, "LayerNorm", &o, &head));
    tg_module *kids[2] = {ln, fc};
    o = opts("seq", 1);
    CHECK(tg_sequential_new(kids, 2, &o, &seq));

    tg_tensor *x8 = tensor(TG_F32, 3, 2, 3, 8), *x7 = tensor(TG_F32, 3, 2, 3, 7), *xb = tensor(TG_BF16, 3, 2, 3, 8),
              *x1 = tensor(TG_F32, 1, 8, 0, 0), *x2d = tensor(TG_F32, 2, 6, 8, 0), *dy4 = tensor(TG_F32, 3, 2, 3, 4),
              *idx = tensor(TG_I32, 2, 2, 3, 0), *idx_long = tensor(TG_I32, 2, 2, 5, 0), *idx_f = tensor(TG_F32, 2, 2, 3, 0),
              *tg_short = tensor(TG_I32, 1, 5, 0, 0), *tg_f = tensor(TG_F32, 2, 2, 3, 0), *y = NULL, *dx = NULL;

    /* ------------------------------------------------------------ shapes and dtypes of inputs */
    expect(tg_module_forward(fc, 1, x7, &y), TG_EINVAL, "Linear: wrong width names module, actual and expected shapes",
           "Linear 'fc' forward (microbatch 1): x is [2,3,7] f32", "expected (N, 8) or (B, T, 8) f32");
    ok(y == NULL, "failed forward returns no tensor");
    expect(tg_module_forward(fc, 1, xb, &y), TG_EINVAL, "Linear: bf16 input to an f32 module", "x is [2,3,8] bf16", "f32");
    expect(tg_module_forward(fc, 1, x1, &y), TG_EINVAL, "Linear: 1-D input", "x is [8] f32", "expected (N, 8)");
    expect(tg_module_forward(ln, 1, x7, &y), TG_EINVAL, "LayerNorm: wrong width", "LayerNorm 'ln' forward", "x is [2,3,7] f32");
    expect(tg_module_forward(rms, 1, xb, &y), TG_EINVAL, "RMSNorm: wrong dtype", "RMSNorm 'rms' forward", "x is [2,3,8] bf16");
    expect(tg_module_forward(lnl, 1, x7, &y), TG_EINVAL, "LayerNormLinear: names the child that rejected x",
           "LayerNorm 'lnl.norm' forward", "expected (N, 8)");
    expect(tg_module_forward(mlp, 1, x7, &y), TG_EINVAL, "LayerNormMLP: wrong width", "RMSNorm 'mlp.norm' forward", "x is [2,3,7]");
    expect(tg_module_forward(attn, 1, x2d, &y), TG_EINVAL, "CausalSelfAttention: needs (B, T, C)",
           "CausalSelfAttention 'attn' forward (microbatch 1): x is [6,8] f32", "expected (B, T, 8) f32");
    expect(tg_module_forward(layer, 1, xb, &y), TG_EINVAL, "TransformerLayer: wrong dtype", "LayerNorm 'h.0.attn_norm' forward",
           "x is [2,3,8] bf16");
    expect(tg_module_forward(emb, 1, idx_f, &y), TG_EINVAL, "Embedding: float ids", "Embedding 'emb' forward (microbatch 1): idx is [2,3] f32",
           "expected (B, T) i32");
    expect(tg_module_forward(emb, 1, idx_long, &y), TG_EINVAL, "Embedding: more tokens than positions", "idx is [2,5] i32",
           "1 <= T <= 4");
    expect(tg_module_forward(emb, 1, x8, &y), TG_EINVAL, "Embedding: float activations instead of ids", "idx is [2,3,8] f32", "i32");
    expect(tg_module_forward(seq, 1, x7, &y), TG_EINVAL, "Sequential: the first child rejects x", "LayerNorm 'ln' forward", "[2,3,7]");
    expect(tg_module_forward(fc, -1, x8, &y), TG_EINVAL, "a negative microbatch is refused", "microbatch -1", "count from 1");

    /* ------------------------------------------------------------ backward misuse */
    expect(tg_module_backward(fc, 3, dy4, &dx), TG_ESTATE, "backward before forward names module and microbatch",
           "Linear 'fc' backward (microbatch 3): backward of microbatch 3 before its forward", "saved microbatches: none");
    CHECK(tg_module_forward(fc, 1, x8, &y));
    expect(tg_module_backward(fc, 2, y, &dx), TG_ESTATE, "backward of another microbatch lists the saved ones",
           "backward of microbatch 2 before its forward", "saved microbatches: 1");
    expect(tg_module_backward(fc, 1, dy4, &dx), TG_EINVAL, "dy of the wrong shape", "Linear 'fc' backward (microbatch 1): dy is [2,3,4] f32",
           "expected [2,3,5] f32");
    expect(tg_module_backward(fc, 1, NULL, &dx), TG_EINVAL, "missing dy", "dy is missing", "expected [2,3,5] f32");
    ok(tg_module_backward(fc, 1, y, &dx) == TG_OK, "after a rejected dy the saved context is still there");
    tg_tensor_free(dx), dx = NULL;
    expect(tg_module_backward(fc, 1, y, &dx), TG_ESTATE, "a second backward of the same microbatch", "before its forward (or after its backward)",
           NULL);
    tg_tensor_free(y), y = NULL;
    ok(tg_module_backward_dw(fc, 1) == TG_OK, "the queued wgrad pops");
    expect(tg_module_backward_dw(fc, 1), TG_ESTATE, "backward_dw with nothing queued names the module",
           "backward_dw with nothing queued on Linear 'fc'", "delay_wgrad is on");
    expect(tg_module_backward_dw(ln, 1), TG_ESTATE, "backward_dw on a module that does not delay", "backward_dw with nothing queued on LayerNorm 'ln'",
           "delay_wgrad is off");
    expect(tg_module_backward_dw(layer, 0), TG_ESTATE, "backward_dw with nothing queued on a composite names it",
           "backward_dw with nothing queued on TransformerLayer 'h.0'", NULL);
    expect(tg_module_backward_dw(seq, 0), TG_ESTATE, "and on a Sequential", "nothing queued on Sequential 'seq'", NULL);
    expect(tg_module_backward(layer, 2, x8, &dx), TG_ESTATE, "composite backward before forward names the first leaf to notice",
           "Linear 'h.0.mlp.fc2' backward (microbatch 2): backward of microbatch 2 before its forward", NULL);

    CHECK(tg_module_forward(emb, 1, idx, &y));
    expect(tg_module_backward(emb, 1, x7, &dx), TG_EINVAL, "Embedding: dy of the wrong width", "Embedding 'emb' backward (microbatch 1): dy is [2,3,7] f32",
           "expected [2,3,8] f32");
    tg_tensor *loss = NULL;
    expect(tg_lm_head_forward_loss(head, 1, y, tg_short, -1, &loss), TG_EINVAL, "LMHead: too few targets",
           "LMHead 'head' forward_loss (microbatch 1): targets are [5] i32", "expected 6 i32 ids");
    expect(tg_lm_head_forward_loss(head, 1, y, tg_f, -1, &loss), TG_EINVAL, "LMHead: float targets", "targets are [2,3] f32", NULL);
    expect(tg_lm_head_forward_loss(head, 1, x7, idx, -1, &loss), TG_EINVAL, "LMHead: x of the wrong width", "LayerNorm 'head.norm' forward", "[2,3,7]");
    expect(tg_lm_head_forward_loss(fc, 1, y, idx, -1, &loss), TG_EINVAL, "forward_loss on a module that is no LM head", "not an LMHead", NULL);
    tg_tensor *logits;
    CHECK(tg_module_forward(head, 1, y, &logits));
    expect(tg_module_backward(head, 1, NULL, &dx), TG_ESTATE, "LMHead: backward without dy after a plain forward",
           "backward without dy needs forward_loss of microbatch 1", NULL);
    tg_tensor_free(logits), tg_tensor_free(y), y = NULL;

    /* ------------------------------------------------------------ steps */
    CHECK(tg_step_begin(2));
    expect(tg_step_begin(2), TG_ESTATE, "step_begin inside a step", "is still open", NULL);
    tg_param **ps;
    int np;
    CHECK(tg_module_parameters(ln, &ps, &np));
    expect(tg_param_wgrad_done(ps[0], 3), TG_EINVAL, "a wgrad for a microbatch beyond the step's", "wgrad of ln.weight for microbatch 3",
           "has 2 microbatches");
    free(ps);
    CHECK(tg_step_end());
    expect(tg_step_end(), TG_ESTATE, "step_end without a step", "no step is open", NULL);
    expect(tg_step_begin(0), TG_EINVAL, "a step of 0 microbatches", "microbatches must be >= 1", NULL);

    /* ------------------------------------------------------------ constructors */
    tg_module *bad = NULL;
    o = opts("bad", 0);
    expect(tg_layernorm_mlp_new(8, 16, "LayerNorm", "relu", &o, &bad), TG_EINVAL, "unknown activation", "unknown activation 'relu'",
           "\"gelu\" or \"swiglu\"");
    expect(tg_layernorm_linear_new(8, 4, "batchnorm", &o, &bad), TG_EINVAL, "unknown normalization", "unknown normalization 'batchnorm'",
           "\"LayerNorm\" or \"RMSNorm\"");
    expect(tg_attention_new(8, 3, &o, &bad), TG_EINVAL, "width not a multiple of the heads", "hidden_size 8 must be a positive multiple of num_attention_heads 3",
           NULL);
    expect(tg_lm_head_new(8, 11, fc, "LayerNorm", &o, &bad), TG_EINVAL, "tying to a non-embedding", "can only be tied to an Embedding", NULL);
    expect(tg_lm_head_new(8, 12, emb, "LayerNorm", &o, &bad), TG_EINVAL, "tying to a table of another size", "emb.wte is [11,8]",
           "expected [12,8]");
    o.dtype = TG_I32;
    expect(tg_linear_new(8, 4, &o, &bad), TG_EINVAL, "an integer compute dtype", "dtype i32", NULL);
    ok(bad == NULL, "failed constructors return no module");

    tg_module *all[] = {fc, ln, rms, lnl, mlp, attn, layer, head, emb, seq};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_module_release(all[i]);
    tg_tensor *ts[] = {x8, x7, xb, x1, x2d, dy4, idx, idx_long, idx_f, tg_short, tg_f};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) tg_tensor_free(ts[i]);
    return done_testing();
}
