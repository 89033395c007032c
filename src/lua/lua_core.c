/* lua_core.c — the tegraph.core module: constructors, RNG, devices, version, allclose, time, isatty; opens the other rooms. */
#include "lua/lua_impl.h"
#include "lua/lua_nn.h"
#include "lua/lua_graph.h"
#include "lua/lua_sched.h"
#include "lua/lua_comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Options of the constructors: {dtype=, device=, name=} plus per-constructor numbers. */
struct tgl_new_opts {
    tg_dtype dtype;
    tg_device dev;
    const char *name;
};

/* what: the function's name for errors; known: the keys it takes (NULL: dtype, device, name). */
static void opts_read(lua_State *L, int idx, const char *what, const char *known, struct tgl_new_opts *o)
{
    o->dtype = TG_F32;
    o->dev = tg_default_device();
    o->name = NULL;
    if (lua_isnoneornil(L, idx)) return;
    luaL_checktype(L, idx, LUA_TTABLE);
    tgl_check_keys(L, idx, what, known ? known : "dtype, device, name");
    if (lua_getfield(L, idx, "dtype") != LUA_TNIL) o->dtype = tgl_dtype_check(L, -1);
    if (lua_getfield(L, idx, "device") != LUA_TNIL) o->dev = tgl_device_check(L, -1);
    if (lua_getfield(L, idx, "name") != LUA_TNIL) o->name = luaL_checkstring(L, -1);
    lua_pop(L, 3); /* the name string stays alive in the options table */
}

static double opts_number(lua_State *L, int idx, const char *k, double def)
{
    double v = def;
    if (lua_type(L, idx) != LUA_TTABLE) return v;
    if (lua_getfield(L, idx, k) != LUA_TNIL) {
        int isnum;
        v = (double)lua_tonumberx(L, -1, &isnum);
        if (!isnum) luaL_argerror(L, idx, lua_pushfstring(L, "option '%s' must be a number", k));
    }
    lua_pop(L, 1);
    return v;
}

/* A new tensor (pushed) from the options. */
static tg_tensor *new_tensor(lua_State *L, int ndim, const int64_t *shape, const struct tgl_new_opts *o)
{
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_tensor_new(o->dtype, ndim, shape, o->dev, slot));
    if (o->name) tgl_check(L, tg_tensor_set_name(*slot, o->name));
    return *slot;
}

/* Shape (a table or integers) then an optional options table. */
static tg_tensor *new_from_args(lua_State *L, const char *what, const char *known, int *optsidx)
{
    int64_t shape[TG_MAX_DIMS];
    int next;
    struct tgl_new_opts o;
    int nd = tgl_shape_check(L, 1, shape, &next);
    opts_read(L, next, what, known, &o);
    *optsidx = next;
    return new_tensor(L, nd, shape, &o);
}

static int l_empty(lua_State *L)
{
    int oi;
    new_from_args(L, "tg.empty", NULL, &oi);
    return 1;
}

static int l_zeros(lua_State *L)
{
    int oi;
    tgl_check(L, tg_fill(new_from_args(L, "tg.zeros", NULL, &oi), 0.0));
    return 1;
}

static int l_ones(lua_State *L)
{
    int oi;
    tgl_check(L, tg_fill(new_from_args(L, "tg.ones", NULL, &oi), 1.0));
    return 1;
}

/* tg.full(shape, value [, opts]) */
static int l_full(lua_State *L)
{
    int64_t shape[TG_MAX_DIMS];
    int next;
    struct tgl_new_opts o;
    luaL_checktype(L, 1, LUA_TTABLE);
    int nd = tgl_shape_check(L, 1, shape, &next);
    double v = (double)luaL_checknumber(L, 2);
    opts_read(L, 3, "tg.full", NULL, &o);
    tgl_check(L, tg_fill(new_tensor(L, nd, shape, &o), v));
    return 1;
}

/* tg.randn(shape [, {mean=0, std=1, ...}]) */
static int l_randn(lua_State *L)
{
    int oi;
    tg_tensor *t = new_from_args(L, "tg.randn", "dtype, device, name, mean, std", &oi);
    tgl_check(L, tg_randn(t, opts_number(L, oi, "mean", 0.0), opts_number(L, oi, "std", 1.0)));
    return 1;
}

/* tg.rand(shape [, {lo=0, hi=1, ...}]) */
static int l_rand(lua_State *L)
{
    int oi;
    tg_tensor *t = new_from_args(L, "tg.rand", "dtype, device, name, lo, hi", &oi);
    tgl_check(L, tg_rand(t, opts_number(L, oi, "lo", 0.0), opts_number(L, oi, "hi", 1.0)));
    return 1;
}

/* tg.tensor(data [, opts]): data a nested table of numbers (or one number). */
static int l_tensor(lua_State *L)
{
    int64_t shape[TG_MAX_DIMS];
    struct tgl_new_opts o;
    if (lua_type(L, 1) != LUA_TTABLE && lua_type(L, 1) != LUA_TNUMBER) luaL_typeerror(L, 1, "table or number");
    int nd = tgl_nested_shape(L, 1, shape);
    opts_read(L, 2, "tg.tensor", NULL, &o);
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    double *vals = lua_newuserdatauv(L, (size_t)n * sizeof(double), 0); /* +1: scratch */
    tgl_nested_read(L, 1, nd, shape, vals);
    tg_tensor *t = new_tensor(L, nd, shape, &o);
    tgl_check(L, tg_tensor_write_f64(t, vals, (size_t)n));
    return 1;
}

/* tg.arange(n [, opts]): 0, 1, ..., n-1. */
static int l_arange(lua_State *L)
{
    struct tgl_new_opts o;
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 1, 1, "must be >= 1");
    opts_read(L, 2, "tg.arange", NULL, &o);
    int64_t shape[1] = {(int64_t)n};
    tg_tensor *t = new_tensor(L, 1, shape, &o); /* +1; a failed allocation names the size and device */
    /* The first value an integer dtype cannot hold (its max + 1) is refused here, named with its index in the
     * tensor (a block's write would name its index in the block). */
    const tg_dtype dt = tg_tensor_dtype(t);
    const lua_Integer first_bad = dt == TG_U16 ? 65536 : dt == TG_I32 ? (lua_Integer)1 << 31 : n;
    if (n > first_bad)
        return luaL_error(L, "arange: value %I at index %I does not fit %s (at most %I; n = %I)", first_bad, first_bad,
                          tg_dtype_name(dt), first_bad - 1, n);
    /* Filled a block at a time through views, so the host scratch stays small whatever n is. */
    enum { BLOCK = 1 << 16 };
    int64_t blk = n < BLOCK ? n : BLOCK;
    double *vals = lua_newuserdatauv(L, (size_t)blk * sizeof(double), 0); /* +1: scratch */
    for (int64_t at = 0; at < n; at += blk) {
        int64_t len = n - at < blk ? n - at : blk;
        for (int64_t i = 0; i < len; i++) vals[i] = (double)(at + i);
        if (at == 0 && len == n) {
            tgl_check(L, tg_tensor_write_f64(t, vals, (size_t)n));
            break;
        }
        tg_tensor *v;
        tgl_check(L, tg_tensor_view(t, at, 1, &len, &v));
        tg_status st = tg_tensor_write_f64(v, vals, (size_t)len);
        tg_tensor_free(v);
        tgl_check(L, st);
    }
    lua_pop(L, 1);
    return 1;
}

static int l_manual_seed(lua_State *L)
{
    tg_manual_seed((uint64_t)luaL_checkinteger(L, 1));
    return 0;
}

/* tg.rng_state() -> seed, offset */
static int l_rng_state(lua_State *L)
{
    uint64_t seed, offset;
    tg_rng_state(&seed, &offset);
    lua_pushinteger(L, (lua_Integer)seed);
    lua_pushinteger(L, (lua_Integer)offset);
    return 2;
}

/* tg.rng_set_state(seed, offset): restores what tg.rng_state returned */
static int l_rng_set_state(lua_State *L)
{
    tg_rng_set_state((uint64_t)luaL_checkinteger(L, 1), (uint64_t)luaL_checkinteger(L, 2));
    return 0;
}

static tg_device_type device_type_check(lua_State *L, int idx)
{
    static const char *const names[] = {"cpu", "cuda", NULL};
    return luaL_checkoption(L, idx, "cuda", names) == 0 ? TG_CPU : TG_CUDA;
}

/* tg.device_count([type]): devices of "cpu" or "cuda" (the default). */
static int l_device_count(lua_State *L)
{
    lua_pushinteger(L, tg_device_count(device_type_check(L, 1)));
    return 1;
}

static int l_default_device(lua_State *L)
{
    tgl_device_push(L, tg_default_device());
    return 1;
}

/* tg.devices() -> { {id="cpu", type="cpu", index=0, name=..., memory=bytes}, ... } */
static int l_devices(lua_State *L)
{
    int k = 0;
    lua_newtable(L);
    for (int ty = TG_CPU; ty <= TG_CUDA; ty++) {
        int n = tg_device_count((tg_device_type)ty);
        for (int i = 0; i < n; i++) {
            tg_device d = {(tg_device_type)ty, i};
            char name[256] = "";
            size_t total = 0;
            lua_createtable(L, 0, 5);
            tgl_device_push(L, d);
            lua_setfield(L, -2, "id");
            lua_pushstring(L, ty == TG_CPU ? "cpu" : "cuda");
            lua_setfield(L, -2, "type");
            lua_pushinteger(L, i);
            lua_setfield(L, -2, "index");
            if (tg_device_describe(d, name, sizeof name, &total) == TG_OK) {
                lua_pushstring(L, name);
                lua_setfield(L, -2, "name");
                lua_pushinteger(L, (lua_Integer)total);
                lua_setfield(L, -2, "memory");
            }
            lua_rawseti(L, -2, ++k);
        }
    }
    return 1;
}

static int l_is_tensor(lua_State *L)
{
    lua_pushboolean(L, luaL_testudata(L, 1, TGL_TENSOR) != NULL);
    return 1;
}

/* Values of a tensor or a nested table (pushed scratch), with its shape. */
static double *values_of(lua_State *L, int idx, int *nd, int64_t *shape, int64_t *n)
{
    tg_tensor *t = tgl_tensor_test(L, idx);
    double *v;
    if (t) {
        *nd = tg_tensor_ndim(t);
        for (int i = 0; i < *nd; i++) shape[i] = tg_tensor_dim(t, i);
        *n = tg_tensor_numel(t);
        v = lua_newuserdatauv(L, (size_t)(*n > 0 ? *n : 1) * sizeof(double), 0); /* +1 */
        tgl_check(L, tg_tensor_read_f64(t, v, (size_t)*n));
        return v;
    }
    if (lua_type(L, idx) != LUA_TTABLE && lua_type(L, idx) != LUA_TNUMBER) luaL_typeerror(L, idx, "tensor or table");
    *nd = tgl_nested_shape(L, idx, shape);
    *n = 1;
    for (int i = 0; i < *nd; i++) *n *= shape[i];
    v = lua_newuserdatauv(L, (size_t)*n * sizeof(double), 0); /* +1 */
    tgl_nested_read(L, idx, *nd, shape, v);
    return v;
}

static void push_shape_str(lua_State *L, int nd, const int64_t *shape)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addchar(&b, '[');
    for (int i = 0; i < nd; i++) {
        if (i) luaL_addchar(&b, ',');
        lua_pushinteger(L, (lua_Integer)shape[i]);
        luaL_addvalue(&b);
    }
    luaL_addchar(&b, ']');
    luaL_pushresult(&b);
}

/* tg.allclose(a, b [, rtol=1e-5 [, atol=1e-8]]) -> bool, max |a-b|:
 * |a - b| <= atol + rtol * |b| elementwise; a, b tensors or nested tables. */
static int l_allclose(lua_State *L)
{
    int na, nb;
    int64_t sa[TG_MAX_DIMS], sb[TG_MAX_DIMS], n, m;
    double rtol = (double)luaL_optnumber(L, 3, 1e-5), atol = (double)luaL_optnumber(L, 4, 1e-8);
    if (!(rtol >= 0) || !(atol >= 0)) return luaL_error(L, "allclose: rtol %f and atol %f must be >= 0", rtol, atol);
    double *a = values_of(L, 1, &na, sa, &n);
    double *b = values_of(L, 2, &nb, sb, &m);
    int same = na == nb;
    for (int i = 0; same && i < na; i++) same = sa[i] == sb[i];
    if (!same) {
        push_shape_str(L, na, sa);
        push_shape_str(L, nb, sb);
        return luaL_error(L, "allclose: shapes differ: %s vs %s", lua_tostring(L, -2), lua_tostring(L, -1));
    }
    int close = 1;
    double maxdiff = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (isnan(a[i]) || isnan(b[i])) d = NAN;
        if (!(d <= atol + rtol * fabs(b[i]))) close = 0;
        if (!(d <= maxdiff)) maxdiff = d; /* NaN sticks */
    }
    lua_pushboolean(L, close);
    lua_pushnumber(L, (lua_Number)maxdiff);
    return 2;
}

/* tg.time(): monotonic wall-clock seconds (progress, tokens/s). */
static int l_time(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

/* tg.isatty([file or fd]): whether it is a terminal (default io.stdout). In a
 * rank of a multi-rank job the standard output counts as one only when
 * TG_STDOUT_TTY is 1 (`tegraph run -n` sets it from its own stdout): mpirun
 * gives the ranks a pseudo-terminal even when its output goes to a file. */
static int l_isatty(lua_State *L)
{
    int fd = 1;
    if (lua_isinteger(L, 1)) {
        fd = tgl_checkint(L, 1);
    } else if (!lua_isnoneornil(L, 1)) {
        luaL_Stream *s = luaL_checkudata(L, 1, LUA_FILEHANDLE);
        if (s->closef == NULL || s->f == NULL) return luaL_argerror(L, 1, "file is closed");
        fd = fileno(s->f);
    }
    int tty = isatty(fd);
    if (tty && fd == 1 && tg_launch_env(TG_ENV_WORLD_SIZE, 1) > 1) {
        const char *launcher = getenv("TG_STDOUT_TTY");
        tty = launcher && strcmp(launcher, "1") == 0;
    }
    lua_pushboolean(L, tty);
    return 1;
}

/* tg.device_stats([dev]) -> {kernels=, gemms=, graph_replays=, memory=, peak_memory=} (dev: the default
 * device): counts since the program started and the memory held now and at most (tg_device_get_stats). */
static int l_device_stats(lua_State *L)
{
    tg_device d = lua_isnoneornil(L, 1) ? tg_default_device() : tgl_device_check(L, 1);
    tg_device_stats st;
    tg_device_get_stats(d, &st);
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, (lua_Integer)st.kernels);
    lua_setfield(L, -2, "kernels");
    lua_pushinteger(L, (lua_Integer)st.gemms);
    lua_setfield(L, -2, "gemms");
    lua_pushinteger(L, (lua_Integer)st.graph_replays);
    lua_setfield(L, -2, "graph_replays");
    lua_pushinteger(L, (lua_Integer)st.memory);
    lua_setfield(L, -2, "memory");
    lua_pushinteger(L, (lua_Integer)st.peak_memory);
    lua_setfield(L, -2, "peak_memory");
    return 1;
}

/* tg.reset_peak_memory([dev]): peak_memory starts again at the memory held now. */
static int l_reset_peak_memory(lua_State *L)
{
    tg_device_reset_peak(lua_isnoneornil(L, 1) ? tg_default_device() : tgl_device_check(L, 1));
    return 0;
}

static const luaL_Reg core_funcs[] = {
    {"empty", l_empty},
    {"zeros", l_zeros},
    {"ones", l_ones},
    {"full", l_full},
    {"randn", l_randn},
    {"rand", l_rand},
    {"tensor", l_tensor},
    {"arange", l_arange},
    {"manual_seed", l_manual_seed},
    {"rng_state", l_rng_state},
    {"rng_set_state", l_rng_set_state},
    {"device_count", l_device_count},
    {"default_device", l_default_device},
    {"devices", l_devices},
    {"device_stats", l_device_stats},
    {"reset_peak_memory", l_reset_peak_memory},
    {"is_tensor", l_is_tensor},
    {"allclose", l_allclose},
    {"time", l_time},
    {"isatty", l_isatty},
    {NULL, NULL},
};

int tg_lua_open_core(lua_State *L)
{
    luaL_checkversion(L);
    tgl_check(L, tg_env_check()); /* a misspelt TG_DEBUG switch fails the load, not the run's results */
    luaL_newlib(L, core_funcs); /* +1: the core table */
    tgl_open_tensor(L);
    tgl_open_stream(L);
    tgl_open_nn(L);
    tgl_open_step(L);
    tgl_open_graph(L);
    tgl_open_sched(L); /* core.sched: schedule executor, traces (src/sched) */
    tgl_open_comm(L); /* core.comm: communicators (src/dist) */
    tgl_open_trace(L); /* core.trace: the trace (src/trace) */
    tgl_open_io(L);    /* core.save, core.load, core.safetensors, core.fs, core.signals (src/io) */
    tgl_open_text(L);  /* core.tokenizer, core.sampler (src/text) */
    lua_pushstring(L, tg_version());
    lua_setfield(L, -2, "version");
    lua_pushstring(L, tg_build_options());
    lua_setfield(L, -2, "build_options");
    lua_createtable(L, TG_DTYPE_COUNT, 0); /* +1: dtype names, and tg.f32 = "f32"... */
    for (int i = 0; i < TG_DTYPE_COUNT; i++) {
        const char *name = tg_dtype_name((tg_dtype)i);
        lua_pushstring(L, name);
        lua_rawseti(L, -2, i + 1);
        lua_pushstring(L, name);
        lua_setfield(L, -3, name);
    }
    lua_setfield(L, -2, "dtypes");
    return 1;
}

int luaopen_tegraph_core(lua_State *L) { return tg_lua_open_core(L); }
