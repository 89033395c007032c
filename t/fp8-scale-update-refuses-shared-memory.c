/* fp8-scale-update-refuses-shared-memory.c — tg_fp8_scale_update refuses amax_history, scale and scale_inv that share
 * memory (the same tensor, or views into one storage that overlap: the kernel would read what it wrote, and the
 * result was neither the update nor the inputs), naming both, and leaves them as they were; disjoint views of one
 * storage are fine and give the hand-computed update. A bad fp8_max is named by its C index (0-based). */
#include <tegraph.h>

#include "tap.h"

#include <string.h>

static const tg_device cpu = {TG_CPU, 0};

static tg_tensor *vec(tg_tensor *base, int64_t offset, int64_t n)
{
    tg_tensor *v = NULL;
    if (tg_tensor_view(base, offset, 1, &n, &v) != TG_OK) bail_out("view: %s", tg_last_error());
    return v;
}

int main(void)
{
    const double fm[2] = {448, 448};
    tg_tensor *store = NULL; /* one storage: history (2 x 2) at 0, then room for scales */
    if (tg_tensor_new(TG_F32, 1, (int64_t[]){10}, cpu, &store) != TG_OK) bail_out("tensor: %s", tg_last_error());
    tg_tensor *hist = NULL;
    if (tg_tensor_view(store, 0, 2, (int64_t[]){2, 2}, &hist) != TG_OK) bail_out("view: %s", tg_last_error());
    double init[10] = {2, 4, 0, 0, 1, 1, 1, 1, 1, 1};
    tg_tensor *scale = vec(store, 4, 2), *scale_inv = vec(store, 6, 2);

    struct {
        tg_tensor *h, *s, *si;
        const char *want, *what;
    } bad[] = {
        {hist, scale, scale, "scale [2] f32 and scale_inv [2] f32 share memory", "scale_inv the same tensor as scale"},
        {hist, vec(store, 2, 2), scale_inv, "amax_history [2,2] f32 and scale [2] f32 share memory",
         "scale a view into amax_history's last row"},
        {hist, scale, vec(store, 3, 2), "amax_history [2,2] f32 and scale_inv [2] f32 share memory",
         "scale_inv a view overlapping amax_history's last element"},
        {hist, scale, vec(store, 5, 2), "scale [2] f32 and scale_inv [2] f32 share memory",
         "scale_inv a view overlapping scale by one element"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (tg_tensor_write_f64(store, init, 10) != TG_OK) bail_out("write: %s", tg_last_error());
        tg_status st = tg_fp8_scale_update(bad[i].h, bad[i].s, bad[i].si, fm, 0, 0);
        ok(st == TG_EINVAL, "%s is refused (%s)", bad[i].what, tg_status_name(st));
        like(tg_last_error(), bad[i].want, "... naming both");
        double now[10];
        ok(tg_tensor_read_f64(store, now, 10) == TG_OK && memcmp(now, init, sizeof now) == 0, "... and changes nothing");
    }
    for (size_t i = 1; i < sizeof bad / sizeof bad[0]; i++) /* the views made for the cases */
        tg_tensor_free(bad[i].s != scale ? bad[i].s : bad[i].si);

    /* disjoint views of one storage: the update, by hand (max of each column: 2 and 4) */
    if (tg_tensor_write_f64(store, init, 10) != TG_OK) bail_out("write: %s", tg_last_error());
    ok(tg_fp8_scale_update(hist, scale, scale_inv, fm, 0, 0) == TG_OK, "disjoint views of one storage are fine: %s",
       tg_last_error());
    double got[10];
    tg_tensor_read_f64(store, got, 10);
    ok(got[4] == 224 && got[5] == 112 && got[6] == (double)(1.0f / 224) && got[7] == (double)(1.0f / 112),
       "... and give the update (scales %g %g, scale_invs %g %g)", got[4], got[5], got[6], got[7]);

    /* fp8_max is named by its C index */
    const double fm_bad[2] = {448, -1};
    ok(tg_fp8_scale_update(hist, scale, scale_inv, fm_bad, 0, 0) == TG_EINVAL, "a negative fp8_max is refused");
    like(tg_last_error(), "fp8_max[1] = -1 must be finite and > 0", "... named by its C index (fp8_max[1], not [2])");

    tg_tensor_free(scale), tg_tensor_free(scale_inv), tg_tensor_free(hist), tg_tensor_free(store);
    return done_testing();
}
