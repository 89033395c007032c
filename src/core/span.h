/* span.h — the span recorder of the device-timeline trace (internal; tg_trace_* in tegraph.h is its API). */
#ifndef TG_SPAN_H
#define TG_SPAN_H

#include "core/core.h"

/* Whether a trace runs: the one test instrumented code makes when tracing is off. */
extern int tg_span_on;

enum { TG_TRACK_COMPUTE = 1, TG_TRACK_COMM = 2, TG_TRACK_HOST = 3 };
extern const char *const tg_track_names[4]; /* [track]: "compute", "comm", "host" */

struct tg_span {
    char *name;
    char *args;       /* JSON object members, or NULL */
    int track;
    tg_device dev;
    tg_event *b, *e;  /* on a stream; NULL for host spans */
    double hb, he;    /* host spans: microseconds since the trace began */
    int ended;
};

/* Records a span (id >= 0), or nothing (-1) when no trace runs or s is a
 * capturing CUDA stream (no timing inside CUDA graphs). s NULL: host time. */
int tg_span_begin(tg_stream *s, int track, const char *name, const char *args);
void tg_span_end(int id, tg_stream *s);

/* For the writer (src/sched/devtrace.c): stops recording; then the spans,
 * their times in microseconds since the trace began (TG_ESTATE for a span
 * whose events never ran, e.g. captured and not replayed), and the reset. */
void tg_span_stop(void);
int tg_span_count(void);
const struct tg_span *tg_span_at(int i);
tg_status tg_span_sync(void);
tg_status tg_span_times(const struct tg_span *sp, double *b_us, double *e_us);
void tg_span_reset(void);

#endif
