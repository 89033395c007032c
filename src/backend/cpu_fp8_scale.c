/* cpu_fp8_scale.c — the CPU reference of the FP8 delayed-scaling update (backend.h, tg_fp8_scale_update_args). */
#include "backend/cpu_impl.h"

#include <float.h>
#include <math.h>

/* the larger of a and b, or NaN when either is: a NaN amax in the window keeps the scale */
static float max_nan(float a, float b) { return isnan(a) || a > b ? a : b; }

static void fp8_scale_update_run(const void *p)
{
    const struct tg_fp8_scale_update_args *a = p;
    for (int j = 0; j < a->n; j++) {
        float *h = a->history + j;
        const int64_t n = a->n, len = a->len;
        const float last = h[0];
        float amax = a->most_recent ? last : 0.0f;
        for (int64_t i = 0; i < len; i++) { /* roll: row i <- row i + 1, the last row <- row 0, row 0 <- 0 */
            const float v = i < len - 1 ? h[(i + 1) * n] : last;
            if (!a->most_recent) amax = max_nan(amax, v);
            h[i * n] = i > 0 ? v : 0.0f;
        }
        float scale = a->scale[j];
        if (isfinite(amax) && amax > 0.0f) scale = (a->fp8_max[j] / amax) / a->margin_div;
        if (isinf(scale)) scale = FLT_MAX;
        a->scale[j] = scale;
        a->scale_inv[j] = 1.0f / scale;
    }
}

tg_status cpu_fp8_scale_update(tg_stream *s, const struct tg_fp8_scale_update_args *a)
{
    return cpu_submit(s, fp8_scale_update_run, a, sizeof *a);
}
