/* trace.h — the trace recorder: spans timed on streams or the host clock, read back or written as Chrome trace JSON (internal; tg_trace_* in tegraph.h is its public API). */
#ifndef TG_TRACE_H
#define TG_TRACE_H

#include "core/core.h"

/* Whether a trace runs: the one test instrumented code makes when tracing is off. */
extern int tg_trace_on;

/* Tracks (Chrome thread ids within a process): device work, communication,
 * host work; stage s of the schedule executor on TG_TRACK_STAGE(s). */
enum { TG_TRACK_COMPUTE = 1, TG_TRACK_COMM = 2, TG_TRACK_HOST = 3, TG_TRACK_STAGE0 = 10 };
#define TG_TRACK_STAGE(s) (TG_TRACK_STAGE0 + (s))

/* What a span is about. Zero / NULL fields are left out of its Chrome args. */
struct tg_trace_about {
    const char *cat;  /* category, a string constant: "compute", "comm", "hook", "action", "transfer"; NULL: the track's name */
    const char *op;   /* "F", "B+W", "all_reduce", ... (copied) */
    int stage, chunk, mb, index;
    int64_t step;
    const char *args; /* further JSON object members ("\"module\":\"fc1\""), or NULL (copied) */
    int async;        /* drawn as a Chrome async span, which may overlap others (transfers) */
};

/* Opens a span of work issued on s from now (s NULL: host time) on track;
 * returns its id (>= 0), or -1 when nothing is recorded (no trace runs, s
 * captures on CUDA, out of memory). a may be NULL. */
int tg_trace_open(tg_stream *s, int track, const char *name, const struct tg_trace_about *a);
/* Closes span id (ignored when id < 0, or from an earlier trace) on the
 * stream it was opened on (or NULL for a host span). */
void tg_trace_close(int id, tg_stream *s);
/* Forgets open span id: it is never written (an action that did not run). */
void tg_trace_drop(int id);

/* The schedule executor's context: spans opened meanwhile belong to process
 * pid (< 0: the rank), and host spans (hook dispatches) of stage s > 0 go to
 * its track, carrying its number. */
void tg_trace_set_pid(int pid);
void tg_trace_set_stage(int stage);
/* Names process pid in the written trace (default "rank <pid>"). */
tg_status tg_trace_name_process(int pid, const char *name);

/* A span read back; times in microseconds since the trace began. */
struct tg_trace_event {
    const char *name, *cat, *op, *args; /* op and args NULL when not given */
    int async;
    int pid, track;
    int stage, chunk, mb, index;
    int64_t step;
    double ts, dur;
};
/* The spans recorded so far that were closed and whose times are known (a
 * span captured in a graph that never replayed has none), in the order they
 * were opened; synchronises the devices. *out is malloc'ed (NULL when n is
 * 0); its strings belong to the trace and live until it ends. */
tg_status tg_trace_events(struct tg_trace_event **out, int *n);
/* "compute", "comm", "host", "stage 2". */
const char *tg_trace_track_name(int track, char *buf, size_t n);

/* The one Chrome trace JSON writer: {"traceEvents":[...]} with process
 * names (procs: pid and name, each pid once), track names (compute, comm and
 * host of every process, and the stage tracks its spans use), then ev. TG_EIO
 * naming the path when it cannot be written. */
struct tg_trace_proc {
    int pid;
    const char *name;
};
tg_status tg_trace_write_chrome(const char *path, const struct tg_trace_proc *procs, int nprocs,
                                const struct tg_trace_event *ev, int n);
/* The summary of ev: the union of compute and comm spans, and their overlap. */
tg_status tg_trace_summarize(const struct tg_trace_event *ev, int n, tg_trace_summary *sum);

#endif
