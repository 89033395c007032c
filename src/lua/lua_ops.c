/* lua_ops.c — tegraph.ops: thin bindings of the transformer and optimizer ops for layers written in Lua (token decoding: lua_data.c). */
#include "lua/lua_nn.h"
#include "lua/lua_data.h"
#include "core/ops_nn.h"
#include "core/ops_optim.h"

#include <math.h>
#include <string.h>

/* Conventions: forward and dgrad ops allocate and return their outputs (on
 * the input's device); wgrad ops ("_backward_dw") write into the tensors
 * given first and take `accumulate` (0 overwrite, 1 add) last. */

static tg_tensor *opt_tensor(lua_State *L, int idx) { return lua_isnoneornil(L, idx) ? NULL : tgl_tensor_check(L, idx); }

/* A new tensor (pushed) on like's device. */
static tg_tensor *push_new(lua_State *L, const tg_tensor *like, tg_dtype dt, int nd, const int64_t *shape)
{
    tg_tensor **slot = tgl_tensor_push(L);
    tgl_check(L, tg_tensor_new(dt, nd, shape, tg_tensor_device(like), slot));
    return *slot;
}

static tg_tensor *push_like(lua_State *L, const tg_tensor *t, tg_dtype dt)
{
    int64_t shape[TG_MAX_DIMS];
    for (int i = 0; i < tg_tensor_ndim(t); i++) shape[i] = tg_tensor_dim(t, i);
    return push_new(L, t, dt, tg_tensor_ndim(t), shape);
}

/* Rows of x when its last dimension is c: numel / c (at least 1 for the shape). */
static int64_t rows_of(const tg_tensor *x, const tg_tensor *vec)
{
    int64_t c = tg_tensor_numel(vec);
    return c > 0 ? tg_tensor_numel(x) / c : 0;
}

static double acc_arg(lua_State *L, int idx) { return (double)luaL_optnumber(L, idx, 0.0); }

/* layernorm_forward(x, gamma [, beta [, eps]]) -> y, mean, rstd */
static int o_layernorm_forward(lua_State *L)
{
    tg_tensor *x = tgl_tensor_check(L, 1), *g = tgl_tensor_check(L, 2), *b = opt_tensor(L, 3);
    double eps = (double)luaL_optnumber(L, 4, 1e-5);
    int64_t n = rows_of(x, g);
    tg_tensor *y = push_like(L, x, tg_tensor_dtype(x));
    tg_tensor *mean = push_new(L, x, TG_F32, 1, &n), *rstd = push_new(L, x, TG_F32, 1, &n);
    tgl_check(L, tg_layernorm_forward(y, mean, rstd, x, g, b, eps));
    return 3;
}

/* layernorm_backward(dy, x, gamma, mean, rstd) -> dx */
static int o_layernorm_backward(lua_State *L)
{
    tg_tensor *dy = tgl_tensor_check(L, 1), *x = tgl_tensor_check(L, 2), *g = tgl_tensor_check(L, 3);
    tg_tensor *mean = tgl_tensor_check(L, 4), *rstd = tgl_tensor_check(L, 5);
    tg_tensor *dx = push_like(L, x, tg_tensor_dtype(x));
    tgl_check(L, tg_layernorm_backward(dx, dy, x, g, mean, rstd));
    return 1;
}

/* layernorm_backward_dw(dgamma, dbeta|nil, dy, x, mean, rstd [, accumulate]) */
static int o_layernorm_backward_dw(lua_State *L)
{
    tg_tensor *dg = tgl_tensor_check(L, 1), *db = opt_tensor(L, 2), *dy = tgl_tensor_check(L, 3);
    tg_tensor *x = tgl_tensor_check(L, 4), *mean = tgl_tensor_check(L, 5), *rstd = tgl_tensor_check(L, 6);
    tgl_check(L, tg_layernorm_backward_dw(dg, db, dy, x, mean, rstd, acc_arg(L, 7)));
    return 0;
}

/* rmsnorm_forward(x, gamma [, eps]) -> y, rstd */
static int o_rmsnorm_forward(lua_State *L)
{
    tg_tensor *x = tgl_tensor_check(L, 1), *g = tgl_tensor_check(L, 2);
    double eps = (double)luaL_optnumber(L, 3, 1e-5);
    int64_t n = rows_of(x, g);
    tg_tensor *y = push_like(L, x, tg_tensor_dtype(x)), *rstd = push_new(L, x, TG_F32, 1, &n);
    tgl_check(L, tg_rmsnorm_forward(y, rstd, x, g, eps));
    return 2;
}

/* rmsnorm_backward(dy, x, gamma, rstd) -> dx */
static int o_rmsnorm_backward(lua_State *L)
{
    tg_tensor *dy = tgl_tensor_check(L, 1), *x = tgl_tensor_check(L, 2), *g = tgl_tensor_check(L, 3);
    tg_tensor *rstd = tgl_tensor_check(L, 4);
    tg_tensor *dx = push_like(L, x, tg_tensor_dtype(x));
    tgl_check(L, tg_rmsnorm_backward(dx, dy, x, g, rstd));
    return 1;
}

/* rmsnorm_backward_dw(dgamma, dy, x, rstd [, accumulate]) */
static int o_rmsnorm_backward_dw(lua_State *L)
{
    tg_tensor *dg = tgl_tensor_check(L, 1), *dy = tgl_tensor_check(L, 2), *x = tgl_tensor_check(L, 3);
    tg_tensor *rstd = tgl_tensor_check(L, 4);
    tgl_check(L, tg_rmsnorm_backward_dw(dg, dy, x, rstd, acc_arg(L, 5)));
    return 0;
}

static int o_gelu_forward(lua_State *L)
{
    tg_tensor *x = tgl_tensor_check(L, 1);
    tg_tensor *y = push_like(L, x, tg_tensor_dtype(x));
    tgl_check(L, tg_gelu_forward(y, x));
    return 1;
}

/* gelu_backward(dy, x) -> dx */
static int o_gelu_backward(lua_State *L)
{
    tg_tensor *dy = tgl_tensor_check(L, 1), *x = tgl_tensor_check(L, 2);
    tg_tensor *dx = push_like(L, x, tg_tensor_dtype(x));
    tgl_check(L, tg_gelu_backward(dx, dy, x));
    return 1;
}

/* swiglu_forward(x (..., 2H)) -> y (..., H) */
static int o_swiglu_forward(lua_State *L)
{
    tg_tensor *x = tgl_tensor_check(L, 1);
    int nd = tg_tensor_ndim(x);
    int64_t shape[TG_MAX_DIMS];
    for (int i = 0; i < nd; i++) shape[i] = tg_tensor_dim(x, i);
    shape[nd - 1] /= 2;
    tg_tensor *y = push_new(L, x, tg_tensor_dtype(x), nd, shape);
    tgl_check(L, tg_swiglu_forward(y, x));
    return 1;
}

/* swiglu_backward(dy, x) -> dx */
static int o_swiglu_backward(lua_State *L)
{
    tg_tensor *dy = tgl_tensor_check(L, 1), *x = tgl_tensor_check(L, 2);
    tg_tensor *dx = push_like(L, x, tg_tensor_dtype(x));
    tgl_check(L, tg_swiglu_backward(dx, dy, x));
    return 1;
}

/* bias_add(y, bias) -> y (in place) */
static int o_bias_add(lua_State *L)
{
    tgl_check(L, tg_bias_add(tgl_tensor_check(L, 1), tgl_tensor_check(L, 2)));
    lua_settop(L, 1);
    return 1;
}

/* bias_backward_dw(dbias, dy [, accumulate]) */
static int o_bias_backward_dw(lua_State *L)
{
    tgl_check(L, tg_bias_backward_dw(tgl_tensor_check(L, 1), tgl_tensor_check(L, 2), acc_arg(L, 3)));
    return 0;
}

/* attention_forward(qkv (B, T, 3C), n_head) -> out (B, T, C), lse (B, n_head, T) */
/* attention_kv(kcache, vcache, qkv, pos, n_head) -> out (B, Tn, C): writes the new keys and values into cache
 * rows pos.. (0-based) and attends each new query over the cache up to its position. */
static int o_attention_kv(lua_State *L)
{
    tg_tensor *kc = tgl_tensor_check(L, 1), *vc = tgl_tensor_check(L, 2), *qkv = tgl_tensor_check(L, 3);
    lua_Integer pos = luaL_checkinteger(L, 4);
    int nh = tgl_checkint(L, 5); /* 2^32 + 2 is refused, not taken as 2 heads */
    luaL_argcheck(L, nh >= 1, 5, "n_head must be >= 1");
    luaL_argcheck(L, tg_tensor_ndim(qkv) == 3, 3, "qkv must be (B, Tn, 3C)");
    int64_t so[3] = {tg_tensor_dim(qkv, 0), tg_tensor_dim(qkv, 1), tg_tensor_dim(qkv, 2) / 3};
    tg_tensor *out = push_new(L, qkv, tg_tensor_dtype(qkv), 3, so);
    tgl_check(L, tg_attention_kv(out, kc, vc, qkv, (int64_t)pos, nh));
    return 1;
}

static int o_attention_forward(lua_State *L)
{
    tg_tensor *qkv = tgl_tensor_check(L, 1);
    int nh = tgl_checkint(L, 2);
    luaL_argcheck(L, nh >= 1, 2, "n_head must be >= 1");
    luaL_argcheck(L, tg_tensor_ndim(qkv) == 3, 1, "qkv must be (B, T, 3C)");
    int64_t b = tg_tensor_dim(qkv, 0), t = tg_tensor_dim(qkv, 1), c = tg_tensor_dim(qkv, 2) / 3;
    int64_t so[3] = {b, t, c}, sl[3] = {b, nh, t};
    tg_tensor *out = push_new(L, qkv, tg_tensor_dtype(qkv), 3, so), *lse = push_new(L, qkv, TG_F32, 3, sl);
    tgl_check(L, tg_attention_forward(out, lse, qkv, nh));
    return 2;
}

/* attention_backward(dout, qkv, out, lse, n_head) -> dqkv */
static int o_attention_backward(lua_State *L)
{
    tg_tensor *dout = tgl_tensor_check(L, 1), *qkv = tgl_tensor_check(L, 2), *out = tgl_tensor_check(L, 3);
    tg_tensor *lse = tgl_tensor_check(L, 4);
    int nh = tgl_checkint(L, 5);
    tg_tensor *dqkv = push_like(L, qkv, tg_tensor_dtype(qkv));
    tgl_check(L, tg_attention_backward(dqkv, dout, qkv, out, lse, nh));
    return 1;
}

/* embedding_forward(idx (B, T) i32, wte (V, C) [, wpe]) -> out (B, T, C) */
static int o_embedding_forward(lua_State *L)
{
    tg_tensor *idx = tgl_tensor_check(L, 1), *wte = tgl_tensor_check(L, 2), *wpe = opt_tensor(L, 3);
    luaL_argcheck(L, tg_tensor_ndim(idx) == 2, 1, "idx must be (B, T)");
    luaL_argcheck(L, tg_tensor_ndim(wte) == 2, 2, "wte must be (V, C)");
    int64_t shape[3] = {tg_tensor_dim(idx, 0), tg_tensor_dim(idx, 1), tg_tensor_dim(wte, 1)};
    tg_tensor *out = push_new(L, wte, tg_tensor_dtype(wte), 3, shape);
    tgl_check(L, tg_embedding_forward(out, idx, wte, wpe));
    return 1;
}

/* embedding_backward_dw(dwte|nil, dwpe|nil, dout, idx [, accumulate]) */
static int o_embedding_backward_dw(lua_State *L)
{
    tgl_check(L, tg_embedding_backward_dw(opt_tensor(L, 1), opt_tensor(L, 2), tgl_tensor_check(L, 3),
                                          tgl_tensor_check(L, 4), acc_arg(L, 5)));
    return 0;
}

/* cross_entropy_forward(logits (N, V), targets (N) [, ignore_index=-1]) -> loss (2), losses (N) */
static int o_cross_entropy_forward(lua_State *L)
{
    tg_tensor *logits = tgl_tensor_check(L, 1), *targets = tgl_tensor_check(L, 2);
    int ignore = tgl_optint(L, 3, -1);
    int64_t two = 2, n = tg_tensor_numel(targets);
    tg_tensor *loss = push_new(L, logits, TG_F32, 1, &two), *losses = push_new(L, logits, TG_F32, 1, &n);
    tgl_check(L, tg_cross_entropy_forward(loss, losses, logits, targets, ignore));
    return 2;
}

/* cross_entropy_backward(logits, targets, loss [, dloss=1 [, ignore_index=-1]]) -> dlogits */
static int o_cross_entropy_backward(lua_State *L)
{
    tg_tensor *logits = tgl_tensor_check(L, 1), *targets = tgl_tensor_check(L, 2), *loss = tgl_tensor_check(L, 3);
    double dloss = (double)luaL_optnumber(L, 4, 1.0);
    int ignore = tgl_optint(L, 5, -1);
    tg_tensor *dlogits = push_like(L, logits, tg_tensor_dtype(logits));
    tgl_check(L, tg_cross_entropy_backward(dlogits, logits, targets, loss, dloss, ignore));
    return 1;
}

/* cross_entropy_fused(logits, targets, loss [, dloss=1 [, ignore_index=-1 [, dlogits]]]) -> losses (N):
 * the fused LM head's pass over a chunk of rows; dlogits (may be logits itself: in place) from loss[1]'s count */
static int o_cross_entropy_fused(lua_State *L)
{
    tg_tensor *logits = tgl_tensor_check(L, 1), *targets = tgl_tensor_check(L, 2), *loss = tgl_tensor_check(L, 3);
    double dloss = (double)luaL_optnumber(L, 4, 1.0);
    int ignore = tgl_optint(L, 5, -1);
    tg_tensor *dlogits = opt_tensor(L, 6);
    int64_t n = tg_tensor_numel(targets);
    tg_tensor *losses = push_new(L, logits, TG_F32, 1, &n);
    tgl_check(L, tg_cross_entropy_fused(losses, dlogits, logits, targets, loss, dloss, ignore));
    return 1;
}

static double num_field_of(lua_State *L, const char *op, int t, const char *k, double def, int required)
{
    double v = def;
    int ty = lua_getfield(L, t, k);
    if (ty == LUA_TNIL) {
        if (required) luaL_error(L, "%s: option '%s' is required", op, k);
    } else {
        int isnum;
        v = (double)lua_tonumberx(L, -1, &isnum);
        if (!isnum) luaL_error(L, "%s: option '%s' must be a number", op, k);
    }
    lua_pop(L, 1);
    return v;
}

/* The optimizer step count of option 'step': an integer from 1 to 2^53 (exact as a double; a bigger one would
 * not convert to int64_t). */
static int64_t step_field(lua_State *L, const char *op, int t)
{
    const double step = num_field_of(L, op, t, "step", 0, 1);
    if (!(step >= 1 && step <= 9007199254740992.0 && step == floor(step))) {
        lua_getfield(L, t, "step");
        luaL_error(L, "%s: option 'step' = %s must be an integer from 1 to 2^53", op, tgl_value_str(L, -1));
    }
    return (int64_t)step;
}

static double num_field(lua_State *L, int t, const char *k, double def, int required)
{
    return num_field_of(L, "adamw_step", t, k, def, required);
}

/* Capturable: options lr and step both device tensors ((1) f32, (1) i32) read
 * when the kernel runs; 0 when both are left to num_field_of (numbers). */
static int sched_fields(lua_State *L, const char *op, int t, tg_tensor **lr, tg_tensor **step)
{
    lua_getfield(L, t, "lr");   /* +1 */
    lua_getfield(L, t, "step"); /* +2 */
    *lr = tgl_tensor_test(L, -2);
    *step = tgl_tensor_test(L, -1);
    lua_pop(L, 2); /* the options table keeps them alive during the call */
    if (!*lr != !*step)
        luaL_error(L, "%s: options 'lr' and 'step' must both be numbers, or both tensors (capturable: read on the device)",
                   op);
    return *lr != NULL;
}

/* adamw_step(p, p_lowp|nil, g, m, v, {lr=, step=, beta1=0.9, beta2=0.999, eps=1e-8,
 * weight_decay=0, grad_scale=1}); lr and step may be device tensors (tg_adamw_step_dev). */
static int o_adamw_step(lua_State *L)
{
    tg_tensor *p = tgl_tensor_check(L, 1), *pl = opt_tensor(L, 2), *g = tgl_tensor_check(L, 3);
    tg_tensor *m = tgl_tensor_check(L, 4), *v = tgl_tensor_check(L, 5);
    luaL_checktype(L, 6, LUA_TTABLE);
    tgl_check_keys(L, 6, "adamw_step", "lr, step, beta1, beta2, eps, weight_decay, grad_scale");
    tg_tensor *lr_t, *step_t;
    const int dev = sched_fields(L, "adamw_step", 6, &lr_t, &step_t);
    double lr = dev ? 0 : num_field(L, 6, "lr", 0, 1);
    int64_t step = dev ? 1 : step_field(L, "adamw_step", 6);
    double b1 = num_field(L, 6, "beta1", 0.9, 0), b2 = num_field(L, 6, "beta2", 0.999, 0);
    double eps = num_field(L, 6, "eps", 1e-8, 0), wd = num_field(L, 6, "weight_decay", 0.0, 0);
    double scale = num_field(L, 6, "grad_scale", 1.0, 0);
    if (dev)
        tgl_check(L, tg_adamw_step_dev(p, pl, g, m, v, lr_t, step_t, b1, b2, eps, wd, scale));
    else
        tgl_check(L, tg_adamw_step(p, pl, g, m, v, lr, b1, b2, eps, wd, step, scale));
    return 0;
}

/* adamw_count(step): the capturable step count (1) i32 += 1, on the device. */
static int o_adamw_count(lua_State *L)
{
    tgl_check(L, tg_adamw_count(tgl_tensor_check(L, 1)));
    return 0;
}

/* The tensor in field k of the table at t, or NULL when absent (required: raises). */
static tg_tensor *tensor_field(lua_State *L, const char *op, int t, int i, const char *k, int required)
{
    tg_tensor *x = NULL;
    if (lua_getfield(L, t, k) != LUA_TNIL) {
        x = tgl_tensor_test(L, -1);
        if (!x) luaL_error(L, "%s: params[%d].%s must be a tensor", op, i, k);
    } else if (required) {
        luaL_error(L, "%s: params[%d].%s is required", op, i, k);
    }
    lua_pop(L, 1); /* the list keeps the tensor alive during the call */
    return x;
}

/* adamw_multi({{p=, lowp=nil, g=, m=, v=, weight_decay=0}, ...}, {lr=, step=, beta1=0.9,
 * beta2=0.999, eps=1e-8, grad_scale=1, clip_sumsq=nil, max_norm=}): tg_adamw_multi, or
 * tg_adamw_multi_dev when lr and step are device tensors. */
static int o_adamw_multi(lua_State *L)
{
    const char *op = "adamw_multi";
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    luaL_argcheck(L, n >= 1 && n <= INT32_MAX, 1, "a non-empty list of parameters expected");
    struct tg_adamw_param *ps = lua_newuserdatauv(L, (size_t)n * sizeof *ps, 0); /* freed by the GC, even on errors */
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_geti(L, 1, i) != LUA_TTABLE) luaL_error(L, "%s: params[%d] must be a table", op, (int)i);
        const int e = lua_gettop(L);
        tgl_check_keys(L, e, "adamw_multi: params[i]", "p, lowp, g, m, v, weight_decay");
        struct tg_adamw_param *q = &ps[i - 1];
        q->p = tensor_field(L, op, e, (int)i, "p", 1);
        q->p_lowp = tensor_field(L, op, e, (int)i, "lowp", 0);
        q->g = tensor_field(L, op, e, (int)i, "g", 1);
        q->m = tensor_field(L, op, e, (int)i, "m", 1);
        q->v = tensor_field(L, op, e, (int)i, "v", 1);
        q->weight_decay = num_field_of(L, op, e, "weight_decay", 0.0, 0);
        lua_pop(L, 1);
    }
    tgl_check_keys(L, 2, op, "lr, step, beta1, beta2, eps, grad_scale, clip_sumsq, max_norm");
    tg_tensor *lr_t, *step_t;
    const int dev = sched_fields(L, op, 2, &lr_t, &step_t);
    double lr = dev ? 0 : num_field_of(L, op, 2, "lr", 0, 1);
    int64_t step = dev ? 1 : step_field(L, op, 2);
    double b1 = num_field_of(L, op, 2, "beta1", 0.9, 0), b2 = num_field_of(L, op, 2, "beta2", 0.999, 0);
    double eps = num_field_of(L, op, 2, "eps", 1e-8, 0), scale = num_field_of(L, op, 2, "grad_scale", 1.0, 0);
    tg_tensor *clip = NULL;
    double max_norm = 0;
    if (lua_getfield(L, 2, "clip_sumsq") != LUA_TNIL) {
        clip = tgl_tensor_test(L, -1);
        if (!clip) luaL_error(L, "%s: option 'clip_sumsq' must be a tensor", op);
        max_norm = num_field_of(L, op, 2, "max_norm", 0, 1);
    }
    lua_pop(L, 1);
    if (dev)
        tgl_check(L, tg_adamw_multi_dev(ps, (int)n, lr_t, step_t, b1, b2, eps, scale, clip, max_norm));
    else
        tgl_check(L, tg_adamw_multi(ps, (int)n, lr, b1, b2, eps, step, scale, clip, max_norm));
    return 0;
}

/* sumsq_multi({t1, t2, ...} [, out]) -> out: (1) f32 on the device = sum of the
 * squares of every element (no host sync; out is made on the first tensor's
 * device when not given). */
static int o_sumsq_multi(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    luaL_argcheck(L, n >= 0 && n <= INT32_MAX, 1, "too many tensors");
    tg_tensor *out = opt_tensor(L, 2);
    const tg_tensor **ts = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *ts, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, 1, i);
        ts[i - 1] = tgl_tensor_test(L, -1);
        if (!ts[i - 1]) luaL_error(L, "sumsq_multi: element %d of the list is not a tensor", (int)i);
        lua_pop(L, 1);
    }
    if (!out) {
        luaL_argcheck(L, n >= 1, 1, "needs a tensor, or out, to know the device");
        int64_t one = 1;
        out = push_new(L, ts[0], TG_F32, 1, &one);
    } else {
        lua_pushvalue(L, 2);
    }
    tgl_check(L, tg_sumsq_multi(out, ts, (int)n));
    return 1;
}

/* copy_multi(dsts, srcs): each dsts[i] gets srcs[i]'s values in one call (f32 / bf16 either side, one device). Unlike
 * copy_, a pair needs only the same number of elements: a flat buffer's stretch goes into a weight of any shape. */
static int o_copy_multi(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    if (luaL_len(L, 2) != n)
        return luaL_error(L, "copy_multi: %I destinations but %I sources", n, luaL_len(L, 2));
    luaL_argcheck(L, n >= 0 && n <= INT32_MAX, 1, "too many tensors");
    tg_tensor **d = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *d, 0);
    const tg_tensor **s = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *s, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, 1, i);
        d[i - 1] = tgl_tensor_test(L, -1);
        if (!d[i - 1]) return luaL_error(L, "copy_multi: destination %d is not a tensor", (int)i);
        lua_pop(L, 1);
        lua_geti(L, 2, i);
        s[i - 1] = tgl_tensor_test(L, -1);
        if (!s[i - 1]) return luaL_error(L, "copy_multi: source %d is not a tensor", (int)i);
        lua_pop(L, 1);
    }
    tgl_check(L, tg_copy_multi(d, s, (int)n));
    return 0;
}

/* sumsq(t) -> sum of squares (host number) */
static int o_sumsq(lua_State *L)
{
    double v;
    tgl_check(L, tg_sumsq(tgl_tensor_check(L, 1), &v));
    lua_pushnumber(L, (lua_Number)v);
    return 1;
}

/* The tensor in field k of the table at t, or NULL (pops it). */
static tg_tensor *opt_tensor_field(lua_State *L, int t, const char *k)
{
    lua_getfield(L, t, k);
    tg_tensor *x = lua_isnil(L, -1) ? NULL : tgl_tensor_check(L, -1);
    lua_pop(L, 1); /* the userdata stays referenced by the table */
    return x;
}

/* gemm(c, a, trans_a, b, trans_b [, alpha=1 [, beta=0 [, {epilogue="bias"|"bias_gelu"|"bgrad"|"dgelu",
 * bias=, aux=, bgrad=, bgrad_accumulate=0}]]]) -> c: c = epilogue(alpha * op(a) @ op(b) + beta * c)
 * (tg_gemm_ex; dgelu reads aux, the pre-activation). */
static int o_gemm(lua_State *L)
{
    static const char *const epis[] = {"none", "bias", "bias_gelu", "bgrad", "dgelu", NULL};
    tg_tensor *c = tgl_tensor_check(L, 1), *a = tgl_tensor_check(L, 2), *b = tgl_tensor_check(L, 4);
    int ta = lua_toboolean(L, 3), tb = lua_toboolean(L, 5);
    double alpha = (double)luaL_optnumber(L, 6, 1.0), beta = (double)luaL_optnumber(L, 7, 0.0);
    if (lua_isnoneornil(L, 8)) {
        tgl_check(L, tg_gemm(c, a, ta, b, tb, alpha, beta));
    } else {
        luaL_checktype(L, 8, LUA_TTABLE);
        tgl_check_keys(L, 8, "gemm", "epilogue, bias, aux, bgrad, bgrad_accumulate");
        lua_getfield(L, 8, "epilogue");
        const char *name = lua_isnil(L, -1) ? "none" : lua_tostring(L, -1);
        int epi = 0;
        while (epis[epi] && !(name && strcmp(epis[epi], name) == 0)) epi++;
        if (!epis[epi])
            return luaL_error(L, "gemm: unknown epilogue '%s' (expected \"bias\", \"bias_gelu\", \"bgrad\" or \"dgelu\")",
                              name ? name : luaL_typename(L, -1));
        lua_pop(L, 1);
        tg_tensor *bias = opt_tensor_field(L, 8, "bias"), *aux = opt_tensor_field(L, 8, "aux"), *bg = opt_tensor_field(L, 8, "bgrad");
        const double acc = num_field_of(L, "gemm", 8, "bgrad_accumulate", 0.0, 0);
        tgl_check(L, tg_gemm_ex(c, a, ta, b, tb, alpha, beta, (tg_gemm_epilogue)epi, bias, aux, bg, acc));
    }
    lua_settop(L, 1);
    return 1;
}

/* matmul(a, b [, trans_a [, trans_b]]) -> op(a) @ op(b), a new tensor (2-D or batched 3-D). */
static int o_matmul(lua_State *L)
{
    tg_tensor *a = tgl_tensor_check(L, 1), *b = tgl_tensor_check(L, 2);
    int ta = lua_toboolean(L, 3), tb = lua_toboolean(L, 4);
    int nd = tg_tensor_ndim(a);
    if (nd != tg_tensor_ndim(b) || (nd != 2 && nd != 3)) {
        char sa[64], sb[64];
        return luaL_error(L, "matmul: expected two 2-D or two 3-D tensors, got %s and %s",
                          tg_tensor_shape_str(a, sa, sizeof sa), tg_tensor_shape_str(b, sb, sizeof sb));
    }
    int off = nd - 2;
    int64_t shape[3];
    if (nd == 3) shape[0] = tg_tensor_dim(a, 0);
    shape[off] = tg_tensor_dim(a, off + (ta ? 1 : 0));
    shape[off + 1] = tg_tensor_dim(b, off + (tb ? 0 : 1));
    tg_tensor *c = push_new(L, a, tg_tensor_dtype(a), nd, shape);
    tgl_check(L, tg_gemm(c, a, ta, b, tb, 1.0, 0.0));
    return 1;
}

/* add(a, b) -> a + b (a new tensor) */
static int o_add(lua_State *L)
{
    tg_tensor *a = tgl_tensor_check(L, 1), *b = tgl_tensor_check(L, 2);
    tg_tensor *out = push_like(L, a, tg_tensor_dtype(a));
    tgl_check(L, tg_binary(TG_ADD, out, a, b));
    return 1;
}

/* axpby(y, alpha, x [, beta=1]) -> y = alpha * x + beta * y */
static int o_axpby(lua_State *L)
{
    tg_tensor *y = tgl_tensor_check(L, 1), *x = tgl_tensor_check(L, 3);
    tgl_check(L, tg_axpby(y, (double)luaL_checknumber(L, 2), x, (double)luaL_optnumber(L, 4, 1.0)));
    lua_settop(L, 1);
    return 1;
}

/* scale(t, s) -> t = s * t (in place) */
static int o_scale(lua_State *L)
{
    tg_tensor *t = tgl_tensor_check(L, 1);
    tgl_check(L, tg_axpby(t, (double)luaL_checknumber(L, 2), t, 0.0));
    lua_settop(L, 1);
    return 1;
}

static const luaL_Reg ops_funcs[] = {
    {"layernorm_forward", o_layernorm_forward},
    {"layernorm_backward", o_layernorm_backward},
    {"layernorm_backward_dw", o_layernorm_backward_dw},
    {"rmsnorm_forward", o_rmsnorm_forward},
    {"rmsnorm_backward", o_rmsnorm_backward},
    {"rmsnorm_backward_dw", o_rmsnorm_backward_dw},
    {"gelu_forward", o_gelu_forward},
    {"gelu_backward", o_gelu_backward},
    {"swiglu_forward", o_swiglu_forward},
    {"swiglu_backward", o_swiglu_backward},
    {"bias_add", o_bias_add},
    {"bias_backward_dw", o_bias_backward_dw},
    {"attention_forward", o_attention_forward},
    {"attention_kv", o_attention_kv},
    {"attention_backward", o_attention_backward},
    {"embedding_forward", o_embedding_forward},
    {"embedding_backward_dw", o_embedding_backward_dw},
    {"cross_entropy_forward", o_cross_entropy_forward},
    {"cross_entropy_backward", o_cross_entropy_backward},
    {"cross_entropy_fused", o_cross_entropy_fused},
    {"adamw_step", o_adamw_step},
    {"adamw_count", o_adamw_count},
    {"sumsq", o_sumsq},
    {"adamw_multi", o_adamw_multi},
    {"sumsq_multi", o_sumsq_multi},
    {"copy_multi", o_copy_multi},
    {"gemm", o_gemm},
    {"matmul", o_matmul},
    {"add", o_add},
    {"axpby", o_axpby},
    {"scale", o_scale},
    {NULL, NULL},
};

void tgl_open_ops(lua_State *L)
{
    luaL_newlib(L, ops_funcs); /* +1 */
    tgl_data_funcs(L);
    tgl_fp8_funcs(L);
    lua_setfield(L, -2, "ops");
}
