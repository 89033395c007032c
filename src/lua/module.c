/* module.c — the C module lua/tegraph.so for stock interpreters: require "tegraph.core" lands here. */
#include "lua/lua_impl.h"

/* Lua finds this through its all-in-one loader (tegraph.so for "tegraph.core");
 * libtegraph does the work, under another name so the symbols do not clash. */
int luaopen_tegraph_core(lua_State *L) { return tg_lua_open_core(L); }
