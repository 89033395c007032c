/* lua_step.c — the step API: core.step_begin, step_end, step_index, step_open, hook_check, and debug (the test-only switches). */
#include "core/debug.h"
#include "lua/lua_impl.h"
#include "nn/nn.h"

/* The identity of L's Lua state (its main thread, which its coroutines share): the owner of the steps it begins. */
static const void *state_id(lua_State *L)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    const void *id = lua_topointer(L, -1);
    lua_pop(L, 1);
    return id;
}

/* tg.step_begin{microbatches=M} or tg.step_begin(M) -> step index */
static int l_step_begin(lua_State *L)
{
    lua_Integer m = 1;
    if (lua_istable(L, 1)) {
        tgl_check_keys(L, 1, "step_begin", "microbatches");
        if (lua_getfield(L, 1, "microbatches") != LUA_TNIL) {
            int isint = 0;
            m = lua_tointegerx(L, -1, &isint);
            if (!isint) {
                const char *ty = luaL_typename(L, -1);
                return luaL_error(L, "step_begin: microbatches must be an integer (got %s %s)", ty, tgl_value_str(L, -1));
            }
        }
        lua_settop(L, 1);
    } else {
        m = luaL_optinteger(L, 1, 1);
    }
    luaL_argcheck(L, m >= 1 && m <= 1 << 20, 1, "microbatches must be an integer from 1 to 1048576");
    tgl_check(L, tg_step_begin_by((int)m, state_id(L)));
    lua_pushinteger(L, (lua_Integer)tg_step_index());
    return 1;
}

static int l_step_end(lua_State *L)
{
    tgl_check(L, tg_step_end_by(state_id(L)));
    return 0;
}

static int l_step_index(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)tg_step_index());
    return 1;
}

static int l_step_open(lua_State *L)
{
    lua_pushboolean(L, tg_step_open());
    return 1;
}

/* tg.hook_check([on]) -> the previous setting */
static int l_hook_check(lua_State *L)
{
    if (!lua_isnone(L, 1)) luaL_checktype(L, 1, LUA_TBOOLEAN); /* "off" or 0 would read as true */
    lua_pushboolean(L, tg_hook_check_get());
    if (!lua_isnone(L, 1)) tg_hook_check_set(lua_toboolean(L, 1));
    return 1;
}

/* tg.debug(name [, on]) -> the flag's previous setting; turns it on or off when on is given.
 * Test-only switches (core/debug.h): "skip_hooks_after_replay", "unfused_residual", ... */
static int l_debug(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    int f = tg_debug_lookup(name);
    if (f < 0) {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        for (int i = 0; i < TG_DEBUG_COUNT; i++) {
            luaL_addstring(&b, i ? ", " : "");
            luaL_addstring(&b, tg_debug_name((tg_debug_flag)i));
        }
        luaL_pushresult(&b);
        return luaL_argerror(L, 1, lua_pushfstring(L, "no debug flag '%s' (flags: %s)", name, lua_tostring(L, -1)));
    }
    if (lua_isnoneornil(L, 2)) {
        lua_pushboolean(L, tg_debug_get((tg_debug_flag)f));
    } else {
        luaL_checktype(L, 2, LUA_TBOOLEAN);
        lua_pushboolean(L, tg_debug_set((tg_debug_flag)f, lua_toboolean(L, 2)));
    }
    return 1;
}

static const luaL_Reg step_funcs[] = {
    {"step_begin", l_step_begin},
    {"step_end", l_step_end},
    {"step_index", l_step_index},
    {"step_open", l_step_open},
    {"hook_check", l_hook_check},
    {"debug", l_debug},
    {NULL, NULL},
};

/* The engine's step is process-wide: a Lua state that began one and goes away before step_end (a script failed
 * mid-step, then tg_runtime_free or lua_close) abandons it through this sentinel's __gc, so the next state can
 * begin steps (as the trace's sentinel ends a trace, lua_trace.c). Made once per state, when the library opens:
 * collected last at close, after the state's modules. */
#define TGL_STEP_SENTINEL "tegraph.step_sentinel"

static int step_sentinel_gc(lua_State *L)
{
    tg_step_abandon(*(const void **)lua_touserdata(L, 1));
    return 0;
}

void tgl_open_step(lua_State *L)
{
    luaL_setfuncs(L, step_funcs, 0);
    if (lua_getfield(L, LUA_REGISTRYINDEX, TGL_STEP_SENTINEL) == LUA_TNIL) {
        const void **owner = lua_newuserdatauv(L, sizeof *owner, 0);
        *owner = state_id(L);
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, step_sentinel_gc);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        lua_setfield(L, LUA_REGISTRYINDEX, TGL_STEP_SENTINEL);
    }
    lua_pop(L, 1);
}
