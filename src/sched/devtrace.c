/* devtrace.c — ends a device-timeline trace: span times to Chrome trace JSON, and how much comm overlapped compute. */
#include "core/span.h"
#include "sched/trace.h"

#include <string.h>

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

const char *tg_trace_summary_line(const tg_trace_summary *s, char *buf, size_t n)
{
    snprintf(buf, n, "trace: %d spans; compute %.3f ms busy; comm %.3f ms busy, %.3f ms overlapped by compute, "
             "%.3f ms exposed (%.1f%%)", s->nspans, s->compute_ms, s->comm_busy_ms, s->overlapped_ms, s->exposed_ms,
             s->exposed_pct);
    return buf;
}

tg_status tg_trace_end(const char *path, tg_trace_summary *sum)
{
    if (!tg_span_on) return tg_error(TG_ESTATE, "trace end: no trace is running (begin one first)");
    tg_span_stop();
    tg_status st = tg_span_sync();
    int n = tg_span_count(), ncomm = 0, ncomp = 0, kept = 0;
    int rank = tg_launch_env(TG_ENV_RANK, 0);
    tg_trace *t = NULL;
    struct ival *comm = malloc(sizeof *comm * (size_t)(n ? n : 1)), *comp = malloc(sizeof *comp * (size_t)(n ? n : 1));
    if (st == TG_OK && (!comm || !comp)) st = tg_error(TG_ENOMEM, "out of host memory");
    if (st == TG_OK) st = tg_trace_new(&t);
    if (st == TG_OK) {
        char pname[32];
        snprintf(pname, sizeof pname, "rank %d", rank);
        st = tg_trace_name_track(t, rank, -1, pname);
        for (int k = 1; k < 4 && st == TG_OK; k++) st = tg_trace_name_track(t, rank, k, tg_track_names[k]);
    }
    for (int i = 0; i < n && st == TG_OK; i++) {
        const struct tg_span *sp = tg_span_at(i);
        double b, e;
        if (tg_span_times(sp, &b, &e) != TG_OK) continue; /* never ended, or captured and not replayed */
        if (e < b) e = b;
        struct tg_trace_event ev = {.ph = 'X', .name = sp->name, .cat = (char *)tg_track_names[sp->track],
                                    .pid = rank, .tid = sp->track, .ts = b, .dur = e - b, .args = sp->args};
        st = tg_trace_add(t, &ev);
        kept++;
        if (sp->track == TG_TRACK_COMM) comm[ncomm++] = (struct ival){b, e};
        else if (sp->track == TG_TRACK_COMPUTE) comp[ncomp++] = (struct ival){b, e};
    }
    if (st == TG_OK && path) st = tg_trace_write(t, path);
    if (st == TG_OK && sum) {
        memset(sum, 0, sizeof *sum);
        ncomm = merge(comm, ncomm);
        ncomp = merge(comp, ncomp);
        sum->nspans = kept;
        sum->comm_busy_ms = total(comm, ncomm) * 1e-3;
        sum->compute_ms = total(comp, ncomp) * 1e-3;
        sum->overlapped_ms = intersect(comm, ncomm, comp, ncomp) * 1e-3;
        if (sum->overlapped_ms > sum->comm_busy_ms) sum->overlapped_ms = sum->comm_busy_ms; /* rounding */
        sum->exposed_ms = sum->comm_busy_ms - sum->overlapped_ms;
        sum->exposed_pct = sum->comm_busy_ms > 0 ? 100.0 * sum->exposed_ms / sum->comm_busy_ms : 0;
    }
    tg_trace_free(t);
    free(comm);
    free(comp);
    tg_span_reset();
    return st;
}
