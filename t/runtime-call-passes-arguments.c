/* tg_runtime_call: a Lua module function gets the host's strings as its parameters, its integer result comes
 * back (one outside the int range is refused), and a missing module or function or a raised error is TG_ELUA with the
 * message. Every failing runtime call, argument errors included, leaves its own message in tg_runtime_error (not an
 * older script's); without the Lua library tg_runtime_new is NULL with the reason in tg_last_error. A script's
 * os.exit is reported with the code it gave; tg_runtime_allow_exit in a runtime whose script made os read-only fails
 * with the script's error instead of aborting the host. */
#include "tegraph.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    tg_runtime *rt = tg_runtime_new();
    if (!rt) bail_out("no runtime: %s", tg_last_error());
    ok(tg_runtime_dostring(rt,
                           "package.loaded.probe = {\n"
                           "  count = function(...) seen = {...}; return select('#', ...) end,\n"
                           "  word = function() return 'not a number' end,\n"
                           "  fail = function(what) error('probe failed on ' .. what) end,\n"
                           "  huge = function() return (1 << 32) + 7 end,\n"
                           "}",
                           "=setup") == TG_OK,
       "a module of the host's own");

    char *args[] = {"1f1b", "", "--stages=4"};
    int result = -1;
    ok(tg_runtime_call(rt, "probe", "count", 3, args, &result) == TG_OK, "calling probe.count succeeds");
    is_int(result, 3, "its integer result comes back (3 arguments)");
    ok(tg_runtime_dostring(rt, "assert(seen[1] == '1f1b' and seen[2] == '' and seen[3] == '--stages=4')", "=check") ==
           TG_OK,
       "the function got the strings, in order, as its parameters: %s", tg_runtime_error(rt));
    ok(tg_runtime_dostring(rt, "assert(rawget(_G, 'arg') == nil)", "=noarg") == TG_OK, "no global carries them");

    char *hello[] = {"hello"};
    ok(tg_runtime_call(rt, "string", "len", 1, hello, &result) == TG_OK && result == 5,
       "a library function: string.len('hello') = %d", result);
    result = 42;
    ok(tg_runtime_call(rt, "probe", "word", 0, NULL, &result) == TG_OK && result == 42,
       "a result that is not an integer leaves *result as it was");
    result = 42;
    ok(tg_runtime_call(rt, "probe", "huge", 0, NULL, &result) == TG_EINVAL && result == 42,
       "an integer result outside the int range is an error, not truncated (2^32 + 7 read as 7)");
    like(tg_last_error(), "probe.huge returned 4294967303, outside the int range", "naming the function and the value");
    ok(tg_runtime_call(rt, "probe", "count", 0, NULL, NULL) == TG_OK, "result may be NULL");

    ok(tg_runtime_call(rt, "probe", "nope", 0, NULL, &result) == TG_ELUA, "a missing function is TG_ELUA");
    like(tg_runtime_error(rt), "probe.nope is not a function", "naming module and function");
    ok(tg_runtime_call(rt, "no_such_module", "f", 0, NULL, &result) == TG_ELUA, "a missing module is TG_ELUA");
    like(tg_runtime_error(rt), "module 'no_such_module' not found", "with require's message");
    char *what[] = {"purpose"};
    ok(tg_runtime_call(rt, "probe", "fail", 1, what, &result) == TG_ELUA, "an error raised by the function is TG_ELUA");
    like(tg_runtime_error(rt), "setup:4: probe failed on purpose", "its message has the function's FILE:LINE");
    like(tg_runtime_error(rt), "stack traceback:", "and a traceback");
    ok(tg_runtime_call(rt, "probe", "count", 1, NULL, &result) == TG_EINVAL, "argc without argv is refused");
    like(tg_runtime_error(rt), "call needs a module, a function name and argc arguments",
         "... and the runtime's error is that refusal, not the error raised before it");
    ok(tg_runtime_dostring(rt, "error('an older script failed')", "=older") == TG_ELUA, "a script fails");
    ok(tg_runtime_dofile(rt, "train.lua", 2, NULL) == TG_EINVAL, "dofile with argc 2 and argv NULL is TG_EINVAL");
    like(tg_runtime_error(rt), "runtime: dofile with argc 2 and a NULL argv",
         "... and the runtime's error says so, not the older script's message");
    ok(tg_runtime_dofile(rt, NULL, 0, NULL) == TG_EINVAL, "dofile without a path is TG_EINVAL");
    like(tg_runtime_error(rt), "runtime: dofile needs a path", "... in the runtime's error too");
    ok(tg_runtime_dostring(rt, NULL, "=none") == TG_EINVAL, "dostring without code is TG_EINVAL");
    like(tg_runtime_error(rt), "runtime: dostring needs code", "... in the runtime's error too");
    ok(tg_runtime_register(rt, "", NULL) == TG_EINVAL,
       "register without a name or function is TG_EINVAL");
    like(tg_runtime_error(rt), "runtime: register needs a name and a function", "... in the runtime's error too");
    ok(tg_runtime_dostring(rt, "assert(select('#', ...) == 0)", "=stack") == TG_OK, "the runtime still runs chunks");

    /* the library never ends the host's process: a script's os.exit, or a command-line parser's exit on a bad
     * option, comes back as TG_ELUA; tg_runtime_allow_exit gives scripts Lua's own os.exit (the tegraph program) */
    ok(tg_runtime_dostring(rt, "os.exit(3)", "=exiting") == TG_ELUA, "os.exit(3) in an embedded runtime is TG_ELUA");
    like(tg_runtime_error(rt), "exiting:1: os.exit(3) in an embedded tegraph runtime", "naming the call and the line");
    ok(tg_runtime_dostring(rt, "require('tegraph.cli').parse('prog', {{'steps', 1, 'optimizer steps'}}, {'--stepz', '3'}, "
                               "{stderr = io.open('/dev/null', 'w')})", "=cli") == TG_ELUA,
       "a script's bad command-line option is TG_ELUA, not an exit");
    ok(tg_runtime_dostring(rt, "return 1", "=after") == TG_OK, "... and the host goes on");
    ok(tg_runtime_dostring(rt, "os.exit(2^40 // 1)", "=big") == TG_ELUA, "os.exit(2^40) is TG_ELUA");
    like(tg_runtime_error(rt), "big:1: os.exit(1099511627776) in an embedded",
         "... and the message says the code the script gave, not its int cast (0)");
    tg_runtime_free(rt);

    /* tg_runtime_allow_exit sets os.exit inside a pcall: a script's read-only os, or a _G that raises on a name it
     * does not know, fails the call (TG_ELUA with the script's message) instead of a Lua panic aborting the host */
    static const char *const sandboxes[] = {
        "os = setmetatable({}, {__index = os, __newindex = function(t, k) error('os is read-only: ' .. k) end})",
        "os = nil; setmetatable(_G, {__index = function(t, k) error('undefined global ' .. k, 2) end})",
    };
    static const char *const said[] = {"os is read-only: exit", "undefined global os"};
    for (int i = 0; i < 2; i++) {
        tg_runtime *sb = tg_runtime_new();
        if (!sb) bail_out("no runtime: %s", tg_last_error());
        ok(tg_runtime_dostring(sb, sandboxes[i], "=sandbox") == TG_OK, "a script sandboxes os (%d)", i + 1);
        ok(tg_runtime_allow_exit(sb) == TG_ELUA, "... tg_runtime_allow_exit then fails with TG_ELUA, the host alive");
        like(tg_runtime_error(sb), said[i], "... with the script's message in tg_runtime_error");
        like(tg_last_error(), "runtime: allow_exit cannot give the scripts Lua's os.exit", "... and in tg_last_error");
        ok(tg_runtime_dostring(sb, "return 1", "=after") == TG_OK, "... and the runtime still runs chunks");
        tg_runtime_free(sb);
    }

    /* no Lua library to load (an empty TEGRAPH_LUA_PATH entry and nothing installed): NULL, and tg_last_error
     * says why; an installed library would be found, so that case is only checked where there is none */
    if (access(TG_LUADIR "/tegraph/init.lua", F_OK) == 0) {
        ok(1, "# skip a tegraph Lua library is installed in " TG_LUADIR);
    } else {
        setenv("TEGRAPH_LUA_PATH", "/nonexistent/tegraph-lua", 1);
        setenv("LUA_PATH", "/nonexistent/?.lua", 1);
        tg_runtime *none = tg_runtime_new();
        ok(none == NULL, "without the Lua library tg_runtime_new returns NULL");
        like(tg_last_error(), "runtime: cannot load the tegraph Lua library", "... with the reason in tg_last_error");
        tg_runtime_free(none);
    }
    return done_testing();
}
