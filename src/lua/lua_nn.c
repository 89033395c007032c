/* lua_nn.c — tegraph.nn: Module and Parameter userdata, Lua wgrad hooks, Lua-table modules, the step API. */
#include "lua/lua_nn.h"
#include "nn/nn.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TGL_MODULE "tegraph.Module"
#define TGL_PARAM "tegraph.Parameter"
#define TGL_ANCHOR "tegraph.nn.anchor"   /* registry: the anchor box of this state */
#define TGL_OBJECTS "tegraph.nn.objects" /* registry: weak, C pointer -> its userdata */
#define TGL_WRAPPED "tegraph.nn.wrapped" /* registry: weak, Lua table -> its Module */

/* ------------------------------------------------------------------ anchor and the calling thread
 * Hooks and Lua-table modules are C callbacks that hold Lua values in the
 * registry. They share an anchor: the main thread, and whether the state is
 * still open (a parameter may outlive its Lua state when a C host keeps it). */
struct tgl_anchor {
    lua_State *L; /* main thread */
    int alive;
    int refs;     /* the registry box + one per callback */
};

struct tgl_anchor_box {
    struct tgl_anchor *a;
};

static void anchor_release(struct tgl_anchor *a)
{
    if (a && --a->refs == 0) free(a);
}

static int anchor_gc(lua_State *L)
{
    struct tgl_anchor_box *b = lua_touserdata(L, 1);
    if (b->a) {
        b->a->alive = 0;
        anchor_release(b->a);
        b->a = NULL;
    }
    return 0;
}

/* The anchor of L's state, with a new reference for a callback. */
static struct tgl_anchor *anchor_get(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_ANCHOR); /* +1 */
    struct tgl_anchor_box *b = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (b == NULL || b->a == NULL) luaL_error(L, "tegraph.nn is not initialised in this Lua state");
    b->a->refs++;
    return b->a;
}

static _Thread_local lua_State *cur_L;

lua_State *tgl_nn_enter(lua_State *L)
{
    lua_State *prev = cur_L;
    cur_L = L;
    return prev;
}

void tgl_nn_leave(lua_State *prev) { cur_L = prev; }

/* The thread a callback of anchor a runs on: the thread that entered the
 * engine when it belongs to a's state, else a's main thread; NULL once closed. */
static lua_State *anchor_thread(struct tgl_anchor *a)
{
    if (!a->alive) return NULL;
    if (cur_L && cur_L != a->L && lua_checkstack(cur_L, 2)) {
        lua_rawgeti(cur_L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD); /* +1 */
        int same = lua_tothread(cur_L, -1) == a->L;
        lua_pop(cur_L, 1);
        if (same) return cur_L;
    }
    return a->L;
}

/* A Lua value held for a C callback. */
struct tgl_ref {
    struct tgl_anchor *anchor;
    int ref;
};

static struct tgl_ref *ref_new(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    struct tgl_ref *r = malloc(sizeof *r);
    if (r == NULL) luaL_error(L, "out of memory");
    r->anchor = anchor_get(L);
    lua_pushvalue(L, idx);
    r->ref = luaL_ref(L, LUA_REGISTRYINDEX); /* -1 */
    return r;
}

static void ref_free(void *ud)
{
    struct tgl_ref *r = ud;
    if (r == NULL) return;
    if (r->anchor->alive) luaL_unref(r->anchor->L, LUA_REGISTRYINDEX, r->ref);
    anchor_release(r->anchor);
    free(r);
}

/* Runs body(L) with the light userdata arg in protected mode on the thread of
 * anchor a; on error returns TG_ELUA with the Lua message (its FILE:LINE
 * included; the engine prefixes the hook or module). */
static tg_status protected_call(struct tgl_anchor *a, lua_CFunction body, void *arg, const char *what)
{
    lua_State *L = anchor_thread(a);
    if (L == NULL) return tg_error(TG_ESTATE, "%s: the Lua state it belongs to is closed", what);
    if (!lua_checkstack(L, 3)) return tg_error(TG_ENOMEM, "%s: Lua stack overflow", what);
    int top = lua_gettop(L);
    lua_pushcfunction(L, body);
    lua_pushlightuserdata(L, arg);
    if (lua_pcall(L, 1, 0, 0) == LUA_OK) return TG_OK;
    const char *msg = lua_type(L, -1) == LUA_TSTRING || lua_type(L, -1) == LUA_TNUMBER
                          ? lua_tostring(L, -1)
                          : lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, -1));
    tg_status st = tg_error(TG_ELUA, "%s", msg ? msg : "(out of memory)");
    lua_settop(L, top);
    return st;
}

/* ------------------------------------------------------------------ the object map
 * One userdata per C object, so a parameter seen by a hook is the same Lua
 * value as the one from m:parameters() (usable as a table key). */
static int objects_get(lua_State *L, const void *p)
{
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_OBJECTS); /* +1 */
    lua_rawgetp(L, -1, p);                           /* +1 */
    lua_remove(L, -2);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    return 1;
}

static void objects_set(lua_State *L, const void *p, int idx)
{
    idx = lua_absindex(L, idx);
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_OBJECTS); /* +1 */
    lua_pushvalue(L, idx);
    lua_rawsetp(L, -2, p);
    lua_pop(L, 1);
}

/* ------------------------------------------------------------------ parameters */
struct tgl_param {
    tg_param *p;
};

static tg_param *param_check(lua_State *L, int idx)
{
    struct tgl_param *u = luaL_checkudata(L, idx, TGL_PARAM);
    if (u->p == NULL) luaL_argerror(L, idx, "parameter is not initialised");
    return u->p;
}

/* Pushes an empty Parameter box; the caller acquires into the slot. */
static tg_param **param_newbox(lua_State *L)
{
    struct tgl_param *u = lua_newuserdatauv(L, sizeof *u, 0); /* +1 */
    u->p = NULL;
    luaL_setmetatable(L, TGL_PARAM);
    return &u->p;
}

/* Pushes the userdata of p (creating it, with a new reference, the first time). */
static void param_push(lua_State *L, tg_param *p)
{
    if (objects_get(L, p)) return;
    tg_param **slot = param_newbox(L);
    *slot = tg_param_retain(p);
    objects_set(L, p, -1);
}

static int p_gc(lua_State *L)
{
    struct tgl_param *u = luaL_checkudata(L, 1, TGL_PARAM);
    tg_param_release(u->p);
    u->p = NULL;
    return 0;
}

/* A new Lua handle on t's storage, or nil. */
static void push_tensor_ref(lua_State *L, const tg_tensor *t)
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
    tg_param *p = param_check(L, 1);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1; /* a method */
    const char *k = lua_tostring(L, 2);
    if (k == NULL) return 0;
    if (strcmp(k, "name") == 0)
        lua_pushstring(L, p->name);
    else if (strcmp(k, "data") == 0)
        push_tensor_ref(L, p->data);
    else if (strcmp(k, "grad") == 0)
        push_tensor_ref(L, p->grad);
    else if (strcmp(k, "main_grad") == 0)
        push_tensor_ref(L, p->main_grad);
    else if (strcmp(k, "master") == 0)
        push_tensor_ref(L, p->master);
    else if (strcmp(k, "wgrad") == 0)
        push_tensor_ref(L, tg_param_wgrad_target(p));
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
    param_push(L, c->p);                           /* +1 */
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
    return protected_call(fn->anchor, hook_body, &c, "a Lua wgrad hook");
}

static void hook_add(lua_State *L, tg_param *p, int fnidx)
{
    struct tgl_ref *r = ref_new(L, fnidx);
    tg_status st = tg_param_add_hook(p, hook_trampoline, r, ref_free);
    if (st != TG_OK) {
        ref_free(r);
        tgl_check(L, st);
    }
}

/* p:register_hook(fn): fn(param, info) after each of p's wgrads. */
static int p_register_hook(lua_State *L)
{
    tg_param *p = param_check(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    hook_add(L, p, 2);
    lua_settop(L, 1);
    return 1;
}

static int p_zero_grad(lua_State *L)
{
    tgl_check(L, tg_param_zero_grad(param_check(L, 1)));
    return 0;
}

/* p:accumulate() -> 0 when the next wgrad must overwrite p's target, else 1
 * (for wgrad ops of Lua-table modules). */
static int p_accumulate(lua_State *L)
{
    lua_pushnumber(L, tg_param_wgrad_accumulate(param_check(L, 1)));
    return 1;
}

/* p:set_main_grad(view): main_grad becomes a view into a larger buffer. */
static int p_set_main_grad(lua_State *L)
{
    tg_param *p = param_check(L, 1);
    tgl_check(L, tg_param_set_main_grad(p, tgl_tensor_check(L, 2))); /* p takes its own handle */
    return 0;
}

static int p_numel(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)tg_tensor_numel(param_check(L, 1)->data));
    return 1;
}

/* tg.nn.Parameter(name, tensor [, {fuse_wgrad_accumulation=}]): a parameter
 * sharing the tensor's storage (for Lua-table modules). */
static int nn_parameter(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    tg_tensor *t = tgl_tensor_check(L, 2), *ref = NULL;
    int fused = 0;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        lua_getfield(L, 3, "fuse_wgrad_accumulation");
        fused = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    if (tg_tensor_dtype(t) != TG_F32 && tg_tensor_dtype(t) != TG_BF16)
        luaL_argerror(L, 2, lua_pushfstring(L, "a parameter is f32 or bf16 (got %s)", tg_dtype_name(tg_tensor_dtype(t))));
    tg_param **slot = param_newbox(L);
    tgl_check(L, tg_tensor_ref(t, &ref));
    tgl_check(L, tg_param_new(name, ref, fused, slot)); /* takes ref over */
    objects_set(L, *slot, -1);
    return 1;
}

static const luaL_Reg p_methods[] = {
    {"register_hook", p_register_hook},
    {"zero_grad", p_zero_grad},
    {"accumulate", p_accumulate},
    {"set_main_grad", p_set_main_grad},
    {"numel", p_numel},
    {NULL, NULL},
};

/* ------------------------------------------------------------------ modules */
struct tgl_module {
    tg_module *m;
    int64_t fifo_key; /* step the counters below belong to (0: outside steps) */
    int fwd_mb;       /* last microbatch forward handed out when mb is omitted */
    int bwd_mb;       /* same for backward */
};

static struct tgl_module *module_box(lua_State *L, int idx)
{
    struct tgl_module *u = luaL_checkudata(L, idx, TGL_MODULE);
    if (u->m == NULL) luaL_argerror(L, idx, "module is not initialised");
    return u;
}

/* Pushes an empty Module box with its two user values: 1 = fields table (the
 * Lua table of a Lua-table module), 2 = values kept alive (children, tied). */
static tg_module **module_newbox(lua_State *L, int fields)
{
    fields = fields ? lua_absindex(L, fields) : 0;
    struct tgl_module *u = lua_newuserdatauv(L, sizeof *u, 2); /* +1 */
    memset(u, 0, sizeof *u);
    luaL_setmetatable(L, TGL_MODULE);
    if (fields)
        lua_pushvalue(L, fields);
    else
        lua_newtable(L);
    lua_setiuservalue(L, -2, 1);
    lua_newtable(L);
    lua_setiuservalue(L, -2, 2);
    return &u->m;
}

static void module_push(lua_State *L, tg_module *m)
{
    if (objects_get(L, m)) return;
    tg_module **slot = module_newbox(L, 0);
    *slot = tg_module_retain(m);
    objects_set(L, m, -1);
}

/* Keeps the value at idx alive as long as the module at midx (user value 2). */
static void module_keep(lua_State *L, int midx, int idx)
{
    idx = lua_absindex(L, idx);
    lua_getiuservalue(L, midx, 2); /* +1 */
    lua_pushvalue(L, idx);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    lua_pop(L, 1);
}

static int m_gc(lua_State *L)
{
    struct tgl_module *u = luaL_checkudata(L, 1, TGL_MODULE);
    tg_module_release(u->m);
    u->m = NULL;
    return 0;
}

static int m_tostring(lua_State *L)
{
    struct tgl_module *u = luaL_checkudata(L, 1, TGL_MODULE);
    if (u->m == NULL)
        lua_pushstring(L, "tegraph.Module (empty)");
    else
        lua_pushfstring(L, "tegraph.Module %s '%s'", u->m->vt->type, u->m->name ? u->m->name : "");
    return 1;
}

static int m_index(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1; /* a method */
    lua_pop(L, 1);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
    const tg_module_opts *o = &u->m->opts;
    if (strcmp(k, "name") == 0)
        lua_pushstring(L, u->m->name ? u->m->name : "");
    else if (strcmp(k, "type") == 0)
        lua_pushstring(L, u->m->vt->type);
    else if (strcmp(k, "exec_mode") == 0)
        lua_pushstring(L, u->m->exec_mode ? u->m->exec_mode : "eager");
    else if (strcmp(k, "delay_wgrad") == 0)
        lua_pushboolean(L, o->delay_wgrad);
    else if (strcmp(k, "fuse_wgrad_accumulation") == 0)
        lua_pushboolean(L, o->fuse_wgrad_accumulation);
    else if (strcmp(k, "chunk") == 0)
        lua_pushinteger(L, o->chunk);
    else if (strcmp(k, "dtype") == 0)
        lua_pushstring(L, tg_dtype_name(o->dtype));
    else if (strcmp(k, "device") == 0)
        tgl_device_push(L, o->device);
    else {
        lua_getiuservalue(L, 1, 1); /* +1: the fields table */
        lua_pushvalue(L, 2);
        lua_gettable(L, -2);
    }
    return 1;
}

/* Other fields go to the fields table (a Lua-table module's own table). */
static int m_newindex(lua_State *L)
{
    module_box(L, 1);
    lua_getiuservalue(L, 1, 1); /* +1 */
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_settable(L, -3);
    return 0;
}

/* The microbatch of a call: the explicit argument, or the module's FIFO
 * counter (reset at each step) so forward/backward pair up in order. */
static int mb_arg(lua_State *L, int idx, struct tgl_module *u, int **counter)
{
    *counter = NULL;
    if (!lua_isnoneornil(L, idx)) {
        lua_Integer mb = luaL_checkinteger(L, idx);
        luaL_argcheck(L, mb >= 1 && mb <= 1 << 30, idx, "microbatch must be >= 1");
        return (int)mb;
    }
    int64_t key = tg_step_open() ? tg_step_index() : 0;
    if (key != u->fifo_key) {
        u->fifo_key = key;
        u->fwd_mb = u->bwd_mb = 0;
    }
    return 0;
}

/* m:forward(x [, mb]) -> y */
static int m_forward(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    tg_tensor *x = tgl_tensor_check(L, 2);
    int *ctr;
    int mb = mb_arg(L, 3, u, &ctr);
    if (mb == 0) mb = u->fwd_mb + 1, ctr = &u->fwd_mb;
    tg_tensor **slot = tgl_tensor_push(L);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_module_forward(u->m, mb, x, slot);
    tgl_nn_leave(prev);
    tgl_check(L, st);
    if (ctr) *ctr = mb;
    return 1;
}

/* m:backward(dy [, mb]) -> dx (nil for a first module such as Embedding).
 * For the LM head after m:loss, dy is nil or a number: d(total)/d(mean loss),
 * e.g. 1/M to average over M microbatches. */
static int m_backward(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    int is_dloss = lua_type(L, 2) == LUA_TNUMBER;
    double dloss = is_dloss ? (double)lua_tonumber(L, 2) : 1.0;
    tg_tensor *dy = lua_isnoneornil(L, 2) || is_dloss ? NULL : tgl_tensor_check(L, 2);
    int *ctr;
    int mb = mb_arg(L, 3, u, &ctr);
    if (mb == 0) mb = u->bwd_mb + 1, ctr = &u->bwd_mb;
    tg_tensor **slot = tgl_tensor_push(L);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = is_dloss ? tg_lm_head_backward_loss(u->m, mb, dloss, slot) : tg_module_backward(u->m, mb, dy, slot);
    tgl_nn_leave(prev);
    tgl_check(L, st);
    if (ctr) *ctr = mb;
    if (*slot == NULL) lua_pushnil(L);
    return 1;
}

/* lm:loss(x, targets [, mb [, ignore_index]]) -> loss (2) f32 = [mean, valid count]. */
static int m_loss(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    tg_tensor *x = tgl_tensor_check(L, 2), *targets = tgl_tensor_check(L, 3);
    int *ctr;
    int mb = mb_arg(L, 4, u, &ctr);
    if (mb == 0) mb = u->fwd_mb + 1, ctr = &u->fwd_mb;
    int ignore = (int)luaL_optinteger(L, 5, -1);
    tg_tensor **slot = tgl_tensor_push(L);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_lm_head_forward_loss(u->m, mb, x, targets, ignore, slot);
    tgl_nn_leave(prev);
    tgl_check(L, st);
    if (ctr) *ctr = mb;
    return 1;
}

static int m_backward_dw(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_module_backward_dw(u->m);
    tgl_nn_leave(prev);
    tgl_check(L, st);
    return 0;
}

static int m_need_backward_dw(lua_State *L)
{
    lua_pushboolean(L, tg_module_need_backward_dw(module_box(L, 1)->m));
    return 1;
}

/* Pushes the parameters (a scratch array is freed before any Lua allocation can fail). */
static int m_parameters(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    tg_param **ps = NULL;
    int n = 0;
    tgl_check(L, tg_module_parameters(u->m, &ps, &n));
    /* Retain them all first, then free the array: pushing can raise. */
    lua_createtable(L, n, 0); /* +1 */
    tg_param **copy = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *copy, 0); /* +1: scratch */
    memcpy(copy, ps, (size_t)n * sizeof *copy);
    free(ps);
    for (int i = 0; i < n; i++) {
        param_push(L, copy[i]);
        lua_rawseti(L, -3, i + 1);
    }
    lua_pop(L, 1);
    return 1;
}

/* m:register_wgrad_hook(fn): fn(param, info) on every parameter of m (TE:
 * register_wgrad_accumulation_and_reduce_hooks). */
static int m_register_wgrad_hook(lua_State *L)
{
    module_box(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 2);
    lua_pushcfunction(L, m_parameters);
    lua_pushvalue(L, 1);
    lua_call(L, 1, 1); /* +1: the parameter list */
    for (lua_Integer i = 1, n = luaL_len(L, 3); i <= n; i++) {
        lua_rawgeti(L, 3, i); /* +1 */
        hook_add(L, param_check(L, -1), 2);
        lua_pop(L, 1);
    }
    lua_settop(L, 1);
    return 1;
}

static int m_zero_grad(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    tg_param **ps = NULL;
    int n = 0;
    tgl_check(L, tg_module_parameters(u->m, &ps, &n));
    tg_status st = TG_OK;
    for (int i = 0; i < n && st == TG_OK; i++) st = tg_param_zero_grad(ps[i]);
    free(ps);
    tgl_check(L, st);
    return 0;
}

static int m_num_parameters(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    tg_param **ps = NULL;
    int n = 0;
    int64_t total = 0;
    tgl_check(L, tg_module_parameters(u->m, &ps, &n));
    for (int i = 0; i < n; i++) total += tg_tensor_numel(ps[i]->data);
    free(ps);
    lua_pushinteger(L, (lua_Integer)total);
    return 1;
}

static int m_children(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    lua_createtable(L, u->m->nchildren, 0);
    for (int i = 0; i < u->m->nchildren; i++) {
        module_push(L, u->m->children[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* Drops saved forward contexts (an evaluation forward that no backward
 * follows): of microbatch mb, or all when mb is omitted; children too. */
static void drop_saved(tg_module *m, int mb)
{
    struct tg_saved **pp = &m->saved;
    while (*pp) {
        struct tg_saved *s = *pp;
        if (mb == 0 || s->mb == mb) {
            *pp = s->next;
            s->next = NULL;
            tg_saved_free(s);
        } else {
            pp = &s->next;
        }
    }
    for (int i = 0; i < m->nchildren; i++) drop_saved(m->children[i], mb);
}

static int m_drop_saved(lua_State *L)
{
    struct tgl_module *u = module_box(L, 1);
    int mb = (int)luaL_optinteger(L, 2, 0);
    drop_saved(u->m, mb);
    if (mb == 0) u->fwd_mb = u->bwd_mb = 0;
    return 0;
}

static const luaL_Reg m_methods[] = {
    {"forward", m_forward},
    {"backward", m_backward},
    {"backward_dw", m_backward_dw},
    {"need_backward_dw", m_need_backward_dw},
    {"loss", m_loss},
    {"parameters", m_parameters},
    {"register_wgrad_hook", m_register_wgrad_hook},
    {"zero_grad", m_zero_grad},
    {"num_parameters", m_num_parameters},
    {"children", m_children},
    {"drop_saved", m_drop_saved},
    {NULL, NULL},
};

/* ------------------------------------------------------------------ Lua-table modules
 * A table with forward(self, x, mb) -> y, backward(self, dy, mb) -> dx and
 * optionally backward_dw(self, mb), plus `params` (a list of Parameters) or
 * a parameters(self) method: the engine fires those parameters' hooks after
 * backward (or after backward_dw when the table sets delay_wgrad). */
struct cb_call {
    struct tgl_ref *mod;
    const char *method;
    int mb;
    int nargs;           /* 1 (backward_dw) or 2 (a tensor argument) */
    const tg_tensor *in; /* x or dy; NULL pushes nil */
    tg_tensor **out;     /* y or dx; NULL for backward_dw */
    int out_required;
};

static int cb_body(lua_State *L)
{
    struct cb_call *c = lua_touserdata(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->mod->ref); /* +1: self */
    if (lua_getfield(L, -1, c->method) != LUA_TFUNCTION) /* +1 */
        return luaL_error(L, "the module table has no %s function", c->method);
    lua_pushvalue(L, -2);
    if (c->nargs == 2) {
        if (c->in)
            push_tensor_ref(L, c->in);
        else
            lua_pushnil(L);
    }
    lua_pushinteger(L, c->mb);
    lua_call(L, c->nargs + 1, 1);
    if (c->out == NULL) return 0;
    tg_tensor *t = tgl_tensor_test(L, -1);
    if (t == NULL) {
        if (lua_isnil(L, -1) && !c->out_required) return 0;
        return luaL_error(L, "%s returned a %s, expected a tensor", c->method, luaL_typename(L, -1));
    }
    tgl_check(L, tg_tensor_ref(t, c->out));
    return 0;
}

static tg_status cb_run(struct cb_call *c)
{
    return protected_call(c->mod->anchor, cb_body, c, c->method);
}

static tg_status cb_forward(void *ud, int mb, const tg_tensor *x, tg_tensor **y)
{
    struct cb_call c = {ud, "forward", mb, 2, x, y, 1};
    return cb_run(&c);
}

static tg_status cb_backward(void *ud, int mb, const tg_tensor *dy, tg_tensor **dx)
{
    struct cb_call c = {ud, "backward", mb, 2, dy, dx, 0};
    return cb_run(&c);
}

static tg_status cb_backward_dw(void *ud, int mb)
{
    struct cb_call c = {ud, "backward_dw", mb, 1, NULL, NULL, 0};
    return cb_run(&c);
}

static int field_bool(lua_State *L, int t, const char *k)
{
    lua_getfield(L, t, k);
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* Pushes the Module wrapping the Lua table at idx (the same one each time
 * while it lives). */
static tg_module *wrap_table(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_WRAPPED); /* +1 */
    lua_pushvalue(L, idx);
    if (lua_rawget(L, -2) != LUA_TNIL) { /* +1 */
        lua_remove(L, -2);
        return module_box(L, -1)->m;
    }
    lua_pop(L, 2);
    if (lua_getfield(L, idx, "forward") != LUA_TFUNCTION || lua_getfield(L, idx, "backward") != LUA_TFUNCTION)
        luaL_error(L, "a Lua module needs forward and backward functions");
    int has_dw = lua_getfield(L, idx, "backward_dw") == LUA_TFUNCTION;
    lua_pop(L, 3);

    /* Its parameters: t.params, or t:parameters() */
    if (lua_getfield(L, idx, "params") == LUA_TNIL) { /* +1 */
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "parameters") == LUA_TFUNCTION) {
            lua_pushvalue(L, idx);
            lua_call(L, 1, 1);
        } else {
            lua_pop(L, 1);
            lua_newtable(L);
        }
    }
    if (!lua_istable(L, -1)) luaL_error(L, "a Lua module's params must be a list of tegraph.Parameter");
    int plist = lua_gettop(L);
    int np = (int)luaL_len(L, plist);
    tg_param **ps = lua_newuserdatauv(L, (size_t)(np > 0 ? np : 1) * sizeof *ps, 0); /* +1: scratch */
    for (int i = 0; i < np; i++) {
        lua_rawgeti(L, plist, i + 1);
        if (luaL_testudata(L, -1, TGL_PARAM) == NULL)
            luaL_error(L, "a Lua module's params[%d] is a %s, expected a tegraph.Parameter", i + 1, luaL_typename(L, -1));
        ps[i] = param_check(L, -1);
        lua_pop(L, 1);
    }

    tg_module_opts o;
    tg_module_opts_default(&o);
    o.delay_wgrad = has_dw && field_bool(L, idx, "delay_wgrad");
    if (lua_getfield(L, idx, "name") == LUA_TSTRING) o.name = lua_tostring(L, -1); /* stays in the table */
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "chunk") != LUA_TNIL) o.chunk = (int)luaL_checkinteger(L, -1);
    lua_pop(L, 1);

    struct tg_callback_module_fns fns = {cb_forward, cb_backward, has_dw ? cb_backward_dw : NULL, ref_free};
    tg_module **slot = module_newbox(L, idx); /* +1 */
    struct tgl_ref *r = ref_new(L, idx);
    tg_status st = tg_callback_module_new(&fns, r, ps, np, &o, slot);
    if (st != TG_OK) {
        if (*slot == NULL) ref_free(r); /* not taken over */
        tgl_check(L, st);
    }
    objects_set(L, *slot, -1);
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_WRAPPED); /* +1 */
    lua_pushvalue(L, idx);
    lua_pushvalue(L, -3);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    module_keep(L, lua_gettop(L), plist); /* the parameters' userdata */
    tg_module *m = *slot;
    lua_replace(L, plist); /* the module goes where the list was */
    lua_settop(L, plist);
    return m;
}

/* The module at idx: a Module, or a Lua table (wrapped; the wrapper replaces
 * the table at idx so it stays alive). */
static tg_module *module_check(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    if (lua_istable(L, idx)) {
        tg_module *m = wrap_table(L, idx); /* +1 */
        lua_replace(L, idx);
        return m;
    }
    struct tgl_module *u = luaL_testudata(L, idx, TGL_MODULE);
    if (u == NULL) luaL_typeerror(L, idx, "tegraph.Module or a table with forward/backward");
    if (u->m == NULL) luaL_argerror(L, idx, "module is not initialised");
    return u->m;
}

/* tg.nn.Module(t): t as a module (see above). */
static int nn_module(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    wrap_table(L, 1);
    return 1;
}

/* ------------------------------------------------------------------ constructors */
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
    o->delay_wgrad = field_bool(L, 1, "delay_wgrad");
    o->fuse_wgrad_accumulation = field_bool(L, 1, "fuse_wgrad_accumulation");
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
        objects_set(L, *(slot), -1);                                                                   \
        return 1;                                                                                      \
    } while (0)

static int nn_linear(lua_State *L)
{
    static const char *const k[] = {"in", "out", NULL};
    tg_module_opts o;
    opts_read(L, "Linear", k, &o);
    int64_t in = int_opt(L, "Linear", "in", -1), out = int_opt(L, "Linear", "out", -1);
    tg_module **slot = module_newbox(L, 0);
    CTOR_END(L, slot, tg_linear_new(in, out, &o, slot));
}

static int nn_layernorm(lua_State *L)
{
    static const char *const k[] = {"dim", NULL};
    tg_module_opts o;
    opts_read(L, "LayerNorm", k, &o);
    int64_t c = int_opt(L, "LayerNorm", "dim", -1);
    tg_module **slot = module_newbox(L, 0);
    CTOR_END(L, slot, tg_layernorm_new(c, &o, slot));
}

static int nn_rmsnorm(lua_State *L)
{
    static const char *const k[] = {"dim", NULL};
    tg_module_opts o;
    opts_read(L, "RMSNorm", k, &o);
    int64_t c = int_opt(L, "RMSNorm", "dim", -1);
    tg_module **slot = module_newbox(L, 0);
    CTOR_END(L, slot, tg_rmsnorm_new(c, &o, slot));
}

static int nn_layernorm_linear(lua_State *L)
{
    static const char *const k[] = {"in", "out", "norm", NULL};
    tg_module_opts o;
    opts_read(L, "LayerNormLinear", k, &o);
    int64_t in = int_opt(L, "LayerNormLinear", "in", -1), out = int_opt(L, "LayerNormLinear", "out", -1);
    const char *norm = str_opt(L, "norm", "layernorm");
    tg_module **slot = module_newbox(L, 0);
    CTOR_END(L, slot, tg_layernorm_linear_new(in, out, norm, &o, slot));
}

static int nn_layernorm_mlp(lua_State *L)
{
    static const char *const k[] = {"dim", "hidden", "norm", "activation", NULL};
    tg_module_opts o;
    opts_read(L, "LayerNormMLP", k, &o);
    int64_t c = int_opt(L, "LayerNormMLP", "dim", -1), h = int_opt(L, "LayerNormMLP", "hidden", 4 * c);
    const char *norm = str_opt(L, "norm", "layernorm"), *act = str_opt(L, "activation", "gelu");
    tg_module **slot = module_newbox(L, 0);
    CTOR_END(L, slot, tg_layernorm_mlp_new(c, h, norm, act, &o, slot));
}

static int nn_attention(lua_State *L)
{
    static const char *const k[] = {"dim", "heads", NULL};
    tg_module_opts o;
    opts_read(L, "CausalSelfAttention", k, &o);
    int64_t c = int_opt(L, "CausalSelfAttention", "dim", -1), nh = int_opt(L, "CausalSelfAttention", "heads", -1);
    tg_module **slot = module_newbox(L, 0);
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
    tg_module **slot = module_newbox(L, 0);
    CTOR_END(L, slot, tg_transformer_layer_new(c, (int)nh, h, norm, act, &o, slot));
}

static int nn_embedding(lua_State *L)
{
    static const char *const k[] = {"vocab", "dim", "context", NULL};
    tg_module_opts o;
    opts_read(L, "Embedding", k, &o);
    int64_t v = int_opt(L, "Embedding", "vocab", -1), c = int_opt(L, "Embedding", "dim", -1);
    int64_t t = int_opt(L, "Embedding", "context", -1);
    tg_module **slot = module_newbox(L, 0);
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
    tg_module **slot = module_newbox(L, 0);
    if (tied) module_keep(L, -1, tidx);
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
        cs[i] = module_check(L, -1);
        lua_rawseti(L, kids, i + 1);
    }
    tg_module **slot = module_newbox(L, 0); /* +1 */
    lua_pushvalue(L, kids);
    lua_setiuservalue(L, -2, 2);
    CTOR_END(L, slot, tg_sequential_new(cs, n, &o, slot));
}

/* ------------------------------------------------------------------ steps and hook checking */

/* tg.step_begin{microbatches=M} or tg.step_begin(M) -> step index */
static int l_step_begin(lua_State *L)
{
    lua_Integer m;
    if (lua_istable(L, 1)) {
        lua_getfield(L, 1, "microbatches");
        m = luaL_optinteger(L, -1, 1);
        lua_pop(L, 1);
    } else {
        m = luaL_optinteger(L, 1, 1);
    }
    luaL_argcheck(L, m >= 1 && m <= 1 << 20, 1, "microbatches must be >= 1");
    tgl_check(L, tg_step_begin((int)m));
    lua_pushinteger(L, (lua_Integer)tg_step_index());
    return 1;
}

static int l_step_end(lua_State *L)
{
    tgl_check(L, tg_step_end());
    return 0;
}

static int l_step_index(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)tg_step_index());
    return 1;
}

static int l_step_open(lua_State *L)
{
    lua_pushboolean(L, tg_step_open());
    return 1;
}

/* tg.hook_check([on]) -> the previous setting */
static int l_hook_check(lua_State *L)
{
    lua_pushboolean(L, tg_hook_check_get());
    if (!lua_isnone(L, 1)) tg_hook_check_set(lua_toboolean(L, 1));
    return 1;
}

/* tg.debug_skip_hooks_after_replay([on]) -> the previous setting (tests only) */
static int l_debug_skip_hooks(lua_State *L)
{
    lua_pushboolean(L, tg_debug_skip_hooks_after_replay_get());
    if (!lua_isnone(L, 1)) tg_debug_skip_hooks_after_replay(lua_toboolean(L, 1));
    return 1;
}

/* tg.time(): monotonic wall-clock seconds (progress, tokens/s). */
static int l_time(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

/* tg.isatty([file or fd]): whether it is a terminal (default io.stdout). */
static int l_isatty(lua_State *L)
{
    int fd = 1;
    if (lua_isinteger(L, 1)) {
        fd = (int)lua_tointeger(L, 1);
    } else if (!lua_isnoneornil(L, 1)) {
        luaL_Stream *s = luaL_checkudata(L, 1, LUA_FILEHANDLE);
        if (s->closef == NULL || s->f == NULL) return luaL_argerror(L, 1, "file is closed");
        fd = fileno(s->f);
    }
    lua_pushboolean(L, isatty(fd));
    return 1;
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
    {"Module", nn_module},
    {"Parameter", nn_parameter},
    {NULL, NULL},
};

static const luaL_Reg step_funcs[] = {
    {"step_begin", l_step_begin},
    {"step_end", l_step_end},
    {"step_index", l_step_index},
    {"step_open", l_step_open},
    {"hook_check", l_hook_check},
    {"debug_skip_hooks_after_replay", l_debug_skip_hooks},
    {NULL, NULL},
};

/* A metatable with methods behind an __index closure, __gc, __tostring. */
static void new_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction index, lua_CFunction gc,
                      lua_CFunction tostring, lua_CFunction newindex)
{
    luaL_newmetatable(L, name); /* +1 */
    lua_newtable(L);            /* +1: the methods */
    luaL_setfuncs(L, methods, 0);
    lua_pushcclosure(L, index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tostring);
    lua_setfield(L, -2, "__tostring");
    if (newindex) {
        lua_pushcfunction(L, newindex);
        lua_setfield(L, -2, "__newindex");
    }
    lua_pop(L, 1);
}

/* A registry table with the given weak mode, once per state. */
static void weak_table(lua_State *L, const char *key, const char *mode)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) {
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, key);
}

int tg_lua_open_nn(lua_State *L)
{
    int core = lua_gettop(L);
    if (lua_getfield(L, LUA_REGISTRYINDEX, TGL_ANCHOR) == LUA_TNIL) { /* +1 */
        struct tgl_anchor_box *b = lua_newuserdatauv(L, sizeof *b, 0); /* +1 */
        b->a = NULL;
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, anchor_gc);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        b->a = calloc(1, sizeof *b->a);
        if (b->a == NULL) return luaL_error(L, "out of memory");
        lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
        b->a->L = lua_tothread(L, -1);
        lua_pop(L, 1);
        b->a->alive = 1;
        b->a->refs = 1;
        lua_setfield(L, LUA_REGISTRYINDEX, TGL_ANCHOR);
    }
    lua_pop(L, 1);
    weak_table(L, TGL_OBJECTS, "v");
    weak_table(L, TGL_WRAPPED, "kv");
    new_class(L, TGL_PARAM, p_methods, p_index, p_gc, p_tostring, NULL);
    new_class(L, TGL_MODULE, m_methods, m_index, m_gc, m_tostring, m_newindex);

    luaL_newlib(L, nn_funcs); /* +1 */
    lua_setfield(L, core, "nn");
    luaL_setfuncs(L, step_funcs, 0);
    tgl_open_ops(L);
    if (lua_getfield(L, core, "time") == LUA_TNIL) {
        lua_pushcfunction(L, l_time);
        lua_setfield(L, core, "time");
    }
    if (lua_getfield(L, core, "isatty") == LUA_TNIL) {
        lua_pushcfunction(L, l_isatty);
        lua_setfield(L, core, "isatty");
    }
    lua_settop(L, core);
    return 0;
}

/* For the other bindings (lua_graph.c): a module userdata or a Lua module table. */
tg_module *tgl_module_check(lua_State *L, int idx) { return module_check(L, idx); }
