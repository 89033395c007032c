/* lua_fp8_recipe.c — core.fp8: FP8 recipes (DelayedScaling, CurrentScaling), the autocast setting, the scale update op,
 * and the module methods set_fp8 / fp8_state. */
#include "lua/lua_nn.h"
#include "lua/lua_impl.h"
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define TGL_FP8_RECIPE "tegraph.FP8Recipe"

static const char *const format_names[] = {"HYBRID", "E4M3", NULL};
static const char *const algo_names[] = {"max", "most_recent", NULL};

/* A string field of an enum: its index in names; def when absent. */
static int enum_field(lua_State *L, int t, const char *what, const char *k, const char *const *names, int def)
{
    int ty = lua_getfield(L, t, k);
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    if (ty == LUA_TSTRING) {
        const char *s = lua_tostring(L, -1);
        for (int i = 0; names[i]; i++)
            if (strcmp(s, names[i]) == 0) {
                lua_pop(L, 1);
                return i;
            }
    }
    const char *got = luaL_tolstring(L, -1, NULL);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; names[i]; i++) {
        luaL_addstring(&b, i ? (names[i + 1] ? ", \"" : " or \"") : "\"");
        luaL_addstring(&b, names[i]);
        luaL_addstring(&b, "\"");
    }
    luaL_pushresult(&b);
    return luaL_error(L, "%s: %s must be %s (got %s)", what, k, lua_tostring(L, -1), got);
}

/* An integer field in [lo, hi]; def when absent. */
static int int_field(lua_State *L, int t, const char *what, const char *k, int lo, int hi, int def)
{
    int ty = lua_getfield(L, t, k), isint = 0;
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        return def;
    }
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (ty != LUA_TNUMBER || !isint || v < lo || v > hi)
        return luaL_error(L, "%s: %s must be an integer in %d..%d (got %s)", what, k, lo, hi, luaL_tolstring(L, -1, NULL));
    lua_pop(L, 1);
    return (int)v;
}

/* Refuses keys of the table at t outside keys. */
static void only_keys(lua_State *L, int t, const char *what, const char *const *keys)
{
    lua_pushnil(L);
    while (lua_next(L, t)) {
        int ok = 0;
        if (lua_type(L, -2) == LUA_TSTRING)
            for (int i = 0; keys[i] && !ok; i++) ok = strcmp(lua_tostring(L, -2), keys[i]) == 0;
        if (!ok) {
            luaL_Buffer b;
            luaL_buffinit(L, &b);
            for (int i = 0; keys[i]; i++) luaL_addstring(&b, keys[i]), luaL_addstring(&b, keys[i + 1] ? ", " : "");
            luaL_pushresult(&b); /* key, value, the known fields */
            const char *known = lua_tostring(L, -1), *k = luaL_tolstring(L, -3, NULL);
            luaL_error(L, "%s: unknown field '%s' (known: %s)", what, k, known);
        }
        lua_pop(L, 1);
    }
}

/* Reads the recipe table at idx (made by DelayedScaling / CurrentScaling) into r; raises naming `what`. */
static void recipe_read(lua_State *L, int idx, const char *what, tg_fp8_recipe *r)
{
    idx = lua_absindex(L, idx);
    int ok = lua_type(L, idx) == LUA_TTABLE && lua_getmetatable(L, idx);
    if (ok) {
        luaL_getmetatable(L, TGL_FP8_RECIPE);
        ok = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
    }
    if (!ok)
        luaL_error(L, "%s must be an FP8 recipe (tg.fp8.DelayedScaling{...} or tg.fp8.CurrentScaling{...}), got %s", what,
                   luaL_typename(L, idx));
    lua_getfield(L, idx, "scaling");
    const char *kind = lua_tostring(L, -1);
    if (kind && strcmp(kind, "current") == 0) tg_fp8_recipe_current(r);
    else tg_fp8_recipe_delayed(r);
    lua_pop(L, 1);
    r->format = (tg_fp8_format)enum_field(L, idx, what, "fp8_format", format_names, 0);
    r->margin = int_field(L, idx, what, "margin", 0, 127, 0);
    if (r->scaling == TG_FP8_DELAYED) {
        r->amax_history_len = int_field(L, idx, what, "amax_history_len", 1, 1 << 20, 1024);
        r->amax_compute_algo = (tg_fp8_amax_algo)enum_field(L, idx, what, "amax_compute_algo", algo_names, 0);
    }
    tgl_check(L, tg_fp8_recipe_check(r));
}

void tgl_fp8_recipe_check(lua_State *L, int idx, const char *what, tg_fp8_recipe *r) { recipe_read(L, idx, what, r); }

/* Pushes a recipe table for r. */
static void recipe_push(lua_State *L, const tg_fp8_recipe *r)
{
    lua_createtable(L, 0, 6);
    lua_pushstring(L, r->scaling == TG_FP8_CURRENT ? "current" : "delayed");
    lua_setfield(L, -2, "scaling");
    lua_pushstring(L, format_names[r->format]);
    lua_setfield(L, -2, "fp8_format");
    lua_pushinteger(L, r->margin);
    lua_setfield(L, -2, "margin");
    if (r->scaling == TG_FP8_DELAYED) {
        lua_pushinteger(L, r->amax_history_len);
        lua_setfield(L, -2, "amax_history_len");
        lua_pushstring(L, algo_names[r->amax_compute_algo]);
        lua_setfield(L, -2, "amax_compute_algo");
    }
    luaL_setmetatable(L, TGL_FP8_RECIPE);
}

/* DelayedScaling{margin = 0, amax_history_len = 1024, amax_compute_algo = "max", fp8_format = "HYBRID"} */
static int fp8_delayed(lua_State *L)
{
    static const char *const keys[] = {"margin", "amax_history_len", "amax_compute_algo", "fp8_format", NULL};
    const char *what = "fp8.DelayedScaling";
    if (lua_isnoneornil(L, 1)) lua_newtable(L), lua_replace(L, 1);
    if (!lua_istable(L, 1)) return luaL_error(L, "%s: takes one table of fields, got a %s", what, luaL_typename(L, 1));
    only_keys(L, 1, what, keys);
    tg_fp8_recipe r;
    tg_fp8_recipe_delayed(&r);
    r.format = (tg_fp8_format)enum_field(L, 1, what, "fp8_format", format_names, 0);
    r.margin = int_field(L, 1, what, "margin", 0, 127, 0);
    r.amax_history_len = int_field(L, 1, what, "amax_history_len", 1, 1 << 20, 1024);
    r.amax_compute_algo = (tg_fp8_amax_algo)enum_field(L, 1, what, "amax_compute_algo", algo_names, 0);
    tgl_check(L, tg_fp8_recipe_check(&r));
    recipe_push(L, &r);
    return 1;
}

/* CurrentScaling{fp8_format = "HYBRID"}: per-tensor scales from each tensor's own amax. */
static int fp8_current(lua_State *L)
{
    static const char *const keys[] = {"fp8_format", NULL};
    const char *what = "fp8.CurrentScaling";
    if (lua_isnoneornil(L, 1)) lua_newtable(L), lua_replace(L, 1);
    if (!lua_istable(L, 1)) return luaL_error(L, "%s: takes one table of fields, got a %s", what, luaL_typename(L, 1));
    only_keys(L, 1, what, keys);
    tg_fp8_recipe r;
    tg_fp8_recipe_current(&r);
    r.format = (tg_fp8_format)enum_field(L, 1, what, "fp8_format", format_names, 0);
    tgl_check(L, tg_fp8_recipe_check(&r));
    recipe_push(L, &r);
    return 1;
}

/* is_recipe(v) -> boolean */
static int fp8_is_recipe(lua_State *L)
{
    int ok = lua_type(L, 1) == LUA_TTABLE && lua_getmetatable(L, 1);
    if (ok) {
        luaL_getmetatable(L, TGL_FP8_RECIPE);
        ok = lua_rawequal(L, -1, -2);
    }
    lua_pushboolean(L, ok);
    return 1;
}

/* autocast_set(active, enabled, recipe|nil): the values autocast_get gave */
static int fp8_autocast_set(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    luaL_checktype(L, 2, LUA_TBOOLEAN);
    int active = lua_toboolean(L, 1), enabled = lua_toboolean(L, 2);
    if (!(active && enabled) && !lua_isnoneornil(L, 3))
        return luaL_argerror(L, 3, "no recipe unless active and enabled are both true");
    tg_fp8_recipe r;
    memset(&r, 0, sizeof r);
    if (active && enabled) recipe_read(L, 3, "fp8_autocast: the recipe", &r);
    tgl_check(L, tg_fp8_autocast_set(active, enabled, &r));
    return 0;
}

/* run(fn, ...) -> fn(...), called so that it cannot yield: fp8_autocast and keep_state put their setting back
 * after fn, which a coroutine suspended inside fn and never resumed would skip */
static int fp8_run(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* autocast_get() -> active, enabled, recipe|nil */
static int fp8_autocast_get(lua_State *L)
{
    int active, enabled;
    tg_fp8_recipe r;
    tg_fp8_autocast_get(&active, &enabled, &r);
    lua_pushboolean(L, active);
    lua_pushboolean(L, enabled);
    if (enabled) recipe_push(L, &r);
    else lua_pushnil(L);
    return 3;
}

/* scale_update(amax_history, scale, scale_inv, fp8_max (number or list), margin = 0, algo = "max") */
static int fp8_scale_update(lua_State *L)
{
    tg_tensor *h = tgl_tensor_check(L, 1), *s = tgl_tensor_check(L, 2), *si = tgl_tensor_check(L, 3);
    double mx[TG_FP8_MAX_ROLES];
    int n = 0;
    if (lua_type(L, 4) == LUA_TNUMBER) {
        mx[n++] = lua_tonumber(L, 4);
    } else if (lua_istable(L, 4)) {
        lua_Integer len = luaL_len(L, 4);
        if (len < 1 || len > TG_FP8_MAX_ROLES)
            return luaL_error(L, "fp8.scale_update: fp8_max must list 1 to %d numbers (got %I)", TG_FP8_MAX_ROLES, len);
        for (int i = 1; i <= len; i++) {
            lua_rawgeti(L, 4, i);
            if (lua_type(L, -1) != LUA_TNUMBER) return luaL_error(L, "fp8.scale_update: fp8_max[%d] is not a number", i);
            mx[n++] = lua_tonumber(L, -1);
            lua_pop(L, 1);
        }
    } else {
        return luaL_error(L, "fp8.scale_update: fp8_max (argument 4) must be a number or a list of numbers, got a %s",
                          luaL_typename(L, 4));
    }
    if (n != tg_tensor_numel(s))
        return luaL_error(L, "fp8.scale_update: fp8_max has %d values for %I roles (scale's length)", n,
                          (lua_Integer)tg_tensor_numel(s));
    for (int i = 0; i < n; i++) /* checked here to name Lua's position (the C message names C's index) */
        if (!(mx[i] > 0) || !isfinite(mx[i])) {
            char v[32];
            snprintf(v, sizeof v, "%g", mx[i]);
            if (lua_type(L, 4) == LUA_TNUMBER)
                return luaL_error(L, "fp8.scale_update: fp8_max = %s must be finite and > 0", v);
            return luaL_error(L, "fp8.scale_update: fp8_max[%d] = %s must be finite and > 0", i + 1, v);
        }
    int margin = lua_isnoneornil(L, 5) ? 0 : tgl_checkint(L, 5);
    int algo = luaL_checkoption(L, 6, "max", algo_names);
    tgl_check(L, tg_fp8_scale_update(h, s, si, mx, margin, algo));
    return 0;
}

/* m:set_fp8(recipe|nil) -> m */
static int m_set_fp8(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    tg_fp8_recipe r;
    if (lua_isnoneornil(L, 2)) memset(&r, 0, sizeof r);
    else recipe_read(L, 2, "set_fp8: the recipe", &r);
    tgl_check(L, tg_module_set_fp8(u->m, &r));
    lua_settop(L, 1);
    return 1;
}

static void state_push(lua_State *L, tg_module *m, int *k)
{
    if (m->fp8) {
        lua_createtable(L, 0, 4);
        lua_pushstring(L, tg_module_name(m));
        lua_setfield(L, -2, "module");
        tgl_push_tensor_ref(L, m->fp8->history);
        lua_setfield(L, -2, "amax_history");
        tgl_push_tensor_ref(L, m->fp8->scale);
        lua_setfield(L, -2, "scale");
        tgl_push_tensor_ref(L, m->fp8->scale_inv);
        lua_setfield(L, -2, "scale_inv");
        recipe_push(L, &m->fp8->r);
        lua_setfield(L, -2, "recipe");
        lua_rawseti(L, -2, ++*k);
    }
    for (int i = 0; i < m->nchildren; i++) state_push(L, m->children[i], k);
}

/* m:fp8_state() -> list of {module =, amax_history =, scale =, scale_inv =, recipe =}, one per FP8 Linear under m
 * (history (len, 3), scale and scale_inv (3): roles input, weight, grad_output); the tensors share the module's memory. */
static int m_fp8_state(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    int k = 0;
    lua_newtable(L);
    state_push(L, u->m, &k);
    return 1;
}

static const luaL_Reg fp8_funcs[] = {
    {"DelayedScaling", fp8_delayed},
    {"CurrentScaling", fp8_current},
    {"is_recipe", fp8_is_recipe},
    {"autocast_set", fp8_autocast_set},
    {"autocast_get", fp8_autocast_get},
    {"run", fp8_run},
    {"scale_update", fp8_scale_update},
    {NULL, NULL},
};

void tgl_open_fp8(lua_State *L)
{
    if (luaL_newmetatable(L, TGL_FP8_RECIPE)) {
        lua_pushliteral(L, TGL_FP8_RECIPE);
        lua_setfield(L, -2, "__name");
    }
    lua_pop(L, 1);
    luaL_newlib(L, fp8_funcs);
    lua_setfield(L, -2, "fp8");
}

int tgl_module_set_fp8(lua_State *L) { return m_set_fp8(L); }
int tgl_module_fp8_state(lua_State *L) { return m_fp8_state(L); }
