/* tegraph.h — public C API of libtegraph: runtime (Lua host), tensors, streams, graphs. */
#ifndef TEGRAPH_H
#define TEGRAPH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(TG_STATIC)
#define TG_API __attribute__((visibility("default")))
#else
#define TG_API
#endif

struct lua_State;

/* ------------------------------------------------------------------ status
 * Every fallible call returns a tg_status. TG_OK is 0; on failure a message
 * naming the problem is kept per thread and read with tg_last_error(). A NULL
 * handle or output pointer is refused with TG_EINVAL naming it; accessors
 * given NULL answer as for an empty object (0, NULL or ""). Freeing a handle
 * twice, or using one after it was freed, is the caller's error and is not
 * detected.
 *
 * Threads: the library keeps process-wide state (the engine's step and its
 * list of live parameters, the trace, the allocator's pools) without locks:
 * call it from one thread at a time. Several threads, each with its own
 * runtime, must take turns under the host's own lock; the tokenizer, in
 * addition, is not to be shared between threads at all. */
typedef enum tg_status {
    TG_OK = 0,
    TG_EINVAL,   /* bad argument (wrong shape, dtype, option) */
    TG_ENOMEM,   /* allocation failed */
    TG_ESTATE,   /* call not allowed in the current state (use after free, replay before capture) */
    TG_ECAPTURE, /* not allowed while a stream is capturing */
    TG_EIO,      /* file or stream error */
    TG_EDEVICE,  /* device / driver error (CUDA, cuBLAS, NCCL) */
    TG_ENOTSUP,  /* not built in or not implemented for this backend */
    TG_ELUA      /* a Lua script failed */
} tg_status;

/* The message of the last failed call on this thread ("" if none). Valid
 * until the next failing call on this thread. */
TG_API const char *tg_last_error(void);
/* A short name of a status ("invalid argument", ...). */
TG_API const char *tg_status_name(tg_status st);
/* Sets this thread's error message (printf-style) and returns st: for host
 * code that fails, e.g. a wgrad hook (return tg_error(TG_EINVAL, "...")).
 * fmt NULL sets an empty message (a hook's failure is then reported as one
 * "without a message"). */
TG_API tg_status tg_error(tg_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Library version ("0.1.0") and the build options configure found. */
TG_API const char *tg_version(void);
TG_API const char *tg_build_options(void);
/* Checks the environment the library reads: TG_EINVAL naming the first
 * unknown flag in TG_DEBUG (name[,name...]) and the known ones. Loading the
 * Lua library (tg_runtime_new, require "tegraph") fails with it, and the
 * tegraph program exits 2; a program that never calls it gets the unknown
 * flag on stderr when a flag is first read. */
TG_API tg_status tg_env_check(void);

/* ------------------------------------------------------------------ dtypes, devices */
typedef enum tg_dtype {
    TG_F32 = 0,
    TG_BF16 = 1,
    TG_F16 = 2, /* reserved: not implemented by the kernels yet */
    TG_I32 = 3, /* token ids, indices */
    TG_U16 = 4, /* raw token files */
    TG_E4M3 = 5, /* FP8 E4M3 (OCP "fn": no infinities, max 448), with a per-tensor scale */
    TG_E5M2 = 6, /* FP8 E5M2 (max finite 57344), with a per-tensor scale */
    TG_DTYPE_COUNT
} tg_dtype;

TG_API size_t tg_dtype_size(tg_dtype dt);
TG_API const char *tg_dtype_name(tg_dtype dt);
/* Parses "f32"/"float32", "bf16"/"bfloat16", "i32", "u16", "e4m3"/"float8_e4m3fn",
 * "e5m2"/"float8_e5m2"; returns 0 on success. */
TG_API int tg_dtype_parse(const char *s, tg_dtype *out);

/* A device is "cpu" (index 0) or a CUDA device present (index 0 .. tg_device_count(TG_CUDA) - 1). Every call
 * given one that does not exist (cuda:99, cuda:-1, cpu:1, an unknown type) refuses it with TG_EINVAL "no such
 * device ..." (tg_stream_current: NULL with that error), or, for the queries that return no status, answers as
 * for a device that did nothing: tg_device_capturing 0, tg_device_get_stats zeros, tg_device_reset_peak no-op. */
typedef enum tg_device_type { TG_CPU = 0, TG_CUDA = 1 } tg_device_type;
typedef struct tg_device {
    tg_device_type type;
    int index;
} tg_device;

/* Parses "cpu", "cuda", "cuda:N"; fails with TG_EINVAL or TG_ENOTSUP when
 * CUDA is not built in. */
TG_API tg_status tg_device_parse(const char *s, tg_device *out);
/* Formats "cpu" / "cuda:0" into buf. */
TG_API const char *tg_device_str(tg_device d, char *buf, size_t n);
/* Number of devices of a type (CPU: 1; CUDA: 0 when not built or no GPU). */
TG_API int tg_device_count(tg_device_type type);
/* Name and total memory of a device, for `tegraph info`. */
TG_API tg_status tg_device_describe(tg_device d, char *name, size_t n, size_t *total_bytes);
/* The device new tensors go to by default: CUDA:0 when a GPU exists and the
 * environment variable TG_DEVICE does not say "cpu"; else the CPU. */
TG_API tg_device tg_default_device(void);
/* What tegraph issued on a device and the memory it holds, counted since the program started
 * (take differences for a step). kernels: kernel calls of ops other than GEMMs issued on a stream
 * that does not capture (an op is one call; a few ops launch two or three kernels under it);
 * gemms: GEMM calls likewise; graph_replays: replays of captured graphs (their kernels are not
 * counted one by one); memory: bytes of tensor storage and graph-pool blocks from the device's
 * allocator now; peak_memory: the most at any time since the last tg_device_reset_peak. */
typedef struct tg_device_stats {
    uint64_t kernels, gemms, graph_replays;
    size_t memory, peak_memory;
} tg_device_stats;
TG_API void tg_device_get_stats(tg_device d, tg_device_stats *out);
/* Starts peak_memory again at the memory held now. */
TG_API void tg_device_reset_peak(tg_device d);

/* The launcher's view of this process (tegraph run -n, mpirun, srun): its rank,
 * world size, local rank or local size, from the first of TG_RANK /
 * TG_WORLD_SIZE / TG_LOCAL_RANK / TG_LOCAL_WORLD_SIZE and the launchers' own
 * variables (OMPI_COMM_WORLD_*, PMI_*, SLURM_LOCALID...) that is set; def when
 * none is. */
typedef enum tg_launch_var { TG_ENV_RANK = 0, TG_ENV_WORLD_SIZE, TG_ENV_LOCAL_RANK, TG_ENV_LOCAL_SIZE } tg_launch_var;
TG_API int tg_launch_env(tg_launch_var what, int def);

/* ------------------------------------------------------------------ the world of a multi-rank job
 * Scripts reach the other ranks through the world communicator
 * (tegraph.comm.world()), set up from the launcher's environment at its first
 * use: MPI under mpirun (CPU tensors; plus NCCL for CUDA tensors), NCCL under
 * `tegraph run -n N` on GPUs (TG_RANK, TG_WORLD_SIZE, TG_NCCL_ID), a single
 * rank otherwise. A host that runs scripts on the ranks of a job calls these
 * around them, as the `tegraph` program does. */

/* A fresh NCCL unique id, written as 2 * 128 hex digits and a NUL into hex
 * (n >= 257): the TG_NCCL_ID a host gives the ranks it starts itself (with
 * TG_RANK and TG_WORLD_SIZE). The process that made it must stay alive until
 * the ranks have joined. TG_ENOTSUP without NCCL. */
TG_API tg_status tg_world_nccl_id(char *hex, size_t n);
/* Waits for the device-side operations of every communicator of this
 * process; fails (TG_EDEVICE) if one failed, timed out or was aborted. Call
 * it after a rank's last script, before reporting success: a collective can
 * fail after the script has moved on. */
TG_API tg_status tg_world_drain(void);
/* Stops the whole job after a fatal error on this rank: NCCL communicators
 * are aborted, and under MPI every rank ends (MPI_Abort with code; it does
 * not return). Does nothing without a multi-rank world. */
TG_API void tg_world_abort(int code);
/* Tears the world down (NCCL communicators destroyed, MPI finalised);
 * communicators cannot be used afterwards. Runs at exit by itself;
 * idempotent. */
TG_API void tg_world_finalize(void);

/* ------------------------------------------------------------------ tensors
 * A tensor is a handle on refcounted storage: contiguous, row-major, up to 4
 * dimensions, with an element offset into its storage (views share storage).
 * Each handle has one owner, who frees it with tg_tensor_free; storage lives
 * while any handle uses it. */
#define TG_MAX_DIMS 4
typedef struct tg_tensor tg_tensor;
typedef struct tg_pool tg_pool;
typedef struct tg_stream tg_stream;
typedef struct tg_graph tg_graph;
typedef struct tg_event tg_event;

/* New uninitialised tensor on dev. Storage comes from the current pool of
 * the device (tg_pool_push) if any, else from the device allocator; the
 * latter fails with TG_ECAPTURE while a stream of that device captures. */
TG_API tg_status tg_tensor_new(tg_dtype dt, int ndim, const int64_t *shape, tg_device dev, tg_tensor **out);
/* Like tg_tensor_new, from an explicit pool (NULL: same as tg_tensor_new). */
TG_API tg_status tg_tensor_new_in(tg_pool *pool, tg_dtype dt, int ndim, const int64_t *shape, tg_device dev,
                                  tg_tensor **out);
/* Frees the handle (NULL is fine); the storage goes when its last handle goes. */
TG_API void tg_tensor_free(tg_tensor *t);
/* A new handle on the same storage: same shape and offset. */
TG_API tg_status tg_tensor_ref(const tg_tensor *t, tg_tensor **out);
/* A view of numel(shape) elements starting `offset` elements into t. */
TG_API tg_status tg_tensor_view(const tg_tensor *t, int64_t offset, int ndim, const int64_t *shape, tg_tensor **out);
/* Rows [start, start+len) along dimension 0, as a view. */
TG_API tg_status tg_tensor_narrow(const tg_tensor *t, int64_t start, int64_t len, tg_tensor **out);

TG_API tg_dtype tg_tensor_dtype(const tg_tensor *t);
TG_API int tg_tensor_ndim(const tg_tensor *t);
TG_API int64_t tg_tensor_dim(const tg_tensor *t, int i);
TG_API int64_t tg_tensor_numel(const tg_tensor *t);
TG_API tg_device tg_tensor_device(const tg_tensor *t);
/* Address of the first element (device memory for CUDA tensors). While the
 * current stream of t's device captures, the graph being captured keeps t's
 * storage (or the graph pool it came from) alive until tg_graph_free. */
TG_API void *tg_tensor_data(const tg_tensor *t);
/* Optional name (NULL if none); the tensor keeps its own copy. */
TG_API const char *tg_tensor_name(const tg_tensor *t);
TG_API tg_status tg_tensor_set_name(tg_tensor *t, const char *name);
/* "[2,3]" into buf. */
TG_API const char *tg_tensor_shape_str(const tg_tensor *t, char *buf, size_t n);
/* Whether two tensors have the same shape. */
TG_API int tg_tensor_same_shape(const tg_tensor *a, const tg_tensor *b);
/* Whether two handles address exactly the same elements. */
TG_API int tg_tensor_same_memory(const tg_tensor *a, const tg_tensor *b);

/* Host <-> tensor transfers of raw elements in the tensor's dtype (blocking:
 * they synchronise the current stream). Fail with TG_ECAPTURE while the
 * device captures. A read also fails (TG_EINVAL, naming the id and its
 * position) when work that ran before it met a token id outside its embedding
 * table or a cross-entropy target outside the vocabulary. */
TG_API tg_status tg_tensor_write(tg_tensor *t, const void *src, size_t bytes);
TG_API tg_status tg_tensor_read(const tg_tensor *t, void *dst, size_t bytes);
/* Reads the tensor converted to double (n = numel). */
TG_API tg_status tg_tensor_read_f64(const tg_tensor *t, double *dst, size_t n);
/* Writes n doubles, converted (with rounding) to the tensor's dtype; a value
 * an integer or FP8 dtype cannot hold (FP8: past its max, or NaN) is refused
 * (TG_EINVAL naming it and its index). */
TG_API tg_status tg_tensor_write_f64(tg_tensor *t, const double *src, size_t n);

/* ------------------------------------------------------------------ ops
 * Issued on the current stream of the tensors' device (tg_stream_current),
 * so they are recorded when that stream captures. Shapes and dtypes are
 * checked; errors name them. */
/* Every element = value; TG_EINVAL when the dtype cannot hold it (an integer
 * dtype: not an integer in range; FP8: past its max, or NaN). */
TG_API tg_status tg_fill(tg_tensor *t, double value);
/* dst = src; same numel; dtypes may differ (then a cast); devices may differ
 * (then a host transfer, not capturable). A cast into i32 or u16 refuses a
 * source value that is not an integer of the destination's range (2.7 or
 * 1e10 into i32, -5 or 70000 into u16, NaN, infinities), as
 * tg_tensor_write_f64 does: TG_EINVAL naming the first such value, its index
 * and both dtypes. On the CPU the call fails and dst keeps its values; on a
 * GPU the device's next host read fails (as for bad token ids: a kernel cannot
 * fail its launch), dst holding the values saturated. FP8 copies from and to
 * f32 or bf16 only, unscaled (value = code), saturating past the format's max
 * as tg_fp8_cast does. */
TG_API tg_status tg_copy(tg_tensor *dst, const tg_tensor *src);
typedef enum tg_binop { TG_ADD = 0, TG_SUB, TG_MUL, TG_DIV } tg_binop;
/* out = a op b, elementwise, all the same shape and dtype (out may alias). */
TG_API tg_status tg_binary(tg_binop op, tg_tensor *out, const tg_tensor *a, const tg_tensor *b);
/* y = alpha * x + beta * y (beta == 0 overwrites y, ignoring NaN in it). */
TG_API tg_status tg_axpby(tg_tensor *y, double alpha, const tg_tensor *x, double beta);
/* C = alpha * op(A) @ op(B) + beta * C, row-major 2-D (or 3-D batched with
 * equal leading dims). op(X) = X^T when trans_x. Accumulates in f32; A and B
 * share a dtype; C is f32 or that dtype. beta == 0 overwrites C. */
TG_API tg_status tg_gemm(tg_tensor *c, const tg_tensor *a, int trans_a, const tg_tensor *b, int trans_b, double alpha,
                         double beta);
/* What a fused GEMM does after the product, on v = alpha * op(A) op(B) + beta * C
 * (f32, rounded once on store):
 *   TG_EPI_BIAS       C = v + bias[j]; bias (n) in C's dtype, broadcast over rows (and batches)
 *   TG_EPI_BIAS_GELU  C = gelu_tanh(v + bias[j]) (tg_gelu_forward's formula); aux, when given,
 *                     gets v + bias[j] (C's shape and dtype): the input gelu_backward wants
 *   TG_EPI_BGRAD      C = v, and bgrad (m) (or (batch, m)), f32 or bf16,
 *                     = bgrad_accumulate * bgrad + sum over p of op(A)[i][p]: for a
 *                     wgrad dW = dy^T x (A = dy, trans_a) it is db = the column sums of dy,
 *                     stored like tg_bias_backward_dw (0 overwrites, ignoring NaN)
 *   TG_EPI_DGELU      C = gelu_tanh'(aux) * v (tg_gelu_backward's formula): aux (C's shape and
 *                     dtype, only read) is the pre-activation BIAS_GELU saved, so the dgrad
 *                     GEMM after a gelu gives the gradient before it in one kernel */
typedef enum tg_gemm_epilogue { TG_EPI_NONE = 0, TG_EPI_BIAS, TG_EPI_BIAS_GELU, TG_EPI_BGRAD, TG_EPI_DGELU } tg_gemm_epilogue;
/* tg_gemm with an epilogue: one kernel where the backend can fuse it (cuBLASLt),
 * else the GEMM then the unfused kernels, same result within rounding. Tensors
 * an epilogue does not use must be NULL; aux must not share C's memory. */
TG_API tg_status tg_gemm_ex(tg_tensor *c, const tg_tensor *a, int trans_a, const tg_tensor *b, int trans_b, double alpha,
                            double beta, tg_gemm_epilogue epi, const tg_tensor *bias, tg_tensor *aux, tg_tensor *bgrad,
                            double bgrad_accumulate);
/* Reductions to the host (blocking; fail with TG_ECAPTURE while capturing). Host
 * reads: like tg_tensor_read they fail naming a bad token id or target that
 * work run before them met. */
TG_API tg_status tg_sum(const tg_tensor *t, double *out);
TG_API tg_status tg_max_abs(const tg_tensor *t, double *out);
TG_API tg_status tg_max_abs_diff(const tg_tensor *a, const tg_tensor *b, double *out);

/* ------------------------------------------------------------------ FP8 (E4M3, E5M2)
 * FP8 tensors hold 1-byte codes; their real value is code * scale_inv, with
 * a per-tensor f32 scale kept by the caller as device tensors of shape (1)
 * (scale, scale_inv, amax), so every op here is issued on the stream without
 * host reads and is capturable. Conversion from f32 rounds to nearest, ties
 * to even, into the format's grid (subnormals included), saturating: values
 * beyond the largest finite value, infinities included, become +-max (E4M3
 * 448, E5M2 57344: TransformerEngine's saturating cast); NaN becomes the code
 * 0x7f (E4M3 and E5M2 NaN). The CPU backend computes exactly these bits, the
 * CUDA backend too (hardware conversion). */
TG_API uint8_t tg_fp8_from_f32(tg_dtype dt, float x);
TG_API float tg_fp8_to_f32(tg_dtype dt, uint8_t code);
/* The largest finite value of an FP8 dtype (448, 57344; 0 for other dtypes). */
TG_API double tg_fp8_max(tg_dtype dt);
/* Whether dt is TG_E4M3 or TG_E5M2. */
TG_API int tg_dtype_is_fp8(tg_dtype dt);

/* flags of the ops that write an amax: accumulate (amax = max(amax, new))
 * instead of overwriting it. amax values are compared as the bits of
 * non-negative f32s, so a NaN met wins over any number, infinity included
 * (a scale update can then keep its previous scale). */
#define TG_FP8_AMAX_ACCUMULATE 1

/* y = fp8(x * scale[0]) elementwise (the product rounded to f32 first).
 * x f32 or bf16; y E4M3 or E5M2 of x's shape (or numel); scale, amax and
 * scale_inv f32 (1) on x's device. scale NULL: 1. amax (may be NULL) gets
 * max |x| of the unscaled input, written or accumulated (flags). scale_inv
 * (may be NULL) gets 1 / scale[0], the factor that dequantizes this y, so the
 * pair stays consistent when the scale changes later. */
TG_API tg_status tg_fp8_cast(tg_tensor *y, const tg_tensor *x, const tg_tensor *scale, tg_tensor *amax,
                             tg_tensor *scale_inv, int flags);
/* tg_fp8_cast of x seen as a matrix (rows = numel / last dim, cols = last
 * dim) that also writes y_t (cols, rows) = y^T, both in one pass: the
 * K-major copies FP8 GEMMs need for dgrad and wgrad. y or y_t may be NULL
 * (not both). */
TG_API tg_status tg_fp8_cast_transpose(tg_tensor *y, tg_tensor *y_t, const tg_tensor *x, const tg_tensor *scale,
                                       tg_tensor *amax, tg_tensor *scale_inv, int flags);
/* The cast of a gradient with the first stage of its bias gradient in the
 * same pass (what an FP8 Linear's backward runs): tg_fp8_cast_transpose of
 * g, where g = dy, or, with gelu_x (dy's shape and dtype, the GELU's input),
 * g = gelu'(gelu_x) * dy rounded to dy's dtype (tg_gelu_backward's formula),
 * so dgelu, cast, transpose and column sums read dy once. dbias_part (may be
 * NULL) is f32 (tg_fp8_dbias_chunks(rows), cols): row p gets the column sums
 * of g over the rows of chunk p, the 64-row tiles t with t % chunks == p
 * (CPU: summed in double in row order, rounded once). tg_fp8_dbias_finish
 * then writes the bias gradient. */
TG_API int64_t tg_fp8_dbias_chunks(int64_t rows);
TG_API tg_status tg_fp8_cast_transpose_dbias(tg_tensor *y, tg_tensor *y_t, const tg_tensor *dy, const tg_tensor *gelu_x,
                                             const tg_tensor *scale, tg_tensor *amax, tg_tensor *scale_inv,
                                             tg_tensor *dbias_part, int flags);
/* The forward cast of a GELU output from its pre-activation h (f32 or bf16):
 * tg_fp8_cast_transpose of g = gelu(h) computed and rounded to h's dtype as
 * tg_gelu_forward does, in one pass (g itself is never stored): what an FP8
 * Linear with GELU hands to the next FP8 Linear as its input. */
TG_API tg_status tg_fp8_cast_transpose_gelu(tg_tensor *y, tg_tensor *y_t, const tg_tensor *h, const tg_tensor *scale,
                                            tg_tensor *amax, tg_tensor *scale_inv, int flags);
/* dbias (c) f32 or bf16 = accumulate * dbias + the sum of dbias_part's rows
 * (in double in a fixed order, the CPU's row order; rounded once;
 * accumulate 0 overwrites). */
TG_API tg_status tg_fp8_dbias_finish(tg_tensor *dbias, const tg_tensor *dbias_part, double accumulate);
/* y_t (cols, rows) = x^T for an FP8 x seen as a matrix as above, codes
 * copied (same dtype). */
TG_API tg_status tg_fp8_transpose(tg_tensor *y_t, const tg_tensor *x);
/* y = f32(x) * scale_inv[0] (f32 product, rounded once to y's dtype). x FP8,
 * y f32 or bf16 of the same numel; scale_inv NULL: 1. */
TG_API tg_status tg_fp8_dequantize(tg_tensor *y, const tg_tensor *x, const tg_tensor *scale_inv);
/* amax (f32 (1)) = max |x| (x f32 or bf16), written or accumulated (flags):
 * the pass current scaling runs before its cast. */
TG_API tg_status tg_fp8_amax(tg_tensor *amax, const tg_tensor *x, int flags);
/* The FP8 GEMM, 2-D row-major:
 *   D (m,n) = alpha * (a_scale_inv * A) (m,k) @ ((b_scale_inv * B) (n,k))^T + beta * D
 * then the epilogue (TG_EPI_NONE, TG_EPI_BIAS or TG_EPI_BIAS_GELU with bias
 * bf16 (n) and aux as in tg_gemm_ex). Both operands are K-major, as Hopper's
 * FP8 tensor cores require ("TN"): trans_a must be 0 and trans_b 1 (other
 * layouts are refused; tg_fp8_cast_transpose makes the transposed copies).
 * A and B are E4M3 or E5M2, not both E5M2; D is f32 or bf16; the scale_invs
 * f32 (1) on the device (NULL: 1). amax_d (may be NULL) gets max |D| of the
 * stored D, written or accumulated (flags). beta == 0 overwrites D. CUDA runs
 * cuBLASLt and needs n to be a multiple of 16 and D to start on a 16-byte
 * boundary, and A and B too where k is a multiple of 16 (others are refused
 * there, TG_ENOTSUP); another k runs on zero-padded copies of A and B. The CPU
 * emulates it: codes decoded exactly, products summed in double, scaled once,
 * rounded once on store. */
TG_API tg_status tg_fp8_gemm(tg_tensor *d, const tg_tensor *a, int trans_a, const tg_tensor *a_scale_inv,
                             const tg_tensor *b, int trans_b, const tg_tensor *b_scale_inv, double alpha, double beta,
                             tg_gemm_epilogue epi, const tg_tensor *bias, tg_tensor *aux, tg_tensor *amax_d, int flags);

/* Counter-based RNG (Philox4x32-10): element i of a fill with (seed, offset)
 * depends only on (seed, offset, i), on every backend. The global generator
 * advances its offset by each fill. */
TG_API void tg_manual_seed(uint64_t seed);
TG_API void tg_rng_state(uint64_t *seed, uint64_t *offset);
/* Restores a state read with tg_rng_state: the next fills draw as they would have then. */
TG_API void tg_rng_set_state(uint64_t seed, uint64_t offset);
/* Normal(mean, std) and uniform [lo, hi) fills of an f32 or bf16 tensor; mean, std >= 0, lo <= hi finite. */
TG_API tg_status tg_randn(tg_tensor *t, double mean, double std);
TG_API tg_status tg_rand(tg_tensor *t, double lo, double hi);

/* ------------------------------------------------------------------ safetensors files
 * The safetensors format: 8 bytes little-endian header length N, N bytes of
 * JSON (per tensor {"dtype", "shape", "data_offsets": [begin, end]} relative
 * to the data, and an optional "__metadata__" map of strings), then the raw
 * little-endian data. tegraph writes F32, BF16, F16, I32, U16, F8_E4M3 and
 * F8_E5M2 tensors and reads those and I64 and U8 (as i32) and F16 (as f32). */
typedef struct tg_safetensors tg_safetensors;
/* Writes n tensors under names (unique, non-empty, not "__metadata__") and
 * nmeta metadata pairs to path atomically: into "path.tmp", fsync, rename,
 * fsync of the directory, so path holds the old file or the whole new one.
 * The tensors are read to the host (blocking). TG_EINVAL naming the tensor,
 * TG_EIO naming the file. */
TG_API tg_status tg_safetensors_write(const char *path, int n, const char *const *names, const tg_tensor *const *tensors,
                                      int nmeta, const char *const *meta_keys, const char *const *meta_values);
/* Opens (maps) a file and validates all of it: header length, JSON, every
 * tensor's dtype, shape and data range (inside the data, no overlaps, no
 * holes, size = numel * dtype size). TG_EIO or TG_EINVAL naming the file and
 * the tensor otherwise. */
TG_API tg_status tg_safetensors_open(const char *path, tg_safetensors **out);
TG_API void tg_safetensors_close(tg_safetensors *f);
/* The tensors, in the order of their data. */
TG_API int tg_safetensors_count(const tg_safetensors *f);
TG_API const char *tg_safetensors_name(const tg_safetensors *f, int i);
/* The index of a tensor, or -1. */
TG_API int tg_safetensors_find(const tg_safetensors *f, const char *name);
/* Its file dtype name ("F32", "BF16", ...), the tegraph dtype it loads as,
 * and its shape (ndim may be 0: a scalar; *ndim gets the file's count, shape
 * gets the first TG_MAX_DIMS). TG_EINVAL for an unknown name. */
TG_API tg_status tg_safetensors_info(const tg_safetensors *f, const char *name, const char **file_dtype, tg_dtype *dtype,
                                     int *ndim, int64_t shape[TG_MAX_DIMS]);
/* Reads a tensor into a new tensor on dev in its load dtype (a scalar as
 * shape (1)); TG_EINVAL naming file and tensor when it has more than
 * TG_MAX_DIMS dimensions or an I64 value does not fit i32. */
TG_API tg_status tg_safetensors_read(const tg_safetensors *f, const char *name, tg_device dev, tg_tensor **out);
/* Reads a tensor into dst: same number of elements and shape (ignoring
 * leading 1s), dtypes converted between f32 / bf16 / f16 and between the
 * integer types; F8_E4M3 / F8_E5M2 codes load only into tensors of the same
 * FP8 dtype. TG_EINVAL naming file, tensor and both shapes or dtypes. */
TG_API tg_status tg_safetensors_read_into(const tg_safetensors *f, const char *name, tg_tensor *dst);
/* Metadata: the value of key or NULL; the number of pairs and each one. */
TG_API const char *tg_safetensors_metadata(const tg_safetensors *f, const char *key);
TG_API int tg_safetensors_metadata_count(const tg_safetensors *f);
TG_API const char *tg_safetensors_metadata_key(const tg_safetensors *f, int i);
/* Writes len bytes to path atomically (temporary name, fsync, rename, fsync
 * of the directory). TG_EIO naming the file. */
TG_API tg_status tg_write_file_atomic(const char *path, const void *data, size_t len);
/* ------------------------------------------------------------------ signals (opt-in)
 * The library installs no signal handlers by itself. A training loop that
 * wants to stop cleanly on SIGINT / SIGTERM calls tg_signals_catch(1): the
 * first such signal only sets a flag, read with tg_signals_pending() (the
 * signal number, 0 if none); a second one restores the previous handler and
 * re-raises, ending the process at once. tg_signals_catch(0) restores the
 * previous handlers and clears the flag. */
TG_API tg_status tg_signals_catch(int on);
TG_API int tg_signals_pending(void);
/* ------------------------------------------------------------------ streams and graphs
 * All device work is issued on a stream. On the CPU a stream is a command
 * buffer: commands run at once, or are recorded while capturing. On CUDA it
 * is a cudaStream_t and capture is CUDA stream capture. A captured graph
 * replays the recorded work with the addresses it was captured with; host
 * code that ran during capture does not run at replay. */
TG_API tg_status tg_stream_new(tg_device dev, const char *name, tg_stream **out);
TG_API void tg_stream_free(tg_stream *s);
/* The stream ops on dev are issued on (initially the device's default stream); NULL (the message in
 * tg_last_error) for a device that does not exist or when its default stream cannot be made. */
TG_API tg_stream *tg_stream_current(tg_device dev);
/* Makes s the current stream of its device; returns the previous one. */
TG_API tg_stream *tg_stream_set_current(tg_stream *s);
TG_API tg_status tg_stream_sync(tg_stream *s);
TG_API const char *tg_stream_name(const tg_stream *s);
TG_API int tg_stream_capturing(const tg_stream *s);
/* Whether any stream of dev is capturing (0 for a device that does not exist). */
TG_API int tg_device_capturing(tg_device dev);

/* Begins capture on s. Fails with TG_ECAPTURE if s already captures. */
TG_API tg_status tg_stream_begin_capture(tg_stream *s);
/* Ends capture and returns the graph (owned by the caller). If the capture
 * failed (an op errored during it) the graph is not returned and the first
 * error is reported. */
TG_API tg_status tg_stream_end_capture(tg_stream *s, tg_graph **out);
/* Runs the captured work on s (which must be on the graph's device and not
 * capturing). On the CPU the work has run when it returns: a token id outside
 * its embedding table or a target outside the vocabulary fails this call
 * (TG_EINVAL, naming it); on a GPU it fails the device's next host read. */
TG_API tg_status tg_graph_replay(tg_graph *g, tg_stream *s);
/* Number of commands captured (CUDA: graph nodes). */
TG_API size_t tg_graph_size(const tg_graph *g);
/* Keeps pool alive as long as the graph (graph memory); keeping it twice is
 * keeping it once. A graph keeps at most 8 pools: another one is TG_EINVAL. */
TG_API tg_status tg_graph_keep_pool(tg_graph *g, tg_pool *pool);
TG_API void tg_graph_free(tg_graph *g);

/* Events mark a point of a stream's work, to order streams and to time them.
 * CUDA: a cudaEvent_t. CPU: recording is a command on the stream (run now,
 * or recorded while the stream captures and run at each replay) that stores
 * the host's monotonic time. An event recorded in a captured graph must
 * outlive the graph. On CUDA, timing events recorded while capturing do not
 * time anything (CUDA forbids timing in graphs): tg_event_elapsed on them
 * fails; a recorded event still orders another captured stream (fork/join). */
/* A new event on dev; timing != 0 allows tg_event_elapsed (costlier on CUDA).
 * TG_EINVAL naming the device when it does not exist. */
TG_API tg_status tg_event_new(tg_device dev, int timing, tg_event **out);
TG_API void tg_event_free(tg_event *e);
/* Marks the work issued on s so far (s on the event's device). */
TG_API tg_status tg_event_record(tg_event *e, tg_stream *s);
/* Work issued on s after this call starts after e's work completed (the host
 * does not block). */
TG_API tg_status tg_stream_wait_event(tg_stream *s, tg_event *e);
/* *done = whether e's work has completed (an event never recorded counts as
 * complete, as in CUDA). Does not block. */
TG_API tg_status tg_event_query(tg_event *e, int *done);
/* Blocks the host until e's work has completed. */
TG_API tg_status tg_event_sync(tg_event *e);
/* *ms = time from start to end (may be negative if end was recorded first).
 * Both must be timing events of one device, recorded and complete: otherwise
 * TG_ESTATE saying which. */
TG_API tg_status tg_event_elapsed(tg_event *start, tg_event *end, double *ms);

/* ------------------------------------------------------------------ trace
 * One process-wide trace. While it runs, spans are timed by events recorded
 * on the stream that runs their work: each module's forward, backward
 * (dgrad) and wgrad and each graph replay on the compute stream, each
 * collective on the communication stream (NCCL; with MPI, from issue to the
 * observed completion in host time). Hook dispatches (one span each), the
 * schedule executor's actions (F, B, W, send, recv: one span each on the
 * track "stage s", with the hook dispatches they cause) and its in-process
 * transfers (async spans from send to recv) are timed on the host. Nothing is
 * recorded while a CUDA stream captures (CUDA has no timing inside graphs);
 * on the CPU a span recorded during capture is timed by the last replay of
 * its graph. Off, a span costs one flag test. */
typedef struct tg_trace_summary {
    int nspans;            /* spans written */
    double comm_busy_ms;   /* union of comm spans */
    double overlapped_ms;  /* the part of it during compute spans */
    double exposed_ms;     /* comm_busy_ms - overlapped_ms */
    double exposed_pct;    /* of comm_busy_ms (0 without comm) */
    double compute_ms;     /* union of compute spans */
} tg_trace_summary;

/* Starts collecting spans (TG_ESTATE if a trace runs already). */
TG_API tg_status tg_trace_begin(void);
/* Whether a trace runs. */
TG_API int tg_trace_active(void);
/* Records a span on s (NULL: a host span) on the track "compute", "comm" or
 * "host" (NULL: "host"); name is any text (escaped in the file); args is
 * extra JSON object members ("\"mb\":2,\"k\":\"v\"") or NULL, checked, so that
 * the trace file is always JSON. Returns the span's id for
 * tg_trace_span_end, or -1 when nothing is recorded: no trace, s captures on
 * CUDA, or (TG_EINVAL in tg_last_error, naming it) a track other than the
 * three or args that are not JSON object members. */
TG_API int tg_trace_span_begin(tg_stream *s, const char *track, const char *name, const char *args);
/* Ends span id (ignored when id < 0) on the same stream (or NULL). */
TG_API void tg_trace_span_end(int id, tg_stream *s);
/* Stops the trace: synchronises the devices, converts spans to microseconds
 * from the start, writes Chrome trace JSON to path (pid = rank, or the
 * executor's pid option; tid 1 compute, 2 comm, 3 host, 10 + s stage s;
 * path NULL: written nowhere) and fills *sum when sum is non-NULL.
 * TG_EIO naming the path when it cannot be written: then the trace still
 * runs with its spans kept, to be ended again with another path (or NULL to
 * drop it). TG_ESTATE when no trace runs. */
TG_API tg_status tg_trace_end(const char *path, tg_trace_summary *sum);
/* "trace: comm 12.3 ms busy, 11.0 ms overlapped by compute, 1.3 ms exposed (10.6%)". */
TG_API const char *tg_trace_summary_line(const tg_trace_summary *s, char *buf, size_t n);

/* Graph memory pools: allocations that must outlive a capture (static
 * buffers) come from a pool. Refcounted: each storage allocated from it and
 * each graph that keeps it hold a reference. */
TG_API tg_status tg_pool_new(tg_device dev, tg_pool **out);
TG_API tg_pool *tg_pool_retain(tg_pool *p);
TG_API void tg_pool_release(tg_pool *p);
/* Bytes handed out now / at most / reserved from the device. */
TG_API void tg_pool_stats(const tg_pool *p, size_t *used, size_t *peak, size_t *reserved);
/* While pushed, tg_tensor_new on the pool's device allocates from it (a
 * per-thread stack, which holds a reference on p until it is popped: a
 * tg_pool_release meanwhile does not free it). tg_pool_pop pops p, which must
 * be on top; otherwise it pops nothing and tg_last_error says so. */
TG_API tg_status tg_pool_push(tg_pool *p);
TG_API void tg_pool_pop(tg_pool *p);

/* ------------------------------------------------------------------ text: tokenizers and sampling
 * A tokenizer turns bytes into token ids and back. Two kinds: byte-level (id = byte, 256 ids) and GPT-2's
 * byte-level BPE, loaded from a directory holding vocab.json + merges.txt (Hugging Face) or encoder.json +
 * vocab.bpe (OpenAI). BPE text is split into pieces by GPT-2's pre-tokenization rule (contractions, optional-space
 * letters, numbers and other characters, whitespace runs), each piece's bytes are merged by rank.
 * decode(encode(s)) == s for any bytes (invalid UTF-8 included). Encoding never yields special tokens such as
 * <|endoftext|>: that text is encoded as ordinary text. A tokenizer is not thread-safe (encode caches pieces). */
typedef struct tg_tokenizer tg_tokenizer;
/* Called during encode with the bytes done so far; return nonzero to stop (encode then fails). */
typedef int (*tg_tokenizer_progress)(void *ud, size_t done, size_t total);

TG_API tg_status tg_tokenizer_bytes(tg_tokenizer **out);
/* Fails naming the file (and line) when a file is missing, malformed (strict JSON, one "a b" pair per line),
 * lacks a token for one of the 256 bytes, or a merge names a token the vocabulary does not hold. */
TG_API tg_status tg_tokenizer_gpt2(const char *dir, tg_tokenizer **out);
TG_API void tg_tokenizer_free(tg_tokenizer *t);
TG_API int64_t tg_tokenizer_vocab_size(const tg_tokenizer *t);
/* The id of <|endoftext|>, or -1 when the vocabulary has none (byte-level). */
TG_API int64_t tg_tokenizer_eot(const tg_tokenizer *t);
TG_API int64_t tg_tokenizer_num_merges(const tg_tokenizer *t);
TG_API const char *tg_tokenizer_kind(const tg_tokenizer *t); /* "bytes" or "gpt2" */
/* *ids (malloc'd, the caller frees) gets the *nids ids of text[0..len). progress may be NULL. */
TG_API tg_status tg_tokenizer_encode(tg_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *nids,
                                     tg_tokenizer_progress progress, void *ud);
/* *text (malloc'd and NUL-terminated, the caller frees) gets the bytes of ids; an id outside the vocabulary
 * fails naming its position. */
TG_API tg_status tg_tokenizer_decode(const tg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len);
/* The bytes of token id (NULL outside the vocabulary). */
TG_API const unsigned char *tg_tokenizer_token(const tg_tokenizer *t, int64_t id, size_t *len);
/* The pre-tokenizer alone: the end offsets of the pieces of text (at most max stored); returns their count. */
TG_API size_t tg_tokenizer_pieces(const char *text, size_t len, size_t *ends, size_t max);

/* Picking a token from a row of n logits (host f32). temperature 0 or top_k 1: the largest logit (the lowest id
 * among equals). Otherwise softmax(logits / temperature) over the top_k largest (0: all), cut to the smallest
 * first-ranking set whose probability reaches top_p (1: no cut), drawn with the generator *state (any value
 * seeds it; each draw advances it). TG_EINVAL when a logit is NaN or none is finite (no token to pick). */
typedef struct tg_sample_opts {
    double temperature;
    int64_t top_k;
    double top_p;
} tg_sample_opts;
TG_API tg_status tg_sample_logits(const float *logits, int64_t n, const tg_sample_opts *o, uint64_t *state,
                                  int64_t *token);

/* ------------------------------------------------------------------ parameters and wgrad hooks
 * A parameter holds a module's weight (data), the gradient its wgrad writes
 * (grad, in data's dtype, or the f32 main_grad when the module fuses wgrad
 * accumulation) and its wgrad hooks. Parameters belong to their modules
 * (built from Lua, see tg_lua_checkparam); the accessors lend tensors owned
 * by the parameter: do not free them, and do not keep main_grad across a
 * rebinding of it to a gradient buffer (data parallelism does that once,
 * when it is set up).
 *
 * The hook contract: for every parameter p, every step and every microbatch
 * m, p's wgrad hooks fire exactly once, after p's wgrad for m has been issued
 * into p's gradient (on the stream: a hook that reads it sees it, in stream
 * order), never before, and never while the device captures a graph: with
 * delayed wgrad they fire after backward_dw, and for graphed callables after
 * the replay of the W (or fused B) graph. Hooks of a parameter run in the
 * order they were added, on the thread that runs the backward. */
typedef struct tg_param tg_param;

typedef struct tg_hook_info {
    int microbatch; /* 1-based microbatch of the wgrad that just finished */
    int last;       /* 1 on p's last wgrad of the step (the microbatches-th); always 1 outside steps */
    int chunk;      /* pipeline chunk of p's module (module option chunk, default 1) */
    int64_t step;   /* 1-based index of the open step (0 outside steps) */
} tg_hook_info;

/* A wgrad hook: ud as given to tg_param_add_hook. It returns TG_OK, or an
 * error status with a message set (tg_error): the error aborts the backward
 * (or backward_dw, or replay) that fired it and is returned to its caller,
 * prefixed "wgrad hook N of NAME (microbatch M)" (from Lua: raised there).
 * An error returned without a message set is reported as "the hook failed
 * (STATUS) without a message", a value that is not a tg_status as TG_EINVAL.
 * Hooks must not begin or end steps (TG_ESTATE). */
typedef tg_status (*tg_hook_fn)(void *ud, tg_param *p, const tg_hook_info *info);

/* Adds fn as a wgrad hook of p; *id (when id is non-NULL) gets its handle
 * for tg_param_remove_hook (> 0, unique per parameter). free_ud (may be
 * NULL) is called with ud when the hook is removed or p goes. Refused, with
 * *id = 0 and free_ud not called (ud stays the caller's): a (fn, ud) pair
 * that is already a hook of p (TG_EINVAL naming its id: a pair is added
 * once; the same fn with another ud is another hook), and a call while p's
 * hooks are running, from one of them (TG_ESTATE: add it after). */
TG_API tg_status tg_param_add_hook(tg_param *p, tg_hook_fn fn, void *ud, void (*free_ud)(void *ud), int *id);
/* Removes the hook with handle id from p (calling its free_ud). TG_EINVAL
 * naming p when p has no such hook; TG_ESTATE while p's hooks are running. */
TG_API tg_status tg_param_remove_hook(tg_param *p, int id);
/* The number of hooks p has. */
TG_API int tg_param_hook_count(const tg_param *p);
/* The parameter's name ("h.0.attn.qkv.weight"). */
TG_API const char *tg_param_name(const tg_param *p);
/* Its weight, in the module's compute dtype. */
TG_API tg_tensor *tg_param_data(const tg_param *p);
/* Its gradient in data's dtype (the wgrad target unless fused). */
TG_API tg_tensor *tg_param_grad(const tg_param *p);
/* Its f32 gradient when the module fuses wgrad accumulation, else NULL. */
TG_API tg_tensor *tg_param_main_grad(const tg_param *p);

/* ------------------------------------------------------------------ forward pre-hooks
 * A module's forward pre-hooks run on the host before its forward: before
 * the module's own forward runs, or before the replay of the F graph that
 * holds it (graphed callables, and plain captures: before each replay of the
 * graph that captured the forward). They are never captured and never run
 * during a graphed set's warm-up; work they issue on the current stream
 * precedes the forward. ZeRO-style training gathers parameters in them. */
typedef struct tg_module tg_module;

typedef struct tg_forward_info {
    int microbatch; /* 1-based microbatch of the forward about to run */
    int chunk;      /* pipeline chunk of the module (module option chunk, default 1) */
    int64_t step;   /* 1-based index of the open step (0 outside steps) */
} tg_forward_info;

/* A forward pre-hook: ud as given to tg_module_add_forward_pre_hook. An error
 * (tg_error) aborts the forward or replay before it runs, prefixed "forward
 * pre-hook N of MODULE (microbatch M)". */
typedef tg_status (*tg_forward_pre_hook_fn)(void *ud, tg_module *m, const tg_forward_info *info);

/* Adds fn as a forward pre-hook of m (hooks run in the order added); *id
 * (when id is non-NULL) gets its handle (> 0, unique per module). free_ud
 * (may be NULL) is called with ud when the hook is removed or m goes. */
TG_API tg_status tg_module_add_forward_pre_hook(tg_module *m, tg_forward_pre_hook_fn fn, void *ud,
                                                void (*free_ud)(void *ud), int *id);
/* Removes the pre-hook with handle id (TG_EINVAL naming m when it has none;
 * TG_ESTATE while m's pre-hooks run). */
TG_API tg_status tg_module_remove_forward_pre_hook(tg_module *m, int id);
TG_API int tg_module_forward_pre_hook_count(const tg_module *m);
/* The module's name ("h.0.attn"; "" when unnamed). */
TG_API const char *tg_module_name(const tg_module *m);

/* ------------------------------------------------------------------ FP8 scaling (TransformerEngine's recipes)
 * The scaling state of FP8 tensors lives on the device, so every update is
 * stream work (capturable, no host reads). For n tensor roles (a Linear's
 * input, weight and grad_output) amax_history is f32 (len, n) (or (len) when
 * n = 1), row 0 the amax being recorded (the casts max-accumulate into it);
 * scale and scale_inv are f32 (n). tg_fp8_scale_update does TE's delayed-scaling
 * update per role j: amax = the maximum of the column (most_recent: its row 0);
 * the rows roll up by one (row i gets row i + 1, the last row the old row 0,
 * row 0 becomes 0); scale = (fp8_max[j] / amax) / 2^margin when amax is finite
 * and > 0, else the previous scale is kept (an infinite scale becomes FLT_MAX);
 * scale_inv = 1 / scale. fp8_max[j] is the largest value of the role's format
 * (448 for E4M3, 57344 for E5M2). With len 1 and most_recent it is current
 * scaling: the scale from this amax. Errors name the tensor and its shape;
 * amax_history, scale and scale_inv must not share memory (TG_EINVAL naming
 * both: the update would read what it wrote), and a bad fp8_max[j] is named by
 * its index j. */
#define TG_FP8_MAX_ROLES 8 /* roles one tg_fp8_scale_update call takes at most */
TG_API tg_status tg_fp8_scale_update(tg_tensor *amax_history, tg_tensor *scale, tg_tensor *scale_inv, const double *fp8_max,
                                     int margin, int most_recent);

/* An FP8 recipe (TransformerEngine's recipe.DelayedScaling and
 * Float8CurrentScaling). Modules that run FP8 (Linear and the modules built of
 * Linears: LayerNormLinear, LayerNormMLP, CausalSelfAttention,
 * TransformerLayer; never the LM head) keep per Linear one scaling state of
 * three roles: input (x), weight and grad_output (dy), each with an amax
 * history, a scale and a scale_inv on the device. Formats: HYBRID casts x and
 * the weight to E4M3 and dy to E5M2, E4M3 casts all three to E4M3.
 *   delayed: the casts of step k max-accumulate their amaxes into row 0 of
 *     the history; the first forward of step k + 1 (microbatch 1) updates the
 *     scales with tg_fp8_scale_update (margin, amax_compute_algo) before it
 *     casts, so the scales used in a step come from the amaxes of the steps
 *     before it. The update is a kernel on the stream: a graph of microbatch 1
 *     holds it.
 *   current: every cast first computes its tensor's amax, then its scale
 *     (fp8_max / amax; the previous scale when amax is 0 or not finite).
 * The weight is cast (with its transpose) once per step, at microbatch 1, and
 * reused by the step's other microbatches. */
typedef enum tg_fp8_scaling { TG_FP8_OFF = 0, TG_FP8_DELAYED, TG_FP8_CURRENT } tg_fp8_scaling;
typedef enum tg_fp8_format { TG_FP8_HYBRID = 0, TG_FP8_FORMAT_E4M3 } tg_fp8_format;
typedef enum tg_fp8_amax_algo { TG_FP8_AMAX_MAX = 0, TG_FP8_AMAX_MOST_RECENT } tg_fp8_amax_algo;
typedef struct tg_fp8_recipe {
    tg_fp8_scaling scaling;             /* TG_FP8_OFF: the module computes in its dtype */
    tg_fp8_format format;               /* default TG_FP8_HYBRID */
    int margin;                         /* delayed: 0..127, default 0 */
    int amax_history_len;               /* delayed: >= 1, default 1024 */
    tg_fp8_amax_algo amax_compute_algo; /* delayed: default TG_FP8_AMAX_MAX */
} tg_fp8_recipe;
/* TE's defaults: delayed (margin 0, history 1024, max, HYBRID) or current (HYBRID). */
TG_API void tg_fp8_recipe_delayed(tg_fp8_recipe *r);
TG_API void tg_fp8_recipe_current(tg_fp8_recipe *r);
/* TG_EINVAL naming the field and its value when r is not a valid recipe. */
TG_API tg_status tg_fp8_recipe_check(const tg_fp8_recipe *r);
/* Sets the FP8 recipe of m and of every module under it (r NULL or
 * TG_FP8_OFF: off), as the module option fp8 does; the scaling states are
 * made now (fresh: histories 0, scales 1). Refused with TG_ECAPTURE while
 * m's device captures (as every call not allowed while capturing), with
 * TG_ESTATE while m belongs to a graphed set. */
TG_API tg_status tg_module_set_fp8(tg_module *m, const tg_fp8_recipe *r);
/* fp8_autocast: while set (active), modules run FP8 with *r when enabled,
 * or not at all when not enabled, whatever their own fp8 option; unset, each
 * module follows its option. tg_fp8_autocast_get reads the current setting
 * (to put it back after a region). Graphed callables keep what was in effect
 * when they were captured. */
TG_API tg_status tg_fp8_autocast_set(int active, int enabled, const tg_fp8_recipe *r);
TG_API void tg_fp8_autocast_get(int *active, int *enabled, tg_fp8_recipe *r);

/* ------------------------------------------------------------------ runtime (embedding)
 * A runtime is a Lua 5.4 state with the tegraph library loaded
 * (`tegraph` is require-able and also the global `tg`). The runtimes of a
 * process share the library's process-wide state: one step at a time (a
 * step belongs to the runtime whose script began it: another runtime's
 * tg.step_begin fails while it is open, saying so, and its tg.step_end does
 * not end it) and one trace. A runtime freed with its step or trace still
 * open (its script failed mid-step) ends them: the step is abandoned, what it
 * queued dropped, so the next runtime can step. The step is the process's:
 * while it is open, module calls from any runtime belong to it (a forward or
 * wgrad another runtime runs then counts in it, and is dropped with it). */
typedef struct tg_runtime tg_runtime;
typedef int (*tg_lua_cfunction)(struct lua_State *L);

/* Creates a runtime; NULL (the message in tg_last_error) on allocation
 * failure or when the tegraph Lua library cannot be loaded: it is looked for
 * in $TEGRAPH_LUA_PATH, then where `make install` put it.
 * Lua's standard libraries are open, except that os.exit raises an error
 * ("os.exit(N) in an embedded tegraph runtime ...") instead of ending the
 * host's process: a script's os.exit (or a command-line parser's exit on a
 * bad option) comes back as TG_ELUA. A runtime loads Lua source only: Lua does
 * not verify precompiled (binary) chunks, and a damaged one would crash the
 * process, so tg_runtime_dofile and tg_runtime_dostring fail (TG_ELUA, naming
 * the file or chunk) on one, as do the scripts' require, load, loadfile and
 * dofile (load and loadfile refuse the mode "b"; "bt" loads text only). */
TG_API tg_runtime *tg_runtime_new(void);
/* Gives rt's scripts Lua's own os.exit, which ends the process (what the
 * tegraph program does: it is the host). */
TG_API tg_status tg_runtime_allow_exit(tg_runtime *rt);
TG_API void tg_runtime_free(tg_runtime *rt);
/* Runs a script file with `arg` set like the lua interpreter (arg[0] =
 * path, arg[1..argc] = argv). On a Lua error returns TG_ELUA and the message
 * (first line "FILE:LINE: message", then a traceback) is in
 * tg_runtime_error(). */
TG_API tg_status tg_runtime_dofile(tg_runtime *rt, const char *path, int argc, char **argv);
/* Runs a chunk of Lua code; chunkname as in lua_load (e.g. "=(command line)"). */
TG_API tg_status tg_runtime_dostring(tg_runtime *rt, const char *code, const char *chunkname);
/* Calls require(module)[func](argv[0], ..., argv[argc-1]), the arguments as
 * Lua strings. When result is not NULL and the function's first result is an
 * integer, *result is set to it (else it is left as it was; an integer outside
 * the int range is an error, never truncated). Errors as in
 * tg_runtime_dofile (a missing module or function too). */
TG_API tg_status tg_runtime_call(tg_runtime *rt, const char *module, const char *func, int argc, char **argv,
                                 int *result);
/* The message of this runtime's last failing call ("" if none): every
 * tg_runtime_* call on rt that fails sets it, argument errors included. */
TG_API const char *tg_runtime_error(const tg_runtime *rt);
/* The Lua state, for hosts that want the full Lua C API. */
TG_API struct lua_State *tg_runtime_lua(tg_runtime *rt);
/* Registers fn as the global `name` and as tegraph.host[name]. */
TG_API tg_status tg_runtime_register(tg_runtime *rt, const char *name, tg_lua_cfunction fn);

/* ------------------------------------------------------------------ C functions called from Lua
 * For functions a host registers (tg_runtime_register): tensors on the Lua stack. */
/* Opens the `tegraph.core` module (what `require "tegraph.core"` calls);
 * pushes the core table. A runtime preloads it already. */
TG_API int luaopen_tegraph_core(struct lua_State *L);
/* The same under another name: for a Lua C module that is itself loaded as
 * `tegraph.core` (as lua/tegraph.so is), whose own luaopen_tegraph_core would
 * otherwise call itself. */
TG_API int tg_lua_open_core(struct lua_State *L);

/* The tensor at stack index idx. Raises a Lua error when the value is not a
 * tegraph tensor or the tensor was closed. The handle stays owned by Lua:
 * do not free it, and do not keep it after the value may be collected. */
TG_API tg_tensor *tg_lua_checktensor(struct lua_State *L, int idx);
/* Like tg_lua_checktensor, but returns NULL when the value is not a tensor or is a closed one. */
TG_API tg_tensor *tg_lua_totensor(struct lua_State *L, int idx);
/* The parameter at stack index idx (a tegraph.Parameter: an element of
 * module:parameters()). Raises a Lua error when it is not one. The parameter
 * lives at least as long as its Lua value or its module. */
TG_API tg_param *tg_lua_checkparam(struct lua_State *L, int idx);
/* The module at stack index idx (a tegraph.Module). Raises a Lua error when
 * it is not one. It lives at least as long as its Lua value. */
TG_API tg_module *tg_lua_checkmodule(struct lua_State *L, int idx);
/* Pushes a new, empty Lua tensor and returns its handle slot (NULL inside).
 * Acquire the tensor straight into the slot (tg_tensor_new(..., slot)) so
 * Lua owns it from the start and a later error cannot leak it. */
TG_API tg_tensor **tg_lua_newtensor(struct lua_State *L);
/* Raises a Lua error carrying tg_last_error() when st is not TG_OK (the
 * message gets the Lua caller's FILE:LINE); returns 0 otherwise. */
TG_API int tg_lua_check(struct lua_State *L, tg_status st);

#ifdef __cplusplus
}
#endif
#endif /* TEGRAPH_H */
