/* chrome.c — writes trace spans as Chrome trace JSON (opens in Perfetto), and how much comm overlapped compute. */
#include "io/json.h"
#include "trace/trace.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------------ JSON */
/* A string literal; a byte that is not part of valid UTF-8 (a name from a script) is written as U+FFFD, so the
 * file stays JSON, which is UTF-8 text. */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    while (p < end) {
        size_t k = tg_utf8_len(p, (size_t)(end - p));
        if (k == 0) fputs("\\ufffd", f), k = 1;
        else if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fwrite(p, 1, k, f);
        p += k;
    }
    fputc('"', f);
}

/* "args":{...}: what the span is about, then its own members. */
static void put_args(FILE *f, const struct tg_trace_event *e)
{
    int any = 0;
    fputs(",\"args\":{", f);
    if (e->op) {
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
    if (e->step) {
        fprintf(f, "%s\"step\":%lld", any ? "," : "", (long long)e->step);
        any = 1;
    }
    if (e->args) fprintf(f, "%s%s", any ? "," : "", e->args);
    fputc('}', f);
}

static void put_head(FILE *f, const struct tg_trace_event *e, const char *ph, double ts)
{
    fputs("{\"name\":", f);
    put_str(f, e->name);
    fputs(",\"cat\":", f);
    put_str(f, e->cat);
    fprintf(f, ",\"ph\":\"%s\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d", ph, ts, e->pid, e->track);
}

/* Starts a record: a comma and newline before each but the first. */
static void next(FILE *f, int *first)
{
    if (!*first) fputs(",\n", f);
    *first = 0;
}

static void put_meta(FILE *f, int *first, const char *what, int pid, int tid, const char *name)
{
    next(f, first);
    fprintf(f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", what, pid, tid);
    put_str(f, name);
    fputs("}}", f);
}

/* Names process p and its tracks: compute, comm, host, and the stage tracks its spans use. */
static void put_names(FILE *f, int *first, const struct tg_trace_proc *p, const struct tg_trace_event *ev, int n)
{
    char buf[48];
    if (p->name) put_meta(f, first, "process_name", p->pid, 0, p->name);
    else {
        snprintf(buf, sizeof buf, "rank %d", p->pid);
        put_meta(f, first, "process_name", p->pid, 0, buf);
    }
    for (int t = TG_TRACK_COMPUTE; t <= TG_TRACK_HOST; t++) put_meta(f, first, "thread_name", p->pid, t, tg_trace_track_name(t, buf, sizeof buf));
    for (int i = 0; i < n; i++) {
        int t = ev[i].track, fresh = 1;
        if (ev[i].pid != p->pid || t <= TG_TRACK_STAGE0) continue;
        for (int j = 0; j < i && fresh; j++) fresh = !(ev[j].pid == p->pid && ev[j].track == t);
        if (fresh) put_meta(f, first, "thread_name", p->pid, t, tg_trace_track_name(t, buf, sizeof buf));
    }
}

tg_status tg_trace_write_chrome(const char *path, const struct tg_trace_proc *procs, int nprocs,
                                const struct tg_trace_event *ev, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) return tg_error(TG_EIO, "trace: cannot write %s: %s", path, strerror(errno));
    fputs("{\"traceEvents\":[\n", f);
    int first = 1;
    for (int i = 0; i < nprocs; i++) put_names(f, &first, &procs[i], ev, n);
    for (int i = 0; i < n; i++) {
        const struct tg_trace_event *e = &ev[i];
        next(f, &first);
        if (e->async) {
            /* nestable async pair: Perfetto draws it on its own track, overlaps allowed */
            put_head(f, e, "b", e->ts);
            fprintf(f, ",\"id\":\"0x%x\"", i + 1);
            put_args(f, e);
            fputs("},\n", f);
            put_head(f, e, "e", e->ts + e->dur);
            fprintf(f, ",\"id\":\"0x%x\"}", i + 1);
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

/* ------------------------------------------------------------------ summary */
struct ival {
    double b, e;
};

static int ival_cmp(const void *x, const void *y)
{
    const struct ival *a = x, *b = y;
    return a->b < b->b ? -1 : a->b > b->b;
}

/* Sorts v and merges it into disjoint intervals in place; returns their number. */
static int merge(struct ival *v, int n)
{
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, ival_cmp);
    int m = 0;
    for (int i = 1; i < n; i++) {
        if (v[i].b <= v[m].e) {
            if (v[i].e > v[m].e) v[m].e = v[i].e;
        } else {
            v[++m] = v[i];
        }
    }
    return m + 1;
}

static double total(const struct ival *v, int n)
{
    double t = 0;
    for (int i = 0; i < n; i++) t += v[i].e - v[i].b;
    return t;
}

/* Length of the intersection of two sets of disjoint sorted intervals. */
static double intersect(const struct ival *a, int na, const struct ival *b, int nb)
{
    double t = 0;
    int i = 0, j = 0;
    while (i < na && j < nb) {
        double lo = a[i].b > b[j].b ? a[i].b : b[j].b, hi = a[i].e < b[j].e ? a[i].e : b[j].e;
        if (hi > lo) t += hi - lo;
        if (a[i].e < b[j].e) i++;
        else j++;
    }
    return t;
}

tg_status tg_trace_summarize(const struct tg_trace_event *ev, int n, tg_trace_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    sum->nspans = n;
    struct ival *comm = malloc(sizeof *comm * (size_t)(n ? n : 1)), *comp = malloc(sizeof *comp * (size_t)(n ? n : 1));
    int ncomm = 0, ncomp = 0;
    tg_status st = comm && comp ? TG_OK : tg_error(TG_ENOMEM, "out of host memory");
    if (st == TG_OK) {
        for (int i = 0; i < n; i++) {
            if (ev[i].track == TG_TRACK_COMM) comm[ncomm++] = (struct ival){ev[i].ts, ev[i].ts + ev[i].dur};
            else if (ev[i].track == TG_TRACK_COMPUTE) comp[ncomp++] = (struct ival){ev[i].ts, ev[i].ts + ev[i].dur};
        }
        ncomm = merge(comm, ncomm);
        ncomp = merge(comp, ncomp);
        sum->comm_busy_ms = total(comm, ncomm) * 1e-3;
        sum->compute_ms = total(comp, ncomp) * 1e-3;
        sum->overlapped_ms = intersect(comm, ncomm, comp, ncomp) * 1e-3;
        if (sum->overlapped_ms > sum->comm_busy_ms) sum->overlapped_ms = sum->comm_busy_ms; /* rounding */
        sum->exposed_ms = sum->comm_busy_ms - sum->overlapped_ms;
        sum->exposed_pct = sum->comm_busy_ms > 0 ? 100.0 * sum->exposed_ms / sum->comm_busy_ms : 0;
    }
    free(comm);
    free(comp);
    return st;
}

const char *tg_trace_summary_line(const tg_trace_summary *s, char *buf, size_t n)
{
    if (!buf) return "";
    if (!s) {
        snprintf(buf, n, "trace: no summary");
        return buf;
    }
    snprintf(buf, n, "trace: %d spans; compute %.3f ms busy; comm %.3f ms busy, %.3f ms overlapped by compute, "
             "%.3f ms exposed (%.1f%%)", s->nspans, s->compute_ms, s->comm_busy_ms, s->overlapped_ms, s->exposed_ms,
             s->exposed_pct);
    return buf;
}
