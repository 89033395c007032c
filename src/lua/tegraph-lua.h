/* tegraph-lua.h — public API for C functions called from Lua: tensors on the Lua stack, the core module. */
#ifndef TEGRAPH_LUA_H
#define TEGRAPH_LUA_H

#include "tegraph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens the `tegraph.core` module (what `require "tegraph.core"` calls);
 * pushes the core table. A runtime preloads it already. */
TG_API int luaopen_tegraph_core(struct lua_State *L);

/* The tensor at stack index idx. Raises a Lua error when the value is not a
 * tegraph tensor or the tensor was closed. The handle stays owned by Lua:
 * do not free it, and do not keep it after the value may be collected. */
TG_API tg_tensor *tg_lua_checktensor(struct lua_State *L, int idx);
/* Like tg_lua_checktensor, but returns NULL when the value is not a tensor. */
TG_API tg_tensor *tg_lua_totensor(struct lua_State *L, int idx);
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
#endif /* TEGRAPH_LUA_H */
