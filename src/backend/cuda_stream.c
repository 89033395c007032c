/* cuda_stream.c — CUDA streams: copies, stream capture into graphs and their replay, events. */
#include "backend/cuda_impl.h"

#include <stdlib.h>

/* ------------------------------------------------------------------ copies, streams, graphs */

tg_status tg_cuda_memcpy(tg_stream *s, void *dst, const void *src, size_t bytes, tg_memcpy_kind kind)
{
    static const enum cudaMemcpyKind kinds[] = {
        [TG_H2D] = cudaMemcpyHostToDevice, [TG_D2H] = cudaMemcpyDeviceToHost, [TG_D2D] = cudaMemcpyDeviceToDevice};
    if (bytes == 0) return TG_OK;
    cudaStream_t st = tg_cuda_stream(s);
    TG_TRY(tg_cuda_use_device(s->dev.index));
    TG_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kinds[kind], st));
    if (kind != TG_D2D) TG_CUDA_TRY(cudaStreamSynchronize(st)); /* the host buffer is the caller's again */
    return TG_OK;
}

tg_status tg_cuda_stream_init(tg_stream *s)
{
    cudaStream_t st;
    TG_TRY(tg_cuda_use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    s->impl = st;
    tg_cuda_scratch_attach(s->dev.index, st);
    return TG_OK;
}

void tg_cuda_stream_destroy(tg_stream *s)
{
    cudaStream_t st = tg_cuda_stream(s);
    if (!st) return;
    (void)cudaSetDevice(s->dev.index);
    (void)cudaStreamSynchronize(st);
    (void)cudaStreamDestroy(st);
    (void)cudaGetLastError();
    tg_cuda_scratch_detach(s->dev.index, st);
    s->impl = NULL;
}

tg_status tg_cuda_stream_sync(tg_stream *s)
{
    TG_TRY(tg_cuda_use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamSynchronize(tg_cuda_stream(s)));
    return TG_OK;
}

/* Relaxed mode: the pools' block allocations (cudaMalloc through tg_cuda_alloc)
 * and the lazy scratch buffers stay legal while this thread captures; in the
 * global or thread-local modes cudaMalloc counts as "potentially unsafe" and
 * may invalidate the capture. Host transfers and syncs are refused by the
 * core (TG_ECAPTURE) before they reach CUDA. */
tg_status tg_cuda_capture_begin(tg_stream *s)
{
    TG_TRY(tg_cuda_use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamBeginCapture(tg_cuda_stream(s), cudaStreamCaptureModeRelaxed));
    return TG_OK;
}

tg_status tg_cuda_capture_end(tg_stream *s, tg_graph *g)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    size_t nodes = 0;
    TG_TRY(tg_cuda_use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamEndCapture(tg_cuda_stream(s), &graph));
    cudaError_t e = cudaGraphGetNodes(graph, NULL, &nodes);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph); /* the executable graph is independent of it */
    if (e != cudaSuccess) return tg_cuda_fail(e, __FILE__, __LINE__, "cudaGraphInstantiate(&exec, graph, 0)");
    struct tg_cuda_graph *cg = malloc(sizeof *cg);
    TG_ASSERT(cg);
    cg->exec = exec;
    TG_TRY(tg_cuda_scratch_of(s, &cg->scratch));
    tg_cuda_scratch_retain(cg->scratch);
    g->impl = cg;
    g->ncmds = nodes;
    return TG_OK;
}

tg_status tg_cuda_graph_replay(tg_graph *g, tg_stream *s)
{
    struct tg_cuda_graph *cg = g->impl;
    if (!cg) return tg_error(TG_ESTATE, "cuda graph replay: the graph holds no captured work");
    TG_TRY(tg_cuda_use_device(s->dev.index));
    TG_CUDA_TRY(cudaGraphLaunch(cg->exec, tg_cuda_stream(s)));
    return TG_OK;
}

void tg_cuda_graph_destroy(tg_graph *g)
{
    struct tg_cuda_graph *cg = g->impl;
    if (!cg) return;
    (void)cudaSetDevice(g->dev.index);
    (void)cudaGraphExecDestroy(cg->exec);
    tg_cuda_scratch_release(cg->scratch);
    free(cg);
    g->impl = NULL;
}

/* ------------------------------------------------------------------ events */

tg_status tg_cuda_event_init(tg_event *e)
{
    cudaEvent_t ev;
    TG_TRY(tg_cuda_use_device(e->dev.index));
    /* timing costs a timestamp write per record: only where elapsed is wanted */
    TG_CUDA_TRY(cudaEventCreateWithFlags(&ev, e->timing ? cudaEventDefault : cudaEventDisableTiming));
    e->impl = ev;
    return TG_OK;
}

void tg_cuda_event_destroy(tg_event *e)
{
    if (!e->impl) return;
    (void)cudaSetDevice(e->dev.index);
    (void)cudaEventDestroy((cudaEvent_t)e->impl);
    (void)cudaGetLastError();
    e->impl = NULL;
}

tg_status tg_cuda_event_record(tg_event *e, tg_stream *s)
{
    TG_TRY(tg_cuda_use_device(s->dev.index));
    TG_CUDA_TRY(cudaEventRecord((cudaEvent_t)e->impl, tg_cuda_stream(s)));
    e->recorded = 1;
    return TG_OK;
}

tg_status tg_cuda_stream_wait_event(tg_stream *s, tg_event *e)
{
    TG_TRY(tg_cuda_use_device(s->dev.index));
    TG_CUDA_TRY(cudaStreamWaitEvent(tg_cuda_stream(s), (cudaEvent_t)e->impl, 0));
    return TG_OK;
}

tg_status tg_cuda_event_query(tg_event *e, int *done)
{
    cudaError_t r = cudaEventQuery((cudaEvent_t)e->impl);
    *done = r == cudaSuccess;
    if (r == cudaSuccess || r == cudaErrorNotReady) return TG_OK;
    return tg_cuda_fail(r, __FILE__, __LINE__, "cudaEventQuery");
}

tg_status tg_cuda_event_sync(tg_event *e)
{
    TG_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)e->impl));
    return TG_OK;
}

tg_status tg_cuda_event_elapsed(tg_event *a, tg_event *b, double *ms)
{
    float f = 0;
    TG_TRY(tg_cuda_use_device(a->dev.index));
    /* never recorded: said without asking CUDA (whose error a sanitizer would report as an API error) */
    if (!a->recorded || !b->recorded)
        return tg_error(TG_ESTATE, "event elapsed time: the %s event was never recorded (or its graph never replayed)",
                        !a->recorded ? "start" : "end");
    cudaError_t e = cudaEventElapsedTime(&f, (cudaEvent_t)a->impl, (cudaEvent_t)b->impl);
    /* the CPU backend's errors for the same misuse (not a device fault) */
    if (e == cudaErrorInvalidResourceHandle) {
        (void)cudaGetLastError();
        return tg_error(TG_ESTATE, "event elapsed time: an event was never recorded (or its graph never replayed)");
    }
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return tg_error(TG_ESTATE, "event elapsed time: an event has not completed yet (sync it first)");
    }
    TG_CUDA_TRY(e);
    *ms = f;
    return TG_OK;
}
