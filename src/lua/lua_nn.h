/* lua_nn.h — the nn bindings (lua_nn.c, lua_param.c, lua_module.c, lua_nn_new.c, lua_ops.c) for the rest of src/lua. */
#ifndef TG_LUA_NN_H
#define TG_LUA_NN_H

#include "lua/lua_impl.h"

struct tg_module;
struct tg_param;

/* Sets core.nn (module constructors, Parameter), core.ops (tensor ops for
 * custom layers), the step API (core.step_begin, step_end, step_index,
 * step_open, hook_check) and core.time / core.isatty on the table at the top
 * of the stack (the core table). lua_core.c calls it from tg_lua_open_core. */
int tg_lua_open_nn(lua_State *L);

/* Sets core.ops on the table at the top of the stack (lua_ops.c). */
void tgl_open_ops(lua_State *L);

/* Hooks and Lua-table modules run their Lua functions on the thread that
 * called into the engine. Bindings that call engine functions which may fire
 * hooks (backward, backward_dw, graph replays, schedule executors) bracket
 * the call: `lua_State *prev = tgl_nn_enter(L); st = ...; tgl_nn_leave(prev);`.
 * Without it the callbacks run on the main thread of the state they were
 * registered in (fine unless the caller is a coroutine). */
lua_State *tgl_nn_enter(lua_State *L);
void tgl_nn_leave(lua_State *prev);

/* The tg_module of a tegraph.Module userdata, or of a Lua module table (wrapped
 * once into a callback module; the wrapper replaces the table at idx so it
 * stays alive); raises otherwise. */
struct tg_module *tgl_module_check(lua_State *L, int idx);

/* Sets core.graph (lua_graph.c). */
void tgl_open_graph(lua_State *L);
/* The graphed set and the chunk index (in it) of the Graphed callable at idx; raises otherwise. */
struct tg_graphed *tgl_graphed_check(lua_State *L, int idx, int *chunk);
/* Sets core.sched: the schedule executor and traces (lua_sched.c). */
void tgl_open_sched(lua_State *L);

/* ------------------------------------------------------------------ shared by the nn bindings */
#define TGL_MODULE "tegraph.Module"
#define TGL_PARAM "tegraph.Parameter"

/* A Lua value (in the registry) held by a C callback: a hook function or a
 * Lua-table module. The anchor knows the state's main thread and whether the
 * state is still open (a parameter may outlive its Lua state in a C host). */
struct tgl_anchor;
struct tgl_ref {
    struct tgl_anchor *anchor;
    int ref;
};
struct tgl_ref *tgl_ref_new(lua_State *L, int idx);
void tgl_ref_free(void *ud); /* a free_ud for the engine */
/* Runs body(L) with the light userdata arg, protected, on the thread of r's
 * state (see tgl_nn_enter); an error becomes TG_ELUA with the Lua message
 * (FILE:LINE included). what names the callback if the state is closed. */
tg_status tgl_protected_call(struct tgl_ref *r, lua_CFunction body, void *arg, const char *what);

/* One userdata per C object (weak map): pushes it and returns 1, or returns 0. */
int tgl_objects_get(lua_State *L, const void *p);
void tgl_objects_set(lua_State *L, const void *p, int idx);
/* A metatable `name` with methods behind an __index closure (index(L) with the
 * method table as upvalue 1), __gc, __tostring and an optional __newindex. */
void tgl_new_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction index, lua_CFunction gc,
                   lua_CFunction tostring, lua_CFunction newindex);
int tgl_field_bool(lua_State *L, int t, const char *k);

/* Parameters and hooks (lua_param.c) */
struct tg_param *tgl_param_check(lua_State *L, int idx);
void tgl_param_push(lua_State *L, struct tg_param *p);
/* Adds the Lua function at fnidx as a wgrad hook of p; returns its id (tg_param_remove_hook). */
int tgl_hook_add(lua_State *L, struct tg_param *p, int fnidx);
/* Pushes a new tensor handle on t's storage (nil for NULL). */
void tgl_push_tensor_ref(lua_State *L, const tg_tensor *t);
int tgl_nn_parameter(lua_State *L); /* tg.nn.Parameter */
void tgl_open_param(lua_State *L);

/* Modules (lua_module.c). User value 1: fields table (a Lua-table module's
 * own table); 2: values kept alive with the module (children, tied). */
struct tgl_module {
    struct tg_module *m;
};
struct tgl_module *tgl_module_box(lua_State *L, int idx);
/* Pushes an empty Module box (fields: a table index, or 0 for a new table). */
struct tg_module **tgl_module_newbox(lua_State *L, int fields);
/* Keeps the value at idx alive as long as the module at midx. */
void tgl_module_keep(lua_State *L, int midx, int idx);
int tgl_nn_module(lua_State *L); /* tg.nn.Module */
/* The microbatch protocol's arguments (modules and graphed callables):
 * forward(x, mb), backward(dy, mb), backward_dw(mb). tgl_mb_arg: an integer
 * >= 1, or 0 when omitted (the engine picks); a tensor there is an argument
 * error saying the tensor comes first. tgl_protocol_tensor: the tensor of
 * `call` (e.g. "forward(x, mb)"); a number there is an argument error saying
 * the microbatch comes last. */
int tgl_mb_arg(lua_State *L, int idx);
tg_tensor *tgl_protocol_tensor(lua_State *L, int idx, const char *call);
void tgl_open_module(lua_State *L);

/* Constructors (lua_nn_new.c): sets them into the table at the top. */
void tgl_nn_constructors(lua_State *L);

#endif
