/* lua_io.c — core.save / core.load and core.safetensors (src/io), atomic writes, small file-system calls, opt-in signals. */
#include "lua/lua_impl.h"
#include "core/checked.h"
#include "io/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TGL_SAFETENSORS "tegraph.SafeTensors"

struct tgl_st {
    tg_safetensors *f;
};

static tg_safetensors *st_check(lua_State *L, int idx)
{
    struct tgl_st *u = luaL_checkudata(L, idx, TGL_SAFETENSORS);
    if (!u->f) luaL_argerror(L, idx, "safetensors file used after close");
    return u->f;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A metadata value as a string: strings as they are, integers in decimal, floats with 17 digits. */
static const char *meta_value(lua_State *L, int idx, const char *path, const char *key)
{
    if (lua_type(L, idx) == LUA_TSTRING) return lua_tostring(L, idx);
    if (lua_isinteger(L, idx)) return lua_pushfstring(L, "%I", lua_tointeger(L, idx));
    if (lua_type(L, idx) == LUA_TNUMBER) {
        char buf[64];
        double x = (double)lua_tonumber(L, idx);
        for (int digits = 15; digits <= 17; digits++) { /* the shortest that reads back as x */
            snprintf(buf, sizeof buf, "%.*g", digits, x);
            if (strtod(buf, NULL) == x) break;
        }
        return lua_pushstring(L, buf);
    }
    if (lua_type(L, idx) == LUA_TBOOLEAN) return lua_toboolean(L, idx) ? "true" : "false";
    luaL_error(L, "%s: metadata '%s' is a %s (metadata values are strings, numbers or booleans)", path, key,
               luaL_typename(L, idx));
    return NULL;
}

/* tg.save(path, {name = tensor, ...} [, metadata]): one safetensors file, written atomically; tensors in name order. */
static int l_save(lua_State *L)
{
    const char *path = tgl_checkcstr(L, 1, "the path");
    luaL_checktype(L, 2, LUA_TTABLE);
    if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);
    int n = 0, nmeta = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            luaL_error(L, "%s: tensor keys must be names (strings), got a %s", path, luaL_typename(L, -2));
        size_t klen;
        const char *k = lua_tolstring(L, -2, &klen); /* a string key: no conversion, lua_next stays valid */
        if (strlen(k) != klen) luaL_error(L, "%s: the tensor name \"%s\\0...\" holds a NUL byte (names end there in the file)", path, k);
        const struct tgl_tensor *u = luaL_testudata(L, -1, TGL_TENSOR);
        if (!u) luaL_error(L, "%s: '%s' is a %s, not a tensor", path, lua_tostring(L, -2), luaL_typename(L, -1));
        if (!u->t) luaL_error(L, "%s: tensor '%s' was closed", path, lua_tostring(L, -2));
        n++;
        lua_pop(L, 1);
    }
    if (!lua_isnil(L, 3)) {
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -2) != LUA_TSTRING)
                luaL_error(L, "%s: metadata keys must be strings, got a %s", path, luaL_typename(L, -2));
            size_t klen, vlen = 0;
            const char *k = lua_tolstring(L, -2, &klen);
            if (strlen(k) != klen) luaL_error(L, "%s: the metadata key \"%s\\0...\" holds a NUL byte", path, k);
            if (lua_type(L, -1) == LUA_TSTRING && strlen(lua_tolstring(L, -1, &vlen)) != vlen)
                luaL_error(L, "%s: metadata '%s' holds a NUL byte", path, k);
            nmeta++;
            lua_pop(L, 1);
        }
    }
    /* the arrays live in userdata, so an error frees them */
    const char **names = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n + 1), 0);                   /* 4 */
    const tg_tensor **ts = lua_newuserdatauv(L, sizeof(tg_tensor *) * (size_t)(n + 1), 0);            /* 5 */
    const char **mk = lua_newuserdatauv(L, sizeof(char *) * (size_t)(nmeta + 1), 0);                  /* 6 */
    const char **mv = lua_newuserdatauv(L, sizeof(char *) * (size_t)(nmeta + 1), 0);                  /* 7 */
    lua_newtable(L); /* 8: keeps formatted metadata strings alive */
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        names[i++] = lua_tostring(L, -2);
        lua_pop(L, 1);
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (i = 0; i < n; i++) {
        lua_getfield(L, 2, names[i]);
        ts[i] = tgl_tensor_check(L, -1); /* (checked above) */
        lua_pop(L, 1); /* the table keeps it */
    }
    if (nmeta) {
        i = 0;
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            mk[i] = lua_tostring(L, -2);
            mv[i] = meta_value(L, -1, path, mk[i]);
            if (lua_gettop(L) > 10) lua_rawseti(L, 8, i + 1); /* a pushed string: anchored */
            i++;
            lua_pop(L, 1);
        }
        /* sorted by key, so a file's bytes depend only on its contents */
        for (int a = 1; a < nmeta; a++)
            for (int b = a; b > 0 && strcmp(mk[b - 1], mk[b]) > 0; b--) {
                const char *t = mk[b]; mk[b] = mk[b - 1]; mk[b - 1] = t;
                t = mv[b]; mv[b] = mv[b - 1]; mv[b - 1] = t;
            }
    }
    tgl_check(L, tg_safetensors_write(path, n, names, ts, nmeta, mk, mv));
    return 0;
}

static void push_metadata(lua_State *L, tg_safetensors *f)
{
    int m = tg_safetensors_metadata_count(f);
    lua_createtable(L, 0, m);
    for (int i = 0; i < m; i++) {
        const char *k = tg_safetensors_metadata_key(f, i);
        lua_pushstring(L, tg_safetensors_metadata(f, k));
        lua_setfield(L, -2, k);
    }
}

static tg_device opt_device(lua_State *L, int idx, const char *what)
{
    tg_device dev = tg_default_device();
    if (lua_type(L, idx) == LUA_TTABLE) {
        tgl_check_keys(L, idx, what, "device");
        if (lua_getfield(L, idx, "device") != LUA_TNIL) dev = tgl_device_check(L, -1);
        lua_pop(L, 1);
    } else if (!lua_isnoneornil(L, idx)) {
        luaL_typeerror(L, idx, "options table");
    }
    return dev;
}

/* tg.load(path [, {device=}]) -> {name = tensor, ...}, metadata */
static int l_load(lua_State *L)
{
    const char *path = tgl_checkcstr(L, 1, "the path");
    tg_device dev = opt_device(L, 2, "tg.load");
    struct tgl_st *u = lua_newuserdatauv(L, sizeof *u, 0); /* closes the file if an error unwinds */
    u->f = NULL;
    luaL_setmetatable(L, TGL_SAFETENSORS);
    tgl_check(L, tg_safetensors_open(path, &u->f));
    int n = tg_safetensors_count(u->f);
    lua_createtable(L, 0, n);
    for (int i = 0; i < n; i++) {
        const char *name = tg_safetensors_name(u->f, i);
        tg_tensor **slot = tgl_tensor_push(L);
        tgl_check(L, tg_safetensors_read(u->f, name, dev, slot));
        lua_setfield(L, -2, name);
    }
    push_metadata(L, u->f);
    tg_safetensors_close(u->f);
    u->f = NULL;
    return 2;
}

/* tg.safetensors.open(path) -> file: names(), info(name), read(name [, {device=}]), read_into(name, t), metadata(), close() */
static int l_st_open(lua_State *L)
{
    const char *path = tgl_checkcstr(L, 1, "the path");
    struct tgl_st *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->f = NULL;
    luaL_setmetatable(L, TGL_SAFETENSORS);
    tgl_check(L, tg_safetensors_open(path, &u->f));
    return 1;
}

static int st_names(lua_State *L)
{
    tg_safetensors *f = st_check(L, 1);
    int n = tg_safetensors_count(f);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, tg_safetensors_name(f, i));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* file:info(name) -> {dtype = load dtype, file_dtype = "F32", shape = {...}} or nil when absent */
static int st_info(lua_State *L)
{
    tg_safetensors *f = st_check(L, 1);
    const char *name = tgl_checkcstr(L, 2, "the tensor name");
    if (tg_safetensors_find(f, name) < 0) {
        lua_pushnil(L);
        return 1;
    }
    const char *fdt;
    tg_dtype dt;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    tgl_check(L, tg_safetensors_info(f, name, &fdt, &dt, &ndim, shape));
    lua_createtable(L, 0, 3);
    lua_pushstring(L, tg_dtype_name(dt));
    lua_setfield(L, -2, "dtype");
    lua_pushstring(L, fdt);
    lua_setfield(L, -2, "file_dtype");
    if (ndim > TG_MAX_DIMS) {
        lua_pushinteger(L, ndim);
        lua_setfield(L, -2, "ndim");
    } else {
        tgl_shape_push(L, ndim, shape);
        lua_setfield(L, -2, "shape");
    }
    return 1;
}

static int st_read(lua_State *L)
{
    tg_safetensors *f = st_check(L, 1);
    const char *name = tgl_checkcstr(L, 2, "the tensor name");
    tg_device dev = opt_device(L, 3, "safetensors:read");
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_safetensors_read(f, name, dev, slot));
    return 1;
}

static int st_read_into(lua_State *L)
{
    tg_safetensors *f = st_check(L, 1);
    const char *name = tgl_checkcstr(L, 2, "the tensor name");
    tgl_check(L, tg_safetensors_read_into(f, name, tgl_tensor_check(L, 3)));
    lua_settop(L, 3);
    return 1;
}

static int st_metadata(lua_State *L)
{
    push_metadata(L, st_check(L, 1));
    return 1;
}

static int st_gc(lua_State *L)
{
    struct tgl_st *u = luaL_checkudata(L, 1, TGL_SAFETENSORS);
    tg_safetensors_close(u->f);
    u->f = NULL;
    return 0;
}

/* tg.write_atomic(path, bytes): temporary name, fsync, rename, fsync of the directory */
static int l_write_atomic(lua_State *L)
{
    size_t n;
    const char *path = tgl_checkcstr(L, 1, "the path");
    const char *s = luaL_checklstring(L, 2, &n);
    tgl_check(L, tg_write_file_atomic(path, s, n));
    return 0;
}

/* fs.mkdir(path) -> true (made) or false (a directory exists there); raises otherwise */
static int fs_mkdir(lua_State *L)
{
    const char *path = tgl_checkcstr(L, 1, "the path");
    if (mkdir(path, 0755) == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    struct stat sb;
    if (errno == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        lua_pushboolean(L, 0);
        return 1;
    }
    return luaL_error(L, "%s: cannot make the directory: %s", path, strerror(errno));
}

/* fs.isdir(path) -> whether a directory is there */
static int fs_isdir(lua_State *L)
{
    struct stat sb;
    lua_pushboolean(L, stat(tgl_checkcstr(L, 1, "the path"), &sb) == 0 && S_ISDIR(sb.st_mode));
    return 1;
}

/* fs.list(dir) -> sorted names of its entries (without . and ..) */
static int fs_list(lua_State *L)
{
    const char *path = tgl_checkcstr(L, 1, "the path");
    DIR *d = opendir(path);
    if (!d) return luaL_error(L, "%s: cannot list the directory: %s", path, strerror(errno));
    lua_newtable(L);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        lua_pushstring(L, e->d_name);
        lua_rawseti(L, -2, ++n);
    }
    closedir(d);
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "sort");
    lua_pushvalue(L, -3);
    lua_call(L, 1, 0);
    lua_pop(L, 1);
    return 1;
}

/* fs.remove_dir(dir): removes a directory of plain files (a checkpoint); refuses subdirectories */
static int fs_remove_dir(lua_State *L)
{
    const char *path = tgl_checkcstr(L, 1, "the path");
    DIR *d = opendir(path);
    if (!d) return luaL_error(L, "%s: cannot open the directory: %s", path, strerror(errno));
    struct dirent *e;
    luaL_Buffer b;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        luaL_buffinit(L, &b);
        luaL_addstring(&b, path);
        luaL_addchar(&b, '/');
        luaL_addstring(&b, e->d_name);
        luaL_pushresult(&b);
        const char *f = lua_tostring(L, -1);
        if (unlink(f) != 0) {
            int err = errno;
            closedir(d);
            return luaL_error(L, "%s: cannot remove: %s", f, strerror(err));
        }
        lua_pop(L, 1);
    }
    closedir(d);
    if (rmdir(path) != 0) return luaL_error(L, "%s: cannot remove the directory: %s", path, strerror(errno));
    return 0;
}

/* fs.sync_dir(dir): fsync of a directory (after renaming entries in it) */
static int fs_sync_dir(lua_State *L)
{
    const char *path = tgl_checkcstr(L, 1, "the path");
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* O_DIRECTORY: never waits on a FIFO of that name */
    if (fd < 0 || fsync(fd) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        return luaL_error(L, "%s: cannot sync the directory: %s", path, strerror(err));
    }
    close(fd);
    return 0;
}

static int fs_file_close(lua_State *L)
{
    luaL_Stream *p = luaL_checkudata(L, 1, LUA_FILEHANDLE);
    return luaL_fileresult(L, fclose(p->f) == 0, NULL);
}

/* fs.open_read(path) -> a Lua file (as io.open(path, "rb")), or nil, "PATH: why", errno like io.open. A FIFO,
 * socket or device is refused ("PATH: not a regular file (a FIFO)") instead of waited on: io.open of a FIFO
 * without a writer never returns. A directory opens as with io.open (its reads fail). */
static int fs_open_read(lua_State *L)
{
    const char *path = tgl_checkcstr(L, 1, "the path");
    luaL_Stream *p = lua_newuserdatauv(L, sizeof *p, 0); /* +1 */
    p->f = NULL;
    p->closef = NULL; /* closed until the file is open */
    luaL_setmetatable(L, LUA_FILEHANDLE);
    int fd, err;
    size_t size;
    if (tg_file_open_read(path, 1, &fd, &size, &err) != TG_OK) {
        if (err) { /* the open failed: io.open's results */
            errno = err;
            return luaL_fileresult(L, 0, path);
        }
        lua_pushnil(L);
        lua_pushstring(L, tg_last_error()); /* "PATH: not a regular file (a FIFO)" */
        return 2;
    }
    p->f = fdopen(fd, "rb");
    if (p->f == NULL) {
        int err = errno;
        close(fd);
        errno = err;
        return luaL_fileresult(L, 0, path);
    }
    p->closef = fs_file_close;
    return 1;
}

/* signals.catch([on = true]): SIGINT / SIGTERM set a flag (tg_signals_catch) */
static int sig_catch(lua_State *L)
{
    tgl_check(L, tg_signals_catch(lua_isnone(L, 1) ? 1 : lua_toboolean(L, 1)));
    return 0;
}

/* signals.pending() -> "SIGINT" / "SIGTERM" once one came, else nil */
static int sig_pending(lua_State *L)
{
    int s = tg_signals_pending();
    if (!s) lua_pushnil(L);
    else lua_pushstring(L, s == SIGINT ? "SIGINT" : s == SIGTERM ? "SIGTERM" : "signal");
    return 1;
}

/* tg.from_bytes(bytes, dtype, shape [, {device=}]) -> a tensor of those little-endian elements */
static int l_from_bytes(lua_State *L)
{
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    tg_dtype dt = tgl_dtype_check(L, 2);
    int64_t shape[TG_MAX_DIMS];
    int next;
    int ndim = tgl_shape_check(L, 3, shape, &next);
    tg_device dev = opt_device(L, next, "tg.from_bytes");
    int64_t numel = 1, need = 0;
    int fits = 1; /* the shape is the caller's: its element and byte counts are multiplied with checks */
    for (int d = 0; d < ndim && fits; d++) fits = tg_mul_i64(numel, shape[d], &numel);
    if (fits) fits = tg_mul_i64(numel, (int64_t)tg_dtype_size(dt), &need);
    if (!fits) return luaL_error(L, "from_bytes: the shape's size in bytes does not fit in 64 bits (%I bytes given)", (lua_Integer)n);
    if ((uint64_t)need != n)
        return luaL_error(L, "from_bytes: %I bytes for %I %s elements (need %I)", (lua_Integer)n, (lua_Integer)numel,
                          tg_dtype_name(dt), (lua_Integer)need);
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_tensor_new(dt, ndim, shape, dev, slot));
    tgl_check(L, tg_tensor_write(*slot, s, n));
    return 1;
}

/* tg.host_transpose(t) -> a new (n, m) tensor on t's device with t (m, n) transposed: a blocking host
 * copy for file conversions (weights stored [in, out]), not a stream op */
static int l_host_transpose(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    if (tg_tensor_ndim(t) != 2) return luaL_error(L, "host_transpose: needs a 2-D tensor, got %d dimensions", tg_tensor_ndim(t));
    int64_t m = tg_tensor_dim(t, 0), n = tg_tensor_dim(t, 1), shape[2] = {n, m};
    size_t es = tg_dtype_size(tg_tensor_dtype(t)), bytes = (size_t)(m * n) * es;
    char *a = lua_newuserdatauv(L, bytes * 2 + 1, 0); /* freed by the collector, also on errors */
    char *b = a + bytes;
    tgl_check(L, tg_tensor_read(t, a, bytes));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) memcpy(b + (size_t)(j * m + i) * es, a + (size_t)(i * n + j) * es, es);
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_tensor_new(tg_tensor_dtype(t), 2, shape, tg_tensor_device(t), slot));
    tgl_check(L, tg_tensor_write(*slot, b, bytes));
    return 1;
}

static const luaL_Reg st_methods[] = {
    {"names", st_names}, {"info", st_info}, {"read", st_read}, {"read_into", st_read_into},
    {"metadata", st_metadata}, {"close", st_gc}, {NULL, NULL},
};

void tgl_open_io(lua_State *L)
{
    if (luaL_newmetatable(L, TGL_SAFETENSORS)) {
        luaL_newlib(L, st_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, st_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, st_gc);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, l_save);
    lua_setfield(L, -2, "save");
    lua_pushcfunction(L, l_load);
    lua_setfield(L, -2, "load");
    lua_pushcfunction(L, l_from_bytes);
    lua_setfield(L, -2, "from_bytes");
    lua_pushcfunction(L, l_host_transpose);
    lua_setfield(L, -2, "host_transpose");
    lua_pushcfunction(L, l_write_atomic);
    lua_setfield(L, -2, "write_atomic");
    lua_newtable(L);
    lua_pushcfunction(L, l_st_open);
    lua_setfield(L, -2, "open");
    lua_setfield(L, -2, "safetensors");
    static const luaL_Reg fs[] = {{"mkdir", fs_mkdir}, {"isdir", fs_isdir}, {"list", fs_list},
                                  {"remove_dir", fs_remove_dir}, {"sync_dir", fs_sync_dir},
                                  {"open_read", fs_open_read}, {NULL, NULL}};
    luaL_newlib(L, fs);
    lua_setfield(L, -2, "fs");
    static const luaL_Reg sig[] = {{"catch", sig_catch}, {"pending", sig_pending}, {NULL, NULL}};
    luaL_newlib(L, sig);
    lua_setfield(L, -2, "signals");
}
