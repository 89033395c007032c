/* lua_comm.c — tegraph.comm: communicators, collectives and p2p (blocking or async requests), sub-groups, grad buffers. */
/*
 * tg.comm (the world) and Comm objects share their calls; c:f(...) is tg.comm.f(...) on c:
 *   departed() -> the rank that left the job while this one runs (tegraph run -n on GPUs tells), or nil
 *   init{timeout=} / world() -> Comm      rank() size() local_rank() local_size() backend() device()
 *   seq() -> collectives run on the communicator so far (eager calls and CPU replays of captured ones)
 *   collectives issued while a stream captures are recorded into its graph (tg_comm_all_reduce in dist/comm.h)
 *   all_reduce(t, {op="sum"|"avg"|"max"|"min", async=false, name=})  -> t, or a request (each op: name = its label in traces)
 *   reduce_scatter(out, in, {op=, async=})  all_gather(out, in, {async=})  broadcast(t, root | {root=, async=})
 *   send(t, peer, {async=, name=})  recv(t, peer, {async=, name=})  barrier({name=})  group(fn)
 *   split(color [, key]) -> Comm          split{dp=, pp=} -> {dp=Comm, pp=Comm, dp_rank=, dp_size=, pp_rank=, pp_size=}
 *   request:wait() -> the op's tensor     request:test() -> done?
 *   grad_buffer(params, {bucket_bytes=, bucket_numel=, align=, pad_to=}) -> GradBuffer
 *     .data .numel .nbuckets .nparams  :bucket(i) :buckets() :params() :index(p) :bucket_of(p) :offset(p) :zero()
 */
#include "lua/lua_comm.h"
#include "lua/lua_nn.h"
#include "dist/comm.h"
#include "nn/nn.h"
#include "core/checked.h"

#include <string.h>

#define TGL_COMM "tegraph.Comm"
#define TGL_REQ "tegraph.CommRequest"
#define TGL_GRADBUF "tegraph.GradBuffer"

struct tgl_comm {
    tg_comm *c; /* the world is never freed from Lua */
};
struct tgl_req {
    tg_comm_req *r; /* user value 1: the op's result tensor (wait returns it) */
};
struct tgl_gradbuf {
    tg_gradbuf *g;
};

/* ------------------------------------------------------------------ communicators */
static tg_comm *world_check(lua_State *L)
{
    tg_comm *c;
    tgl_check(L, tg_comm_world(&c));
    return c;
}

static void comm_push(lua_State *L, tg_comm *c)
{
    struct tgl_comm *u = lua_newuserdatauv(L, sizeof *u, 0); /* +1 */
    u->c = c;
    luaL_setmetatable(L, TGL_COMM);
}

static tg_comm *comm_check(lua_State *L, int idx)
{
    struct tgl_comm *u = luaL_checkudata(L, idx, TGL_COMM);
    if (u->c == NULL) luaL_argerror(L, idx, "communicator used after close");
    return u->c;
}

tg_comm *tgl_comm_check(lua_State *L, int idx) { return comm_check(L, idx); }

/* The communicator of a call: a Comm first (method call), else the world.
 * *arg is the first argument after it. */
static tg_comm *comm_arg(lua_State *L, int *arg)
{
    if (luaL_testudata(L, 1, TGL_COMM)) {
        *arg = 2;
        return comm_check(L, 1);
    }
    *arg = 1;
    return world_check(L);
}

static int c_gc(lua_State *L)
{
    struct tgl_comm *u = luaL_checkudata(L, 1, TGL_COMM);
    tg_comm_free(u->c); /* no-op on the world */
    u->c = NULL;
    return 0;
}

static int c_eq(lua_State *L)
{
    struct tgl_comm *a = luaL_testudata(L, 1, TGL_COMM), *b = luaL_testudata(L, 2, TGL_COMM);
    lua_pushboolean(L, a && b && a->c == b->c);
    return 1;
}

static int c_tostring(lua_State *L)
{
    struct tgl_comm *u = luaL_checkudata(L, 1, TGL_COMM);
    if (!u->c) lua_pushstring(L, "tegraph.Comm (closed)");
    else
        lua_pushfstring(L, "tegraph.Comm rank %d of %d (%s)", tg_comm_rank(u->c), tg_comm_size(u->c),
                        tg_comm_backend(u->c));
    return 1;
}

static int l_rank(lua_State *L)
{
    int a;
    lua_pushinteger(L, tg_comm_rank(comm_arg(L, &a)));
    return 1;
}

/* c:seq() -> collectives run on c so far (tg_comm_seq) */
static int l_seq(lua_State *L)
{
    int a;
    lua_pushinteger(L, (lua_Integer)tg_comm_seq(comm_arg(L, &a)));
    return 1;
}

static int l_size(lua_State *L)
{
    int a;
    lua_pushinteger(L, tg_comm_size(comm_arg(L, &a)));
    return 1;
}

static int l_local_rank(lua_State *L)
{
    int a;
    lua_pushinteger(L, tg_comm_local_rank(comm_arg(L, &a)));
    return 1;
}

static int l_local_size(lua_State *L)
{
    int a;
    lua_pushinteger(L, tg_comm_local_size(comm_arg(L, &a)));
    return 1;
}

static int l_backend(lua_State *L)
{
    int a;
    lua_pushstring(L, tg_comm_backend(comm_arg(L, &a)));
    return 1;
}

/* The device NCCL runs on ("cuda:N"), or nil. */
static int l_device(lua_State *L)
{
    int a;
    tg_device d = tg_comm_cuda_device(comm_arg(L, &a));
    if (d.type == TG_CPU) lua_pushnil(L);
    else tgl_device_push(L, d);
    return 1;
}

/* tg.comm.init([{timeout=seconds}]) -> the world communicator (collective). */
static int l_init(lua_State *L)
{
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        tgl_check_keys(L, 1, "comm.init", "timeout");
        if (lua_getfield(L, 1, "timeout") != LUA_TNIL) {
            if (!lua_isnumber(L, -1))
                return luaL_error(L, "comm.init: option 'timeout' must be a number of seconds (got a %s)", luaL_typename(L, -1));
            double s = (double)lua_tonumber(L, -1);
            luaL_argcheck(L, s > 0, 1, "timeout must be > 0 seconds");
            tg_comm_set_timeout(s);
        }
        lua_pop(L, 1);
    }
    comm_push(L, world_check(L));
    return 1;
}

static int l_initialized(lua_State *L)
{
    lua_pushboolean(L, tg_comm_world_ready());
    return 1;
}

/* tg.comm.timeout([seconds]) -> the timeout of blocking waits (sets it when given). */
static int l_timeout(lua_State *L)
{
    if (!lua_isnoneornil(L, 1)) {
        /* named here: called through pcall or a local, Lua's "bad argument" says '?' for the function */
        if (lua_type(L, 1) != LUA_TNUMBER || !(lua_tonumber(L, 1) > 0))
            luaL_error(L, "comm.timeout: seconds must be a number > 0 (got %s %s)", luaL_typename(L, 1),
                       tgl_value_str(L, 1));
        tg_comm_set_timeout((double)lua_tonumber(L, 1));
    }
    lua_pushnumber(L, (lua_Number)tg_comm_timeout());
    return 1;
}

/* ------------------------------------------------------------------ operations */
struct op_opts {
    tg_comm_op op;
    int async;
    int root;
};

/* The options each call takes (a key outside them is refused: a misspelt option would be ignored). */
static const char *known_opts(const char *what)
{
    if (!strcmp(what, "all_reduce") || !strcmp(what, "reduce_scatter")) return "op, async, name";
    if (!strcmp(what, "broadcast")) return "root, async, name";
    if (!strcmp(what, "barrier")) return "name";
    return "async, name"; /* all_gather, send, recv */
}

/* {op="sum"|"avg"|"max"|"min", async=false, root=0, name=} at idx (nil: defaults); what's known options only. */
static void opts_read(lua_State *L, int idx, const char *what, struct op_opts *o)
{
    o->op = TG_COMM_SUM;
    o->async = 0;
    o->root = 0;
    tg_comm_label_next(NULL);
    if (lua_isnoneornil(L, idx)) return;
    if (!lua_istable(L, idx))
        luaL_argerror(L, idx, lua_pushfstring(L, "%s: the options must be a table {%s} (got %s %s)", what, known_opts(what),
                                              luaL_typename(L, idx), tgl_value_str(L, idx)));
    tgl_check_keys(L, idx, what, known_opts(what));
    if (lua_getfield(L, idx, "op") != LUA_TNIL) {
        const char *s = lua_tostring(L, -1);
        if (!s || tg_comm_op_parse(s, &o->op) != 0)
            luaL_error(L, "%s: op must be \"sum\", \"avg\", \"max\" or \"min\" (got %s)", what,
                       s ? s : luaL_typename(L, -1));
    }
    if (lua_getfield(L, idx, "async") != LUA_TNIL && !lua_isboolean(L, -1)) /* the message names the call */
        luaL_error(L, "%s: option 'async' must be a boolean (true or false), got a %s", what, luaL_typename(L, -1));
    lua_pop(L, 1);
    o->async = tgl_field_bool(L, idx, "async");
    /* name: the op's label in traces ("ddp bucket 2"); set last, once every option is valid,
     * so a refused option leaves no label for the next op */
    const char *name = NULL;
    if (lua_getfield(L, idx, "name") != LUA_TNIL) {
        name = lua_tostring(L, -1);
        if (!name) luaL_error(L, "%s: name must be a string (got %s)", what, luaL_typename(L, -1));
    }
    if (lua_getfield(L, idx, "root") != LUA_TNIL) {
        int isint;
        lua_Integer root = lua_tointegerx(L, -1, &isint);
        if (!isint || root < INT_MIN || root > INT_MAX)
            luaL_error(L, "%s: root = %s must be an integer rank", what, tgl_value_str(L, -1));
        o->root = (int)root;
    }
    if (name) tg_comm_label_next(name); /* copied: the string may go with the pops below */
    lua_pop(L, 3);
}

/* When async, pushes an empty request box (its result: the value at
 * result_idx) for the op to be issued into; NULL otherwise. */
static tg_comm_req **req_slot(lua_State *L, int async, int result_idx)
{
    if (!async) return NULL;
    struct tgl_req *u = lua_newuserdatauv(L, sizeof *u, 1); /* +1 */
    u->r = NULL;
    luaL_setmetatable(L, TGL_REQ);
    lua_pushvalue(L, result_idx); /* +1 */
    lua_setiuservalue(L, -2, 1);  /* -1 */
    return &u->r;
}

/* A blocking call returns its result tensor; an async one its request (on top). */
static int op_return(lua_State *L, tg_status st, int async, int result_idx)
{
    tg_comm_label_next(NULL); /* an op refused before it took its name */
    tgl_check(L, st);
    if (!async) lua_pushvalue(L, result_idx);
    return 1;
}

/* all_reduce([comm,] t [, {op=, async=, name=}]) -> t, or a request */
static int l_all_reduce(lua_State *L)
{
    int a;
    struct op_opts o;
    tg_comm *c = comm_arg(L, &a);
    tg_tensor *t = tgl_tensor_check(L, a);
    opts_read(L, a + 1, "all_reduce", &o);
    tg_comm_req **slot = req_slot(L, o.async, a);
    return op_return(L, tg_comm_all_reduce(c, t, o.op, slot), o.async, a);
}

/* reduce_scatter([comm,] out, in [, {op=, async=}]) -> out, or a request */
static int l_reduce_scatter(lua_State *L)
{
    int a;
    struct op_opts o;
    tg_comm *c = comm_arg(L, &a);
    tg_tensor *out = tgl_tensor_check(L, a), *in = tgl_tensor_check(L, a + 1);
    opts_read(L, a + 2, "reduce_scatter", &o);
    tg_comm_req **slot = req_slot(L, o.async, a);
    return op_return(L, tg_comm_reduce_scatter(c, out, in, o.op, slot), o.async, a);
}

/* all_gather([comm,] out, in [, {async=}]) -> out, or a request */
static int l_all_gather(lua_State *L)
{
    int a;
    struct op_opts o;
    tg_comm *c = comm_arg(L, &a);
    tg_tensor *out = tgl_tensor_check(L, a), *in = tgl_tensor_check(L, a + 1);
    opts_read(L, a + 2, "all_gather", &o);
    tg_comm_req **slot = req_slot(L, o.async, a);
    return op_return(L, tg_comm_all_gather(c, out, in, slot), o.async, a);
}

/* broadcast([comm,] t [, root | {root=0, async=}]) -> t, or a request */
static int l_broadcast(lua_State *L)
{
    int a;
    struct op_opts o = {TG_COMM_SUM, 0, 0};
    tg_comm *c = comm_arg(L, &a);
    tg_tensor *t = tgl_tensor_check(L, a);
    if (lua_isinteger(L, a + 1)) o.root = tgl_checkint(L, a + 1);
    else if (lua_type(L, a + 1) == LUA_TNUMBER) /* 1.5: a root that is not a rank, named as such */
        return luaL_argerror(L, a + 1, lua_pushfstring(L, "broadcast: root = %s must be an integer rank (or the options "
                                                          "{root=, async=, name=})", tgl_value_str(L, a + 1)));
    else opts_read(L, a + 1, "broadcast", &o);
    tg_comm_req **slot = req_slot(L, o.async, a);
    return op_return(L, tg_comm_broadcast(c, t, o.root, slot), o.async, a);
}

static int p2p(lua_State *L, int is_send)
{
    int a;
    struct op_opts o;
    tg_comm *c = comm_arg(L, &a);
    tg_tensor *t = tgl_tensor_check(L, a);
    int peer = tgl_checkint(L, a + 1);
    opts_read(L, a + 2, is_send ? "send" : "recv", &o);
    tg_comm_req **slot = req_slot(L, o.async, a);
    return op_return(L, is_send ? tg_comm_send(c, t, peer, slot) : tg_comm_recv(c, t, peer, slot), o.async, a);
}

/* send([comm,] t, peer [, {async=}]) -> t, or a request */
static int l_send(lua_State *L) { return p2p(L, 1); }
/* recv([comm,] t, peer [, {async=}]) -> t (filled), or a request */
static int l_recv(lua_State *L) { return p2p(L, 0); }

/* barrier([comm,] [{name=}]): name: its label (checked across the ranks like a collective's) */
static int l_barrier(lua_State *L)
{
    int a;
    struct op_opts o;
    tg_comm *c = comm_arg(L, &a);
    opts_read(L, a, "barrier", &o);
    tg_status st = tg_comm_barrier(c);
    tg_comm_label_next(NULL);
    tgl_check(L, st);
    return 0;
}

/* group([comm,] fn): runs fn() with the communicator's ops grouped (NCCL
 * launches them together at the end: ring exchanges of send/recv do not
 * deadlock); wait for their requests after. Returns what fn returns. */
static int l_group(lua_State *L)
{
    int a;
    tg_comm *c = comm_arg(L, &a);
    luaL_checktype(L, a, LUA_TFUNCTION);
    lua_settop(L, a);
    tgl_check(L, tg_comm_group_begin(c));
    int st = lua_pcall(L, 0, LUA_MULTRET, 0); /* fn's results or its error */
    tg_status gs = tg_comm_group_end(c);
    if (st != LUA_OK) return lua_error(L);
    tgl_check(L, gs);
    return lua_gettop(L) - (a - 1);
}

/* split a layout: {dp=, pp=} (either may be left out) -> {dp=, pp=, dp_rank=,
 * dp_size=, pp_rank=, pp_size=}: rank = pp_rank * dp + dp_rank (data-parallel
 * ranks of a stage are neighbours). */
static int split_layout(lua_State *L, tg_comm *c, int idx)
{
    int size = tg_comm_size(c), rank = tg_comm_rank(c);
    lua_Integer dp = 0, pp = 0;
    int64_t prod = 0;
    tgl_check_keys(L, idx, "split", "dp, pp");
    const char *names[2] = {"dp", "pp"};
    lua_Integer *vals[2] = {&dp, &pp};
    for (int k = 0; k < 2; k++) { /* each given one: an integer >= 1 (a huge one is named, never truncated) */
        if (lua_getfield(L, idx, names[k]) != LUA_TNIL) {
            int isint = 0;
            *vals[k] = lua_tointegerx(L, -1, &isint);
            if (!isint || *vals[k] < 1)
                return luaL_error(L, "split: %s = %s must be an integer >= 1", names[k], tgl_value_str(L, -1));
        }
        lua_pop(L, 1);
    }
    if (dp == 0 && pp == 0) pp = 1;
    if (dp == 0 && size % pp != 0) return luaL_error(L, "split: pp=%I does not divide the %d ranks", pp, size);
    if (pp == 0 && size % dp != 0) return luaL_error(L, "split: dp=%I does not divide the %d ranks", dp, size);
    if (dp == 0) dp = size / pp;
    if (pp == 0) pp = size / dp;
    /* dp * pp is checked: a wrapping product could equal the rank count */
    if (!tg_mul_i64(dp, pp, &prod) || prod != size)
        return luaL_error(L, "split: dp=%I x pp=%I does not match the %d ranks", dp, pp, size);
    int dp_rank = rank % (int)dp, pp_rank = rank / (int)dp;
    lua_createtable(L, 0, 6); /* +1: the result */
    /* the layout is part of what the ranks compare before each split: ranks asking for another layout fail */
    char layout[32];
    snprintf(layout, sizeof layout, "dp=%lld pp=%lld", (long long)dp, (long long)pp);
    comm_push(L, NULL);       /* +1: box first, then the group into it */
    tg_comm_label_next(layout);
    tgl_check(L, tg_comm_split(c, pp_rank, dp_rank, &((struct tgl_comm *)lua_touserdata(L, -1))->c));
    lua_setfield(L, -2, "dp");
    comm_push(L, NULL);
    tg_comm_label_next(layout);
    tgl_check(L, tg_comm_split(c, dp_rank, pp_rank, &((struct tgl_comm *)lua_touserdata(L, -1))->c));
    lua_setfield(L, -2, "pp");
    lua_pushinteger(L, dp_rank);
    lua_setfield(L, -2, "dp_rank");
    lua_pushinteger(L, dp);
    lua_setfield(L, -2, "dp_size");
    lua_pushinteger(L, pp_rank);
    lua_setfield(L, -2, "pp_rank");
    lua_pushinteger(L, pp);
    lua_setfield(L, -2, "pp_size");
    return 1;
}

/* split([comm,] color [, key]) -> a sub-communicator (collective), or
 * split([comm,] {dp=, pp=}) -> a layout (see split_layout). */
static int l_split(lua_State *L)
{
    int a;
    tg_comm *c = comm_arg(L, &a);
    if (lua_type(L, a) == LUA_TTABLE) return split_layout(L, c, a);
    int color = tgl_checkint(L, a);
    int key = tgl_optint(L, a + 1, tg_comm_rank(c));
    comm_push(L, NULL); /* +1 */
    tgl_check(L, tg_comm_split(c, color, key, &((struct tgl_comm *)lua_touserdata(L, -1))->c));
    return 1;
}

/* ------------------------------------------------------------------ requests */
static struct tgl_req *req_box(lua_State *L, int idx)
{
    struct tgl_req *u = luaL_checkudata(L, idx, TGL_REQ);
    if (u->r == NULL) luaL_argerror(L, idx, "request used after close");
    return u;
}

/* h:wait() -> the op's result tensor */
static int r_wait(lua_State *L)
{
    struct tgl_req *u = req_box(L, 1);
    tgl_check(L, tg_comm_req_wait(u->r));
    lua_getiuservalue(L, 1, 1); /* +1 */
    return 1;
}

/* h:test() -> whether it has completed (without blocking) */
static int r_test(lua_State *L)
{
    struct tgl_req *u = req_box(L, 1);
    int done;
    tgl_check(L, tg_comm_req_test(u->r, &done));
    lua_pushboolean(L, done);
    return 1;
}

static int r_gc(lua_State *L)
{
    struct tgl_req *u = luaL_checkudata(L, 1, TGL_REQ);
    tg_comm_req_free(u->r); /* waits if still pending */
    u->r = NULL;
    return 0;
}

static int r_tostring(lua_State *L)
{
    struct tgl_req *u = luaL_checkudata(L, 1, TGL_REQ);
    if (!u->r) lua_pushstring(L, "tegraph.CommRequest (closed)");
    else lua_pushfstring(L, "tegraph.CommRequest %s", tg_comm_req_what(u->r));
    return 1;
}

/* ------------------------------------------------------------------ grad buffers */
static tg_gradbuf *gradbuf_check(lua_State *L, int idx)
{
    struct tgl_gradbuf *u = luaL_checkudata(L, idx, TGL_GRADBUF);
    if (!u->g) luaL_argerror(L, idx, "grad buffer used after close");
    return u->g;
}

static int64_t int_field(lua_State *L, int idx, const char *k, int64_t def)
{
    int64_t v = def;
    if (lua_getfield(L, idx, k) != LUA_TNIL) {
        int isint;
        v = (int64_t)lua_tointegerx(L, -1, &isint);
        if (!isint || v < 0) luaL_error(L, "grad_buffer: option '%s' = %s must be an integer >= 0", k, tgl_value_str(L, -1));
    }
    lua_pop(L, 1);
    return v;
}

/* grad_buffer(params [, {bucket_bytes=25 MiB | bucket_numel=, align=64, pad_to=1}]):
 * params in forward order (model:parameters()); their main_grad become views
 * into one f32 buffer, in backward order, and they accumulate wgrads there.
 * A bucket closes once it holds at least bucket_numel elements (0: one bucket). */
static int l_grad_buffer(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    tg_gradbuf_opts o = {(int64_t)25 << 18, 64, 1}; /* 25 MiB of f32 */
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        tgl_check_keys(L, 2, "grad_buffer", "bucket_bytes, bucket_numel, align, pad_to");
        int64_t bytes = int_field(L, 2, "bucket_bytes", -1);
        /* rounded up to whole f32 elements: 3 bytes is one element, not 0 (which means one bucket) */
        if (bytes >= 0) o.bucket_numel = bytes / 4 + (bytes % 4 != 0);
        int64_t numel = int_field(L, 2, "bucket_numel", -1);
        if (numel >= 0 && bytes >= 0)
            luaL_error(L, "grad_buffer: bucket_bytes (%I) and bucket_numel (%I) both given: give one of them",
                       (lua_Integer)bytes, (lua_Integer)numel);
        if (numel >= 0) o.bucket_numel = numel;
        o.align = int_field(L, 2, "align", o.align);
        o.pad_to = int_field(L, 2, "pad_to", o.pad_to);
    }
    int n = tgl_len(L, 1);
    luaL_argcheck(L, n > 0, 1, "no parameters");
    tg_param **ps = lua_newuserdatauv(L, (size_t)n * sizeof *ps, 0); /* +1: scratch */
    for (int i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1); /* +1 */
        if (!luaL_testudata(L, -1, TGL_PARAM))
            luaL_error(L, "grad_buffer: entry %d is a %s, not a parameter", i + 1, luaL_typename(L, -1));
        ps[i] = tgl_param_check(L, -1);
        lua_pop(L, 1);
    }
    struct tgl_gradbuf *u = lua_newuserdatauv(L, sizeof *u, 0); /* +1 */
    u->g = NULL;
    luaL_setmetatable(L, TGL_GRADBUF);
    tgl_check(L, tg_gradbuf_new(ps, n, &o, &u->g));
    return 1;
}

static int gb_gc(lua_State *L)
{
    struct tgl_gradbuf *u = luaL_checkudata(L, 1, TGL_GRADBUF);
    tg_gradbuf_free(u->g); /* the params keep their views (the storage lives on) */
    u->g = NULL;
    return 0;
}

/* The index (0-based) of the parameter at idx, raising when it is not in g. */
static int gb_index_check(lua_State *L, tg_gradbuf *g, int idx)
{
    tg_param *p = tgl_param_check(L, idx);
    int i = tg_gradbuf_index(g, p);
    if (i < 0) luaL_argerror(L, idx, lua_pushfstring(L, "parameter '%s' is not in this grad buffer", p->name));
    return i;
}

/* Pushes {index=, start= (1-based element), numel=, tensor= (1-D view),
 * params={...}} of bucket b (0-based). */
static void gb_bucket_push(lua_State *L, tg_gradbuf *g, int b)
{
    const struct tg_gradbuf_bucket *k = &g->buckets[b];
    lua_createtable(L, 0, 5); /* +1 */
    lua_pushinteger(L, b + 1);
    lua_setfield(L, -2, "index");
    lua_pushinteger(L, (lua_Integer)k->start + 1);
    lua_setfield(L, -2, "start");
    lua_pushinteger(L, (lua_Integer)k->numel);
    lua_setfield(L, -2, "numel");
    tg_tensor **slot = tgl_tensor_push(L); /* +1 */
    int64_t shape[1] = {k->numel};
    tgl_check(L, tg_tensor_view(g->data, k->start, 1, shape, slot));
    lua_setfield(L, -2, "tensor");
    lua_createtable(L, k->nparams, 0); /* +1 */
    for (int i = 0; i < k->nparams; i++) {
        tgl_param_push(L, g->params[k->first + i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "params");
}

static int gb_bucket(lua_State *L)
{
    tg_gradbuf *g = gradbuf_check(L, 1);
    lua_Integer b = luaL_checkinteger(L, 2);
    luaL_argcheck(L, b >= 1 && b <= g->nbuckets, 2, "no such bucket");
    gb_bucket_push(L, g, (int)b - 1);
    return 1;
}

static int gb_buckets(lua_State *L)
{
    tg_gradbuf *g = gradbuf_check(L, 1);
    lua_createtable(L, g->nbuckets, 0); /* +1 */
    for (int b = 0; b < g->nbuckets; b++) {
        gb_bucket_push(L, g, b);
        lua_rawseti(L, -2, b + 1);
    }
    return 1;
}

/* gb:params() -> the parameters in buffer (backward) order */
static int gb_params(lua_State *L)
{
    tg_gradbuf *g = gradbuf_check(L, 1);
    lua_createtable(L, g->nparams, 0); /* +1 */
    for (int i = 0; i < g->nparams; i++) {
        tgl_param_push(L, g->params[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* gb:index(p) -> p's position in buffer order (1-based), or nil */
static int gb_index(lua_State *L)
{
    tg_gradbuf *g = gradbuf_check(L, 1);
    int i = tg_gradbuf_index(g, tgl_param_check(L, 2));
    if (i < 0) lua_pushnil(L);
    else lua_pushinteger(L, i + 1);
    return 1;
}

static int gb_bucket_of(lua_State *L)
{
    tg_gradbuf *g = gradbuf_check(L, 1);
    lua_pushinteger(L, g->bucket_of[gb_index_check(L, g, 2)] + 1);
    return 1;
}

/* gb:offset(p) -> the 1-based element where p's main_grad starts */
static int gb_offset(lua_State *L)
{
    tg_gradbuf *g = gradbuf_check(L, 1);
    lua_pushinteger(L, (lua_Integer)g->offset[gb_index_check(L, g, 2)] + 1);
    return 1;
}

static int gb_zero(lua_State *L)
{
    tgl_check(L, tg_fill(gradbuf_check(L, 1)->data, 0.0));
    return 0;
}

static int gb_index_meta(lua_State *L)
{
    tg_gradbuf *g = gradbuf_check(L, 1);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1; /* a method */
    const char *k = lua_tostring(L, 2);
    if (!k) return 0;
    if (strcmp(k, "data") == 0) {
        tg_tensor **slot = tgl_tensor_push(L);
        tgl_check(L, tg_tensor_ref(g->data, slot));
    } else if (strcmp(k, "numel") == 0)
        lua_pushinteger(L, (lua_Integer)g->numel);
    else if (strcmp(k, "nbuckets") == 0)
        lua_pushinteger(L, g->nbuckets);
    else if (strcmp(k, "nparams") == 0)
        lua_pushinteger(L, g->nparams);
    else
        lua_pushnil(L);
    return 1;
}

static int gb_tostring(lua_State *L)
{
    struct tgl_gradbuf *u = luaL_checkudata(L, 1, TGL_GRADBUF);
    if (!u->g) lua_pushstring(L, "tegraph.GradBuffer (closed)");
    else
        lua_pushfstring(L, "tegraph.GradBuffer %d params, %I f32 in %d buckets", u->g->nparams, (lua_Integer)u->g->numel,
                        u->g->nbuckets);
    return 1;
}

/* ------------------------------------------------------------------ registration */
static const luaL_Reg comm_methods[] = {
    {"rank", l_rank},
    {"size", l_size},
    {"seq", l_seq},
    {"local_rank", l_local_rank},
    {"local_size", l_local_size},
    {"backend", l_backend},
    {"device", l_device},
    {"all_reduce", l_all_reduce},
    {"reduce_scatter", l_reduce_scatter},
    {"all_gather", l_all_gather},
    {"broadcast", l_broadcast},
    {"send", l_send},
    {"recv", l_recv},
    {"barrier", l_barrier},
    {"group", l_group},
    {"split", l_split},
    {"close", c_gc},
    {NULL, NULL},
};
static const luaL_Reg comm_meta[] = {
    {"__gc", c_gc},
    {"__close", c_gc},
    {"__eq", c_eq},
    {"__tostring", c_tostring},
    {NULL, NULL},
};
static const luaL_Reg req_methods[] = {
    {"wait", r_wait},
    {"test", r_test},
    {"close", r_gc},
    {NULL, NULL},
};
static const luaL_Reg req_meta[] = {
    {"__gc", r_gc},
    {"__close", r_gc},
    {"__tostring", r_tostring},
    {NULL, NULL},
};
static const luaL_Reg gb_methods[] = {
    {"bucket", gb_bucket},
    {"buckets", gb_buckets},
    {"params", gb_params},
    {"index", gb_index},
    {"bucket_of", gb_bucket_of},
    {"offset", gb_offset},
    {"zero", gb_zero},
    {"close", gb_gc},
    {NULL, NULL},
};
static const luaL_Reg gb_meta[] = {
    {"__gc", gb_gc},
    {"__close", gb_gc},
    {"__tostring", gb_tostring},
    {NULL, NULL},
};
/* tg.comm.departed() -> the rank that left the job while this one runs (the launcher tells), or nil. */
static int l_departed(lua_State *L)
{
    int r = tg_comm_departed(NULL);
    if (r < 0) lua_pushnil(L);
    else lua_pushinteger(L, r);
    return 1;
}

/* tg.comm.*: the world's methods as functions, plus setup. */
static const luaL_Reg comm_funcs[] = {
    {"init", l_init},
    {"world", l_init},
    {"initialized", l_initialized},
    {"timeout", l_timeout},
    {"departed", l_departed},
    {"grad_buffer", l_grad_buffer},
    {NULL, NULL},
};

void tgl_open_comm(lua_State *L)
{
    luaL_newmetatable(L, TGL_COMM); /* +1 */
    luaL_setfuncs(L, comm_meta, 0);
    luaL_newlib(L, comm_methods); /* +1 */
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newmetatable(L, TGL_REQ); /* +1 */
    luaL_setfuncs(L, req_meta, 0);
    luaL_newlib(L, req_methods); /* +1 */
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newmetatable(L, TGL_GRADBUF); /* +1 */
    luaL_setfuncs(L, gb_meta, 0);
    luaL_newlib(L, gb_methods);                /* +1: the methods, upvalue of __index */
    lua_pushcclosure(L, gb_index_meta, 1);     /* -1 +1 */
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newlib(L, comm_funcs); /* +1: tg.comm */
    luaL_setfuncs(L, comm_methods, 0);
    lua_pushnil(L); /* the world is not closed from Lua */
    lua_setfield(L, -2, "close");
    lua_setfield(L, -2, "comm");
}
