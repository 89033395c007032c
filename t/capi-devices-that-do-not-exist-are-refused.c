/* capi-devices-that-do-not-exist-are-refused.c — every public call that takes a tg_device, given one that does not
 * exist (a CUDA index past the devices present, out of the library's range or negative, cpu:1, an unknown type),
 * refuses it with TG_EINVAL "no such device" or answers a query as for a device that did nothing, instead of
 * aborting on an internal assertion; the CPU still works afterwards. */
#include <tegraph.h>

#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void refused(tg_status st, const char *what, const char *dev)
{
    ok(st == TG_EINVAL && strstr(tg_last_error(), "no such device") != NULL, "%s on %s is refused (%s: \"%s\")", what,
       dev, tg_status_name(st), tg_last_error());
}

int main(void)
{
    const tg_device bad[] = {{TG_CUDA, 99}, {TG_CUDA, -1}, {TG_CUDA, 16}, {TG_CUDA, tg_device_count(TG_CUDA)},
                             {TG_CPU, 1},   {(tg_device_type)7, 0}};
    const tg_device cpu = {TG_CPU, 0};
    int64_t shape[1] = {4};
    tg_tensor *t = NULL;
    if (tg_tensor_new(TG_F32, 1, shape, cpu, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    char path[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/tg-capi-devices-%ld.safetensors", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    const char *names[1] = {"t"};
    const tg_tensor *ts[1] = {t};
    if (tg_fill(t, 1) != TG_OK || tg_safetensors_write(path, 1, names, ts, 0, NULL, NULL) != TG_OK)
        bail_out("safetensors file: %s", tg_last_error());
    tg_safetensors *f = NULL;
    if (tg_safetensors_open(path, &f) != TG_OK) bail_out("safetensors open: %s", tg_last_error());

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tg_device d = bad[i];
        char ds[48];
        tg_device_str(d, ds, sizeof ds);
        tg_error(TG_EIO, "an older error"); /* the NULL below must come with its own message */
        ok(tg_stream_current(d) == NULL && strstr(tg_last_error(), "no such device") != NULL,
           "tg_stream_current(%s) is NULL, the error naming it (\"%s\")", ds, tg_last_error());
        ok(tg_device_capturing(d) == 0, "tg_device_capturing(%s) is 0", ds);
        tg_device_stats stats;
        memset(&stats, 0xff, sizeof stats);
        tg_device_get_stats(d, &stats);
        ok(stats.kernels == 0 && stats.gemms == 0 && stats.memory == 0 && stats.peak_memory == 0,
           "tg_device_get_stats(%s) gives zeros", ds);
        tg_device_reset_peak(d);
        ok(1, "tg_device_reset_peak(%s) returns", ds);
        char name[64];
        size_t total = 0;
        refused(tg_device_describe(d, name, sizeof name, &total), "tg_device_describe", ds);
        tg_tensor *u = NULL;
        refused(tg_tensor_new(TG_F32, 1, shape, d, &u), "tg_tensor_new", ds);
        refused(tg_tensor_new_in(NULL, TG_F32, 1, shape, d, &u), "tg_tensor_new_in", ds);
        refused(tg_safetensors_read(f, "t", d, &u), "tg_safetensors_read", ds);
        ok(u == NULL, "... and no tensor is made");
        tg_stream *s = NULL;
        refused(tg_stream_new(d, "s", &s), "tg_stream_new", ds);
        tg_event *e = NULL;
        refused(tg_event_new(d, 0, &e), "tg_event_new", ds);
        tg_pool *p = NULL;
        refused(tg_pool_new(d, &p), "tg_pool_new", ds);
    }
    tg_safetensors_close(f);
    remove(path);

    ok(tg_stream_current(cpu) != NULL && tg_device_capturing(cpu) == 0, "the CPU's current stream is still there");
    double sum = 0;
    ok(tg_sum(t, &sum) == TG_OK && sum == 4, "and ops on the CPU still run (sum %g)", sum);
    tg_tensor_free(t);
    return done_testing();
}
