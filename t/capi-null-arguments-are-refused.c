/* capi-null-arguments-are-refused.c — the public C API given a NULL handle or output pointer returns TG_EINVAL with
 * a message naming the argument (tensors, ops, streams, graphs, events, pools, devices, safetensors files, the
 * tokenizer, sampling, the runtime) instead of crashing; accessors given NULL answer as for an empty object;
 * tg_pool_pop of a pool that is not on top notes an error and pops nothing; the tokenizer refuses a length whose
 * buffer would not fit instead of looping; a valid call after each still works. */
#include <tegraph.h>

#include "tap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const tg_device cpu = {TG_CPU, 0};

/* st is TG_EINVAL and the message contains want. */
static void refused(tg_status st, const char *want, const char *what)
{
    ok(st == TG_EINVAL && strstr(tg_last_error(), want) != NULL, "%s is refused (%s: \"%s\")", what, tg_status_name(st),
       tg_last_error());
}

int main(void)
{
    int64_t shape[2] = {2, 3};
    tg_tensor *t = NULL, *u = NULL;
    if (tg_tensor_new(TG_F32, 2, shape, cpu, &t) != TG_OK || tg_tensor_new(TG_F32, 2, shape, cpu, &u) != TG_OK)
        bail_out("tensor: %s", tg_last_error());
    double d = 0;
    float buf[6] = {0};

    /* tensors */
    refused(tg_tensor_new(TG_F32, 2, shape, cpu, NULL), "out is NULL", "tg_tensor_new with a NULL out");
    tg_tensor *none = NULL;
    refused(tg_tensor_new(TG_F32, 2, NULL, cpu, &none), "shape is NULL", "tg_tensor_new with a NULL shape");
    ok(none == NULL, "... and leaves *out NULL");
    refused(tg_tensor_ref(NULL, &none), "t is NULL", "tg_tensor_ref of NULL");
    refused(tg_tensor_view(t, 0, 1, shape, NULL), "out is NULL", "tg_tensor_view with a NULL out");
    refused(tg_tensor_narrow(NULL, 0, 1, &none), "t is NULL", "tg_tensor_narrow of NULL");
    refused(tg_tensor_set_name(NULL, "x"), "t is NULL", "tg_tensor_set_name of NULL");
    refused(tg_tensor_write(NULL, buf, sizeof buf), "the tensor is NULL", "tg_tensor_write to NULL");
    refused(tg_tensor_read(t, NULL, sizeof buf), "the host buffer is NULL", "tg_tensor_read into a NULL buffer");
    refused(tg_tensor_read_f64(t, NULL, 6), "the host buffer is NULL", "tg_tensor_read_f64 into a NULL buffer");
    ok(tg_tensor_numel(NULL) == 0 && tg_tensor_ndim(NULL) == 0 && tg_tensor_data(NULL) == NULL &&
           tg_tensor_name(NULL) == NULL && !tg_tensor_same_shape(NULL, t) && !tg_tensor_same_memory(t, NULL),
       "the tensor accessors answer NULL as an empty tensor");
    char s[32];
    ok(strcmp(tg_tensor_shape_str(NULL, s, sizeof s), "(null)") == 0 && strcmp(tg_tensor_shape_str(t, NULL, 0), "") == 0,
       "tg_tensor_shape_str of NULL, and into a NULL buffer");

    /* ops */
    refused(tg_fill(NULL, 1), "t is NULL", "tg_fill of NULL");
    refused(tg_copy(t, NULL), "src is NULL", "tg_copy from NULL");
    refused(tg_binary(TG_ADD, t, t, NULL), "b is NULL", "tg_binary with a NULL b");
    refused(tg_axpby(t, 1, NULL, 1), "x is NULL", "tg_axpby with a NULL x");
    refused(tg_gemm(t, NULL, 0, t, 1, 1, 0), "a is NULL", "tg_gemm with a NULL a");
    refused(tg_sum(t, NULL), "out is NULL", "tg_sum into a NULL out");
    refused(tg_max_abs_diff(NULL, t, &d), "a is NULL", "tg_max_abs_diff with a NULL a");
    refused(tg_randn(NULL, 0, 1), "the tensor is NULL", "tg_randn of NULL");

    /* devices, streams, graphs, events, pools */
    tg_device dev;
    refused(tg_device_parse(NULL, &dev), "s is NULL", "tg_device_parse of NULL");
    ok(tg_dtype_parse(NULL, NULL) != 0, "tg_dtype_parse of NULL fails");
    ok(strcmp(tg_device_str(cpu, NULL, 0), "") == 0, "tg_device_str into a NULL buffer");
    tg_device_get_stats(cpu, NULL);
    ok(1, "tg_device_get_stats into NULL returns");
    refused(tg_stream_new(cpu, "s", NULL), "out is NULL", "tg_stream_new with a NULL out");
    refused(tg_stream_sync(NULL), "the stream is NULL", "tg_stream_sync of NULL");
    refused(tg_stream_begin_capture(NULL), "the stream is NULL", "tg_stream_begin_capture of NULL");
    tg_graph *g = NULL;
    refused(tg_stream_end_capture(NULL, &g), "the stream is NULL", "tg_stream_end_capture of NULL");
    ok(tg_stream_set_current(NULL) == NULL && strstr(tg_last_error(), "NULL") != NULL, "tg_stream_set_current(NULL)");
    ok(strcmp(tg_stream_name(NULL), "") == 0 && !tg_stream_capturing(NULL), "the stream accessors answer NULL");
    tg_stream *cur = tg_stream_current(cpu);
    if (tg_stream_begin_capture(cur) != TG_OK || tg_fill(t, 2) != TG_OK || tg_stream_end_capture(cur, &g) != TG_OK)
        bail_out("capture: %s", tg_last_error());
    refused(tg_graph_replay(g, NULL), "the stream is NULL", "tg_graph_replay on a NULL stream");
    tg_graph_free(g);
    refused(tg_event_new(cpu, 0, NULL), "out is NULL", "tg_event_new with a NULL out");
    refused(tg_event_sync(NULL), "the event is NULL", "tg_event_sync of NULL");
    int done = 0;
    refused(tg_event_query(NULL, &done), "the event is NULL", "tg_event_query of NULL");
    refused(tg_stream_wait_event(cur, NULL), "no event", "tg_stream_wait_event of a NULL event");
    double ms = 0;
    refused(tg_event_elapsed(NULL, NULL, &ms), "start is NULL", "tg_event_elapsed of NULL events");
    refused(tg_pool_new(cpu, NULL), "out is NULL", "tg_pool_new with a NULL out");
    refused(tg_pool_push(NULL), "the pool is NULL", "tg_pool_push(NULL)");
    tg_pool *p = NULL, *q = NULL;
    if (tg_pool_new(cpu, &p) != TG_OK || tg_pool_new(cpu, &q) != TG_OK || tg_pool_push(p) != TG_OK) bail_out("pool");
    tg_pool_pop(q);
    like(tg_last_error(), "not the one pushed last", "tg_pool_pop of a pool not on top notes an error");
    tg_pool_pop(p);
    tg_pool_pop(p);
    like(tg_last_error(), "no pool is pushed", "... and with none pushed, instead of aborting");
    size_t used = 1;
    tg_pool_stats(NULL, &used, NULL, NULL);
    is_int((long long)used, 0, "tg_pool_stats of NULL reports zeros");
    tg_pool_release(p), tg_pool_release(q);

    /* safetensors, tokenizer, sampling */
    refused(tg_safetensors_open("/nonexistent", NULL), "out is NULL", "tg_safetensors_open with a NULL out");
    refused(tg_safetensors_write("/tmp/never.safetensors", 1, NULL, NULL, 0, NULL, NULL), "names is NULL",
            "tg_safetensors_write of one tensor with NULL names");
    refused(tg_safetensors_read_into(NULL, "w", t), "the file handle is NULL", "tg_safetensors_read_into from NULL");
    refused(tg_tokenizer_bytes(NULL), "out is NULL", "tg_tokenizer_bytes with a NULL out");
    tg_tokenizer *tok = NULL;
    if (tg_tokenizer_bytes(&tok) != TG_OK) bail_out("tokenizer: %s", tg_last_error());
    int32_t *ids = NULL;
    size_t nids = 0;
    refused(tg_tokenizer_encode(NULL, "hi", 2, &ids, &nids, NULL, NULL), "the tokenizer is NULL", "tg_tokenizer_encode with NULL");
    refused(tg_tokenizer_encode(tok, NULL, 2, &ids, &nids, NULL, NULL), "text is NULL", "tg_tokenizer_encode of NULL text");
    ok(tg_tokenizer_encode(tok, "hi", SIZE_MAX, &ids, &nids, NULL, NULL) == TG_ENOMEM,
       "tg_tokenizer_encode of a length whose ids would not fit memory fails (it looped forever): %s", tg_last_error());
    char *text = NULL;
    size_t len = 0;
    refused(tg_tokenizer_decode(tok, NULL, 3, &text, &len), "ids is NULL", "tg_tokenizer_decode of NULL ids");
    ok(tg_tokenizer_vocab_size(NULL) == 0 && tg_tokenizer_token(NULL, 1, &len) == NULL &&
           tg_tokenizer_pieces(NULL, 5, NULL, 0) == 0,
       "the tokenizer accessors answer NULL");
    ok(tg_tokenizer_encode(tok, "hi", 2, &ids, &nids, NULL, NULL) == TG_OK && nids == 2 && ids[0] == 'h',
       "a valid encode after them works");
    free(ids);
    tg_tokenizer_free(tok);
    int64_t token = 0;
    uint64_t state = 1;
    float logits[2] = {0, 1};
    refused(tg_sample_logits(logits, 2, NULL, &state, &token), "the options is NULL", "tg_sample_logits with NULL options");

    /* the runtime */
    refused(tg_runtime_dostring(NULL, "x = 1", NULL), "NULL runtime", "tg_runtime_dostring on a NULL runtime");
    ok(tg_runtime_lua(NULL) == NULL, "tg_runtime_lua(NULL) is NULL");
    tg_runtime *rt = tg_runtime_new();
    if (!rt) bail_out("runtime");
    refused(tg_runtime_dofile(rt, "x.lua", 2, NULL), "argc 2", "tg_runtime_dofile with argc 2 and a NULL argv");
    tg_runtime_free(rt);

    ok(tg_fill(t, 3) == TG_OK && tg_sum(t, &d) == TG_OK && d == 18, "a valid call after all of them works (sum 18)");
    tg_tensor_free(t), tg_tensor_free(u);
    return done_testing();
}
