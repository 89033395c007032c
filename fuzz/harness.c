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

/* Coverage of the Lua code: libFuzzer sees the C library's edges, not the lines of the Lua library
 * the drivers exercise (the Lua VM is not instrumented). A line hook counts each (previous line,
 * line) pair of line numbers in counters libFuzzer reads as extra coverage. */
#define LUA_EDGES (1u << 16)
static uint8_t lua_edges[LUA_EDGES] __attribute__((section("__libfuzzer_extra_counters")));
static uintptr_t prev_line;

static void line_hook(lua_State *L, lua_Debug *ar)
{
    (void)L;
    /* the line number alone (no lua_getinfo: it formats the source name at every line) */
    uintptr_t here = (uintptr_t)ar->currentline * 2654435761u;
    lua_edges[(here ^ prev_line) % LUA_EDGES]++;
    prev_line = here >> 1;
}

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
    lua_sethook(L, line_hook, LUA_MASKLINE, 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lua_State *L = tg_runtime_lua(rt);
    prev_line = 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, driver);
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_pop(L, 1); /* refused: fine */
    return 0;
}
