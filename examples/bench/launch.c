/* launch.c — benchmark: where the host time of an eager kernel goes, layer by layer.
 *
 *   examples/bench/launch [DEVICE [WIDTH TOKENS]]   (default: the default device, width 512, 128 tokens;
 *                                                  "cpu" works but then the kernels' own time dominates)
 *
 * Each row times the host side only: a batch of calls is issued and timed,
 * then the stream is synchronised outside the timed region (a batch is small
 * enough that the device queue never fills, so the host never waits on the
 * device). Median over batches, in microseconds per call:
 *   L0 raw launcher     kernels/ launcher of a 1-element fill (CUDA runtime launch + error check)
 *   L1 backend vtable   the backend's fill entry (argument struct, dispatch)
 *   L2 op               tg_fill / tg_binary on existing tensors (checks, stream lookup)
 *   L3 op + alloc       a new output tensor per call (caching allocator), freed after
 *   gemm                tg_gemm 64x64x64 bf16 (cuBLASLt descriptors, plan cache, launch)
 *   module step         8 TransformerLayers h512 t128 b1 bf16 forward+backward, divided by the
 *                       number of kernels one step issues (counted by capturing one step)
 * The module step is also split into forward and backward, each per kernel. */
#include "backend/backend.h"
#include "nn/nn.h"
#ifdef TG_HAVE_CUDA
#include "backend/cuda_impl.h"
#include "kernels.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define BATCHES 31
#define PER_BATCH 64

static void die(const char *what)
{
    fprintf(stderr, "launch: %s: %s\n", what, tg_last_error());
    exit(1);
}

/* Median host µs per call of fn over BATCHES batches of PER_BATCH calls. */
typedef tg_status (*call_fn)(void *ctx);
static double per_call(tg_stream *s, call_fn fn, void *ctx)
{
    double t[BATCHES];
    for (int w = 0; w < 4; w++)
        if (fn(ctx)) die("warm-up");
    if (tg_stream_sync(s)) die("sync");
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_us();
        for (int i = 0; i < PER_BATCH; i++)
            if (fn(ctx)) die("call");
        t[b] = (now_us() - t0) / PER_BATCH;
        if (tg_stream_sync(s)) die("sync");
    }
    qsort(t, BATCHES, sizeof *t, cmp_d);
    return t[BATCHES / 2];
}

struct ctx {
    tg_stream *s;
    tg_tensor *a, *b, *c;
    tg_tensor *ga, *gb, *gc;
    tg_device dev;
};

#ifdef TG_HAVE_CUDA
static tg_status l0_raw(void *p)
{
    struct ctx *c = p;
    float one = 1.0f;
    uint32_t bits;
    memcpy(&bits, &one, 4);
    cudaError_t e = tg_cuda_fill(tg_tensor_data(c->a), 4, bits, 1, tg_cuda_stream(c->s));
    return e == cudaSuccess ? TG_OK : tg_error(TG_EDEVICE, "tg_cuda_fill: %s", cudaGetErrorString(e));
}
#endif

static tg_status l1_vtable(void *p)
{
    struct ctx *c = p;
    struct tg_fill_args a = {.dst = tg_tensor_data(c->a), .dt = TG_F32, .n = 1, .value = 1.0};
    return c->s->be->fill(c->s, &a);
}

static tg_status l2_fill(void *p) { return tg_fill(((struct ctx *)p)->a, 1.0); }
static tg_status l2_add(void *p)
{
    struct ctx *c = p;
    return tg_binary(TG_ADD, c->c, c->a, c->b);
}

static tg_status l3_alloc_add(void *p)
{
    struct ctx *c = p;
    int64_t shape[1] = {1};
    tg_tensor *o = NULL;
    tg_status st = tg_tensor_new(TG_F32, 1, shape, c->dev, &o);
    if (st == TG_OK) st = tg_binary(TG_ADD, o, c->a, c->b);
    tg_tensor_free(o);
    return st;
}

static tg_status gemm_small(void *p)
{
    struct ctx *c = p;
    return tg_gemm(c->gc, c->ga, 0, c->gb, 1, 1.0, 0.0);
}

/* ------------------------------------------------------------------ module step */
#define NL 8
struct stack {
    tg_module *layer[NL];
    tg_tensor *x, *dy;
};

static tg_status stack_fwd(struct stack *k, tg_tensor **outs)
{
    const tg_tensor *h = k->x;
    for (int l = 0; l < NL; l++) {
        TG_TRY(tg_module_forward(k->layer[l], 1, h, &outs[l]));
        h = outs[l];
    }
    return TG_OK;
}

static tg_status stack_bwd(struct stack *k, tg_tensor **outs)
{
    tg_tensor *g = NULL;
    const tg_tensor *dy = k->dy;
    tg_status st = TG_OK;
    for (int l = NL - 1; l >= 0 && st == TG_OK; l--) {
        tg_tensor *dx = NULL;
        st = tg_module_backward(k->layer[l], 1, dy, &dx);
        tg_tensor_free(g);
        g = dx;
        dy = g;
    }
    tg_tensor_free(g);
    for (int l = 0; l < NL; l++) tg_tensor_free(outs[l]), outs[l] = NULL;
    return st;
}

int main(int argc, char **argv)
{
    tg_device dev = tg_default_device();
    if (argc > 1 && tg_device_parse(argv[1], &dev)) die(argv[1]);
    char dname[32];
    tg_device_str(dev, dname, sizeof dname);
    struct ctx c = {.s = tg_stream_current(dev), .dev = dev};
    int64_t one[1] = {1}, sq[2] = {64, 64};
    if (tg_tensor_new(TG_F32, 1, one, dev, &c.a) || tg_tensor_new(TG_F32, 1, one, dev, &c.b) ||
        tg_tensor_new(TG_F32, 1, one, dev, &c.c) || tg_tensor_new(TG_BF16, 2, sq, dev, &c.ga) ||
        tg_tensor_new(TG_BF16, 2, sq, dev, &c.gb) || tg_tensor_new(TG_BF16, 2, sq, dev, &c.gc) || tg_fill(c.a, 1) ||
        tg_fill(c.b, 2) || tg_randn(c.ga, 0, 1) || tg_randn(c.gb, 0, 1))
        die("tensors");
    printf("launch cost on %s (%s), host µs per call, median of %d batches of %d\n", dname, tg_build_options(),
           BATCHES, PER_BATCH);
#ifdef TG_HAVE_CUDA
    if (dev.type == TG_CUDA) printf("  L0 raw launcher (tg_cuda_fill)   %7.2f\n", per_call(c.s, l0_raw, &c));
#endif
    printf("  L1 backend vtable fill          %7.2f\n", per_call(c.s, l1_vtable, &c));
    printf("  L2 op tg_fill                   %7.2f\n", per_call(c.s, l2_fill, &c));
    printf("  L2 op tg_binary add             %7.2f\n", per_call(c.s, l2_add, &c));
    printf("  L3 op + new output tensor       %7.2f\n", per_call(c.s, l3_alloc_add, &c));
    printf("  gemm 64x64x64 bf16              %7.2f\n", per_call(c.s, gemm_small, &c));

    /* The tiny stack of layers.lua (and peers/layers.py): 8 layers, h512, 8 heads, t128, b1, bf16 (by default). */
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.dtype = TG_BF16;
    o.device = dev;
    struct stack k = {0};
    int64_t width = argc > 3 ? atoll(argv[2]) : 512, tokens = argc > 3 ? atoll(argv[3]) : 128;
    if (width < 64 || width % 64 || tokens < 1) {
        fprintf(stderr, "launch: WIDTH must be a positive multiple of 64 and TOKENS positive\n");
        return 2;
    }
    int64_t xs[3] = {1, tokens, width};
    tg_manual_seed(0);
    for (int l = 0; l < NL; l++) {
        char name[16];
        snprintf(name, sizeof name, "h.%d", l);
        o.name = name;
        if (tg_transformer_layer_new(width, (int)(width / 64), 4 * width, "LayerNorm", "gelu", &o, &k.layer[l])) die("layer");
    }
    if (tg_tensor_new(TG_BF16, 3, xs, dev, &k.x) || tg_tensor_new(TG_BF16, 3, xs, dev, &k.dy) ||
        tg_randn(k.x, 0, 1) || tg_randn(k.dy, 0, 1))
        die("inputs");
    tg_tensor *outs[NL] = {0};

    /* kernels per forward and per backward: capture one of each into a pool */
    size_t nf = 0, nb = 0;
    {
        tg_pool *pool = NULL;
        tg_graph *gf = NULL, *gb = NULL;
        if (tg_pool_new(dev, &pool) || tg_pool_push(pool)) die("pool");
        if (tg_stream_begin_capture(c.s) || stack_fwd(&k, outs) || tg_stream_end_capture(c.s, &gf)) die("capture fwd");
        if (tg_stream_begin_capture(c.s) || stack_bwd(&k, outs) || tg_stream_end_capture(c.s, &gb)) die("capture bwd");
        tg_pool_pop(pool);
        nf = tg_graph_size(gf), nb = tg_graph_size(gb);
        tg_graph_free(gf), tg_graph_free(gb);
        tg_pool_release(pool);
    }
    if (tg_stream_sync(c.s)) die("sync");
    double tf[BATCHES], tb[BATCHES];
    for (int it = 0; it < BATCHES + 3; it++) {
        double t0 = now_us();
        if (stack_fwd(&k, outs)) die("forward");
        double t1 = now_us();
        if (stack_bwd(&k, outs)) die("backward");
        double t2 = now_us();
        if (tg_stream_sync(c.s)) die("sync");
        if (it >= 3) tf[it - 3] = t1 - t0, tb[it - 3] = t2 - t1;
    }
    qsort(tf, BATCHES, sizeof *tf, cmp_d);
    qsort(tb, BATCHES, sizeof *tb, cmp_d);
    double f = tf[BATCHES / 2], b = tb[BATCHES / 2];
    printf("  module step: %zu kernels forward, %zu backward (captured)\n", nf, nb);
    printf("  module forward per kernel       %7.2f   (%.1f µs per forward)\n", f / (double)nf, f);
    printf("  module backward per kernel      %7.2f   (%.1f µs per backward)\n", b / (double)nb, b);
    printf("  module step per kernel          %7.2f   (%.1f µs per step)\n", (f + b) / (double)(nf + nb), f + b);

    for (int l = 0; l < NL; l++) tg_module_release(k.layer[l]);
    tg_tensor_free(k.x), tg_tensor_free(k.dy);
    tg_tensor_free(c.a), tg_tensor_free(c.b), tg_tensor_free(c.c);
    tg_tensor_free(c.ga), tg_tensor_free(c.gb), tg_tensor_free(c.gc);
    return 0;
}
