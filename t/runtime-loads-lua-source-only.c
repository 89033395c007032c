/* runtime-loads-lua-source-only.c — a runtime refuses precompiled (binary) Lua chunks, which Lua does not verify (a
 * damaged one crashed the process), at every way it loads code: tg_runtime_dofile and tg_runtime_dostring (TG_ELUA
 * naming the file or chunk), and, inside scripts, load, loadfile, dofile and require (their usual failure, the
 * message naming the chunk or file); a mode of "b" alone is refused; Lua source loads as before through each. */
#include <tegraph.h>

#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    tg_runtime *rt = tg_runtime_new();
    if (!rt) bail_out("no runtime: %s", tg_last_error());
    char dir[400], setup[1400];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tg-luac-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    /* a precompiled chunk (string.dump), a damaged copy of it, and a Lua source module; package.path finds both */
    snprintf(setup, sizeof setup,
             "dir = '%s'\n"
             "assert(os.execute('mkdir -p ' .. dir))\n"
             "local function write(name, s) local f = assert(io.open(dir .. '/' .. name, 'wb')); f:write(s); f:close() end\n"
             "code = string.dump(function(...) ran = true; return 42 end)\n"
             "write('chunk.luac', code)\n"
             "write('damaged.luac', code:sub(1, 40) .. string.rep('\\255', 8) .. code:sub(49))\n"
             "write('binmod.lua', code)\n"
             "write('srcmod.lua', 'return {answer = 42}')\n"
             "write('src.lua', 'return 7, ...')\n"
             "package.path = dir .. '/?.lua;' .. package.path\n",
             dir);
    if (tg_runtime_dostring(rt, setup, "=setup") != TG_OK) bail_out("setup: %s", tg_runtime_error(rt));

    char path[500];
    snprintf(path, sizeof path, "%s/chunk.luac", dir);
    ok(tg_runtime_dofile(rt, path, 0, NULL) == TG_ELUA, "tg_runtime_dofile of a precompiled chunk is TG_ELUA");
    like(tg_runtime_error(rt), path, "... naming the file");
    like(tg_runtime_error(rt), "is a precompiled (binary) Lua chunk: tegraph loads Lua source only",
         "... and saying why it is refused");
    snprintf(path, sizeof path, "%s/damaged.luac", dir);
    ok(tg_runtime_dofile(rt, path, 0, NULL) == TG_ELUA, "a damaged precompiled chunk is refused alike (no crash)");
    like(tg_runtime_error(rt), "damaged.luac is a precompiled (binary) Lua chunk", "... naming it");
    ok(tg_runtime_dostring(rt, "assert(ran == nil, 'a refused chunk ran')", "=check") == TG_OK,
       "neither chunk ran: %s", tg_runtime_error(rt));
    ok(tg_runtime_dostring(rt, "\033Lua\x54", "=host chunk") == TG_ELUA,
       "tg_runtime_dostring of code that starts as a precompiled chunk is TG_ELUA");
    like(tg_runtime_error(rt), "host chunk is a precompiled (binary) Lua chunk", "... naming the chunk");
    snprintf(path, sizeof path, "%s/src.lua", dir);
    char *args[] = {"a"};
    ok(tg_runtime_dofile(rt, path, 1, args) == TG_OK, "a Lua source file still runs: %s", tg_runtime_error(rt));

    static const struct {
        const char *code, *what;
    } in_lua[] = {
        {"local f, e = load(code); assert(f == nil and e:find('the chunk given to load is a precompiled', 1, true), e)",
         "load of a precompiled chunk fails (nil, message)"},
        {"local f, e = load(code, '=mine'); assert(f == nil and e:find('mine is a precompiled', 1, true), e)",
         "... naming its chunk name"},
        {"local f, e = load(code, 'x', 'b'); assert(f == nil and e:find(\"load: mode 'b' refused\", 1, true), e)",
         "load with mode 'b' is refused"},
        {"assert(load('return 1 + y', 'c', 'bt', {y = 2})() == 3)", "load of source (mode bt, an env) still works"},
        {"local f, e = loadfile(dir .. '/chunk.luac'); assert(f == nil and e:find(dir .. '/chunk.luac is a precompiled', 1, true), e)",
         "loadfile of a precompiled chunk fails naming the file"},
        {"local f, e = loadfile(dir .. '/chunk.luac', 'b'); assert(f == nil and e:find(\"loadfile: mode 'b' refused\", 1, true), e)",
         "loadfile with mode 'b' is refused"},
        {"assert(select(2, loadfile(dir .. '/src.lua', 't', {})('x')) == 'x')", "loadfile of source still works"},
        {"local ok, e = pcall(dofile, dir .. '/damaged.luac'); assert(not ok and e:find('damaged.luac is a precompiled', 1, true), e)",
         "dofile of a precompiled chunk raises, naming the file"},
        {"assert(dofile(dir .. '/src.lua') == 7)", "dofile of source still works"},
        {"local ok, e = pcall(require, 'binmod'); assert(not ok and e:find('binmod.lua is a precompiled', 1, true), e)",
         "require of a module file holding a precompiled chunk fails naming the file"},
        {"assert(require('srcmod').answer == 42)", "require of a source module still works"},
        {"local ok, e = pcall(require, 'no_such_mod'); assert(not ok and e:find(\"no file '\" .. dir .. '/no_such_mod.lua', 1, true), e)",
         "a missing module still lists the files tried"},
        {"assert(ran == nil, 'a refused chunk ran')", "no refused chunk ran"},
    };
    for (size_t i = 0; i < sizeof in_lua / sizeof in_lua[0]; i++)
        ok(tg_runtime_dostring(rt, in_lua[i].code, "=in lua") == TG_OK, "%s: %s", in_lua[i].what, tg_runtime_error(rt));

    tg_runtime_dostring(rt, "os.execute('rm -rf ' .. dir)", "=cleanup");
    tg_runtime_free(rt);
    return done_testing();
}
