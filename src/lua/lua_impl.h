/* lua_impl.h — internal helpers shared by the Lua bindings (userdata boxes, argument checks, errors). */
#ifndef TG_LUA_IMPL_H
#define TG_LUA_IMPL_H

#include "config.h"
#include "tegraph.h"

#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <lualib.h>

#define TGL_TENSOR "tegraph.Tensor"
#define TGL_STREAM "tegraph.Stream"
#define TGL_GRAPH "tegraph.Graph"
#define TGL_POOL "tegraph.Pool"
#define TGL_EVENT "tegraph.Event"

/* The userdata boxes: a NULL handle means closed (or not yet acquired). */
struct tgl_tensor {
    tg_tensor *t;
};
struct tgl_stream {
    tg_stream *s;
    int owned; /* created by tg.stream.new (freed by __gc); else a core stream */
    int held;  /* tg.stream.capture captures on it: __gc leaves the stream to it (closing) */
    tg_stream *closing; /* closed by __gc while held: freed when the capture ends */
};
struct tgl_graph {
    tg_graph *g;
    tg_device dev;
};
struct tgl_pool {
    tg_pool *p;
};
struct tgl_event {
    tg_event *e;
    tg_device dev;
};
/* Reads an optional replay options table {stream = s, wait = event} at idx
 * (none or nil: both NULL); raises naming `what` on anything else. */
void tgl_replay_opts(lua_State *L, int idx, const char *what, tg_stream **s, tg_event **wait);

/* Raises a Lua error with the core's message when st is not TG_OK. The
 * message gets the position of the Lua caller of the running C function. */
void tgl_check(lua_State *L, tg_status st);

/* Tensors (lua_tensor.c) */
/* Pushes a new, empty tensor userdata and returns its slot; the caller
 * acquires the tensor into the slot (so an error after that cannot leak it). */
tg_tensor **tgl_tensor_push(lua_State *L);
/* The open tensor at idx (raises "tensor used after close" when closed). */
tg_tensor *tgl_tensor_check(lua_State *L, int idx);
/* The tensor at idx or NULL when idx is not a tensor (raises when closed). */
tg_tensor *tgl_tensor_test(lua_State *L, int idx);
/* Reads a shape: a table {d1, d2, ...} at arg, or integers from arg on.
 * Returns ndim; *next is the first argument after the shape. */
int tgl_shape_check(lua_State *L, int arg, int64_t shape[TG_MAX_DIMS], int *next);
/* Pushes a table {d1, d2, ...}. */
void tgl_shape_push(lua_State *L, int ndim, const int64_t *shape);
/* Parses a nested table of numbers (or a number) at idx: its shape, and,
 * when vals is not NULL, its elements in row-major order (vals holds n). */
int tgl_nested_shape(lua_State *L, int idx, int64_t shape[TG_MAX_DIMS]);
void tgl_nested_read(lua_State *L, int idx, int ndim, const int64_t *shape, double *vals);
/* The device named by a string, "cpu" / "cuda:N" (raises on bad names). */
tg_device tgl_device_check(lua_State *L, int idx);
tg_dtype tgl_dtype_check(lua_State *L, int idx);
void tgl_device_push(lua_State *L, tg_device d);
void tgl_open_tensor(lua_State *L);

/* Streams, graphs, pools (lua_stream.c): sets core.stream and core.pool on
 * the table at the top of the stack. */
void tgl_open_stream(lua_State *L);
/* The trace (lua_trace.c): sets core.trace. */
void tgl_open_trace(lua_State *L);
/* The step API (lua_step.c): sets core.step_begin, step_end, step_index,
 * step_open and hook_check on the table at the top of the stack. */
void tgl_open_step(lua_State *L);
/* Files and signals (lua_io.c): sets core.save, load, safetensors, write_atomic, fs and signals. */
void tgl_open_io(lua_State *L);
/* Tokenizers and the sampler (lua_text.c): sets core.tokenizer and core.sampler. */
void tgl_open_text(lua_State *L);

/* luaL_checkinteger / luaL_optinteger for C int arguments: a value outside
 * the int range is refused (never truncated). */
int tgl_checkint(lua_State *L, int idx);
int tgl_optint(lua_State *L, int idx, int def);
/* luaL_len of a list the C side counts in an int: a length outside 0..INT_MAX (a __len returning 2^32 + 1)
 * is refused, never truncated. */
int tgl_len(lua_State *L, int idx);
/* luaL_checkstring for a string C reads up to its NUL (a path, a tensor name): one holding a NUL byte is refused,
 * what ("the path") naming it, never cut short ("a\0.txt" would write to "a"). tgl_optcstr: NULL when nil. */
const char *tgl_checkcstr(lua_State *L, int idx, const char *what);
const char *tgl_optcstr(lua_State *L, int idx, const char *what);

/* Refuses a key of the options table at idx outside known (", "-separated names): a misspelt
 * option would otherwise be ignored. "what: unknown option 'k' (known: ...)". */
void tgl_check_keys(lua_State *L, int idx, const char *what, const char *known);
/* The value at idx as an error message shows it (pushed): a float with an integer value as that integer
 * (2^32 + 1 as 4294967297, not 4294967297.0), a string as itself, else luaL_tolstring's form. */
const char *tgl_value_str(lua_State *L, int idx);

#endif
