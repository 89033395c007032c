/* native.c — the seam for code that drives a device's own library on tegraph's streams: current device, native stream handle, raw device memory. */
#include "backend/backend.h"

tg_status tg_device_use(tg_device dev)
{
    char d[32];
    if (!tg_device_valid(dev)) return tg_error(TG_EINVAL, "no such device %s", tg_device_str(dev, d, sizeof d));
    const struct tg_backend *be = tg_backend_for(dev);
    return be->use_device ? be->use_device(dev.index) : TG_OK;
}

void *tg_stream_native(tg_stream *s) { return s && s->be->stream_native ? s->be->stream_native(s) : NULL; }

tg_status tg_device_alloc(tg_device dev, size_t bytes, void **out)
{
    char d[32];
    *out = NULL;
    if (!tg_device_valid(dev)) return tg_error(TG_EINVAL, "no such device %s", tg_device_str(dev, d, sizeof d));
    return tg_backend_for(dev)->alloc(dev.index, bytes, out);
}

void tg_device_free(tg_device dev, void *ptr)
{
    if (ptr && tg_device_valid(dev)) tg_backend_for(dev)->free(dev.index, ptr);
}
