/* nn-delayed-wgrad-is-bit-identical.c — a small tied GPT trained over 4 microbatches gives bit-identical gradients
 * with wgrad immediate or delayed (popped right after B or deferred zero-bubble style), into grad or fused main_grad.
 *
 * Accumulation order, the same in every mode: per parameter, the step's first contribution overwrites the
 * buffer and the next ones add to it, in the order the microbatches' wgrads run, which is their B order
 * (the wgrad store is FIFO); the tied token table gets the LM head's part, then the embedding's, per microbatch. */
#include "nn/nn.h"
#include "tap.h"

#include <string.h>

enum { B = 2, T = 4, C = 8, NH = 2, H = 16, V = 13, M = 4 };

struct model {
    tg_module *mods[4]; /* emb, layer (layernorm, gelu), LayerNormLinear, layer (rmsnorm, swiglu) */
    tg_module *head;    /* tied to mods[0] */
    tg_param **p;
    int np;
    tg_tensor *act[M][5]; /* activations, per microbatch */
};

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        if ((call) != TG_OK) bail_out("%s: %s", #call, tg_last_error());                               \
    } while (0)

static void model_new(struct model *md, int delay, int fused)
{
    memset(md, 0, sizeof *md);
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = (tg_device){TG_CPU, 0};
    o.delay_wgrad = delay;
    o.fuse_wgrad_accumulation = fused;
    o.init_std = 0.2;
    tg_manual_seed(77);
    o.name = "emb";
    CHECK(tg_embedding_new(V, C, T, &o, &md->mods[0]));
    o.name = "h.0";
    CHECK(tg_transformer_layer_new(C, NH, H, "LayerNorm", "gelu", &o, &md->mods[1]));
    o.name = "mix";
    CHECK(tg_layernorm_linear_new(C, C, "LayerNorm", &o, &md->mods[2]));
    o.name = "h.1";
    CHECK(tg_transformer_layer_new(C, NH, H, "RMSNorm", "swiglu", &o, &md->mods[3]));
    o.name = "head";
    CHECK(tg_lm_head_new(C, V, md->mods[0], "LayerNorm", &o, &md->head));
    tg_module *all[5] = {md->mods[0], md->mods[1], md->mods[2], md->mods[3], md->head};
    tg_module *seq;
    CHECK(tg_sequential_new(all, 5, NULL, &seq));
    CHECK(tg_module_parameters(seq, &md->p, &md->np));
    tg_module_release(seq);
}

static void model_free(struct model *md)
{
    free(md->p);
    tg_module_release(md->head);
    for (int i = 0; i < 4; i++) tg_module_release(md->mods[i]);
}

static void forward(struct model *md, int mb)
{
    int32_t idx[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        idx[i] = (i * 5 + mb * 3) % V;
        tgt[i] = (i * 7 + mb) % V;
    }
    tg_tensor *ti, *tt, *loss;
    CHECK(tg_tensor_new(TG_I32, 2, (int64_t[]){B, T}, (tg_device){TG_CPU, 0}, &ti));
    CHECK(tg_tensor_new(TG_I32, 2, (int64_t[]){B, T}, (tg_device){TG_CPU, 0}, &tt));
    CHECK(tg_tensor_write(ti, idx, sizeof idx));
    CHECK(tg_tensor_write(tt, tgt, sizeof tgt));
    const tg_tensor *cur = ti;
    for (int i = 0; i < 4; i++) {
        CHECK(tg_module_forward(md->mods[i], mb, cur, &md->act[mb - 1][i]));
        cur = md->act[mb - 1][i];
    }
    CHECK(tg_lm_head_forward_loss(md->head, mb, cur, tt, -1, &loss));
    tg_tensor_free(ti), tg_tensor_free(tt), tg_tensor_free(loss);
    for (int i = 0; i < 4; i++) tg_tensor_free(md->act[mb - 1][i]);
}

static void backward(struct model *md, int mb)
{
    tg_tensor *d, *next;
    CHECK(tg_module_backward(md->head, mb, NULL, &d));
    for (int i = 3; i >= 0; i--) {
        CHECK(tg_module_backward(md->mods[i], mb, d, &next));
        tg_tensor_free(d);
        d = next;
    }
    if (d) bail_out("the embedding returned an input gradient");
}

static void backward_dw(struct model *md, int mb)
{
    CHECK(tg_module_backward_dw(md->head, mb));
    for (int i = 3; i >= 0; i--) CHECK(tg_module_backward_dw(md->mods[i], mb));
}

/* Runs one step of `sched` ("F1 F2 B1 W1 ..."; W pops each module's queued wgrad of its microbatch, skipped when not delayed). */
static void run_step(struct model *md, const char *sched, int delay)
{
    CHECK(tg_step_begin(M));
    for (const char *s = sched; *s; s++) {
        if (*s == 'F') forward(md, s[1] - '0');
        else if (*s == 'B') backward(md, s[1] - '0');
        else if (*s == 'W' && delay) backward_dw(md, s[1] - '0');
    }
    CHECK(tg_step_end());
}

/* The wgrad targets' bytes, concatenated. */
static unsigned char *grads(struct model *md, size_t *n)
{
    size_t total = 0;
    for (int i = 0; i < md->np; i++) total += tg_tensor_numel(md->p[i]->data) * 4;
    unsigned char *buf = malloc(total), *q = buf;
    for (int i = 0; i < md->np; i++) {
        tg_tensor *g = tg_param_wgrad_target(md->p[i]);
        size_t bytes = tg_tensor_numel(g) * 4;
        CHECK(tg_tensor_read(g, q, bytes));
        q += bytes;
    }
    *n = total;
    return buf;
}

/* 1F1B-like: F1 F2 B1 F3 B2 F4 B3 B4; W's right after each B, or all at the end (deferred). */
static const char *SCHED_EAGER = "F1 F2 B1 W1 F3 B2 W2 F4 B3 W3 B4 W4";
static const char *SCHED_DEFERRED = "F1 F2 B1 F3 B2 F4 B3 B4 W1 W2 W3 W4";
static const char *SCHED_INTERLEAVED = "F1 F2 B1 F3 B2 W1 F4 B3 W2 B4 W3 W4";

int main(void)
{
    plan(NO_PLAN);
    struct {
        const char *name, *sched;
        int delay, fused;
    } modes[] = {
        {"immediate wgrad into grad", SCHED_EAGER, 0, 0},
        {"delayed wgrad popped after each B", SCHED_EAGER, 1, 0},
        {"delayed wgrad deferred to the end of the step", SCHED_DEFERRED, 1, 0},
        {"delayed wgrad interleaved with later B", SCHED_INTERLEAVED, 1, 0},
        {"immediate wgrad fused into main_grad", SCHED_EAGER, 0, 1},
        {"delayed wgrad fused into main_grad", SCHED_INTERLEAVED, 1, 1},
    };
    unsigned char *ref = NULL;
    size_t nref = 0;
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        struct model md;
        model_new(&md, modes[k].delay, modes[k].fused);
        run_step(&md, modes[k].sched, modes[k].delay);
        size_t n;
        unsigned char *g = grads(&md, &n);
        if (!ref) {
            ref = g, nref = n;
            double mx = 0, v;
            for (int i = 0; i < md.np; i++) {
                CHECK(tg_max_abs(tg_param_wgrad_target(md.p[i]), &v));
                ok(v > 0, "reference: %s has a nonzero gradient", md.p[i]->name);
                mx = v > mx ? v : mx;
            }
            diag("reference gradients: %d parameters, %zu bytes, largest |g| %.3g", md.np, n, mx);
        } else {
            ok(n == nref && memcmp(g, ref, n) == 0, "%s: gradients bit-identical to immediate wgrad", modes[k].name);
            free(g);
        }
        /* a second step with the same data overwrites instead of adding to the first */
        run_step(&md, modes[k].sched, modes[k].delay);
        g = grads(&md, &n);
        ok(n == nref && memcmp(g, ref, n) == 0, "%s: step 2 starts from zero (same gradients as step 1)", modes[k].name);
        free(g);
        ok(!tg_module_need_backward_dw(md.head) && !tg_module_need_backward_dw(md.mods[1]), "%s: wgrad store empty after the step",
           modes[k].name);
        model_free(&md);
    }
    free(ref);
    return done_testing();
}
