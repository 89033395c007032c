/* lua_nn.c — opens core.nn (module constructors, Parameter) and core.ops on the core table. */
#include "lua/lua_nn.h"

void tgl_open_nn(lua_State *L)
{
    int core = lua_gettop(L);
    tgl_bind_init(L);
    tgl_open_param(L);
    tgl_open_module(L);

    lua_newtable(L); /* +1: core.nn */
    tgl_nn_constructors(L);
    lua_setfield(L, core, "nn");
    tgl_open_ops(L);
    tgl_open_fp8(L);
    lua_settop(L, core);
}
