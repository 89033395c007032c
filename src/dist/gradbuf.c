/* gradbuf.c — contiguous f32 grad buffers: parameters' main_grad as views in backward order, split into buckets. */
#include "dist/comm.h"
#include "nn/nn.h"
#include "core/checked.h"

#include <string.h>

/* x rounded up to a multiple of m (m <= 1: x itself); 0 when the result does not fit int64. */
static int round_up(int64_t x, int64_t m, int64_t *out)
{
    int64_t r = x;
    if (m > 1) {
        int64_t rem = x % m;
        if (rem && !tg_add_i64(x, m - rem, &r)) return 0;
    }
    *out = r;
    return 1;
}

void tg_gradbuf_free(tg_gradbuf *g)
{
    if (!g) return;
    for (int i = 0; i < g->nparams; i++) tg_param_release(g->params[i]);
    free(g->params);
    free(g->offset);
    free(g->bucket_of);
    free(g->buckets);
    tg_tensor_free(g->data);
    free(g);
}

int tg_gradbuf_index(const tg_gradbuf *g, const tg_param *p)
{
    for (int i = 0; i < g->nparams; i++)
        if (g->params[i] == p) return i;
    return -1;
}

/* Lays the parameters out (offsets, buckets) without touching memory. Offsets and sizes come from the
 * caller's align and pad_to: computed with checks (a huge align wrapped to a negative size). */
static tg_status layout(tg_gradbuf *g, const tg_gradbuf_opts *o)
{
    int64_t align = o->align > 0 ? o->align : 64, pad = o->pad_to > 0 ? o->pad_to : 1;
    int64_t pos = 0, bstart = 0, a = 0, len = 0, end = 0;
    int first = 0;
    g->buckets = calloc((size_t)g->nparams, sizeof *g->buckets);
    if (!g->buckets) return tg_error(TG_ENOMEM, "out of host memory");
    for (int i = 0; i < g->nparams; i++) {
        if (!round_up(pos, align, &pos)) goto too_large;
        g->offset[i] = pos;
        g->bucket_of[i] = g->nbuckets;
        if (!tg_add_i64(pos, tg_tensor_numel(g->params[i]->data), &pos)) goto too_large;
        /* a bucket closes once it holds bucket_numel, and at the end */
        if (i == g->nparams - 1 || (o->bucket_numel > 0 && pos - bstart >= o->bucket_numel)) {
            if (!round_up(pos, align, &a) || !round_up(a - bstart, pad, &len) || !tg_add_i64(bstart, len, &end))
                goto too_large;
            g->buckets[g->nbuckets++] = (struct tg_gradbuf_bucket){bstart, end - bstart, first, i + 1 - first};
            bstart = pos = end;
            first = i + 1;
        }
    }
    if (pos > INT64_MAX / (int64_t)sizeof(float)) goto too_large; /* its f32 bytes must fit too */
    g->numel = pos;
    return TG_OK;
too_large:
    return tg_error(TG_EINVAL, "grad buffer: align = %lld and pad_to = %lld give a layout past 64-bit sizes",
                    (long long)align, (long long)pad);
}

tg_status tg_gradbuf_new(tg_param **params, int n, const tg_gradbuf_opts *o, tg_gradbuf **out)
{
    *out = NULL;
    if (n <= 0) return tg_error(TG_EINVAL, "grad buffer: no parameters");
    tg_device dev = tg_tensor_device(params[0]->data);
    tg_gradbuf *g = calloc(1, sizeof *g);
    if (!g) return tg_error(TG_ENOMEM, "out of host memory");
    g->params = calloc((size_t)n, sizeof *g->params);
    g->offset = calloc((size_t)n, sizeof *g->offset);
    g->bucket_of = calloc((size_t)n, sizeof *g->bucket_of);
    tg_status st = g->params && g->offset && g->bucket_of ? TG_OK : tg_error(TG_ENOMEM, "out of host memory");
    /* backward order: the last parameter's wgrad comes first */
    for (int i = n - 1; st == TG_OK && i >= 0; i--) {
        tg_param *p = params[i];
        tg_device d = tg_tensor_device(p->data);
        if (d.type != dev.type || d.index != dev.index) {
            char a[32], b[32];
            st = tg_error(TG_EINVAL, "grad buffer: parameter '%s' is on %s, '%s' on %s (one buffer per device)", p->name,
                          tg_device_str(d, a, sizeof a), params[0]->name, tg_device_str(dev, b, sizeof b));
            break;
        }
        if (tg_gradbuf_index(g, p) >= 0) continue; /* tied: listed twice */
        g->params[g->nparams++] = tg_param_retain(p);
    }
    if (st == TG_OK) st = layout(g, o);
    int64_t shape[1] = {g->numel};
    if (st == TG_OK) st = tg_tensor_new(TG_F32, 1, shape, dev, &g->data);
    if (st == TG_OK) st = tg_tensor_set_name(g->data, "grad_buffer");
    if (st == TG_OK) st = tg_fill(g->data, 0.0);
    for (int i = 0; st == TG_OK && i < g->nparams; i++) {
        tg_param *p = g->params[i];
        tg_tensor *view = NULL;
        int64_t pn[1] = {tg_tensor_numel(p->data)};
        st = tg_tensor_view(g->data, g->offset[i], 1, pn, &view);
        /* keep what the parameter's main_grad held */
        if (st == TG_OK && p->main_grad) st = tg_copy(view, p->main_grad);
        if (st == TG_OK) st = tg_param_set_main_grad(p, view);
        /* wgrads now go straight into the buffer */
        if (st == TG_OK) p->fuse_wgrad_accumulation = 1;
        tg_tensor_free(view);
    }
    if (st != TG_OK) {
        tg_gradbuf_free(g);
        return st;
    }
    *out = g;
    return TG_OK;
}
