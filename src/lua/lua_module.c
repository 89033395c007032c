/* lua_module.c — the tegraph.Module userdata (forward, backward, backward_dw, hooks...) and modules written as Lua tables. */
#include "lua/lua_nn.h"
#include "nn/nn.h"

#include <limits.h>
#include <string.h>

#define TGL_WRAPPED "tegraph.nn.wrapped" /* registry: weak, Lua table -> its Module */

struct tgl_module *tgl_module_box(lua_State *L, int idx)
{
    struct tgl_module *u = luaL_checkudata(L, idx, TGL_MODULE);
    if (u->m == NULL) luaL_argerror(L, idx, "module is not initialised");
    return u;
}

/* Pushes an empty Module box with its two user values: 1 = fields table (the
 * Lua table of a Lua-table module), 2 = values kept alive (children, tied). */
tg_module **tgl_module_newbox(lua_State *L, int fields)
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
    if (tgl_objects_get(L, m)) return;
    tg_module **slot = tgl_module_newbox(L, 0);
    *slot = tg_module_retain(m);
    tgl_objects_set(L, m, -1);
}

/* Keeps the value at idx alive as long as the module at midx (user value 2). */
void tgl_module_keep(lua_State *L, int midx, int idx)
{
    idx = lua_absindex(L, idx);
    lua_getiuservalue(L, midx, 2); /* +1 */
    lua_pushvalue(L, idx);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    lua_pop(L, 1);
}

static void module_release(void *m) { tg_module_release(m); }

/* The box lets go of its module. Inside an engine call (a hook calling
 * getmetatable(m).__gc(m) while m runs) the module may be the one running:
 * the reference then goes when that call returns (tgl_release_when_idle). */
static int m_gc(lua_State *L)
{
    struct tgl_module *u = luaL_checkudata(L, 1, TGL_MODULE);
    tg_module *m = u->m;
    u->m = NULL;
    if (m == NULL) return 0;
    if (tgl_objects_get(L, m)) { /* +1: this box no longer stands for m (a later push makes a new one) */
        if (lua_rawequal(L, -1, 1)) {
            lua_pushnil(L);
            tgl_objects_set(L, m, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    tgl_release_when_idle(module_release, m);
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
    struct tgl_module *u = tgl_module_box(L, 1);
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
    tgl_module_box(L, 1);
    lua_getiuservalue(L, 1, 1); /* +1 */
    lua_pushvalue(L, 2);
    lua_pushvalue(L, 3);
    lua_settable(L, -3);
    return 0;
}

/* The microbatch argument at idx: an integer >= 1, or 0 when omitted (the
 * engine picks: src/nn/nn.h). */
int tgl_mb_arg(lua_State *L, int idx)
{
    if (lua_isnoneornil(L, idx)) return 0;
    if (tgl_tensor_test(L, idx))
        return luaL_argerror(L, idx, "microbatch expected, got a tensor (the tensor comes first: forward(x, mb), backward(dy, mb))");
    lua_Integer mb = luaL_checkinteger(L, idx);
    luaL_argcheck(L, mb >= 1 && mb <= 1 << 30, idx, "microbatch must be >= 1 and <= 1073741824");
    return (int)mb;
}

/* The tensor argument at idx of a protocol call; a number there is the
 * microbatch given first. */
tg_tensor *tgl_protocol_tensor(lua_State *L, int idx, const char *call)
{
    if (lua_type(L, idx) == LUA_TNUMBER)
        luaL_argerror(L, idx, lua_pushfstring(L, "tegraph.Tensor expected, got number (the microbatch comes last: %s)", call));
    return tgl_tensor_check(L, idx);
}

/* Reads the list of tensors at idx into x (nil entries stay NULL); returns its length. */
static int tensor_list(lua_State *L, int idx, const tg_tensor **x, const char *call)
{
    int n = tgl_len(L, idx);
    if (n < 1 || n > TG_MAX_IO) luaL_error(L, "%s: a list of %d tensors (1 to %d)", call, n, TG_MAX_IO);
    for (int i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        x[i - 1] = lua_isnil(L, -1) ? NULL : tgl_tensor_test(L, -1);
        if (!x[i - 1] && !lua_isnil(L, -1)) luaL_error(L, "%s: entry %d is a %s, expected a tensor", call, i, luaL_typename(L, -1));
        lua_pop(L, 1); /* the list keeps it */
    }
    return n;
}

/* Pushes y[0 .. n-1], taking them: the tensor when there is one (single), else a list (nil holes). */
static void push_tensors(lua_State *L, tg_tensor **y, int n, int single)
{
    if (single && n == 1) {
        tg_tensor **slot = tgl_tensor_push(L);
        *slot = y[0];
        return;
    }
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++)
        if (y[i]) {
            tg_tensor **slot = tgl_tensor_push(L);
            *slot = y[i];
            lua_rawseti(L, -2, i + 1);
        }
}

void tgl_push_tensors(lua_State *L, tg_tensor **y, int n, int single) { push_tensors(L, y, n, single); }
int tgl_tensor_list(lua_State *L, int idx, const tg_tensor **x, const char *call) { return tensor_list(L, idx, x, call); }

/* m:forward({x1, ..., xN} [, mb]) -> y or {y1, ..., yM}: modules with several inputs (Lua tables) */
static int m_forward_n(lua_State *L, struct tgl_module *u)
{
    const tg_tensor *x[TG_MAX_IO];
    tg_tensor *y[TG_MAX_IO] = {0};
    char label[160];
    if (!u->m->vt->forward_n) /* named here: the core's "takes one input, got 1" reads as a contradiction */
        return luaL_error(L, "%s takes one tensor, not a list: forward(x, mb), not forward({x}, mb) (got a list of %I)",
                          tg_module_label(u->m, label, sizeof label), luaL_len(L, 2));
    int nx = tensor_list(L, 2, x, "forward({x1, ..., xN}, mb)"), ny = 0;
    for (int i = 0; i < nx; i++)
        if (!x[i]) return luaL_error(L, "forward({x1, ..., xN}, mb): input %d is nil", i + 1);
    int mb = tgl_mb_arg(L, 3);
    tgl_hold(L, x, nx);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_module_forward_n(u->m, mb, x, nx, y, &ny);
    tgl_nn_leave(prev);
    tgl_unhold(x, nx);
    tgl_check(L, st);
    push_tensors(L, y, ny, 1);
    return 1;
}

/* m:backward(dy or {dy1, ..., dyM} [, mb]) -> {dx1, ..., dxN} after a forward of a list */
static int m_backward_n(lua_State *L, struct tgl_module *u)
{
    const tg_tensor *dy[TG_MAX_IO];
    tg_tensor *dx[TG_MAX_IO] = {0};
    int ny = 1;
    char label[160];
    if (lua_istable(L, 2) && !tgl_tensor_test(L, 2) && !u->m->vt->backward_n)
        return luaL_error(L, "%s takes one output gradient tensor, not a list: backward(dy, mb), not backward({dy}, mb) "
                          "(got a list of %I)", tg_module_label(u->m, label, sizeof label), luaL_len(L, 2));
    if (lua_istable(L, 2) && !tgl_tensor_test(L, 2)) ny = tensor_list(L, 2, dy, "backward({dy1, ..., dyM}, mb)");
    else dy[0] = lua_isnoneornil(L, 2) ? NULL : tgl_protocol_tensor(L, 2, "backward(dy, mb)");
    int mb = tgl_mb_arg(L, 3);
    tgl_hold(L, dy, ny);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_module_backward_n(u->m, mb, dy, ny, dx, TG_MAX_IO);
    tgl_nn_leave(prev);
    tgl_unhold(dy, ny);
    tgl_check(L, st);
    int n = 0;
    for (int i = 0; i < TG_MAX_IO; i++)
        if (dx[i]) n = i + 1;
    push_tensors(L, dx, n, 0);
    return 1;
}

/* m:forward(x [, mb]) -> y */
static int m_forward(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    if (lua_istable(L, 2) && !tgl_tensor_test(L, 2)) return m_forward_n(L, u);
    const tg_tensor *x[1] = {tgl_protocol_tensor(L, 2, "forward(x, mb)")};
    int mb = tgl_mb_arg(L, 3);
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_hold(L, x, 1);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_module_forward(u->m, mb, x[0], slot);
    tgl_nn_leave(prev);
    tgl_unhold(x, 1);
    tgl_check(L, st);
    return 1;
}

/* m:forward_res(x, res [, mb]) -> res + forward(x), the add fused where the module can (a Linear's GEMM). */
static int m_forward_res(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    const tg_tensor *in[2] = {tgl_protocol_tensor(L, 2, "forward_res(x, res, mb)"),
                              tgl_protocol_tensor(L, 3, "forward_res(x, res, mb)")};
    int mb = tgl_mb_arg(L, 4);
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_hold(L, in, 2);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_module_forward_res(u->m, mb, in[0], in[1], slot);
    tgl_nn_leave(prev);
    tgl_unhold(in, 2);
    tgl_check(L, st);
    return 1;
}

static int is_lm_head(const tg_module *m) { return strcmp(m->vt->type, "LMHead") == 0; }

/* m:backward(dy [, mb]) -> dx (nil for a first module such as Embedding).
 * For the LM head after m:loss, dy is nil or a number: d(total)/d(mean loss),
 * e.g. 1/M to average over M microbatches. */
static int m_backward(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    if (u->m->tuple_io || (lua_istable(L, 2) && !tgl_tensor_test(L, 2))) return m_backward_n(L, u);
    int is_dloss = lua_type(L, 2) == LUA_TNUMBER && is_lm_head(u->m);
    double dloss = is_dloss ? (double)lua_tonumber(L, 2) : 1.0;
    const tg_tensor *dy[1] = {lua_isnoneornil(L, 2) || is_dloss ? NULL : tgl_protocol_tensor(L, 2, "backward(dy, mb)")};
    int mb = tgl_mb_arg(L, 3);
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_hold(L, dy, 1);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = is_dloss ? tg_lm_head_backward_loss(u->m, mb, dloss, slot) : tg_module_backward(u->m, mb, dy[0], slot);
    tgl_nn_leave(prev);
    tgl_unhold(dy, 1);
    tgl_check(L, st);
    if (*slot == NULL) lua_pushnil(L);
    return 1;
}

/* lm:loss(x, targets [, mb [, ignore_index [, dloss]]]) -> loss (2) f32 = [mean, valid count].
 * dloss: the number its backward will be given; the fused loss then computes the backward at once. */
static int m_loss(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    const tg_tensor *in[2] = {tgl_protocol_tensor(L, 2, "loss(x, targets, mb)"), tgl_tensor_check(L, 3)};
    int mb = tgl_mb_arg(L, 4);
    int ignore = tgl_optint(L, 5, -1);
    int grad = !lua_isnoneornil(L, 6);
    double dloss = grad ? (double)luaL_checknumber(L, 6) : 1.0;
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_hold(L, in, 2);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = grad ? tg_lm_head_forward_loss_grad(u->m, mb, in[0], in[1], ignore, dloss, slot)
                        : tg_lm_head_forward_loss(u->m, mb, in[0], in[1], ignore, slot);
    tgl_nn_leave(prev);
    tgl_unhold(in, 2);
    tgl_check(L, st);
    return 1;
}

/* m:backward_dw([mb]): the queued wgrad of mb, which must be the store's head (omitted: the head). */
static int m_backward_dw(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    int mb = tgl_mb_arg(L, 2);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_module_backward_dw(u->m, mb);
    tgl_nn_leave(prev);
    tgl_check(L, st);
    return 0;
}

static int m_need_backward_dw(lua_State *L)
{
    lua_pushboolean(L, tg_module_need_backward_dw(tgl_module_box(L, 1)->m));
    return 1;
}

/* Pushes the parameters (a scratch array is freed before any Lua allocation can fail). */
static int m_parameters(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    tg_param **ps = NULL;
    int n = 0;
    tgl_check(L, tg_module_parameters(u->m, &ps, &n));
    /* Retain them all first, then free the array: pushing can raise. */
    lua_createtable(L, n, 0); /* +1 */
    tg_param **copy = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *copy, 0); /* +1: scratch */
    memcpy(copy, ps, (size_t)n * sizeof *copy);
    free(ps);
    for (int i = 0; i < n; i++) {
        tgl_param_push(L, copy[i]);
        lua_rawseti(L, -3, i + 1);
    }
    lua_pop(L, 1);
    return 1;
}

/* m:register_wgrad_hook(fn) -> m, ids: fn(param, info) on every parameter of m, all or none (ids[i] is the hook's
 * id on m:parameters()[i], for p:remove_hook) (TE:
 * register_wgrad_accumulation_and_reduce_hooks). */
static int m_register_wgrad_hook(lua_State *L)
{
    tgl_module_box(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 2);
    lua_pushcfunction(L, m_parameters);
    lua_pushvalue(L, 1);
    lua_call(L, 1, 1); /* +1: the parameter list */
    lua_Integer n = luaL_len(L, 3);
    for (lua_Integer i = 1; i <= n; i++) { /* all or nothing: every parameter can take fn before one does */
        lua_rawgeti(L, 3, i); /* +1 */
        tgl_hook_can_add(L, tgl_param_check(L, -1), 2);
        lua_pop(L, 1);
    }
    lua_createtable(L, (int)n, 0); /* +1 (4): the ids, in m:parameters() order */
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 3, i); /* +1 */
        lua_pushinteger(L, tgl_hook_add(L, tgl_param_check(L, -1), 2));
        lua_rawseti(L, 4, i);
        lua_pop(L, 1);
    }
    lua_pushvalue(L, 1);
    lua_insert(L, 4);
    return 2; /* m, ids */
}

/* The pre-hook trampoline: fn(module, {microbatch=, chunk=, step=}). */
struct pre_call {
    struct tgl_ref *fn;
    tg_module *m;
    const tg_forward_info *info;
};

static int pre_body(lua_State *L)
{
    struct pre_call *c = lua_touserdata(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->fn->ref); /* +1: fn */
    module_push(L, c->m);                          /* +1 */
    lua_createtable(L, 0, 3);                      /* +1: info */
    lua_pushinteger(L, c->info->microbatch);
    lua_setfield(L, -2, "microbatch");
    lua_pushinteger(L, c->info->chunk);
    lua_setfield(L, -2, "chunk");
    lua_pushinteger(L, (lua_Integer)c->info->step);
    lua_setfield(L, -2, "step");
    lua_call(L, 2, 0);
    return 0;
}

static tg_status pre_trampoline(void *ud, tg_module *m, const tg_forward_info *info)
{
    struct tgl_ref *fn = ud;
    struct pre_call c = {fn, m, info};
    return tgl_protected_call(fn, pre_body, &c, "a Lua forward pre-hook");
}

/* m:register_forward_pre_hook(fn) -> m, id: fn(module, info) before each
 * forward of m (or replay of the F graph holding it); id is the handle for
 * m:remove_forward_pre_hook(id). */
static int m_register_forward_pre_hook(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    for (int i = 0; i < u->m->npre; i++) { /* the same Lua function twice would run twice */
        if (u->m->pre_hooks[i].fn != pre_trampoline) continue;
        if (tgl_ref_is(L, u->m->pre_hooks[i].ud, 2)) {
            char label[160];
            return luaL_error(L, "register_forward_pre_hook on %s: this function is already one of its pre-hooks (id %d); "
                              "it would run twice", tg_module_label(u->m, label, sizeof label), u->m->pre_hooks[i].id);
        }
    }
    struct tgl_ref *r = tgl_ref_new(L, 2);
    int id = 0;
    tg_status st = tg_module_add_forward_pre_hook(u->m, pre_trampoline, r, tgl_ref_free, &id);
    if (st != TG_OK) {
        tgl_ref_free(r);
        tgl_check(L, st);
    }
    lua_settop(L, 1);
    lua_pushinteger(L, id);
    return 2;
}

/* m:remove_forward_pre_hook(id) (an error naming m when it has no such pre-hook). */
static int m_remove_forward_pre_hook(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    lua_Integer id = luaL_checkinteger(L, 2);
    char label[160];
    if (id < 1 || id > INT32_MAX)
        luaL_argerror(L, 2, lua_pushfstring(L, "%s has no forward pre-hook with id %I", tg_module_label(u->m, label, sizeof label), id));
    tgl_check(L, tg_module_remove_forward_pre_hook(u->m, (int)id));
    return 0;
}

tg_module *tg_lua_checkmodule(lua_State *L, int idx) { return tgl_module_box(L, idx)->m; }

static int m_zero_grad(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
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
    struct tgl_module *u = tgl_module_box(L, 1);
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
    struct tgl_module *u = tgl_module_box(L, 1);
    lua_createtable(L, u->m->nchildren, 0);
    for (int i = 0; i < u->m->nchildren; i++) {
        module_push(L, u->m->children[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* m:drop_saved([mb]): drops saved forward contexts (an evaluation forward
 * that no backward follows): of microbatch mb, or all when mb is omitted; children too. */
static int m_drop_saved(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    tg_module_drop_saved(u->m, tgl_mb_arg(L, 2));
    return 0;
}

/* m:set_delay_wgrad(on): delayed wgrad on or off for m and its children, for the backwards that follow. */
static int m_set_delay_wgrad(lua_State *L)
{
    struct tgl_module *u = tgl_module_box(L, 1);
    luaL_checktype(L, 2, LUA_TBOOLEAN);
    tgl_check(L, tg_module_set_delay_wgrad(u->m, lua_toboolean(L, 2)));
    lua_settop(L, 1);
    return 1;
}

static const luaL_Reg m_methods[] = {
    {"set_delay_wgrad", m_set_delay_wgrad},
    {"set_fp8", tgl_module_set_fp8},
    {"fp8_state", tgl_module_fp8_state},
    {"forward", m_forward},
    {"forward_res", m_forward_res},
    {"backward", m_backward},
    {"backward_dw", m_backward_dw},
    {"need_backward_dw", m_need_backward_dw},
    {"loss", m_loss},
    {"parameters", m_parameters},
    {"register_wgrad_hook", m_register_wgrad_hook},
    {"register_forward_pre_hook", m_register_forward_pre_hook},
    {"remove_forward_pre_hook", m_remove_forward_pre_hook},
    {"zero_grad", m_zero_grad},
    {"num_parameters", m_num_parameters},
    {"children", m_children},
    {"drop_saved", m_drop_saved},
    {NULL, NULL},
};

/* ------------------------------------------------------------------ Lua-table modules
 * A table with forward(self, x, mb) -> y, backward(self, dy, mb) -> dx and
 * optionally backward_dw(self, mb, accumulate), plus `params` (a list of
 * Parameters) or a parameters(self) method: the engine fires those
 * parameters' hooks after backward (or after backward_dw when the table sets
 * delay_wgrad). accumulate (a boolean) says whether this wgrad adds to the
 * parameters' gradients (true) or overwrites them (false: the first of the
 * step); a table without backward_dw computes its wgrad in backward, which
 * then gets it as a fourth argument: backward(self, dy, mb, accumulate). */
struct cb_call {
    struct tgl_ref *mod;
    const char *method;
    int mb;
    int tensor_arg;      /* 1: in is passed before mb (forward, backward) */
    const tg_tensor *in; /* x or dy; NULL pushes nil */
    int acc;             /* accumulate passed after mb: 0 or 1; -1: not passed */
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
    if (c->tensor_arg) {
        if (c->in)
            tgl_push_tensor_ref(L, c->in);
        else
            lua_pushnil(L);
    }
    lua_pushinteger(L, c->mb);
    if (c->acc >= 0) lua_pushboolean(L, c->acc);
    lua_call(L, 2 + c->tensor_arg + (c->acc >= 0), 1);
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
    return tgl_protected_call(c->mod, cb_body, c, c->method);
}

static tg_status cb_forward(void *ud, int mb, const tg_tensor *x, tg_tensor **y)
{
    struct cb_call c = {ud, "forward", mb, 1, x, -1, y, 1};
    return cb_run(&c);
}

static tg_status cb_backward(void *ud, int mb, const tg_tensor *dy, tg_tensor **dx, int accumulate)
{
    struct cb_call c = {ud, "backward", mb, 1, dy, accumulate, dx, 0};
    return cb_run(&c);
}

static tg_status cb_backward_dw(void *ud, int mb, int accumulate)
{
    struct cb_call c = {ud, "backward_dw", mb, 0, NULL, accumulate, NULL, 0};
    return cb_run(&c);
}

/* Several inputs: forward(self, {x1, ..., xN}, mb) -> y or {y1, ..., yM};
 * backward(self, dy or {dy1, ..., dyM}, mb [, accumulate]) -> {dx1, ..., dxN}
 * (nil entries: inputs without a gradient). */
struct cb_call_n {
    struct tgl_ref *mod;
    const char *method;
    int mb;
    const tg_tensor *const *in;
    int nin;
    int acc;
    tg_tensor **out;
    int nout; /* backward: the inputs expected; forward: set to the outputs returned */
    int *nret;
};

static int cb_body_n(lua_State *L)
{
    struct cb_call_n *c = lua_touserdata(L, 1);
    int fwd = c->nret != NULL;
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->mod->ref); /* +1: self */
    if (lua_getfield(L, -1, c->method) != LUA_TFUNCTION) /* +1 */
        return luaL_error(L, "the module table has no %s function", c->method);
    lua_pushvalue(L, -2);
    if (!fwd && c->nin == 1) {
        if (c->in[0]) tgl_push_tensor_ref(L, c->in[0]);
        else lua_pushnil(L);
    } else {
        lua_createtable(L, c->nin, 0);
        for (int i = 0; i < c->nin; i++)
            if (c->in[i]) {
                tgl_push_tensor_ref(L, c->in[i]);
                lua_rawseti(L, -2, i + 1);
            }
    }
    lua_pushinteger(L, c->mb);
    if (c->acc >= 0) lua_pushboolean(L, c->acc);
    lua_call(L, 3 + (c->acc >= 0), 1);
    int r = lua_gettop(L);
    if (fwd && tgl_tensor_test(L, r)) {
        *c->nret = 1;
        tgl_check(L, tg_tensor_ref(tgl_tensor_test(L, r), &c->out[0]));
        return 0;
    }
    if (!lua_istable(L, r))
        return luaL_error(L, "%s returned a %s, expected %s", c->method, luaL_typename(L, r),
                          fwd ? "a tensor or a list of tensors" : "a list of input gradients");
    int n = fwd ? tgl_len(L, r) : c->nout;
    if (fwd && (n < 1 || n > TG_MAX_IO)) return luaL_error(L, "forward returned a list of %d outputs (1 to %d)", n, TG_MAX_IO);
    for (int i = 1; i <= n; i++) {
        lua_rawgeti(L, r, i);
        tg_tensor *t = tgl_tensor_test(L, -1);
        if (!t && (fwd || !lua_isnil(L, -1)))
            return luaL_error(L, "%s returned a %s as %s %d, expected a tensor%s", c->method, luaL_typename(L, -1),
                              fwd ? "output" : "the gradient of input", i, fwd ? "" : " or nil");
        if (t) tgl_check(L, tg_tensor_ref(t, &c->out[i - 1]));
        lua_pop(L, 1);
    }
    if (fwd) *c->nret = n;
    return 0;
}

static tg_status cb_forward_n(void *ud, int mb, const tg_tensor *const *x, int nx, tg_tensor **y, int *ny)
{
    struct cb_call_n c = {ud, "forward", mb, x, nx, -1, y, 0, ny};
    return tgl_protected_call(c.mod, cb_body_n, &c, c.method);
}

static tg_status cb_backward_n(void *ud, int mb, const tg_tensor *const *dy, int ny, tg_tensor **dx, int nx, int accumulate)
{
    struct cb_call_n c = {ud, "backward", mb, dy, ny, accumulate, dx, nx, NULL};
    return tgl_protected_call(c.mod, cb_body_n, &c, c.method);
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
        return tgl_module_box(L, -1)->m;
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
    int np = tgl_len(L, plist);
    tg_param **ps = lua_newuserdatauv(L, (size_t)(np > 0 ? np : 1) * sizeof *ps, 0); /* +1: scratch */
    for (int i = 0; i < np; i++) {
        lua_rawgeti(L, plist, i + 1);
        if (luaL_testudata(L, -1, TGL_PARAM) == NULL)
            luaL_error(L, "a Lua module's params[%d] is a %s, expected a tegraph.Parameter", i + 1, luaL_typename(L, -1));
        ps[i] = tgl_param_check(L, -1);
        lua_pop(L, 1);
    }

    tg_module_opts o;
    tg_module_opts_default(&o);
    o.delay_wgrad = tgl_field_bool(L, idx, "delay_wgrad");
    if (o.delay_wgrad && !has_dw) /* the wgrad would silently run in backward */
        luaL_error(L, "a Lua module with delay_wgrad = true needs a backward_dw function (it runs the delayed wgrad)");
    int nt = lua_getfield(L, idx, "name"); /* +1 */
    if (nt == LUA_TSTRING) o.name = lua_tostring(L, -1); /* stays in the table */
    else if (nt != LUA_TNIL) luaL_error(L, "a Lua module's name must be a string (got a %s)", luaL_typename(L, -1));
    lua_pop(L, 1);
    if (lua_getfield(L, idx, "chunk") != LUA_TNIL) {
        int isint = 0;
        lua_Integer c = lua_tointegerx(L, -1, &isint);
        if (!isint || c < 1 || c > INT_MAX)
            luaL_error(L, "a Lua module's chunk must be an integer from 1 to %d (got %s)", INT_MAX, tgl_value_str(L, -1));
        o.chunk = (int)c;
    }
    lua_pop(L, 1);

    struct tg_callback_module_fns fns = {.forward = cb_forward, .backward = cb_backward, .backward_dw = has_dw ? cb_backward_dw : NULL,
                                         .forward_n = cb_forward_n, .backward_n = cb_backward_n, .free_ud = tgl_ref_free};
    tg_module **slot = tgl_module_newbox(L, idx); /* +1 */
    struct tgl_ref *r = tgl_ref_new(L, idx);
    tg_status st = tg_callback_module_new(&fns, r, ps, np, &o, slot);
    if (st != TG_OK) {
        if (*slot == NULL) tgl_ref_free(r); /* not taken over */
        tgl_check(L, st);
    }
    tgl_objects_set(L, *slot, -1);
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_WRAPPED); /* +1 */
    lua_pushvalue(L, idx);
    lua_pushvalue(L, -3);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    tgl_module_keep(L, lua_gettop(L), plist); /* the parameters' userdata */
    tg_module *m = *slot;
    lua_replace(L, plist); /* the module goes where the list was */
    lua_settop(L, plist);
    return m;
}

/* The module at idx: a Module, or a Lua table (wrapped; the wrapper replaces
 * the table at idx so it stays alive). */
tg_module *tgl_module_check(lua_State *L, int idx)
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
int tgl_nn_module(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    wrap_table(L, 1);
    return 1;
}

void tgl_open_module(lua_State *L)
{
    tgl_new_class(L, TGL_MODULE, m_methods, m_index, m_gc, m_tostring, m_newindex);
    if (lua_getfield(L, LUA_REGISTRYINDEX, TGL_WRAPPED) != LUA_TTABLE) { /* +1 */
        lua_newtable(L);
        lua_createtable(L, 0, 1);
        lua_pushstring(L, "kv");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        lua_setfield(L, LUA_REGISTRYINDEX, TGL_WRAPPED);
    }
    lua_pop(L, 1);
}
