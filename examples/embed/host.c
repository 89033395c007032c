/* host.c — embedding example: a C program runs Lua in a tegraph runtime and gives scripts a C function. */
#include <tegraph.h>

#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <string.h>

/* host_scale(t, s): t = s * t in place, computed by the C host; returns t. */
static int host_scale(lua_State *L)
{
    tg_tensor *t = tg_lua_checktensor(L, 1); /* owned by Lua: do not free */
    double s = luaL_checknumber(L, 2);
    tg_lua_check(L, tg_axpby(t, s, t, 0.0)); /* a tegraph error becomes a Lua error at the caller */
    lua_settop(L, 1);
    return 1;
}

/* host_iota(n): a new tensor 1, 2, ..., n made in C and handed to Lua. */
static int host_iota(lua_State *L)
{
    int64_t n = (int64_t)luaL_checkinteger(L, 1);
    double vals[64];
    luaL_argcheck(L, n >= 1 && n <= 64, 1, "1 to 64 elements");
    tg_tensor **slot = tg_lua_newtensor(L); /* Lua owns the tensor from here on */
    tg_lua_check(L, tg_tensor_new(TG_F32, 1, &n, tg_default_device(), slot));
    for (int64_t i = 0; i < n; i++) vals[i] = (double)(i + 1);
    tg_lua_check(L, tg_tensor_write_f64(*slot, vals, (size_t)n));
    return 1;
}

static const char *script =
    "local t = host_iota(4)                       -- made in C\n"
    "host_scale(t, 2.5)                           -- scaled in C\n"
    "local v = t:totable()\n"
    "assert(v[4] == 10, 'expected 10, got ' .. tostring(v[4]))\n"
    "assert(tg.host.host_scale == host_scale)     -- also under tegraph.host\n"
    "print(string.format('lua: scaled %s -> {%g, %g, %g, %g}', t.device, v[1], v[2], v[3], v[4]))\n"
    "result = t                                   -- for the host to read back\n";

static const char *failing = "local t = tg.zeros({2, 3})\n"
                             "host_scale(t, 'twice')\n";

int main(void)
{
    int bad = 0;
    tg_runtime *rt = tg_runtime_new();
    if (rt == NULL) {
        fprintf(stderr, "host: cannot create a runtime: %s\n", tg_last_error());
        return 1;
    }
    tg_runtime_register(rt, "host_scale", host_scale);
    tg_runtime_register(rt, "host_iota", host_iota);

    if (tg_runtime_dostring(rt, script, "=host-script") != TG_OK) {
        fprintf(stderr, "host: script failed:\n%s\n", tg_runtime_error(rt));
        bad++;
    } else {
        /* Read the tensor the script left in the global `result`. */
        lua_State *L = tg_runtime_lua(rt);
        lua_getglobal(L, "result");
        tg_tensor *r = tg_lua_totensor(L, -1);
        double sum = 0;
        if (r == NULL || tg_sum(r, &sum) != TG_OK || sum != 25.0) {
            fprintf(stderr, "host: expected result to sum to 25, got %g\n", sum);
            bad++;
        } else {
            printf("host: result sums to %g\n", sum);
        }
        lua_pop(L, 1);
    }

    /* A failing script: the runtime reports FILE:LINE: message and a traceback. */
    tg_status st = tg_runtime_dostring(rt, failing, "=failing-script");
    const char *err = tg_runtime_error(rt);
    size_t first = strcspn(err, "\n");
    printf("host: failing script -> %s: %.*s\n", tg_status_name(st), (int)first, err);
    if (st != TG_ELUA || strncmp(err, "failing-script:2:", 17) != 0) bad++;

    tg_runtime_free(rt);
    printf("host: %s\n", bad ? "FAILED" : "all good");
    return bad ? 1 : 0;
}
