/* gradbuf.c — contiguous f32 grad buffers: parameters' main_grad as views in backward order, split into buckets. */
#include "dist/comm.h"
#include "nn/nn.h"

#include <string.h>

static int64_t round_up(int64_t x, int64_t m) { return m > 1 ? (x + m - 1) / m * m : x; }

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

/* Lays the parameters out (offsets, buckets) without touching memory. */
static tg_status layout(tg_gradbuf *g, const tg_gradbuf_opts *o)
{
    int64_t align = o->align > 0 ? o->align : 64, pad = o->pad_to > 0 ? o->pad_to : 1;
    int64_t pos = 0, bstart = 0;
    int first = 0;
    g->buckets = calloc((size_t)g->nparams, sizeof *g->buckets);
    if (!g->buckets) return tg_error(TG_ENOMEM, "out of host memory");
    for (int i = 0; i < g->nparams; i++) {
        pos = round_up(pos, align);
        g->offset[i] = pos;
        g->bucket_of[i] = g->nbuckets;
        pos += tg_tensor_numel(g->params[i]->data);
        /* a bucket closes once it holds bucket_numel, and at the end */
        if (i == g->nparams - 1 || (o->bucket_numel > 0 && pos - bstart >= o->bucket_numel)) {
            int64_t end = bstart + round_up(round_up(pos, align) - bstart, pad);
            g->buckets[g->nbuckets++] = (struct tg_gradbuf_bucket){bstart, end - bstart, first, i + 1 - first};
            bstart = pos = end;
            first = i + 1;
        }
    }
    g->numel = pos;
    return TG_OK;
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
