/* lua_nn.c — the nn bindings' base: callbacks into Lua (anchor, thread, registry refs), the object map, the step API. */
#include "core/debug.h"
#include "lua/lua_nn.h"
#include "nn/nn.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TGL_ANCHOR "tegraph.nn.anchor"   /* registry: the anchor box of this state */
#define TGL_OBJECTS "tegraph.nn.objects" /* registry: weak, C pointer -> its userdata */

/* ------------------------------------------------------------------ anchor and the calling thread
 * Hooks and Lua-table modules are C callbacks that hold Lua values in the
 * registry. They share an anchor: the main thread, and whether the state is
 * still open (a parameter may outlive its Lua state when a C host keeps it). */
struct tgl_anchor {
    lua_State *L; /* main thread */
    int alive;
    int refs;     /* the registry box + one per callback */
};

struct tgl_anchor_box {
    struct tgl_anchor *a;
};

static void anchor_release(struct tgl_anchor *a)
{
    if (a && --a->refs == 0) free(a);
}

static int anchor_gc(lua_State *L)
{
    struct tgl_anchor_box *b = lua_touserdata(L, 1);
    if (b->a) {
        b->a->alive = 0;
        anchor_release(b->a);
        b->a = NULL;
    }
    return 0;
}

/* The anchor of L's state, with a new reference for a callback. */
static struct tgl_anchor *anchor_get(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_ANCHOR); /* +1 */
    struct tgl_anchor_box *b = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (b == NULL || b->a == NULL) luaL_error(L, "tegraph.nn is not initialised in this Lua state");
    b->a->refs++;
    return b->a;
}

static _Thread_local lua_State *cur_L;

lua_State *tgl_nn_enter(lua_State *L)
{
    lua_State *prev = cur_L;
    cur_L = L;
    return prev;
}

void tgl_nn_leave(lua_State *prev) { cur_L = prev; }

/* The thread a callback of anchor a runs on: the thread that entered the
 * engine when it belongs to a's state, else a's main thread; NULL once closed. */
static lua_State *anchor_thread(struct tgl_anchor *a)
{
    if (!a->alive) return NULL;
    if (cur_L && cur_L != a->L && lua_checkstack(cur_L, 2)) {
        lua_rawgeti(cur_L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD); /* +1 */
        int same = lua_tothread(cur_L, -1) == a->L;
        lua_pop(cur_L, 1);
        if (same) return cur_L;
    }
    return a->L;
}

struct tgl_ref *tgl_ref_new(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    struct tgl_ref *r = malloc(sizeof *r);
    if (r == NULL) luaL_error(L, "out of memory");
    r->anchor = anchor_get(L);
    lua_pushvalue(L, idx);
    r->ref = luaL_ref(L, LUA_REGISTRYINDEX); /* -1 */
    return r;
}

void tgl_ref_free(void *ud)
{
    struct tgl_ref *r = ud;
    if (r == NULL) return;
    if (r->anchor->alive) luaL_unref(r->anchor->L, LUA_REGISTRYINDEX, r->ref);
    anchor_release(r->anchor);
    free(r);
}

/* The engine prefixes the error with the hook or module that failed. */
tg_status tgl_protected_call(struct tgl_ref *r, lua_CFunction body, void *arg, const char *what)
{
    lua_State *L = anchor_thread(r->anchor);
    if (L == NULL) return tg_error(TG_ESTATE, "%s: the Lua state it belongs to is closed", what);
    if (!lua_checkstack(L, 3)) return tg_error(TG_ENOMEM, "%s: Lua stack overflow", what);
    int top = lua_gettop(L);
    lua_pushcfunction(L, body);
    lua_pushlightuserdata(L, arg);
    if (lua_pcall(L, 1, 0, 0) == LUA_OK) return TG_OK;
    const char *msg = lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER
                          ? lua_tostring(L, -1)
                          : lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, -1));
    tg_status st = tg_error(TG_ELUA, "%s", msg ? msg : "(out of memory)");
    lua_settop(L, top);
    return st;
}

/* ------------------------------------------------------------------ the object map
 * One userdata per C object, so a parameter seen by a hook is the same Lua
 * value as the one from m:parameters() (usable as a table key). */
int tgl_objects_get(lua_State *L, const void *p)
{
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_OBJECTS); /* +1 */
    lua_rawgetp(L, -1, p);                           /* +1 */
    lua_remove(L, -2);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    return 1;
}

void tgl_objects_set(lua_State *L, const void *p, int idx)
{
    idx = lua_absindex(L, idx);
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_OBJECTS); /* +1 */
    lua_pushvalue(L, idx);
    lua_rawsetp(L, -2, p);
    lua_pop(L, 1);
}

int tgl_field_bool(lua_State *L, int t, const char *k)
{
    lua_getfield(L, t, k);
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* ------------------------------------------------------------------ steps and hook checking */

/* tg.step_begin{microbatches=M} or tg.step_begin(M) -> step index */
static int l_step_begin(lua_State *L)
{
    lua_Integer m;
    if (lua_istable(L, 1)) {
        lua_getfield(L, 1, "microbatches");
        m = luaL_optinteger(L, -1, 1);
        lua_pop(L, 1);
    } else {
        m = luaL_optinteger(L, 1, 1);
    }
    luaL_argcheck(L, m >= 1 && m <= 1 << 20, 1, "microbatches must be >= 1");
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

/* tg.time(): monotonic wall-clock seconds (progress, tokens/s). */
static int l_time(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

/* tg.isatty([file or fd]): whether it is a terminal (default io.stdout). */
static int l_isatty(lua_State *L)
{
    int fd = 1;
    if (lua_isinteger(L, 1)) {
        fd = (int)lua_tointeger(L, 1);
    } else if (!lua_isnoneornil(L, 1)) {
        luaL_Stream *s = luaL_checkudata(L, 1, LUA_FILEHANDLE);
        if (s->closef == NULL || s->f == NULL) return luaL_argerror(L, 1, "file is closed");
        fd = fileno(s->f);
    }
    lua_pushboolean(L, isatty(fd));
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

/* A metatable with methods behind an __index closure, __gc, __tostring. */
void tgl_new_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction index, lua_CFunction gc,
                      lua_CFunction tostring, lua_CFunction newindex)
{
    luaL_newmetatable(L, name); /* +1 */
    lua_newtable(L);            /* +1: the methods */
    luaL_setfuncs(L, methods, 0);
    lua_pushcclosure(L, index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tostring);
    lua_setfield(L, -2, "__tostring");
    if (newindex) {
        lua_pushcfunction(L, newindex);
        lua_setfield(L, -2, "__newindex");
    }
    lua_pop(L, 1);
}

/* A registry table with the given weak mode, once per state. */
static void weak_table(lua_State *L, const char *key, const char *mode)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) {
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, key);
}

int tg_lua_open_nn(lua_State *L)
{
    int core = lua_gettop(L);
    if (lua_getfield(L, LUA_REGISTRYINDEX, TGL_ANCHOR) == LUA_TNIL) { /* +1 */
        struct tgl_anchor_box *b = lua_newuserdatauv(L, sizeof *b, 0); /* +1 */
        b->a = NULL;
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, anchor_gc);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        b->a = calloc(1, sizeof *b->a);
        if (b->a == NULL) return luaL_error(L, "out of memory");
        lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
        b->a->L = lua_tothread(L, -1);
        lua_pop(L, 1);
        b->a->alive = 1;
        b->a->refs = 1;
        lua_setfield(L, LUA_REGISTRYINDEX, TGL_ANCHOR);
    }
    lua_pop(L, 1);
    weak_table(L, TGL_OBJECTS, "v");
    tgl_open_param(L);
    tgl_open_module(L);

    lua_newtable(L); /* +1: core.nn */
    tgl_nn_constructors(L);
    lua_setfield(L, core, "nn");
    luaL_setfuncs(L, step_funcs, 0);
    tgl_open_ops(L);
    if (lua_getfield(L, core, "time") == LUA_TNIL) {
        lua_pushcfunction(L, l_time);
        lua_setfield(L, core, "time");
    }
    if (lua_getfield(L, core, "isatty") == LUA_TNIL) {
        lua_pushcfunction(L, l_isatty);
        lua_setfield(L, core, "isatty");
    }
    lua_settop(L, core);
    return 0;
}
