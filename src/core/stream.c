/* stream.c — streams, capture into graphs, replay; the backend does the device half. */
#include "backend/backend.h"

#include <string.h>

tg_status tg_stream_new(tg_device dev, const char *name, tg_stream **out)
{
    char d[32];
    TG_NONNULL(out, "out");
    if (!tg_device_valid(dev)) return tg_error(TG_EINVAL, "stream: no such device %s", tg_device_str(dev, d, sizeof d));
    tg_stream *s = calloc(1, sizeof *s);
    if (!s) return tg_error(TG_ENOMEM, "out of host memory");
    s->dev = dev;
    s->be = tg_backend_for(dev);
    snprintf(s->name, sizeof s->name, "%s", name && *name ? name : "stream");
    tg_status st = s->be->stream_init(s);
    if (st != TG_OK) {
        free(s);
        return st;
    }
    tg_device_index_init(s);
    *out = s;
    return TG_OK;
}

void tg_stream_free(tg_stream *s)
{
    if (!s) return;
    if (s->capture) { /* abandon the capture */
        tg_graph *g = NULL;
        tg_stream_end_capture(s, &g);
        tg_graph_free(g);
    }
    tg_device_forget_stream(s);
    s->be->stream_destroy(s);
    free(s);
}

tg_status tg_stream_sync(tg_stream *s)
{
    TG_NONNULL(s, "the stream");
    if (s->capture) return tg_error(TG_ECAPTURE, "cannot synchronise stream '%s' while it is capturing", s->name);
    return s->be->stream_sync(s);
}

const char *tg_stream_name(const tg_stream *s) { return s ? s->name : ""; }
int tg_stream_capturing(const tg_stream *s) { return s && s->capture != NULL; }

/* Records the first error of an op issued while s captures: the capture is
 * then broken and tg_stream_end_capture reports it. Returns st. */
tg_status tg_stream_note_error(tg_stream *s, tg_status st)
{
    if (st != TG_OK && s->capture && s->capture_error == TG_OK) {
        s->capture_error = st;
        snprintf(s->capture_msg, sizeof s->capture_msg, "%s", tg_last_error());
    }
    return st;
}

tg_status tg_stream_begin_capture(tg_stream *s)
{
    TG_NONNULL(s, "the stream");
    if (s->capture) return tg_error(TG_ECAPTURE, "stream '%s' is already capturing", s->name);
    tg_graph *g = calloc(1, sizeof *g);
    if (!g) return tg_error(TG_ENOMEM, "out of host memory");
    g->dev = s->dev;
    g->be = s->be;
    s->capture = g;
    s->capture_error = TG_OK;
    s->capture_msg[0] = 0;
    tg_status st = s->be->capture_begin(s);
    if (st != TG_OK) {
        s->capture = NULL;
        free(g);
        return st;
    }
    tg_device_capture_count(s, +1);
    return TG_OK;
}

tg_status tg_stream_end_capture(tg_stream *s, tg_graph **out)
{
    TG_NONNULL(out, "out");
    *out = NULL;
    TG_NONNULL(s, "the stream");
    if (!s->capture) return tg_error(TG_ESTATE, "stream '%s' is not capturing", s->name);
    tg_graph *g = s->capture;
    tg_status st = s->be->capture_end(s, g);
    s->capture = NULL;
    tg_device_capture_count(s, -1);
    if (st == TG_OK && s->capture_error != TG_OK)
        st = tg_error(s->capture_error, "capture on stream '%s' failed: %s", s->name, s->capture_msg);
    if (st != TG_OK) {
        tg_graph_free(g);
        return st;
    }
    *out = g;
    return TG_OK;
}

tg_status tg_stream_host_call(tg_stream *s, const struct tg_host_call *h)
{
    char d[32];
    if (!s->be->host_call)
        return tg_error(TG_ENOTSUP, "host work in the order of stream '%s' is not supported on %s", s->name,
                        tg_device_str(s->dev, d, sizeof d));
    return tg_stream_note_error(s, s->be->host_call(s, h));
}

tg_status tg_graph_replay(tg_graph *g, tg_stream *s)
{
    if (!g) return tg_error(TG_ESTATE, "replay of a graph that was never captured");
    TG_NONNULL(s, "the stream");
    if (s->be != g->be || s->dev.index != g->dev.index)
        return tg_error(TG_EINVAL, "replay on stream '%s' of another device than the graph's", s->name);
    if (s->capture) return tg_error(TG_ECAPTURE, "replay on stream '%s' while it is capturing", s->name);
    tg_device_count_replay(s);
    tg_status st;
    if (!g->host.before && !g->host.after && !g->nafter) {
        st = g->be->graph_replay(g, s);
    } else { /* host work of the layers above runs with s current, like the work it stands for */
        tg_stream *prev = tg_stream_set_current(s);
        st = g->host.before ? g->host.before(g->host.ud, s) : TG_OK;
        if (st == TG_OK) st = g->be->graph_replay(g, s);
        if (st == TG_OK && g->host.after) st = g->host.after(g->host.ud, s);
        for (int i = 0; st == TG_OK && i < g->nafter; i++) st = g->after[i].fn(g->after[i].ud);
        if (prev) tg_stream_set_current(prev);
    }
    /* On the CPU the replay has run: ids outside their table fail this call, as they fail an eager op, and not a
     * later read that may follow a good replay (a device's replay is only queued: its next host read reports) */
    if (st == TG_OK && s->be->type == TG_CPU) st = tg_index_check_poll(s);
    return st;
}

size_t tg_graph_size(const tg_graph *g) { return g ? g->ncmds : 0; }

tg_status tg_graph_keep_pool(tg_graph *g, tg_pool *pool)
{
    const int max = (int)(sizeof g->pools / sizeof g->pools[0]);
    if (!g || !pool) return tg_error(TG_EINVAL, "keep_pool: %s is NULL", g ? "the pool" : "the graph");
    for (int i = 0; i < g->npools; i++)
        if (g->pools[i] == pool) return TG_OK;
    if (g->npools == max)
        return tg_error(TG_EINVAL, "keep_pool: a graph keeps at most %d pools alive, and this one keeps %d already", max,
                        g->npools);
    g->pools[g->npools++] = tg_pool_retain(pool);
    return TG_OK;
}

/* ------------------------------------------------------------------ what a graph holds */
static size_t ptr_hash(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* Adds p; *added is 1 when it was not there. */
static tg_status ptrset_add(struct tg_ptrset *set, void *p, int *added)
{
    *added = 0;
    if (2 * (set->n + 1) > set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 64;
        void **slots = calloc(cap, sizeof *slots);
        if (!slots) return tg_error(TG_ENOMEM, "capture: out of host memory recording what the graph uses");
        for (size_t i = 0; i < set->cap; i++) {
            if (!set->slots[i]) continue;
            size_t h = ptr_hash(set->slots[i], cap);
            while (slots[h]) h = (h + 1) & (cap - 1);
            slots[h] = set->slots[i];
        }
        free(set->slots);
        set->slots = slots;
        set->cap = cap;
    }
    size_t h = ptr_hash(p, set->cap);
    while (set->slots[h]) {
        if (set->slots[h] == p) return TG_OK;
        h = (h + 1) & (set->cap - 1);
    }
    set->slots[h] = p;
    set->n++;
    *added = 1;
    return TG_OK;
}

void tg_capture_hold(const tg_tensor *t)
{
    struct tg_storage *st = t->storage;
    tg_graph *g = tg_device_capture_graph(st->dev);
    if (!g) return;
    int added;
    tg_status rc = st->pool ? ptrset_add(&g->held_pools, st->pool, &added)
                            : ptrset_add(&g->held_storages, st, &added);
    if (rc != TG_OK) {
        tg_stream *s = tg_stream_current(st->dev);
        if (s && s->capture) tg_stream_note_error(s, rc);
        return;
    }
    if (!added) return;
    if (st->pool) tg_pool_retain(st->pool);
    else st->refcount++;
}

tg_status tg_graph_after_replay(tg_graph *g, const struct tg_host_call *h)
{
    for (int i = 0; i < g->nafter; i++)
        if (g->after[i].fn == h->fn && g->after[i].ud == h->ud) return TG_OK;
    if (g->nafter == g->capafter) {
        int cap = g->capafter ? 2 * g->capafter : 4;
        struct tg_host_call *a = realloc(g->after, sizeof *a * (size_t)cap);
        if (!a) return tg_error(TG_ENOMEM, "capture: out of host memory");
        g->after = a;
        g->capafter = cap;
    }
    if (h->retain) h->retain(h->ud);
    g->after[g->nafter++] = *h;
    return TG_OK;
}

tg_status tg_graph_hold_event(tg_graph *g, tg_event *e)
{
    int added;
    TG_TRY(ptrset_add(&g->held_events, e, &added));
    if (added) e->refcount++;
    return TG_OK;
}

void tg_graph_free(tg_graph *g)
{
    if (!g) return;
    if (g->impl) g->be->graph_destroy(g);
    if (g->host.free_ud) g->host.free_ud(g->host.ud);
    for (int i = 0; i < g->npools; i++) tg_pool_release(g->pools[i]);
    for (size_t i = 0; i < g->held_storages.cap; i++)
        if (g->held_storages.slots[i]) tg_storage_release(g->held_storages.slots[i]);
    for (size_t i = 0; i < g->held_pools.cap; i++)
        if (g->held_pools.slots[i]) tg_pool_release(g->held_pools.slots[i]);
    for (size_t i = 0; i < g->held_events.cap; i++)
        if (g->held_events.slots[i]) tg_event_free(g->held_events.slots[i]);
    free(g->held_storages.slots);
    free(g->held_pools.slots);
    free(g->held_events.slots);
    for (int i = 0; i < g->nafter; i++)
        if (g->after[i].drop) g->after[i].drop(g->after[i].ud);
    free(g->after);
    free(g);
}
