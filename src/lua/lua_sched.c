/* lua_sched.c — tegraph.sched: run a schedule plan on modules or graphed callables, and its replay order. */
#include "lua/lua_sched.h"
#include "lua/lua_comm.h"
#include "lua/lua_graph.h"
#include "lua/lua_nn.h"
#include "sched/executor.h"
#include "sched/transport_comm.h"

#include <string.h>

static int opt_int(lua_State *L, int t, const char *k, int def)
{
    lua_getfield(L, t, k);
    int v = lua_isnil(L, -1) ? def : tgl_checkint(L, -1);
    lua_pop(L, 1);
    return v;
}

/* ------------------------------------------------------------------ plans */
/* Reads the Lua plan at idx into p; its arrays are userdata collected with the
 * table it leaves on the stack (+1). */
static void plan_read(lua_State *L, int idx, tg_sched_plan *p)
{
    idx = lua_absindex(L, idx);
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_newtable(L); /* +1: keeps the arrays alive */
    int keep = lua_gettop(L), nkeep = 0;
    memset(p, 0, sizeof *p);
    p->stages = opt_int(L, idx, "stages", 0);
    int per_stage = opt_int(L, idx, "chunks", 1);
    p->microbatches = opt_int(L, idx, "microbatches", 0);
    if (p->stages < 1 || per_stage < 1 || p->microbatches < 1)
        luaL_error(L, "schedule: plan.stages, plan.chunks and plan.microbatches must be positive integers");
    p->nchunks = p->stages * per_stage;
    int *owner = lua_newuserdatauv(L, (size_t)p->nchunks * sizeof *owner, 0);
    lua_rawseti(L, keep, ++nkeep);
    if (lua_getfield(L, idx, "owner") != LUA_TTABLE) luaL_error(L, "schedule: plan.owner (the stage of each chunk) is missing");
    for (int c = 1; c <= p->nchunks; c++) {
        lua_geti(L, -1, c);
        if (!lua_isinteger(L, -1)) luaL_error(L, "schedule: plan.owner[%d] is not a stage number", c);
        owner[c - 1] = tgl_checkint(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    int *nact = lua_newuserdatauv(L, (size_t)p->stages * sizeof *nact, 0);
    lua_rawseti(L, keep, ++nkeep);
    const struct tg_sched_action **acts = lua_newuserdatauv(L, (size_t)p->stages * sizeof *acts, 0);
    lua_rawseti(L, keep, ++nkeep);
    for (int s = 1; s <= p->stages; s++) {
        if (lua_geti(L, idx, s) != LUA_TTABLE) luaL_error(L, "schedule: plan[%d] (stage %d's actions) is not a table", s, s);
        int n = tgl_len(L, -1);
        struct tg_sched_action *a = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *a, 0);
        lua_rawseti(L, keep, ++nkeep);
        for (int i = 1; i <= n; i++) {
            if (lua_geti(L, -1, i) != LUA_TTABLE) luaL_error(L, "schedule: stage %d action %d is not a table", s, i);
            lua_getfield(L, -1, "op");
            const char *op = lua_tostring(L, -1);
            if (!op || tg_sched_op_parse(op, &a[i - 1].op) != 0)
                luaL_error(L, "schedule: stage %d action %d: unknown op %s", s, i, op ? op : "(missing)");
            lua_pop(L, 1);
            const char *keys[3] = {"chunk", "mb", "peer"};
            int *dst[3] = {&a[i - 1].chunk, &a[i - 1].mb, &a[i - 1].peer};
            for (int k = 0; k < 3; k++) {
                lua_getfield(L, -1, keys[k]);
                if (lua_isinteger(L, -1)) *dst[k] = tgl_checkint(L, -1);
                else if (k < 2 || a[i - 1].op >= TG_SCHED_SEND_FWD)
                    luaL_error(L, "schedule: stage %d action %d (%s): %s is not an integer", s, i, op, keys[k]);
                else *dst[k] = 0;
                lua_pop(L, 1);
            }
            a[i - 1].w = tgl_field_bool(L, lua_gettop(L), "w");
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        acts[s - 1] = a;
        nact[s - 1] = n;
    }
    p->owner = owner;
    p->actions = acts;
    p->nactions = nact;
}

/* tg.sched.order(plan) -> list of {op, chunk, mb}: the compute actions in executor order (fused B then W). */
static int l_order(lua_State *L)
{
    tg_sched_plan p;
    plan_read(L, 1, &p);
    struct tg_graph_action *o;
    int n;
    tgl_check(L, tg_sched_order(&p, &o, &n));
    lua_createtable(L, n, 0); /* +1; on a memory error here o leaks (out of memory already) */
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 0, 3);
        char op[2] = {o[i].op, 0};
        lua_pushstring(L, op);
        lua_setfield(L, -2, "op");
        lua_pushinteger(L, o[i].chunk);
        lua_setfield(L, -2, "chunk");
        lua_pushinteger(L, o[i].mb);
        lua_setfield(L, -2, "mb");
        lua_rawseti(L, -2, i + 1);
    }
    free(o);
    return 1;
}

/* ------------------------------------------------------------------ running */
struct io {
    lua_State *L;
    int input, loss_grad; /* stack indices of the functions (0: none) */
};

/* Takes the tensor at the top of the stack (pops it) as a new handle in *out (NULL for nil). */
static tg_status result_tensor(lua_State *L, const char *what, int mb, tg_tensor **out)
{
    *out = NULL;
    tg_status st = TG_OK;
    struct tgl_tensor *u = luaL_testudata(L, -1, TGL_TENSOR);
    if (u && u->t) st = tg_tensor_ref(u->t, out);
    else if (u) st = tg_error(TG_EINVAL, "%s for microbatch %d returned a closed tensor", what, mb);
    else if (!lua_isnil(L, -1))
        st = tg_error(TG_EINVAL, "%s for microbatch %d returned a %s (expected a tensor)", what, mb, luaL_typename(L, -1));
    lua_pop(L, 1);
    return st;
}

static tg_status lua_failed(lua_State *L, const char *what)
{
    tg_status st = tg_error(TG_ELUA, "%s: %s", what, lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object is not a string)");
    lua_pop(L, 1);
    return st;
}

static tg_status io_input(void *ud, int mb, tg_tensor **x)
{
    struct io *io = ud;
    lua_State *L = io->L;
    *x = NULL;
    if (!lua_checkstack(L, 4)) return tg_error(TG_ENOMEM, "Lua stack overflow");
    lua_pushvalue(L, io->input);
    lua_pushinteger(L, mb);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) return lua_failed(L, "inputs function");
    return result_tensor(L, "the inputs function", mb, x);
}

/* Protected: (fn, mb, light y) -> fn(mb, y as a tensor). */
static int call_loss_grad(lua_State *L)
{
    const tg_tensor *y = lua_touserdata(L, 3);
    tg_tensor **slot = tgl_tensor_push(L); /* +1 */
    tgl_check(L, tg_tensor_ref(y, slot));
    lua_replace(L, 3);
    lua_call(L, 2, 1);
    return 1;
}

static tg_status io_loss_grad(void *ud, int mb, const tg_tensor *y, tg_tensor **dy)
{
    struct io *io = ud;
    lua_State *L = io->L;
    *dy = NULL;
    if (!lua_checkstack(L, 5)) return tg_error(TG_ENOMEM, "Lua stack overflow");
    lua_pushcfunction(L, call_loss_grad);
    lua_pushvalue(L, io->loss_grad);
    lua_pushinteger(L, mb);
    lua_pushlightuserdata(L, (void *)y);
    if (lua_pcall(L, 3, 1, 0) != LUA_OK) return lua_failed(L, "loss_grad function");
    return result_tensor(L, "the loss_grad function", mb, dy);
}

/* With a pipeline communicator this process runs exactly stage rank+1. */
static void pipe_check_local(lua_State *L, const tg_sched_plan *p, tg_comm *comm, const int *local)
{
    int mine = tg_comm_rank(comm) + 1;
    for (int s = 1; s <= p->stages; s++)
        if (local[s - 1] != (s == mine))
            luaL_error(L, "schedule.run: with opts.comm this process runs stage %d (its rank %d + 1) and only it; "
                          "opts.stages says otherwise", mine, mine - 1);
}

/* tg.sched.run(plan, {chunks = {modules}, graphed = {callables or false}, input = fn(mb) -> x,
 * loss_grad = fn(mb, y) -> dy or nil, sync = bool, stages = {local stages}, pid = n (trace process; default the rank),
 * comm = pipeline Comm (stage s on its rank s-1; this process runs stage rank+1; transfers over it)}) */
static int l_run(lua_State *L)
{
    tg_sched_plan p;
    luaL_checktype(L, 2, LUA_TTABLE);
    tgl_check_keys(L, 2, "sched.run", "chunks, graphed, input, loss_grad, sync, stages, pid, comm");
    plan_read(L, 1, &p); /* +1 */
    int C = p.nchunks;
    tg_sched_opts o = {0};
    tg_module **chunks = lua_newuserdatauv(L, (size_t)C * sizeof *chunks, 0); /* +1 */
    tg_graphed **graphed = lua_newuserdatauv(L, (size_t)C * sizeof *graphed, 0); /* +1 */
    int *gchunk = lua_newuserdatauv(L, (size_t)C * sizeof *gchunk, 0); /* +1 */
    int *local = lua_newuserdatauv(L, (size_t)p.stages * sizeof *local, 0); /* +1 */
    memset(chunks, 0, (size_t)C * sizeof *chunks);
    memset(graphed, 0, (size_t)C * sizeof *graphed);
    memset(gchunk, 0, (size_t)C * sizeof *gchunk);
    lua_newtable(L); /* +1: the checked chunk values (a Lua-table module's wrapper) stay alive here */
    int keep = lua_gettop(L);
    int any_graphed = 0;
    if (lua_getfield(L, 2, "chunks") == LUA_TTABLE) { /* +1 */
        for (int c = 1; c <= C; c++) {
            if (lua_geti(L, -1, c) != LUA_TNIL) chunks[c - 1] = tgl_module_check(L, -1);
            lua_rawseti(L, keep, c);
        }
    } else if (!lua_isnil(L, -1)) {
        return luaL_error(L, "schedule.run: opts.chunks must be a list of modules (one per chunk)");
    }
    if (lua_getfield(L, 2, "graphed") == LUA_TTABLE) { /* +1 */
        for (int c = 1; c <= C; c++) {
            if (lua_geti(L, -1, c) != LUA_TNIL && lua_toboolean(L, -1)) {
                graphed[c - 1] = tgl_graphed_check(L, -1, &gchunk[c - 1]);
                any_graphed = 1;
                lua_rawseti(L, keep, C + c); /* kept (and marked in use while the plan runs) */
            } else {
                lua_pop(L, 1);
            }
        }
    } else if (!lua_isnil(L, -1)) {
        return luaL_error(L, "schedule.run: opts.graphed must be a list of graphed callables (one per chunk)");
    }
    tg_comm *comm = NULL;
    if (lua_getfield(L, 2, "comm") != LUA_TNIL) comm = tgl_comm_check(L, lua_gettop(L)); /* +1, kept */
    if (lua_getfield(L, 2, "stages") == LUA_TTABLE) { /* +1 */
        memset(local, 0, (size_t)p.stages * sizeof *local);
        for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n; i++) {
            lua_geti(L, -1, i);
            lua_Integer s = lua_tointeger(L, -1);
            if (s < 1 || s > p.stages) return luaL_error(L, "schedule.run: opts.stages[%d] is not a stage in 1..%d", (int)i, p.stages);
            local[s - 1] = 1;
            lua_pop(L, 1);
        }
    } else {
        for (int s = 0; s < p.stages; s++) local[s] = !comm || s == tg_comm_rank(comm);
    }
    if (comm) pipe_check_local(L, &p, comm, local);
    struct io io = {.L = L};
    if (lua_getfield(L, 2, "input") == LUA_TFUNCTION) io.input = lua_gettop(L); /* +1, kept */
    else if (!lua_isnil(L, -1)) return luaL_error(L, "schedule.run: opts.input must be a function(mb) -> tensor");
    if (lua_getfield(L, 2, "loss_grad") == LUA_TFUNCTION) io.loss_grad = lua_gettop(L); /* +1, kept */
    else if (!lua_isnil(L, -1)) return luaL_error(L, "schedule.run: opts.loss_grad must be a function(mb, y) -> dy");
    o.chunks = chunks;
    o.graphed = any_graphed ? graphed : NULL;
    o.graphed_chunk = gchunk;
    o.local = local;
    o.input = io.input ? io_input : NULL;
    o.loss_grad = io.loss_grad ? io_loss_grad : NULL;
    o.ud = &io;
    o.sync = tgl_field_bool(L, 2, "sync");
    o.trace_pid = opt_int(L, 2, "pid", -1);
    struct tg_sched_transport tr = {0};
    if (comm) { /* last, so that no Lua error can leak it */
        tgl_check(L, tg_sched_transport_comm(comm, &p, &tr));
        o.transport = &tr;
    }
    /* the graphed sets cannot be freed by the callbacks or hooks while the plan runs */
    for (int c = 1; c <= C; c++)
        if (graphed[c - 1]) {
            lua_rawgeti(L, keep, C + c);
            tgl_graphed_use(L, -1, 1);
            lua_pop(L, 1);
        }
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_sched_run(&p, &o);
    tgl_nn_leave(prev);
    for (int c = 1; c <= C; c++)
        if (graphed[c - 1]) {
            lua_rawgeti(L, keep, C + c);
            tgl_graphed_use(L, -1, -1);
            lua_pop(L, 1);
        }
    if (tr.free) tr.free(tr.ud);
    tgl_check(L, st);
    return 0;
}

static const luaL_Reg sched_funcs[] = {
    {"run", l_run},
    {"order", l_order},
    {NULL, NULL},
};

void tgl_open_sched(lua_State *L)
{
    luaL_newlib(L, sched_funcs); /* +1 */
    lua_setfield(L, -2, "sched");
}
