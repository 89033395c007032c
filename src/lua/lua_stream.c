/* lua_stream.c — streams, graph capture/replay and graph memory pools from Lua (tg.stream, tg.pool). */
#include "lua/lua_impl.h"
#include "core/core.h" /* struct tg_stream: the device of a stream */
#include "lua/lua_bind.h"

#include <string.h>

/* ------------------------------------------------------------------ streams */

static struct tgl_stream *stream_push(lua_State *L, tg_stream *s, int owned)
{
    struct tgl_stream *u = lua_newuserdatauv(L, sizeof *u, 0); /* +1 */
    memset(u, 0, sizeof *u);
    u->s = s;
    u->owned = owned;
    luaL_setmetatable(L, TGL_STREAM);
    return u;
}

static tg_stream *stream_check(lua_State *L, int idx)
{
    struct tgl_stream *u = luaL_checkudata(L, idx, TGL_STREAM);
    if (u->s == NULL) luaL_argerror(L, idx, "stream used after close");
    return u->s;
}

/* The device of an optional argument: a device name, or the default device. */
static tg_device opt_device(lua_State *L, int idx)
{
    return lua_isnoneornil(L, idx) ? tg_default_device() : tgl_device_check(L, idx);
}

/* tg.stream.current([device]) */
static int s_current(lua_State *L)
{
    tg_stream *s = tg_stream_current(opt_device(L, 1));
    if (s == NULL) return luaL_error(L, "%s", tg_last_error());
    stream_push(L, s, 0);
    return 1;
}

/* tg.stream.new([name [, device]]) */
static int s_new(lua_State *L)
{
    const char *name = luaL_optstring(L, 1, "lua");
    tg_device dev = opt_device(L, 2);
    struct tgl_stream *u = stream_push(L, NULL, 1);
    tgl_check(L, tg_stream_new(dev, name, &u->s));
    return 1;
}

/* tg.stream.capturing([device or stream]) */
static int s_capturing(lua_State *L)
{
    struct tgl_stream *u = luaL_testudata(L, 1, TGL_STREAM);
    if (u)
        lua_pushboolean(L, tg_stream_capturing(stream_check(L, 1)));
    else
        lua_pushboolean(L, tg_device_capturing(opt_device(L, 1)));
    return 1;
}

/* Inside a capture on the stream (getmetatable(s).__gc(s) from the captured
 * function) the stream is closed for Lua at once and freed when the capture
 * has ended on it. */
static int st_gc(lua_State *L)
{
    struct tgl_stream *u = luaL_checkudata(L, 1, TGL_STREAM);
    if (u->owned && u->s && u->held) u->closing = u->s;
    else if (u->owned && u->s) tg_stream_free(u->s);
    u->s = NULL;
    return 0;
}

/* stream:close() and <close>: refused while the stream captures (the capture
 * still records into it and ends on it). */
static int st_close(lua_State *L)
{
    struct tgl_stream *u = luaL_checkudata(L, 1, TGL_STREAM);
    if (u->owned && u->s && tg_stream_capturing(u->s))
        return luaL_error(L, "stream '%s' is capturing: close it after its capture ends", tg_stream_name(u->s));
    return st_gc(L);
}

static int st_sync(lua_State *L)
{
    tgl_check(L, tg_stream_sync(stream_check(L, 1)));
    lua_settop(L, 1);
    return 1;
}

static int st_name(lua_State *L)
{
    lua_pushstring(L, tg_stream_name(stream_check(L, 1)));
    return 1;
}

static int st_capturing(lua_State *L)
{
    lua_pushboolean(L, tg_stream_capturing(stream_check(L, 1)));
    return 1;
}

static int st_eq(lua_State *L)
{
    struct tgl_stream *a = luaL_checkudata(L, 1, TGL_STREAM), *b = luaL_checkudata(L, 2, TGL_STREAM);
    lua_pushboolean(L, a->s == b->s);
    return 1;
}

static int st_tostring(lua_State *L)
{
    struct tgl_stream *u = luaL_checkudata(L, 1, TGL_STREAM);
    if (u->s == NULL)
        lua_pushstring(L, "tegraph.Stream (closed)");
    else
        lua_pushfstring(L, "tegraph.Stream '%s'%s", tg_stream_name(u->s), tg_stream_capturing(u->s) ? " (capturing)" : "");
    return 1;
}

/* stream:wait(event): work issued on the stream after this waits for the event's point. */
static int st_wait(lua_State *L)
{
    tg_stream *s = stream_check(L, 1);
    struct tgl_event *e = luaL_checkudata(L, 2, TGL_EVENT);
    if (e->e == NULL) return luaL_argerror(L, 2, "event used after close");
    tgl_check(L, tg_stream_wait_event(s, e->e));
    lua_settop(L, 1);
    return 1;
}

/* ------------------------------------------------------------------ events */

static struct tgl_event *event_check(lua_State *L, int idx)
{
    struct tgl_event *u = luaL_checkudata(L, idx, TGL_EVENT);
    if (u->e == NULL) luaL_argerror(L, idx, "event used after close");
    return u;
}

/* tg.stream.event([device]): an event (marks a point in a stream's work). */
static int e_new(lua_State *L)
{
    tg_device dev = opt_device(L, 1);
    struct tgl_event *u = lua_newuserdatauv(L, sizeof *u, 0); /* +1 */
    u->e = NULL;
    u->dev = dev;
    luaL_setmetatable(L, TGL_EVENT);
    tgl_check(L, tg_event_new(dev, 0, &u->e));
    return 1;
}

/* event:record([stream]): marks the stream's work issued so far (default: the current stream of its device). */
static int e_record(lua_State *L)
{
    struct tgl_event *u = event_check(L, 1);
    tg_stream *s = lua_isnoneornil(L, 2) ? tg_stream_current(u->dev) : stream_check(L, 2);
    if (s == NULL) return luaL_error(L, "%s", tg_last_error());
    tgl_check(L, tg_event_record(u->e, s));
    lua_settop(L, 1);
    return 1;
}

static int e_sync(lua_State *L)
{
    tgl_check(L, tg_event_sync(event_check(L, 1)->e));
    lua_settop(L, 1);
    return 1;
}

static int e_query(lua_State *L)
{
    int done = 0;
    tgl_check(L, tg_event_query(event_check(L, 1)->e, &done));
    lua_pushboolean(L, done);
    return 1;
}

static int e_gc(lua_State *L)
{
    struct tgl_event *u = luaL_checkudata(L, 1, TGL_EVENT);
    if (u->e) tg_event_free(u->e);
    u->e = NULL;
    return 0;
}

void tgl_replay_opts(lua_State *L, int idx, const char *what, tg_stream **s, tg_event **wait)
{
    *s = NULL;
    *wait = NULL;
    if (lua_isnoneornil(L, idx)) return;
    if (!lua_istable(L, idx)) luaL_error(L, "%s: options must be a table {stream =, wait =}", what);
    tgl_check_keys(L, idx, what, "stream, wait");
    if (lua_getfield(L, idx, "stream") != LUA_TNIL) { /* the options table keeps both alive */
        struct tgl_stream *su = luaL_testudata(L, -1, TGL_STREAM);
        if (su == NULL) luaL_error(L, "%s: option 'stream' must be a stream (tg.stream.new())", what);
        if (su->s == NULL) luaL_error(L, "%s: option 'stream' was closed", what);
        *s = su->s;
    }
    if (lua_getfield(L, idx, "wait") != LUA_TNIL) {
        struct tgl_event *eu = luaL_testudata(L, -1, TGL_EVENT);
        if (eu == NULL) luaL_error(L, "%s: option 'wait' must be an event (tg.stream.event())", what);
        if (eu->e == NULL) luaL_error(L, "%s: option 'wait' was closed", what);
        *wait = eu->e;
    }
    lua_pop(L, 2);
}

/* ------------------------------------------------------------------ pools */

static struct tgl_pool *pool_test(lua_State *L, int idx)
{
    struct tgl_pool *u = luaL_testudata(L, idx, TGL_POOL);
    if (u && u->p == NULL) luaL_argerror(L, idx, "pool used after close");
    return u;
}

/* tg.pool([device]): a graph memory pool. */
static int p_new(lua_State *L)
{
    tg_device dev = opt_device(L, 1);
    struct tgl_pool *u = lua_newuserdatauv(L, sizeof *u, 0); /* +1 */
    u->p = NULL;
    luaL_setmetatable(L, TGL_POOL);
    tgl_check(L, tg_pool_new(dev, &u->p));
    return 1;
}

/* While pushed (pool:scope, a capture with pool =) the pool stack holds a
 * reference of its own: the pool is freed when it is popped. */
static int p_gc(lua_State *L)
{
    struct tgl_pool *u = luaL_checkudata(L, 1, TGL_POOL);
    if (u->p) tg_pool_release(u->p);
    u->p = NULL;
    return 0;
}

/* pool:close() and <close>: refused while the pool is pushed (pool:scope or a
 * capture with pool =); graphs that use its memory keep it alive after. */
static int p_close(lua_State *L)
{
    struct tgl_pool *u = luaL_checkudata(L, 1, TGL_POOL);
    if (u->p && tg_pool_pushed(u->p))
        return luaL_error(L, "pool is in use by pool:scope or a capture (pool =): close it after that returns");
    return p_gc(L);
}

/* pool:stats() -> {used=, peak=, reserved=} in bytes */
static int p_stats(lua_State *L)
{
    struct tgl_pool *u = luaL_checkudata(L, 1, TGL_POOL);
    size_t used, peak, reserved;
    if (u->p == NULL) return luaL_argerror(L, 1, "pool used after close");
    tg_pool_stats(u->p, &used, &peak, &reserved);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)used);
    lua_setfield(L, -2, "used");
    lua_pushinteger(L, (lua_Integer)peak);
    lua_setfield(L, -2, "peak");
    lua_pushinteger(L, (lua_Integer)reserved);
    lua_setfield(L, -2, "reserved");
    return 1;
}

/* pool:scope(fn): runs fn with the pool pushed (tensors made inside come from it). */
static int p_scope(lua_State *L)
{
    struct tgl_pool *u = luaL_checkudata(L, 1, TGL_POOL);
    if (u->p == NULL) return luaL_argerror(L, 1, "pool used after close");
    luaL_checktype(L, 2, LUA_TFUNCTION);
    tg_pool *p = u->p; /* fn may close the box (its __gc): the push's reference keeps p */
    tgl_check(L, tg_pool_push(p));
    lua_pushvalue(L, 2);
    int st = lua_pcall(L, 0, LUA_MULTRET, 0);
    tg_pool_pop(p);
    if (st != LUA_OK) return lua_error(L);
    return lua_gettop(L) - 2;
}

static int p_tostring(lua_State *L)
{
    struct tgl_pool *u = luaL_checkudata(L, 1, TGL_POOL);
    size_t used, peak, reserved;
    if (u->p == NULL) {
        lua_pushstring(L, "tegraph.Pool (closed)");
        return 1;
    }
    tg_pool_stats(u->p, &used, &peak, &reserved);
    lua_pushfstring(L, "tegraph.Pool used=%I peak=%I reserved=%I", (lua_Integer)used, (lua_Integer)peak,
                    (lua_Integer)reserved);
    return 1;
}

/* ------------------------------------------------------------------ graphs */

static tg_graph *graph_check(lua_State *L, int idx)
{
    struct tgl_graph *u = luaL_checkudata(L, idx, TGL_GRAPH);
    if (u->g == NULL) luaL_argerror(L, idx, "graph used after close");
    return u->g;
}

/* tg.stream.capture(fn [, {stream=s, pool=p, device=d}]) -> graph.
 * Captures what fn issues on the stream (s, made current during fn; else
 * the current stream of the device). With a pool, tensors made inside fn
 * come from it and the graph keeps it alive. Capture ends even when fn
 * fails; the error is then raised again. The stream and the pool stay alive
 * until then, whatever fn does with the options table or their __gc. */
static int s_capture(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    tg_stream *s = NULL;
    struct tgl_stream *su = NULL;
    tg_pool *pool = NULL;
    tg_device dev = tg_default_device();
    if (lua_type(L, 2) == LUA_TTABLE) {
        tgl_check_keys(L, 2, "tg.stream.capture", "stream, pool, device");
        if (lua_getfield(L, 2, "device") != LUA_TNIL) dev = tgl_device_check(L, -1);
        if (lua_getfield(L, 2, "stream") != LUA_TNIL) {
            su = luaL_testudata(L, -1, TGL_STREAM);
            if (su == NULL) return luaL_error(L, "capture: option 'stream' must be a stream (tg.stream.new())");
            if (su->s == NULL) return luaL_error(L, "capture: stream used after close");
            s = su->s;
        }
        if (lua_getfield(L, 2, "pool") != LUA_TNIL) {
            struct tgl_pool *pu = pool_test(L, -1);
            if (pu == NULL) return luaL_error(L, "capture: option 'pool' must be a pool (tg.pool())");
            pool = pu->p;
        }
        /* the stream and the pool stay on this stack (3 and 4): fn may drop the options table's references */
    }
    struct tgl_graph *gu = lua_newuserdatauv(L, sizeof *gu, 0); /* +1: the graph, empty for now */
    gu->g = NULL;
    luaL_setmetatable(L, TGL_GRAPH);
    tg_stream *prev = NULL;
    if (s) {
        dev = s->dev;
        prev = tg_stream_set_current(s);
    } else {
        s = tg_stream_current(dev);
        if (s == NULL) return luaL_error(L, "%s", tg_last_error());
    }
    if (pool && tg_pool_push(pool) != TG_OK) {
        if (prev) tg_stream_set_current(prev);
        return luaL_error(L, "%s", tg_last_error());
    }
    tg_status st = tg_stream_begin_capture(s);
    if (st != TG_OK) {
        if (pool) tg_pool_pop(pool);
        if (prev) tg_stream_set_current(prev);
        return luaL_error(L, "%s", tg_last_error());
    }
    if (su) su->held++;
    lua_pushvalue(L, 1);
    int lst = lua_pcall(L, 0, 0, 0); /* +1 on error: the error object */
    tg_graph *g = NULL;
    st = tg_stream_end_capture(s, &g);
    /* while pushed the pool is alive even if fn closed its box: the graph takes its reference first */
    if (st == TG_OK && lst == LUA_OK && pool) st = tg_graph_keep_pool(g, pool);
    if (pool) tg_pool_pop(pool);
    if (prev) tg_stream_set_current(prev);
    if (su && --su->held == 0 && su->closing) { /* its __gc ran inside fn */
        tg_stream_free(su->closing);
        su->closing = NULL;
    }
    if (lst != LUA_OK) {
        tg_graph_free(g);
        return lua_error(L);
    }
    if (st != TG_OK) {
        tg_graph_free(g);
        return luaL_error(L, "%s", tg_last_error());
    }
    gu->g = g;
    gu->dev = dev;
    return 1;
}

/* graph:replay([stream [, event]]): on the given stream, else the current
 * stream of its device; with an event, the stream waits for it first. */
static int g_replay(lua_State *L)
{
    tg_graph *g = graph_check(L, 1);
    struct tgl_graph *u = lua_touserdata(L, 1);
    tg_stream *s = lua_isnoneornil(L, 2) ? tg_stream_current(u->dev) : stream_check(L, 2);
    if (s == NULL) return luaL_error(L, "%s", tg_last_error());
    if (!lua_isnoneornil(L, 3)) tgl_check(L, tg_stream_wait_event(s, event_check(L, 3)->e));
    lua_State *prev = tgl_nn_enter(L); /* the hooks a replay fires run on this thread; a free of g from them waits */
    tg_status st = tg_graph_replay(g, s);
    tgl_nn_leave(prev);
    tgl_check(L, st);
    lua_settop(L, 1);
    return 1;
}

/* graph:keep_pool(pool): keeps the pool alive as long as the graph (tensors
 * the graph uses came from it); at most 8 pools per graph. */
static int g_keep_pool(lua_State *L)
{
    tg_graph *g = graph_check(L, 1);
    struct tgl_pool *pu = pool_test(L, 2);
    if (pu == NULL) return luaL_argerror(L, 2, "a pool (tg.pool()) expected");
    tgl_check(L, tg_graph_keep_pool(g, pu->p));
    lua_settop(L, 1);
    return 1;
}

static int g_size(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)tg_graph_size(graph_check(L, 1)));
    return 1;
}

static void graph_release(void *g) { tg_graph_free(g); }

/* close / __gc: a hook of the graph's own replay may run it; the graph then goes when the replay returns */
static int g_gc(lua_State *L)
{
    struct tgl_graph *u = luaL_checkudata(L, 1, TGL_GRAPH);
    tg_graph *g = u->g;
    u->g = NULL;
    if (g) tgl_release_when_idle(graph_release, g);
    return 0;
}

static int g_tostring(lua_State *L)
{
    struct tgl_graph *u = luaL_checkudata(L, 1, TGL_GRAPH);
    char dev[32];
    if (u->g == NULL)
        lua_pushstring(L, "tegraph.Graph (closed)");
    else
        lua_pushfstring(L, "tegraph.Graph %s, %I commands", tg_device_str(u->dev, dev, sizeof dev),
                        (lua_Integer)tg_graph_size(u->g));
    return 1;
}

/* ------------------------------------------------------------------ registration */

static const luaL_Reg stream_methods[] = {
    {"sync", st_sync},
    {"name", st_name},
    {"capturing", st_capturing},
    {"wait", st_wait},
    {"close", st_close},
    {NULL, NULL},
};
static const luaL_Reg stream_meta[] = {
    {"__index", NULL},
    {"__gc", st_gc},
    {"__close", st_close},
    {"__eq", st_eq},
    {"__tostring", st_tostring},
    {NULL, NULL},
};
static const luaL_Reg graph_methods[] = {
    {"replay", g_replay},
    {"keep_pool", g_keep_pool},
    {"size", g_size},
    {"close", g_gc},
    {NULL, NULL},
};
static const luaL_Reg graph_meta[] = {
    {"__index", NULL},
    {"__gc", g_gc},
    {"__close", g_gc},
    {"__tostring", g_tostring},
    {NULL, NULL},
};
static const luaL_Reg pool_methods[] = {
    {"stats", p_stats},
    {"scope", p_scope},
    {"close", p_close},
    {NULL, NULL},
};
static const luaL_Reg pool_meta[] = {
    {"__index", NULL},
    {"__gc", p_gc},
    {"__close", p_close},
    {"__tostring", p_tostring},
    {NULL, NULL},
};
static const luaL_Reg event_methods[] = {
    {"record", e_record},
    {"sync", e_sync},
    {"query", e_query},
    {"close", e_gc},
    {NULL, NULL},
};
static const luaL_Reg event_meta[] = {
    {"__index", NULL},
    {"__gc", e_gc},
    {"__close", e_gc},
    {NULL, NULL},
};
static const luaL_Reg stream_funcs[] = {
    {"event", e_new},
    {"current", s_current},
    {"new", s_new},
    {"capture", s_capture},
    {"capturing", s_capturing},
    {NULL, NULL},
};

static void new_class(lua_State *L, const char *name, const luaL_Reg *meta, const luaL_Reg *methods)
{
    luaL_newmetatable(L, name); /* +1 */
    luaL_setfuncs(L, meta, 0);
    lua_newtable(L);            /* +1: the methods */
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}

void tgl_open_stream(lua_State *L)
{
    new_class(L, TGL_STREAM, stream_meta, stream_methods);
    new_class(L, TGL_GRAPH, graph_meta, graph_methods);
    new_class(L, TGL_POOL, pool_meta, pool_methods);
    new_class(L, TGL_EVENT, event_meta, event_methods);
    luaL_newlib(L, stream_funcs); /* +1 */
    lua_setfield(L, -2, "stream");
    lua_pushcfunction(L, p_new);
    lua_setfield(L, -2, "pool");
}
