/* memory.c — refcounted storage from the device allocator or from graph pools. */
#include "backend/backend.h"

#include <string.h>

#define TG_POOL_ALIGN 256
#define TG_POOL_MIN_BLOCK ((size_t)1 << 20)
#define TG_POOL_STACK 16

/* Per-thread stack of pushed pools (tg_pool_push). */
static _Thread_local tg_pool *pool_stack[TG_POOL_STACK];
static _Thread_local int pool_depth;

static int same_device(tg_device a, tg_device b) { return a.type == b.type && a.index == b.index; }

tg_status tg_pool_new(tg_device dev, tg_pool **out)
{
    char ds[48];
    TG_NONNULL(out, "out");
    if (!tg_device_valid(dev)) return tg_error(TG_EINVAL, "tg_pool_new: no such device %s", tg_device_str(dev, ds, sizeof ds));
    tg_pool *p = calloc(1, sizeof *p);
    if (!p) return tg_error(TG_ENOMEM, "tg_pool_new: out of host memory");
    p->dev = dev;
    p->refcount = 1;
    p->defer_until = -1;
    *out = p;
    return TG_OK;
}

tg_pool *tg_pool_retain(tg_pool *p)
{
    if (p) p->refcount++;
    return p;
}

void tg_pool_release(tg_pool *p)
{
    if (!p || --p->refcount > 0) return;
    const struct tg_backend *be = tg_backend_for(p->dev);
    for (struct tg_pool_deferred *d = p->deferred, *next; d; d = next) {
        next = d->next;
        free(d);
    }
    for (struct tg_pool_free *f = p->free_list, *next; f; f = next) {
        next = f->next;
        free(f);
    }
    for (struct tg_pool_block *b = p->blocks, *next; b; b = next) {
        next = b->next;
        be->free(p->dev.index, b->data);
        tg_device_count_memory(p->dev, b->size, 0);
        free(b);
    }
    free(p);
}

void tg_pool_stats(const tg_pool *p, size_t *used, size_t *peak, size_t *reserved)
{
    if (used) *used = p ? p->used : 0;
    if (peak) *peak = p ? p->peak : 0;
    if (reserved) *reserved = p ? p->reserved : 0;
}

static size_t pool_round(size_t bytes)
{
    size_t need = (bytes + TG_POOL_ALIGN - 1) & ~(size_t)(TG_POOL_ALIGN - 1);
    return need ? need : TG_POOL_ALIGN;
}

static void pool_account(tg_pool *p, size_t need)
{
    p->used += need;
    p->total += need;
    if (p->used > p->peak) p->peak = p->used;
}

/* First fit from the free ranges, else carved from the newest block, else a
 * new block. Blocks go back to the device only with the pool, because captured
 * graphs keep using the addresses they were captured with. */
tg_status tg_pool_alloc(tg_pool *p, size_t bytes, void **out)
{
    size_t need = pool_round(bytes);
    for (struct tg_pool_free **fp = &p->free_list; *fp; fp = &(*fp)->next) {
        struct tg_pool_free *f = *fp;
        if (f->size < need) continue;
        *out = f->ptr;
        f->ptr += need;
        f->size -= need;
        if (f->size == 0) {
            *fp = f->next;
            free(f);
        }
        pool_account(p, need);
        return TG_OK;
    }
    struct tg_pool_block *b = p->blocks;
    if (!b || b->size - b->used < need) {
        size_t size = need > TG_POOL_MIN_BLOCK ? need : TG_POOL_MIN_BLOCK;
        b = calloc(1, sizeof *b);
        if (!b) return tg_error(TG_ENOMEM, "graph pool: out of host memory");
        tg_status st = tg_backend_for(p->dev)->alloc(p->dev.index, size, &b->data);
        if (st != TG_OK) {
            free(b);
            return tg_error_prefix(st, "graph pool: allocating a %zu-byte block", size);
        }
        b->size = size;
        tg_device_count_memory(p->dev, size, 1);
        b->next = p->blocks;
        p->blocks = b;
        p->reserved += size;
    }
    *out = (char *)b->data + b->used;
    b->used += need;
    pool_account(p, need);
    return TG_OK;
}

static struct tg_pool_block *pool_block_of(tg_pool *p, const char *ptr)
{
    for (struct tg_pool_block *b = p->blocks; b; b = b->next)
        if (ptr >= (char *)b->data && ptr < (char *)b->data + b->size) return b;
    return NULL;
}

void tg_pool_defer(tg_pool *p, long until) { p->defer_until = until; }

void tg_pool_release_deferred(tg_pool *p, long pos)
{
    long keep = p->defer_until;
    p->defer_until = -1; /* the frees below are real */
    for (struct tg_pool_deferred **dp = &p->deferred; *dp;) {
        struct tg_pool_deferred *d = *dp;
        if (d->until <= pos) {
            *dp = d->next;
            tg_pool_free_range(p, d->ptr, d->bytes);
            free(d);
        } else {
            dp = &d->next;
        }
    }
    p->defer_until = keep;
}

void tg_pool_free_range(tg_pool *p, void *ptr, size_t bytes)
{
    if (p->defer_until >= 0) {
        struct tg_pool_deferred *d = malloc(sizeof *d);
        if (!d) return; /* the range stays taken: a leak inside the pool, never a reuse too early */
        *d = (struct tg_pool_deferred){.next = p->deferred, .ptr = ptr, .bytes = bytes, .until = p->defer_until};
        p->deferred = d;
        return;
    }
    size_t size = pool_round(bytes);
    struct tg_pool_block *b = pool_block_of(p, ptr);
    TG_ASSERT(b != NULL);
    p->used -= size;
    struct tg_pool_free **fp = &p->free_list, *prev = NULL;
    while (*fp && (*fp)->ptr < (char *)ptr) prev = *fp, fp = &(*fp)->next;
    struct tg_pool_free *next = *fp;
    if (prev && prev->block == b && prev->ptr + prev->size == (char *)ptr) { /* merge into the previous range */
        prev->size += size;
        if (next && next->block == b && prev->ptr + prev->size == next->ptr) {
            prev->size += next->size;
            prev->next = next->next;
            free(next);
        }
        return;
    }
    if (next && next->block == b && (char *)ptr + size == next->ptr) { /* merge into the next range */
        next->ptr = ptr;
        next->size += size;
        return;
    }
    struct tg_pool_free *f = malloc(sizeof *f);
    if (!f) return; /* the range stays unused: a leak inside the pool, not an error */
    *f = (struct tg_pool_free){.next = next, .block = b, .ptr = ptr, .size = size};
    *fp = f;
}

tg_status tg_pool_push(tg_pool *p)
{
    TG_NONNULL(p, "the pool");
    if (pool_depth == TG_POOL_STACK) return tg_error(TG_ESTATE, "tg_pool_push: more than %d pools pushed", TG_POOL_STACK);
    pool_stack[pool_depth++] = tg_pool_retain(p); /* the stack's reference: a pushed pool allocates until popped */
    return TG_OK;
}

void tg_pool_pop(tg_pool *p)
{
    /* not the pool on top (or none pushed): a caller's mistake, noted as the last error; the stack stays */
    if (pool_depth > 0 && pool_stack[pool_depth - 1] == p) pool_depth--, tg_pool_release(p);
    else tg_error(TG_ESTATE, "tg_pool_pop: %s", pool_depth ? "the pool is not the one pushed last" : "no pool is pushed");
}

int tg_pool_pushed(const tg_pool *p)
{
    for (int i = 0; i < pool_depth; i++)
        if (pool_stack[i] == p) return 1;
    return 0;
}

tg_pool *tg_pool_current(tg_device dev)
{
    for (int i = pool_depth - 1; i >= 0; i--)
        if (same_device(pool_stack[i]->dev, dev)) return pool_stack[i];
    return NULL;
}

tg_status tg_storage_new(tg_pool *pool, tg_device dev, size_t bytes, struct tg_storage **out)
{
    char dname[32];
    if (!tg_device_valid(dev)) return tg_error(TG_EINVAL, "no such device %s", tg_device_str(dev, dname, sizeof dname));
    if (!pool) pool = tg_pool_current(dev);
    if (pool && !same_device(pool->dev, dev)) return tg_error(TG_EINVAL, "pool is on another device than the tensor");
    if (!pool && tg_device_capturing(dev)) {
        return tg_error(TG_ECAPTURE,
                        "cannot allocate %zu bytes from the %s allocator while stream '%s' is capturing "
                        "(graph memory must come from a pool: allocate from the graph's pool)",
                        bytes, tg_device_str(dev, dname, sizeof dname), tg_device_capturer_name(dev));
    }
    struct tg_storage *s = calloc(1, sizeof *s);
    if (!s) return tg_error(TG_ENOMEM, "out of host memory");
    tg_status st;
    if (pool) {
        st = tg_pool_alloc(pool, bytes, &s->data);
        if (st == TG_OK) s->pool = tg_pool_retain(pool);
    } else {
        st = tg_backend_for(dev)->alloc(dev.index, bytes ? bytes : 1, &s->data);
        if (st == TG_OK) tg_device_count_memory(dev, bytes, 1);
    }
    if (st != TG_OK) {
        free(s);
        return st;
    }
    s->bytes = bytes;
    s->dev = dev;
    s->refcount = 1;
    *out = s;
    return TG_OK;
}

void tg_storage_return_range(struct tg_storage *s)
{
    if (!s || !s->pool || s->range_returned) return;
    tg_pool_free_range(s->pool, s->data, s->bytes);
    s->range_returned = 1;
}

void tg_storage_release(struct tg_storage *s)
{
    if (!s || --s->refcount > 0) return;
    if (s->pool) {
        if (!s->range_returned) tg_pool_free_range(s->pool, s->data, s->bytes);
        tg_pool_release(s->pool);
    } else {
        tg_backend_for(s->dev)->free(s->dev.index, s->data);
        tg_device_count_memory(s->dev, s->bytes, 0);
    }
    free(s);
}
