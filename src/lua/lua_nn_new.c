/* lua_nn_new.c — tegraph.nn constructors (Linear, LayerNorm, ..., Sequential): arguments to tg_module_opts.
 *
 * Each constructor takes its sizes positionally, then an optional options table
 * (nn.Linear(in_features, out_features [, options])), or everything in one
 * table (nn.Linear{in_features =, out_features =, ...}); both build the same
 * module. Option names are PyTorch's and TransformerEngine's; any other key is
 * refused, and a key of the older spelling is refused naming its new name. */
#include "lua/lua_nn.h"
#include "nn/nn.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Every module's options; bias, eps and init_std only where the module has a bias, a norm or weights drawn at
 * random (its ctor's keys), so an option a module has no use for is refused rather than ignored. */
static const char *const common_keys[] = {"dtype", "device", "delay_wgrad", "fuse_wgrad_accumulation", "chunk",
                                          "name", NULL};

/* A constructor's argument spelling. */
struct ctor {
    const char *name;           /* as errors name it: "nn.Linear" */
    const char *const *sizes;   /* positional arguments, in order; also options by these names */
    const char *const *keys;    /* its other options (besides common_keys) */
    const char *const *renamed; /* pairs: an old key, the name that replaced it */
};

static int key_in(const char *k, const char *const *list)
{
    for (; list && *list; list++)
        if (strcmp(k, *list) == 0) return 1;
    return 0;
}

static int count(const char *const *list)
{
    int n = 0;
    while (list && list[n]) n++;
    return n;
}

/* Pushes "a, b [, options]". */
static const char *push_usage(lua_State *L, const struct ctor *c)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (const char *const *l = c->sizes; *l; l++) luaL_addstring(&b, *l), luaL_addstring(&b, l[1] ? ", " : "");
    luaL_addstring(&b, " [, options]");
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

/* The positive integer at idx, or 0 when it is not one. */
static int64_t size_at(lua_State *L, int idx)
{
    int isint;
    if (lua_type(L, idx) != LUA_TNUMBER) return 0;
    lua_Integer v = lua_tointegerx(L, idx, &isint);
    return isint && v >= 1 ? (int64_t)v : 0;
}

/* The value at idx, described for an error: "a string", "0", "no value". */
static const char *push_got(lua_State *L, int idx)
{
    if (lua_type(L, idx) == LUA_TNUMBER) return lua_pushfstring(L, "%s", luaL_tolstring(L, idx, NULL));
    if (lua_isnoneornil(L, idx)) return lua_pushliteral(L, "no value");
    return lua_pushfstring(L, "a %s", luaL_typename(L, idx));
}

/* The positional form (sizes..., [options]) becomes one options table at 1. */
static void args_to_table(lua_State *L, const struct ctor *c)
{
    int n = count(c->sizes), top = lua_gettop(L);
    if (lua_type(L, 1) == LUA_TTABLE) {
        if (top > 1) luaL_error(L, "%s: takes (%s) or one options table, not a table then more arguments", c->name, push_usage(L, c));
        return;
    }
    if (top > n + 1) luaL_error(L, "%s: too many arguments (%d; takes %s)", c->name, top, push_usage(L, c));
    for (int i = 1; i <= n; i++)
        if (size_at(L, i) == 0)
            luaL_error(L, "%s: argument #%d (%s) must be a positive integer, got %s", c->name, i, c->sizes[i - 1], push_got(L, i));
    if (top == n + 1 && !lua_isnil(L, n + 1) && !lua_istable(L, n + 1))
        luaL_error(L, "%s: argument #%d (options) must be a table, got a %s", c->name, n + 1, luaL_typename(L, n + 1));
    lua_createtable(L, 0, n + 8);
    int t = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        lua_pushvalue(L, i);
        lua_setfield(L, t, c->sizes[i - 1]);
    }
    if (top == n + 1 && !lua_isnil(L, n + 1)) {
        lua_pushnil(L);
        while (lua_next(L, n + 1)) { /* key -2, value -1 */
            if (lua_type(L, -2) == LUA_TSTRING && key_in(lua_tostring(L, -2), c->sizes))
                luaL_error(L, "%s: %s is given as an argument and again in the options", c->name, lua_tostring(L, -2));
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_settable(L, t); /* t[key] = value; the key stays for lua_next */
        }
    }
    lua_replace(L, 1);
    lua_settop(L, 1);
}

/* Refuses any key of the options table at 1 that c does not take. */
static void check_keys(lua_State *L, const struct ctor *c, int list_ok)
{
    lua_pushnil(L);
    while (lua_next(L, 1)) { /* key -2, value -1 */
        if (lua_type(L, -2) == LUA_TSTRING) {
            const char *k = lua_tostring(L, -2);
            if (key_in(k, c->sizes) || key_in(k, c->keys) || key_in(k, common_keys)) {
                lua_pop(L, 1);
                continue;
            }
            for (const char *const *r = c->renamed; r && *r; r += 2)
                if (strcmp(k, r[0]) == 0) luaL_error(L, "%s: unknown option '%s' (use %s)", c->name, k, r[1]);
            luaL_Buffer b;
            luaL_buffinit(L, &b);
            for (const char *const *l = c->sizes; l && *l; l++) luaL_addstring(&b, *l), luaL_addstring(&b, ", ");
            for (const char *const *l = c->keys; l && *l; l++) luaL_addstring(&b, *l), luaL_addstring(&b, ", ");
            for (const char *const *l = common_keys; *l; l++) luaL_addstring(&b, *l), luaL_addstring(&b, l[1] ? ", " : "");
            luaL_pushresult(&b);
            luaL_error(L, "%s: unknown option '%s' (known: %s)", c->name, k, lua_tostring(L, -1));
        } else if (!(list_ok && lua_isinteger(L, -2))) {
            luaL_error(L, "%s: options must be named (got a %s key)", c->name, luaL_typename(L, -2));
        }
        lua_pop(L, 1);
    }
}

/* The number in option k (at -1) of constructor who: finite, and > 0 (positive) or >= 0. */
static double num_common(lua_State *L, const char *who, const char *k, int positive)
{
    int isnum = 0;
    double v = (double)lua_tonumberx(L, -1, &isnum);
    if (!isnum || !isfinite(v) || (positive ? v <= 0 : v < 0)) {
        const char *ty = luaL_typename(L, -1);
        luaL_error(L, "%s: option '%s' must be a finite number %s (got %s %s)", who, k, positive ? "> 0" : ">= 0", ty,
                   tgl_value_str(L, -1));
    }
    return v;
}

/* Reads the common options of the table at 1 into o (who: the constructor, for errors). */
static void read_common(lua_State *L, const char *who, tg_module_opts *o)
{
    tg_module_opts_default(o);
    if (lua_getfield(L, 1, "dtype") != LUA_TNIL) o->dtype = tgl_dtype_check(L, -1);
    if (lua_getfield(L, 1, "device") != LUA_TNIL) o->device = tgl_device_check(L, -1);
    if (lua_getfield(L, 1, "bias") != LUA_TNIL) o->bias = tgl_field_bool(L, 1, "bias");
    o->delay_wgrad = tgl_field_bool(L, 1, "delay_wgrad");
    o->fuse_wgrad_accumulation = tgl_field_bool(L, 1, "fuse_wgrad_accumulation");
    if (lua_getfield(L, 1, "chunk") != LUA_TNIL) {
        int isint = 0;
        lua_Integer chunk = lua_tointegerx(L, -1, &isint);
        if (!isint || chunk < 1 || chunk > INT_MAX)
            luaL_error(L, "%s: option 'chunk' = %s is out of range (an integer from 1 to %d)", who, tgl_value_str(L, -1), INT_MAX);
        o->chunk = (int)chunk;
    }
    if (lua_getfield(L, 1, "name") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "%s: option 'name' must be a string (got a %s)", who, luaL_typename(L, -1));
        o->name = lua_tostring(L, -1);
    }
    if (lua_getfield(L, 1, "eps") != LUA_TNIL) o->eps = num_common(L, who, "eps", 1);
    if (lua_getfield(L, 1, "init_std") != LUA_TNIL) o->init_std = num_common(L, who, "init_std", 0);
    lua_pop(L, 7); /* strings stay alive in the options table */
}

/* Brings the arguments to one options table at 1, checks its keys, reads the common options. */
static void ctor_args(lua_State *L, const struct ctor *c, tg_module_opts *o)
{
    args_to_table(L, c);
    check_keys(L, c, 0);
    read_common(L, c->name, o);
}

/* The fp8 option (a recipe, or nil / false: off) into o->fp8: for the modules built of Linears. */
static void fp8_opt(lua_State *L, const struct ctor *c, tg_module_opts *o)
{
    int ty = lua_getfield(L, 1, "fp8");
    if (ty != LUA_TNIL && !(ty == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
        char what[64];
        snprintf(what, sizeof what, "%s: option 'fp8'", c->name);
        tgl_fp8_recipe_check(L, -1, what, &o->fp8);
    }
    lua_pop(L, 1);
}

/* An integer option; def < 0 means required. */
static int64_t int_opt(lua_State *L, const struct ctor *c, const char *k, int64_t def)
{
    int ty = lua_getfield(L, 1, k);
    int64_t v = size_at(L, -1);
    if (ty == LUA_TNIL) {
        lua_pop(L, 1);
        if (def < 0) luaL_error(L, "%s: option '%s' (an integer) is required", c->name, k);
        return def;
    }
    if (v == 0) luaL_error(L, "%s: option '%s' must be a positive integer, got %s", c->name, k, push_got(L, -1));
    if (v > INT_MAX) luaL_error(L, "%s: option '%s' = %I is too large (at most %d)", c->name, k, (lua_Integer)v, INT_MAX);
    lua_pop(L, 1);
    return v;
}

/* ffn_hidden_size, by default 4 * hidden_size (h is at most INT_MAX: no wrap), refused beyond INT_MAX. */
static int64_t ffn_opt(lua_State *L, const struct ctor *c, int64_t h)
{
    int64_t f = int_opt(L, c, "ffn_hidden_size", 4 * h);
    if (f > INT_MAX)
        luaL_error(L, "%s: ffn_hidden_size = 4 * hidden_size = %I is too large (at most %d; give ffn_hidden_size)", c->name,
                   (lua_Integer)f, INT_MAX);
    return f;
}

/* A string option; def when absent. */
static const char *str_opt(lua_State *L, const struct ctor *c, const char *k, const char *def)
{
    int ty = lua_getfield(L, 1, k);
    if (ty != LUA_TNIL && ty != LUA_TSTRING) luaL_error(L, "%s: option '%s' must be a string, got a %s", c->name, k, luaL_typename(L, -1));
    const char *s = ty == LUA_TNIL ? def : lua_tostring(L, -1);
    lua_pop(L, 1); /* the string stays alive in the options table */
    return s;
}

/* Pushes the box, then registers the module once it is built. */
#define CTOR_END(L, slot, call)                                                                        \
    do {                                                                                               \
        tgl_check(L, call);                                                                            \
        tgl_objects_set(L, *(slot), -1);                                                               \
        return 1;                                                                                      \
    } while (0)

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

static const struct ctor linear_c = {"nn.Linear", LIST("in_features", "out_features"), LIST("bias", "init_std", "fp8"),
                                     LIST("in", "in_features", "out", "out_features")};

static int nn_linear(lua_State *L)
{
    tg_module_opts o;
    ctor_args(L, &linear_c, &o);
    fp8_opt(L, &linear_c, &o);
    int64_t in = int_opt(L, &linear_c, "in_features", -1), out = int_opt(L, &linear_c, "out_features", -1);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_linear_new(in, out, &o, slot));
}

static const struct ctor layernorm_c = {"nn.LayerNorm", LIST("hidden_size"), LIST("bias", "eps"), LIST("dim", "hidden_size")};
static const struct ctor rmsnorm_c = {"nn.RMSNorm", LIST("hidden_size"), LIST("eps"), LIST("dim", "hidden_size")};

static int nn_layernorm(lua_State *L)
{
    tg_module_opts o;
    ctor_args(L, &layernorm_c, &o);
    int64_t c = int_opt(L, &layernorm_c, "hidden_size", -1);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_layernorm_new(c, &o, slot));
}

static int nn_rmsnorm(lua_State *L)
{
    tg_module_opts o;
    ctor_args(L, &rmsnorm_c, &o);
    int64_t c = int_opt(L, &rmsnorm_c, "hidden_size", -1);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_rmsnorm_new(c, &o, slot));
}

static const struct ctor layernorm_linear_c = {
    "nn.LayerNormLinear", LIST("in_features", "out_features"), LIST("bias", "eps", "init_std", "normalization", "fp8"),
    LIST("in", "in_features", "out", "out_features", "norm", "normalization")};

static int nn_layernorm_linear(lua_State *L)
{
    const struct ctor *c = &layernorm_linear_c;
    tg_module_opts o;
    ctor_args(L, c, &o);
    fp8_opt(L, c, &o);
    int64_t in = int_opt(L, c, "in_features", -1), out = int_opt(L, c, "out_features", -1);
    const char *norm = str_opt(L, c, "normalization", "LayerNorm");
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_layernorm_linear_new(in, out, norm, &o, slot));
}

static const struct ctor layernorm_mlp_c = {
    "nn.LayerNormMLP", LIST("hidden_size", "ffn_hidden_size"),
    LIST("bias", "eps", "init_std", "normalization", "activation", "fp8"),
    LIST("dim", "hidden_size", "hidden", "ffn_hidden_size", "norm", "normalization")};

/* The table form may leave ffn_hidden_size out: 4 * hidden_size. */
static int nn_layernorm_mlp(lua_State *L)
{
    const struct ctor *c = &layernorm_mlp_c;
    tg_module_opts o;
    ctor_args(L, c, &o);
    fp8_opt(L, c, &o);
    int64_t h = int_opt(L, c, "hidden_size", -1), f = ffn_opt(L, c, h);
    const char *norm = str_opt(L, c, "normalization", "LayerNorm"), *act = str_opt(L, c, "activation", "gelu");
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_layernorm_mlp_new(h, f, norm, act, &o, slot));
}

static const struct ctor attention_c = {"nn.CausalSelfAttention", LIST("hidden_size", "num_attention_heads"),
                                        LIST("bias", "init_std", "fp8"),
                                        LIST("dim", "hidden_size", "heads", "num_attention_heads")};

static int nn_attention(lua_State *L)
{
    const struct ctor *c = &attention_c;
    tg_module_opts o;
    ctor_args(L, c, &o);
    fp8_opt(L, c, &o);
    int64_t h = int_opt(L, c, "hidden_size", -1), nh = int_opt(L, c, "num_attention_heads", -1);
    if (nh > INT_MAX) luaL_error(L, "%s: num_attention_heads %I is too large", c->name, (lua_Integer)nh);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_attention_new(h, (int)nh, &o, slot));
}

static const struct ctor transformer_layer_c = {
    "nn.TransformerLayer", LIST("hidden_size", "ffn_hidden_size", "num_attention_heads"),
    LIST("bias", "eps", "init_std", "normalization", "activation", "fp8"),
    LIST("dim", "hidden_size", "hidden", "ffn_hidden_size", "heads", "num_attention_heads", "norm", "normalization")};

/* The table form may leave ffn_hidden_size out: 4 * hidden_size. */
static int nn_transformer_layer(lua_State *L)
{
    const struct ctor *c = &transformer_layer_c;
    tg_module_opts o;
    ctor_args(L, c, &o);
    fp8_opt(L, c, &o);
    int64_t h = int_opt(L, c, "hidden_size", -1), f = ffn_opt(L, c, h);
    int64_t nh = int_opt(L, c, "num_attention_heads", -1);
    if (nh > INT_MAX) luaL_error(L, "%s: num_attention_heads %I is too large", c->name, (lua_Integer)nh);
    const char *norm = str_opt(L, c, "normalization", "LayerNorm"), *act = str_opt(L, c, "activation", "gelu");
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_transformer_layer_new(h, (int)nh, f, norm, act, &o, slot));
}

static const struct ctor embedding_c = {
    "nn.Embedding", LIST("num_embeddings", "embedding_dim"), LIST("init_std", "max_position_embeddings"),
    LIST("vocab", "num_embeddings", "dim", "embedding_dim", "context", "max_position_embeddings")};

/* Token table (num_embeddings, embedding_dim) plus a position table of max_position_embeddings rows. */
static int nn_embedding(lua_State *L)
{
    const struct ctor *c = &embedding_c;
    tg_module_opts o;
    ctor_args(L, c, &o);
    int64_t v = int_opt(L, c, "num_embeddings", -1), d = int_opt(L, c, "embedding_dim", -1);
    int64_t t = int_opt(L, c, "max_position_embeddings", -1);
    tg_module **slot = tgl_module_newbox(L, 0);
    CTOR_END(L, slot, tg_embedding_new(v, d, t, &o, slot));
}

static const struct ctor lm_head_c = {
    "nn.LMHead", LIST("hidden_size", "vocab_size"),
    LIST("bias", "eps", "init_std", "tied", "normalization", "fused_loss", "loss_chunk_rows"),
    LIST("dim", "hidden_size", "vocab", "vocab_size", "norm", "normalization")};

static int nn_lm_head(lua_State *L)
{
    const struct ctor *c = &lm_head_c;
    tg_module_opts o;
    ctor_args(L, c, &o);
    int64_t h = int_opt(L, c, "hidden_size", -1), v = int_opt(L, c, "vocab_size", -1);
    const char *norm = str_opt(L, c, "normalization", "LayerNorm");
    tg_module *tied = NULL;
    lua_getfield(L, 1, "tied"); /* +1, stays: kept alive below */
    int tidx = lua_gettop(L);
    if (!lua_isnil(L, tidx)) {
        struct tgl_module *u = luaL_testudata(L, tidx, TGL_MODULE);
        if (u == NULL || u->m == NULL) luaL_error(L, "%s: option 'tied' must be an Embedding module", c->name);
        tied = u->m;
    }
    int fused = 1;
    if (lua_getfield(L, 1, "fused_loss") != LUA_TNIL) {
        if (!lua_isboolean(L, -1)) luaL_error(L, "%s: option 'fused_loss' must be a boolean, got %s", c->name, push_got(L, -1));
        fused = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    int64_t rows = int_opt(L, c, "loss_chunk_rows", 0); /* 0: automatic */
    tg_module **slot = tgl_module_newbox(L, 0);
    if (tied) tgl_module_keep(L, -1, tidx);
    tg_status st = tg_lm_head_new(h, v, tied, norm, &o, slot);
    if (st == TG_OK) st = tg_lm_head_set_fused(*slot, fused, rows);
    CTOR_END(L, slot, st);
}

static const struct ctor sequential_c = {"nn.Sequential", NULL, NULL, NULL};

/* tg.nn.Sequential{m1, m2, ... [, name=, chunk=, ...]}: entries may be Lua tables. */
static int nn_sequential(lua_State *L)
{
    tg_module_opts o;
    luaL_checktype(L, 1, LUA_TTABLE);
    check_keys(L, &sequential_c, 1);
    read_common(L, "Sequential", &o);
    int n = tgl_len(L, 1);
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
    {"is_parameter", tgl_nn_is_parameter},
    {NULL, NULL},
};

void tgl_nn_constructors(lua_State *L) { luaL_setfuncs(L, nn_funcs, 0); }
