/* safetensors.c — the safetensors file format: atomic writing, mapped and fully validated reading. */
#include "core/core.h"
#include "io/file.h"
#include "io/json.h"
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (100u << 20) /* bytes of JSON a header may have */
#define MAX_FILE_DIMS 8

/* File dtypes: name, element size, the tegraph dtype it loads as, whether it is a float (FP8 codes: 2, they
 * load only as themselves: their values need the scale the file's user keeps). */
enum { FD_F32, FD_BF16, FD_F16, FD_I32, FD_U16, FD_I64, FD_U8, FD_F8_E4M3, FD_F8_E5M2, FD_COUNT };
static const struct {
    const char *name;
    size_t size;
    tg_dtype load;
    int is_float;
} fdtypes[FD_COUNT] = {
    [FD_F32] = {"F32", 4, TG_F32, 1}, [FD_BF16] = {"BF16", 2, TG_BF16, 1}, [FD_F16] = {"F16", 2, TG_F32, 1},
    [FD_I32] = {"I32", 4, TG_I32, 0}, [FD_U16] = {"U16", 2, TG_U16, 0},  [FD_I64] = {"I64", 8, TG_I32, 0},
    [FD_U8] = {"U8", 1, TG_I32, 0},    [FD_F8_E4M3] = {"F8_E4M3", 1, TG_E4M3, 2}, [FD_F8_E5M2] = {"F8_E5M2", 1, TG_E5M2, 2},
};

/* The file dtype that stores a tegraph dtype as it is. */
static int fd_of(tg_dtype dt)
{
    switch (dt) {
    case TG_F32: return FD_F32;
    case TG_BF16: return FD_BF16;
    case TG_F16: return FD_F16;
    case TG_I32: return FD_I32;
    case TG_U16: return FD_U16;
    case TG_E4M3: return FD_F8_E4M3;
    case TG_E5M2: return FD_F8_E5M2;
    default: return -1;
    }
}

struct st_entry {
    char *name;
    int fd;
    int ndim;
    int64_t shape[MAX_FILE_DIMS];
    int64_t numel;
    size_t begin, end; /* into the data */
};

struct tg_safetensors {
    char *path;
    const unsigned char *map;
    size_t size;
    int mapped; /* map is the file mapped (unmapped on close), not the caller's bytes */
    int fd;     /* the mapped file, open until close: tensor data is read from it with pread, not through the
                 * mapping, so a file truncated while open gives an error instead of SIGBUS; -1 for bytes */
    const unsigned char *data; /* map + 8 + header length */
    size_t data_len;
    int n;
    struct st_entry *e;
    int nmeta;
    char **meta_keys, **meta_values;
};

/* ------------------------------------------------------------------ atomic writes */

static tg_status write_all(int fd, const void *buf, size_t n, const char *path)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return tg_error(TG_EIO, "%s: cannot write: %s", path, strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return TG_OK;
}

/* fsync of the directory that holds path, so a rename in it is durable. */
static tg_status sync_parent(const char *path)
{
    char *dir = strdup(path);
    if (!dir) return tg_error(TG_ENOMEM, "out of host memory");
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    tg_status st = TG_OK;
    if (fd < 0 || fsync(fd) != 0) st = tg_error(TG_EIO, "%s: cannot sync the directory: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return st;
}

/* A writer: open creates "path.tmp"; commit fsyncs, closes and renames it over path. */
struct atomic_file {
    char *tmp;
    int fd;
};

static tg_status atomic_open(struct atomic_file *a, const char *path)
{
    size_t n = strlen(path) + 5;
    a->tmp = malloc(n);
    if (!a->tmp) return tg_error(TG_ENOMEM, "out of host memory");
    snprintf(a->tmp, n, "%s.tmp", path);
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        tg_status st = tg_error(TG_EIO, "%s: cannot create: %s", a->tmp, strerror(errno));
        free(a->tmp);
        return st;
    }
    return TG_OK;
}

static void atomic_abort(struct atomic_file *a)
{
    close(a->fd);
    unlink(a->tmp);
    free(a->tmp);
}

static tg_status atomic_commit(struct atomic_file *a, const char *path)
{
    tg_status st = TG_OK;
    if (fsync(a->fd) != 0) st = tg_error(TG_EIO, "%s: cannot sync: %s", a->tmp, strerror(errno));
    if (close(a->fd) != 0 && st == TG_OK) st = tg_error(TG_EIO, "%s: cannot close: %s", a->tmp, strerror(errno));
    if (st == TG_OK && rename(a->tmp, path) != 0)
        st = tg_error(TG_EIO, "%s: cannot rename %s over it: %s", path, a->tmp, strerror(errno));
    if (st != TG_OK) unlink(a->tmp);
    free(a->tmp);
    if (st == TG_OK) st = sync_parent(path);
    return st;
}

tg_status tg_write_file_atomic(const char *path, const void *data, size_t len)
{
    if (!path || !*path) return tg_error(TG_EINVAL, "write_file_atomic: no path");
    struct atomic_file a;
    TG_TRY(atomic_open(&a, path));
    tg_status st = write_all(a.fd, data, len, a.tmp);
    if (st != TG_OK) {
        atomic_abort(&a);
        return st;
    }
    return atomic_commit(&a, path);
}

/* ------------------------------------------------------------------ writing */

static void put(char *buf, size_t cap, size_t *len, const char *s)
{
    size_t k = strlen(s);
    if (*len + k <= cap) memcpy(buf + *len, s, k);
    *len += k;
}

/* The header JSON (unpadded) into buf (cap bytes); returns its length. */
static size_t header_json(char *buf, size_t cap, int n, const char *const *names, const tg_tensor *const *ts, int nmeta,
                          const char *const *mk, const char *const *mv)
{
    size_t len = 0, off = 0;
    char num[64];
    put(buf, cap, &len, "{");
    if (nmeta > 0) {
        put(buf, cap, &len, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) put(buf, cap, &len, ",");
            tg_json_quote(buf, cap, &len, mk[i]);
            put(buf, cap, &len, ":");
            tg_json_quote(buf, cap, &len, mv[i]);
        }
        put(buf, cap, &len, "}");
    }
    for (int i = 0; i < n; i++) {
        if (i || nmeta > 0) put(buf, cap, &len, ",");
        tg_json_quote(buf, cap, &len, names[i]);
        put(buf, cap, &len, ":{\"dtype\":\"");
        put(buf, cap, &len, fdtypes[fd_of(ts[i]->dtype)].name);
        put(buf, cap, &len, "\",\"shape\":[");
        for (int d = 0; d < ts[i]->ndim; d++) {
            snprintf(num, sizeof num, d ? ",%lld" : "%lld", (long long)ts[i]->shape[d]);
            put(buf, cap, &len, num);
        }
        size_t bytes = tg_tensor_bytes(ts[i]);
        snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        put(buf, cap, &len, num);
        off += bytes;
    }
    put(buf, cap, &len, "}");
    return len;
}

tg_status tg_safetensors_write(const char *path, int n, const char *const *names, const tg_tensor *const *tensors,
                               int nmeta, const char *const *meta_keys, const char *const *meta_values)
{
    if (!path || !*path) return tg_error(TG_EINVAL, "safetensors_write: no path");
    if (n < 0 || nmeta < 0) return tg_error(TG_EINVAL, "%s: negative tensor or metadata count", path);
    if (n > 0 && (!names || !tensors)) return tg_error(TG_EINVAL, "%s: %s is NULL (%d tensors)", path, !names ? "names" : "tensors", n);
    if (nmeta > 0 && (!meta_keys || !meta_values))
        return tg_error(TG_EINVAL, "%s: %s is NULL (%d metadata entries)", path, !meta_keys ? "meta_keys" : "meta_values", nmeta);
    for (int i = 0; i < n; i++) {
        if (!names[i] || !*names[i]) return tg_error(TG_EINVAL, "%s: tensor %d has no name", path, i + 1);
        if (strcmp(names[i], "__metadata__") == 0)
            return tg_error(TG_EINVAL, "%s: a tensor may not be named \"__metadata__\"", path);
        if (!tensors[i]) return tg_error(TG_EINVAL, "%s: tensor '%s' is missing", path, names[i]);
        if (fd_of(tensors[i]->dtype) < 0)
            return tg_error(TG_EINVAL, "%s: tensor '%s' has dtype %s, which safetensors files do not hold", path, names[i],
                            tg_dtype_name(tensors[i]->dtype));
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0) return tg_error(TG_EINVAL, "%s: tensor name '%s' given twice", path, names[i]);
    }
    for (int i = 0; i < nmeta; i++) {
        if (!meta_keys[i] || !meta_values[i]) return tg_error(TG_EINVAL, "%s: metadata entry %d is missing", path, i + 1);
        for (int j = 0; j < i; j++)
            if (strcmp(meta_keys[i], meta_keys[j]) == 0)
                return tg_error(TG_EINVAL, "%s: metadata key '%s' given twice", path, meta_keys[i]);
    }
    size_t hlen = header_json(NULL, 0, n, names, tensors, nmeta, meta_keys, meta_values);
    size_t padded = (hlen + 8 + 7) / 8 * 8 - 8; /* data starts 8-byte aligned */
    char *hdr = malloc(8 + padded);
    if (!hdr) return tg_error(TG_ENOMEM, "out of host memory");
    header_json(hdr + 8, hlen, n, names, tensors, nmeta, meta_keys, meta_values);
    memset(hdr + 8 + hlen, ' ', padded - hlen);
    for (int b = 0; b < 8; b++) hdr[b] = (char)((uint64_t)padded >> (8 * b));
    struct atomic_file a;
    tg_status st = atomic_open(&a, path);
    if (st != TG_OK) {
        free(hdr);
        return st;
    }
    st = write_all(a.fd, hdr, 8 + padded, a.tmp);
    free(hdr);
    for (int i = 0; i < n && st == TG_OK; i++) {
        size_t bytes = tg_tensor_bytes(tensors[i]);
        if (bytes == 0) continue;
        void *buf = malloc(bytes);
        if (!buf) {
            st = tg_error(TG_ENOMEM, "out of host memory");
            break;
        }
        st = tg_tensor_read(tensors[i], buf, bytes);
        if (st != TG_OK) st = tg_error_prefix(st, "%s: tensor '%s'", path, names[i]);
        if (st == TG_OK) st = write_all(a.fd, buf, bytes, a.tmp);
        free(buf);
    }
    if (st != TG_OK) {
        atomic_abort(&a);
        return st;
    }
    return atomic_commit(&a, path);
}

/* ------------------------------------------------------------------ reading */

void tg_safetensors_close(tg_safetensors *f)
{
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->e[i].name);
    free(f->e);
    for (int i = 0; i < f->nmeta; i++) free(f->meta_keys[i]), free(f->meta_values[i]);
    free(f->meta_keys);
    free(f->meta_values);
    if (f->mapped) munmap((void *)f->map, f->size);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

static int cmp_begin(const void *a, const void *b)
{
    const struct st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* One tensor entry of the header: checks and fills e. */
static tg_status parse_entry(tg_safetensors *f, const char *name, const tg_json *v, struct st_entry *e)
{
    const char *path = f->path;
    if (v->type != TG_JSON_OBJECT) return tg_error(TG_EINVAL, "%s: tensor '%s': its header entry is not an object", path, name);
    for (size_t k = 0; k < v->len; k++)
        if (strcmp(v->keys[k], "dtype") && strcmp(v->keys[k], "shape") && strcmp(v->keys[k], "data_offsets"))
            return tg_error(TG_EINVAL, "%s: tensor '%s': unknown field \"%s\" in its header entry", path, name, v->keys[k]);
    const tg_json *dt = tg_json_get(v, "dtype"), *sh = tg_json_get(v, "shape"), *off = tg_json_get(v, "data_offsets");
    if (!dt || !sh || !off)
        return tg_error(TG_EINVAL, "%s: tensor '%s': header entry lacks \"%s\"", path, name,
                        !dt ? "dtype" : !sh ? "shape" : "data_offsets");
    if (dt->type != TG_JSON_STRING) return tg_error(TG_EINVAL, "%s: tensor '%s': dtype is not a string", path, name);
    e->fd = -1;
    for (int k = 0; k < FD_COUNT; k++)
        if (strcmp(dt->str, fdtypes[k].name) == 0) e->fd = k;
    if (e->fd < 0)
        return tg_error(TG_EINVAL, "%s: tensor '%s': unknown or unsupported dtype \"%s\" (tegraph reads F32, BF16, F16, I32, U16, I64, U8)",
                        path, name, dt->str);
    if (sh->type != TG_JSON_ARRAY) return tg_error(TG_EINVAL, "%s: tensor '%s': shape is not an array", path, name);
    if (sh->len > MAX_FILE_DIMS)
        return tg_error(TG_EINVAL, "%s: tensor '%s': shape has %zu dimensions (at most %d)", path, name, sh->len, MAX_FILE_DIMS);
    e->ndim = (int)sh->len;
    e->numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        const tg_json *x = &sh->items[d];
        if (x->type != TG_JSON_INT || x->i < 0)
            return tg_error(TG_EINVAL, "%s: tensor '%s': shape entry %d is not a non-negative integer", path, name, d + 1);
        e->shape[d] = x->i;
        if (x->i > 0 && e->numel > INT64_MAX / 16 / x->i)
            return tg_error(TG_EINVAL, "%s: tensor '%s': shape is too large", path, name);
        e->numel *= x->i;
    }
    if (off->type != TG_JSON_ARRAY || off->len != 2 || off->items[0].type != TG_JSON_INT || off->items[1].type != TG_JSON_INT)
        return tg_error(TG_EINVAL, "%s: tensor '%s': data_offsets is not [begin, end] (two integers)", path, name);
    int64_t b = off->items[0].i, en = off->items[1].i;
    if (b < 0 || en < b)
        return tg_error(TG_EINVAL, "%s: tensor '%s': data_offsets [%lld, %lld] is not a range", path, name, (long long)b,
                        (long long)en);
    if ((uint64_t)en > f->data_len)
        return tg_error(TG_EINVAL, "%s: tensor '%s': data_offsets [%lld, %lld] end past the %zu bytes of data (truncated file?)",
                        path, name, (long long)b, (long long)en, f->data_len);
    uint64_t want = (uint64_t)e->numel * fdtypes[e->fd].size;
    if ((uint64_t)(en - b) != want)
        return tg_error(TG_EINVAL, "%s: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes but its shape and %s need %llu",
                        path, name, (long long)b, (long long)en, (long long)(en - b), fdtypes[e->fd].name,
                        (unsigned long long)want);
    e->begin = (size_t)b;
    e->end = (size_t)en;
    return TG_OK;
}

static tg_status parse_header(tg_safetensors *f, const tg_json *root)
{
    const char *path = f->path;
    if (root->type != TG_JSON_OBJECT) return tg_error(TG_EINVAL, "%s: the header is not a JSON object", path);
    f->e = calloc(root->len ? root->len : 1, sizeof *f->e);
    if (!f->e) return tg_error(TG_ENOMEM, "out of host memory");
    for (size_t i = 0; i < root->len; i++) {
        const char *key = root->keys[i];
        const tg_json *v = &root->items[i];
        if (strcmp(key, "__metadata__") == 0) {
            if (v->type != TG_JSON_OBJECT) return tg_error(TG_EINVAL, "%s: __metadata__ is not an object", path);
            f->meta_keys = calloc(v->len ? v->len : 1, sizeof(char *));
            f->meta_values = calloc(v->len ? v->len : 1, sizeof(char *));
            if (!f->meta_keys || !f->meta_values) return tg_error(TG_ENOMEM, "out of host memory");
            for (size_t k = 0; k < v->len; k++) {
                if (v->items[k].type != TG_JSON_STRING)
                    return tg_error(TG_EINVAL, "%s: __metadata__ value of \"%s\" is not a string", path, v->keys[k]);
                f->meta_keys[k] = strdup(v->keys[k]);
                f->meta_values[k] = strdup(v->items[k].str);
                f->nmeta++;
                if (!f->meta_keys[k] || !f->meta_values[k]) return tg_error(TG_ENOMEM, "out of host memory");
            }
            continue;
        }
        struct st_entry *e = &f->e[f->n];
        e->name = strdup(key);
        if (!e->name) return tg_error(TG_ENOMEM, "out of host memory");
        f->n++;
        TG_TRY(parse_entry(f, key, v, e));
    }
    qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_begin);
    size_t at = 0;
    const char *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        struct st_entry *e = &f->e[i];
        if (e->begin == e->end && e->begin <= at) continue; /* empty tensors take no bytes */
        if (e->begin < at)
            return tg_error(TG_EINVAL, "%s: tensor '%s': data_offsets [%zu, %zu] overlap those of tensor '%s' (which end at %zu)",
                            path, e->name, e->begin, e->end, prev, at);
        if (e->begin > at)
            return tg_error(TG_EINVAL, "%s: tensor '%s': data_offsets [%zu, %zu] leave bytes [%zu, %zu) of the data unused",
                            path, e->name, e->begin, e->end, at, e->begin);
        at = e->end;
        prev = e->name;
    }
    if (at != f->data_len)
        return tg_error(TG_EINVAL, "%s: %zu bytes of data after the last tensor's (its data is %zu bytes, the tensors use %zu)",
                        path, f->data_len - at, f->data_len, at);
    return TG_OK;
}

/* A new reader named path (its bytes are set by the caller). */
static tg_status reader_new(const char *path, tg_safetensors **out)
{
    *out = NULL;
    if (!path) return tg_error(TG_EINVAL, "safetensors_open: no path");
    tg_safetensors *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    f->fd = -1;
    *out = f;
    return TG_OK;
}

/* Validates the bytes f->map [0, f->size): the header length, the header, the data's layout. */
static tg_status parse_file(tg_safetensors *f)
{
    const char *path = f->path;
    if (f->size < 8)
        return tg_error(TG_EINVAL, "%s: truncated: %zu bytes, shorter than the 8-byte header length of a safetensors file", path,
                        f->size);
    uint64_t hlen = 0;
    for (int b = 7; b >= 0; b--) hlen = hlen << 8 | f->map[b];
    if (hlen > MAX_HEADER)
        return tg_error(TG_EINVAL, "%s: header length %llu is over %u bytes: not a safetensors file", path,
                        (unsigned long long)hlen, MAX_HEADER);
    if (hlen > f->size - 8)
        return tg_error(TG_EINVAL, "%s: truncated: the header length says %llu bytes but only %zu follow", path,
                        (unsigned long long)hlen, f->size - 8);
    if (hlen < 2)
        return tg_error(TG_EINVAL, "%s: header of %llu bytes is too short for a JSON object", path, (unsigned long long)hlen);
    f->data = f->map + 8 + hlen;
    f->data_len = f->size - 8 - (size_t)hlen;
    tg_json root;
    char err[256];
    if (tg_json_parse((const char *)f->map + 8, (size_t)hlen, 4, &root, err, sizeof err) != 0)
        return tg_error(TG_EINVAL, "%s: header JSON is broken: %s", path, err);
    tg_status st = parse_header(f, &root);
    tg_json_free(&root);
    return st;
}

tg_status tg_safetensors_open(const char *path, tg_safetensors **out)
{
    TG_NONNULL(out, "out");
    *out = NULL;
    tg_safetensors *f;
    TG_TRY(reader_new(path, &f));
    int fd;
    tg_status st = tg_file_open_read(path, 0, &fd, &f->size, NULL); /* a FIFO or a device is refused, not waited on */
    if (st == TG_OK) {
        if (f->size > 0) {
            void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m == MAP_FAILED) st = tg_error(TG_EIO, "%s: cannot map: %s", path, strerror(errno));
            else f->map = m, f->mapped = 1;
        }
    }
    if (fd >= 0 && f->mapped) f->fd = fd;
    else if (fd >= 0) close(fd);
    if (st == TG_OK) st = parse_file(f);
    if (st != TG_OK) {
        tg_safetensors_close(f);
        return st;
    }
    *out = f;
    return TG_OK;
}

tg_status tg_safetensors_open_memory(const void *bytes, size_t len, const char *name, tg_safetensors **out)
{
    tg_safetensors *f;
    TG_TRY(reader_new(name, &f));
    f->map = bytes;
    f->size = bytes ? len : 0;
    tg_status st = parse_file(f);
    if (st != TG_OK) {
        tg_safetensors_close(f);
        return st;
    }
    *out = f;
    return TG_OK;
}

int tg_safetensors_count(const tg_safetensors *f) { return f ? f->n : 0; }

const char *tg_safetensors_name(const tg_safetensors *f, int i) { return f && i >= 0 && i < f->n ? f->e[i].name : NULL; }

int tg_safetensors_find(const tg_safetensors *f, const char *name)
{
    for (int i = 0; f && name && i < f->n; i++)
        if (strcmp(f->e[i].name, name) == 0) return i;
    return -1;
}

static tg_status entry_of(const tg_safetensors *f, const char *name, const struct st_entry **e)
{
    if (!f) return tg_error(TG_EINVAL, "safetensors: the file handle is NULL");
    int i = tg_safetensors_find(f, name);
    if (i < 0) return tg_error(TG_EINVAL, "%s: no tensor '%s' in the file", f ? f->path : "?", name ? name : "(null)");
    *e = &f->e[i];
    return TG_OK;
}

tg_status tg_safetensors_info(const tg_safetensors *f, const char *name, const char **file_dtype, tg_dtype *dtype, int *ndim,
                              int64_t shape[TG_MAX_DIMS])
{
    const struct st_entry *e;
    TG_TRY(entry_of(f, name, &e));
    if (file_dtype) *file_dtype = fdtypes[e->fd].name;
    if (dtype) *dtype = fdtypes[e->fd].load;
    if (ndim) *ndim = e->ndim;
    if (shape)
        for (int d = 0; d < e->ndim && d < TG_MAX_DIMS; d++) shape[d] = e->shape[d];
    return TG_OK;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = h >> 10 & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | man << 13;
    else if (exp) u = sign | (exp + 112) << 23 | man << 13;
    else if (!man) u = sign;
    else { /* subnormal: normalise */
        exp = 113;
        while (!(man & 0x400)) man <<= 1, exp--;
        u = sign | exp << 23 | (man & 0x3ff) << 13;
    }
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static float load_float(const unsigned char *p, int fd)
{
    if (fd == FD_F32) {
        float x;
        memcpy(&x, p, 4);
        return x;
    }
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    return fd == FD_BF16 ? tg_bf16_to_f32(h) : f16_to_f32(h);
}

static int64_t load_int(const unsigned char *p, int fd)
{
    switch (fd) {
    case FD_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    case FD_I64: { int64_t x; memcpy(&x, p, 8); return x; }
    case FD_U16: return p[0] | p[1] << 8;
    default: return p[0];
    }
}

/* Shapes equal once leading 1s are dropped (a scalar fits (1)). */
static int shapes_match(const struct st_entry *e, const tg_tensor *t)
{
    int a = 0, b = 0;
    while (a < e->ndim && e->shape[a] == 1 && e->ndim - a > t->ndim) a++;
    while (b < t->ndim && t->shape[b] == 1 && t->ndim - b > e->ndim - a) b++;
    if (e->ndim - a != t->ndim - b) return e->numel == 1 && tg_numel_of(t->ndim, t->shape) == 1;
    for (; a < e->ndim; a++, b++)
        if (e->shape[a] != t->shape[b]) return 0;
    return 1;
}

static void shape_str(const struct st_entry *e, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < e->ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)e->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* The bytes of entry e, read from the file (caller frees): what the mapping held when the file was opened,
 * or an error naming the file and the tensor where the file has since become shorter. */
static tg_status read_data(const tg_safetensors *f, const char *name, const struct st_entry *e, unsigned char **out)
{
    const size_t bytes = (size_t)(e->end - e->begin);
    const off_t at = (off_t)(f->data - f->map) + (off_t)e->begin;
    unsigned char *buf = malloc(bytes ? bytes : 1);
    if (!buf) return tg_error(TG_ENOMEM, "out of host memory (%zu bytes for tensor '%s' of %s)", bytes, name, f->path);
    for (size_t got = 0; got < bytes;) {
        ssize_t k = pread(f->fd, buf + got, bytes - got, at + (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            tg_status st = k < 0 ? tg_error(TG_EIO, "%s: tensor '%s': read failed: %s", f->path, name, strerror(errno))
                                 : tg_error(TG_EIO,
                                            "%s: tensor '%s': the file ends before the tensor's bytes [%lld, %lld) "
                                            "(it was %zu bytes when opened: truncated or rewritten since)",
                                            f->path, name, (long long)at, (long long)(at + (off_t)bytes), f->size);
            free(buf);
            return st;
        }
        got += (size_t)k;
    }
    *out = buf;
    return TG_OK;
}

/* src (the entry's bytes) into dst: a copy where the dtypes agree, else converted element by element. */
static tg_status convert_into(const tg_safetensors *f, const char *name, const struct st_entry *e,
                              const unsigned char *src, tg_tensor *dst)
{
    size_t n = (size_t)e->numel, ssz = fdtypes[e->fd].size;
    if (fd_of(dst->dtype) == e->fd) return tg_tensor_write(dst, src, e->end - e->begin);
    int dst_float = dst->dtype == TG_F32 || dst->dtype == TG_BF16;
    int dst_int = dst->dtype == TG_I32;
    if (!(dst_float && fdtypes[e->fd].is_float == 1) && !(dst_int && !fdtypes[e->fd].is_float))
        return tg_error(TG_EINVAL, "%s: tensor '%s' is %s in the file, which does not load into a %s tensor", f->path, name,
                        fdtypes[e->fd].name, tg_dtype_name(dst->dtype));
    size_t dsz = tg_dtype_size(dst->dtype);
    unsigned char *buf = malloc(n * dsz + 1);
    if (!buf) return tg_error(TG_ENOMEM, "out of host memory");
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = src + i * ssz;
        if (dst_float) {
            float x = load_float(p, e->fd);
            if (dst->dtype == TG_F32) memcpy(buf + 4 * i, &x, 4);
            else {
                uint16_t h = tg_f32_to_bf16(x);
                memcpy(buf + 2 * i, &h, 2);
            }
        } else {
            int64_t x = load_int(p, e->fd);
            if (x < INT32_MIN || x > INT32_MAX) {
                free(buf);
                return tg_error(TG_EINVAL, "%s: tensor '%s': element %zu is %lld, outside i32", f->path, name, i, (long long)x);
            }
            int32_t y = (int32_t)x;
            memcpy(buf + 4 * i, &y, 4);
        }
    }
    tg_status st = tg_tensor_write(dst, buf, n * dsz);
    free(buf);
    return st;
}

tg_status tg_safetensors_read_into(const tg_safetensors *f, const char *name, tg_tensor *dst)
{
    TG_NONNULL(dst, "dst");
    const struct st_entry *e;
    TG_TRY(entry_of(f, name, &e));
    char a[64], b[64];
    if (!shapes_match(e, dst)) {
        shape_str(e, a, sizeof a);
        return tg_error(TG_EINVAL, "%s: tensor '%s' has shape %s in the file, expected %s", f->path, name, a,
                        tg_tensor_shape_str(dst, b, sizeof b));
    }
    unsigned char *held = NULL;
    const unsigned char *src = f->data + e->begin;
    if (f->fd >= 0) {
        TG_TRY(read_data(f, name, e, &held));
        src = held;
    }
    tg_status st = convert_into(f, name, e, src, dst);
    free(held);
    return st;
}

tg_status tg_safetensors_read(const tg_safetensors *f, const char *name, tg_device dev, tg_tensor **out)
{
    TG_NONNULL(out, "out");
    *out = NULL;
    const struct st_entry *e;
    TG_TRY(entry_of(f, name, &e));
    if (e->ndim > TG_MAX_DIMS)
        return tg_error(TG_EINVAL, "%s: tensor '%s' has %d dimensions; tegraph tensors have at most %d", f->path, name, e->ndim,
                        TG_MAX_DIMS);
    int64_t one = 1;
    tg_tensor *t;
    TG_TRY(tg_tensor_new(fdtypes[e->fd].load, e->ndim ? e->ndim : 1, e->ndim ? e->shape : &one, dev, &t));
    tg_status st = tg_safetensors_read_into(f, name, t);
    if (st != TG_OK) {
        tg_tensor_free(t);
        return st;
    }
    *out = t;
    return TG_OK;
}

const char *tg_safetensors_metadata(const tg_safetensors *f, const char *key)
{
    for (int i = 0; f && key && i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

int tg_safetensors_metadata_count(const tg_safetensors *f) { return f ? f->nmeta : 0; }

const char *tg_safetensors_metadata_key(const tg_safetensors *f, int i)
{
    return f && i >= 0 && i < f->nmeta ? f->meta_keys[i] : NULL;
}
