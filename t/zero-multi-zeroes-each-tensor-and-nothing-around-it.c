/* zero-multi-zeroes-each-tensor-and-nothing-around-it.c — tg_zero_multi (one call for a graphed backward's
 * first-of-step wgrad targets) zeroes every byte of each tensor — views at unaligned offsets, any dtype, tensors
 * larger than a work chunk, more tensors than one CUDA launch takes — and no byte around them; it captures and
 * replays, and rejects bad lists. On the CPU always, and on CUDA when there is a device. */
#include "core/core.h"
#include "core/ops_optim.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

#define NB 300000         /* bf16 elements of the shared buffer */
#define NSMALL 600        /* views of 3 elements, 5 apart: more than one launch's 512 */
#define SMALL_AT 210000   /* where they start */

static tg_tensor *mk(tg_device dev, tg_dtype dt, int64_t n)
{
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, 1, &n, dev, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    return t;
}

static tg_tensor *slice(const tg_tensor *t, int64_t start, int64_t len)
{
    tg_tensor *v = NULL;
    if (tg_tensor_narrow(t, start, len, &v) != TG_OK) bail_out("narrow: %s", tg_last_error());
    return v;
}

static uint16_t *read16(const tg_tensor *t, int64_t n)
{
    uint16_t *h = malloc((size_t)n * 2);
    if (tg_tensor_read(t, h, (size_t)n * 2) != TG_OK) bail_out("read: %s", tg_last_error());
    return h;
}

/* Zero where want[i], bf16 1.0 (0x3f80) elsewhere: the count of bytes that are wrong. */
static long wrong(const uint16_t *h, const char *want, int64_t n)
{
    long bad = 0;
    for (int64_t i = 0; i < n; i++) bad += h[i] != (want[i] ? 0 : 0x3f80);
    return bad;
}

static void run(tg_device dev, const char *name)
{
    tg_tensor *buf = mk(dev, TG_BF16, NB), *f = mk(dev, TG_F32, 1), *ids = mk(dev, TG_I32, 33);
    char *want = calloc(NB, 1);
    /* a 10-byte view at byte 6 (unaligned), one at byte 200 (8- but not 16-byte aligned), one of 262154 bytes
     * (5 chunks of 64 KiB, unaligned end), and NSMALL tiny ones: none touching another */
    const int64_t at[3] = {3, 100, 72000}, len[3] = {5, 70001, 131077};
    int nt = 3 + NSMALL + 2;
    tg_tensor **ts = malloc((size_t)nt * sizeof *ts);
    for (int k = 0; k < 3; k++) {
        ts[k] = slice(buf, at[k], len[k]);
        memset(want + at[k], 1, (size_t)len[k]);
    }
    for (int k = 0; k < NSMALL; k++) {
        ts[3 + k] = slice(buf, SMALL_AT + 5 * k, 3);
        memset(want + SMALL_AT + 5 * k, 1, 3);
    }
    ts[nt - 2] = f, ts[nt - 1] = ids;
    if (tg_fill(buf, 1.0) != TG_OK || tg_fill(f, 7.0) != TG_OK || tg_fill(ids, 0.0) != TG_OK)
        bail_out("fill: %s", tg_last_error());
    int32_t iv[33];
    for (int i = 0; i < 33; i++) iv[i] = -1 - i;
    if (tg_tensor_write(ids, iv, sizeof iv) != TG_OK) bail_out("write: %s", tg_last_error());

    ok(tg_zero_multi(ts, nt) == TG_OK, "%s: zero_multi of %d tensors", name, nt);
    uint16_t *h = read16(buf, NB);
    long bad = wrong(h, want, NB);
    ok(bad == 0, "%s: every element of the views is 0 and every other one still 1.0 (%ld wrong)", name, bad);
    free(h);
    float fv = 1;
    int32_t got[33];
    tg_tensor_read(f, &fv, sizeof fv), tg_tensor_read(ids, got, sizeof got);
    int zeros = 0;
    for (int i = 0; i < 33; i++) zeros += got[i] == 0;
    ok(fv == 0.0f && zeros == 33, "%s: an f32 and an i32 tensor are zeroed too (f %g, %d of 33 ids)", name, fv, zeros);

    /* captured: nothing runs until the replay, which zeroes again */
    tg_stream *s = tg_stream_current(dev);
    tg_graph *g = NULL;
    if (tg_fill(buf, 1.0) != TG_OK) bail_out("fill: %s", tg_last_error());
    if (tg_stream_begin_capture(s) != TG_OK) bail_out("capture: %s", tg_last_error());
    tg_status st = tg_zero_multi(ts, 3 + NSMALL);
    if (tg_stream_end_capture(s, &g) != TG_OK || st != TG_OK) bail_out("end capture: %s", tg_last_error());
    h = read16(buf, NB);
    memset(want, 0, NB);
    ok(wrong(h, want, NB) == 0, "%s: capturing zero_multi changed nothing", name);
    free(h);
    for (int k = 0; k < 3; k++) memset(want + at[k], 1, (size_t)len[k]);
    for (int k = 0; k < NSMALL; k++) memset(want + SMALL_AT + 5 * k, 1, 3);
    for (int r = 0; r < 2; r++) {
        if (tg_graph_replay(g, s) != TG_OK) bail_out("replay: %s", tg_last_error());
        h = read16(buf, NB);
        bad = wrong(h, want, NB);
        ok(bad == 0, "%s: replay %d zeroes the views again and nothing else (%ld wrong)", name, r + 1, bad);
        free(h);
        if (tg_fill(buf, 1.0) != TG_OK) bail_out("fill: %s", tg_last_error());
    }
    tg_graph_free(g);

    ok(tg_zero_multi(ts, 0) == TG_OK, "%s: an empty list is nothing to do", name);
    ok(tg_zero_multi(ts, -1) == TG_EINVAL && strstr(tg_last_error(), "zero_multi"),
       "%s: a negative count is refused: %s", name, tg_last_error());
    tg_tensor *two[2] = {f, NULL};
    ok(tg_zero_multi(two, 2) == TG_EINVAL && strstr(tg_last_error(), "tensor 2"),
       "%s: a NULL tensor is refused, named: %s", name, tg_last_error());
    for (int k = 0; k < 3 + NSMALL; k++) tg_tensor_free(ts[k]);
    free(ts), free(want);
    tg_tensor_free(buf), tg_tensor_free(f), tg_tensor_free(ids);
}

int main(void)
{
    int cuda = tg_device_count(TG_CUDA) > 0;
    plan(cuda ? 19 : 9);
    run((tg_device){TG_CPU, 0}, "cpu");
    if (cuda) {
        run((tg_device){TG_CUDA, 0}, "cuda");
        tg_tensor *a = mk((tg_device){TG_CPU, 0}, TG_F32, 4), *b = mk((tg_device){TG_CUDA, 0}, TG_F32, 4);
        tg_tensor *ab[2] = {a, b};
        ok(tg_zero_multi(ab, 2) == TG_EINVAL && strstr(tg_last_error(), "different devices"),
           "tensors on two devices are refused: %s", tg_last_error());
        tg_tensor_free(a), tg_tensor_free(b);
    }
    return done_testing();
}
