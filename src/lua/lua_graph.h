/* lua_graph.h — the graphed-callable bindings (lua_graph.c) for lua_core.c and lua_sched.c. */
#ifndef TG_LUA_GRAPH_H
#define TG_LUA_GRAPH_H

#include "lua/lua_impl.h"

struct tg_graphed;

/* Sets core.graph on the table at the top of the stack. */
void tgl_open_graph(lua_State *L);
/* The graphed set and the chunk index (in it) of the Graphed callable at idx; raises otherwise. */
struct tg_graphed *tgl_graphed_check(lua_State *L, int idx, int *chunk);
/* Marks the set of the Graphed callable at idx in use (delta 1) or done with (-1) around a call that holds it
 * and runs Lua meanwhile (tg.sched.run): freeing the set is refused in between. Raise nothing between the two. */
void tgl_graphed_use(lua_State *L, int idx, int delta);

#endif
