/* lua_trace.c — tegraph.trace: the trace (spans timed by events on the streams that run the work, or on the host). */
/*
 *   trace.start()                              begins a trace (error if one runs)
 *   trace.stop([path [, {quiet=false}]])       -> summary {nspans, compute_ms, comm_busy_ms, overlapped_ms,
 *                                                 exposed_ms, exposed_pct, line}; writes Chrome trace JSON to
 *                                                 path (when given) and prints the line unless quiet
 *   trace.active()                             -> whether a trace runs
 *   trace.events()                             -> the spans so far: {name, cat, ph = "X"|"async", ts, dur (us),
 *                                                 pid, tid, track [, op, stage, chunk, mb, index, step, args]}
 *   trace.name_process(pid, name)              names a process of the running trace in the file stop writes
 *                                                 (default "rank <pid>")
 *   trace.span(name, stream_or_nil, fn [, track]) -> fn's results: fn runs inside a span on the stream
 *                                                 (track "compute") or on the host (nil: track "host")
 *   trace.begin_span(name, stream_or_nil [, track]) -> id      trace.end_span(id, stream_or_nil)
 */
#include "lua/lua_impl.h"
#include "trace/trace.h"

#include <lauxlib.h>
#include <lua.h>
#include <string.h>

static tg_stream *opt_stream(lua_State *L, int idx)
{
    if (lua_isnoneornil(L, idx)) return NULL;
    struct tgl_stream *u = luaL_checkudata(L, idx, TGL_STREAM);
    if (!u->s) luaL_argerror(L, idx, "stream used after close");
    return u->s;
}

static const char *opt_track(lua_State *L, int idx, tg_stream *s)
{
    static const char *const tracks[] = {"compute", "comm", "host", NULL};
    const char *def = s ? "compute" : "host";
    return tracks[luaL_checkoption(L, idx, def, tracks)];
}

/* The trace is process-wide: a Lua state that started one and goes away
 * (an error before trace.stop, tg_runtime_free, lua_close) ends it through
 * this sentinel's __gc, so the next state can trace and modules stop
 * recording spans. trace.stop disarms it. */
#define TGL_TRACE_SENTINEL "tegraph.trace_sentinel"
struct trace_sentinel {
    int armed;
};

static int sentinel_gc(lua_State *L)
{
    struct trace_sentinel *t = lua_touserdata(L, 1);
    if (t->armed && tg_trace_active()) (void)tg_trace_end(NULL, NULL);
    t->armed = 0;
    return 0;
}

static void disarm(lua_State *L)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, TGL_TRACE_SENTINEL) == LUA_TUSERDATA)
        ((struct trace_sentinel *)lua_touserdata(L, -1))->armed = 0;
    lua_pop(L, 1);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, TGL_TRACE_SENTINEL);
}

static int l_start(lua_State *L)
{
    tgl_check(L, tg_trace_begin());
    struct trace_sentinel *t = lua_newuserdatauv(L, sizeof *t, 0);
    t->armed = 1;
    if (luaL_newmetatable(L, TGL_TRACE_SENTINEL)) {
        lua_pushcfunction(L, sentinel_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, TGL_TRACE_SENTINEL);
    return 0;
}

static int l_active(lua_State *L)
{
    lua_pushboolean(L, tg_trace_active());
    return 1;
}

static void set_num(lua_State *L, const char *k, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static int l_stop(lua_State *L)
{
    const char *path = tgl_optcstr(L, 1, "the path");
    int quiet = 0;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        tgl_check_keys(L, 2, "trace.stop", "quiet");
        lua_getfield(L, 2, "quiet");
        quiet = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    tg_trace_summary s;
    char line[256];
    tg_status st = tg_trace_end(path, &s);
    if (!tg_trace_active()) disarm(L); /* ended, also when writing failed */
    tgl_check(L, st);
    tg_trace_summary_line(&s, line, sizeof line);
    lua_createtable(L, 0, 7); /* +1: the summary */
    lua_pushinteger(L, s.nspans);
    lua_setfield(L, -2, "nspans");
    set_num(L, "compute_ms", s.compute_ms);
    set_num(L, "comm_busy_ms", s.comm_busy_ms);
    set_num(L, "overlapped_ms", s.overlapped_ms);
    set_num(L, "exposed_ms", s.exposed_ms);
    set_num(L, "exposed_pct", s.exposed_pct);
    lua_pushstring(L, line);
    lua_setfield(L, -2, "line");
    if (!quiet) {
        printf("%s%s%s\n", line, path ? " -> " : "", path ? path : "");
        fflush(stdout);
    }
    return 1;
}

static int l_begin_span(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    tg_stream *s = opt_stream(L, 2);
    lua_pushinteger(L, tg_trace_span_begin(s, opt_track(L, 3, s), name, NULL));
    return 1;
}

static int l_end_span(lua_State *L)
{
    lua_Integer id = luaL_checkinteger(L, 1);
    tg_trace_span_end((int)id, opt_stream(L, 2));
    return 0;
}

/* span(name, stream_or_nil, fn [, track]): the span ends whether fn returns or raises. */
static int l_span(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    tg_stream *s = opt_stream(L, 2);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    const char *track = opt_track(L, 4, s);
    int id = tg_trace_span_begin(s, track, name, NULL);
    int base = lua_gettop(L);
    lua_pushvalue(L, 3);
    int rc = lua_pcall(L, 0, LUA_MULTRET, 0);
    if (s) s = ((struct tgl_stream *)lua_touserdata(L, 2))->s; /* fn may have closed it: the span is then dropped */
    if (s || lua_isnoneornil(L, 2)) tg_trace_span_end(id, s);
    if (rc != LUA_OK) return lua_error(L);
    return lua_gettop(L) - base;
}

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
    if (!v) return;
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void set_str(lua_State *L, const char *k, const char *v)
{
    if (!v) return;
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}

/* Fills the list at the top of the stack with ev (runs protected: a memory error frees ev in the caller). */
static int events_fill(lua_State *L)
{
    const struct tg_trace_event *ev = lua_touserdata(L, 1);
    int n = (int)lua_tointeger(L, 2);
    char track[32];
    lua_createtable(L, n, 0); /* +1 */
    for (int i = 0; i < n; i++) {
        const struct tg_trace_event *e = &ev[i];
        lua_createtable(L, 0, 16); /* +1 */
        set_str(L, "name", e->name);
        set_str(L, "cat", e->cat);
        set_str(L, "ph", e->async ? "async" : "X");
        set_num(L, "ts", e->ts);
        set_num(L, "dur", e->dur);
        lua_pushinteger(L, e->pid);
        lua_setfield(L, -2, "pid");
        lua_pushinteger(L, e->track);
        lua_setfield(L, -2, "tid");
        set_str(L, "track", tg_trace_track_name(e->track, track, sizeof track));
        set_str(L, "op", e->op);
        set_int(L, "stage", e->stage);
        set_int(L, "chunk", e->chunk);
        set_int(L, "mb", e->mb);
        set_int(L, "index", e->index);
        set_int(L, "step", (lua_Integer)e->step);
        set_str(L, "args", e->args);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_events(lua_State *L)
{
    if (!tg_trace_active()) return luaL_error(L, "trace.events: no trace is running (trace.start() first)");
    struct tg_trace_event *ev = NULL;
    int n = 0;
    tgl_check(L, tg_trace_events(&ev, &n));
    lua_pushcfunction(L, events_fill);
    lua_pushlightuserdata(L, ev);
    lua_pushinteger(L, n);
    int rc = lua_pcall(L, 2, 1, 0);
    free(ev);
    if (rc != LUA_OK) return lua_error(L);
    return 1;
}

static int l_name_process(lua_State *L)
{
    lua_Integer pid = luaL_checkinteger(L, 1);
    const char *name = luaL_checkstring(L, 2);
    luaL_argcheck(L, pid >= 0 && pid <= INT32_MAX, 1, "a process id is a non-negative integer");
    if (!tg_trace_active()) return luaL_error(L, "trace.name_process: no trace is running (trace.start() first)");
    tgl_check(L, tg_trace_name_process((int)pid, name));
    return 0;
}

static const luaL_Reg trace_funcs[] = {
    {"events", l_events},
    {"name_process", l_name_process},
    {"start", l_start},
    {"stop", l_stop},
    {"active", l_active},
    {"span", l_span},
    {"begin_span", l_begin_span},
    {"end_span", l_end_span},
    {NULL, NULL},
};

void tgl_open_trace(lua_State *L)
{
    luaL_newlib(L, trace_funcs); /* +1 */
    lua_setfield(L, -2, "trace");
}
