/* runtime.c — the embedding runtime: a Lua state with tegraph loaded, running files and strings. */
#include "lua/lua_impl.h"
#include "core/core.h" /* tg_error */

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct tg_runtime {
    lua_State *L;
    char *err; /* last error (malloc'd), NULL if none */
};

/* Appends "DIR/?.lua;DIR/?/init.lua;" (or the entry itself when it already
 * is a template with '?') for each ';'-separated entry of dirs. */
static void add_dirs(luaL_Buffer *b, const char *dirs)
{
    while (dirs && *dirs) {
        const char *end = strchr(dirs, ';');
        size_t n = end ? (size_t)(end - dirs) : strlen(dirs);
        if (n > 0) {
            if (memchr(dirs, '?', n)) {
                luaL_addlstring(b, dirs, n);
                luaL_addchar(b, ';');
            } else {
                luaL_addlstring(b, dirs, n);
                luaL_addstring(b, "/?.lua;");
                luaL_addlstring(b, dirs, n);
                luaL_addstring(b, "/?/init.lua;");
            }
        }
        dirs = end ? end + 1 : NULL;
    }
}

/* os.exit in a runtime a host embeds: the library never ends the host's process, so a script's os.exit is an
 * error the host gets back (TG_ELUA). The tegraph program puts Lua's own os.exit back (tg_runtime_allow_exit). */
static int rt_no_exit(lua_State *L)
{
    /* the code as the script gave it: an int cast would report os.exit(2^40) as os.exit(0) */
    lua_Integer code = lua_isboolean(L, 1) ? (lua_toboolean(L, 1) ? 0 : 1) : luaL_optinteger(L, 1, 0);
    return luaL_error(L, "os.exit(%I) in an embedded tegraph runtime: the host ends its process, not the script",
                      (LUAI_UACINT)code);
}

#define RT_OS_EXIT "tegraph.os_exit" /* registry key: Lua's own os.exit */

/* Runs in protected mode: libraries, preload, package.path, global tg. */
static int rt_setup(lua_State *L)
{
    luaL_openlibs(L);
    lua_getglobal(L, "os"); /* +1 */
    lua_getfield(L, -1, "exit");
    lua_setfield(L, LUA_REGISTRYINDEX, RT_OS_EXIT);
    lua_pushcfunction(L, rt_no_exit);
    lua_setfield(L, -2, "exit");
    lua_pop(L, 1);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE); /* +1: package.preload */
    lua_pushcfunction(L, tg_lua_open_core);
    lua_setfield(L, -2, "tegraph.core");
    lua_pop(L, 1);

    /* package.path = $TEGRAPH_LUA_PATH; the installed Lua library; then what Lua chose. (The build
     * tree's ./tegraph sets TEGRAPH_LUA_PATH to the source tree's lua/: src/cli/local.mk.) */
    luaL_Buffer b;
    lua_getglobal(L, "package"); /* +1 */
    luaL_buffinit(L, &b);
    add_dirs(&b, getenv("TEGRAPH_LUA_PATH"));
    add_dirs(&b, TG_LUADIR);
    lua_getfield(L, -2, "path"); /* +1, added to the buffer below */
    luaL_addvalue(&b);
    luaL_pushresult(&b); /* +1 */
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);

    lua_getglobal(L, "require"); /* tg = require "tegraph" */
    lua_pushstring(L, "tegraph");
    lua_call(L, 1, 1);
    lua_setglobal(L, "tg");
    return 0;
}

/* The message handler: the message (made a string) plus a traceback, like lua.c. */
static int rt_msghandler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

static void rt_set_error(tg_runtime *rt, const char *msg)
{
    free(rt->err);
    rt->err = strdup(msg ? msg : "(no error message)");
}

/* Every failing call of a runtime keeps its message as the runtime's error, so that a host printing
 * tg_runtime_error() after any failure prints this failure, not an older script's. */
static tg_status rt_fail(tg_runtime *rt, tg_status st)
{
    rt_set_error(rt, tg_last_error());
    return st;
}

/* Calls the function below narg arguments with the message handler, leaving
 * nres results; on error keeps the message and returns TG_ELUA. */
static tg_status rt_docall(tg_runtime *rt, int narg, int nres)
{
    lua_State *L = rt->L;
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, rt_msghandler);
    lua_insert(L, base);
    int st = lua_pcall(L, narg, nres, base);
    lua_remove(L, base);
    if (st == LUA_OK) return TG_OK;
    rt_set_error(rt, lua_tostring(L, -1));
    lua_pop(L, 1);
    return tg_error(TG_ELUA, "%s", rt->err);
}

tg_runtime *tg_runtime_new(void)
{
    tg_runtime *rt = calloc(1, sizeof *rt);
    if (rt == NULL) {
        tg_error(TG_ENOMEM, "runtime: out of memory");
        return NULL;
    }
    rt->L = luaL_newstate();
    if (rt->L == NULL) {
        free(rt);
        tg_error(TG_ENOMEM, "runtime: cannot create a Lua state (out of memory)");
        return NULL;
    }
    lua_pushcfunction(rt->L, rt_setup);
    if (rt_docall(rt, 0, 0) != TG_OK) {
        tg_error(TG_ELUA, "runtime: cannot load the tegraph Lua library: %s", rt->err);
        tg_runtime_free(rt);
        return NULL;
    }
    return rt;
}

void tg_runtime_free(tg_runtime *rt)
{
    if (rt == NULL) return;
    if (rt->L) lua_close(rt->L);
    free(rt->err);
    free(rt);
}

/* Sets the global `arg` (protected): arg[0] = path, arg[i] = argv[i-1]; returns the table, from which the
 * script's `...` is pushed without allocating outside a pcall. */
static int rt_setarg(lua_State *L)
{
    const char *path = lua_touserdata(L, 1);
    int argc = (int)lua_tointeger(L, 2);
    char **argv = lua_touserdata(L, 3);
    lua_createtable(L, argc, 1);
    lua_pushstring(L, path);
    lua_rawseti(L, -2, 0);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushvalue(L, -1);
    lua_setglobal(L, "arg");
    return 1;
}

/* Loads the file (protected: luaL_loadfilex allocates its messages, and an allocation error outside a pcall makes
 * Lua panic). */
static int rt_loadfile(lua_State *L)
{
    const char *path = lua_touserdata(L, 1);
    if (luaL_loadfilex(L, path, NULL) != LUA_OK) return lua_error(L);
    return 1;
}

/* Calls the function below narg arguments without a message handler (a load error is its message alone, with no
 * traceback); on error keeps the message and returns TG_ELUA. */
static tg_status rt_docall_plain(tg_runtime *rt, int narg, int nres)
{
    lua_State *L = rt->L;
    if (lua_pcall(L, narg, nres, 0) == LUA_OK) return TG_OK;
    rt_set_error(rt, lua_tostring(L, -1));
    lua_pop(L, 1);
    return tg_error(TG_ELUA, "%s", rt->err);
}

tg_status tg_runtime_dofile(tg_runtime *rt, const char *path, int argc, char **argv)
{
    if (rt == NULL) return tg_error(TG_EINVAL, "runtime: dofile on a NULL runtime");
    lua_State *L = rt->L;
    if (path == NULL) return rt_fail(rt, tg_error(TG_EINVAL, "runtime: dofile needs a path"));
    if (argc < 0 || (argc > 0 && argv == NULL))
        return rt_fail(rt, tg_error(TG_EINVAL, "runtime: dofile with argc %d and %s argv", argc,
                                    argv ? "an" : "a NULL"));
    if (!lua_checkstack(L, argc + 4))
        return rt_fail(rt, tg_error(TG_ENOMEM, "runtime: too many script arguments (%d)", argc));
    int top = lua_gettop(L);
    lua_pushcfunction(L, rt_setarg);
    lua_pushlightuserdata(L, (void *)path);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    TG_TRY(rt_docall(rt, 3, 1)); /* +1: the arg table */
    lua_pushcfunction(L, rt_loadfile);
    lua_pushlightuserdata(L, (void *)path);
    tg_status st = rt_docall_plain(rt, 1, 1); /* +1: the chunk */
    if (st == TG_OK) {
        /* the script also gets its arguments as `...`, like lua.c */
        for (int i = 0; i < argc; i++) lua_rawgeti(L, top + 1, i + 1);
        st = rt_docall(rt, argc, 0);
    }
    lua_settop(L, top);
    return st;
}

/* Loads a string (protected, as rt_loadfile). */
static int rt_loadstring(lua_State *L)
{
    const char *code = lua_touserdata(L, 1), *name = lua_touserdata(L, 2);
    if (luaL_loadbufferx(L, code, strlen(code), name, NULL) != LUA_OK) return lua_error(L);
    return 1;
}

tg_status tg_runtime_dostring(tg_runtime *rt, const char *code, const char *chunkname)
{
    if (rt == NULL) return tg_error(TG_EINVAL, "runtime: dostring on a NULL runtime");
    lua_State *L = rt->L;
    if (code == NULL) return rt_fail(rt, tg_error(TG_EINVAL, "runtime: dostring needs code"));
    lua_pushcfunction(L, rt_loadstring);
    lua_pushlightuserdata(L, (void *)code);
    lua_pushlightuserdata(L, (void *)(chunkname ? chunkname : "=(string)"));
    TG_TRY(rt_docall_plain(rt, 2, 1)); /* +1: the chunk */
    return rt_docall(rt, 0, 0);
}

/* Pushes require(module)[func] and its argc string arguments (protected: pushing a string allocates). */
static int rt_getfunc(lua_State *L)
{
    const char *module = lua_touserdata(L, 1), *func = lua_touserdata(L, 2);
    int argc = (int)lua_tointeger(L, 3);
    char **argv = lua_touserdata(L, 4);
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    lua_call(L, 1, 1);
    if (!lua_istable(L, -1)) return luaL_error(L, "module '%s' is not a table", module);
    if (lua_getfield(L, -1, func) != LUA_TFUNCTION) return luaL_error(L, "%s.%s is not a function", module, func);
    luaL_checkstack(L, argc, "too many arguments");
    for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]);
    return 1 + argc;
}

tg_status tg_runtime_call(tg_runtime *rt, const char *module, const char *func, int argc, char **argv, int *result)
{
    if (rt == NULL) return tg_error(TG_EINVAL, "runtime: call on a NULL runtime");
    lua_State *L = rt->L;
    if (module == NULL || func == NULL || argc < 0 || (argc > 0 && argv == NULL))
        return rt_fail(rt, tg_error(TG_EINVAL, "runtime: call needs a module, a function name and argc arguments"));
    if (!lua_checkstack(L, argc + 4))
        return rt_fail(rt, tg_error(TG_ENOMEM, "runtime: too many arguments (%d)", argc));
    int top = lua_gettop(L);
    lua_pushcfunction(L, rt_getfunc);
    lua_pushlightuserdata(L, (void *)module);
    lua_pushlightuserdata(L, (void *)func);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    TG_TRY(rt_docall(rt, 4, 1 + argc));    /* +1 + argc: the function and its arguments */
    tg_status st = rt_docall(rt, argc, 1); /* +1: its first result */
    if (st == TG_OK && result && lua_isinteger(L, -1)) {
        lua_Integer r = lua_tointeger(L, -1);
        if (r < INT_MIN || r > INT_MAX) /* never truncated: 2^32 would read as 0, success */
            st = tg_error(TG_EINVAL, "runtime: %s.%s returned %lld, outside the int range of its result", module, func,
                          (long long)r);
        else
            *result = (int)r;
    }
    lua_settop(L, top);
    return st;
}

const char *tg_runtime_error(const tg_runtime *rt) { return rt && rt->err ? rt->err : ""; }

lua_State *tg_runtime_lua(tg_runtime *rt) { return rt ? rt->L : NULL; }

/* Protected part of register: global name = fn, tegraph.host[name] = fn. */
static int rt_register(lua_State *L)
{
    const char *name = lua_touserdata(L, 1);
    /* stack: name (light), fn */
    lua_pushvalue(L, 2);
    lua_setglobal(L, name);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE); /* +1 */
    if (lua_getfield(L, -1, "tegraph") == LUA_TTABLE) {      /* +1 */
        luaL_getsubtable(L, -1, "host");                      /* +1 */
        lua_pushvalue(L, 2);
        lua_setfield(L, -2, name);
    }
    return 0;
}

tg_status tg_runtime_register(tg_runtime *rt, const char *name, tg_lua_cfunction fn)
{
    if (rt == NULL) return tg_error(TG_EINVAL, "runtime: register on a NULL runtime");
    if (name == NULL || !*name || fn == NULL)
        return rt_fail(rt, tg_error(TG_EINVAL, "runtime: register needs a name and a function"));
    lua_State *L = rt->L;
    lua_pushcfunction(L, rt_register);
    lua_pushlightuserdata(L, (void *)name);
    lua_pushcfunction(L, fn);
    return rt_docall(rt, 2, 0);
}

/* Protected part of allow_exit: os.exit = Lua's own. Reading the global and setting the field run metamethods a
 * script may have set (a read-only os, a _G that raises on unknown names): outside a pcall their error would make
 * Lua panic and abort the host. */
static int rt_allow_exit(lua_State *L)
{
    if (lua_getglobal(L, "os") == LUA_TTABLE) {
        lua_getfield(L, LUA_REGISTRYINDEX, RT_OS_EXIT);
        lua_setfield(L, -2, "exit");
    }
    return 0;
}

tg_status tg_runtime_allow_exit(tg_runtime *rt)
{
    if (rt == NULL) return tg_error(TG_EINVAL, "runtime: allow_exit on a NULL runtime");
    lua_pushcfunction(rt->L, rt_allow_exit);
    if (rt_docall(rt, 0, 0) == TG_OK) return TG_OK;
    return rt_fail(rt, tg_error(TG_ELUA, "runtime: allow_exit cannot give the scripts Lua's os.exit: %s", rt->err));
}
