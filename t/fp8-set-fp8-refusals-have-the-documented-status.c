/* tg_module_set_fp8 refuses with the statuses tegraph.h names: TG_ECAPTURE while the module's device captures
 * (as every call not allowed while capturing), TG_ESTATE while the module belongs to a graphed set, TG_EINVAL for
 * a bad recipe; outside those it sets the recipe. */
#include "tegraph.h"
#include "tap.h"

#include <lauxlib.h>
#include <lua.h>

/* host_setfp8(m) -> the status of tg_module_set_fp8(m, delayed recipe) (bad = true: an invalid recipe) */
static int host_setfp8(lua_State *L)
{
    tg_module *m = tg_lua_checkmodule(L, 1);
    tg_fp8_recipe r;
    tg_fp8_recipe_delayed(&r);
    if (lua_toboolean(L, 2)) r.amax_history_len = -4;
    lua_pushinteger(L, tg_module_set_fp8(m, &r));
    return 1;
}

int main(void)
{
    tg_runtime *rt = tg_runtime_new();
    if (!rt) bail_out("no runtime: %s", tg_last_error());
    tg_runtime_register(rt, "host_setfp8", host_setfp8);
    tg_status st = tg_runtime_dostring(
        rt,
        "local l = tg.nn.Linear(16, 16, {name = 'lin', device = 'cpu'})\n"
        "got = {}\n"
        "got.plain = host_setfp8(l)\n"
        "got.bad = host_setfp8(l, true)\n"
        "tg.stream.capture(function() got.capturing = host_setfp8(l) end, {device = 'cpu'})\n"
        "local g = tg.graph.make_graphed(l, {sample = tg.randn({2, 16}, {device = 'cpu'})})\n"
        "got.graphed = host_setfp8(l)\n"
        "g:free()\n",
        "=setfp8");
    ok(st == TG_OK, "the script runs: %s", tg_runtime_error(rt));
    struct {
        const char *key;
        tg_status want;
        const char *what;
    } cases[] = {
        {"plain", TG_OK, "outside captures and graphed sets set_fp8 succeeds"},
        {"bad", TG_EINVAL, "an invalid recipe is TG_EINVAL"},
        {"capturing", TG_ECAPTURE, "while the module's device captures it is TG_ECAPTURE, as tegraph.h says"},
        {"graphed", TG_ESTATE, "while the module belongs to a graphed set it is TG_ESTATE"},
    };
    lua_State *L = tg_runtime_lua(rt);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lua_getglobal(L, "got");
        int found = lua_istable(L, -1) && lua_getfield(L, -1, cases[i].key) == LUA_TNUMBER;
        long long got = found ? lua_tointeger(L, -1) : -1;
        is_int(got, cases[i].want, "%s", cases[i].what);
        lua_settop(L, 0);
    }
    tg_runtime_free(rt);
    return done_testing();
}
