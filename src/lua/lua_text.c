/* lua_text.c — core.tokenizer (byte-level and GPT-2 BPE tokenizers) and core.sampler (src/text). */
#include "lua/lua_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TGL_TOKENIZER "tegraph.Tokenizer"
#define TGL_SAMPLER "tegraph.Sampler"

struct tgl_tokenizer {
    tg_tokenizer *t;
};

struct tgl_sampler {
    tg_sample_opts o;
    uint64_t state;
};

static tg_tokenizer *tok_check(lua_State *L, int idx)
{
    struct tgl_tokenizer *u = luaL_checkudata(L, idx, TGL_TOKENIZER);
    if (!u->t) luaL_error(L, "tokenizer used after close");
    return u->t;
}

static int push_tokenizer(lua_State *L, tg_status (*make)(const char *, tg_tokenizer **), const char *dir)
{
    struct tgl_tokenizer *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->t = NULL;
    luaL_setmetatable(L, TGL_TOKENIZER);
    tgl_check(L, make ? make(dir, &u->t) : tg_tokenizer_bytes(&u->t));
    return 1;
}

/* tokenizer.bytes() */
static int l_bytes(lua_State *L) { return push_tokenizer(L, NULL, NULL); }

/* tokenizer.gpt2(dir) */
static int l_gpt2(lua_State *L) { return push_tokenizer(L, tg_tokenizer_gpt2, tgl_checkcstr(L, 1, "the path")); }

struct progress_ud {
    lua_State *L;
    int fn;     /* stack index of the Lua function */
    int failed; /* its error message is on the stack */
};

static int call_progress(void *p, size_t done, size_t total)
{
    struct progress_ud *u = p;
    lua_State *L = u->L;
    lua_pushvalue(L, u->fn);
    lua_pushinteger(L, (lua_Integer)done);
    lua_pushinteger(L, (lua_Integer)total);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
        u->failed = 1;
        return 1;
    }
    return 0;
}

/* tok:encode(text [, {out = "table" | "tensor" | "u16", progress = fn(done, total)}]) -> ids: a list of ids
 * (0-based), a 1-D i32 tensor on the CPU, or a string of little-endian uint16 (a .bin file's token bytes). */
static int t_encode(lua_State *L)
{
    tg_tokenizer *t = tok_check(L, 1);
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    const char *out = "table";
    struct progress_ud pu = {L, 0, 0};
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        tgl_check_keys(L, 3, "encode", "out, progress");
        lua_getfield(L, 3, "out");
        if (!lua_isnil(L, -1)) out = luaL_checkstring(L, -1);
        lua_getfield(L, 3, "progress");
        if (!lua_isnil(L, -1)) {
            luaL_checktype(L, -1, LUA_TFUNCTION);
            pu.fn = lua_gettop(L);
        }
    }
    if (strcmp(out, "table") && strcmp(out, "tensor") && strcmp(out, "u16"))
        return luaL_error(L, "encode: out = '%s': expected \"table\", \"tensor\" or \"u16\"", out);
    int32_t *ids;
    size_t n;
    tg_status st = tg_tokenizer_encode(t, s, len, &ids, &n, pu.fn ? call_progress : NULL, &pu);
    if (pu.failed) return lua_error(L);
    tgl_check(L, st);
    if (strcmp(out, "table") == 0) {
        lua_createtable(L, n > (size_t)INT32_MAX ? 0 : (int)n, 0);
        for (size_t i = 0; i < n; i++) {
            lua_pushinteger(L, ids[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        free(ids);
    } else if (strcmp(out, "u16") == 0) {
        luaL_Buffer b;
        unsigned char *p = (unsigned char *)luaL_buffinitsize(L, &b, 2 * n);
        for (size_t i = 0; i < n; i++) {
            if (ids[i] > 65535) {
                int32_t bad = ids[i];
                free(ids);
                return luaL_error(L, "encode: token %d (id %d) does not fit in uint16", (int)(i + 1), (int)bad);
            }
            p[2 * i] = (unsigned char)(ids[i] & 0xFF);
            p[2 * i + 1] = (unsigned char)(ids[i] >> 8);
        }
        free(ids);
        luaL_pushresultsize(&b, 2 * n);
    } else {
        int64_t shape[1] = {(int64_t)n};
        tg_tensor **slot = tgl_tensor_push(L);
        st = tg_tensor_new(TG_I32, 1, shape, (tg_device){TG_CPU, 0}, slot);
        if (st == TG_OK && n) st = tg_tensor_write(*slot, ids, n * sizeof *ids);
        free(ids);
        tgl_check(L, st);
    }
    return 1;
}

/* tok:decode(ids) -> string; ids a list of integers or an i32 tensor. */
static int t_decode(lua_State *L)
{
    tg_tokenizer *t = tok_check(L, 1);
    tg_tensor *x = tgl_tensor_test(L, 2);
    size_t n;
    int32_t *ids;
    if (x) {
        if (tg_tensor_dtype(x) != TG_I32) return luaL_error(L, "decode: ids must be an i32 tensor or a list of integers");
        n = (size_t)tg_tensor_numel(x);
        ids = lua_newuserdatauv(L, n * sizeof *ids + 1, 0);
        if (n) tgl_check(L, tg_tensor_read(x, ids, n * sizeof *ids));
    } else {
        luaL_checktype(L, 2, LUA_TTABLE);
        n = (size_t)luaL_len(L, 2);
        ids = lua_newuserdatauv(L, n * sizeof *ids + 1, 0);
        for (size_t i = 0; i < n; i++) {
            lua_rawgeti(L, 2, (lua_Integer)i + 1);
            int isint;
            lua_Integer v = lua_tointegerx(L, -1, &isint);
            lua_pop(L, 1);
            if (!isint || v < INT32_MIN || v > INT32_MAX)
                return luaL_error(L, "decode: token %d is not an integer id", (int)(i + 1));
            ids[i] = (int32_t)v;
        }
    }
    char *s;
    size_t len;
    tgl_check(L, tg_tokenizer_decode(t, ids, n, &s, &len));
    lua_pushlstring(L, s, len);
    free(s);
    return 1;
}

/* tok:token(id) -> its bytes */
static int t_token(lua_State *L)
{
    tg_tokenizer *t = tok_check(L, 1);
    lua_Integer id = luaL_checkinteger(L, 2);
    size_t len;
    const unsigned char *p = tg_tokenizer_token(t, (int64_t)id, &len);
    if (!p) return luaL_error(L, "token: id %I outside the vocabulary 0..%I", id, (lua_Integer)tg_tokenizer_vocab_size(t) - 1);
    lua_pushlstring(L, (const char *)p, len);
    return 1;
}

static int t_gc(lua_State *L)
{
    struct tgl_tokenizer *u = luaL_checkudata(L, 1, TGL_TOKENIZER);
    tg_tokenizer_free(u->t);
    u->t = NULL;
    return 0;
}

static const luaL_Reg tok_methods[] = {
    {"encode", t_encode},
    {"decode", t_decode},
    {"token", t_token},
    {"close", t_gc},
    {NULL, NULL},
};

/* Fields: vocab_size, eot (nil without one), kind ("bytes" | "gpt2"), num_merges; then the methods. */
static int t_index(lua_State *L)
{
    tg_tokenizer *t = tok_check(L, 1);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "vocab_size") == 0) lua_pushinteger(L, (lua_Integer)tg_tokenizer_vocab_size(t));
    else if (strcmp(k, "eot") == 0) {
        if (tg_tokenizer_eot(t) < 0) lua_pushnil(L);
        else lua_pushinteger(L, (lua_Integer)tg_tokenizer_eot(t));
    } else if (strcmp(k, "kind") == 0) lua_pushstring(L, tg_tokenizer_kind(t));
    else if (strcmp(k, "num_merges") == 0) lua_pushinteger(L, (lua_Integer)tg_tokenizer_num_merges(t));
    else lua_rawget(L, lua_upvalueindex(1));
    return 1;
}

static int t_tostring(lua_State *L)
{
    tg_tokenizer *t = tok_check(L, 1);
    lua_pushfstring(L, "tokenizer(%s, vocab %d)", tg_tokenizer_kind(t), (int)tg_tokenizer_vocab_size(t));
    return 1;
}

/* pieces(text) -> the pre-tokenizer's pieces of text, a list of strings (GPT-2's rule) */
static int l_pieces(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    size_t n = tg_tokenizer_pieces(s, len, NULL, 0);
    size_t *ends = lua_newuserdatauv(L, (n + 1) * sizeof *ends, 0);
    tg_tokenizer_pieces(s, len, ends, n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0, at = 0; i < n; at = ends[i], i++) {
        lua_pushlstring(L, s + at, ends[i] - at);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

/* ------------------------------------------------------------------ sampler */
/* sampler{temperature = 1, top_k = 0, top_p = 1, seed = 0} */
static int l_sampler(lua_State *L)
{
    tg_sample_opts o = {1.0, 0, 1.0};
    lua_Integer seed = 0;
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        lua_pushnil(L);
        while (lua_next(L, 1)) {
            const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "?";
            int ok = 1;
            if (strcmp(k, "temperature") == 0) o.temperature = lua_tonumberx(L, -1, &ok);
            else if (strcmp(k, "top_p") == 0) o.top_p = lua_tonumberx(L, -1, &ok);
            else if (strcmp(k, "top_k") == 0) o.top_k = (int64_t)lua_tointegerx(L, -1, &ok);
            else if (strcmp(k, "seed") == 0) seed = lua_tointegerx(L, -1, &ok);
            else return luaL_error(L, "sampler: unknown option '%s' (known: seed, temperature, top_k, top_p)", k);
            if (!ok) return luaL_error(L, "sampler: option '%s' must be a number%s", k,
                                       strcmp(k, "top_k") == 0 || strcmp(k, "seed") == 0 ? " (an integer)" : "");
            lua_pop(L, 1);
        }
    }
    if (!(o.temperature >= 0 && isfinite(o.temperature)))
        return luaL_error(L, "sampler: temperature %f must be finite and >= 0", o.temperature);
    if (!(o.top_p > 0 && o.top_p <= 1)) return luaL_error(L, "sampler: top_p %f must be in (0, 1]", o.top_p);
    if (o.top_k < 0) return luaL_error(L, "sampler: top_k %d must be >= 0 (0: all)", (int)o.top_k);
    struct tgl_sampler *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->o = o;
    u->state = (uint64_t)seed * 0x2545F4914F6CDD1Dull + 0x1234567ull;
    luaL_setmetatable(L, TGL_SAMPLER);
    return 1;
}

/* s:sample(logits [, n]) -> a list with one id per row of logits (last dimension V; only its first n columns,
 * default V, are candidates). */
static int s_sample(lua_State *L)
{
    struct tgl_sampler *u = luaL_checkudata(L, 1, TGL_SAMPLER);
    tg_tensor *x = tgl_tensor_check(L, 2);
    tg_dtype dt = tg_tensor_dtype(x);
    /* integer or FP8 codes are not logits (an FP8 tensor read without its scale is not even the values) */
    if (dt != TG_F32 && dt != TG_BF16)
        return luaL_error(L, "sample: the logits must be f32 or bf16, not %s", tg_dtype_name(dt));
    int nd = tg_tensor_ndim(x);
    int64_t v = tg_tensor_dim(x, nd - 1), rows = v ? tg_tensor_numel(x) / v : 0;
    lua_Integer n = luaL_optinteger(L, 3, (lua_Integer)v);
    if (n < 1 || n > v) return luaL_error(L, "sample: n = %I outside 1..%I (the logits' last dimension)", n, (lua_Integer)v);
    size_t total = (size_t)(rows * v);
    double *d = lua_newuserdatauv(L, total * (sizeof(double) + sizeof(float)) + 1, 0);
    float *f = (float *)(d + total);
    tgl_check(L, tg_tensor_read_f64(x, d, total));
    for (size_t i = 0; i < total; i++) f[i] = (float)d[i];
    lua_createtable(L, (int)rows, 0);
    for (int64_t r = 0; r < rows; r++) {
        int64_t tok;
        if (tg_sample_logits(f + r * v, (int64_t)n, &u->o, &u->state, &tok) != TG_OK) {
            const char *msg = tg_last_error();
            if (strncmp(msg, "sample: ", 8) == 0) msg += 8;
            return luaL_error(L, "sample: row %d of %d: %s", (int)r, (int)rows, msg);
        }
        lua_pushinteger(L, (lua_Integer)tok);
        lua_rawseti(L, -2, (lua_Integer)r + 1);
    }
    return 1;
}

static const luaL_Reg sampler_methods[] = {
    {"sample", s_sample},
    {NULL, NULL},
};

static const luaL_Reg text_funcs[] = {
    {"bytes", l_bytes},
    {"gpt2", l_gpt2},
    {"pieces", l_pieces},
    {NULL, NULL},
};

void tgl_open_text(lua_State *L)
{
    if (luaL_newmetatable(L, TGL_TOKENIZER)) {
        luaL_newlib(L, tok_methods);
        lua_pushcclosure(L, t_index, 1);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, t_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, t_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, TGL_SAMPLER)) {
        luaL_newlib(L, sampler_methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    luaL_newlib(L, text_funcs);
    lua_setfield(L, -2, "tokenizer");
    lua_pushcfunction(L, l_sampler);
    lua_setfield(L, -2, "sampler");
}
