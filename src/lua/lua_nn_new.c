/* lua_nn_new.c — tegraph.nn constructors (Linear, LayerNorm, ..., Sequential): options tables to tg_module_opts. */
#include "lua/lua_nn.h"
#include "nn/nn.h"

#include <string.h>

static const char *const common_keys[] = {"dtype", "device", "bias", "delay_wgrad", "fuse_wgrad_accumulation",
                                          "chunk", "name", "eps", "init_std", NULL};

static int key_in(const char *k, const char *const *list)
{
    for (; list && *list; list++)
        if (strcmp(k, *list) == 0) return 1;
    return 0;
}

/* Reads the options table at idx (1) into o, rejecting unknown keys. */
static void opts_read(lua_State *L, const char *ctor, const char *const *extra, tg_module_opts *o)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    tg_module_opts_default(o);
    lua_pushnil(L);
    while (lua_next(L, 1)) { /* key -2, value -1 */
        if (lua_type(L, -2) == LUA_TSTRING) {
            const char *k = lua_tostring(L, -2);
            if (!key_in(k, common_keys) && !key_in(k, extra)) {
                luaL_Buffer b;
                luaL_buffinit(L, &b);
                for (const char *const *l = extra; l && *l; l++) luaL_addstring(&b, *l), luaL_addstring(&b, ", ");
                for (const char *const *l = common_keys; *l; l++) luaL_addstring(&b, *l), luaL_addstring(&b, l[1] ? ", " : "");
                luaL_pushresult(&b);
                luaL_error(L, "%s: unknown option '%s' (known: %s)", ctor, k, lua_tostring(L, -1));
            }
        } else if (!(lua_isinteger(L, -2) && extra && key_in("[1]", extra))) {
            luaL_error(L, "%s: options must be named (got a %s key)", ctor, luaL_typename(L, -2));
        }
        lua_pop(L, 1);
    }
    if (lua_getfield(L, 1, "dtype") != LUA_TNIL) o->dtype = tgl_dtype_check(L, -1);
    if (lua_getfield(L, 1, "device") != LUA_TNIL) o->device = tgl_device_check(L, -1);
    if (lua_getfield(L, 1, "bias") != LUA_TNIL) o->bias = lua_toboolean(L, -1);
    o->delay_wgrad = tgl_field_bool(L, 1, "delay_wgrad");
    o->fuse_wgrad_accumulation = tgl_field_bool(L, 1, "fuse_wgrad_accumulation");
    if (lua_getfield(L, 1, "chunk") != LUA_TNIL) o->chunk = (int)luaL_checkinteger(L, -1);
    if (lua_getfield(L, 1, "name") != LUA_TNIL) o->name = luaL_checkstring(L, -1);
    if (lua_getfield(L, 1, "eps") != LUA_TNIL) o->eps = (double)luaL_checknumber(L, -1);
    if (lua_getfield(L, 1, "init_std") != LUA_TNIL) o->init_std = (double)luaL_checknumber(L, -1);
    lua_pop(L, 7); /* strings stay alive in the options table */
}

/* An integer option; def < 0 means required. */
static int64_t int_opt(lua_State *L, const char *ctor, const char *k, int64_t def)
{
    int isint;
    int ty = lua_getfield(L, 1, k);
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    lua_pop(L, 1);
    if (ty == LUA_TNIL) {
        if (def < 0) luaL_error(L, "%s: option '%s' (an integer) is required", ctor, k);
        return def;
    }
    if (!isint || v < 1) luaL_error(L, "%s: option '%s' must be a positive integer", ctor, k);
    return (int64_t)v;
}

/* A string option; NULL when absent or false. */
static const char *str_opt(lua_State *L, const char *k, const char *def)
{
    int ty = lua_getfield(L, 1, k);
    const char *s = ty == LUA_TNIL ? def : ty == LUA_TBOOLEAN && !lua_toboolean(L, -1) ? NULL : luaL_checkstring(L, -1);
    lua_pop(L, 1); /* the string stays alive in the options table */
    return s;
}

/* Pushes the box, then registers the module once it is built. */
#define CTOR_END(L, slot, call)                                                                        \
    do {                                                                                               \
        tgl_check(L, call);                                                                            \
        tgl_objects_set(L, *(slot), -1);                                                                   \
        return 1;                                                                                      \
    } while (0)

static int nn_linear(lua_State *L)
{
    static const char *const k[] = {"in", "out", NULL};
    tg_module_opts o;
    opts_read(L, "Linear", k, &o);
    int64_t in = int_opt(L, "Linear", "in", -1), out = int_opt(L, "Linear", "out", -1);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_linear_new(in, out, &o, slot));
}

static int nn_layernorm(lua_State *L)
{
    static const char *const k[] = {"dim", NULL};
    tg_module_opts o;
    opts_read(L, "LayerNorm", k, &o);
    int64_t c = int_opt(L, "LayerNorm", "dim", -1);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_layernorm_new(c, &o, slot));
}

static int nn_rmsnorm(lua_State *L)
{
    static const char *const k[] = {"dim", NULL};
    tg_module_opts o;
    opts_read(L, "RMSNorm", k, &o);
    int64_t c = int_opt(L, "RMSNorm", "dim", -1);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_rmsnorm_new(c, &o, slot));
}

static int nn_layernorm_linear(lua_State *L)
{
    static const char *const k[] = {"in", "out", "norm", NULL};
    tg_module_opts o;
    opts_read(L, "LayerNormLinear", k, &o);
    int64_t in = int_opt(L, "LayerNormLinear", "in", -1), out = int_opt(L, "LayerNormLinear", "out", -1);
    const char *norm = str_opt(L, "norm", "layernorm");
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_layernorm_linear_new(in, out, norm, &o, slot));
}

static int nn_layernorm_mlp(lua_State *L)
{
    static const char *const k[] = {"dim", "hidden", "norm", "activation", NULL};
    tg_module_opts o;
    opts_read(L, "LayerNormMLP", k, &o);
    int64_t c = int_opt(L, "LayerNormMLP", "dim", -1), h = int_opt(L, "LayerNormMLP", "hidden", 4 * c);
    const char *norm = str_opt(L, "norm", "layernorm"), *act = str_opt(L, "activation", "gelu");
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_layernorm_mlp_new(c, h, norm, act, &o, slot));
}

static int nn_attention(lua_State *L)
{
    static const char *const k[] = {"dim", "heads", NULL};
    tg_module_opts o;
    opts_read(L, "CausalSelfAttention", k, &o);
    int64_t c = int_opt(L, "CausalSelfAttention", "dim", -1), nh = int_opt(L, "CausalSelfAttention", "heads", -1);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_attention_new(c, (int)nh, &o, slot));
}

static int nn_transformer_layer(lua_State *L)
{
    static const char *const k[] = {"dim", "heads", "hidden", "norm", "activation", NULL};
    tg_module_opts o;
    opts_read(L, "TransformerLayer", k, &o);
    int64_t c = int_opt(L, "TransformerLayer", "dim", -1), nh = int_opt(L, "TransformerLayer", "heads", -1);
    int64_t h = int_opt(L, "TransformerLayer", "hidden", 4 * c);
    const char *norm = str_opt(L, "norm", "layernorm"), *act = str_opt(L, "activation", "gelu");
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_transformer_layer_new(c, (int)nh, h, norm, act, &o, slot));
}

static int nn_embedding(lua_State *L)
{
    static const char *const k[] = {"vocab", "dim", "context", NULL};
    tg_module_opts o;
    opts_read(L, "Embedding", k, &o);
    int64_t v = int_opt(L, "Embedding", "vocab", -1), c = int_opt(L, "Embedding", "dim", -1);
    int64_t t = int_opt(L, "Embedding", "context", -1);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_embedding_new(v, c, t, &o, slot));
}

static int nn_lm_head(lua_State *L)
{
    static const char *const k[] = {"dim", "vocab", "tied", "norm", NULL};
    tg_module_opts o;
    opts_read(L, "LMHead", k, &o);
    int64_t c = int_opt(L, "LMHead", "dim", -1), v = int_opt(L, "LMHead", "vocab", -1);
    const char *norm = str_opt(L, "norm", "layernorm");
    tg_module *tied = NULL;
    lua_getfield(L, 1, "tied"); /* +1, stays: kept alive below */
    int tidx = lua_gettop(L);
    if (!lua_isnil(L, tidx)) {
        struct tgl_module *u = luaL_testudata(L, tidx, TGL_MODULE);
        if (u == NULL || u->m == NULL) luaL_error(L, "LMHead: option 'tied' must be an Embedding module");
        tied = u->m;
    }
    tg_module **slot = tgl_module_newbox(L, 0);
    if (tied) tgl_module_keep(L, -1, tidx);
    CTOR_END(L, slot, tg_lm_head_new(c, v, tied, norm, &o, slot));
}

/* tg.nn.Sequential{m1, m2, ... [, name=, chunk=, ...]}: entries may be Lua tables. */
static int nn_sequential(lua_State *L)
{
    static const char *const k[] = {"[1]", NULL};
    tg_module_opts o;
    opts_read(L, "Sequential", k, &o);
    int n = (int)luaL_len(L, 1);
    if (n < 1) luaL_error(L, "Sequential: needs at least one module");
    lua_createtable(L, n, 0); /* +1: the children's userdata */
    int kids = lua_gettop(L);
    tg_module **cs = lua_newuserdatauv(L, (size_t)n * sizeof *cs, 0); /* +1: scratch */
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1); /* +1 */
        if (!lua_istable(L, -1) && luaL_testudata(L, -1, TGL_MODULE) == NULL)
            luaL_error(L, "Sequential: entry %d is a %s, expected a tegraph.Module or a Lua module table", i + 1,
                       luaL_typename(L, -1));
        cs[i] = tgl_module_check(L, -1);
        lua_rawseti(L, kids, i + 1);
    }
    tg_module **slot = tgl_module_newbox(L, 0); /* +1 */
    lua_pushvalue(L, kids);
    lua_setiuservalue(L, -2, 2);
    CTOR_END(L, slot, tg_sequential_new(cs, n, &o, slot));
}

static const luaL_Reg nn_funcs[] = {
    {"Linear", nn_linear},
    {"LayerNorm", nn_layernorm},
    {"RMSNorm", nn_rmsnorm},
    {"LayerNormLinear", nn_layernorm_linear},
    {"LayerNormMLP", nn_layernorm_mlp},
    {"CausalSelfAttention", nn_attention},
    {"TransformerLayer", nn_transformer_layer},
    {"Embedding", nn_embedding},
    {"LMHead", nn_lm_head},
    {"Sequential", nn_sequential},
    {"Module", tgl_nn_module},
    {"Parameter", tgl_nn_parameter},
    {NULL, NULL},
};

void tgl_nn_constructors(lua_State *L) { luaL_setfuncs(L, nn_funcs, 0); }
