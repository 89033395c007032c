/* trace.c — records timed host events and writes them as Chrome trace JSON (opens in Perfetto). */
#include "sched/trace.h"

#include <errno.h>
#include <string.h>
#include <time.h>

struct tg_trace {
    struct tg_trace_event *ev;
    int n, cap;
    uint64_t next_id;
    double t0; /* monotonic microseconds at creation */
};

static double mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

tg_status tg_trace_new(tg_trace **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return tg_error(TG_ENOMEM, "out of host memory");
    (*out)->t0 = mono_us();
    (*out)->next_id = 1;
    return TG_OK;
}

static void event_clear(struct tg_trace_event *e)
{
    free(e->name);
    free(e->cat);
    free(e->args);
}

void tg_trace_clear(tg_trace *t)
{
    for (int i = 0; i < t->n; i++) event_clear(&t->ev[i]);
    t->n = 0;
}

void tg_trace_free(tg_trace *t)
{
    if (!t) return;
    tg_trace_clear(t);
    free(t->ev);
    free(t);
}

double tg_trace_now(const tg_trace *t) { return mono_us() - t->t0; }
int tg_trace_count(const tg_trace *t) { return t->n; }
const struct tg_trace_event *tg_trace_event(const tg_trace *t, int i) { return i >= 0 && i < t->n ? &t->ev[i] : NULL; }

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

tg_status tg_trace_add(tg_trace *t, const struct tg_trace_event *e)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 256;
        struct tg_trace_event *ne = realloc(t->ev, (size_t)cap * sizeof *ne);
        if (!ne) return tg_error(TG_ENOMEM, "out of host memory");
        t->ev = ne;
        t->cap = cap;
    }
    struct tg_trace_event *d = &t->ev[t->n];
    *d = *e;
    d->name = strdup(e->name ? e->name : "");
    d->cat = strdup(e->cat ? e->cat : "event");
    d->args = dup_or_null(e->args);
    if (!d->name || !d->cat || (e->args && !d->args)) {
        event_clear(d);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    if (d->ph == 'A' && d->id == 0) d->id = t->next_id++;
    t->n++;
    return TG_OK;
}

tg_status tg_trace_name_track(tg_trace *t, int pid, int tid, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (t->ev[i].ph == 'M' && t->ev[i].pid == pid && t->ev[i].tid == tid) return TG_OK;
    struct tg_trace_event e = {.ph = 'M', .name = (char *)name, .cat = "meta", .pid = pid, .tid = tid};
    return tg_trace_add(t, &e);
}

/* ------------------------------------------------------------------ JSON */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* "args":{...} with what the event is about, then the caller's members. */
static void put_args(FILE *f, const struct tg_trace_event *e)
{
    int any = 0;
    fputs(",\"args\":{", f);
    if (e->op[0]) {
        fputs("\"op\":", f);
        put_str(f, e->op);
        any = 1;
    }
    const char *keys[4] = {"stage", "chunk", "mb", "index"};
    int vals[4] = {e->stage, e->chunk, e->mb, e->index};
    for (int k = 0; k < 4; k++) {
        if (!vals[k]) continue;
        fprintf(f, "%s\"%s\":%d", any ? "," : "", keys[k], vals[k]);
        any = 1;
    }
    if (e->args && e->args[0]) fprintf(f, "%s%s", any ? "," : "", e->args);
    fputc('}', f);
}

static void put_head(FILE *f, const struct tg_trace_event *e, const char *ph, double ts)
{
    fputs("{\"name\":", f);
    put_str(f, e->name);
    fputs(",\"cat\":", f);
    put_str(f, e->cat);
    fprintf(f, ",\"ph\":\"%s\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d", ph, ts, e->pid, e->tid);
}

tg_status tg_trace_write(const tg_trace *t, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return tg_error(TG_EIO, "trace: cannot write %s: %s", path, strerror(errno));
    fputs("{\"traceEvents\":[\n", f);
    int first = 1;
    for (int i = 0; i < t->n; i++) {
        const struct tg_trace_event *e = &t->ev[i];
        if (!first) fputs(",\n", f);
        first = 0;
        if (e->ph == 'M') {
            fprintf(f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
                    e->tid < 0 ? "process_name" : "thread_name", e->pid, e->tid < 0 ? 0 : e->tid);
            put_str(f, e->name);
            fputs("}}", f);
        } else if (e->ph == 'A') {
            /* nestable async pair: Perfetto draws it on its own track, overlaps allowed */
            put_head(f, e, "b", e->ts);
            fprintf(f, ",\"id\":\"0x%llx\"", (unsigned long long)e->id);
            put_args(f, e);
            fputs("},\n", f);
            put_head(f, e, "e", e->ts + e->dur);
            fprintf(f, ",\"id\":\"0x%llx\"}", (unsigned long long)e->id);
        } else {
            put_head(f, e, "X", e->ts);
            fprintf(f, ",\"dur\":%.3f", e->dur);
            put_args(f, e);
            fputc('}', f);
        }
    }
    fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return tg_error(TG_EIO, "trace: error writing %s", path);
    return TG_OK;
}
