/* trace-file-is-json-whatever-the-spans-say.c — tg_trace_span_begin refuses a track other than "compute", "comm" and
 * "host" (a misspelt one went to "host"), and args that are not JSON object members (they were pasted into the file
 * unchecked, breaking it), returning -1 with TG_EINVAL naming them; NULL track is "host"; names with quotes, control
 * characters or invalid UTF-8 are escaped; whitespace-only args are none. The file the trace writes parses as strict
 * JSON, with the good spans' args in it. */
#include "io/json.h"
#include "tegraph.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int refused(int id, const char *want, const char *what)
{
    return ok(id == -1 && strstr(tg_last_error(), want) != NULL, "%s is refused (id %d: \"%s\")", what, id,
              tg_last_error());
}

/* The span named name in the parsed trace, or NULL. */
static const tg_json *span_named(const tg_json *events, const char *name)
{
    for (size_t i = 0; i < events->len; i++) {
        const tg_json *n = tg_json_get(&events->items[i], "name");
        const tg_json *ph = tg_json_get(&events->items[i], "ph");
        if (n && ph && n->type == TG_JSON_STRING && strcmp(n->str, name) == 0 && strcmp(ph->str, "X") == 0)
            return &events->items[i];
    }
    return NULL;
}

int main(void)
{
    if (tg_trace_begin() != TG_OK) bail_out("trace: %s", tg_last_error());
    refused(tg_trace_span_begin(NULL, "bogus-track", "x", NULL), "no track 'bogus-track' (tracks: compute, comm, host)",
            "a misspelt track");
    static const char *const bad_args[] = {"\"mb\": }broken json", "\"mb\":2}, {\"x\":1", "mb:2", "\"mb\":2,",
                                           "\"a\":1,\"a\":2", "\"s\":\"\xff\""};
    for (size_t i = 0; i < sizeof bad_args / sizeof bad_args[0]; i++) {
        char what[96];
        snprintf(what, sizeof what, "args %zu (not JSON object members)", i + 1);
        refused(tg_trace_span_begin(NULL, "host", "x", bad_args[i]), "args are not JSON object members", what);
    }
    int id = tg_trace_span_begin(NULL, NULL, "null track", NULL);
    ok(id >= 0, "a NULL track is a host span (id %d)", id);
    tg_trace_span_end(id, NULL);
    id = tg_trace_span_begin(NULL, "comm", "with args", "\"mb\": 2, \"tag\": \"a \\\"b\\\"\", \"list\": [1, {\"k\": null}]");
    ok(id >= 0, "JSON object members are taken as args (id %d: %s)", id, id < 0 ? tg_last_error() : "");
    tg_trace_span_end(id, NULL);
    id = tg_trace_span_begin(NULL, "host", "blank args", "   ");
    ok(id >= 0, "whitespace args are no args");
    tg_trace_span_end(id, NULL);
    id = tg_trace_span_begin(NULL, "compute", "odd \"name\"\n\x01 \xff\xfe end", NULL);
    ok(id >= 0, "a name with quotes, control characters and invalid UTF-8 is recorded");
    tg_trace_span_end(id, NULL);

    char path[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/tg-trace-json-%ld.json", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    tg_trace_summary sum;
    if (tg_trace_end(path, &sum) != TG_OK) bail_out("trace_end: %s", tg_last_error());
    ok(sum.nspans == 4, "the four good spans were written (%d)", sum.nspans);
    FILE *f = fopen(path, "rb");
    if (!f) bail_out("cannot read %s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    remove(path);
    tg_json doc;
    char err[160] = "";
    int parsed = tg_json_parse(text, n, 16, &doc, err, sizeof err) == 0;
    ok(parsed, "the trace file parses as strict JSON (%s)", err);
    if (parsed) {
        const tg_json *ev = tg_json_get(&doc, "traceEvents");
        const tg_json *s = ev ? span_named(ev, "with args") : NULL;
        const tg_json *args = s ? tg_json_get(s, "args") : NULL;
        const tg_json *mb = args ? tg_json_get(args, "mb") : NULL, *tag = args ? tg_json_get(args, "tag") : NULL;
        ok(mb && mb->type == TG_JSON_INT && mb->i == 2 && tag && strcmp(tag->str, "a \"b\"") == 0,
           "the span's args are in its \"args\" object");
        const tg_json *tid = s ? tg_json_get(s, "tid") : NULL;
        ok(tid && tid->i == 2, "on the comm track (tid 2)");
        const tg_json *odd = ev ? span_named(ev, "odd \"name\"\n\x01 \xef\xbf\xbd\xef\xbf\xbd end") : NULL;
        ok(odd != NULL, "the odd name is there, escaped, its invalid bytes U+FFFD");
        const tg_json *nt = ev ? span_named(ev, "null track") : NULL;
        ok(nt && tg_json_get(nt, "tid")->i == 3, "the NULL-track span is on the host track (tid 3)");
        tg_json_free(&doc);
    }
    return done_testing();
}
