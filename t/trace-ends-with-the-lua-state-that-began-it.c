/* trace-ends-with-the-lua-state-that-began-it.c — a trace begun from Lua whose script fails before
 * trace.stop ends when its runtime is freed: the next runtime sees no trace running and can begin one;
 * a trace that was stopped is not touched by the first runtime's later collection. */
#include <tegraph.h>

#include "tap.h"

#include <string.h>

static const char *const train_and_fail =
    "local m = tg.nn.Linear(8, 8, {device = 'cpu'})\n"
    "local x = tg.randn({4, 8}, {device = 'cpu'})\n"
    "tg.trace.start()\n"
    "for i = 1, 3 do tg.step_begin{microbatches = 1}; m:forward(x, 1); m:backward(x, 1); tg.step_end() end\n"
    "error('the script failed mid-trace')\n";

int main(void)
{
    plan(NO_PLAN);
    tg_runtime *a = tg_runtime_new();
    ok(a && tg_runtime_dostring(a, train_and_fail, "=a") != TG_OK && strstr(tg_runtime_error(a), "mid-trace"),
       "runtime a began a trace and failed before stopping it");
    ok(a && tg_runtime_dostring(a, "assert(tg.trace.active())", "=a2") == TG_OK, "... its trace is still running");
    tg_runtime_free(a);

    tg_runtime *b = tg_runtime_new();
    ok(b && tg_runtime_dostring(b, "assert(not tg.trace.active(), 'a trace still runs')", "=b") == TG_OK,
       "after runtime a is freed no trace runs: %s", b ? tg_runtime_error(b) : "no runtime");
    ok(b && tg_runtime_dostring(b, "tg.trace.start()", "=b2") == TG_OK, "runtime b can begin a trace");

    /* a stopped trace's sentinel is disarmed: collecting it does not end b's trace */
    tg_runtime *c = tg_runtime_new();
    ok(c && tg_runtime_dostring(c, "assert(tg.trace.active())", "=c") == TG_OK, "runtime c sees b's trace");
    tg_runtime_free(c);
    ok(b && tg_runtime_dostring(b, "assert(tg.trace.active()); tg.trace.stop(nil, {quiet = true}); collectgarbage()\n"
                                   "assert(not tg.trace.active())", "=b3") == TG_OK,
       "freeing another runtime left b's trace running, and b's stop ended it: %s", b ? tg_runtime_error(b) : "");
    ok(b && tg_runtime_dostring(b, "tg.trace.start(); tg.trace.stop(nil, {quiet = true})", "=b4") == TG_OK,
       "a trace begins and ends again in b after its first sentinel was collected");
    tg_runtime_free(b);
    return done_testing();
}
