/* cpu.c — the CPU reference backend: host memory and streams as command buffers that capture and replay. */
#include "backend/cpu_impl.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

/* A recorded kernel call: the body and its own copy of the argument struct; or
 * (host.fn set) host work that can fail, holding a reference to host.ud. */
struct cpu_cmd {
    cpu_fn fn;
    void *args;
    size_t size;
    struct tg_host_call host;
};

/* g->impl of a CPU graph. */
struct cpu_cmdlist {
    struct cpu_cmd *cmds; /* (n) in issue order */
    size_t n, cap;
};

void *cpu_aligned_alloc(size_t bytes)
{
    size_t sz = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    if (sz == 0) sz = 64;
    if (sz < bytes || posix_memalign(&p, 64, sz) != 0) return NULL;
    return p;
}

/* ------------------------------------------------------------------ submission */
static tg_status cmdlist_grow(struct cpu_cmdlist *l)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        struct cpu_cmd *c = realloc(l->cmds, cap * sizeof *c);
        if (!c) return tg_error(TG_ENOMEM, "cpu: cannot grow a captured graph to %zu commands", cap);
        l->cmds = c;
        l->cap = cap;
    }
    return TG_OK;
}

static tg_status cmdlist_append(struct cpu_cmdlist *l, cpu_fn fn, const void *args, size_t size)
{
    TG_TRY(cmdlist_grow(l));
    void *copy = malloc(size ? size : 1);
    if (!copy) return tg_error(TG_ENOMEM, "cpu: cannot record a command (%zu bytes of arguments)", size);
    memcpy(copy, args, size);
    l->cmds[l->n++] = (struct cpu_cmd){.fn = fn, .args = copy, .size = size};
    return TG_OK;
}

tg_status cpu_submit(tg_stream *s, cpu_fn fn, const void *args, size_t size)
{
    if (s && s->capture) {
        struct cpu_cmdlist *l = s->capture->impl;
        TG_ASSERT(l != NULL); /* capture_begin creates it */
        return cmdlist_append(l, fn, args, size);
    }
    fn(args);
    return TG_OK;
}

/* Host work that can fail: runs now, or is recorded (holding a reference to h->ud) while s captures. */
static tg_status cpu_host_call(tg_stream *s, const struct tg_host_call *h)
{
    if (s && s->capture) {
        struct cpu_cmdlist *l = s->capture->impl;
        TG_ASSERT(l != NULL);
        TG_TRY(cmdlist_grow(l));
        if (h->retain) h->retain(h->ud);
        l->cmds[l->n++] = (struct cpu_cmd){.host = *h};
        return TG_OK;
    }
    return h->fn(h->ud);
}

/* ------------------------------------------------------------------ devices and memory */
static int cpu_device_count(void) { return 1; }

static tg_status cpu_device_describe(int index, char *name, size_t n, size_t *total)
{
    if (index != 0) return tg_error(TG_EINVAL, "cpu: no device cpu:%d (there is one CPU device)", index);
    if (name && n) {
        char model[128] = "CPU";
        FILE *f = fopen("/proc/cpuinfo", "r");
        if (f) {
            char line[256];
            while (fgets(line, sizeof line, f)) {
                char *colon = strchr(line, ':');
                if (strncmp(line, "model name", 10) == 0 && colon) {
                    colon++;
                    while (*colon == ' ' || *colon == '\t') colon++;
                    colon[strcspn(colon, "\n")] = '\0';
                    snprintf(model, sizeof model, "%s", colon);
                    break;
                }
            }
            fclose(f);
        }
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(name, n, "%s (%ld threads)", model, ncpu > 0 ? ncpu : 1);
    }
    if (total) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        *total = pages > 0 && psize > 0 ? (size_t)pages * (size_t)psize : 0;
    }
    return TG_OK;
}

static tg_status cpu_alloc(int index, size_t bytes, void **out)
{
    *out = cpu_aligned_alloc(bytes);
    if (!*out) return tg_error(TG_ENOMEM, "cpu: out of host memory allocating %zu bytes (%.1f GiB)", bytes, (double)bytes / (1u << 30));
    return TG_OK;
}

static void cpu_free(int index, void *ptr) { free(ptr); }

struct cpu_copy_args {
    void *dst;
    const void *src;
    size_t bytes;
};

static void copy_run(const void *p)
{
    const struct cpu_copy_args *a = p;
    memmove(a->dst, a->src, a->bytes); /* views of one storage may overlap */
}

static tg_status cpu_memcpy(tg_stream *s, void *dst, const void *src, size_t bytes, tg_memcpy_kind kind)
{
    struct cpu_copy_args a = {.dst = dst, .src = src, .bytes = bytes};
    if (bytes == 0) return TG_OK;
    if (kind != TG_D2D && s && s->capture)
        return tg_error(TG_ECAPTURE, "cpu: host transfer of %zu bytes on stream '%s' while it captures", bytes,
                        s->name);
    return cpu_submit(s, copy_run, &a, sizeof a);
}

/* ------------------------------------------------------------------ streams and graphs */
static tg_status cpu_stream_init(tg_stream *s)
{
    s->impl = NULL; /* the command buffer lives in the graph being captured */
    return TG_OK;
}

static void cpu_stream_destroy(tg_stream *s) { s->impl = NULL; }

static tg_status cpu_stream_sync(tg_stream *s) { return TG_OK; /* work ran when issued */ }

static tg_status cpu_capture_begin(tg_stream *s)
{
    TG_ASSERT(s->capture != NULL);
    struct cpu_cmdlist *l = calloc(1, sizeof *l);
    if (!l) return tg_error(TG_ENOMEM, "cpu: cannot begin capture on stream '%s'", s->name);
    s->capture->impl = l;
    return TG_OK;
}

static tg_status cpu_capture_end(tg_stream *s, tg_graph *g)
{
    struct cpu_cmdlist *l = g->impl;
    g->ncmds = l ? l->n : 0;
    return TG_OK;
}

/* Runs the commands in order; on a capturing stream they are recorded into
 * that capture instead (a graph launched inside a capture). */
static tg_status cpu_graph_replay(tg_graph *g, tg_stream *s)
{
    struct cpu_cmdlist *l = g->impl;
    if (!l) return tg_error(TG_ESTATE, "cpu: replay of a graph that holds no capture");
    for (size_t i = 0; i < l->n; i++) {
        const struct cpu_cmd *c = &l->cmds[i];
        TG_TRY(c->host.fn ? cpu_host_call(s, &c->host) : cpu_submit(s, c->fn, c->args, c->size));
    }
    return TG_OK;
}

static void cpu_graph_destroy(tg_graph *g)
{
    struct cpu_cmdlist *l = g->impl;
    if (!l) return;
    for (size_t i = 0; i < l->n; i++) {
        free(l->cmds[i].args);
        if (l->cmds[i].host.drop) l->cmds[i].host.drop(l->cmds[i].host.ud);
    }
    free(l->cmds);
    free(l);
    g->impl = NULL;
}

/* ------------------------------------------------------------------ events
 * Work runs when issued, so an event is complete once its record ran; the
 * record is a command, so inside a capture it runs (and timestamps) at replay. */
struct cpu_event {
    double us;    /* CLOCK_MONOTONIC microseconds of the last record that ran */
    int recorded;
};

struct cpu_event_args {
    struct cpu_event *ev;
};

static void event_run(const void *p)
{
    const struct cpu_event_args *a = p;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    a->ev->us = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
    a->ev->recorded = 1;
}

static tg_status cpu_event_init(tg_event *e)
{
    e->impl = calloc(1, sizeof(struct cpu_event));
    if (!e->impl) return tg_error(TG_ENOMEM, "out of host memory");
    return TG_OK;
}

static void cpu_event_destroy(tg_event *e)
{
    free(e->impl);
    e->impl = NULL;
}

static tg_status cpu_event_record(tg_event *e, tg_stream *s)
{
    struct cpu_event_args a = {.ev = e->impl};
    return cpu_submit(s, event_run, &a, sizeof a);
}

static tg_status cpu_stream_wait_event(tg_stream *s, tg_event *e) { return TG_OK; /* e's work already ran */ }

static tg_status cpu_event_query(tg_event *e, int *done)
{
    *done = 1;
    return TG_OK;
}

static tg_status cpu_event_sync(tg_event *e) { return TG_OK; }

static tg_status cpu_event_elapsed(tg_event *a, tg_event *b, double *ms)
{
    const struct cpu_event *x = a->impl, *y = b->impl;
    if (!x->recorded || !y->recorded)
        return tg_error(TG_ESTATE, "event elapsed time: the %s event was never recorded (or its graph never replayed)",
                        !x->recorded ? "start" : "end");
    *ms = (y->us - x->us) * 1e-3;
    return TG_OK;
}

const struct tg_backend tg_backend_cpu = {
    .name = "cpu",
    .type = TG_CPU,
    .device_count = cpu_device_count,
    .device_describe = cpu_device_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memcpy = cpu_memcpy,
    .stream_init = cpu_stream_init,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .capture_begin = cpu_capture_begin,
    .capture_end = cpu_capture_end,
    .graph_replay = cpu_graph_replay,
    .graph_destroy = cpu_graph_destroy,
    .host_call = cpu_host_call,
    .event_init = cpu_event_init,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_query = cpu_event_query,
    .event_sync = cpu_event_sync,
    .event_elapsed = cpu_event_elapsed,
    .fill = cpu_fill,
    .cast = cpu_cast,
    .binary = cpu_binary,
    .axpby = cpu_axpby,
    .gemm = cpu_gemm,
    .reduce = cpu_reduce,
    .rand = cpu_rand,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_forward_fp8 = cpu_layernorm_forward_fp8,
    .layernorm_backward = cpu_layernorm_backward,
    .layernorm_backward_dw = cpu_layernorm_backward_dw,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rmsnorm_backward_dw = cpu_rmsnorm_backward_dw,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .bias_add = cpu_bias_add,
    .bias_backward_dw = cpu_bias_backward_dw,
    .attention_forward = cpu_attention_forward,
    .attention_kv = cpu_attention_kv,
    .attention_backward = cpu_attention_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward_dw = cpu_embedding_backward_dw,
    .cross_entropy_forward = cpu_cross_entropy_forward,
    .cross_entropy_backward = cpu_cross_entropy_backward,
    .cross_entropy_fused = cpu_cross_entropy_fused,
    .cross_entropy_mean = cpu_cross_entropy_mean,
    .adamw = cpu_adamw,
    .adamw_multi = cpu_adamw_multi,
    .adamw_count = cpu_adamw_count,
    .sumsq_multi = cpu_sumsq_multi,
    .zero_multi = cpu_zero_multi,
    .copy_multi = cpu_copy_multi,
    .fp8_scale_update = cpu_fp8_scale_update,
    .fp8_cast = cpu_fp8_cast,
    .fp8_cast_gelu = cpu_fp8_cast_gelu,
    .fp8_dbias = cpu_fp8_dbias,
    .fp8_transpose = cpu_fp8_transpose,
    .fp8_dequantize = cpu_fp8_dequantize,
    .fp8_amax = cpu_fp8_amax,
    .fp8_gemm = cpu_fp8_gemm,
};
