/* lua_comm.h — entry point of the communicator bindings (lua_comm.c) for lua_core.c. */
#ifndef TG_LUA_COMM_H
#define TG_LUA_COMM_H

#include "lua/lua_impl.h"

/* Sets core.comm (communicators, requests, grad buffers) on the table at the
 * top of the stack (the core table). */
void tgl_open_comm(lua_State *L);

/* The communicator of a tegraph.Comm userdata at idx (raises otherwise): for
 * bindings that take a communicator option (a pipeline transport). */
struct tg_comm;
struct tg_comm *tgl_comm_check(lua_State *L, int idx);

#endif
