/* bad-ids-fail-the-replay-on-the-cpu-and-every-host-read.c — a token id outside the embedding table met by a CPU
 * replay fails that replay, not a later read after a good replay; an id a device recorded (a GPU kernel's record,
 * written here by hand on the CPU's) fails whichever host read comes next: tg_tensor_read, tg_tensor_read_f64,
 * tg_sum, tg_max_abs, tg_max_abs_diff and tg_sumsq, each reporting it once. */
#include <tegraph.h>

#include "backend/backend.h"
#include "core/ops_nn.h"
#include "core/ops_optim.h"
#include "tap.h"

#include <string.h>

static const tg_device cpu = {TG_CPU, 0};

static tg_tensor *tensor(tg_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t shape[3] = {d0, d1, d2};
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, ndim, shape, cpu, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    return t;
}

static void write_ids(tg_tensor *ids, int32_t a, int32_t b)
{
    int32_t v[2] = {a, b};
    if (tg_tensor_write(ids, v, sizeof v) != TG_OK) bail_out("write: %s", tg_last_error());
}

/* What a GPU embedding kernel leaves for the next read: token id `id` at position pos of a table of rows rows. */
static void record_bad_id(tg_stream *s, int32_t id, long long pos, long long rows)
{
    struct tg_index_check *rec = tg_index_check_of(s);
    if (!rec) bail_out("the CPU device has no index record");
    rec->first[TG_INDEX_EMBEDDING] = (unsigned long long)pos << 32 | (uint32_t)id;
    rec->limit[TG_INDEX_EMBEDDING] = rows;
    tg_index_check_arm(s);
}

int main(void)
{
    tg_stream *s = tg_stream_current(cpu);
    if (!s) bail_out("no CPU stream: %s", tg_last_error());

    /* a CPU replay with a bad id fails at the replay */
    tg_tensor *wte = tensor(TG_F32, 2, 10, 8, 0), *ids = tensor(TG_I32, 2, 1, 2, 0), *out = NULL;
    if (tg_fill(wte, 1.0) != TG_OK) bail_out("fill: %s", tg_last_error());
    write_ids(ids, 1, 2);
    tg_pool *pool = NULL;
    tg_graph *g = NULL;
    if (tg_pool_new(cpu, &pool) != TG_OK || tg_pool_push(pool) != TG_OK) bail_out("pool: %s", tg_last_error());
    if (tg_stream_begin_capture(s) != TG_OK) bail_out("capture: %s", tg_last_error());
    out = tensor(TG_F32, 3, 1, 2, 8);
    tg_status st = tg_embedding_forward(out, ids, wte, NULL);
    if (tg_stream_end_capture(s, &g) != TG_OK || st != TG_OK) bail_out("capture: %s", tg_last_error());
    tg_pool_pop(pool);
    write_ids(ids, 3, 11);
    st = tg_graph_replay(g, s);
    ok(st == TG_EINVAL, "a CPU replay meeting token id 11 in a table of 10 rows fails at the replay");
    like(tg_last_error(), "embedding: token id 11 at position 1 is outside the table of 10 rows (ids 0 to 9)",
         "... naming the id and its position");
    double v = 0;
    ok(tg_sum(out, &v) == TG_OK, "... once: the read after it has nothing to report");
    write_ids(ids, 3, 4);
    ok(tg_graph_replay(g, s) == TG_OK, "a good replay after it succeeds");
    tg_tensor *other = tensor(TG_F32, 1, 3, 0, 0);
    tg_fill(other, 1.0);
    ok(tg_sum(other, &v) == TG_OK && v == 3.0, "... and a later read of another tensor is not blamed for the bad one");

    /* an id a device recorded: every host read reports it, once */
    double vals[3];
    float raw[3];
    struct {
        const char *what;
        int which;
    } reads[] = {{"tg_tensor_read", 0}, {"tg_tensor_read_f64", 1}, {"tg_sum", 2},
                 {"tg_max_abs", 3},     {"tg_max_abs_diff", 4},    {"tg_sumsq", 5}};
    for (size_t i = 0; i < sizeof reads / sizeof reads[0]; i++) {
        for (int k = 0; k < 2; k++) {
            if (k == 0) record_bad_id(s, 12, 5, 8);
            switch (reads[i].which) {
            case 0: st = tg_tensor_read(other, raw, sizeof raw); break;
            case 1: st = tg_tensor_read_f64(other, vals, 3); break;
            case 2: st = tg_sum(other, &v); break;
            case 3: st = tg_max_abs(other, &v); break;
            case 4: st = tg_max_abs_diff(other, other, &v); break;
            default: st = tg_sumsq(other, &v); break;
            }
            if (k == 0) {
                ok(st == TG_EINVAL, "%s after a device recorded a bad id fails", reads[i].what);
                like(tg_last_error(), "embedding: token id 12 at position 5 is outside the table of 8 rows",
                     "... naming the id and its position");
            } else {
                ok(st == TG_OK, "... once: the next %s reads fine", reads[i].what);
            }
        }
    }

    tg_graph_free(g);
    tg_tensor_free(out);
    tg_tensor_free(other);
    tg_tensor_free(ids);
    tg_tensor_free(wte);
    tg_pool_release(pool);
    return done_testing();
}
