/* lua_nn.h — entry points of the nn bindings (lua_nn.c, lua_ops.c) for the rest of src/lua. */
#ifndef TG_LUA_NN_H
#define TG_LUA_NN_H

#include "lua/lua_impl.h"

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

#endif
