/* lua_data.c — core.ops.u16_scan and core.ops.token_windows: token-file decoding (src/core/data.c) for tegraph.data. */
#include "lua/lua_data.h"
#include "core/data.h"

#include <stdio.h>

/* Tokens of llm.c .bin files are little-endian uint16 after a 1024-byte header;
 * these read them straight from the file's bytes in a Lua string. */

static const unsigned char *u16_span(lua_State *L, int sidx, lua_Integer first, lua_Integer count)
{
    size_t len;
    const char *s = luaL_checklstring(L, sidx, &len);
    size_t two = 0, end = 0;
    int sized = first >= 0 && count >= 0 && tg_mul_size((size_t)count, 2, &two) && tg_add_size((size_t)first, two, &end);
    if (!sized || end > len) {
        if (sized && end <= (size_t)LUA_MAXINTEGER)
            luaL_error(L, "token bytes [%I, %I) outside the %I bytes given", first, (lua_Integer)end, (lua_Integer)len);
        luaL_error(L, "token bytes: %I tokens from byte %I are outside the %I bytes given", count, first,
                   (lua_Integer)len);
    }
    return (const unsigned char *)s + first;
}

/* u16_scan(bytes, first_byte, count) -> max token, its 0-based token index */
static int o_u16_scan(lua_State *L)
{
    lua_Integer count = luaL_checkinteger(L, 3);
    const unsigned char *p = u16_span(L, 1, luaL_checkinteger(L, 2), count);
    unsigned max;
    int64_t at;
    tg_tokens_u16_max(p, (int64_t)count, &max, &at);
    lua_pushinteger(L, (lua_Integer)max);
    lua_pushinteger(L, (lua_Integer)at);
    return 2;
}

/* token_windows(bytes, first_byte, starts, T [, device]) -> x, y (B, T) i32:
 * row b holds tokens starts[b] .. starts[b]+T-1 (0-based token indices) in x
 * and the same shifted by one in y. */
static int o_token_windows(lua_State *L)
{
    size_t len;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &len);
    lua_Integer first = luaL_checkinteger(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_Integer t = luaL_checkinteger(L, 4);
    tg_device dev = lua_isnoneornil(L, 5) ? tg_default_device() : tgl_device_check(L, 5);
    lua_Integer b = luaL_len(L, 3);
    luaL_argcheck(L, b >= 1 && t >= 1, 3, "need at least one window of at least one token");
    /* +1: scratch: the starts, then x and y */
    size_t bt = 0, sbytes = 0, tbytes = 0, bytes = 0;
    if (!tg_mul_size((size_t)b, (size_t)t, &bt) || !tg_mul_size(bt, 2 * sizeof(int32_t), &tbytes) ||
        !tg_mul_size((size_t)b, sizeof(int64_t), &sbytes) || !tg_add_size(sbytes, tbytes, &bytes) ||
        bt > (size_t)INT64_MAX / 2)
        return luaL_error(L, "token_windows: %I windows of %I tokens are too many", b, t);
    if ((size_t)t > len / 2) /* no window can fit: refuse before allocating for them */
        return luaL_error(L, "token_windows: windows of %I tokens do not fit in the %I bytes given", t,
                          (lua_Integer)len);
    int64_t *starts = lua_newuserdatauv(L, bytes, 0);
    int32_t *buf = (int32_t *)(starts + b);
    for (lua_Integer r = 0; r < b; r++) {
        lua_rawgeti(L, 3, r + 1);
        int isint;
        starts[r] = (int64_t)lua_tointegerx(L, -1, &isint);
        lua_pop(L, 1);
        if (!isint) return luaL_error(L, "token_windows: window %d: its start is not an integer", (int)(r + 1));
    }
    tgl_check(L, tg_tokens_u16_windows(s, len, (int64_t)first, starts, (int64_t)b, (int64_t)t, buf, buf + b * t));
    int64_t shape[2] = {(int64_t)b, (int64_t)t};
    for (int k = 0; k < 2; k++) {
        tg_tensor **slot = tgl_tensor_push(L);
        tgl_check(L, tg_tensor_new(TG_I32, 2, shape, dev, slot));
        tgl_check(L, tg_tensor_write(*slot, buf + (size_t)k * (size_t)(b * t), (size_t)(b * t) * sizeof *buf));
    }
    return 2;
}

/* token_file(bytes, path [, vocab]) -> first byte, token count, vocabulary size: the token file's bytes
 * validated (tg_tokens_parse); errors name path. */
static int o_token_file(lua_State *L)
{
    size_t len;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &len);
    const char *path = tgl_checkcstr(L, 2, "the path");
    int64_t vocab = -1;
    if (!lua_isnoneornil(L, 3)) {
        int isint;
        lua_Integer v = lua_tointegerx(L, 3, &isint);
        if (!isint || v < 1)
            tgl_check(L, tg_error(TG_EINVAL, "%s: the vocabulary size must be a positive integer, got %s", path,
                                  luaL_tolstring(L, 3, NULL)));
        vocab = (int64_t)v;
    }
    tg_token_file tf;
    tgl_check(L, tg_tokens_parse(s, len, path, vocab, &tf));
    lua_pushinteger(L, (lua_Integer)tf.first);
    lua_pushinteger(L, (lua_Integer)tf.ntok);
    lua_pushinteger(L, (lua_Integer)tf.vocab);
    return 3;
}

/* hash64(s...) -> 16 hex digits: FNV-1a (64-bit) over the strings and their lengths (cache file names). */
static int o_hash64(lua_State *L)
{
    uint64_t h = 1469598103934665603ull;
    int n = lua_gettop(L);
    for (int i = 1; i <= n; i++) {
        size_t len;
        const unsigned char *p = (const unsigned char *)luaL_checklstring(L, i, &len);
        for (size_t k = 0; k < len; k++) h = (h ^ p[k]) * 1099511628211ull;
        for (int k = 0; k < 8; k++) h = (h ^ ((len >> (8 * k)) & 0xFF)) * 1099511628211ull;
    }
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
    lua_pushstring(L, buf);
    return 1;
}

static const luaL_Reg data_funcs[] = {
    {"hash64", o_hash64},
    {"u16_scan", o_u16_scan},
    {"token_windows", o_token_windows},
    {"token_file", o_token_file},
    {NULL, NULL},
};

void tgl_data_funcs(lua_State *L) { luaL_setfuncs(L, data_funcs, 0); }
