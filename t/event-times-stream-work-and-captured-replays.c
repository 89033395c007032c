/* event-times-stream-work-and-captured-replays.c — CPU events: elapsed times are ordered and non-negative, an event recorded in a captured graph takes its time at each replay, misuse is named; trace spans in a CPU capture are timed at replay. */
#include <tegraph.h>

#include "tap.h"

#include <string.h>
#include <time.h>

static const tg_device cpu = {TG_CPU, 0};

static tg_event *event(int timing)
{
    tg_event *e = NULL;
    if (tg_event_new(cpu, timing, &e) != TG_OK) bail_out("event: %s", tg_last_error());
    return e;
}

static void record(tg_event *e, tg_stream *s)
{
    if (tg_event_record(e, s) != TG_OK) bail_out("record: %s", tg_last_error());
}

static double elapsed(tg_event *a, tg_event *b)
{
    double ms = -1e9;
    if (tg_event_elapsed(a, b, &ms) != TG_OK) bail_out("elapsed: %s", tg_last_error());
    return ms;
}

/* Sleeps 2 ms: the monotonic clock then advances by at least that much. */
static void pause2ms(void)
{
    struct timespec ts = {0, 2 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {}
}

int main(void)
{
    plan(NO_PLAN);
    tg_stream *s = NULL;
    if (tg_stream_new(cpu, "events", &s) != TG_OK) bail_out("stream: %s", tg_last_error());

    /* eager: records are timestamps in issue order */
    tg_event *a = event(1), *b = event(1), *c = event(1);
    record(a, s);
    pause2ms();
    record(b, s);
    record(c, s);
    double ab = elapsed(a, b), ac = elapsed(a, c), bc = elapsed(b, c);
    ok(ab >= 2.0, "elapsed a->b covers the 2 ms between the records (%.3f ms)", ab);
    ok(bc >= 0 && ac >= ab, "later records have later times (b->c %.3f ms, a->c %.3f >= a->b %.3f)", bc, ac, ab);
    is_near(elapsed(b, a), -ab, 1e-9, "elapsed is antisymmetric");
    int done = 0;
    ok(tg_event_query(a, &done) == TG_OK && done, "a recorded CPU event is complete");
    ok(tg_event_sync(b) == TG_OK, "sync on a CPU event returns");
    ok(tg_stream_wait_event(s, c) == TG_OK, "a stream can wait on an event");

    /* capture: the record is a command that runs at each replay */
    tg_event *in_graph = event(1), *before = event(1), *between = event(1);
    tg_graph *g = NULL;
    if (tg_stream_begin_capture(s) != TG_OK) bail_out("capture: %s", tg_last_error());
    record(in_graph, s);
    if (tg_stream_end_capture(s, &g) != TG_OK) bail_out("end capture: %s", tg_last_error());
    is_int((long long)tg_graph_size(g), 1, "the record is one captured command");
    double ms;
    tg_status st = tg_event_elapsed(a, in_graph, &ms);
    ok(st == TG_ESTATE, "elapsed to an event whose graph never replayed fails (TG_ESTATE)");
    like(tg_last_error(), "never recorded", "  and says the event was never recorded");
    pause2ms();
    record(before, s);
    if (tg_graph_replay(g, s) != TG_OK) bail_out("replay: %s", tg_last_error());
    record(between, s);
    double t1 = elapsed(before, in_graph);
    ok(t1 >= 0 && elapsed(in_graph, between) >= 0, "the captured record timestamps at replay (%.3f ms after the record before it)", t1);
    ok(elapsed(a, in_graph) >= ab + 2.0, "  not at capture time");
    pause2ms();
    if (tg_graph_replay(g, s) != TG_OK) bail_out("replay: %s", tg_last_error());
    ok(elapsed(between, in_graph) >= 2.0, "a second replay moves the captured event's time to that replay");

    /* misuse is named */
    tg_event *plain = event(0);
    record(plain, s);
    st = tg_event_elapsed(a, plain, &ms);
    ok(st == TG_ESTATE, "elapsed with an event made without timing fails (TG_ESTATE)");
    like(tg_last_error(), "end event was made without timing", "  and names the end event");
    ok(tg_event_record(a, NULL) == TG_EINVAL, "record on no stream is refused (TG_EINVAL)");

    /* trace spans: off costs nothing and records nothing */
    ok(!tg_trace_active() && tg_trace_span_begin(s, "compute", "off", NULL) < 0, "no span is recorded while no trace runs");
    tg_trace_summary sum;
    ok(tg_trace_end(NULL, &sum) == TG_ESTATE, "ending a trace that never began fails (TG_ESTATE)");
    ok(tg_trace_begin() == TG_OK, "a trace begins");
    ok(tg_trace_begin() == TG_ESTATE, "a second begin while it runs fails (TG_ESTATE)");
    /* a span in a CPU capture is timed by the graph's replay; one never replayed is dropped */
    tg_graph *g2 = NULL, *g3 = NULL;
    tg_stream_begin_capture(s);
    int id = tg_trace_span_begin(s, "compute", "captured span", "\"mb\":1");
    tg_trace_span_end(id, s);
    tg_stream_end_capture(s, &g2);
    tg_stream_begin_capture(s);
    tg_trace_span_end(tg_trace_span_begin(s, "compute", "never replayed", NULL), s);
    tg_stream_end_capture(s, &g3);
    ok(id >= 0, "a span is recorded while the CPU stream captures");
    tg_graph_replay(g2, s);
    int h = tg_trace_span_begin(NULL, "host", "host span", NULL);
    tg_trace_span_end(h, NULL);
    ok(tg_trace_end(NULL, &sum) == TG_OK, "the trace ends");
    is_int(sum.nspans, 2, "the replayed captured span and the host span are kept, the unreplayed one is dropped");
    ok(sum.compute_ms >= 0 && sum.comm_busy_ms == 0 && sum.exposed_pct == 0, "no comm: nothing busy or exposed");
    ok(!tg_trace_active(), "no trace runs after the end");
    tg_graph_replay(g2, s); /* the graph still writes its (kept) events after the trace ended */
    ok(1, "replaying a traced graph after the trace ended is safe");

    tg_graph_free(g);
    tg_graph_free(g2);
    tg_graph_free(g3);
    tg_event_free(a);
    tg_event_free(b);
    tg_event_free(c);
    tg_event_free(in_graph);
    tg_event_free(before);
    tg_event_free(between);
    tg_event_free(plain);
    tg_stream_free(s);
    return done_testing();
}
