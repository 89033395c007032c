/* harness.c — the libFuzzer entry point shared by the Lua-driven targets: one tegraph runtime per
 * process; each input goes, as a Lua string, to the function the target's driver script returns
 * (FUZZ_DRIVER). A Lua error is a refused input, not a finding; crashes and sanitizer reports are. */
#include "tegraph.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static tg_runtime *rt;

/* fuzz_finding(msg): a driver found a wrong answer that is no crash (e.g. a checker that raises
 * where it must answer): reported like a crash, so libFuzzer keeps the input. */
static int fuzz_finding(lua_State *L)
{
    fprintf(stderr, "fuzz finding: %s\n", luaL_optstring(L, 1, "(no message)"));
    abort();
}
static int driver = LUA_NOREF;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("TEGRAPH_LUA_PATH", FUZZ_LUADIR, 0);
    setenv("OMP_NUM_THREADS", "1", 0);
    rt = tg_runtime_new();
    if (!rt) {
        fprintf(stderr, "fuzz: cannot create a runtime: %s\n", tg_last_error());
        abort();
    }
    lua_State *L = tg_runtime_lua(rt);
    lua_register(L, "fuzz_finding", fuzz_finding);
    if (luaL_dofile(L, FUZZ_DRIVER) != LUA_OK || !lua_isfunction(L, -1)) {
        fprintf(stderr, "fuzz: %s: %s\n", FUZZ_DRIVER, lua_tostring(L, -1));
        abort();
    }
    driver = luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lua_State *L = tg_runtime_lua(rt);
    lua_rawgeti(L, LUA_REGISTRYINDEX, driver);
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_pop(L, 1); /* refused: fine */
    return 0;
}
