/* span.c — records spans timed by events on the streams that run their work (or by the host clock). */
#include "backend/backend.h"
#include "core/span.h"

#include <string.h>
#include <time.h>

int tg_span_on;
const char *const tg_track_names[4] = {"?", "compute", "comm", "host"};

#define NBASE 17 /* the CPU + 16 CUDA devices */

/* One trace (host code is single-threaded around the engine; hooks and comm run on it too). */
static struct {
    int gen;              /* bumped at each reset: ids of an earlier trace are ignored */
    struct tg_span *v;
    int n, cap;
    double t0;            /* host microseconds at the start */
    tg_event *base[NBASE]; /* per device: recorded at the start (or first use) */
    double base_us[NBASE]; /* its host time, microseconds since t0 */
} tr;


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

tg_status tg_trace_begin(void)
{
    if (tg_span_on) return tg_error(TG_ESTATE, "trace begin: a trace is already running (end it first)");
    tg_span_reset();
    tr.t0 = mono_us();
    tg_device d = tg_default_device();
    tg_stream *s = tg_stream_current(d);
    if (s && !s->capture) TG_TRY(base_for(s));
    tg_span_on = 1;
    return TG_OK;
}

int tg_trace_active(void) { return tg_span_on; }

static tg_status grow(void)
{
    if (tr.n < tr.cap) return TG_OK;
    int cap = tr.cap ? 2 * tr.cap : 1024;
    struct tg_span *v = realloc(tr.v, (size_t)cap * sizeof *v);
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

int tg_span_begin(tg_stream *s, int track, const char *name, const char *args)
{
    if (!tg_span_on) return -1;
    if (s && s->capture && s->dev.type != TG_CPU) return -1;
    if (s && !s->capture && base_for(s) != TG_OK) return -1;
    if (tr.n >= 0xffffff || grow() != TG_OK) return -1;
    struct tg_span sp = {.track = track, .dev = s ? s->dev : (tg_device){TG_CPU, 0}};
    sp.name = strdup(name ? name : "");
    sp.args = args && *args ? strdup(args) : NULL;
    if (!sp.name) return -1;
    if (s) {
        sp.b = mark(s);
        if (!sp.b) {
            free(sp.name);
            free(sp.args);
            return -1;
        }
    } else {
        sp.hb = mono_us() - tr.t0;
    }
    tr.v[tr.n] = sp;
    return (tr.gen & 0x7f) << 24 | tr.n++;
}

void tg_span_end(int id, tg_stream *s)
{
    if (id < 0 || (id >> 24) != (tr.gen & 0x7f) || (id & 0xffffff) >= tr.n) return;
    struct tg_span *sp = &tr.v[id & 0xffffff];
    if (sp->ended) return;
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

void tg_span_stop(void) { tg_span_on = 0; }
int tg_span_count(void) { return tr.n; }
const struct tg_span *tg_span_at(int i) { return i >= 0 && i < tr.n ? &tr.v[i] : NULL; }

/* Waits for the last span event of each device. */
tg_status tg_span_sync(void)
{
    for (int i = tr.n - 1; i >= 0; i--)
        if (tr.v[i].e && tr.v[i].dev.type != TG_CPU) TG_TRY(tg_event_sync(tr.v[i].e));
    return TG_OK;
}

tg_status tg_span_times(const struct tg_span *sp, double *b_us, double *e_us)
{
    if (!sp->ended) return tg_error(TG_ESTATE, "trace: span '%s' never ended", sp->name);
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

void tg_span_reset(void)
{
    for (int i = 0; i < tr.n; i++) {
        struct tg_span *sp = &tr.v[i];
        free(sp->name);
        free(sp->args);
        if (sp->b && !sp->b->kept) tg_event_free(sp->b); /* kept events belong to their graphs */
        if (sp->e && !sp->e->kept) tg_event_free(sp->e);
    }
    tr.n = 0;
    tr.gen++;
    for (int k = 0; k < NBASE; k++) {
        tg_event_free(tr.base[k]);
        tr.base[k] = NULL;
    }
}

int tg_trace_span_begin(tg_stream *s, const char *track, const char *name, const char *args)
{
    if (!tg_span_on) return -1;
    int t = TG_TRACK_HOST;
    for (int k = 1; k < 4; k++)
        if (track && strcmp(track, tg_track_names[k]) == 0) t = k;
    return tg_span_begin(s, t, name, args);
}

void tg_trace_span_end(int id, tg_stream *s) { tg_span_end(id, s); }
