/* lua_bind.c — the bindings' machinery: callbacks into Lua (anchor, calling thread, registry refs), the object map, class helpers. */
#include "lua/lua_bind.h"
#include "core/core.h" /* tg_error */

#include <limits.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#define TGL_ANCHOR "tegraph.nn.anchor"   /* registry: the anchor box of this state */
#define TGL_OBJECTS "tegraph.nn.objects" /* registry: weak, C pointer -> its userdata */

static _Thread_local lua_State *cur_L; /* the thread that entered the engine (tgl_nn_enter) */
static _Thread_local int callbacks; /* callbacks of the engine running on this thread (tgl_protected_call) */

/* Releases put off while the engine ran (tgl_release_when_idle). */
struct deferred {
    void (*release)(void *);
    void *p;
};
static _Thread_local struct deferred *later;
static _Thread_local int nlater, caplater;

int tgl_in_engine(void) { return cur_L != NULL || callbacks > 0; }

static void release_deferred(void)
{
    while (nlater > 0 && !tgl_in_engine()) { /* popped before the call: a release may come back here */
        struct deferred d = later[--nlater];
        d.release(d.p);
    }
    if (nlater == 0) {
        free(later);
        later = NULL;
        caplater = 0;
    }
}

void tgl_release_when_idle(void (*release)(void *), void *p)
{
    if (!tgl_in_engine()) {
        release_deferred();
        release(p);
        return;
    }
    if (nlater == caplater) {
        int cap = caplater ? 2 * caplater : 8;
        struct deferred *n = realloc(later, (size_t)cap * sizeof *n);
        if (n == NULL) return; /* out of host memory: p stays (a leak, not a use after free) */
        later = n;
        caplater = cap;
    }
    later[nlater++] = (struct deferred){release, p};
}

void tgl_hold(lua_State *L, const tg_tensor **t, int n)
{
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        tg_tensor *r = NULL;
        tg_status st = tg_tensor_ref(t[i], &r);
        if (st != TG_OK) {
            tgl_unhold(t, i);
            tgl_check(L, st);
        }
        t[i] = r;
    }
}

void tgl_unhold(const tg_tensor **t, int n)
{
    for (int i = 0; i < n; i++) {
        tg_tensor_free((tg_tensor *)t[i]);
        t[i] = NULL;
    }
}

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
    if (nlater) release_deferred(); /* the state closes: what waited for the engine goes now, unless it still runs */
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

lua_State *tgl_nn_enter(lua_State *L)
{
    lua_State *prev = cur_L;
    cur_L = L;
    return prev;
}

void tgl_nn_leave(lua_State *prev)
{
    cur_L = prev;
    if (nlater) release_deferred(); /* the engine call that held them back has returned */
}

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

struct tgl_ref *tgl_ref_new(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    struct tgl_ref *r = malloc(sizeof *r);
    if (r == NULL) luaL_error(L, "out of memory");
    r->anchor = anchor_get(L);
    lua_pushvalue(L, idx);
    r->ref = luaL_ref(L, LUA_REGISTRYINDEX); /* -1 */
    return r;
}

int tgl_ref_is(lua_State *L, const struct tgl_ref *r, int idx)
{
    idx = lua_absindex(L, idx);
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->ref); /* +1 */
    int same = lua_rawequal(L, -1, idx);
    lua_pop(L, 1);
    return same;
}

void tgl_ref_free(void *ud)
{
    struct tgl_ref *r = ud;
    if (r == NULL) return;
    if (r->anchor->alive) luaL_unref(r->anchor->L, LUA_REGISTRYINDEX, r->ref);
    anchor_release(r->anchor);
    free(r);
}

/* The engine prefixes the error with the hook or module that failed. */
tg_status tgl_protected_call(struct tgl_ref *r, lua_CFunction body, void *arg, const char *what)
{
    lua_State *L = anchor_thread(r->anchor);
    if (L == NULL) return tg_error(TG_ESTATE, "%s: the Lua state it belongs to is closed", what);
    if (!lua_checkstack(L, 3)) return tg_error(TG_ENOMEM, "%s: Lua stack overflow", what);
    int top = lua_gettop(L);
    lua_pushcfunction(L, body);
    lua_pushlightuserdata(L, arg);
    callbacks++;
    int rc = lua_pcall(L, 1, 0, 0);
    callbacks--;
    if (rc == LUA_OK) return TG_OK;
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
int tgl_objects_get(lua_State *L, const void *p)
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

void tgl_objects_set(lua_State *L, const void *p, int idx)
{
    idx = lua_absindex(L, idx);
    lua_getfield(L, LUA_REGISTRYINDEX, TGL_OBJECTS); /* +1 */
    lua_pushvalue(L, idx);
    lua_rawsetp(L, -2, p);
    lua_pop(L, 1);
}

int tgl_field_bool(lua_State *L, int t, const char *k)
{
    const int ty = lua_getfield(L, t, k);
    if (ty != LUA_TNIL && ty != LUA_TBOOLEAN) /* 0 is true in Lua: a number here is a mistake, not an answer */
        return luaL_error(L, "option '%s' must be a boolean (true or false), got a %s", k, lua_typename(L, ty));
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

int tgl_checkint(lua_State *L, int idx)
{
    lua_Integer v = luaL_checkinteger(L, idx);
    if (v < INT_MIN || v > INT_MAX) {
        const char *msg = lua_pushfstring(L, "integer %I is out of range (%d to %d)", v, INT_MIN, INT_MAX);
        if (idx > 0) luaL_argerror(L, idx, msg);
        luaL_error(L, "%s", msg);
    }
    return (int)v;
}

const char *tgl_value_str(lua_State *L, int idx)
{
    if (lua_type(L, idx) == LUA_TNUMBER && !lua_isinteger(L, idx)) {
        const lua_Number v = lua_tonumber(L, idx);
        if (v == floor(v) && fabs(v) < 1e18) return lua_pushfstring(L, "%I", (LUAI_UACINT)(lua_Integer)v);
    }
    return luaL_tolstring(L, idx, NULL);
}

void tgl_check_keys(lua_State *L, int idx, const char *what, const char *known)
{
    idx = lua_absindex(L, idx);
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        size_t n = k ? strlen(k) : 0;
        const char *at = k && n ? strstr(known, k) : NULL;
        while (at && !((at == known || at[-1] == ' ') && (at[n] == ',' || at[n] == '\0'))) at = strstr(at + 1, k);
        if (!at)
            luaL_error(L, "%s: unknown option %s%s%s (known: %s)", what, k ? "'" : "", k ? k : luaL_typename(L, -2),
                       k ? "'" : " key", known);
    }
}

int tgl_optint(lua_State *L, int idx, int def) { return lua_isnoneornil(L, idx) ? def : tgl_checkint(L, idx); }

const char *tgl_checkcstr(lua_State *L, int idx, const char *what)
{
    size_t len;
    const char *s = luaL_checklstring(L, idx, &len);
    if (strlen(s) != len)
        luaL_argerror(L, idx, lua_pushfstring(L, "%s \"%s\\0...\" holds a NUL byte at byte %d (C would end it there)", what, s,
                                              (int)strlen(s)));
    return s;
}

const char *tgl_optcstr(lua_State *L, int idx, const char *what)
{
    return lua_isnoneornil(L, idx) ? NULL : tgl_checkcstr(L, idx, what);
}

int tgl_len(lua_State *L, int idx)
{
    lua_Integer n = luaL_len(L, idx);
    if (n < 0 || n > INT_MAX) luaL_error(L, "a list of %I entries (at most %d)", n, INT_MAX);
    return (int)n;
}

/* A metatable with methods behind an __index closure, __gc, __tostring. */
void tgl_new_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction index, lua_CFunction gc,
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

/* The anchor and the object map of L's state (once per state). */
void tgl_bind_init(lua_State *L)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, TGL_ANCHOR) == LUA_TNIL) { /* +1 */
        struct tgl_anchor_box *b = lua_newuserdatauv(L, sizeof *b, 0); /* +1 */
        b->a = NULL;
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, anchor_gc);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        b->a = calloc(1, sizeof *b->a);
        if (b->a == NULL) luaL_error(L, "out of memory");
        lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
        b->a->L = lua_tothread(L, -1);
        lua_pop(L, 1);
        b->a->alive = 1;
        b->a->refs = 1;
        lua_setfield(L, LUA_REGISTRYINDEX, TGL_ANCHOR);
    }
    lua_pop(L, 1);
    weak_table(L, TGL_OBJECTS, "v");
}
