/* lua_data.h — the token-file decoding bindings (lua_data.c) for lua_ops.c. */
#ifndef TG_LUA_DATA_H
#define TG_LUA_DATA_H

#include "lua/lua_impl.h"

/* Sets u16_scan and token_windows into the table at the top of the stack (core.ops). */
void tgl_data_funcs(lua_State *L);

#endif
