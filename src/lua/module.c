/* module.c — the C module lua/tegraph.so for stock interpreters: require "tegraph.core" lands here, and so does
 * require "tegraph" when only LUA_CPATH finds tegraph (the Lua files not on LUA_PATH). */
#define _GNU_SOURCE /* dladdr */
#include "lua/lua_impl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Lua finds this through its all-in-one loader (tegraph.so for "tegraph.core");
 * libtegraph does the work, under another name so the symbols do not clash. */
int luaopen_tegraph_core(lua_State *L) { return tg_lua_open_core(L); }

/* Writes into dir the directory holding tegraph/init.lua for this module: beside it (lua/tegraph.so of a build
 * tree or an install next to its Lua files), one up (libtool's lua/.libs/tegraph.so), then the installed Lua
 * directory. Returns 0 when none holds it. */
static int lua_files_dir(char *dir, size_t size)
{
    char here[4096] = "";
    Dl_info info;
    if (dladdr((void *)lua_files_dir, &info) && info.dli_fname) { /* a static function: this file's own address */
        snprintf(here, sizeof here, "%s", info.dli_fname);
        char *slash = strrchr(here, '/');
        if (slash) *slash = '\0';
        else snprintf(here, sizeof here, ".");
    }
    const char *cands[3][2] = {{here, ""}, {here, "/.."}, {TG_LUADIR, ""}};
    for (int i = 0; i < 3; i++) {
        if (!cands[i][0][0]) continue;
        char init[4400];
        snprintf(dir, size, "%s%s", cands[i][0], cands[i][1]);
        snprintf(init, sizeof init, "%s/tegraph/init.lua", dir);
        if (access(init, R_OK) == 0) return 1;
    }
    return 0;
}

/* require "tegraph" that found this file: the library is its Lua files, so their directory goes on package.path
 * and tegraph/init.lua runs as require would run it (name, file), its result the module. */
TG_API int luaopen_tegraph(lua_State *L); /* exported from the C module only (not libtegraph) */
int luaopen_tegraph(lua_State *L)
{
    char dir[4200], init[4400];
    /* a tegraph runtime (it preloads tegraph.core) loads its library from TEGRAPH_LUA_PATH or the installed
     * directory only: a C module on its LUA_CPATH is not a way around that */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    int in_runtime = lua_getfield(L, -1, "tegraph.core") != LUA_TNIL;
    lua_pop(L, 2);
    if (in_runtime)
        return luaL_error(L, "require \"tegraph\": not on the runtime's path (TEGRAPH_LUA_PATH, then the installed "
                             "directory %s); the C module does not load it into a runtime", TG_LUADIR);
    if (!lua_files_dir(dir, sizeof dir))
        return luaL_error(L, "require \"tegraph\": the C module has no tegraph/init.lua beside it or in %s; put the "
                             "directory of tegraph's Lua files on LUA_PATH (DIR/?.lua;DIR/?/init.lua)", TG_LUADIR);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
    snprintf(init, sizeof init, "%s/tegraph/init.lua", dir);
    if (luaL_loadfilex(L, init, "t") != LUA_OK) return lua_error(L);
    lua_pushstring(L, "tegraph");
    lua_pushstring(L, init);
    lua_call(L, 2, 1);
    return 1;
}
