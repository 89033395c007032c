/* step-ends-with-the-lua-state-that-began-it.c — the engine's step is process-wide. A script that fails mid-step
 * (delayed wgrads queued) leaves it open in its runtime; freeing that runtime abandons the step and what it queued,
 * so a new runtime steps at once. Two live runtimes share the one step: while one has a step open, the other's
 * step_begin and step_end fail saying the step belongs to another Lua state (one step at a time per process), the
 * owner's step is untouched, and freeing a runtime that holds no step leaves another's open. */
#include <tegraph.h>

#include "tap.h"

#include <string.h>

static const char *const model =
    "m = tg.nn.Linear(8, 8, {device = 'cpu', delay_wgrad = true})\n"
    "x, dy = tg.randn({4, 8}, {device = 'cpu'}), tg.randn({4, 8}, {device = 'cpu'})\n"
    "function step() tg.step_begin{microbatches = 1}; m:forward(x, 1); m:backward(dy, 1); m:backward_dw(1); "
    "tg.step_end() end\n";

/* rt runs code; the result is ok when want is NULL, else TG_ELUA with want in the message. */
static int runs(tg_runtime *rt, const char *code, const char *want)
{
    if (!rt) return 0;
    tg_status st = tg_runtime_dostring(rt, code, "=script");
    int r = want ? st == TG_ELUA && strstr(tg_runtime_error(rt), want) != NULL : st == TG_OK;
    if (!r) diag("got %s: %s", tg_status_name(st), tg_runtime_error(rt));
    return r;
}

int main(void)
{
    plan(NO_PLAN);
    tg_runtime *a = tg_runtime_new();
    ok(runs(a, model, NULL) && runs(a, "step()", NULL), "runtime a runs a step");
    ok(runs(a, "tg.step_begin{microbatches = 1}; m:forward(x, 1); m:backward(dy, 1); error('failed mid-step')",
            "failed mid-step"),
       "runtime a's script fails mid-step, its delayed wgrad queued");
    ok(runs(a, "assert(tg.step_open())", NULL), "... its step is still open in a");
    tg_runtime_free(a);

    tg_runtime *b = tg_runtime_new();
    ok(runs(b, "assert(not tg.step_open(), 'a step is still open')", NULL), "after runtime a is freed no step is open");
    ok(runs(b, model, NULL) && runs(b, "step(); step()", NULL), "runtime b runs steps");

    /* two live runtimes: one step at a time */
    tg_runtime *c = tg_runtime_new();
    ok(runs(c, model, NULL) && runs(c, "mine = tg.step_begin{microbatches = 1}; m:forward(x, 1)", NULL),
       "runtime c begins a step");
    ok(runs(b, "step()", "is open in another Lua state of this process (another runtime)"),
       "runtime b's step_begin fails saying another Lua state's step is open");
    like(tg_runtime_error(b), "one step at a time", "... the process has one step at a time");
    ok(runs(b, "tg.step_end()", "was begun by another Lua state"),
       "runtime b's step_end does not end c's step, saying whose it is");
    tg_runtime *d = tg_runtime_new();
    tg_runtime_free(d);
    ok(runs(c, "assert(tg.step_open() and tg.step_index() == mine); m:backward(dy, 1); m:backward_dw(1); tg.step_end()",
            NULL),
       "c's step stayed open through them and a runtime freed meanwhile, and c ends it");
    ok(runs(b, "step()", NULL), "then b steps again");
    tg_runtime_free(c);
    tg_runtime_free(b);
    return done_testing();
}
