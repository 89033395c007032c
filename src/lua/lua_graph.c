/* lua_graph.c — tegraph.graph: make_graphed callables, capturing(), the test-only hook-skip switch. */
#include "lua/lua_graph.h"
#include "lua/lua_nn.h"
#include "graph/graphed.h"

#include <stdlib.h>
#include <string.h>

#define TGL_GRAPHED_SET "tegraph.GraphedSet"
#define TGL_GRAPHED "tegraph.Graphed"
#define TGL_GRAPHED_LIST "tegraph.GraphedList"

struct tgl_graphed_set {
    tg_graphed *g;
    int busy; /* schedule runs using the set (tg.sched.run): it cannot be freed meanwhile */
};

/* One chunk's callable; user value 1 is its set (keeps it alive). */
struct tgl_graphed {
    int chunk;
};

/* Refused while a replay of the set or a schedule run using it is under way: hooks (and a schedule's callbacks)
 * run inside them, and they go on using the set's graphs and buffers after those return. */
static void set_free(lua_State *L, int idx)
{
    struct tgl_graphed_set *u = luaL_checkudata(L, idx, TGL_GRAPHED_SET);
    char what[64];
    if (u->busy)
        luaL_error(L, "graphed set: cannot free it during a schedule run (tg.sched.run) using it (from a callback or "
                      "hook of that run); free it after the run returns");
    if (tg_graphed_running(u->g, what, sizeof what))
        luaL_error(L, "graphed set: cannot free it during its %s (from a hook that replay runs); free it after the "
                      "call returns", what);
    tg_graphed_free(u->g);
    u->g = NULL;
}

static int set_gc(lua_State *L)
{
    struct tgl_graphed_set *u = luaL_checkudata(L, 1, TGL_GRAPHED_SET);
    if (u->busy || tg_graphed_running(u->g, NULL, 0)) return 0; /* the state closes inside a call (os.exit): left */
    set_free(L, 1);
    return 0;
}

static struct tgl_graphed_set *set_check(lua_State *L, int idx, int *chunk)
{
    struct tgl_graphed *c = luaL_checkudata(L, idx, TGL_GRAPHED);
    lua_getiuservalue(L, idx, 1); /* +1 */
    struct tgl_graphed_set *u = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!u || !u->g) luaL_argerror(L, idx, "graphed callable used after its set was freed");
    *chunk = c->chunk;
    return u;
}

static tg_graphed *graphed_check(lua_State *L, int idx, int *chunk) { return set_check(L, idx, chunk)->g; }

void tgl_graphed_use(lua_State *L, int idx, int delta)
{
    int chunk;
    set_check(L, idx, &chunk)->busy += delta;
}

/* The trailing options of a replay call: {stream = s, wait = event}. */
static void replay_opts(lua_State *L, tg_graphed *g, int idx, const char *what)
{
    tg_stream *s;
    tg_event *wait;
    tgl_replay_opts(L, idx, what, &s, &wait);
    if (s || wait) tgl_check(L, tg_graphed_replay_on(g, s, wait));
}

/* g:forward(x [, mb [, opts]]) -> y; g:backward(dy [, mb [, opts]]) -> dx;
 * chunks made with a pair sample {x, res}: g:forward({x, res}, mb) -> y =
 * res + f(x), g:backward(dy, mb) -> dx, dres (dres: dy, the gradient of res);
 * g:backward_dw([mb [, opts]]): the modules' protocol, each the next action of
 * the captured order (mb omitted: that action's microbatch). opts: {stream =
 * s, wait = event}: replay on s after it waits for the event. */
static int g_forward(lua_State *L)
{
    int chunk;
    tg_graphed *g = graphed_check(L, 1, &chunk);
    const tg_tensor *in[2] = {NULL, NULL}; /* x, res */
    if (tg_graphed_tuple_inputs(g, chunk) && lua_istable(L, 2) && !tgl_tensor_test(L, 2)) { /* {x1, ..., xN} */
        const tg_tensor *xs[TG_MAX_IO];
        tg_tensor *ys[TG_MAX_IO] = {0};
        int nx = tgl_tensor_list(L, 2, xs, "forward({x1, ..., xN}, mb)"), ny = 0;
        int mb = tgl_mb_arg(L, 3);
        replay_opts(L, g, 4, "graphed forward");
        tgl_hold(L, xs, nx);
        lua_State *prev = tgl_nn_enter(L);
        tg_status st = tg_graphed_forward_n(g, chunk, mb, xs, nx, ys, &ny);
        tgl_nn_leave(prev);
        tgl_unhold(xs, nx);
        tgl_check(L, st);
        tgl_push_tensors(L, ys, ny, 1);
        return 1;
    }
    if (lua_istable(L, 2) && !tgl_tensor_test(L, 2)) { /* {x, res}: a chunk with two inputs */
        if (luaL_len(L, 2) != 2) return luaL_error(L, "graphed forward: the inputs must be a tensor or a pair {x, res}");
        lua_geti(L, 2, 1);
        lua_geti(L, 2, 2);
        in[0] = tgl_protocol_tensor(L, -2, "forward({x, res}, mb)");
        in[1] = tgl_protocol_tensor(L, -1, "forward({x, res}, mb)");
        lua_pop(L, 2); /* the table keeps them */
    } else {
        in[0] = tgl_protocol_tensor(L, 2, "forward(x, mb)");
    }
    int mb = tgl_mb_arg(L, 3);
    replay_opts(L, g, 4, "graphed forward");
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_hold(L, in, 2);
    lua_State *prev = tgl_nn_enter(L); /* Lua-table modules never run at replay, but keep one rule */
    tg_status st = tg_graphed_forward_res(g, chunk, mb, in[0], in[1], slot);
    tgl_nn_leave(prev);
    tgl_unhold(in, 2);
    tgl_check(L, st);
    return 1;
}

static int g_backward(lua_State *L)
{
    int chunk;
    tg_graphed *g = graphed_check(L, 1, &chunk);
    if (tg_graphed_tuple_inputs(g, chunk)) { /* dy or {dy1, ..., dyM} -> {dx1, ..., dxN} */
        const tg_tensor *dys[TG_MAX_IO] = {0};
        tg_tensor *dxs[TG_MAX_IO] = {0};
        int ndy = 1;
        if (lua_istable(L, 2) && !tgl_tensor_test(L, 2)) ndy = tgl_tensor_list(L, 2, dys, "backward({dy1, ..., dyM}, mb)");
        else dys[0] = lua_isnoneornil(L, 2) ? NULL : tgl_protocol_tensor(L, 2, "backward(dy, mb)");
        int mb = tgl_mb_arg(L, 3);
        replay_opts(L, g, 4, "graphed backward");
        tgl_hold(L, dys, ndy);
        lua_State *prev = tgl_nn_enter(L);
        tg_status st = tg_graphed_backward_n(g, chunk, mb, dys, ndy, dxs, TG_MAX_IO);
        tgl_nn_leave(prev);
        tgl_unhold(dys, ndy);
        tgl_check(L, st);
        tgl_push_tensors(L, dxs, tg_graphed_tuple_inputs(g, chunk), 0);
        return 1;
    }
    const tg_tensor *dy[1] = {lua_isnoneornil(L, 2) ? NULL : tgl_protocol_tensor(L, 2, "backward(dy, mb)")};
    int mb = tgl_mb_arg(L, 3);
    replay_opts(L, g, 4, "graphed backward");
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_hold(L, dy, 1);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_graphed_backward(g, chunk, mb, dy[0], slot);
    tgl_nn_leave(prev);
    /* y = res + f(x): the gradient of res is dy, handed out as the held handle */
    const int pair = st == TG_OK && tg_graphed_inputs(g, chunk) >= 2;
    tg_tensor *dres = pair ? (tg_tensor *)dy[0] : NULL;
    if (!pair) tgl_unhold(dy, 1);
    tgl_check(L, st);
    if (!*slot) lua_pushnil(L);
    if (!pair) return 1;
    if (!dres) return luaL_error(L, "graphed backward chunk %d: a chunk with two inputs needs dy", chunk);
    tg_tensor **ds = tgl_tensor_push(L);
    *ds = dres;
    return 2;
}

static int g_backward_dw(lua_State *L)
{
    int chunk;
    tg_graphed *g = graphed_check(L, 1, &chunk);
    int mb = tgl_mb_arg(L, 2);
    replay_opts(L, g, 3, "graphed backward_dw");
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_graphed_backward_dw(g, chunk, mb);
    tgl_nn_leave(prev);
    tgl_check(L, st);
    return 0;
}

static int g_reset(lua_State *L)
{
    int chunk;
    tg_graphed_reset(graphed_check(L, 1, &chunk));
    return 0;
}

/* peak, naive = c:memory(): graph pool bytes at most / without reuse. */
static int g_memory(lua_State *L)
{
    int chunk;
    size_t peak, naive;
    tg_graphed_memory(graphed_check(L, 1, &chunk), &peak, &naive);
    lua_pushinteger(L, (lua_Integer)peak);
    lua_pushinteger(L, (lua_Integer)naive);
    return 2;
}

/* c:shared() -> whether every microbatch replays microbatch 1's graphs and buffers; c:graphs() -> graphs held. */
static int g_shared(lua_State *L)
{
    int chunk;
    lua_pushboolean(L, tg_graphed_shared(graphed_check(L, 1, &chunk)));
    return 1;
}

/* c:reused() -> whether static buffer memory is reused across microbatches whose lifetimes do not overlap. */
static int g_reused(lua_State *L)
{
    int chunk;
    lua_pushboolean(L, tg_graphed_reused(graphed_check(L, 1, &chunk)));
    return 1;
}

/* c:set_id() -> an opaque value, the same for every callable of one graphed set (make_graphed call) */
static int g_set_id(lua_State *L)
{
    int chunk;
    lua_pushlightuserdata(L, graphed_check(L, 1, &chunk));
    return 1;
}

static int g_graphs(lua_State *L)
{
    int chunk;
    lua_pushinteger(L, tg_graphed_ngraphs(graphed_check(L, 1, &chunk)));
    return 1;
}

static int g_has_w(lua_State *L)
{
    int chunk;
    tg_graphed *g = graphed_check(L, 1, &chunk);
    lua_pushboolean(L, tg_graphed_has_w(g, chunk));
    return 1;
}

/* g:free(): releases the whole set now (every chunk's graphs, static buffers
 * and its reference on the pool); its callables fail afterwards. Refused
 * while a call of the set runs (from its hooks). */
static int g_free(lua_State *L)
{
    luaL_checkudata(L, 1, TGL_GRAPHED);
    lua_getiuservalue(L, 1, 1); /* +1: the set */
    set_free(L, -1);
    lua_pushnil(L);
    lua_setiuservalue(L, -2, 1); /* the set no longer keeps its modules */
    return 0;
}

/* list:free() of the list make_graphed returns for several chunks. */
static int list_free(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    for (lua_Integer i = 1, n = luaL_len(L, 1); i <= n; i++) {
        lua_settop(L, 1);
        lua_pushcfunction(L, g_free);
        lua_geti(L, 1, i);
        lua_call(L, 1, 0);
    }
    return 0;
}

static int g_tostring(lua_State *L)
{
    struct tgl_graphed *c = luaL_checkudata(L, 1, TGL_GRAPHED);
    lua_pushfstring(L, "tegraph.Graphed (chunk %d)", c->chunk);
    return 1;
}

static const luaL_Reg graphed_methods[] = {
    {"forward", g_forward}, {"backward", g_backward}, {"backward_dw", g_backward_dw},
    {"reset", g_reset},     {"memory", g_memory}, {"shared", g_shared}, {"reused", g_reused}, {"graphs", g_graphs}, {"set_id", g_set_id},     {"has_w", g_has_w},
    {"free", g_free},       {NULL, NULL},
};

/* Reads opts.order: a list of {op = "F"|"B"|"W", chunk = c, mb = m [, w = true]}, as schedule.to_order gives
 * it: a B with w = true is its B then its W (a fused weight gradient), and the chunk numbers may be a pipeline
 * stage's own chunks of the plan (say 2 and 4 of 4 chunks): when they are not all in 1..nchunks and there are
 * nchunks distinct ones, the chunks given are numbered in the order of those numbers. */
static struct tg_graph_action *read_order(lua_State *L, int idx, int nchunks, int *n)
{
    const int len = tgl_len(L, idx);
    /* +1, freed by the GC; room for every entry to be a B with its W */
    struct tg_graph_action *a = lua_newuserdatauv(L, (size_t)(len ? 2 * len : 1) * sizeof *a, 0);
    int k = 0, outside = 0;
    for (int i = 1; i <= len; i++) {
        lua_geti(L, idx, i); /* +1 */
        if (!lua_istable(L, -1)) luaL_error(L, "make_graphed: order[%d] is not a table {op=, chunk=, mb=}", i);
        char what[48];
        snprintf(what, sizeof what, "make_graphed: order[%d]", i);
        tgl_check_keys(L, -1, what, "op, chunk, mb, w"); /* a misspelt chunk would run chunk 1 */
        lua_getfield(L, -1, "op");
        const char *op = lua_tostring(L, -1);
        if (!op || strlen(op) != 1 || !strchr("FBW", op[0]))
            luaL_error(L, "make_graphed: order[%d].op is %s (expected \"F\", \"B\" or \"W\")", i, op ? op : "missing");
        a[k].op = op[0];
        lua_getfield(L, -2, "chunk");
        if (!lua_isnil(L, -1) && !lua_isinteger(L, -1)) luaL_error(L, "make_graphed: order[%d].chunk is not an integer", i);
        a[k].chunk = lua_isnil(L, -1) ? 1 : tgl_checkint(L, -1);
        if (a[k].chunk < 1) /* no chunk of any plan: named, not renumbered */
            luaL_error(L, "make_graphed: order[%d].chunk is %d (chunks are numbered from 1)", i, a[k].chunk);
        outside |= a[k].chunk > nchunks;
        lua_getfield(L, -3, "mb");
        if (!lua_isinteger(L, -1)) luaL_error(L, "make_graphed: order[%d].mb is not an integer", i);
        a[k].mb = tgl_checkint(L, -1);
        if (lua_getfield(L, -4, "w") != LUA_TNIL && !lua_isboolean(L, -1))
            luaL_error(L, "make_graphed: order[%d].w must be a boolean", i);
        if (lua_toboolean(L, -1)) {
            if (a[k].op != 'B') luaL_error(L, "make_graphed: order[%d]: w = true belongs to a B", i);
            a[k + 1] = a[k];
            a[k + 1].op = 'W';
            k++;
        }
        k++;
        lua_pop(L, 5);
    }
    const int total = k;
    *n = total;
    if (outside) { /* a stage's chunks of a plan: number them 1..nchunks in the order of their plan numbers */
        int *ids = malloc((size_t)nchunks * sizeof *ids), nid = 0, ok = ids != NULL;
        for (int i = 0; ok && i < total; i++) {
            int j = 0;
            while (j < nid && ids[j] != a[i].chunk) j++;
            if (j == nid) {
                if (nid == nchunks) ok = 0;
                else ids[nid++] = a[i].chunk;
            }
        }
        ok = ok && nid == nchunks;
        for (int i = 0; ok && i < total; i++) {
            int rank = 0;
            for (int j = 0; j < nid; j++) rank += ids[j] < a[i].chunk;
            a[i].chunk = rank + 1;
        }
        free(ids);
        /* otherwise the numbers stay as given and the set's order check names the first out of range */
    }
    return a;
}

/* make_graphed's opts (at 2).name: an integer from lo to 2^20, def where absent. */
static int opt_count(lua_State *L, const char *name, int def, int lo)
{
    int isint = 0;
    lua_Integer v = def;
    if (lua_getfield(L, 2, name) != LUA_TNIL) {
        v = lua_tointegerx(L, -1, &isint);
        if (!isint || v < lo || v > 1 << 20)
            return luaL_error(L, "make_graphed: opts.%s = %s is out of range (an integer from %d to 1048576)", name,
                              tgl_value_str(L, -1), lo);
    }
    lua_pop(L, 1);
    return (int)v;
}

/* tg.graph.make_graphed(chunks, opts) -> callable, or a list of callables when chunks is a list.
 * opts: sample (a tensor, or one per chunk; a chunk's entry may be a pair {x, res}: two inputs),
 * microbatches (1), order, warmup, pool, share (nil: microbatch 1's graphs for every microbatch when
 * the order is sequential; true: also across overlapping microbatches whose lifetimes allow; false:
 * never), reuse (static buffers across microbatches; default true), chain, in_place: the fields of
 * tg_graphed_opts (graph/graphed.h), passed through (warmup absent: the engine's default). */
static int l_make_graphed(lua_State *L)
{
    /* one chunk: a Module, or a Lua-table module (a table with a forward function) */
    int single = !lua_istable(L, 1);
    if (!single) {
        lua_getfield(L, 1, "forward"); /* +1 */
        single = lua_isfunction(L, -1);
        lua_pop(L, 1);
    }
    if (single && !lua_istable(L, 1) && !luaL_testudata(L, 1, TGL_MODULE))
        return luaL_error(L, "make_graphed: the first argument must be a module or a list of modules (got a %s)",
                          luaL_typename(L, 1));
    if (!lua_istable(L, 2))
        return luaL_error(L, "make_graphed: the second argument must be the options table {sample = ..., ...} (got a %s)",
                          luaL_typename(L, 2));
    tgl_check_keys(L, 2, "make_graphed", "sample, microbatches, order, warmup, pool, share, reuse, chain, in_place, tuple");
    int n = single ? 1 : tgl_len(L, 1);
    if (n < 1) return luaL_argerror(L, 1, "no chunks");
    tg_module **chunks = lua_newuserdatauv(L, (size_t)n * sizeof *chunks, 0); /* +1 */
    const tg_tensor **samples = lua_newuserdatauv(L, (size_t)n * sizeof *samples, 0); /* +1 */
    const tg_tensor **samples2 = lua_newuserdatauv(L, (size_t)n * sizeof *samples2, 0); /* +1 */
    int two = 0;
    const tg_tensor **tbuf = lua_newuserdatauv(L, (size_t)n * TG_MAX_IO * sizeof *tbuf, 0); /* +1 */
    const tg_tensor *const **tuples = lua_newuserdatauv(L, (size_t)n * sizeof *tuples, 0); /* +1 */
    int *ntuple = lua_newuserdatauv(L, (size_t)n * sizeof *ntuple, 0); /* +1 */
    for (int i = 0; i < n; i++) tuples[i] = NULL, ntuple[i] = 0;
    lua_getfield(L, 2, "tuple");
    luaL_argexpected(L, lua_isnil(L, -1) || lua_isboolean(L, -1), 2, "opts.tuple a boolean");
    int tuple = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_createtable(L, n, 0); /* +1: the chunks' Module values (a Lua-table module's wrapper too), kept by the set */
    int keep = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        if (single) lua_pushvalue(L, 1);
        else lua_geti(L, 1, i);
        if (!lua_istable(L, -1) && luaL_testudata(L, -1, TGL_MODULE) == NULL)
            return luaL_error(L, "make_graphed: chunk %d is a %s, expected a tegraph.Module or a Lua module table", i,
                              luaL_typename(L, -1));
        chunks[i - 1] = tgl_module_check(L, -1); /* replaces a Lua table by its wrapper at -1 */
        lua_rawseti(L, keep, i);
    }
    tg_graphed_opts o = {0}; /* warmup 0: the engine's default */
    lua_getfield(L, 2, "sample"); /* +1, kept on the stack while the call runs */
    if (tuple && n == 1 && lua_istable(L, -1) && !tgl_tensor_test(L, -1)) { /* one chunk: {x1, ..., xN} is its list */
        lua_geti(L, -1, 1);
        int list = tgl_tensor_test(L, -1) != NULL;
        lua_pop(L, 1);
        if (list) { /* wrap it: {{x1, ..., xN}} */
            lua_createtable(L, 1, 0);
            lua_insert(L, -2);
            lua_rawseti(L, -2, 1);
        }
    }
    if (tgl_tensor_test(L, -1)) {
        if (n != 1) return luaL_error(L, "make_graphed: %d chunks need a list of %d sample inputs", n, n);
        samples[0] = tgl_tensor_check(L, -1);
    } else if (lua_istable(L, -1)) {
        if (tgl_len(L, -1) != n) return luaL_error(L, "make_graphed: %d sample inputs for %d chunks", tgl_len(L, -1), n);
        for (int i = 1; i <= n; i++) {
            lua_geti(L, -1, i);
            samples2[i - 1] = NULL;
            tuples[i - 1] = NULL;
            ntuple[i - 1] = 0;
            if (tuple && lua_istable(L, -1) && !tgl_tensor_test(L, -1)) { /* {x1, ..., xN}: a chunk with N inputs */
                const tg_tensor **xs = &tbuf[(i - 1) * TG_MAX_IO];
                int nt = tgl_len(L, -1);
                if (nt < 1 || nt > TG_MAX_IO)
                    return luaL_error(L, "make_graphed: sample[%d] is a list of %d tensors (1 to %d)", i, nt, TG_MAX_IO);
                for (int j = 1; j <= nt; j++) {
                    lua_geti(L, -1, j);
                    xs[j - 1] = tgl_tensor_test(L, -1);
                    if (!xs[j - 1]) return luaL_error(L, "make_graphed: sample[%d][%d] is a %s, expected a tensor", i, j, luaL_typename(L, -1));
                    lua_pop(L, 1);
                }
                tuples[i - 1] = xs;
                ntuple[i - 1] = nt;
                samples[i - 1] = xs[0];
            } else if (lua_istable(L, -1) && !tgl_tensor_test(L, -1)) { /* {x, res}: a chunk with two inputs */
                if (luaL_len(L, -1) != 2)
                    return luaL_error(L, "make_graphed: sample[%d] must be a tensor or a pair {x, res} (got a list of %d)", i,
                                      tgl_len(L, -1));
                lua_geti(L, -1, 1);
                lua_geti(L, -2, 2);
                if (!tgl_tensor_test(L, -2) || !tgl_tensor_test(L, -1))
                    return luaL_error(L, "make_graphed: sample[%d] must be a pair of tensors {x, res}", i);
                samples[i - 1] = tgl_tensor_check(L, -2);
                samples2[i - 1] = tgl_tensor_check(L, -1);
                two = 1;
                lua_pop(L, 2);
            } else {
                samples[i - 1] = tgl_tensor_check(L, -1);
            }
            lua_pop(L, 1); /* the list keeps it alive */
        }
    } else {
        return luaL_error(L, "make_graphed: opts.sample must be a tensor or a list of tensors (one per chunk)");
    }
    o.samples = samples;
    o.samples2 = two ? samples2 : NULL;
    if (tuple) o.tuples = tuples, o.ntuple = ntuple;
    o.microbatches = opt_count(L, "microbatches", 1, 1);
    if (lua_getfield(L, 2, "warmup") != LUA_TNIL) { /* (its range is the engine's to check) */
        int isint = 0;
        lua_Integer w = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0; /* not "3" */
        if (!isint || w < INT_MIN || w > INT_MAX)
            return luaL_error(L, "make_graphed: opts.warmup must be an integer (got %s)", tgl_value_str(L, -1));
        if (w == 0) /* the C struct's 0 means the default; given here it would silently be 3 */
            return luaL_error(L, "make_graphed: warmup must be >= 1 (got 0; leave it out for the default, 3)");
        o.warmup = (int)w;
    }
    lua_pop(L, 1);
    lua_getfield(L, 2, "order");
    if (lua_istable(L, -1)) o.order = read_order(L, lua_gettop(L), n, &o.norder);
    else if (!lua_isnil(L, -1)) return luaL_error(L, "make_graphed: opts.order must be a list of {op=, chunk=, mb=}");
    lua_getfield(L, 2, "share");
    if (!lua_isnil(L, -1)) {
        luaL_argexpected(L, lua_isboolean(L, -1), 2, "opts.share a boolean");
        o.no_share = !lua_toboolean(L, -1);
        o.share_overlap = lua_toboolean(L, -1); /* true: also across overlapping microbatches where lifetimes allow */
    }
    lua_getfield(L, 2, "reuse");
    if (!lua_isnil(L, -1)) {
        luaL_argexpected(L, lua_isboolean(L, -1), 2, "opts.reuse a boolean");
        o.no_reuse = !lua_toboolean(L, -1);
    }
    lua_getfield(L, 2, "chain");
    if (!lua_isnil(L, -1)) {
        luaL_argexpected(L, lua_isboolean(L, -1), 2, "opts.chain a boolean");
        o.chain = lua_toboolean(L, -1);
    }
    /* share = true asks for graphs shared across overlapping microbatches, which chained chunks cannot give
     * (their static buffers are handed from chunk to chunk): refused rather than silently not shared */
    if (o.chain && o.share_overlap)
        return luaL_error(L, "make_graphed: share = true cannot be used with chain = true (chained chunks keep a set "
                             "of graphs per microbatch where microbatches overlap); drop one of them");
    lua_getfield(L, 2, "in_place");
    if (!lua_isnil(L, -1)) {
        luaL_argexpected(L, lua_isboolean(L, -1), 2, "opts.in_place a boolean");
        o.in_place = lua_toboolean(L, -1);
    }
    lua_getfield(L, 2, "pool");
    if (!lua_isnil(L, -1)) {
        struct tgl_pool *p = luaL_checkudata(L, -1, TGL_POOL);
        if (!p->p) return luaL_error(L, "make_graphed: opts.pool was closed");
        o.pool = p->p;
    }

    struct tgl_graphed_set *set = lua_newuserdatauv(L, sizeof *set, 1); /* +1 */
    memset(set, 0, sizeof *set);
    luaL_setmetatable(L, TGL_GRAPHED_SET);
    int setidx = lua_gettop(L);
    lua_pushvalue(L, keep); /* the set keeps its chunks' modules alive */
    lua_setiuservalue(L, setidx, 1);
    lua_State *prev = tgl_nn_enter(L);
    tg_status st = tg_graphed_new(chunks, n, &o, &set->g);
    tgl_nn_leave(prev);
    tgl_check(L, st);

    if (!single) { /* +1: the list, whose free() releases the set */
        lua_createtable(L, n, 0);
        luaL_getmetatable(L, TGL_GRAPHED_LIST);
        lua_setmetatable(L, -2);
    }
    for (int i = 1; i <= n; i++) {
        struct tgl_graphed *c = lua_newuserdatauv(L, sizeof *c, 1); /* +1 */
        c->chunk = i;
        luaL_setmetatable(L, TGL_GRAPHED);
        lua_pushvalue(L, setidx);
        lua_setiuservalue(L, -2, 1);
        if (!single) lua_rawseti(L, -2, i);
    }
    return 1;
}

static int l_capturing(lua_State *L)
{
    lua_pushboolean(L, tg_graph_capturing() || tg_device_capturing(tg_default_device()));
    return 1;
}

/* tg.graph.full_capture(microbatches): the engine's full-iteration capture mode for the captures that follow
 * (0: off); tg.graph.capture_step uses it around tg.stream.capture. */
static int l_full_capture(lua_State *L)
{
    lua_Integer m = luaL_checkinteger(L, 1);
    luaL_argcheck(L, m >= 0 && m <= 1 << 20, 1, "microbatches must be >= 0");
    tg_engine_set_full_capture((int)m);
    return 0;
}

static const luaL_Reg graph_funcs[] = {
    {"make_graphed", l_make_graphed},
    {"full_capture", l_full_capture},
    {"capturing", l_capturing},
    {NULL, NULL},
};

/* For other bindings (the schedule executor): a Graphed callable's set and chunk index in it. */
tg_graphed *tgl_graphed_check(lua_State *L, int idx, int *chunk) { return graphed_check(L, idx, chunk); }

void tgl_open_graph(lua_State *L)
{
    luaL_newmetatable(L, TGL_GRAPHED_SET); /* +1 */
    lua_pushcfunction(L, set_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, TGL_GRAPHED); /* +1 */
    luaL_newlib(L, graphed_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, g_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    luaL_newmetatable(L, TGL_GRAPHED_LIST); /* +1 */
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, list_free);
    lua_setfield(L, -2, "free");
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newlib(L, graph_funcs); /* +1 */
    lua_setfield(L, -2, "graph");
}
