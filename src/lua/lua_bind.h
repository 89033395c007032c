/* lua_bind.h — the bindings' machinery (lua_bind.c): callbacks into Lua, the object map, class helpers. */
#ifndef TG_LUA_BIND_H
#define TG_LUA_BIND_H

#include "lua/lua_impl.h"

/* The anchor and the object map of L's state; idempotent. tgl_open_nn calls
 * it before any binding makes callbacks or userdata of C objects. */
void tgl_bind_init(lua_State *L);

/* Hooks and Lua-table modules run their Lua functions on the thread that
 * called into the engine. Bindings that call engine functions which may fire
 * hooks (backward, backward_dw, graph replays, schedule executors) bracket
 * the call: `lua_State *prev = tgl_nn_enter(L); st = ...; tgl_nn_leave(prev);`.
 * Without it the callbacks run on the main thread of the state they were
 * registered in (fine unless the caller is a coroutine). */
lua_State *tgl_nn_enter(lua_State *L);
void tgl_nn_leave(lua_State *prev);
/* Whether an engine call is running below the Lua code that runs now (a
 * hook, a Lua-table module, a schedule callback): what the engine uses must
 * not be freed then. */
int tgl_in_engine(void);
/* release(p) now, or, inside an engine call, once the outermost one returns
 * (tgl_nn_leave) or the state closes: for __gc of objects an engine call may
 * be using (a module whose own hook calls its __gc). */
void tgl_release_when_idle(void (*release)(void *), void *p);
/* The tensors an engine call reads, held by handles of the call's own for its length: a hook or a Lua-table
 * module it runs may close or collect the caller's handles (x:close() in a forward pre-hook). tgl_hold replaces
 * each non-NULL t[i] by a new reference to it; tgl_unhold frees those (call it before tgl_check of the result). */
void tgl_hold(lua_State *L, const tg_tensor **t, int n);
void tgl_unhold(const tg_tensor **t, int n);

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
/* Whether r holds the very value at idx (a hook function registered twice). */
int tgl_ref_is(lua_State *L, const struct tgl_ref *r, int idx);
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

#endif
