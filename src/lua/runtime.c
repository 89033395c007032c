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

/* ------------------------------------------------------------------ Lua source only
 * Lua does not verify precompiled chunks (bytecode): a damaged or crafted one crashes the process (a segfault, not
 * an error). So every way a runtime loads code is text only: tg_runtime_dofile / dostring (and with them `tegraph
 * run` and -e), require's Lua searcher and the globals load, loadfile and dofile; a binary chunk is refused naming
 * it. */
#define RT_BINARY_REFUSED                                                                                              \
    "%s is a precompiled (binary) Lua chunk: tegraph loads Lua source only (Lua does not verify bytecode, and a "     \
    "damaged chunk would crash the process)"

/* Whether the message at idx is lua_load's refusal of a binary chunk in text mode. */
static int binary_refusal(lua_State *L, int idx)
{
    static const char refusal[] = "attempt to load a binary chunk";
    const char *m = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
    return m && strncmp(m, refusal, sizeof refusal - 1) == 0;
}

/* A chunk name as a message shows it: "@file" and "=name" without their mark. */
static const char *chunk_label(const char *name) { return name[0] == '@' || name[0] == '=' ? name + 1 : name; }

/* luaL_loadfilex in text mode (path NULL: stdin); a binary chunk's message names the file. */
static int load_text_file(lua_State *L, const char *path)
{
    int st = luaL_loadfilex(L, path, "t");
    if (st == LUA_ERRSYNTAX && binary_refusal(L, -1)) {
        lua_pop(L, 1);
        lua_pushfstring(L, RT_BINARY_REFUSED, path ? path : "stdin");
    }
    return st;
}

/* The same for a buffer, named by its chunk name. */
static int load_text_buffer(lua_State *L, const char *code, size_t len, const char *name)
{
    int st = luaL_loadbufferx(L, code, len, name, "t");
    if (st == LUA_ERRSYNTAX && binary_refusal(L, -1)) {
        lua_pop(L, 1);
        lua_pushfstring(L, RT_BINARY_REFUSED, chunk_label(name));
    }
    return st;
}

/* Calls Lua's own load or loadfile (upvalue 1) with the mode argument at index modeidx made "t"; a mode without
 * 't' ("b") is refused outright. A failure returns fail and the message, as theirs do; a binary chunk's names the
 * chunk name or file name at nameidx, or else upvalue 2 ("the chunk given to load", "stdin"). */
static int call_text_mode(lua_State *L, int modeidx, int nameidx, const char *fn)
{
    if (lua_gettop(L) < modeidx) lua_settop(L, modeidx);
    int n = lua_gettop(L);
    const char *mode = luaL_optstring(L, modeidx, "bt");
    if (!strchr(mode, 't')) {
        luaL_pushfail(L);
        lua_pushfstring(L, "%s: mode '%s' refused: tegraph loads Lua source only (Lua does not verify bytecode)", fn,
                        mode);
        return 2;
    }
    const char *name = lua_type(L, nameidx) == LUA_TSTRING ? lua_tostring(L, nameidx) : NULL;
    if (name && nameidx == 2) name = chunk_label(name); /* load's chunk name; loadfile's is a file name */
    lua_pushstring(L, name ? name : lua_tostring(L, lua_upvalueindex(2))); /* kept below the call */
    lua_pushvalue(L, lua_upvalueindex(1));
    for (int i = 1; i <= n; i++) {
        if (i == modeidx) lua_pushliteral(L, "t");
        else lua_pushvalue(L, i);
    }
    int base = lua_gettop(L) - n; /* the function's slot */
    lua_call(L, n, LUA_MULTRET);
    int nres = lua_gettop(L) - base + 1;
    if (nres >= 2 && lua_isnil(L, base) && binary_refusal(L, base + 1)) {
        lua_pushfstring(L, RT_BINARY_REFUSED, lua_tostring(L, base - 1));
        lua_replace(L, base + 1);
    }
    return nres;
}

/* load(chunk [, chunkname [, mode [, env]]]), text only. The arguments are checked here, as Lua's load checks
 * them, so a bad one is named at the caller's line ("bad argument #1 to 'load'"), not inside the inner call. */
static int rt_load(lua_State *L)
{
    if (lua_type(L, 1) != LUA_TSTRING) luaL_checktype(L, 1, LUA_TFUNCTION);
    luaL_optstring(L, 2, NULL);
    luaL_optstring(L, 3, NULL);
    return call_text_mode(L, 3, 2, "load");
}
/* loadfile([filename [, mode [, env]]]), text only. */
static int rt_loadfile_global(lua_State *L)
{
    luaL_optstring(L, 1, NULL);
    luaL_optstring(L, 2, NULL);
    return call_text_mode(L, 2, 1, "loadfile");
}

static int dofile_cont(lua_State *L, int status, lua_KContext ctx)
{
    (void)status;
    (void)ctx;
    return lua_gettop(L) - 1;
}

/* dofile([filename]), text only: the chunk's results, its errors raised. */
static int rt_dofile_global(lua_State *L)
{
    const char *path = luaL_optstring(L, 1, NULL);
    lua_settop(L, 1);
    if (load_text_file(L, path) != LUA_OK) return lua_error(L);
    lua_callk(L, 0, LUA_MULTRET, 0, dofile_cont);
    return dofile_cont(L, LUA_OK, 0);
}

/* require's searcher of Lua files (replacing Lua's own, package.searchers[2]): the file package.searchpath finds on
 * package.path, loaded as text. Upvalue 1: the package table. */
static int rt_search_lua(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_getfield(L, lua_upvalueindex(1), "searchpath");
    lua_pushvalue(L, 1);
    if (lua_getfield(L, lua_upvalueindex(1), "path") != LUA_TSTRING)
        return luaL_error(L, "'package.path' must be a string");
    lua_call(L, 2, 2);
    if (lua_isnil(L, -2)) return 1; /* not found: the files it tried, for require's message */
    lua_pop(L, 1);
    const char *file = lua_tostring(L, -1);
    if (load_text_file(L, file) != LUA_OK)
        return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, file, lua_tostring(L, -1));
    lua_pushvalue(L, -2); /* the file name: the loader's second argument */
    return 2;
}

/* Replaces the global fn by c, with Lua's own as its upvalue 1 and what (a description) as upvalue 2. */
static void wrap_global(lua_State *L, const char *fn, lua_CFunction c, const char *what)
{
    lua_getglobal(L, fn);
    lua_pushstring(L, what);
    lua_pushcclosure(L, c, 2);
    lua_setglobal(L, fn);
}

/* Text-only load, loadfile, dofile and require (protected: in rt_setup). */
static void text_only(lua_State *L)
{
    wrap_global(L, "load", rt_load, "the chunk given to load");
    wrap_global(L, "loadfile", rt_loadfile_global, "stdin");
    lua_pushcfunction(L, rt_dofile_global);
    lua_setglobal(L, "dofile");
    lua_getglobal(L, "package");                          /* +1 */
    if (lua_getfield(L, -1, "searchers") != LUA_TTABLE) /* +1 */
        luaL_error(L, "package.searchers is missing");
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, rt_search_lua, 1);
    lua_rawseti(L, -2, 2); /* Lua's own searcher of Lua files */
    lua_pop(L, 2);
}

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
    text_only(L);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE); /* +1: package.preload */
    lua_pushcfunction(L, tg_lua_open_core);
    lua_setfield(L, -2, "tegraph.core");
    lua_pop(L, 1);

    /* package.path = $TEGRAPH_LUA_PATH; then what Lua chose (LUA_PATH); then the installed Lua directory, a
     * shared one (luarocks' too) whose other modules must not shadow the user's. (The build tree's ./tegraph
     * sets TEGRAPH_LUA_PATH to the source tree's lua/: src/cli/local.mk.) */
    luaL_Buffer b;
    lua_getglobal(L, "package"); /* +1 */
    luaL_buffinit(L, &b);
    add_dirs(&b, getenv("TEGRAPH_LUA_PATH"));
    lua_getfield(L, -2, "path"); /* +1, added to the buffer below */
    luaL_addvalue(&b);
    luaL_addchar(&b, ';');
    add_dirs(&b, TG_LUADIR);
    luaL_pushresult(&b); /* +1 */
    size_t len;
    const char *path = lua_tolstring(L, -1, &len);
    while (len > 0 && path[len - 1] == ';') len--; /* no empty template at the end */
    lua_pushlstring(L, path, len);
    lua_remove(L, -2);
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
    if (load_text_file(L, path) != LUA_OK) return lua_error(L);
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
    if (load_text_buffer(L, code, strlen(code), name) != LUA_OK) return lua_error(L);
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
