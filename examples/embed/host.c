/* host.c — embedding example: a C program runs Lua in a tegraph runtime, gives scripts C functions, and hooks C into a graphed model's wgrads. */
#include <tegraph.h>

#include <lauxlib.h>
#include <lua.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* host_scale(t, s): t = s * t in place, computed by the C host; returns t. */
static int host_scale(lua_State *L)
{
    tg_tensor *t = tg_lua_checktensor(L, 1); /* owned by Lua: do not free */
    double s = luaL_checknumber(L, 2);
    tg_lua_check(L, tg_axpby(t, s, t, 0.0)); /* a tegraph error becomes a Lua error at the caller */
    lua_settop(L, 1);
    return 1;
}

/* host_iota(n): a new tensor 1, 2, ..., n made in C and handed to Lua. */
static int host_iota(lua_State *L)
{
    int64_t n = (int64_t)luaL_checkinteger(L, 1);
    double vals[64];
    luaL_argcheck(L, n >= 1 && n <= 64, 1, "1 to 64 elements");
    tg_tensor **slot = tg_lua_newtensor(L); /* Lua owns the tensor from here on */
    tg_lua_check(L, tg_tensor_new(TG_F32, 1, &n, tg_default_device(), slot));
    for (int64_t i = 0; i < n; i++) vals[i] = (double)(i + 1);
    tg_lua_check(L, tg_tensor_write_f64(*slot, vals, (size_t)n));
    return 1;
}

static const char *script =
    "local t = host_iota(4)                       -- made in C\n"
    "host_scale(t, 2.5)                           -- scaled in C\n"
    "local v = t:totable()\n"
    "assert(v[4] == 10, 'expected 10, got ' .. tostring(v[4]))\n"
    "assert(tg.host.host_scale == host_scale)     -- also under tegraph.host\n"
    "print(string.format('lua: scaled %s -> {%g, %g, %g, %g}', t.device, v[1], v[2], v[3], v[4]))\n"
    "result = t                                   -- for the host to read back\n";

static const char *failing = "local t = tg.zeros({2, 3})\n"
                             "host_scale(t, 'twice')\n";

/* ------------------------------------------------------------------ a C wgrad hook
 * The script builds two Linears with delayed wgrad into f32 main_grad,
 * captures them as a graphed callable (F, B and W graphs per microbatch) and
 * hands the parameters to host_watch, which adds a C hook to each. Every
 * microbatch uses the same input and gradient, so each W replay adds the same
 * wgrad: a hook running after its replay sees main_grad = (dispatches so far)
 * x (the final main_grad) / M. An eager copy of the model gives the reference
 * gradients. */
/* ---- BEGIN hook script ---- */
static const char *hook_script =
    "local D, T, M = 8, 4, 3\n"
    "local function build()\n"
    "  tg.manual_seed(1)\n"
    "  return tg.nn.Sequential { name = 'net',\n"
    "    tg.nn.Linear(D, D, { name = 'fc1', delay_wgrad = true, fuse_wgrad_accumulation = true }),\n"
    "    tg.nn.Linear(D, D, { name = 'fc2', delay_wgrad = true, fuse_wgrad_accumulation = true }) }\n"
    "end\n"
    "tg.manual_seed(2)\n"
    "local x, dy = tg.randn { T, D }, tg.randn { T, D }\n"
    "model, eager = build(), build()\n"
    "local g = tg.graph.make_graphed(model, { sample = x, microbatches = M })\n"
    "host_watch(model:parameters(), eager:parameters(), M)\n"
    "function graphed_step()\n"
    "  tg.step_begin { microbatches = M }\n"
    "  for mb = 1, M do g:forward(x, mb) end\n"
    "  for mb = M, 1, -1 do g:backward(dy, mb); g:backward_dw(mb) end\n"
    "  tg.step_end()\n"
    "end\n"
    "tg.step_begin { microbatches = M }\n"
    "for mb = 1, M do eager:forward(x, mb) end\n"
    "for mb = M, 1, -1 do eager:backward(dy, mb); eager:backward_dw(mb) end\n"
    "tg.step_end()\n";
/* ---- END hook script ---- */

#define MAXP 8  /* parameters watched */
#define MAXD 16 /* dispatches recorded per parameter */

static struct {
    int np, m;
    tg_param *p[MAXP], *eager[MAXP];
    int id[MAXP];            /* the recording hook's handle on p[i] */
    int calls[MAXP];         /* its dispatches */
    tg_hook_info info[MAXP][MAXD];
    double seen[MAXP][MAXD]; /* max |main_grad| at each dispatch */
    int freed;               /* free_ud calls */
    int later[MAXP];         /* dispatches of the hook added after the removal */
    int64_t later_step;
    int refuse_mb;           /* the failing hook's microbatch */
} w;

/* The recording hook: what the engine tells it, and the gradient it sees. */
static tg_status record_hook(void *ud, tg_param *p, const tg_hook_info *info)
{
    int i = (int)(intptr_t)ud;
    if (p != w.p[i]) return tg_error(TG_EINVAL, "host hook %d called for %s", i, tg_param_name(p));
    int k = w.calls[i]++;
    if (k >= MAXD) return tg_error(TG_ESTATE, "host hook: %s fired more than %d times", tg_param_name(p), MAXD);
    w.info[i][k] = *info;
    return tg_max_abs(tg_param_main_grad(p), &w.seen[i][k]); /* blocking: the W replay's work is done */
}

static void record_free(void *ud)
{
    (void)ud;
    w.freed++;
}

static tg_status later_hook(void *ud, tg_param *p, const tg_hook_info *info)
{
    (void)p;
    w.later[(int)(intptr_t)ud]++;
    w.later_step = info->step;
    return TG_OK;
}

/* A hook that fails: the backward that fires it fails with this message. */
static tg_status refuse_hook(void *ud, tg_param *p, const tg_hook_info *info)
{
    (void)ud;
    if (info->microbatch == w.refuse_mb)
        return tg_error(TG_EINVAL, "host hook refuses microbatch %d of %s", info->microbatch, tg_param_name(p));
    return TG_OK;
}

/* host_watch(params, eager_params, M): adds the recording hook to each parameter of the graphed model. */
static int host_watch(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    w.m = (int)luaL_checkinteger(L, 3);
    w.np = (int)luaL_len(L, 1);
    luaL_argcheck(L, w.np >= 1 && w.np <= MAXP && luaL_len(L, 2) == w.np, 1, "1 to 8 parameters, as many as the eager model's");
    luaL_argcheck(L, w.m >= 1 && w.m <= MAXD, 3, "1 to 16 microbatches");
    for (int i = 0; i < w.np; i++) {
        lua_geti(L, 1, i + 1);
        w.p[i] = tg_lua_checkparam(L, -1); /* lives with the model (a global of the script) */
        lua_geti(L, 2, i + 1);
        w.eager[i] = tg_lua_checkparam(L, -1);
        lua_pop(L, 2);
        tg_lua_check(L, tg_param_add_hook(w.p[i], record_hook, (void *)(intptr_t)i, record_free, &w.id[i]));
    }
    return 0;
}

/* Checks what the hooks recorded in the first graphed step; returns the number of problems. */
static int check_step(void)
{
    int bad = 0;
    for (int i = 0; i < w.np; i++) {
        const char *name = tg_param_name(w.p[i]);
        double final = 0, diff = 0, ref = 0;
        if (tg_max_abs(tg_param_main_grad(w.p[i]), &final) != TG_OK ||
            tg_max_abs(tg_param_main_grad(w.eager[i]), &ref) != TG_OK ||
            tg_max_abs_diff(tg_param_main_grad(w.p[i]), tg_param_main_grad(w.eager[i]), &diff) != TG_OK) {
            fprintf(stderr, "host: reading %s: %s\n", name, tg_last_error());
            return bad + 1;
        }
        if (w.calls[i] != w.m) {
            fprintf(stderr, "host: the hook of %s ran %d times, expected once per microbatch (%d)\n", name, w.calls[i], w.m);
            bad++;
            continue;
        }
        if (!(final > 0) || diff > 1e-5 * ref) {
            fprintf(stderr, "host: %s: graphed main_grad differs from the eager one by %g (max %g)\n", name, diff, ref);
            bad++;
        }
        for (int k = 0; k < w.m; k++) {
            const tg_hook_info *in = &w.info[i][k];
            /* backward runs microbatches M..1: dispatch k is microbatch M - k, the last one is last */
            if (in->microbatch != w.m - k || in->last != (k == w.m - 1) || in->chunk != 1 || in->step < 1 ||
                in->step != w.info[i][0].step) {
                fprintf(stderr, "host: %s dispatch %d: microbatch %d last %d chunk %d step %lld\n", name, k + 1,
                        in->microbatch, in->last, in->chunk, (long long)in->step);
                bad++;
            }
            double want = final * (k + 1) / w.m; /* k + 1 W replays are in */
            if (fabs(w.seen[i][k] - want) > 1e-5 * final) {
                fprintf(stderr, "host: %s dispatch %d saw max |main_grad| %g, expected %g (after %d W replays)\n", name,
                        k + 1, w.seen[i][k], want, k + 1);
                bad++;
            }
        }
    }
    return bad;
}

/* Runs the hook example; returns the number of problems. */
static int hooks_example(tg_runtime *rt)
{
    int bad = 0;
    tg_runtime_register(rt, "host_watch", host_watch);
    if (tg_runtime_dostring(rt, hook_script, "=hook-script") != TG_OK ||
        tg_runtime_dostring(rt, "graphed_step()", "=step-1") != TG_OK) {
        fprintf(stderr, "host: hook script failed:\n%s\n", tg_runtime_error(rt));
        return 1;
    }
    int step_bad = check_step();
    printf("host: C hook on %d parameters x %d microbatches: %s\n", w.np, w.m,
           step_bad ? "WRONG" : "once each, after its W replay, main_grad as eager");
    bad += step_bad;

    /* Removal: the recording hook goes (its free_ud runs), a second hook stays. */
    int removed = 0;
    for (int i = 0; i < w.np; i++) {
        removed += tg_param_remove_hook(w.p[i], w.id[i]) == TG_OK;
        tg_status st = tg_param_add_hook(w.p[i], later_hook, (void *)(intptr_t)i, NULL, NULL);
        if (st != TG_OK) return bad + 1;
    }
    tg_status again = tg_param_remove_hook(w.p[0], w.id[0]);
    int named = again == TG_EINVAL && strstr(tg_last_error(), tg_param_name(w.p[0])) != NULL;
    int64_t step1 = w.info[0][0].step;
    if (tg_runtime_dostring(rt, "graphed_step()", "=step-2") != TG_OK) {
        fprintf(stderr, "host: second step failed:\n%s\n", tg_runtime_error(rt));
        return bad + 1;
    }
    int rm_ok = removed == w.np && w.freed == w.np && named && w.later_step == step1 + 1;
    for (int i = 0; i < w.np; i++) rm_ok = rm_ok && w.calls[i] == w.m && w.later[i] == w.m && tg_param_hook_count(w.p[i]) == 1;
    printf("host: removed hooks: %s\n", rm_ok ? "silent in the next step, the other hook still fires" : "WRONG");
    if (!rm_ok) {
        fprintf(stderr, "host: removal: %d removed, %d freed, second removal %s (%s), hook count %d, step %lld after %lld\n",
                removed, w.freed, tg_status_name(again), tg_last_error(), tg_param_hook_count(w.p[0]),
                (long long)w.later_step, (long long)step1);
        bad++;
    }

    /* A failing C hook aborts the backward like a Lua hook error, with its message. */
    w.refuse_mb = 2;
    if (tg_param_add_hook(w.p[0], refuse_hook, NULL, NULL, NULL) != TG_OK) return bad + 1;
    tg_status st = tg_runtime_dostring(rt, "graphed_step()", "=step-3");
    const char *err = tg_runtime_error(rt);
    int fail_ok = st == TG_ELUA && strstr(err, "host hook refuses microbatch 2 of fc1.weight") && strstr(err, "wgrad hook 2 of fc1.weight");
    printf("host: failing C hook -> %s\n", fail_ok ? "the backward fails with its message" : "WRONG");
    if (!fail_ok) {
        fprintf(stderr, "host: failing hook: %s: %s\n", tg_status_name(st), err);
        bad++;
    }
    return bad;
}

int main(void)
{
    int bad = 0;
    tg_runtime *rt = tg_runtime_new();
    if (rt == NULL) {
        fprintf(stderr, "host: cannot create a runtime: %s\n", tg_last_error());
        return 1;
    }
    tg_runtime_register(rt, "host_scale", host_scale);
    tg_runtime_register(rt, "host_iota", host_iota);

    if (tg_runtime_dostring(rt, script, "=host-script") != TG_OK) {
        fprintf(stderr, "host: script failed:\n%s\n", tg_runtime_error(rt));
        bad++;
    } else {
        /* Read the tensor the script left in the global `result`. */
        lua_State *L = tg_runtime_lua(rt);
        lua_getglobal(L, "result");
        tg_tensor *r = tg_lua_totensor(L, -1);
        double sum = 0;
        if (r == NULL || tg_sum(r, &sum) != TG_OK || sum != 25.0) {
            fprintf(stderr, "host: expected result to sum to 25, got %g\n", sum);
            bad++;
        } else {
            printf("host: result sums to %g\n", sum);
        }
        lua_pop(L, 1);
    }

    /* A failing script: the runtime reports FILE:LINE: message and a traceback. */
    tg_status st = tg_runtime_dostring(rt, failing, "=failing-script");
    const char *err = tg_runtime_error(rt);
    size_t first = strcspn(err, "\n");
    printf("host: failing script -> %s: %.*s\n", tg_status_name(st), (int)first, err);
    if (st != TG_ELUA || strncmp(err, "failing-script:2:", 17) != 0) bad++;

    bad += hooks_example(rt);

    tg_runtime_free(rt);
    printf("host: %s\n", bad ? "FAILED" : "all good");
    return bad ? 1 : 0;
}
