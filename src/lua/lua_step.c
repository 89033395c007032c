/* lua_step.c — the step API: core.step_begin, step_end, step_index, step_open, hook_check, and debug (the test-only switches). */
#include "core/debug.h"
#include "lua/lua_impl.h"
#include "nn/nn.h"

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
    tgl_check(L, tg_step_begin((int)m));
    lua_pushinteger(L, (lua_Integer)tg_step_index());
    return 1;
}

static int l_step_end(lua_State *L)
{
    tgl_check(L, tg_step_end());
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

void tgl_open_step(lua_State *L) { luaL_setfuncs(L, step_funcs, 0); }
