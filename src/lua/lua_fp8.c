/* lua_fp8.c — tegraph.ops' FP8 functions: casts with amax (and transposed copies), transpose, dequantize,
 * amax, the FP8 GEMM, the LayerNorm forward written as FP8, and the host conversions of single values. */
#include "lua/lua_nn.h"
#include "core/ops_nn.h"

#include <string.h>

/* An FP8 dtype name ("e4m3", "e5m2" and their aliases) at idx. */
static tg_dtype fp8_dtype_check(lua_State *L, int idx)
{
    tg_dtype dt = tgl_dtype_check(L, idx);
    if (!tg_dtype_is_fp8(dt))
        luaL_argerror(L, idx, lua_pushfstring(L, "dtype %s is not an FP8 dtype (e4m3 or e5m2)", tg_dtype_name(dt)));
    return dt;
}

/* opts[k]: a tensor or nil; anything else is an error naming the field. */
static tg_tensor *field_tensor(lua_State *L, int opts, const char *k, const char *fn)
{
    if (lua_isnoneornil(L, opts)) return NULL;
    lua_getfield(L, opts, k);
    tg_tensor *t = NULL;
    if (!lua_isnil(L, -1)) {
        t = tgl_tensor_test(L, -1);
        if (!t) luaL_error(L, "%s: option %s must be a tensor (got a %s)", fn, k, luaL_typename(L, -1));
    }
    lua_pop(L, 1); /* the userdata stays referenced by the table */
    return t;
}

static int field_bool(lua_State *L, int opts, const char *k)
{
    if (lua_isnoneornil(L, opts)) return 0;
    return tgl_field_bool(L, opts, k);
}

static double field_num(lua_State *L, int opts, const char *k, double def, const char *fn)
{
    if (lua_isnoneornil(L, opts)) return def;
    lua_getfield(L, opts, k);
    double v = def;
    if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1)) luaL_error(L, "%s: option %s must be a number (got a %s)", fn, k, luaL_typename(L, -1));
        v = (double)lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

/* Rejects fields of opts outside known (", "-separated; typos would otherwise be ignored). */
static void fields_known(lua_State *L, int opts, const char *known, const char *fn)
{
    if (lua_isnoneornil(L, opts)) return;
    luaL_checktype(L, opts, LUA_TTABLE);
    tgl_check_keys(L, opts, fn, known);
}

static tg_tensor *push_new(lua_State *L, const tg_tensor *like, tg_dtype dt, int nd, const int64_t *shape)
{
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_tensor_new(dt, nd, shape, tg_tensor_device(like), slot));
    return *slot;
}

static tg_tensor *push_like(lua_State *L, const tg_tensor *t, tg_dtype dt)
{
    int64_t shape[TG_MAX_DIMS];
    for (int i = 0; i < tg_tensor_ndim(t); i++) shape[i] = tg_tensor_dim(t, i);
    return push_new(L, t, dt, tg_tensor_ndim(t), shape);
}

/* x seen as a matrix: (cols, rows) for its transpose. */
static void transposed_shape(const tg_tensor *x, int64_t shape[2])
{
    int64_t c = tg_tensor_ndim(x) ? tg_tensor_dim(x, tg_tensor_ndim(x) - 1) : 1;
    shape[0] = c;
    shape[1] = c ? tg_tensor_numel(x) / c : 0;
}

/* Pushes the tensor given as opts[k], else a new one of dt (x's shape, or shape when nd > 0); returns it. */
static tg_tensor *out_or_new(lua_State *L, int opts, const char *k, tg_tensor *given, const tg_tensor *x,
                             tg_dtype dt, int nd, const int64_t *shape)
{
    if (given) {
        lua_getfield(L, opts, k);
        return given;
    }
    return nd ? push_new(L, x, dt, nd, shape) : push_like(L, x, dt);
}

static const char *const cast_opts = "scale, amax, scale_inv, accumulate, y, y_t";
static const char *const cast_t_opts = "scale, amax, scale_inv, accumulate, y, y_t, gelu_x, dbias_part, gelu";
static const char *const ln_opts = "eps, scale, amax, scale_inv, accumulate, y";

/* fp8_cast(x, dtype [, {scale=, amax=, scale_inv=, accumulate=false, y=}]) -> y: y = fp8(x * scale), amax =
 * max|x| (written, or accumulated when accumulate), scale_inv = 1 / scale (tg_fp8_cast); y is new (x's
 * shape) unless given. */
static int o_fp8_cast(lua_State *L)
{
    tg_tensor *x = tgl_tensor_check(L, 1);
    tg_dtype dt = fp8_dtype_check(L, 2);
    fields_known(L, 3, cast_opts, "fp8_cast");
    tg_tensor *scale = field_tensor(L, 3, "scale", "fp8_cast"), *amax = field_tensor(L, 3, "amax", "fp8_cast");
    tg_tensor *si = field_tensor(L, 3, "scale_inv", "fp8_cast"), *y = field_tensor(L, 3, "y", "fp8_cast");
    int flags = field_bool(L, 3, "accumulate") ? TG_FP8_AMAX_ACCUMULATE : 0;
    if (field_tensor(L, 3, "y_t", "fp8_cast")) return luaL_error(L, "fp8_cast: option y_t belongs to fp8_cast_transpose");
    y = out_or_new(L, 3, "y", y, x, dt, 0, NULL);
    tgl_check(L, tg_fp8_cast(y, x, scale, amax, si, flags));
    return 1;
}

/* fp8_cast_transpose(x, dtype [, opts as fp8_cast, y=, y_t=, gelu_x=, dbias_part=]) -> y, y_t: the cast and its
 * transpose (x's last dimension first, 2-D) in one pass; y or y_t may be given (y = false: only y_t, returned
 * alone). A gradient's form (tg_fp8_cast_transpose_dbias): gelu_x casts gelu'(gelu_x) * x, dbias_part (f32
 * (fp8_dbias_chunks(rows), cols)) gets the bias gradient's column partials. gelu = true: the forward form
 * (tg_fp8_cast_transpose_gelu), x is a pre-activation and gelu(x) is cast. */
static int o_fp8_cast_transpose(lua_State *L)
{
    tg_tensor *x = tgl_tensor_check(L, 1);
    tg_dtype dt = fp8_dtype_check(L, 2);
    fields_known(L, 3, cast_t_opts, "fp8_cast_transpose");
    tg_tensor *scale = field_tensor(L, 3, "scale", "fp8_cast_transpose");
    tg_tensor *gx = field_tensor(L, 3, "gelu_x", "fp8_cast_transpose");
    tg_tensor *part = field_tensor(L, 3, "dbias_part", "fp8_cast_transpose");
    tg_tensor *amax = field_tensor(L, 3, "amax", "fp8_cast_transpose");
    tg_tensor *si = field_tensor(L, 3, "scale_inv", "fp8_cast_transpose");
    int flags = field_bool(L, 3, "accumulate") ? TG_FP8_AMAX_ACCUMULATE : 0;
    const int gelu = field_bool(L, 3, "gelu");
    if (gelu && (gx || part))
        return luaL_error(L, "fp8_cast_transpose: option gelu (the forward form) goes with neither gelu_x nor dbias_part");
    int no_y = 0;
    if (!lua_isnoneornil(L, 3)) {
        lua_getfield(L, 3, "y");
        no_y = lua_isboolean(L, -1) && !lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    tg_tensor *y = no_y ? NULL : field_tensor(L, 3, "y", "fp8_cast_transpose");
    tg_tensor *yt = field_tensor(L, 3, "y_t", "fp8_cast_transpose");
    int64_t ts[2];
    transposed_shape(x, ts);
    int nret = 0;
    if (!no_y) y = out_or_new(L, 3, "y", y, x, dt, 0, NULL), nret++;
    yt = out_or_new(L, 3, "y_t", yt, x, dt, 2, ts), nret++;
    if (gelu) tgl_check(L, tg_fp8_cast_transpose_gelu(y, yt, x, scale, amax, si, flags));
    else if (gx || part) tgl_check(L, tg_fp8_cast_transpose_dbias(y, yt, x, gx, scale, amax, si, part, flags));
    else tgl_check(L, tg_fp8_cast_transpose(y, yt, x, scale, amax, si, flags));
    return nret;
}

/* fp8_layernorm(x, gamma, beta|nil, dtype [, {eps = 1e-5, scale=, amax=, scale_inv=, accumulate=false, y=}]) -> y, mean,
 * rstd: the LayerNorm forward written as FP8 (tg_layernorm_forward_fp8): y (x's shape, dtype) the codes of the
 * normalized x (rounded to x's dtype) times scale, amax and scale_inv as fp8_cast; y is new unless given. */
static int o_fp8_layernorm(lua_State *L)
{
    tg_tensor *x = tgl_tensor_check(L, 1), *g = tgl_tensor_check(L, 2);
    tg_tensor *b = lua_isnoneornil(L, 3) ? NULL : tgl_tensor_check(L, 3);
    tg_dtype dt = fp8_dtype_check(L, 4);
    fields_known(L, 5, ln_opts, "fp8_layernorm");
    tg_tensor *scale = field_tensor(L, 5, "scale", "fp8_layernorm"), *amax = field_tensor(L, 5, "amax", "fp8_layernorm");
    tg_tensor *si = field_tensor(L, 5, "scale_inv", "fp8_layernorm"), *y = field_tensor(L, 5, "y", "fp8_layernorm");
    const double eps = field_num(L, 5, "eps", 1e-5, "fp8_layernorm");
    int flags = field_bool(L, 5, "accumulate") ? TG_FP8_AMAX_ACCUMULATE : 0;
    const int64_t c = tg_tensor_ndim(x) ? tg_tensor_dim(x, tg_tensor_ndim(x) - 1) : 1, n = c ? tg_tensor_numel(x) / c : 0;
    y = out_or_new(L, 5, "y", y, x, dt, 0, NULL);
    tg_tensor *mean = push_new(L, x, TG_F32, 1, &n), *rstd = push_new(L, x, TG_F32, 1, &n);
    tgl_check(L, tg_layernorm_forward_fp8(y, mean, rstd, x, g, b, eps, scale, amax, si, flags));
    return 3;
}

/* fp8_dbias_finish(dbias, dbias_part [, accumulate = 0]) -> dbias: dbias = accumulate * dbias + the sum of the
 * partials' rows (tg_fp8_dbias_finish). */
static int o_fp8_dbias_finish(lua_State *L)
{
    tg_tensor *db = tgl_tensor_check(L, 1), *part = tgl_tensor_check(L, 2);
    double acc = luaL_optnumber(L, 3, 0.0);
    tgl_check(L, tg_fp8_dbias_finish(db, part, acc));
    lua_pushvalue(L, 1);
    return 1;
}

/* fp8_dbias_chunks(rows) -> the rows of a dbias_part for a gradient of `rows` rows. */
static int o_fp8_dbias_chunks(lua_State *L)
{
    lua_Integer r = luaL_checkinteger(L, 1);
    luaL_argcheck(L, r >= 0, 1, "rows must be >= 0");
    lua_pushinteger(L, (lua_Integer)tg_fp8_dbias_chunks((int64_t)r));
    return 1;
}

/* fp8_transpose(x [, y_t]) -> y_t: the codes of an FP8 x (as a matrix) transposed. */
static int o_fp8_transpose(lua_State *L)
{
    tg_tensor *x = tgl_tensor_check(L, 1);
    tg_tensor *yt = lua_isnoneornil(L, 2) ? NULL : tgl_tensor_check(L, 2);
    int64_t ts[2];
    transposed_shape(x, ts);
    if (yt) lua_pushvalue(L, 2);
    else yt = push_new(L, x, tg_tensor_dtype(x), 2, ts);
    tgl_check(L, tg_fp8_transpose(yt, x));
    return 1;
}

/* fp8_dequantize(x [, scale_inv [, dtype="f32" | y]]) -> y = x * scale_inv (a new tensor of x's shape, or y). */
static int o_fp8_dequantize(lua_State *L)
{
    tg_tensor *x = tgl_tensor_check(L, 1);
    tg_tensor *si = lua_isnoneornil(L, 2) ? NULL : tgl_tensor_check(L, 2);
    tg_tensor *y = tgl_tensor_test(L, 3);
    if (y) lua_pushvalue(L, 3);
    else y = push_like(L, x, lua_isnoneornil(L, 3) ? TG_F32 : tgl_dtype_check(L, 3));
    tgl_check(L, tg_fp8_dequantize(y, x, si));
    return 1;
}

/* fp8_amax(amax, x [, accumulate=false]) -> amax = max|x| (or max(amax, max|x|)). */
static int o_fp8_amax(lua_State *L)
{
    tg_tensor *amax = tgl_tensor_check(L, 1), *x = tgl_tensor_check(L, 2);
    tgl_check(L, tg_fp8_amax(amax, x, lua_toboolean(L, 3) ? TG_FP8_AMAX_ACCUMULATE : 0));
    lua_settop(L, 1);
    return 1;
}

/* fp8_gemm(d, a, trans_a, b, trans_b [, {a_scale_inv=, b_scale_inv=, alpha=1, beta=0,
 * epilogue="none"|"bias"|"bias_gelu", bias=, aux=, amax_d=, accumulate=false}]) -> d (tg_fp8_gemm:
 * A (m,k) and B (n,k), trans_a false and trans_b true). */
static int o_fp8_gemm(lua_State *L)
{
    static const char *const allowed = "a_scale_inv, b_scale_inv, alpha, beta, epilogue, bias, aux, amax_d, accumulate";
    static const char *const epis[] = {"none", "bias", "bias_gelu", NULL};
    static const tg_gemm_epilogue epi_of[] = {TG_EPI_NONE, TG_EPI_BIAS, TG_EPI_BIAS_GELU};
    const char *fn = "fp8_gemm";
    tg_tensor *d = tgl_tensor_check(L, 1), *a = tgl_tensor_check(L, 2), *b = tgl_tensor_check(L, 4);
    int ta = lua_toboolean(L, 3), tb = lua_toboolean(L, 5);
    fields_known(L, 6, allowed, fn);
    tg_tensor *asi = field_tensor(L, 6, "a_scale_inv", fn), *bsi = field_tensor(L, 6, "b_scale_inv", fn);
    tg_tensor *bias = field_tensor(L, 6, "bias", fn), *aux = field_tensor(L, 6, "aux", fn);
    tg_tensor *amax_d = field_tensor(L, 6, "amax_d", fn);
    double alpha = field_num(L, 6, "alpha", 1.0, fn), beta = field_num(L, 6, "beta", 0.0, fn);
    int flags = field_bool(L, 6, "accumulate") ? TG_FP8_AMAX_ACCUMULATE : 0;
    int epi = 0;
    if (!lua_isnoneornil(L, 6)) {
        lua_getfield(L, 6, "epilogue");
        if (!lua_isnil(L, -1)) {
            const char *name = lua_tostring(L, -1);
            while (epis[epi] && !(name && strcmp(epis[epi], name) == 0)) epi++;
            if (!epis[epi])
                return luaL_error(L, "fp8_gemm: unknown epilogue '%s' (expected \"none\", \"bias\" or \"bias_gelu\")",
                                  name ? name : luaL_typename(L, -1));
        }
        lua_pop(L, 1);
    }
    tgl_check(L, tg_fp8_gemm(d, a, ta, asi, b, tb, bsi, alpha, beta, epi_of[epi], bias, aux, amax_d, flags));
    lua_settop(L, 1);
    return 1;
}

/* fp8_from_f32(dtype, x) -> code (0..255): the saturating, round-to-nearest-even conversion of one value. */
static int o_fp8_from_f32(lua_State *L)
{
    tg_dtype dt = fp8_dtype_check(L, 1);
    lua_pushinteger(L, tg_fp8_from_f32(dt, (float)luaL_checknumber(L, 2)));
    return 1;
}

/* fp8_to_f32(dtype, code) -> the value of a code. */
static int o_fp8_to_f32(lua_State *L)
{
    tg_dtype dt = fp8_dtype_check(L, 1);
    lua_Integer c = luaL_checkinteger(L, 2);
    luaL_argcheck(L, c >= 0 && c <= 255, 2, "an FP8 code is 0..255");
    lua_pushnumber(L, (lua_Number)tg_fp8_to_f32(dt, (uint8_t)c));
    return 1;
}

/* fp8_max(dtype) -> the largest finite value (448, 57344). */
static int o_fp8_max(lua_State *L)
{
    lua_pushnumber(L, (lua_Number)tg_fp8_max(fp8_dtype_check(L, 1)));
    return 1;
}

static const luaL_Reg fp8_funcs[] = {
    {"fp8_cast", o_fp8_cast},
    {"fp8_cast_transpose", o_fp8_cast_transpose},
    {"fp8_layernorm", o_fp8_layernorm},
    {"fp8_dbias_finish", o_fp8_dbias_finish},
    {"fp8_dbias_chunks", o_fp8_dbias_chunks},
    {"fp8_transpose", o_fp8_transpose},
    {"fp8_dequantize", o_fp8_dequantize},
    {"fp8_amax", o_fp8_amax},
    {"fp8_gemm", o_fp8_gemm},
    {"fp8_from_f32", o_fp8_from_f32},
    {"fp8_to_f32", o_fp8_to_f32},
    {"fp8_max", o_fp8_max},
    {NULL, NULL},
};

void tgl_fp8_funcs(lua_State *L) { luaL_setfuncs(L, fp8_funcs, 0); }
