/* cuda-events-and-trace-time-device-work.c — CUDA events time device work and order a second stream after it; trace spans are timed on their streams and skipped during capture. */
#include <tegraph.h>

#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tg_device gpu = {TG_CUDA, 0};
#define N 2048 /* (N, N) f32 GEMMs: enough work to take measurable device time */

static tg_tensor *square(void)
{
    int64_t shape[2] = {N, N};
    tg_tensor *t = NULL;
    if (tg_tensor_new(TG_F32, 2, shape, gpu, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    return t;
}

static tg_event *event(int timing)
{
    tg_event *e = NULL;
    if (tg_event_new(gpu, timing, &e) != TG_OK) bail_out("event: %s", tg_last_error());
    return e;
}

#define CHECK(x)                                                                                       \
    do {                                                                                               \
        if ((x) != TG_OK) bail_out("%s: %s", #x, tg_last_error());                                    \
    } while (0)

int main(void)
{
    if (tg_device_count(TG_CUDA) == 0) skip_all("no CUDA device");
    plan(NO_PLAN);
    tg_stream *work = NULL, *other = NULL;
    CHECK(tg_stream_new(gpu, "work", &work));
    CHECK(tg_stream_new(gpu, "other", &other));
    tg_stream *prev = tg_stream_set_current(work);
    tg_tensor *a = square(), *b = square(), *c = square();
    CHECK(tg_fill(a, 0.001));
    CHECK(tg_fill(b, 0.001));

    /* timing */
    tg_event *e0 = event(1), *e1 = event(1);
    CHECK(tg_event_record(e0, work));
    for (int i = 0; i < 8; i++) CHECK(tg_gemm(c, a, 0, b, 0, 1.0, 0.0));
    CHECK(tg_event_record(e1, work));
    CHECK(tg_event_sync(e1));
    int done = 0;
    CHECK(tg_event_query(e1, &done));
    ok(done, "a synchronised event is complete");
    double ms = 0;
    CHECK(tg_event_elapsed(e0, e1, &ms));
    ok(ms > 0, "eight %dx%d GEMMs take device time between the events (%.3f ms)", N, N, ms);
    /* as on the CPU backend: an event never recorded is a state error that says so */
    tg_event *never = event(1);
    ok(tg_event_elapsed(never, e1, &ms) == TG_ESTATE && strstr(tg_last_error(), "the start event was never recorded"),
       "elapsed from an event never recorded fails with TG_ESTATE, saying so: %s", tg_last_error());
    tg_event_free(never);

    /* ordering: `other` copies c only after the GEMMs and the fill after them on `work` */
    tg_event *ready = event(0);
    tg_tensor *out = square();
    for (int i = 0; i < 8; i++) CHECK(tg_gemm(c, a, 0, b, 0, 1.0, 0.0));
    CHECK(tg_fill(c, 2.0));
    CHECK(tg_event_record(ready, work));
    CHECK(tg_stream_wait_event(other, ready));
    tg_stream_set_current(other);
    CHECK(tg_copy(out, c));
    CHECK(tg_stream_sync(other));
    double mx = 0;
    CHECK(tg_max_abs(out, &mx));
    is_near(mx, 2.0, 0, "the waiting stream sees the value written before the event");
    tg_stream_set_current(work);

    /* trace: a compute span on `work` and a comm span on `other`, overlapping */
    CHECK(tg_trace_begin());
    tg_event *go = event(0);
    CHECK(tg_event_record(go, work));
    CHECK(tg_stream_wait_event(other, go));
    int s1 = tg_trace_span_begin(work, "compute", "gemms", "\"n\":2048");
    int s2 = tg_trace_span_begin(other, "comm", "side work", NULL);
    for (int i = 0; i < 8; i++) CHECK(tg_gemm(c, a, 0, b, 0, 1.0, 0.0));
    tg_stream_set_current(other);
    CHECK(tg_gemm(out, a, 0, b, 0, 1.0, 0.0));
    tg_stream_set_current(work);
    tg_trace_span_end(s2, other);
    tg_trace_span_end(s1, work);
    /* nothing is recorded while the CUDA stream captures */
    tg_graph *g = NULL;
    CHECK(tg_stream_begin_capture(work));
    int s3 = tg_trace_span_begin(work, "compute", "captured", NULL);
    CHECK(tg_gemm(c, a, 0, b, 0, 1.0, 0.0));
    tg_trace_span_end(s3, work);
    CHECK(tg_stream_end_capture(work, &g));
    ok(s1 >= 0 && s2 >= 0 && s3 < 0, "spans record on streams, not while capturing on CUDA");
    CHECK(tg_graph_replay(g, work));
    tg_trace_summary sum;
    CHECK(tg_trace_end("cuda-events-trace.json", &sum));
    is_int(sum.nspans, 2, "two spans in the trace");
    ok(sum.compute_ms > 0 && sum.comm_busy_ms > 0, "both spans took device time (compute %.3f ms, comm %.3f ms)",
       sum.compute_ms, sum.comm_busy_ms);
    ok(sum.overlapped_ms >= 0 && sum.overlapped_ms <= sum.comm_busy_ms + 1e-9 &&
           fabs(sum.exposed_ms + sum.overlapped_ms - sum.comm_busy_ms) < 1e-9,
       "overlapped <= comm busy, exposed = busy - overlapped (%.3f of %.3f ms overlapped)", sum.overlapped_ms,
       sum.comm_busy_ms);
    remove("cuda-events-trace.json");

    tg_graph_free(g);
    tg_event_free(go);
    tg_event_free(ready);
    tg_event_free(e0);
    tg_event_free(e1);
    tg_tensor_free(a);
    tg_tensor_free(b);
    tg_tensor_free(c);
    tg_tensor_free(out);
    tg_stream_set_current(prev);
    tg_stream_free(work);
    tg_stream_free(other);
    return done_testing();
}
