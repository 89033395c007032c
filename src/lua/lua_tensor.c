/* lua_tensor.c — the tegraph.Tensor userdata: fields, methods, arithmetic metamethods. */
#include "lua/lua_impl.h"
#include "core/checked.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

/* Pushes "file:line: " of the Lua code that made the failing call: the caller, or, when the caller is
 * the Lua library itself (lua/tegraph/, its directory in the registry under "tegraph.libdir", set by
 * tegraph.raise), the innermost Lua function outside it: the user's line. "" when a C function called. */
static void where_user(lua_State *L)
{
    lua_Debug ar;
    size_t n = 0;
    lua_getfield(L, LUA_REGISTRYINDEX, "tegraph.libdir"); /* +1 */
    const char *libdir = lua_tolstring(L, -1, &n);
    int in_lib = 0;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "Sl", &ar);
        if (libdir && n > 0 && ar.source[0] == '@' && strncmp(ar.source + 1, libdir, n) == 0) {
            in_lib = 1;
            continue;
        }
        if (ar.currentline <= 0 && in_lib) continue; /* a pcall or tail call between library and user */
        lua_pop(L, 1);
        if (ar.currentline > 0) lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
        else lua_pushliteral(L, "");
        return;
    }
    lua_pop(L, 1);
    lua_pushliteral(L, "");
}

void tgl_check(lua_State *L, tg_status st)
{
    if (st == TG_OK) return;
    where_user(L);
    lua_pushstring(L, tg_last_error());
    lua_concat(L, 2);
    lua_error(L);
}

tg_tensor **tgl_tensor_push(lua_State *L)
{
    struct tgl_tensor *u = lua_newuserdatauv(L, sizeof *u, 0); /* +1: the empty box */
    u->t = NULL;
    luaL_setmetatable(L, TGL_TENSOR);
    return &u->t;
}

/* A closed tensor at idx: an argument error for an argument, a plain error for a value the binding took out of a
 * table (a negative index would print as "bad argument #-1"). */
static void closed_error(lua_State *L, int idx)
{
    if (idx > 0) luaL_argerror(L, idx, "tensor used after close");
    luaL_error(L, "a tensor used after close");
}

tg_tensor *tgl_tensor_check(lua_State *L, int idx)
{
    struct tgl_tensor *u;
    if (idx > 0) u = luaL_checkudata(L, idx, TGL_TENSOR);
    else if (!(u = luaL_testudata(L, idx, TGL_TENSOR))) luaL_error(L, "expected a tensor, got a %s", luaL_typename(L, idx));
    if (u->t == NULL) closed_error(L, idx);
    return u->t;
}

tg_tensor *tgl_tensor_test(lua_State *L, int idx)
{
    struct tgl_tensor *u = luaL_testudata(L, idx, TGL_TENSOR);
    if (u == NULL) return NULL;
    if (u->t == NULL) closed_error(L, idx);
    return u->t;
}

/* The public face of the helpers (tegraph.h, C functions called from Lua). */
tg_tensor *tg_lua_checktensor(lua_State *L, int idx) { return tgl_tensor_check(L, idx); }
tg_tensor *tg_lua_totensor(lua_State *L, int idx) /* NULL for a closed tensor too: it raises nothing */
{
    struct tgl_tensor *u = luaL_testudata(L, idx, TGL_TENSOR);
    return u ? u->t : NULL;
}
tg_tensor **tg_lua_newtensor(lua_State *L) { return tgl_tensor_push(L); }
int tg_lua_check(lua_State *L, tg_status st)
{
    tgl_check(L, st);
    return 0;
}

static int64_t shape_entry(lua_State *L, int arg, int i)
{
    int isint;
    lua_Integer d = lua_tointegerx(L, -1, &isint);
    if (!isint) luaL_argerror(L, arg, lua_pushfstring(L, "shape entry %d is not an integer (a %s)", i, luaL_typename(L, -1)));
    if (d < 0) luaL_argerror(L, arg, lua_pushfstring(L, "shape entry %d is negative (%I)", i, d));
    return (int64_t)d;
}

int tgl_shape_check(lua_State *L, int arg, int64_t shape[TG_MAX_DIMS], int *next)
{
    int n = 0;
    if (lua_type(L, arg) == LUA_TTABLE) {
        lua_Integer len = luaL_len(L, arg);
        if (len < 1 || len > TG_MAX_DIMS)
            luaL_argerror(L, arg, lua_pushfstring(L, "shape has %I dimensions (expected 1 to %d)", len, TG_MAX_DIMS));
        for (n = 0; n < len; n++) {
            lua_geti(L, arg, n + 1); /* +1 */
            shape[n] = shape_entry(L, arg, n + 1);
            lua_pop(L, 1);
        }
        *next = arg + 1;
        return n;
    }
    if (lua_type(L, arg) != LUA_TNUMBER) luaL_typeerror(L, arg, "shape (a table or integers)");
    while (lua_type(L, arg + n) == LUA_TNUMBER) {
        if (n == TG_MAX_DIMS) luaL_argerror(L, arg + n, lua_pushfstring(L, "more than %d dimensions", TG_MAX_DIMS));
        lua_pushvalue(L, arg + n); /* +1 */
        shape[n] = shape_entry(L, arg + n, n + 1);
        lua_pop(L, 1);
        n++;
    }
    *next = arg + n;
    return n;
}

void tgl_shape_push(lua_State *L, int ndim, const int64_t *shape)
{
    lua_createtable(L, ndim, 0);
    for (int i = 0; i < ndim; i++) {
        lua_pushinteger(L, (lua_Integer)shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

int tgl_nested_shape(lua_State *L, int idx, int64_t shape[TG_MAX_DIMS])
{
    int ndim = 0;
    if (lua_type(L, idx) == LUA_TNUMBER) {
        shape[0] = 1;
        return 1;
    }
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_pushvalue(L, idx); /* +1: the current level */
    while (lua_type(L, -1) == LUA_TTABLE) {
        if (ndim == TG_MAX_DIMS) luaL_argerror(L, idx, lua_pushfstring(L, "nested deeper than %d levels", TG_MAX_DIMS));
        lua_Unsigned len = lua_rawlen(L, -1);
        if (len == 0) luaL_argerror(L, idx, "empty table (no elements to take a shape from)");
        shape[ndim++] = (int64_t)len;
        lua_rawgeti(L, -1, 1); /* +1: the first element */
        lua_remove(L, -2);
    }
    lua_pop(L, 1);
    return ndim;
}

/* Reads the table on top of the stack at depth d; path holds the 1-based
 * index of each level for messages. */
static void nested_read_rec(lua_State *L, int arg, int ndim, const int64_t *shape, int d, int64_t *path, double **out)
{
    char where[96] = "", sh[64];
    for (int i = 0, k = 0; i < d && k < (int)sizeof where; i++)
        k += snprintf(where + k, sizeof where - (size_t)k, "[%lld]", (long long)path[i]);
    if (lua_type(L, -1) != LUA_TTABLE) {
        shape_str(ndim, shape, sh, sizeof sh);
        luaL_argerror(L, arg, lua_pushfstring(L, "element %s is a %s, expected a table (shape %s)", where,
                                              luaL_typename(L, -1), sh));
    }
    lua_Unsigned len = lua_rawlen(L, -1);
    if ((int64_t)len != shape[d]) {
        shape_str(ndim, shape, sh, sizeof sh);
        luaL_argerror(L, arg, lua_pushfstring(L, "ragged table: %s%s has %d elements, expected %d (shape %s)",
                                              d ? "element " : "top level", where, (int)len, (int)shape[d], sh));
    }
    for (int64_t i = 1; i <= shape[d]; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i); /* +1 */
        path[d] = i;
        if (d + 1 < ndim) {
            nested_read_rec(L, arg, ndim, shape, d + 1, path, out);
        } else {
            int isnum;
            double v = (double)lua_tonumberx(L, -1, &isnum);
            if (!isnum || lua_type(L, -1) != LUA_TNUMBER) {
                char w2[128];
                snprintf(w2, sizeof w2, "%s[%lld]", where, (long long)i);
                luaL_argerror(L, arg, lua_pushfstring(L, "element %s is a %s, expected a number", w2, luaL_typename(L, -1)));
            }
            *(*out)++ = v;
        }
        lua_pop(L, 1);
    }
}

void tgl_nested_read(lua_State *L, int idx, int ndim, const int64_t *shape, double *vals)
{
    int64_t path[TG_MAX_DIMS] = {0};
    if (lua_type(L, idx) == LUA_TNUMBER) {
        vals[0] = (double)lua_tonumber(L, idx);
        return;
    }
    lua_pushvalue(L, idx); /* +1 */
    nested_read_rec(L, idx, ndim, shape, 0, path, &vals);
    lua_pop(L, 1);
}

/* Argument errors name the argument; option values (negative indices) only the problem. */
static int arg_error(lua_State *L, int idx, const char *msg)
{
    if (idx > 0) return luaL_argerror(L, idx, msg);
    return luaL_error(L, "%s", msg);
}

tg_device tgl_device_check(lua_State *L, int idx)
{
    tg_device d;
    if (lua_type(L, idx) != LUA_TSTRING)
        arg_error(L, idx, lua_pushfstring(L, "device must be a string such as \"cpu\" or \"cuda:0\" (got a %s)",
                                          luaL_typename(L, idx)));
    if (tg_device_parse(lua_tostring(L, idx), &d) != TG_OK) arg_error(L, idx, tg_last_error());
    return d;
}

tg_dtype tgl_dtype_check(lua_State *L, int idx)
{
    tg_dtype dt;
    if (lua_type(L, idx) != LUA_TSTRING)
        arg_error(L, idx, lua_pushfstring(L, "dtype must be a string such as \"f32\" (got a %s)", luaL_typename(L, idx)));
    const char *s = lua_tostring(L, idx);
    if (tg_dtype_parse(s, &dt) != 0)
        arg_error(L, idx, lua_pushfstring(L, "unknown dtype '%s' (expected f32, bf16, f16, i32, u16, e4m3 or e5m2)", s));
    return dt;
}

void tgl_device_push(lua_State *L, tg_device d)
{
    char buf[32];
    lua_pushstring(L, tg_device_str(d, buf, sizeof buf));
}

static int dtype_is_int(tg_dtype dt) { return dt == TG_I32 || dt == TG_U16; }

static void push_elem(lua_State *L, tg_dtype dt, double v)
{
    if (dtype_is_int(dt))
        lua_pushinteger(L, (lua_Integer)v);
    else
        lua_pushnumber(L, (lua_Number)v);
}

/* A scratch buffer of n doubles owned by Lua (pushed), so errors cannot leak it. */
static double *scratch(lua_State *L, int64_t n)
{
    return lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof(double), 0); /* +1 */
}

/* All elements as doubles in a scratch buffer (pushed). */
static double *read_all(lua_State *L, const tg_tensor *t)
{
    int64_t n = tg_tensor_numel(t);
    double *v = scratch(L, n);
    tgl_check(L, tg_tensor_read_f64(t, v, (size_t)n));
    return v;
}

static void get_shape(const tg_tensor *t, int64_t *shape)
{
    for (int i = 0; i < tg_tensor_ndim(t); i++) shape[i] = tg_tensor_dim(t, i);
}

/* A new tensor (pushed) with t's dtype, shape and device. */
static tg_tensor *new_like(lua_State *L, const tg_tensor *t, tg_dtype dt)
{
    int64_t shape[TG_MAX_DIMS];
    get_shape(t, shape);
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_tensor_new(dt, tg_tensor_ndim(t), shape, tg_tensor_device(t), slot));
    return *slot;
}

/* ------------------------------------------------------------------ metamethods */

static int t_gc(lua_State *L)
{
    struct tgl_tensor *u = luaL_checkudata(L, 1, TGL_TENSOR);
    tg_tensor_free(u->t);
    u->t = NULL;
    return 0;
}

static int t_tostring(lua_State *L)
{
    struct tgl_tensor *u = luaL_checkudata(L, 1, TGL_TENSOR);
    char sh[64], dev[32];
    luaL_Buffer b;
    if (u->t == NULL) {
        lua_pushstring(L, "tegraph.Tensor (closed)");
        return 1;
    }
    tg_tensor *t = u->t;
    /* The first few values, read through a view so a large tensor is not
     * copied whole; the view is freed before anything here can raise. */
    int64_t n = tg_tensor_numel(t), k = n < 8 ? n : 8;
    double vals[8];
    tg_tensor *head = NULL;
    tg_status rs = k > 0 && tg_tensor_view(t, 0, 1, &k, &head) == TG_OK ? tg_tensor_read_f64(head, vals, (size_t)k) : TG_ENOTSUP;
    tg_tensor_free(head);
    int have = rs == TG_OK;
    /* values are left out for views that are not one run of memory, while a capture runs and for dtypes without host
     * values; any other failure of the read is reported (a bad token id it found: printing must not swallow that) */
    if (rs != TG_OK && rs != TG_ECAPTURE && rs != TG_ENOTSUP) tgl_check(L, rs);
    luaL_buffinit(L, &b);
    lua_pushfstring(L, "tegraph.Tensor %s %s %s", tg_dtype_name(tg_tensor_dtype(t)), tg_tensor_shape_str(t, sh, sizeof sh),
                    tg_device_str(tg_tensor_device(t), dev, sizeof dev));
    luaL_addvalue(&b);
    if (tg_tensor_name(t)) {
        lua_pushfstring(L, " '%s'", tg_tensor_name(t));
        luaL_addvalue(&b);
    }
    if (have) {
        luaL_addstring(&b, " {");
        for (int64_t i = 0; i < k; i++) {
            char num[32];
            snprintf(num, sizeof num, i ? ", %.6g" : "%.6g", vals[i]);
            luaL_addstring(&b, num);
        }
        luaL_addstring(&b, n > k ? ", ...}" : "}");
    }
    luaL_pushresult(&b);
    return 1;
}

/* Fields through __index: dtype, device, name; everything else is a method. */
/* t[k] with a key that is not a name (t[1], t[1.5], t[nil]): an error saying what to use, not a silent nil. */
static int not_indexed(lua_State *L, int key)
{
    return luaL_error(L, "tensors are not indexed with [] (got t[%s]): t:narrow(start, len) gives rows of dimension 1, "
                         "t:item() the value of a one-element tensor, t:totable() all the values",
                      lua_isnil(L, key) ? "nil" : tgl_value_str(L, key));
}

static int t_index(lua_State *L)
{
    struct tgl_tensor *u = luaL_checkudata(L, 1, TGL_TENSOR);
    if (lua_type(L, 2) != LUA_TSTRING) return not_indexed(L, 2);
    const char *k = lua_tostring(L, 2);
    if (k && (strcmp(k, "dtype") == 0 || strcmp(k, "device") == 0 || strcmp(k, "name") == 0)) {
        if (u->t == NULL) return luaL_error(L, "tensor used after close (reading field '%s')", k);
        if (k[0] == 'd' && k[1] == 't')
            lua_pushstring(L, tg_dtype_name(tg_tensor_dtype(u->t)));
        else if (k[0] == 'd')
            tgl_device_push(L, tg_tensor_device(u->t));
        else if (tg_tensor_name(u->t))
            lua_pushstring(L, tg_tensor_name(u->t));
        else
            lua_pushnil(L);
        return 1;
    }
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1)); /* the method, or nil */
    return 1;
}

static int t_newindex(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    if (lua_type(L, 2) != LUA_TSTRING) return not_indexed(L, 2);
    const char *k = lua_tostring(L, 2);
    if (strcmp(k, "name") != 0) return luaL_error(L, "cannot set field '%s' of a tensor (only 'name' is writable)", k);
    tgl_check(L, tg_tensor_set_name(t, luaL_optstring(L, 3, NULL)));
    return 0;
}

/* A tensor operand: the tensor itself, or a number/table made into a tensor
 * like `like` (pushed as a temporary). */
static tg_tensor *operand(lua_State *L, int idx, const tg_tensor *like)
{
    tg_tensor *t = tgl_tensor_test(L, idx);
    if (t) return t;
    if (lua_type(L, idx) == LUA_TNUMBER) {
        tg_tensor *tmp = new_like(L, like, tg_tensor_dtype(like));
        tgl_check(L, tg_fill(tmp, (double)lua_tonumber(L, idx)));
        lua_replace(L, idx); /* the temporary stays alive in the argument slot */
        return tmp;
    }
    luaL_typeerror(L, idx, "tensor or number");
    return NULL;
}

/* out = a op b where either may be a number. */
static int binop(lua_State *L, tg_binop op)
{
    tg_tensor *like = tgl_tensor_test(L, 1);
    if (like == NULL) like = tgl_tensor_check(L, 2);
    tg_tensor *a = operand(L, 1, like), *b = operand(L, 2, like);
    tg_tensor *out = new_like(L, like, tg_tensor_dtype(like));
    tgl_check(L, tg_binary(op, out, a, b));
    return 1;
}

static int t_add(lua_State *L) { return binop(L, TG_ADD); }
static int t_sub(lua_State *L) { return binop(L, TG_SUB); }
static int t_mul(lua_State *L) { return binop(L, TG_MUL); }
static int t_div(lua_State *L) { return binop(L, TG_DIV); }

static int t_unm(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    tg_tensor *out = new_like(L, t, tg_tensor_dtype(t));
    tgl_check(L, tg_axpby(out, -1.0, t, 0.0));
    return 1;
}

/* self = self op other, in place; other a tensor or a number. */
static int binop_(lua_State *L, tg_binop op)
{
    tg_tensor *self = tgl_tensor_check(L, 1);
    tg_tensor *o = operand(L, 2, self);
    tgl_check(L, tg_binary(op, self, self, o));
    lua_settop(L, 1);
    return 1;
}

/* t:add_(x [, alpha]): self += alpha * x (alpha through axpby). */
static int t_add_(lua_State *L)
{
    if (!lua_isnoneornil(L, 3)) {
        tg_tensor *self = tgl_tensor_check(L, 1), *x = tgl_tensor_check(L, 2);
        tgl_check(L, tg_axpby(self, (double)luaL_checknumber(L, 3), x, 1.0));
        lua_settop(L, 1);
        return 1;
    }
    return binop_(L, TG_ADD);
}
static int t_sub_(lua_State *L) { return binop_(L, TG_SUB); }
static int t_mul_(lua_State *L) { return binop_(L, TG_MUL); }
static int t_div_(lua_State *L) { return binop_(L, TG_DIV); }

/* t:axpby_(alpha, x, beta): self = alpha * x + beta * self. */
static int t_axpby_(lua_State *L)
{
    tg_tensor *self = tgl_tensor_check(L, 1);
    double alpha = (double)luaL_checknumber(L, 2);
    tg_tensor *x = tgl_tensor_check(L, 3);
    double beta = (double)luaL_optnumber(L, 4, 1.0);
    tgl_check(L, tg_axpby(self, alpha, x, beta));
    lua_settop(L, 1);
    return 1;
}

/* ------------------------------------------------------------------ methods */

static int t_shape(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    int64_t shape[TG_MAX_DIMS];
    get_shape(t, shape);
    tgl_shape_push(L, tg_tensor_ndim(t), shape);
    return 1;
}

/* t:dim(i): size of dimension i, 1-based; negative i counts from the end. */
static int t_dim(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    int nd = tg_tensor_ndim(t);
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i < 0) i += nd + 1;
    luaL_argcheck(L, i >= 1 && i <= nd, 2, lua_pushfstring(L, "dimension out of range (tensor has %d)", nd));
    lua_pushinteger(L, (lua_Integer)tg_tensor_dim(t, (int)i - 1));
    return 1;
}

static int t_ndim(lua_State *L)
{
    lua_pushinteger(L, tg_tensor_ndim(tgl_tensor_check(L, 1)));
    return 1;
}

static int t_numel(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)tg_tensor_numel(tgl_tensor_check(L, 1)));
    return 1;
}

static int t_set_name(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    tgl_check(L, tg_tensor_set_name(t, luaL_optstring(L, 2, NULL)));
    lua_settop(L, 1);
    return 1;
}

/* t:to(x): x a dtype name, a device name or {dtype=, device=}. Always a new
 * handle: a copy when anything changes, else a handle on the same storage. */
static int t_to(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    tg_dtype dt = tg_tensor_dtype(t);
    tg_device dev = tg_tensor_device(t);
    if (lua_type(L, 2) == LUA_TTABLE) {
        tgl_check_keys(L, 2, "tensor:to", "dtype, device");
        if (lua_getfield(L, 2, "dtype") != LUA_TNIL) dt = tgl_dtype_check(L, -1);
        if (lua_getfield(L, 2, "device") != LUA_TNIL) dev = tgl_device_check(L, -1);
        lua_pop(L, 2);
    } else {
        const char *s = luaL_checkstring(L, 2);
        if (tg_dtype_parse(s, &dt) == 0) {
        } else if (strncmp(s, "cpu", 3) == 0 || strncmp(s, "cuda", 4) == 0) {
            dev = tgl_device_check(L, 2); /* a device's own message (no such GPU, a bad index) */
        } else {
            return luaL_argerror(L, 2, lua_pushfstring(L, "'%s' is neither a dtype (f32, bf16, f16, i32, u16, e4m3, e5m2) "
                                                          "nor a device (cpu, cuda, cuda:N)", s));
        }
    }
    tg_device cur = tg_tensor_device(t);
    int64_t shape[TG_MAX_DIMS];
    get_shape(t, shape);
    tg_tensor **slot = tgl_tensor_push(L);
    if (dt == tg_tensor_dtype(t) && dev.type == cur.type && dev.index == cur.index) {
        tgl_check(L, tg_tensor_ref(t, slot));
        return 1;
    }
    tgl_check(L, tg_tensor_new(dt, tg_tensor_ndim(t), shape, dev, slot));
    tgl_check(L, tg_copy(*slot, t));
    if (tg_tensor_name(t)) tgl_check(L, tg_tensor_set_name(*slot, tg_tensor_name(t)));
    return 1;
}

static int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* t:copy_(src): src a tensor (the same shape; dtype and device may differ), a
 * number (broadcast, like fill_) or a nested table with t's shape. */
static int t_copy_(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    tg_tensor *src = tgl_tensor_test(L, 2);
    if (src) { /* the shapes must be the same, as PyTorch's copy_ (no broadcasting): a [3,2] is no [2,3] */
        if (!tg_tensor_same_shape(src, t)) {
            char a[64], b[64];
            luaL_argerror(L, 2, lua_pushfstring(L, "copy_: a tensor of shape %s into a tensor of shape %s (view it as %s first)",
                                                tg_tensor_shape_str(src, a, sizeof a), tg_tensor_shape_str(t, b, sizeof b), b));
        }
        tgl_check(L, tg_copy(t, src));
    } else if (lua_type(L, 2) == LUA_TNUMBER) {
        tgl_check(L, tg_fill(t, (double)lua_tonumber(L, 2)));
    } else {
        int64_t shape[TG_MAX_DIMS], tshape[TG_MAX_DIMS];
        char a[64], b[64];
        if (lua_type(L, 2) != LUA_TTABLE) luaL_typeerror(L, 2, "tensor, number or table");
        int nd = tgl_nested_shape(L, 2, shape);
        int64_t n = numel_of(nd, shape);
        get_shape(t, tshape);
        int same = nd == tg_tensor_ndim(t);
        for (int i = 0; same && i < nd; i++) same = shape[i] == tshape[i];
        if (!same) {
            shape_str(nd, shape, a, sizeof a);
            shape_str(tg_tensor_ndim(t), tshape, b, sizeof b);
            luaL_argerror(L, 2, lua_pushfstring(L, "table of shape %s (%I elements) into a tensor of shape %s (%I elements)",
                                                a, (lua_Integer)n, b, (lua_Integer)tg_tensor_numel(t)));
        }
        double *vals = scratch(L, n);
        tgl_nested_read(L, 2, nd, shape, vals);
        tgl_check(L, tg_tensor_write_f64(t, vals, (size_t)n));
    }
    lua_settop(L, 1);
    return 1;
}

static int t_fill_(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    tgl_check(L, tg_fill(t, (double)luaL_checknumber(L, 2)));
    lua_settop(L, 1);
    return 1;
}

static void totable_rec(lua_State *L, tg_dtype dt, int ndim, const int64_t *shape, int d, const double **v)
{
    lua_createtable(L, (int)shape[d], 0); /* +1 */
    for (int64_t i = 0; i < shape[d]; i++) {
        if (d + 1 < ndim)
            totable_rec(L, dt, ndim, shape, d + 1, v);
        else
            push_elem(L, dt, *(*v)++);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* t:totable(): nested tables following the shape (integers for i32/u16). */
static int t_totable(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    int64_t shape[TG_MAX_DIMS];
    get_shape(t, shape);
    const double *v = read_all(L, t);
    totable_rec(L, tg_tensor_dtype(t), tg_tensor_ndim(t), shape, 0, &v);
    return 1;
}

static int t_clone(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    tg_tensor *c = new_like(L, t, tg_tensor_dtype(t));
    tgl_check(L, tg_copy(c, t));
    return 1;
}

static int t_sum(lua_State *L)
{
    double v;
    tgl_check(L, tg_sum(tgl_tensor_check(L, 1), &v));
    lua_pushnumber(L, (lua_Number)v);
    return 1;
}

static int t_max_abs(lua_State *L)
{
    double v;
    tgl_check(L, tg_max_abs(tgl_tensor_check(L, 1), &v));
    lua_pushnumber(L, (lua_Number)v);
    return 1;
}

static int t_max_abs_diff(lua_State *L)
{
    double v;
    tgl_check(L, tg_max_abs_diff(tgl_tensor_check(L, 1), tgl_tensor_check(L, 2), &v));
    lua_pushnumber(L, (lua_Number)v);
    return 1;
}

/* t:view(shape...): the same elements with a new shape (same numel); one
 * entry may be -1 (inferred). */
static int t_view(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    int64_t shape[TG_MAX_DIMS];
    int nd = 0, infer = -1;
    int64_t known = 1, n = tg_tensor_numel(t);
    char a[64], b[64];
    if (lua_type(L, 2) == LUA_TTABLE) {
        lua_Integer len = luaL_len(L, 2);
        luaL_argcheck(L, len >= 1 && len <= TG_MAX_DIMS, 2, "shape must have 1 to 4 dimensions");
        for (nd = 0; nd < len; nd++) {
            int isint;
            lua_geti(L, 2, nd + 1); /* +1 */
            shape[nd] = (int64_t)lua_tointegerx(L, -1, &isint);
            if (!isint) luaL_argerror(L, 2, lua_pushfstring(L, "shape entry %d is not an integer", nd + 1));
            lua_pop(L, 1);
        }
    } else {
        int top = lua_gettop(L);
        luaL_argcheck(L, top >= 2 && top - 1 <= TG_MAX_DIMS, 2, "shape must have 1 to 4 dimensions");
        for (nd = 0; nd < top - 1; nd++) shape[nd] = (int64_t)luaL_checkinteger(L, nd + 2);
    }
    int fits = 1, zero = 0;
    for (int i = 0; i < nd; i++) {
        if (shape[i] == -1 && infer < 0)
            infer = i;
        else if (shape[i] < 0)
            luaL_argerror(L, 2, "shape entries must be >= 0 (one may be -1)");
        else if (shape[i] == 0)
            zero = 1;
    }
    for (int i = 0; !zero && i < nd; i++) /* a zero dimension makes the product 0, whatever the others */
        if (i != infer && !tg_mul_i64(known, shape[i], &known)) fits = 0;
    if (zero) known = 0;
    if (fits && infer >= 0) shape[infer] = known ? n / known : 0;
    int64_t total = 1;
    for (int i = 0; fits && !zero && i < nd; i++) fits = tg_mul_i64(total, shape[i], &total);
    if (zero) total = 0;
    if (!fits || total != n) {
        int64_t ts[TG_MAX_DIMS];
        get_shape(t, ts);
        if (infer >= 0 && !fits) shape[infer] = -1;
        shape_str(nd, shape, a, sizeof a);
        shape_str(tg_tensor_ndim(t), ts, b, sizeof b);
        if (!fits) return luaL_error(L, "view: shape %s has more elements than fit in 64 bits, the tensor %s has %I", a, b, (lua_Integer)n);
        return luaL_error(L, "view: shape %s has %I elements, the tensor %s has %I", a, (lua_Integer)total, b, (lua_Integer)n);
    }
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_tensor_view(t, 0, nd, shape, slot));
    return 1;
}

/* t:narrow(start, len): rows start .. start+len-1 of dimension 1 as a view;
 * start is 1-based like Lua indices. */
static int t_narrow(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    if (lua_gettop(L) > 3) /* PyTorch's narrow(dim, start, length) would silently be rows dim.. of dimension 1 */
        return luaL_error(L, "narrow(start, len) takes rows of the first dimension (start 1-based), got %d arguments "
                             "(PyTorch's narrow(dim, start, length) is not this one)", lua_gettop(L) - 1);
    lua_Integer start = luaL_checkinteger(L, 2), len = luaL_checkinteger(L, 3);
    luaL_argcheck(L, start >= 1, 2, "start is 1-based (must be >= 1)");
    const int64_t rows = tg_tensor_ndim(t) > 0 ? tg_tensor_dim(t, 0) : 0;
    if (tg_tensor_ndim(t) > 0 && (len < 0 || start - 1 > rows || len > rows - (start - 1))) {
        char a[64];
        return luaL_error(L, "narrow: %I rows from row %I (1-based) out of range for shape %s", len, start,
                          tg_tensor_shape_str(t, a, sizeof a));
    }
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_tensor_narrow(t, (int64_t)start - 1, (int64_t)len, slot));
    return 1;
}

static int opt_bool(lua_State *L, int opts, const char *k)
{
    int v = 0;
    if (lua_type(L, opts) == LUA_TTABLE) {
        lua_getfield(L, opts, k);
        v = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    return v;
}

static double opt_number(lua_State *L, int opts, const char *k, double def)
{
    double v = def;
    if (lua_type(L, opts) == LUA_TTABLE) {
        if (lua_getfield(L, opts, k) != LUA_TNIL) {
            int isnum;
            v = (double)lua_tonumberx(L, -1, &isnum);
            if (!isnum) luaL_argerror(L, opts, lua_pushfstring(L, "option '%s' must be a number", k));
        }
        lua_pop(L, 1);
    }
    return v;
}

/* a:matmul(b [, {trans_a=, trans_b=, alpha=, beta=, out=, dtype=}]): op(a) @ op(b),
 * 2-D or batched 3-D; into `out` (C = alpha*AB + beta*C) or a new tensor. */
static int t_matmul(lua_State *L)
{
    tg_tensor *a = tgl_tensor_check(L, 1), *b = tgl_tensor_check(L, 2);
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        tgl_check_keys(L, 3, "matmul", "trans_a, trans_b, alpha, beta, out, dtype");
    }
    int ta = opt_bool(L, 3, "trans_a"), tb = opt_bool(L, 3, "trans_b");
    double alpha = opt_number(L, 3, "alpha", 1.0), beta = opt_number(L, 3, "beta", 0.0);
    int na = tg_tensor_ndim(a), nb = tg_tensor_ndim(b);
    if (na != nb || (na != 2 && na != 3)) {
        char sa[64], sb[64];
        return luaL_error(L, "matmul: expected two 2-D or two 3-D tensors, got %s and %s", tg_tensor_shape_str(a, sa, sizeof sa),
                          tg_tensor_shape_str(b, sb, sizeof sb));
    }
    tg_tensor *out = NULL;
    if (lua_type(L, 3) == LUA_TTABLE) {
        lua_getfield(L, 3, "out"); /* +1, kept: it is the result */
        if (!lua_isnil(L, -1)) out = tgl_tensor_check(L, -1);
    }
    if (out == NULL) {
        tg_dtype dt = tg_tensor_dtype(a);
        if (lua_type(L, 3) == LUA_TTABLE) {
            if (lua_getfield(L, 3, "dtype") != LUA_TNIL) dt = tgl_dtype_check(L, -1);
            lua_pop(L, 1);
        }
        int off = na - 2;
        int64_t shape[3];
        if (na == 3) shape[0] = tg_tensor_dim(a, 0);
        shape[off] = tg_tensor_dim(a, off + (ta ? 1 : 0));
        shape[off + 1] = tg_tensor_dim(b, off + (tb ? 0 : 1));
        tg_tensor **slot = tgl_tensor_push(L);
        tgl_check(L, tg_tensor_new(dt, na, shape, tg_tensor_device(a), slot));
        out = *slot;
        beta = 0.0;
    }
    tgl_check(L, tg_gemm(out, a, ta, b, tb, alpha, beta));
    return 1;
}

static int t_item(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    double v;
    int64_t n = tg_tensor_numel(t);
    if (n != 1) return luaL_error(L, "item: the tensor has %I elements, expected 1", (lua_Integer)n);
    tgl_check(L, tg_tensor_read_f64(t, &v, 1));
    push_elem(L, tg_tensor_dtype(t), v);
    return 1;
}

static int t_data_ptr(lua_State *L)
{
    lua_pushlightuserdata(L, tg_tensor_data(tgl_tensor_check(L, 1)));
    return 1;
}

static int t_is_closed(lua_State *L)
{
    struct tgl_tensor *u = luaL_checkudata(L, 1, TGL_TENSOR);
    lua_pushboolean(L, u->t == NULL);
    return 1;
}

static int t_same_memory(lua_State *L)
{
    lua_pushboolean(L, tg_tensor_same_memory(tgl_tensor_check(L, 1), tgl_tensor_check(L, 2)));
    return 1;
}

static const luaL_Reg t_methods[] = {
    {"shape", t_shape},
    {"dim", t_dim},
    {"ndim", t_ndim},
    {"numel", t_numel},
    {"set_name", t_set_name},
    {"to", t_to},
    {"copy_", t_copy_},
    {"fill_", t_fill_},
    {"totable", t_totable},
    {"clone", t_clone},
    {"sum", t_sum},
    {"max_abs", t_max_abs},
    {"max_abs_diff", t_max_abs_diff},
    {"view", t_view},
    {"narrow", t_narrow},
    {"add", t_add},
    {"sub", t_sub},
    {"mul", t_mul},
    {"div", t_div},
    {"add_", t_add_},
    {"sub_", t_sub_},
    {"mul_", t_mul_},
    {"div_", t_div_},
    {"axpby_", t_axpby_},
    {"matmul", t_matmul},
    {"item", t_item},
    {"data_ptr", t_data_ptr},
    {"close", t_gc},
    {"is_closed", t_is_closed},
    {"same_memory", t_same_memory},
    {NULL, NULL},
};

static const luaL_Reg t_metameth[] = {
    {"__index", NULL}, /* placeholder: a closure over the method table */
    {"__newindex", t_newindex},
    {"__gc", t_gc},
    {"__close", t_gc},
    {"__tostring", t_tostring},
    {"__add", t_add},
    {"__sub", t_sub},
    {"__mul", t_mul},
    {"__div", t_div},
    {"__unm", t_unm},
    {NULL, NULL},
};

/* Creates the tegraph.Tensor metatable (registry) and sets core.is_tensor on
 * the table at the top of the stack. */
void tgl_open_tensor(lua_State *L)
{
    luaL_newmetatable(L, TGL_TENSOR);     /* +1: metatable (with __name) */
    luaL_setfuncs(L, t_metameth, 0);
    luaL_newlib(L, t_methods);            /* +1: method table */
    lua_pushcclosure(L, t_index, 1);      /* -1 +1: __index over it */
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}
