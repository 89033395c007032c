/* trace.c — the trace recorder: spans timed by events on the streams that run their work, or by the host clock. */
#include "backend/backend.h"
#include "io/json.h"
#include "trace/trace.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int tg_trace_on;

#define NBASE 17 /* the CPU + 16 CUDA devices */

struct span {
    char *name;
    char *op, *args;  /* NULL when not given */
    const char *cat;
    int pid, track, async;
    int stage, chunk, mb, index;
    int64_t step;
    tg_device dev;
    tg_event *b, *e;  /* on a stream; NULL for host spans */
    double hb, he;    /* host spans: microseconds since the trace began */
    int ended, dropped;
};

/* One trace (host code is single-threaded around the engine; hooks, comm and
 * the executor run on it too). */
static struct {
    int gen;               /* bumped at each reset: ids of an earlier trace are ignored */
    struct span *v;
    int n, cap;
    double t0;             /* host microseconds at the start */
    int rank;              /* the default pid */
    tg_event *base[NBASE]; /* per device: recorded at the start (or first use) */
    double base_us[NBASE]; /* its host time, microseconds since t0 */
    struct tg_trace_proc *procs; /* named processes (names owned) */
    int nprocs;
} tr;

/* The executor's context (kept across traces: it belongs to the running schedule). */
static int ctx_pid = -1, ctx_stage;

static double mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int base_slot(tg_device d) { return d.type == TG_CPU ? 0 : 1 + d.index; }

/* The device's base event: recorded on s and waited for, so the device time
 * of later events maps to host time (on the CPU both are the host clock). */
static tg_status base_for(tg_stream *s)
{
    int k = base_slot(s->dev);
    if (k >= NBASE) return tg_error(TG_EINVAL, "trace: device index %d out of range", s->dev.index);
    if (tr.base[k]) return TG_OK;
    tg_event *e;
    TG_TRY(tg_event_new(s->dev, 1, &e));
    tg_status st = s->be->event_record(e, s->dev.type == TG_CPU ? NULL : s);
    if (st == TG_OK) st = e->be->event_sync(e);
    if (st != TG_OK) {
        tg_event_free(e);
        return st;
    }
    tr.base[k] = e;
    tr.base_us[k] = mono_us() - tr.t0;
    return TG_OK;
}

static void reset(void);

tg_status tg_trace_begin(void)
{
    if (tg_trace_on) return tg_error(TG_ESTATE, "trace begin: a trace is already running (end it first)");
    reset();
    tr.t0 = mono_us();
    tr.rank = tg_launch_env(TG_ENV_RANK, 0);
    tg_device d = tg_default_device();
    tg_stream *s = tg_stream_current(d);
    if (s && !s->capture) TG_TRY(base_for(s));
    tg_trace_on = 1;
    return TG_OK;
}

int tg_trace_active(void) { return tg_trace_on; }

static tg_status grow(void)
{
    if (tr.n < tr.cap) return TG_OK;
    int cap = tr.cap ? 2 * tr.cap : 1024;
    struct span *v = realloc(tr.v, (size_t)cap * sizeof *v);
    if (!v) return tg_error(TG_ENOMEM, "out of host memory");
    tr.v = v;
    tr.cap = cap;
    return TG_OK;
}

/* CPU events recorded inside captured graphs: the graphs still write them at
 * each replay, so they live as long as the process (marked, never freed). */
static void keep(tg_event *e) { e->kept = 1; }

/* Records a timing event on s (NULL on failure: the span is then dropped). */
static tg_event *mark(tg_stream *s)
{
    tg_event *e = NULL;
    if (tg_event_new(s->dev, 1, &e) != TG_OK) return NULL;
    if (s->be->event_record(e, s) != TG_OK) {
        tg_event_free(e);
        return NULL;
    }
    if (s->capture) keep(e); /* a CPU capture: the graph holds it */
    return e;
}

static void span_free(struct span *sp)
{
    free(sp->name);
    free(sp->op);
    free(sp->args);
    sp->name = sp->op = sp->args = NULL;
}

static char *dup_opt(const char *s) { return s && *s ? strdup(s) : NULL; }

int tg_trace_open(tg_stream *s, int track, const char *name, const struct tg_trace_about *a)
{
    if (!tg_trace_on) return -1;
    if (s && s->capture && s->dev.type != TG_CPU) return -1;
    /* the device's time base; a CPU one records host time at once, so a capturing CPU stream gets one too
     * (its captured span is timed at replay against it, whatever the default device is) */
    if (s && base_for(s) != TG_OK) return -1;
    if (tr.n >= 0xffffff || grow() != TG_OK) return -1;
    static const struct tg_trace_about none;
    if (!a) a = &none;
    struct span sp = {.track = track, .pid = ctx_pid >= 0 ? ctx_pid : tr.rank, .dev = s ? s->dev : (tg_device){TG_CPU, 0},
                      .cat = a->cat, .async = a->async, .stage = a->stage, .chunk = a->chunk, .mb = a->mb,
                      .index = a->index, .step = a->step};
    if (track == TG_TRACK_HOST && ctx_stage > 0) { /* host work of the stage the executor runs */
        sp.track = TG_TRACK_STAGE(ctx_stage);
        if (!sp.stage) sp.stage = ctx_stage;
    }
    sp.name = strdup(name ? name : "");
    sp.op = dup_opt(a->op);
    sp.args = dup_opt(a->args);
    if (!sp.name || (a->op && *a->op && !sp.op) || (a->args && *a->args && !sp.args)) {
        span_free(&sp);
        return -1;
    }
    if (s) {
        sp.b = mark(s);
        if (!sp.b) {
            span_free(&sp);
            return -1;
        }
    } else {
        sp.hb = mono_us() - tr.t0;
    }
    tr.v[tr.n] = sp;
    return (tr.gen & 0x7f) << 24 | tr.n++;
}

static struct span *span_of(int id)
{
    if (id < 0 || (id >> 24) != (tr.gen & 0x7f) || (id & 0xffffff) >= tr.n) return NULL;
    struct span *sp = &tr.v[id & 0xffffff];
    return sp->ended || sp->dropped ? NULL : sp;
}

void tg_trace_close(int id, tg_stream *s)
{
    struct span *sp = span_of(id);
    if (!sp) return;
    if (sp->b) {
        if (!s) return; /* a stream span ends on a stream */
        if (s->capture && s->dev.type != TG_CPU) return; /* begun outside a CUDA capture, ending inside: dropped */
        sp->e = mark(s);
        if (!sp->e) return;
    } else {
        sp->he = mono_us() - tr.t0;
    }
    sp->ended = 1;
}

void tg_trace_drop(int id)
{
    struct span *sp = span_of(id);
    if (sp) sp->dropped = 1;
}

void tg_trace_set_pid(int pid) { ctx_pid = pid; }
void tg_trace_set_stage(int stage) { ctx_stage = stage > 0 ? stage : 0; }

tg_status tg_trace_name_process(int pid, const char *name)
{
    for (int i = 0; i < tr.nprocs; i++)
        if (tr.procs[i].pid == pid) {
            char *s = strdup(name ? name : "");
            if (!s) return tg_error(TG_ENOMEM, "out of host memory");
            free((char *)tr.procs[i].name);
            tr.procs[i].name = s;
            return TG_OK;
        }
    struct tg_trace_proc *v = realloc(tr.procs, (size_t)(tr.nprocs + 1) * sizeof *v);
    if (!v) return tg_error(TG_ENOMEM, "out of host memory");
    tr.procs = v;
    char *s = strdup(name ? name : "");
    if (!s) return tg_error(TG_ENOMEM, "out of host memory");
    tr.procs[tr.nprocs++] = (struct tg_trace_proc){pid, s};
    return TG_OK;
}

const char *tg_trace_track_name(int track, char *buf, size_t n)
{
    static const char *const names[] = {"?", "compute", "comm", "host"};
    if (track > TG_TRACK_STAGE0) snprintf(buf, n, "stage %d", track - TG_TRACK_STAGE0);
    else snprintf(buf, n, "%s", track >= 1 && track <= 3 ? names[track] : "?");
    return buf;
}

/* Waits for the last span event of each device. */
static tg_status sync_all(void)
{
    for (int i = tr.n - 1; i >= 0; i--)
        if (tr.v[i].e && tr.v[i].dev.type != TG_CPU) TG_TRY(tg_event_sync(tr.v[i].e));
    return TG_OK;
}

/* A span's times in microseconds since the trace began; TG_ESTATE for one
 * never closed, or whose events never ran (captured and not replayed). */
static tg_status span_times(const struct span *sp, double *b_us, double *e_us)
{
    if (!sp->ended || sp->dropped) return tg_error(TG_ESTATE, "trace: span '%s' never ended", sp->name);
    if (!sp->b) {
        *b_us = sp->hb;
        *e_us = sp->he;
        return TG_OK;
    }
    int k = base_slot(sp->dev);
    double b, e;
    if (k >= NBASE || !tr.base[k]) return tg_error(TG_ESTATE, "trace: span '%s' has no time base", sp->name);
    TG_TRY(tg_event_elapsed(tr.base[k], sp->b, &b));
    TG_TRY(tg_event_elapsed(tr.base[k], sp->e, &e));
    *b_us = tr.base_us[k] + b * 1e3;
    *e_us = tr.base_us[k] + e * 1e3;
    return TG_OK;
}

/* The category of a span that names none: its track's kind. */
static const char *track_cat(int track)
{
    return track == TG_TRACK_COMPUTE ? "compute" : track == TG_TRACK_COMM ? "comm" : "host";
}

tg_status tg_trace_events(struct tg_trace_event **out, int *n)
{
    *out = NULL;
    *n = 0;
    TG_TRY(sync_all());
    if (tr.n == 0) return TG_OK;
    struct tg_trace_event *v = malloc((size_t)tr.n * sizeof *v);
    if (!v) return tg_error(TG_ENOMEM, "out of host memory");
    int k = 0;
    for (int i = 0; i < tr.n; i++) {
        const struct span *sp = &tr.v[i];
        double b = 0, e = 0;
        if (span_times(sp, &b, &e) != TG_OK) continue;
        if (e < b) e = b;
        v[k++] = (struct tg_trace_event){
            .name = sp->name, .cat = sp->cat ? sp->cat : track_cat(sp->track), .op = sp->op, .args = sp->args, .async = sp->async,
            .pid = sp->pid, .track = sp->track, .stage = sp->stage, .chunk = sp->chunk, .mb = sp->mb,
            .index = sp->index, .step = sp->step, .ts = b, .dur = e - b};
    }
    *out = v;
    *n = k;
    return TG_OK;
}

static void reset(void)
{
    for (int i = 0; i < tr.n; i++) {
        struct span *sp = &tr.v[i];
        span_free(sp);
        if (sp->b && !sp->b->kept) tg_event_free(sp->b); /* kept events belong to their graphs */
        if (sp->e && !sp->e->kept) tg_event_free(sp->e);
    }
    tr.n = 0;
    tr.gen++;
    for (int k = 0; k < NBASE; k++) {
        tg_event_free(tr.base[k]);
        tr.base[k] = NULL;
    }
    for (int i = 0; i < tr.nprocs; i++) free((char *)tr.procs[i].name);
    free(tr.procs);
    tr.procs = NULL;
    tr.nprocs = 0;
}

/* The processes to name: the rank, those named, and every pid a span uses
 * (name NULL: not named). */
static tg_status procs_of(const struct tg_trace_event *ev, int n, struct tg_trace_proc **out, int *np)
{
    struct tg_trace_proc *v = malloc((size_t)(n + tr.nprocs + 1) * sizeof *v);
    if (!v) return tg_error(TG_ENOMEM, "out of host memory");
    int k = 0;
    for (int i = -1; i < tr.nprocs + n; i++) {
        int pid = i < 0 ? tr.rank : i < tr.nprocs ? tr.procs[i].pid : ev[i - tr.nprocs].pid;
        int seen = 0;
        for (int j = 0; j < k && !seen; j++) seen = v[j].pid == pid;
        if (seen) continue;
        const char *name = NULL;
        for (int j = 0; j < tr.nprocs && !name; j++)
            if (tr.procs[j].pid == pid) name = tr.procs[j].name;
        v[k++] = (struct tg_trace_proc){pid, name};
    }
    *out = v;
    *np = k;
    return TG_OK;
}

tg_status tg_trace_end(const char *path, tg_trace_summary *sum)
{
    if (!tg_trace_on) return tg_error(TG_ESTATE, "trace end: no trace is running (begin one first)");
    tg_trace_on = 0;
    struct tg_trace_event *ev = NULL;
    struct tg_trace_proc *procs = NULL;
    int n = 0, np = 0;
    tg_status st = tg_trace_events(&ev, &n);
    if (st == TG_OK && path) st = procs_of(ev, n, &procs, &np);
    int unwritten = 0;
    if (st == TG_OK && path) {
        st = tg_trace_write_chrome(path, procs, np, ev, n);
        unwritten = st == TG_EIO;
    }
    if (st == TG_OK && sum) st = tg_trace_summarize(ev, n, sum);
    free(procs);
    free(ev);
    if (unwritten) {
        /* A path that cannot be written must not cost the run its trace: the spans are kept and the trace goes
         * on, so the caller can end it again with another path (or NULL to drop it). */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tg_last_error());
        tg_trace_on = 1;
        return tg_error(st, "%s (the trace still runs, its spans kept: end it again with another path)", msg);
    }
    reset();
    return st;
}

/* The track of a public span: NULL is "host"; another name than the three is -1. */
static int track_of(const char *track)
{
    if (!track || strcmp(track, "host") == 0) return TG_TRACK_HOST;
    if (strcmp(track, "compute") == 0) return TG_TRACK_COMPUTE;
    if (strcmp(track, "comm") == 0) return TG_TRACK_COMM;
    return -1;
}

/* A public span's args must be JSON object members ("\"mb\":2,\"k\":\"v\""): the writer pastes them into the
 * span's "args" object, so anything else would break the file. Checked by parsing them in braces; *empty is set
 * when there are no members (whitespace), which are then left out (a lone comma would break the file too). */
static tg_status check_args(const char *name, const char *args, int *empty)
{
    *empty = 1;
    if (!args) return TG_OK;
    size_t n = strlen(args);
    char *obj = malloc(n + 3);
    if (!obj) return tg_error(TG_ENOMEM, "out of host memory");
    obj[0] = '{';
    memcpy(obj + 1, args, n);
    obj[n + 1] = '}';
    obj[n + 2] = '\0';
    tg_json v;
    char err[160];
    int bad = tg_json_parse(obj, n + 2, 16, &v, err, sizeof err);
    free(obj);
    if (bad)
        return tg_error(TG_EINVAL,
                        "trace span '%s': args are not JSON object members such as \"mb\":2,\"k\":\"v\" (%s, in "
                        "{%s})",
                        name, err, args);
    *empty = v.len == 0;
    tg_json_free(&v);
    return TG_OK;
}

int tg_trace_span_begin(tg_stream *s, const char *track, const char *name, const char *args)
{
    if (!tg_trace_on) return -1;
    int t = track_of(track), empty;
    if (t < 0) {
        tg_error(TG_EINVAL, "trace span '%s': no track '%s' (tracks: compute, comm, host)", name ? name : "", track);
        return -1;
    }
    if (check_args(name ? name : "", args, &empty) != TG_OK) return -1;
    struct tg_trace_about a = {.args = empty ? NULL : args};
    return tg_trace_open(s, t, name, &a);
}

void tg_trace_span_end(int id, tg_stream *s) { tg_trace_close(id, s); }
