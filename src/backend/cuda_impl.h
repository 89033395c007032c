/* cuda_impl.h — internals of the CUDA backend shared by its host files (cuda.c, cuda_alloc.c, cuda_stream.c,
 * cuda_gemm.c, cuda_fp8.c): checks, streams, memory and per-stream scratch. Only the backend includes it. */
#ifndef TG_CUDA_IMPL_H
#define TG_CUDA_IMPL_H

#include "backend/backend.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#define TG_CUDA_MAX_DEVICES 16
/* cuBLASLt workspace per stream (NVIDIA's recommendation for Hopper). */
#define TG_CUDA_GEMM_WORKSPACE ((size_t)32 << 20)
/* Scratch per stream for the transformer kernels' partial sums (norm and
 * bias wgrads, attention's dd rows, the embedding wgrad's sort). */
#define TG_CUDA_NN_SCRATCH ((size_t)32 << 20)

/* Turns a failed CUDA / cuBLAS call into TG_EDEVICE with "file:line: call:
 * error" (and clears CUDA's non-sticky last error). */
tg_status tg_cuda_fail(cudaError_t e, const char *file, int line, const char *expr);
tg_status tg_cublas_fail(cublasStatus_t e, const char *file, int line, const char *expr);

#define TG_CUDA_TRY(expr)                                                                              \
    do {                                                                                               \
        cudaError_t tg_cuda_e_ = (expr);                                                               \
        if (tg_cuda_e_ != cudaSuccess) return tg_cuda_fail(tg_cuda_e_, __FILE__, __LINE__, #expr);     \
    } while (0)
#define TG_CUBLAS_TRY(expr)                                                                            \
    do {                                                                                               \
        cublasStatus_t tg_cublas_e_ = (expr);                                                          \
        if (tg_cublas_e_ != CUBLAS_STATUS_SUCCESS)                                                     \
            return tg_cublas_fail(tg_cublas_e_, __FILE__, __LINE__, #expr);                            \
    } while (0)

/* Makes index the calling thread's current device. */
static inline tg_status tg_cuda_use_device(int index)
{
    TG_CUDA_TRY(cudaSetDevice(index));
    return TG_OK;
}

/* s->impl of a CUDA stream is its cudaStream_t (non-blocking). */
static inline cudaStream_t tg_cuda_stream(const tg_stream *s) { return (cudaStream_t)s->impl; }

/* Device memory that belongs to one CUDA stream: the cuBLASLt workspace and
 * the reduction partials. Work captured on the stream bakes these addresses
 * into its graph, so the graph holds a reference and the memory outlives the
 * stream until the last such graph is destroyed. Graphs captured on one
 * stream share its scratch: replay them in order (on one stream), not
 * concurrently. */
struct tg_cuda_scratch {
    cudaStream_t stream;
    int dev;
    int refs;              /* the stream + each graph captured on it */
    void *gemm_ws;         /* (TG_CUDA_GEMM_WORKSPACE bytes), lazily */
    double *reduce_parts;  /* (TGK_REDUCE_BLOCKS), lazily */
    void *nn_scratch;      /* (TG_CUDA_NN_SCRATCH bytes), lazily */
    struct tg_cuda_scratch *next;
};

/* g->impl of a CUDA graph. */
struct tg_cuda_graph {
    cudaGraphExec_t exec;
    struct tg_cuda_scratch *scratch; /* of the capturing stream (a reference) */
};

/* ------------------------------------------------------------------ memory (cuda_alloc.c) */
/* Reads the allocator's switch (TG_DEBUG_ALLOC_DIRECT); the device probe calls it once. */
void tg_cuda_alloc_init(void);
/* The vtable's alloc and free: a caching allocator per device. */
tg_status tg_cuda_alloc(int index, size_t bytes, void **out);
void tg_cuda_free(int index, void *ptr);
/* A new stream's scratch (its reference), and the stream's end (its reference dropped). */
void tg_cuda_scratch_attach(int index, cudaStream_t st);
void tg_cuda_scratch_detach(int index, cudaStream_t st);
/* A reference for each graph captured on the scratch's stream. */
void tg_cuda_scratch_retain(struct tg_cuda_scratch *x);
void tg_cuda_scratch_release(struct tg_cuda_scratch *x);
/* The scratch of s, created on first use (never NULL on TG_OK). */
tg_status tg_cuda_scratch_of(tg_stream *s, struct tg_cuda_scratch **out);
/* The buffers in it, allocated on first use. */
tg_status tg_cuda_gemm_workspace(tg_stream *s, void **ws, size_t *bytes);
tg_status tg_cuda_reduce_scratch(tg_stream *s, double **parts);
tg_status tg_cuda_nn_scratch(tg_stream *s, void **buf, size_t *bytes);

/* ------------------------------------------------------------------ streams, graphs, events (cuda_stream.c) */
/* The vtable's entries of the same names (backend.h). */
tg_status tg_cuda_memcpy(tg_stream *s, void *dst, const void *src, size_t bytes, tg_memcpy_kind kind);
tg_status tg_cuda_stream_init(tg_stream *s);
void tg_cuda_stream_destroy(tg_stream *s);
tg_status tg_cuda_stream_sync(tg_stream *s);
tg_status tg_cuda_capture_begin(tg_stream *s);
tg_status tg_cuda_capture_end(tg_stream *s, tg_graph *g);
tg_status tg_cuda_graph_replay(tg_graph *g, tg_stream *s);
void tg_cuda_graph_destroy(tg_graph *g);
tg_status tg_cuda_event_init(tg_event *e);
void tg_cuda_event_destroy(tg_event *e);
tg_status tg_cuda_event_record(tg_event *e, tg_stream *s);
tg_status tg_cuda_stream_wait_event(tg_stream *s, tg_event *e);
tg_status tg_cuda_event_query(tg_event *e, int *done);
tg_status tg_cuda_event_sync(tg_event *e);
tg_status tg_cuda_event_elapsed(tg_event *a, tg_event *b, double *ms);

/* ------------------------------------------------------------------ GEMM (cuda_gemm.c) */
/* cuBLASLt GEMM. */
tg_status tg_cuda_gemm(tg_stream *s, const struct tg_gemm_args *a);
/* The cuBLASLt handle of a device, created on first use. */
tg_status tg_cuda_lt_handle(int dev, cublasLtHandle_t *out);

/* ------------------------------------------------------------------ FP8 (cuda_fp8.c): the vtable's fp8_* entries */
tg_status tg_cuda_fp8_cast_op(tg_stream *s, const struct tg_fp8_cast_args *a);
tg_status tg_cuda_fp8_cast_gelu_op(tg_stream *s, const struct tg_fp8_cast_args *a);
tg_status tg_cuda_layernorm_forward_fp8_op(tg_stream *s, const struct tg_layernorm_fp8_args *a);
tg_status tg_cuda_fp8_dbias_op(tg_stream *s, const struct tg_fp8_dbias_args *a);
tg_status tg_cuda_fp8_transpose_op(tg_stream *s, const struct tg_fp8_transpose_args *a);
tg_status tg_cuda_fp8_dequantize_op(tg_stream *s, const struct tg_fp8_dequantize_args *a);
tg_status tg_cuda_fp8_amax_op(tg_stream *s, const struct tg_fp8_amax_args *a);
tg_status tg_cuda_fp8_gemm_op(tg_stream *s, const struct tg_fp8_gemm_args *a);

/* Caching allocator statistics of a device, for tests and `tegraph info`:
 * bytes handed out, bytes cached in free lists, and cudaMalloc calls made. */
void tg_cuda_alloc_stats(int dev, size_t *in_use, size_t *cached, uint64_t *mallocs);

#endif
