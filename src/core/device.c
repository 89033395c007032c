/* device.c — devices, their backends, default and current streams, capture bookkeeping. */
#include "backend/backend.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define TG_MAX_DEVICES 16

struct tg_device_state {
    tg_stream *default_stream;
    tg_stream *current; /* NULL: the default stream */
    int capturing;      /* streams of this device now capturing */
    tg_stream *capturer; /* the stream that began capturing last (for messages) */
    struct tg_index_check *index_rec; /* device memory (backend.h), made with the device's first stream */
    int index_armed;                  /* a kernel with checks was issued (or captured) on the device */
    uint64_t kernels, gemms, graph_replays; /* tg_device_stats (atomic) */
    size_t memory, peak_memory;
};

static struct tg_device_state cpu_state;
static struct tg_device_state cuda_state[TG_MAX_DEVICES];

static struct tg_device_state *state_of(tg_device d)
{
    if (d.type == TG_CPU) return &cpu_state;
    TG_ASSERT(d.index >= 0 && d.index < TG_MAX_DEVICES);
    return &cuda_state[d.index];
}

const struct tg_backend *tg_backend_for(tg_device d)
{
    if (d.type == TG_CPU) return &tg_backend_cpu;
#ifdef TG_HAVE_CUDA
    if (d.type == TG_CUDA) return &tg_backend_cuda;
#endif
    return NULL;
}

int tg_device_count(tg_device_type type)
{
    if (type == TG_CPU) return 1;
#ifdef TG_HAVE_CUDA
    if (type == TG_CUDA) {
        static int count = -1;
        if (count < 0) {
            count = tg_backend_cuda.device_count();
            if (count > TG_MAX_DEVICES) count = TG_MAX_DEVICES;
        }
        return count;
    }
#endif
    return 0;
}

int tg_device_valid(tg_device d)
{
    if (d.type == TG_CPU) return d.index == 0;
    return d.type == TG_CUDA && d.index >= 0 && d.index < tg_device_count(TG_CUDA);
}

tg_status tg_device_parse(const char *s, tg_device *out)
{
    TG_NONNULL(s, "s");
    TG_NONNULL(out, "out");
    if (strcmp(s, "cpu") == 0) {
        *out = (tg_device){TG_CPU, 0};
        return TG_OK;
    }
    if (strncmp(s, "cuda", 4) == 0) {
        int idx = 0;
        if (s[4] == ':') {
            char *end;
            long v = strtol(s + 5, &end, 10);
            if (end == s + 5 || *end || v < 0) return tg_error(TG_EINVAL, "bad device '%s' (expected cpu, cuda or cuda:N)", s);
            idx = (int)v;
        } else if (s[4]) {
            return tg_error(TG_EINVAL, "bad device '%s' (expected cpu, cuda or cuda:N)", s);
        }
#ifndef TG_HAVE_CUDA
        (void)idx;
        return tg_error(TG_ENOTSUP, "device '%s': this tegraph was built without CUDA", s);
#else
        int n = tg_device_count(TG_CUDA);
        if (idx >= n) return tg_error(TG_EINVAL, "device '%s': only %d CUDA device(s) present", s, n);
        *out = (tg_device){TG_CUDA, idx};
        return TG_OK;
#endif
    }
    return tg_error(TG_EINVAL, "bad device '%s' (expected cpu, cuda or cuda:N)", s);
}

const char *tg_device_str(tg_device d, char *buf, size_t n)
{
    if (!buf) return "";
    if (d.type == TG_CPU && d.index == 0) snprintf(buf, n, "cpu");
    else if (d.type == TG_CPU) snprintf(buf, n, "cpu:%d", d.index);
    else if (d.type == TG_CUDA) snprintf(buf, n, "cuda:%d", d.index);
    else snprintf(buf, n, "device type %d index %d", (int)d.type, d.index);
    return buf;
}

tg_status tg_device_describe(tg_device d, char *name, size_t n, size_t *total)
{
    char ds[48];
    if (!tg_device_valid(d)) return tg_error(TG_EINVAL, "device_describe: no such device %s", tg_device_str(d, ds, sizeof ds));
    return tg_backend_for(d)->device_describe(d.index, name, n, total);
}

int tg_launch_env(tg_launch_var what, int def)
{
    static const char *const vars[][5] = {
        [TG_ENV_RANK] = {"TG_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", NULL},
        [TG_ENV_WORLD_SIZE] = {"TG_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL},
        [TG_ENV_LOCAL_RANK] = {"TG_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", NULL},
        [TG_ENV_LOCAL_SIZE] = {"TG_LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", NULL},
    };
    if ((unsigned)what > TG_ENV_LOCAL_SIZE) return def;
    for (const char *const *name = vars[what]; *name; name++) {
        const char *e = getenv(*name);
        if (e && *e) {
            char *end;
            long v = strtol(e, &end, 10);
            if (*end == '\0') return (int)v;
        }
    }
    return def;
}

tg_device tg_default_device(void)
{
    const char *env = getenv("TG_DEVICE");
    tg_device d;
    if (env && *env && tg_device_parse(env, &d) == TG_OK) return d;
    if (env && *env) { /* unparsable or unavailable: the CPU, said once (tegraph's own program refuses it) */
        static int told;
        if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "tegraph: TG_DEVICE='%s' is not a device here (%s): using cpu\n", env, tg_last_error());
        return (tg_device){TG_CPU, 0};
    }
    int n = tg_device_count(TG_CUDA);
    if (n > 0) {
        /* one GPU per local rank when launched by mpirun / srun / tegraph run -n */
        int lr = tg_launch_env(TG_ENV_LOCAL_RANK, 0);
        return (tg_device){TG_CUDA, lr >= 0 ? lr % n : 0};
    }
    return (tg_device){TG_CPU, 0};
}

tg_stream *tg_stream_current(tg_device dev)
{
    if (!tg_device_valid(dev)) { /* public input: state_of asserts on an index it has no slot for */
        char ds[48];
        tg_error(TG_EINVAL, "stream_current: no such device %s", tg_device_str(dev, ds, sizeof ds));
        return NULL;
    }
    struct tg_device_state *st = state_of(dev);
    if (st->current) return st->current;
    if (!st->default_stream) {
        if (tg_stream_new(dev, "default", &st->default_stream) != TG_OK) return NULL;
    }
    return st->default_stream;
}

tg_stream *tg_stream_set_current(tg_stream *s)
{
    if (!s) {
        tg_error(TG_EINVAL, "stream_set_current: the stream is NULL");
        return NULL;
    }
    struct tg_device_state *st = state_of(s->dev);
    tg_stream *prev = tg_stream_current(s->dev);
    st->current = s;
    return prev;
}

/* Called by tg_stream_free: a freed stream must not stay current. */
void tg_device_forget_stream(tg_stream *s)
{
    struct tg_device_state *st = state_of(s->dev);
    if (st->current == s) st->current = NULL;
    if (st->default_stream == s) st->default_stream = NULL;
}

void tg_device_capture_count(tg_stream *s, int delta)
{
    struct tg_device_state *st = state_of(s->dev);
    st->capturing += delta;
    TG_ASSERT(st->capturing >= 0);
    if (delta > 0) st->capturer = s;
    else if (st->capturer == s || st->capturing == 0) st->capturer = NULL;
}

tg_graph *tg_device_capture_graph(tg_device d)
{
    struct tg_device_state *st = state_of(d);
    if (st->capturing == 0) return NULL;
    tg_stream *cur = tg_stream_current(d);
    if (cur && cur->capture) return cur->capture;
    return st->capturer ? st->capturer->capture : NULL;
}

const char *tg_device_capturer_name(tg_device d)
{
    struct tg_device_state *st = state_of(d);
    return st->capturer ? st->capturer->name : "a stream";
}

/* A device that does not exist captures nothing (public input: state_of asserts on an index it has no slot for). */
int tg_device_capturing(tg_device dev) { return tg_device_valid(dev) && state_of(dev)->capturing > 0; }

/* ------------------------------------------------------------------ index checks */
static const struct tg_index_check index_clear = {.first = {~0ULL, ~0ULL, ~0ULL, ~0ULL}, .limit = {0, 0, 0, 0}};
_Static_assert(TG_INDEX_CHECKS == 4, "index_clear clears every check");

/* The shortest decimal form that reads back as the f32 v (1.5, 3e+09, 2.7, nan). */
static const char *f32_str(float v, char *buf, size_t n)
{
    for (int p = 6; p <= 9; p++) {
        snprintf(buf, n, "%.*g", p, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    return buf;
}

/* The message of a TG_INDEX_CAST record: the value, its index and both dtypes. */
static tg_status cast_error(unsigned long long key, long long code)
{
    tg_dtype src = (tg_dtype)(code >> 8 & 0xff), dst = (tg_dtype)(code & 0xff);
    uint32_t bits = (uint32_t)(key & 0xffffffffULL);
    long long pos = (long long)(key >> 32);
    char v[48], at[64];
    if (src == TG_I32) {
        snprintf(v, sizeof v, "%d", (int)(int32_t)bits);
    } else {
        float f;
        memcpy(&f, &bits, sizeof f);
        f32_str(f, v, sizeof v);
    }
    if (pos == 0xffffffffLL) snprintf(at, sizeof at, "at index %lld or later", pos);
    else snprintf(at, sizeof at, "at index %lld", pos);
    return tg_error(TG_EINVAL, "copy: value %s %s of the %s source does not fit %s (integers %s)", v, at,
                    (unsigned)src < TG_DTYPE_COUNT ? tg_dtype_name(src) : "?", (unsigned)dst < TG_DTYPE_COUNT ? tg_dtype_name(dst) : "?",
                    dst == TG_U16 ? "0 to 65535" : "-2147483648 to 2147483647");
}

void tg_device_index_init(tg_stream *s)
{
    struct tg_device_state *st = state_of(s->dev);
    if (st->index_rec) return;
    void *p = NULL;
    if (s->be->alloc(s->dev.index, sizeof index_clear, &p) != TG_OK) return; /* kernels then skip the check */
    if (s->be->memcpy(s, p, &index_clear, sizeof index_clear, TG_H2D) != TG_OK || s->be->stream_sync(s) != TG_OK) {
        s->be->free(s->dev.index, p);
        return;
    }
    st->index_rec = p;
}

struct tg_index_check *tg_index_check_of(tg_stream *s) { return state_of(s->dev)->index_rec; }

void tg_index_check_arm(tg_stream *s)
{
    struct tg_device_state *st = state_of(s->dev);
    if (st->index_rec) st->index_armed = 1;
}

tg_status tg_index_check_poll(tg_stream *s)
{
    struct tg_device_state *st = state_of(s->dev);
    struct tg_index_check rec;
    if (!st->index_armed || s->capture) return TG_OK;
    TG_TRY(s->be->memcpy(s, &rec, st->index_rec, sizeof rec, TG_D2H)); /* armed stays: replays run the kernels again */
    int k = 0;
    while (k < TG_INDEX_CHECKS && rec.first[k] == ~0ULL) k++;
    if (k == TG_INDEX_CHECKS) return TG_OK;
    TG_TRY(s->be->memcpy(s, st->index_rec, &index_clear, sizeof index_clear, TG_H2D));
    TG_TRY(s->be->stream_sync(s));
    if (k == TG_INDEX_CAST) return cast_error(rec.first[k], rec.limit[k]);
    if (k == TG_INDEX_STEP)
        return tg_error(TG_EINVAL, "adamw_count: step = %d is the i32 maximum: the step count cannot advance (left unchanged)",
                        (int)(int32_t)(uint32_t)rec.first[k]);
    long long pos = (long long)(rec.first[k] >> 32), lim = rec.limit[k];
    int32_t id = (int32_t)(uint32_t)(rec.first[k] & 0xffffffffULL);
    /* the CPU polls right after the kernel or replay that wrote the record; elsewhere the read that finds it is not
     * the culprit: say where the id came from */
    char when[160] = "", d[32];
    if (s->be->type != TG_CPU)
        snprintf(when, sizeof when, "; found by this host read of %s, in work issued on it since its last read (an op or "
                 "a graph replay)", tg_device_str(s->dev, d, sizeof d));
    if (k == TG_INDEX_EMBEDDING)
        return tg_error(TG_EINVAL, "embedding: token id %d at position %lld is outside the table of %lld rows (ids 0 to %lld)%s",
                        (int)id, pos, lim, lim - 1, when);
    return tg_error(TG_EINVAL,
                    "cross_entropy: target %d at row %lld is outside the vocabulary of %lld (targets 0 to %lld, or the "
                    "ignore_index)%s",
                    (int)id, pos, lim, lim - 1, when);
}

/* ------------------------------------------------------------------ counters */
void tg_device_count_op(tg_stream *s, int gemm)
{
    if (s->capture) return; /* its replays count */
    struct tg_device_state *d = state_of(s->dev);
    __atomic_fetch_add(gemm ? &d->gemms : &d->kernels, 1, __ATOMIC_RELAXED);
}

void tg_device_count_replay(tg_stream *s)
{
    __atomic_fetch_add(&state_of(s->dev)->graph_replays, 1, __ATOMIC_RELAXED);
}

void tg_device_count_memory(tg_device dev, size_t bytes, int add)
{
    struct tg_device_state *d = state_of(dev);
    if (!add) {
        __atomic_fetch_sub(&d->memory, bytes, __ATOMIC_RELAXED);
        return;
    }
    size_t now = __atomic_add_fetch(&d->memory, bytes, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&d->peak_memory, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&d->peak_memory, &peak, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

void tg_device_get_stats(tg_device dev, tg_device_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!tg_device_valid(dev)) return;
    struct tg_device_state *d = state_of(dev);
    out->kernels = __atomic_load_n(&d->kernels, __ATOMIC_RELAXED);
    out->gemms = __atomic_load_n(&d->gemms, __ATOMIC_RELAXED);
    out->graph_replays = __atomic_load_n(&d->graph_replays, __ATOMIC_RELAXED);
    out->memory = __atomic_load_n(&d->memory, __ATOMIC_RELAXED);
    out->peak_memory = __atomic_load_n(&d->peak_memory, __ATOMIC_RELAXED);
}

void tg_device_reset_peak(tg_device dev)
{
    if (!tg_device_valid(dev)) return;
    struct tg_device_state *d = state_of(dev);
    __atomic_store_n(&d->peak_memory, __atomic_load_n(&d->memory, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}
