/* The public world calls of tegraph.h outside a multi-rank job: an NCCL id (or TG_ENOTSUP without NCCL), drain,
 * abort (a no-op: the process goes on), and finalize (communicators refuse work afterwards). */
#include "tegraph.h"
#include "tap.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    unsetenv("TG_RANK");
    unsetenv("TG_WORLD_SIZE");
    char hex[2 * 128 + 1], small[16];
    memset(hex, 0, sizeof hex);
    tg_status st = tg_world_nccl_id(hex, sizeof hex);
    if (strstr(tg_build_options(), "nccl=yes")) {
        int allhex = strlen(hex) == 2 * 128;
        for (size_t i = 0; allhex && hex[i]; i++) allhex = isxdigit((unsigned char)hex[i]) != 0;
        ok(st == TG_OK && allhex, "tg_world_nccl_id writes 256 hex digits (%s)", st == TG_OK ? hex : tg_last_error());
        ok(tg_world_nccl_id(small, sizeof small) == TG_EINVAL, "a buffer too small for the id is refused");
    } else {
        ok(st == TG_ENOTSUP, "tg_world_nccl_id without NCCL is TG_ENOTSUP");
        like(tg_last_error(), "without NCCL", "the message says NCCL is missing");
    }

    ok(tg_world_drain() == TG_OK, "drain with no communicator succeeds");
    tg_runtime *rt = tg_runtime_new();
    ok(rt && tg_runtime_dostring(rt,
                                 "W = tg.comm.world(); assert(W:size() == 1)\n"
                                 "local t = tg.tensor({1, 2}); W:all_reduce(t); assert(t:totable()[2] == 2)",
                                 "=world") == TG_OK,
       "a script uses the single-rank world: %s", rt ? tg_runtime_error(rt) : "no runtime");
    ok(tg_world_drain() == TG_OK, "drain after the script's collectives succeeds");
    tg_world_abort(3);
    ok(tg_world_drain() == TG_OK, "abort outside a multi-rank job returns and leaves the world usable");
    ok(rt && tg_runtime_dostring(rt, "W:all_reduce(tg.tensor({1}))", "=again") == TG_OK, "the world still reduces");

    tg_world_finalize();
    tg_world_finalize();
    ok(rt && tg_runtime_dostring(rt, "W:all_reduce(tg.tensor({1}))", "=after") != TG_OK,
       "after finalize (twice: idempotent) the world refuses work");
    like(rt ? tg_runtime_error(rt) : "", "finalised", "naming the finalised communicators");
    tg_runtime_free(rt);
    return done_testing();
}
