/* trace.h — a recorder of timed host events (actions, hook dispatches, transfers) written as Chrome trace JSON for Perfetto. */
#ifndef TG_TRACE_H
#define TG_TRACE_H

#include "core/core.h"

/* One event. Times are host microseconds since the trace was created.
 * ph 'X': a complete event [ts, ts + dur] on track (pid, tid);
 * ph 'A': an async span (written as a "b"/"e" pair sharing id) — transfers,
 *         which overlap each other and the actions of both stages;
 * ph 'M': a track name (thread_name metadata, or process_name when tid < 0). */
struct tg_trace_event {
    char ph;
    char *name;   /* "F chunk 2 mb 1", "hook h.0.fc.weight", "fwd chunk 1 mb 3" */
    char *cat;    /* "action", "hook", "transfer", or the caller's */
    int pid, tid; /* process (rank) and track (pipeline stage) */
    double ts, dur;
    uint64_t id;  /* 'A' events */
    /* What the event is about (0 when not applicable). Actions: op ("F",
     * "B", "W", "send_fwd"...), stage, chunk, mb and the 1-based index of
     * the action in its stage's list; hooks: chunk and mb of the wgrad. */
    char op[12];
    int stage, chunk, mb, index;
    char *args;   /* extra "args" members as JSON text ("\"noop\":true"), or NULL */
};

typedef struct tg_trace tg_trace;

tg_status tg_trace_new(tg_trace **out);
void tg_trace_free(tg_trace *t);
/* Host time now, in microseconds since t was created (monotonic clock). */
double tg_trace_now(const tg_trace *t);
/* Appends a copy of e (strings copied; NULL cat is "event"); for ph 'A' an
 * id of 0 gets the next free one. */
tg_status tg_trace_add(tg_trace *t, const struct tg_trace_event *e);
/* Names the track (pid, tid) once ("stage 2"); tid < 0 names the process
 * (pid) instead ("1F1B"). Later calls for the same track are ignored. */
tg_status tg_trace_name_track(tg_trace *t, int pid, int tid, const char *name);
int tg_trace_count(const tg_trace *t);
/* Event i (0-based) or NULL; valid until the next add or clear. */
const struct tg_trace_event *tg_trace_event(const tg_trace *t, int i);
/* Drops every event (keeps the time origin). */
void tg_trace_clear(tg_trace *t);
/* Writes {"traceEvents":[...],"displayTimeUnit":"ms"} to path (TG_EIO naming
 * the path on failure). */
tg_status tg_trace_write(const tg_trace *t, const char *path);

#endif
