/* cuda-modules-match-cpu.c — every nn module on CUDA matches the same module on the CPU backend (same weights and inputs): forward, dgrad and each wgrad, in f32 and bf16, unfused and fused into main_grad with delayed wgrad. */
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
    case LNLINEAR: CHECK(tg_layernorm_linear_new(C, 192, "layernorm", &o, &m)); break;
    case MLP_GELU: CHECK(tg_layernorm_mlp_new(C, H, "layernorm", "gelu", &o, &m)); break;
    case MLP_SWIGLU: CHECK(tg_layernorm_mlp_new(C, H, "rmsnorm", "swiglu", &o, &m)); break;
    case ATTN: CHECK(tg_attention_new(C, NH, &o, &m)); break;
    case LAYER: CHECK(tg_transformer_layer_new(C, NH, H, "layernorm", "gelu", &o, &m)); break;
    case LAYER_RMS: CHECK(tg_transformer_layer_new(C, NH, H, "rmsnorm", "swiglu", &o, &m)); break;
    case EMB: CHECK(tg_embedding_new(V, C, T, &o, &m)); break;
    case HEAD: CHECK(tg_lm_head_new(C, V, NULL, "layernorm", &o, &m)); break;
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
    while (tg_module_need_backward_dw(m)) CHECK(tg_module_backward_dw(m));
}

/* A copy of the CPU tensor t on dev. */
static tg_tensor *to_dev(const tg_tensor *t, tg_device dev)
{
    tg_tensor *o;
    CHECK(tg_tensor_new(tg_tensor_dtype(t), tg_tensor_ndim(t), t->shape, dev, &o));
    CHECK(tg_copy(o, t));
    return o;
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
    return done_testing();
}
