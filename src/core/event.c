/* event.c — events: mark a point of a stream's work, order streams after it, time the work between two. */
#include "backend/backend.h"

tg_status tg_event_new(tg_device dev, int timing, tg_event **out)
{
    char d[32];
    TG_NONNULL(out, "out");
    *out = NULL;
    if (!tg_device_valid(dev)) return tg_error(TG_EINVAL, "event: no such device %s", tg_device_str(dev, d, sizeof d));
    tg_event *e = calloc(1, sizeof *e);
    if (!e) return tg_error(TG_ENOMEM, "out of host memory");
    e->dev = dev;
    e->be = tg_backend_for(dev);
    e->timing = timing != 0;
    e->refcount = 1;
    tg_status st = e->be->event_init(e);
    if (st != TG_OK) {
        free(e);
        return st;
    }
    *out = e;
    return TG_OK;
}

void tg_event_free(tg_event *e)
{
    if (!e || --e->refcount > 0) return; /* a graph that captured a record of it or a wait for it keeps it */
    e->be->event_destroy(e);
    free(e);
}

static int same_device(tg_device a, tg_device b) { return a.type == b.type && a.index == b.index; }

static tg_status check_stream(const char *what, const tg_event *e, const tg_stream *s)
{
    char d1[32], d2[32];
    if (!s) return tg_error(TG_EINVAL, "%s: no stream", what);
    if (!e) return tg_error(TG_EINVAL, "%s: no event", what);
    if (!same_device(e->dev, s->dev))
        return tg_error(TG_EINVAL, "%s: the event is on %s but stream '%s' is on %s", what,
                        tg_device_str(e->dev, d1, sizeof d1), s->name, tg_device_str(s->dev, d2, sizeof d2));
    return TG_OK;
}

tg_status tg_event_record(tg_event *e, tg_stream *s)
{
    TG_TRY(check_stream("event record", e, s));
    if (s->capture) TG_TRY(tg_stream_note_error(s, tg_graph_hold_event(s->capture, e)));
    return tg_stream_note_error(s, e->be->event_record(e, s));
}

tg_status tg_stream_wait_event(tg_stream *s, tg_event *e)
{
    TG_TRY(check_stream("stream wait event", e, s));
    if (s->capture) TG_TRY(tg_stream_note_error(s, tg_graph_hold_event(s->capture, e)));
    return tg_stream_note_error(s, e->be->stream_wait_event(s, e));
}

tg_status tg_event_query(tg_event *e, int *done)
{
    TG_NONNULL(e, "the event");
    TG_NONNULL(done, "done");
    return e->be->event_query(e, done);
}

tg_status tg_event_sync(tg_event *e)
{
    char d[32];
    TG_NONNULL(e, "the event");
    if (tg_device_capturing(e->dev))
        return tg_error(TG_ECAPTURE, "event sync: not allowed while %s captures (stream '%s')",
                        tg_device_str(e->dev, d, sizeof d), tg_device_capturer_name(e->dev));
    return e->be->event_sync(e);
}

tg_status tg_event_elapsed(tg_event *start, tg_event *end, double *ms)
{
    char d1[32], d2[32];
    TG_NONNULL(ms, "ms");
    *ms = 0;
    TG_NONNULL(start, "start");
    TG_NONNULL(end, "end");
    if (!same_device(start->dev, end->dev))
        return tg_error(TG_EINVAL, "event elapsed time: the start event is on %s, the end event on %s",
                        tg_device_str(start->dev, d1, sizeof d1), tg_device_str(end->dev, d2, sizeof d2));
    if (!start->timing || !end->timing)
        return tg_error(TG_ESTATE, "event elapsed time: the %s event was made without timing (tg_event_new timing=0)",
                        !start->timing ? "start" : "end");
    return start->be->event_elapsed(start, end, ms);
}
