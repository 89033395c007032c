/* nn-bf16-modules-match-f32.c — each module computing in bf16 (f32 accumulation) matches the same module in f32, on
 * the same (bf16-representable) weights and input: output, input gradient and every weight gradient within bf16
 * tolerance, with gradients into bf16 grad or fused into f32 main_grad; bf16 parameters keep an f32 master copy. */
#include "nn/nn.h"
#include "tap.h"

#include <math.h>
#include <string.h>

enum { B = 2, T = 5, C = 16, NH = 2, H = 32, V = 19, N = B * T };
/* Tolerance: max |bf16 - f32| <= 2e-2 * max |f32| per tensor (seen: at most 8e-3). One bf16 rounding is 2^-9 relative
 * (0.2%); a module stacks a handful of rounded intermediates, and a wrong kernel is off by O(1). */
static const double TOL = 2e-2;

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        if ((call) != TG_OK) bail_out("%s: %s", #call, tg_last_error());                               \
    } while (0)

enum kind { LINEAR, LAYERNORM, RMSNORM, LNLINEAR, MLP_GELU, MLP_SWIGLU, ATTN, LAYER, EMB, HEAD };
static const char *names[] = {"Linear", "LayerNorm", "RMSNorm", "LayerNormLinear", "LayerNormMLP(gelu)",
                              "LayerNormMLP(rmsnorm,swiglu)", "CausalSelfAttention", "TransformerLayer", "Embedding",
                              "LMHead(untied)"};

static tg_module *make(enum kind k, tg_dtype dt, int fused)
{
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = (tg_device){TG_CPU, 0};
    o.dtype = dt;
    o.fuse_wgrad_accumulation = fused;
    o.init_std = 0.2;
    o.name = names[k];
    tg_module *m = NULL;
    switch (k) {
    case LINEAR: CHECK(tg_linear_new(C, 24, &o, &m)); break;
    case LAYERNORM: CHECK(tg_layernorm_new(C, &o, &m)); break;
    case RMSNORM: CHECK(tg_rmsnorm_new(C, &o, &m)); break;
    case LNLINEAR: CHECK(tg_layernorm_linear_new(C, 24, "LayerNorm", &o, &m)); break;
    case MLP_GELU: CHECK(tg_layernorm_mlp_new(C, H, "LayerNorm", "gelu", &o, &m)); break;
    case MLP_SWIGLU: CHECK(tg_layernorm_mlp_new(C, H, "RMSNorm", "swiglu", &o, &m)); break;
    case ATTN: CHECK(tg_attention_new(C, NH, &o, &m)); break;
    case LAYER: CHECK(tg_transformer_layer_new(C, NH, H, "LayerNorm", "gelu", &o, &m)); break;
    case EMB: CHECK(tg_embedding_new(V, C, T, &o, &m)); break;
    case HEAD: CHECK(tg_lm_head_new(C, V, NULL, "LayerNorm", &o, &m)); break;
    }
    return m;
}

static double *read_all(const tg_tensor *t)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *d = malloc(n * sizeof *d);
    CHECK(tg_tensor_read_f64(t, d, n));
    return d;
}

/* max |a - b| / max |b| */
static double rel_err(const tg_tensor *a, const tg_tensor *b)
{
    int64_t n = tg_tensor_numel(b);
    double *x = read_all(a), *y = read_all(b), e = 0, s = 1e-12;
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs(x[i] - y[i])), s = fmax(s, fabs(y[i]));
    free(x), free(y);
    return e / s;
}

/* Runs forward + backward of m on x (idx for EMB, x + targets for HEAD); returns y (or the loss) and dx. */
static void run(enum kind k, tg_module *m, const tg_tensor *x, const tg_tensor *targets, const tg_tensor *r, tg_tensor **y,
                tg_tensor **dx)
{
    if (k == HEAD) {
        CHECK(tg_lm_head_forward_loss(m, 1, x, targets, -1, y));
        CHECK(tg_module_backward(m, 1, NULL, dx));
        return;
    }
    CHECK(tg_module_forward(m, 1, x, y));
    tg_tensor *dy;
    CHECK(tg_tensor_new(tg_tensor_dtype(*y), tg_tensor_ndim(*y), (*y)->shape, (tg_device){TG_CPU, 0}, &dy));
    tg_tensor *rv;
    CHECK(tg_tensor_view(r, 0, 1, (int64_t[]){tg_tensor_numel(dy)}, &rv)); /* r is long enough for every output */
    CHECK(tg_copy(dy, rv));
    tg_tensor_free(rv);
    CHECK(tg_module_backward(m, 1, dy, dx));
    tg_tensor_free(dy);
}

int main(void)
{
    plan(NO_PLAN);
    tg_device cpu = {TG_CPU, 0};
    tg_tensor *x32, *x16, *idx, *targets, *r;
    CHECK(tg_tensor_new(TG_F32, 3, (int64_t[]){B, T, C}, cpu, &x32));
    CHECK(tg_tensor_new(TG_BF16, 3, (int64_t[]){B, T, C}, cpu, &x16));
    CHECK(tg_tensor_new(TG_I32, 2, (int64_t[]){B, T}, cpu, &idx));
    CHECK(tg_tensor_new(TG_I32, 1, (int64_t[]){N}, cpu, &targets));
    CHECK(tg_tensor_new(TG_F32, 1, (int64_t[]){N * 64}, cpu, &r));
    tg_manual_seed(99);
    CHECK(tg_randn(x16, 0, 1));
    CHECK(tg_copy(x32, x16)); /* the same, bf16-representable input for both */
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 7 + 2) % V;
    CHECK(tg_tensor_write(idx, ids, sizeof ids));
    CHECK(tg_tensor_write(targets, ids, sizeof ids));

    for (int fused = 0; fused <= 1; fused++)
        for (int k = LINEAR; k <= HEAD; k++) {
            tg_module *m32 = make(k, TG_F32, 0), *m16 = make(k, TG_BF16, fused);
            tg_param **p32, **p16;
            int n32, n16;
            CHECK(tg_module_parameters(m32, &p32, &n32));
            CHECK(tg_module_parameters(m16, &p16, &n16));
            if (n32 != n16) bail_out("parameter lists differ");
            int master_ok = 1;
            for (int i = 0; i < n16; i++) {
                double d;
                master_ok &= p16[i]->master && tg_tensor_dtype(p16[i]->master) == TG_F32 && tg_tensor_dtype(p16[i]->data) == TG_BF16 &&
                             (fused ? p16[i]->main_grad && tg_tensor_dtype(p16[i]->main_grad) == TG_F32 : 1);
                CHECK(tg_copy(p32[i]->data, p16[i]->data)); /* f32 module on the bf16 weights */
                CHECK(tg_max_abs_diff(p32[i]->data, p16[i]->master, &d));
                master_ok &= d == 0;
            }
            if (!fused) ok(master_ok, "%s: bf16 parameters have an f32 master copy equal to their data", names[k]);
            CHECK(tg_randn(r, 0, 1));
            const tg_tensor *in32 = k == EMB ? idx : x32, *in16 = k == EMB ? idx : x16;
            tg_tensor *y32, *y16, *dx32, *dx16;
            run(k, m32, in32, targets, r, &y32, &dx32);
            run(k, m16, in16, targets, r, &y16, &dx16);
            double worst = 0, e = rel_err(y16, y32);
            ok(tg_tensor_dtype(y16) == (k == HEAD ? TG_F32 : TG_BF16), "%s: output dtype", names[k]);
            ok(e <= TOL, "%s%s: forward within bf16 tolerance (rel %.2e)", names[k], fused ? " fused" : "", e);
            worst = fmax(worst, e);
            if (dx32) {
                e = rel_err(dx16, dx32);
                ok(e <= TOL, "%s%s: dgrad within bf16 tolerance (rel %.2e)", names[k], fused ? " fused" : "", e);
                worst = fmax(worst, e);
            }
            for (int i = 0; i < n16; i++) {
                e = rel_err(tg_param_wgrad_target(p16[i]), p32[i]->grad);
                ok(e <= TOL, "%s%s: wgrad of %s within bf16 tolerance (rel %.2e, into %s)", names[k], fused ? " fused" : "",
                   p16[i]->name, e, fused ? "f32 main_grad" : "bf16 grad");
                worst = fmax(worst, e);
            }
            diag("%-30s %s largest relative difference bf16 vs f32: %.2e", names[k], fused ? "fused  " : "unfused", worst);
            free(p32), free(p16);
            tg_tensor_free(y32), tg_tensor_free(y16), tg_tensor_free(dx32), tg_tensor_free(dx16);
            tg_module_release(m32), tg_module_release(m16);
        }
    tg_tensor_free(x32), tg_tensor_free(x16), tg_tensor_free(idx), tg_tensor_free(targets), tg_tensor_free(r);
    return done_testing();
}
