/* ops_fp8_scale.c — the FP8 delayed-scaling update op (tegraph.h, tg_fp8_scale_update): checks, then one kernel on the current stream. */
#include "core/ops_check.h"

#include <math.h>

tg_status tg_fp8_scale_update(tg_tensor *amax_history, tg_tensor *scale, tg_tensor *scale_inv, const double *fp8_max,
                              int margin, int most_recent)
{
    const char *op = "fp8_scale_update";
    char x[96], y[96];
    tg_stream *s;
    TG_TRY(stream_for(op, "scale", scale, &s));
    TG_TRY(need(op, "amax_history", amax_history));
    TG_TRY(need(op, "scale_inv", scale_inv));
    if (!fp8_max) return tg_error(TG_EINVAL, "%s: fp8_max is NULL", op);
    const int64_t n = tg_tensor_numel(scale);
    if (scale->dtype != TG_F32 || scale->ndim != 1 || n < 1 || n > TG_FP8_MAX_ROLES)
        return tg_error(TG_EINVAL, "%s: scale %s must be an f32 vector of 1 to %d roles", op, desc(scale, x, sizeof x),
                        TG_FP8_MAX_ROLES);
    TG_TRY(like(op, "scale", scale, "scale_inv", scale_inv));
    TG_TRY(on_dev(op, "scale", scale, "amax_history", amax_history));
    const tg_tensor *h = amax_history;
    int shape_ok = h->dtype == TG_F32 &&
                   ((h->ndim == 2 && h->shape[1] == n && h->shape[0] >= 1) || (h->ndim == 1 && n == 1 && h->shape[0] >= 1));
    if (!shape_ok)
        return tg_error(TG_EINVAL, "%s: amax_history %s vs scale %s (f32 [len, %lld] expected, len >= 1)", op,
                        desc(h, x, sizeof x), desc(scale, y, sizeof y), (long long)n);
    /* the kernel reads the history while it writes the scales (and rolls the history): a shared byte would be read
       after it was written, so neither the result is the update nor the inputs what they were */
    TG_TRY(no_overlap(op, "amax_history", amax_history, "scale", scale));
    TG_TRY(no_overlap(op, "amax_history", amax_history, "scale_inv", scale_inv));
    TG_TRY(no_overlap(op, "scale", scale, "scale_inv", scale_inv));
    if (margin < 0 || margin > 127) return tg_error(TG_EINVAL, "%s: margin = %d must be in 0..127", op, margin);
    struct tg_fp8_scale_update_args a = {
        .history = tg_tensor_data(amax_history),
        .scale = tg_tensor_data(scale),
        .scale_inv = tg_tensor_data(scale_inv),
        .len = h->shape[0],
        .n = (int)n,
        .most_recent = most_recent != 0,
        .margin_div = ldexpf(1.0f, margin),
    };
    for (int j = 0; j < n; j++) {
        if (!(fp8_max[j] > 0) || !isfinite(fp8_max[j]))
            return tg_error(TG_EINVAL, "%s: fp8_max[%d] = %g must be finite and > 0", op, j, fp8_max[j]); /* C index */
        a.fp8_max[j] = (float)fp8_max[j];
    }
    ISSUE(s, op, fp8_scale_update, &a, TG_OK);
}
