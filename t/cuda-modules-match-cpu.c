/* cuda-modules-match-cpu.c — every nn module on CUDA matches the same module on the CPU backend (same weights and inputs): forward, dgrad and each wgrad, in f32 and bf16, unfused and fused into main_grad with delayed wgrad; also an LM head tied to an embedding (the table's wgrad from both). */
#include "nn/nn.h"
#include "tap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sizes that reach the kernels' real paths: head dim 64 (tensor-core attention in bf16), T not a multiple of the
 * 64-row tile, several column blocks in the norm and bias wgrads. */
enum { B = 2, T = 70, C = 128, NH = 2, H = 512, V = 300, N = B * T };

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        if ((call) != TG_OK) bail_out("%s: %s", #call, tg_last_error());                               \
    } while (0)

enum kind { LINEAR, LAYERNORM, RMSNORM, LNLINEAR, MLP_GELU, MLP_SWIGLU, ATTN, LAYER, LAYER_RMS, EMB, HEAD };
static const char *names[] = {"Linear", "LayerNorm", "RMSNorm", "LayerNormLinear", "LayerNormMLP(gelu)",
                              "LayerNormMLP(rmsnorm,swiglu)", "CausalSelfAttention", "TransformerLayer",
                              "TransformerLayer(rmsnorm,swiglu)", "Embedding", "LMHead(untied)"};

static tg_module *make(enum kind k, tg_device dev, tg_dtype dt, int fused, int delay)
{
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = dev;
    o.dtype = dt;
    o.fuse_wgrad_accumulation = fused;
    o.delay_wgrad = delay;
    o.init_std = 0.1;
    o.name = names[k];
    tg_module *m = NULL;
    switch (k) {
    case LINEAR: CHECK(tg_linear_new(C, 192, &o, &m)); break;
    case LAYERNORM: CHECK(tg_layernorm_new(C, &o, &m)); break;
    case RMSNORM: CHECK(tg_rmsnorm_new(C, &o, &m)); break;
    case LNLINEAR: CHECK(tg_layernorm_linear_new(C, 192, "LayerNorm", &o, &m)); break;
    case MLP_GELU: CHECK(tg_layernorm_mlp_new(C, H, "LayerNorm", "gelu", &o, &m)); break;
    case MLP_SWIGLU: CHECK(tg_layernorm_mlp_new(C, H, "RMSNorm", "swiglu", &o, &m)); break;
    case ATTN: CHECK(tg_attention_new(C, NH, &o, &m)); break;
    case LAYER: CHECK(tg_transformer_layer_new(C, NH, H, "LayerNorm", "gelu", &o, &m)); break;
    case LAYER_RMS: CHECK(tg_transformer_layer_new(C, NH, H, "RMSNorm", "swiglu", &o, &m)); break;
    case EMB: CHECK(tg_embedding_new(V, C, T, &o, &m)); break;
    case HEAD: CHECK(tg_lm_head_new(C, V, NULL, "LayerNorm", &o, &m)); break;
    }
    return m;
}

/* ||a - b|| / ||b|| (a on any device, b the CPU reference); NaN when either holds a NaN. */
static double rel_l2(const tg_tensor *a, const tg_tensor *b)
{
    size_t n = (size_t)tg_tensor_numel(b);
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), num = 0, den = 0;
    CHECK(tg_tensor_read_f64(a, x, n));
    CHECK(tg_tensor_read_f64(b, y, n));
    for (size_t i = 0; i < n; i++) num += (x[i] - y[i]) * (x[i] - y[i]), den += y[i] * y[i];
    free(x), free(y);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Forward + backward (+ backward_dw when delayed) of m on x; y (or the loss) and dx out. dy: the output gradient. */
static void run(enum kind k, tg_module *m, const tg_tensor *x, const tg_tensor *targets, const tg_tensor *r,
                tg_device dev, tg_tensor **y, tg_tensor **dx)
{
    if (k == HEAD) {
        CHECK(tg_lm_head_forward_loss(m, 1, x, targets, -1, y));
        CHECK(tg_module_backward(m, 1, NULL, dx));
    } else {
        CHECK(tg_module_forward(m, 1, x, y));
        tg_tensor *dy, *rv;
        CHECK(tg_tensor_new(tg_tensor_dtype(*y), tg_tensor_ndim(*y), (*y)->shape, dev, &dy));
        CHECK(tg_tensor_view(r, 0, 1, (int64_t[]){tg_tensor_numel(dy)}, &rv));
        CHECK(tg_copy(dy, rv)); /* r (on the CPU) is long enough for every output */
        tg_tensor_free(rv);
        CHECK(tg_module_backward(m, 1, dy, dx));
        tg_tensor_free(dy);
    }
    while (tg_module_need_backward_dw(m)) CHECK(tg_module_backward_dw(m, 1));
}

/* A copy of the CPU tensor t on dev. */
static tg_tensor *to_dev(const tg_tensor *t, tg_device dev)
{
    tg_tensor *o;
    CHECK(tg_tensor_new(tg_tensor_dtype(t), tg_tensor_ndim(t), t->shape, dev, &o));
    CHECK(tg_copy(o, t));
    return o;
}

/* Embedding and an LMHead tied to its table, on dev. */
static void make_tied(tg_device dev, tg_dtype dt, int variant, tg_module **emb, tg_module **head)
{
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = dev, o.dtype = dt, o.fuse_wgrad_accumulation = variant, o.delay_wgrad = variant, o.init_std = 0.1;
    o.name = "embed";
    CHECK(tg_embedding_new(V, C, T, &o, emb));
    o.name = "head";
    CHECK(tg_lm_head_new(C, V, *emb, "LayerNorm", &o, head));
}

/* The CPU module's weights on the GPU one. */
static void copy_params(tg_module *from, tg_module *to)
{
    tg_param **pc, **pg;
    int nc, ng;
    CHECK(tg_module_parameters(from, &pc, &nc));
    CHECK(tg_module_parameters(to, &pg, &ng));
    if (nc != ng) bail_out("parameter lists differ");
    for (int i = 0; i < nc; i++) {
        CHECK(tg_copy(pg[i]->data, pc[i]->data));
        if (pc[i]->master) CHECK(tg_copy(pg[i]->master, pc[i]->master));
    }
    free(pc), free(pg);
}

/* Embedding forward, the head's loss and backward, the embedding's backward, then the queued wgrads. */
static void run_tied(tg_module *emb, tg_module *head, const tg_tensor *idx, const tg_tensor *targets, tg_tensor **loss,
                     tg_tensor **dh)
{
    tg_tensor *x, *dx;
    CHECK(tg_module_forward(emb, 1, idx, &x));
    CHECK(tg_lm_head_forward_loss(head, 1, x, targets, -1, loss));
    CHECK(tg_lm_head_backward_loss(head, 1, 0.5, dh));
    CHECK(tg_module_backward(emb, 1, *dh, &dx));
    while (tg_module_need_backward_dw(head)) CHECK(tg_module_backward_dw(head, 1));
    while (tg_module_need_backward_dw(emb)) CHECK(tg_module_backward_dw(emb, 1));
    tg_tensor_free(x);
    tg_tensor_free(dx);
}

/* The tied table's wgrad is the head's projection wgrad plus the embedding's scatter (repeated ids, the
 * table's first and last rows, targets ignored with -1): on CUDA as on the CPU. */
static void test_tied(void)
{
    const tg_device cpu = {TG_CPU, 0}, gpu = {TG_CUDA, 0};
    tg_tensor *idx, *targets;
    CHECK(tg_tensor_new(TG_I32, 2, (int64_t[]){B, T}, cpu, &idx));
    CHECK(tg_tensor_new(TG_I32, 1, (int64_t[]){N}, cpu, &targets));
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = i % 2 == 0 ? 7 : (i * 37 + 11) % V; /* id 7: 70 tokens, over a 64-token chunk */
    ids[1] = 0, ids[N - 1] = V - 1;
    CHECK(tg_tensor_write(idx, ids, sizeof ids));
    for (int i = 0; i < N; i++) ids[i] = i % 4 == 1 ? -1 : (i * 53 + 5) % V;
    ids[0] = 0, ids[N - 2] = V - 1;
    CHECK(tg_tensor_write(targets, ids, sizeof ids));
    tg_tensor *gidx = to_dev(idx, gpu), *gtargets = to_dev(targets, gpu);
    for (int d = 0; d < 2; d++)
        for (int variant = 0; variant < 2; variant++) {
            tg_dtype dt = d ? TG_BF16 : TG_F32;
            double tol = d ? 1e-2 : 1e-5;
            const char *vname = variant ? "fused+delayed" : "plain";
            tg_module *ec, *hc, *eg, *hg;
            tg_tensor *lc, *lg, *dc, *dg;
            make_tied(cpu, dt, variant, &ec, &hc);
            make_tied(gpu, dt, variant, &eg, &hg);
            copy_params(ec, eg);
            copy_params(hc, hg);
            run_tied(ec, hc, idx, targets, &lc, &dc);
            run_tied(eg, hg, gidx, gtargets, &lg, &dg);
            double e = rel_l2(lg, lc);
            ok(e <= tol, "tied Embedding+LMHead %s %s: loss matches the CPU (relative L2 %.2e <= %g)", tg_dtype_name(dt),
               vname, e, tol);
            e = rel_l2(dg, dc);
            ok(e <= tol, "tied Embedding+LMHead %s %s: the head's dgrad matches the CPU (relative L2 %.2e <= %g)",
               tg_dtype_name(dt), vname, e, tol);
            tg_module *mods[2][2] = {{ec, eg}, {hc, hg}};
            for (int m = 0; m < 2; m++) {
                tg_param **pc, **pg;
                int nc, ng;
                CHECK(tg_module_parameters(mods[m][0], &pc, &nc));
                CHECK(tg_module_parameters(mods[m][1], &pg, &ng));
                if (nc != ng) bail_out("parameter lists differ");
                for (int i = 0; i < nc; i++) {
                    e = rel_l2(tg_param_wgrad_target(pg[i]), tg_param_wgrad_target(pc[i]));
                    ok(e <= tol, "tied Embedding+LMHead %s %s: wgrad of %s matches the CPU (relative L2 %.2e <= %g)",
                       tg_dtype_name(dt), vname, pc[i]->name, e, tol);
                }
                free(pc), free(pg);
            }
            tg_tensor_free(lc), tg_tensor_free(lg), tg_tensor_free(dc), tg_tensor_free(dg);
            tg_module_release(hc), tg_module_release(ec), tg_module_release(hg), tg_module_release(eg);
        }
    tg_tensor_free(idx), tg_tensor_free(targets), tg_tensor_free(gidx), tg_tensor_free(gtargets);
}

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    plan(NO_PLAN);
    const tg_device cpu = {TG_CPU, 0}, gpu = {TG_CUDA, 0};
    tg_tensor *x32, *x16, *idx, *targets, *r;
    CHECK(tg_tensor_new(TG_F32, 3, (int64_t[]){B, T, C}, cpu, &x32));
    CHECK(tg_tensor_new(TG_BF16, 3, (int64_t[]){B, T, C}, cpu, &x16));
    CHECK(tg_tensor_new(TG_I32, 2, (int64_t[]){B, T}, cpu, &idx));
    CHECK(tg_tensor_new(TG_I32, 1, (int64_t[]){N}, cpu, &targets));
    CHECK(tg_tensor_new(TG_F32, 1, (int64_t[]){N * V}, cpu, &r));
    tg_manual_seed(7);
    CHECK(tg_randn(x32, 0, 1));
    CHECK(tg_copy(x16, x32));
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % V;
    CHECK(tg_tensor_write(idx, ids, sizeof ids));
    for (int i = 0; i < N; i++) ids[i] = (i * 53 + 5) % V;
    CHECK(tg_tensor_write(targets, ids, sizeof ids));
    tg_tensor *gidx = to_dev(idx, gpu), *gtargets = to_dev(targets, gpu);

    for (int d = 0; d < 2; d++)
        for (int variant = 0; variant < 2; variant++) /* 0: grad, eager wgrad; 1: fused main_grad, delayed wgrad */
            for (int k = LINEAR; k <= HEAD; k++) {
                tg_dtype dt = d ? TG_BF16 : TG_F32;
                double tol = d ? 1e-2 : 1e-5;
                const char *vname = variant ? "fused+delayed" : "plain";
                tg_module *mc = make(k, cpu, dt, variant, variant), *mg = make(k, gpu, dt, variant, variant);
                tg_param **pc, **pg;
                int nc, ng;
                CHECK(tg_module_parameters(mc, &pc, &nc));
                CHECK(tg_module_parameters(mg, &pg, &ng));
                if (nc != ng) bail_out("parameter lists differ");
                for (int i = 0; i < nc; i++) { /* the CPU module's weights on both */
                    CHECK(tg_copy(pg[i]->data, pc[i]->data));
                    if (pc[i]->master) CHECK(tg_copy(pg[i]->master, pc[i]->master));
                }
                CHECK(tg_randn(r, 0, 1));
                const tg_tensor *xc = k == EMB ? idx : d ? x16 : x32;
                tg_tensor *xg = to_dev(xc, gpu);
                tg_tensor *yc, *yg, *dxc, *dxg;
                run(k, mc, xc, targets, r, cpu, &yc, &dxc);
                run(k, mg, xg, gtargets, r, gpu, &yg, &dxg);
                double e = rel_l2(yg, yc);
                ok(e <= tol, "%s %s %s: forward matches the CPU (relative L2 %.2e <= %g)", names[k], tg_dtype_name(dt),
                   vname, e, tol);
                if (dxc) {
                    e = rel_l2(dxg, dxc);
                    ok(e <= tol, "%s %s %s: dgrad matches the CPU (relative L2 %.2e <= %g)", names[k], tg_dtype_name(dt),
                       vname, e, tol);
                }
                for (int i = 0; i < nc; i++) {
                    e = rel_l2(tg_param_wgrad_target(pg[i]), tg_param_wgrad_target(pc[i]));
                    ok(e <= tol, "%s %s %s: wgrad of %s matches the CPU (relative L2 %.2e <= %g)", names[k],
                       tg_dtype_name(dt), vname, pc[i]->name, e, tol);
                }
                free(pc), free(pg);
                tg_tensor_free(xg);
                tg_tensor_free(yc), tg_tensor_free(yg), tg_tensor_free(dxc), tg_tensor_free(dxg);
                tg_module_release(mc), tg_module_release(mg);
            }
    tg_tensor_free(x32), tg_tensor_free(x16), tg_tensor_free(idx), tg_tensor_free(targets), tg_tensor_free(r);
    tg_tensor_free(gidx), tg_tensor_free(gtargets);
    test_tied();
    return done_testing();
}
