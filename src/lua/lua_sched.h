/* lua_sched.h — the schedule-executor bindings (lua_sched.c) for lua_core.c. */
#ifndef TG_LUA_SCHED_H
#define TG_LUA_SCHED_H

#include "lua/lua_impl.h"

/* Sets core.sched (the schedule executor) on the table at the top of the stack. */
void tgl_open_sched(lua_State *L);

#endif
