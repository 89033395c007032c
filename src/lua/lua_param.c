/* lua_param.c — the tegraph.Parameter userdata (fields sharing storage) and wgrad hooks written in Lua. */
#include "lua/lua_nn.h"
#include "nn/nn.h"

#include <string.h>

struct tgl_param {
    tg_param *p;
};

tg_param *tgl_param_check(lua_State *L, int idx)
{
    struct tgl_param *u = luaL_checkudata(L, idx, TGL_PARAM);
    if (u->p == NULL) luaL_argerror(L, idx, "parameter is not initialised");
    return u->p;
}

tg_param *tg_lua_checkparam(lua_State *L, int idx) { return tgl_param_check(L, idx); }

/* Pushes an empty Parameter box; the caller acquires into the slot. */
static tg_param **param_newbox(lua_State *L)
{
    struct tgl_param *u = lua_newuserdatauv(L, sizeof *u, 0); /* +1 */
    u->p = NULL;
    luaL_setmetatable(L, TGL_PARAM);
    return &u->p;
}

/* Pushes the userdata of p (creating it, with a new reference, the first time). */
void tgl_param_push(lua_State *L, tg_param *p)
{
    if (tgl_objects_get(L, p)) return;
    tg_param **slot = param_newbox(L);
    *slot = tg_param_retain(p);
    tgl_objects_set(L, p, -1);
}

static int p_gc(lua_State *L)
{
    struct tgl_param *u = luaL_checkudata(L, 1, TGL_PARAM);
    tg_param_release(u->p);
    u->p = NULL;
    return 0;
}

/* A new Lua handle on t's storage, or nil. */
void tgl_push_tensor_ref(lua_State *L, const tg_tensor *t)
{
    if (t == NULL) {
        lua_pushnil(L);
        return;
    }
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_tensor_ref(t, slot));
}

static int p_index(lua_State *L)
{
    tg_param *p = tgl_param_check(L, 1);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1; /* a method */
    const char *k = lua_tostring(L, 2);
    if (k == NULL) return 0;
    if (strcmp(k, "name") == 0)
        lua_pushstring(L, p->name);
    else if (strcmp(k, "data") == 0)
        tgl_push_tensor_ref(L, p->data);
    else if (strcmp(k, "grad") == 0) /* reading hands out the tensor; only a backward or p.grad = t counts as a gradient */
        tgl_push_tensor_ref(L, p->grad);
    else if (strcmp(k, "main_grad") == 0)
        tgl_push_tensor_ref(L, p->main_grad);
    else if (strcmp(k, "master") == 0)
        tgl_push_tensor_ref(L, p->master);
    else if (strcmp(k, "wgrad") == 0)
        tgl_push_tensor_ref(L, tg_param_wgrad_target(p));
    else if (strcmp(k, "has_grad") == 0)
        lua_pushboolean(L, p->grad_written);
    else if (strcmp(k, "shape") == 0) {
        int64_t shape[TG_MAX_DIMS];
        for (int i = 0; i < tg_tensor_ndim(p->data); i++) shape[i] = tg_tensor_dim(p->data, i);
        tgl_shape_push(L, tg_tensor_ndim(p->data), shape);
    } else if (strcmp(k, "dtype") == 0)
        lua_pushstring(L, tg_dtype_name(tg_tensor_dtype(p->data)));
    else if (strcmp(k, "fused") == 0 || strcmp(k, "fuse_wgrad_accumulation") == 0)
        lua_pushboolean(L, p->fuse_wgrad_accumulation);
    else if (strcmp(k, "contributors") == 0)
        lua_pushinteger(L, p->contributors);
    else if (strcmp(k, "nhooks") == 0)
        lua_pushinteger(L, p->nhooks);
    else
        lua_pushnil(L);
    return 1;
}

/* p.grad = t, p.main_grad = t, p.wgrad = t (the one the optimizer reads): t's values are copied in (same
 * shape, converted to the gradient's dtype) and p has a gradient (p.has_grad) — a gradient computed outside the
 * engine's modules. p.data = t sets the parameter's values: the data and, for a bf16 parameter, its f32 master
 * (which the optimizer updates and rounds into the data, so a write to the data alone would be undone).
 * Other fields are read-only. */
static int p_newindex(lua_State *L)
{
    tg_param *p = tgl_param_check(L, 1);
    const char *k = lua_tostring(L, 2);
    tg_tensor *dst = NULL;
    if (k && strcmp(k, "data") == 0) dst = p->data;
    else if (k && strcmp(k, "grad") == 0) dst = p->grad;
    else if (k && strcmp(k, "main_grad") == 0) dst = p->main_grad;
    else if (k && strcmp(k, "wgrad") == 0) dst = tg_param_wgrad_target(p);
    else
        return luaL_error(L, "Parameter '%s': field %s cannot be set (settable: data, grad, main_grad, wgrad)", p->name,
                          k ? lua_pushfstring(L, "'%s'", k) : luaL_typename(L, 2));
    if (!dst) return luaL_error(L, "Parameter '%s' has no %s (it keeps its gradient in %s)", p->name, k,
                                p->main_grad ? "main_grad" : "grad");
    tg_tensor *src = tgl_tensor_check(L, 3);
    if (!tg_tensor_same_shape(src, dst)) {
        char a[64], b[64];
        return luaL_error(L, "Parameter '%s': %s is %s, the tensor given is %s", p->name, k,
                          tg_tensor_shape_str(dst, a, sizeof a), tg_tensor_shape_str(src, b, sizeof b));
    }
    if (dst == p->data) {
        tgl_check(L, tg_copy(dst, src));
        if (p->master) tgl_check(L, tg_copy(p->master, src));
        return 0;
    }
    tgl_check(L, tg_copy(dst, src));
    p->grad_written = 1;
    return 0;
}

static int p_tostring(lua_State *L)
{
    struct tgl_param *u = luaL_checkudata(L, 1, TGL_PARAM);
    char sh[64];
    if (u->p == NULL) {
        lua_pushstring(L, "tegraph.Parameter (empty)");
        return 1;
    }
    lua_pushfstring(L, "tegraph.Parameter '%s' %s %s%s", u->p->name, tg_dtype_name(tg_tensor_dtype(u->p->data)),
                    tg_tensor_shape_str(u->p->data, sh, sizeof sh), u->p->fuse_wgrad_accumulation ? " (main_grad)" : "");
    return 1;
}

/* The hook trampoline: fn(param, {microbatch=, last=, chunk=, step=}). */
struct hook_call {
    struct tgl_ref *fn;
    tg_param *p;
    const tg_hook_info *info;
};

static int hook_body(lua_State *L)
{
    struct hook_call *c = lua_touserdata(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn->ref); /* +1: fn */
    tgl_param_push(L, c->p);                           /* +1 */
    lua_createtable(L, 0, 4);                      /* +1: info */
    lua_pushinteger(L, c->info->microbatch);
    lua_setfield(L, -2, "microbatch");
    lua_pushboolean(L, c->info->last);
    lua_setfield(L, -2, "last");
    lua_pushinteger(L, c->info->chunk);
    lua_setfield(L, -2, "chunk");
    lua_pushinteger(L, (lua_Integer)c->info->step);
    lua_setfield(L, -2, "step");
    lua_call(L, 2, 0);
    return 0;
}

static tg_status hook_trampoline(void *ud, tg_param *p, const tg_hook_info *info)
{
    struct tgl_ref *fn = ud;
    struct hook_call c = {fn, p, info};
    return tgl_protected_call(fn, hook_body, &c, "a Lua wgrad hook");
}

void tgl_hook_can_add(lua_State *L, tg_param *p, int fnidx)
{
    fnidx = lua_absindex(L, fnidx);
    if (p->dispatching) luaL_error(L, "register hook on %s: its hooks are running (add it after)", p->name);
    for (int i = 0; i < p->nhooks; i++) { /* the same Lua function twice would fire twice */
        if (p->hooks[i].fn != hook_trampoline) continue;
        if (tgl_ref_is(L, p->hooks[i].ud, fnidx))
            luaL_error(L, "register hook on %s: this function is already one of its hooks (hook id %d); it would fire twice",
                       p->name, p->hooks[i].id);
    }
}

int tgl_hook_add(lua_State *L, tg_param *p, int fnidx)
{
    fnidx = lua_absindex(L, fnidx);
    tgl_hook_can_add(L, p, fnidx);
    struct tgl_ref *r = tgl_ref_new(L, fnidx);
    int id = 0;
    tg_status st = tg_param_add_hook(p, hook_trampoline, r, tgl_ref_free, &id);
    if (st != TG_OK) {
        tgl_ref_free(r);
        tgl_check(L, st);
    }
    return id;
}

/* p:register_hook(fn) -> p, id: fn(param, info) after each of p's wgrads;
 * id is the handle for p:remove_hook(id). */
static int p_register_hook(lua_State *L)
{
    tg_param *p = tgl_param_check(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    int id = tgl_hook_add(L, p, 2);
    lua_settop(L, 1);
    lua_pushinteger(L, id);
    return 2;
}

/* p:remove_hook(id): removes the hook register_hook gave id (an error naming p when p has none). */
static int p_remove_hook(lua_State *L)
{
    tg_param *p = tgl_param_check(L, 1);
    lua_Integer id = luaL_checkinteger(L, 2);
    if (id < 1 || id > INT32_MAX) luaL_argerror(L, 2, lua_pushfstring(L, "%s has no hook with id %I", p->name, id));
    tgl_check(L, tg_param_remove_hook(p, (int)id));
    return 0;
}

static int p_zero_grad(lua_State *L)
{
    tgl_check(L, tg_param_zero_grad(tgl_param_check(L, 1)));
    return 0;
}

/* p:accumulate() -> 0 when the next wgrad must overwrite p's target, else 1
 * (the engine's decision; Lua-table modules get it as backward_dw's
 * accumulate argument). */
static int p_accumulate(lua_State *L)
{
    lua_pushnumber(L, tg_param_wgrad_accumulate(tgl_param_check(L, 1)));
    return 1;
}

/* p:set_main_grad(view): main_grad becomes a view into a larger buffer. */
static int p_set_main_grad(lua_State *L)
{
    tg_param *p = tgl_param_check(L, 1);
    tgl_check(L, tg_param_set_main_grad(p, tgl_tensor_check(L, 2))); /* p takes its own handle */
    return 0;
}

/* p:set_master(view): the f32 master copy of a bf16 parameter becomes a view into a larger buffer
 * (its values are then the buffer's). */
static int p_set_master(lua_State *L)
{
    tg_param *p = tgl_param_check(L, 1);
    tgl_check(L, tg_param_set_master(p, tgl_tensor_check(L, 2)));
    return 0;
}

static int p_numel(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)tg_tensor_numel(tgl_param_check(L, 1)->data));
    return 1;
}

/* tg.nn.is_parameter(v): true for a live tegraph.Param. */
int tgl_nn_is_parameter(lua_State *L)
{
    struct tgl_param *u = luaL_testudata(L, 1, TGL_PARAM);
    lua_pushboolean(L, u != NULL && u->p != NULL);
    return 1;
}

/* tg.nn.Parameter(name, tensor [, {fuse_wgrad_accumulation=}]): a parameter
 * sharing the tensor's storage (for Lua-table modules). */
int tgl_nn_parameter(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    tg_tensor *t = tgl_tensor_check(L, 2), *ref = NULL;
    int fused = 0;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        tgl_check_keys(L, 3, "nn.Parameter", "fuse_wgrad_accumulation"); /* the one option there is */
        lua_getfield(L, 3, "fuse_wgrad_accumulation");
        fused = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    if (tg_tensor_dtype(t) != TG_F32 && tg_tensor_dtype(t) != TG_BF16)
        luaL_argerror(L, 2, lua_pushfstring(L, "a parameter is f32 or bf16 (got %s)", tg_dtype_name(tg_tensor_dtype(t))));
    tg_param **slot = param_newbox(L);
    tgl_check(L, tg_tensor_ref(t, &ref));
    tgl_check(L, tg_param_new(name, ref, fused, slot)); /* takes ref over */
    tgl_objects_set(L, *slot, -1);
    return 1;
}

static const luaL_Reg p_methods[] = {
    {"register_hook", p_register_hook},
    {"remove_hook", p_remove_hook},
    {"zero_grad", p_zero_grad},
    {"accumulate", p_accumulate},
    {"set_main_grad", p_set_main_grad},
    {"set_master", p_set_master},
    {"numel", p_numel},
    {NULL, NULL},
};

void tgl_open_param(lua_State *L)
{
    tgl_new_class(L, TGL_PARAM, p_methods, p_index, p_gc, p_tostring, p_newindex);
}
