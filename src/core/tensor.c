/* tensor.c — tensor handles over refcounted storage: create, view, inspect, host transfers. */
#include "backend/backend.h"

#include <stdint.h>
#include <string.h>

static tg_status check_shape(int ndim, const int64_t *shape, const char *what)
{
    if (ndim < 0 || ndim > TG_MAX_DIMS) return tg_error(TG_EINVAL, "%s: %d dimensions (at most %d)", what, ndim, TG_MAX_DIMS);
    if (ndim > 0 && !shape) return tg_error(TG_EINVAL, "%s: shape is NULL (%d dimensions)", what, ndim);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return tg_error(TG_EINVAL, "%s: negative size %lld in dimension %d", what, (long long)shape[i], i + 1);
        /* numel * 8 bytes must fit: a wrapped product would allocate a few bytes for a huge shape */
        if (shape[i] > 0 && n > (INT64_MAX / 8) / shape[i]) {
            char buf[128];
            size_t k = 0;
            for (int j = 0; j < ndim && k < sizeof buf; j++)
                k += (size_t)snprintf(buf + k, sizeof buf - k, j ? ",%lld" : "[%lld", (long long)shape[j]);
            if (k < sizeof buf) snprintf(buf + k, sizeof buf - k, "]");
            return tg_error(TG_EINVAL, "%s: shape %s has too many elements", what, buf);
        }
        n *= shape[i];
    }
    return TG_OK;
}

static tg_status handle_new(struct tg_storage *st, int64_t offset, tg_dtype dt, int ndim, const int64_t *shape,
                            tg_tensor **out)
{
    tg_tensor *t = calloc(1, sizeof *t);
    if (!t) return tg_error(TG_ENOMEM, "out of host memory");
    t->storage = st;
    st->refcount++;
    t->offset = offset;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    *out = t;
    return TG_OK;
}

tg_status tg_tensor_new_in(tg_pool *pool, tg_dtype dt, int ndim, const int64_t *shape, tg_device dev, tg_tensor **out)
{
    TG_NONNULL(out, "out");
    *out = NULL;
    if ((unsigned)dt >= TG_DTYPE_COUNT) return tg_error(TG_EINVAL, "tensor: unknown dtype %d", (int)dt);
    TG_TRY(check_shape(ndim, shape, "tensor"));
    size_t bytes = (size_t)tg_numel_of(ndim, shape) * tg_dtype_size(dt);
    struct tg_storage *st;
    tg_status as = tg_storage_new(pool, dev, bytes, &st);
    if (as == TG_ENOMEM) {
        /* Say which tensor could not be had: its shape, dtype, bytes and device. */
        char sh[128], dn[32];
        size_t k = 0;
        for (int j = 0; j < ndim && k < sizeof sh; j++)
            k += (size_t)snprintf(sh + k, sizeof sh - k, j ? ",%lld" : "[%lld", (long long)shape[j]);
        if (k < sizeof sh) snprintf(sh + k, sizeof sh - k, ndim ? "]" : "[]");
        return tg_error_prefix(as, "tensor %s %s (%zu bytes) on %s", sh, tg_dtype_name(dt), bytes,
                               tg_device_str(dev, dn, sizeof dn));
    }
    if (as != TG_OK) return as;
    tg_status s = handle_new(st, 0, dt, ndim, shape, out);
    tg_storage_release(st); /* the handle holds the only reference */
    return s;
}

tg_status tg_tensor_new(tg_dtype dt, int ndim, const int64_t *shape, tg_device dev, tg_tensor **out)
{
    return tg_tensor_new_in(NULL, dt, ndim, shape, dev, out);
}

void tg_tensor_free(tg_tensor *t)
{
    if (!t) return;
    tg_storage_release(t->storage);
    free(t->name);
    free(t);
}

tg_status tg_tensor_ref(const tg_tensor *t, tg_tensor **out)
{
    TG_NONNULL(t, "t");
    TG_NONNULL(out, "out");
    TG_TRY(handle_new(t->storage, t->offset, t->dtype, t->ndim, t->shape, out));
    if (t->name) tg_tensor_set_name(*out, t->name);
    return TG_OK;
}

tg_status tg_tensor_view(const tg_tensor *t, int64_t offset, int ndim, const int64_t *shape, tg_tensor **out)
{
    char a[64];
    TG_NONNULL(t, "t");
    TG_NONNULL(out, "out");
    TG_TRY(check_shape(ndim, shape, "view"));
    int64_t n = tg_numel_of(ndim, shape), have = tg_tensor_numel(t);
    if (offset < 0 || offset > have || n > have - offset)
        return tg_error(TG_EINVAL, "view of %lld elements at offset %lld does not fit in a tensor of shape %s", (long long)n,
                        (long long)offset, tg_tensor_shape_str(t, a, sizeof a));
    return handle_new(t->storage, t->offset + offset, t->dtype, ndim, shape, out);
}

tg_status tg_tensor_narrow(const tg_tensor *t, int64_t start, int64_t len, tg_tensor **out)
{
    char a[64];
    TG_NONNULL(t, "t");
    TG_NONNULL(out, "out");
    if (t->ndim < 1) return tg_error(TG_EINVAL, "narrow: tensor has no dimensions");
    if (start < 0 || len < 0 || start > t->shape[0] || len > t->shape[0] - start)
        return tg_error(TG_EINVAL, "narrow: %lld rows from row %lld (0-based) out of range for shape %s", (long long)len,
                        (long long)start, tg_tensor_shape_str(t, a, sizeof a));
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = len;
    int64_t row = tg_numel_of(t->ndim - 1, t->shape + 1);
    return handle_new(t->storage, t->offset + start * row, t->dtype, t->ndim, shape, out);
}

/* The accessors answer a NULL tensor with an empty one's values (dtype f32, no dimensions, 0 elements, the
 * CPU, no data, no name), as tg_tensor_free takes NULL. */
tg_dtype tg_tensor_dtype(const tg_tensor *t) { return t ? t->dtype : TG_F32; }
int tg_tensor_ndim(const tg_tensor *t) { return t ? t->ndim : 0; }
int64_t tg_tensor_dim(const tg_tensor *t, int i) { return t && i >= 0 && i < t->ndim ? t->shape[i] : 1; }
int64_t tg_tensor_numel(const tg_tensor *t) { return t ? tg_numel_of(t->ndim, t->shape) : 0; }
tg_device tg_tensor_device(const tg_tensor *t) { return t ? t->storage->dev : (tg_device){TG_CPU, 0}; }
void *tg_tensor_data(const tg_tensor *t)
{
    if (!t) return NULL;
    if (tg_device_capturing(t->storage->dev)) tg_capture_hold(t); /* the graph keeps what it uses */
    return (char *)t->storage->data + (size_t)t->offset * tg_dtype_size(t->dtype);
}
const char *tg_tensor_name(const tg_tensor *t) { return t ? t->name : NULL; }

tg_status tg_tensor_set_name(tg_tensor *t, const char *name)
{
    TG_NONNULL(t, "t");
    char *copy = NULL;
    if (name && !(copy = strdup(name))) return tg_error(TG_ENOMEM, "out of host memory");
    free(t->name);
    t->name = copy;
    return TG_OK;
}

const char *tg_tensor_shape_str(const tg_tensor *t, char *buf, size_t n)
{
    if (!buf) return "";
    if (!t) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    size_t k = 0;
    k += snprintf(buf + k, n > k ? n - k : 0, "[");
    for (int i = 0; i < t->ndim; i++)
        k += snprintf(buf + k, n > k ? n - k : 0, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    snprintf(buf + k, n > k ? n - k : 0, "]");
    return buf;
}

int tg_tensor_same_shape(const tg_tensor *a, const tg_tensor *b)
{
    if (!a || !b) return 0;
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

int tg_tensor_same_memory(const tg_tensor *a, const tg_tensor *b)
{
    if (!a || !b) return 0;
    return a->storage == b->storage && a->offset == b->offset && a->dtype == b->dtype &&
           tg_tensor_numel(a) == tg_tensor_numel(b);
}

/* ------------------------------------------------------------------ host transfers */
static tg_status host_io_check(const tg_tensor *t, const void *buf, size_t bytes, const char *what)
{
    char a[64], d[32];
    if (!t) return tg_error(TG_EINVAL, "%s: the tensor is NULL", what);
    if (!buf && bytes > 0) return tg_error(TG_EINVAL, "%s: the host buffer is NULL (%zu bytes)", what, bytes);
    tg_stream *s = tg_stream_current(tg_tensor_device(t));
    if (!s) return TG_ENOMEM;
    if (tg_device_capturing(tg_tensor_device(t)))
        return tg_error(TG_ECAPTURE, "%s of a %s tensor %s on %s while stream '%s' is capturing (host transfers are not capturable)",
                        what, tg_dtype_name(t->dtype), tg_tensor_shape_str(t, a, sizeof a),
                        tg_device_str(tg_tensor_device(t), d, sizeof d), tg_device_capturer_name(tg_tensor_device(t)));
    if (bytes != tg_tensor_bytes(t))
        return tg_error(TG_EINVAL, "%s: %zu bytes given for a %s tensor %s of %zu bytes", what, bytes, tg_dtype_name(t->dtype),
                        tg_tensor_shape_str(t, a, sizeof a), tg_tensor_bytes(t));
    return TG_OK;
}

tg_status tg_tensor_write(tg_tensor *t, const void *src, size_t bytes)
{
    TG_TRY(host_io_check(t, src, bytes, "write"));
    tg_stream *s = tg_stream_current(tg_tensor_device(t));
    return s->be->memcpy(s, tg_tensor_data(t), src, bytes, TG_H2D);
}

tg_status tg_tensor_read(const tg_tensor *t, void *dst, size_t bytes)
{
    TG_TRY(host_io_check(t, dst, bytes, "read"));
    tg_stream *s = tg_stream_current(tg_tensor_device(t));
    TG_TRY(s->be->memcpy(s, dst, tg_tensor_data(t), bytes, TG_D2H));
    return tg_index_check_poll(s); /* ids outside their table in work that ran before this read */
}

static double elem_to_f64(const void *p, tg_dtype dt, size_t i)
{
    switch (dt) {
    case TG_F32: return ((const float *)p)[i];
    case TG_BF16: return tg_bf16_to_f32(((const uint16_t *)p)[i]);
    case TG_I32: return ((const int32_t *)p)[i];
    case TG_U16: return ((const uint16_t *)p)[i];
    case TG_E4M3:
    case TG_E5M2: return tg_fp8_to_f32(dt, ((const uint8_t *)p)[i]);
    default: TG_ASSERT(!"dtype without host conversion");
    }
    return 0;
}

static void f64_to_elem(void *p, tg_dtype dt, size_t i, double v)
{
    switch (dt) {
    case TG_F32: ((float *)p)[i] = (float)v; break;
    case TG_BF16: ((uint16_t *)p)[i] = tg_f32_to_bf16((float)v); break;
    /* integers: callers check with tg_value_fits first; the clamp is a last guard */
    case TG_I32: ((int32_t *)p)[i] = v != v ? 0 : v <= -2147483648.0 ? INT32_MIN : v >= 2147483647.0 ? INT32_MAX : (int32_t)v; break;
    case TG_U16: ((uint16_t *)p)[i] = v != v || v <= 0 ? 0 : v >= 65535.0 ? 65535 : (uint16_t)v; break;
    case TG_E4M3:
    case TG_E5M2: ((uint8_t *)p)[i] = tg_fp8_from_f32(dt, (float)v); break; /* through f32, saturating */
    default: TG_ASSERT(!"dtype without host conversion");
    }
}

tg_status tg_tensor_read_f64(const tg_tensor *t, double *dst, size_t n)
{
    TG_NONNULL(t, "t");
    if (!dst && n > 0) return tg_error(TG_EINVAL, "read: the host buffer is NULL (%zu values)", n);
    if (t->dtype == TG_F16) return tg_error(TG_ENOTSUP, "f16 tensors are not supported yet");
    if (n != (size_t)tg_tensor_numel(t)) return tg_error(TG_EINVAL, "read: %zu values asked of a tensor of %lld", n, (long long)tg_tensor_numel(t));
    size_t bytes = tg_tensor_bytes(t);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return tg_error(TG_ENOMEM, "out of host memory");
    tg_status st = tg_tensor_read(t, tmp, bytes);
    if (st == TG_OK)
        for (size_t i = 0; i < n; i++) dst[i] = elem_to_f64(tmp, t->dtype, i);
    free(tmp);
    return st;
}

tg_status tg_value_fits(tg_dtype dt, double v, const char *what, long long index)
{
    double lo, hi;
    char at[48] = "";
    if (index >= 0) snprintf(at, sizeof at, " at index %lld", index);
    if (tg_dtype_is_fp8(dt)) {
        /* A value from the host past the format's largest finite value would be stored saturated (448 for
         * 1000): refused instead, since no scale is applied here to bring it in range (tg_fp8_cast scales). */
        double m = tg_fp8_max(dt);
        if (v == v && v >= -m && v <= m) return TG_OK;
        return tg_error(TG_EINVAL, "%s: value %.17g%s is outside %s's range (-%g to %g; tg_fp8_cast scales into it)",
                        what, v, at, tg_dtype_name(dt), m, m);
    }
    if (dt == TG_I32) lo = -2147483648.0, hi = 2147483647.0;
    else if (dt == TG_U16) lo = 0.0, hi = 65535.0;
    else return TG_OK; /* float dtypes round */
    if (v == v && v >= lo && v <= hi && v == (double)(int64_t)v) return TG_OK;
    return tg_error(TG_EINVAL, "%s: value %.17g%s does not fit %s (integers %.0f to %.0f)", what, v, at, tg_dtype_name(dt), lo,
                    hi);
}

tg_status tg_tensor_write_f64(tg_tensor *t, const double *src, size_t n)
{
    TG_NONNULL(t, "t");
    if (!src && n > 0) return tg_error(TG_EINVAL, "write: the host buffer is NULL (%zu values)", n);
    if (t->dtype == TG_F16) return tg_error(TG_ENOTSUP, "f16 tensors are not supported yet");
    if (n != (size_t)tg_tensor_numel(t)) return tg_error(TG_EINVAL, "write: %zu values given for a tensor of %lld", n, (long long)tg_tensor_numel(t));
    for (size_t i = 0; i < n && (t->dtype == TG_I32 || t->dtype == TG_U16 || tg_dtype_is_fp8(t->dtype)); i++)
        TG_TRY(tg_value_fits(t->dtype, src[i], "write", (long long)i));
    size_t bytes = tg_tensor_bytes(t);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) return tg_error(TG_ENOMEM, "out of host memory");
    for (size_t i = 0; i < n; i++) f64_to_elem(tmp, t->dtype, i, src[i]);
    tg_status st = tg_tensor_write(t, tmp, bytes);
    free(tmp);
    return st;
}
