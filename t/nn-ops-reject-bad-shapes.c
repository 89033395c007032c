/* nn-ops-reject-bad-shapes.c — wrong shapes, dtypes and arguments to every transformer op fail with TG_EINVAL and a message naming the op and the shapes; a backend without the kernel gives TG_ENOTSUP naming op and backend. */
#include "backend/backend.h"
#include "nn-ops-util.h"
#include "tap.h"

#include <math.h>

/* st must be TG_EINVAL with a message naming op and containing s1 and s2 (when given). */
static void rejects(tg_status st, const char *op, const char *s1, const char *s2, const char *what)
{
    const char *msg = tg_last_error();
    if (!ok(st == TG_EINVAL, "%s: %s -> TG_EINVAL", op, what)) diag("status %d: %s", (int)st, msg);
    like(msg, op, "  message names %s", op);
    if (s1) like(msg, s1, "  message shows %s", s1);
    if (s2) like(msg, s2, "  message shows %s", s2);
}

#define F32(...) nt_make(TG_F32, NULL, __VA_ARGS__)
#define BF16(...) nt_make(TG_BF16, NULL, __VA_ARGS__)
#define I32(...) nt_make(TG_I32, NULL, __VA_ARGS__)

static tg_tensor *pool[128];
static int npool;
static tg_tensor *keep(tg_tensor *t) { return pool[npool++] = t; }

int main(void)
{
    plan(NO_PLAN);
    /* good operands */
    tg_tensor *x = keep(F32(4, 7)), *y = keep(F32(4, 7)), *g = keep(F32(7)), *st4 = keep(F32(4)), *xb = keep(BF16(4, 7));
    tg_tensor *g8 = keep(F32(8)), *y8 = keep(F32(4, 8)), *s3 = keep(F32(3)), *sb = keep(BF16(4)), *xi = keep(I32(4, 7));
    tg_tensor *gb = keep(BF16(7)), *gi = keep(I32(7));

    /* layernorm */
    rejects(tg_layernorm_forward(y, st4, st4, x, g8, NULL, 1e-5), "layernorm_forward", "[4,7]", "[8]", "gamma [8] for x [4,7]");
    rejects(tg_layernorm_forward(y, st4, st4, x, g, g8, 1e-5), "layernorm_forward", "[4,7]", "[8]", "beta [8] for x [4,7]");
    rejects(tg_layernorm_forward(y8, st4, st4, x, g, NULL, 1e-5), "layernorm_forward", "[4,7]", "[4,8]", "y [4,8] for x [4,7]");
    rejects(tg_layernorm_forward(y, s3, st4, x, g, NULL, 1e-5), "layernorm_forward", "[4,7]", "[3]", "mean [3] for 4 rows");
    rejects(tg_layernorm_forward(y, st4, sb, x, g, NULL, 1e-5), "layernorm_forward", "[4] bf16", NULL, "bf16 rstd");
    rejects(tg_layernorm_forward(y, st4, st4, xi, g, NULL, 1e-5), "layernorm_forward", "[4,7] i32", NULL, "i32 x");
    rejects(tg_layernorm_forward(y, st4, st4, x, gb, NULL, 1e-5), "layernorm_forward", "[7] bf16", NULL, "bf16 gamma for f32 x");
    rejects(tg_layernorm_forward(y, st4, st4, x, g, NULL, -1), "layernorm_forward", "eps", NULL, "negative eps");
    rejects(tg_layernorm_forward(y, NULL, st4, x, g, NULL, 1e-5), "layernorm_forward", "mean is NULL", NULL, "no mean");
    rejects(tg_layernorm_backward(y, y8, x, g, st4, st4), "layernorm_backward", "[4,7]", "[4,8]", "dy [4,8] for x [4,7]");
    rejects(tg_layernorm_backward(xb, y, x, g, st4, st4), "layernorm_backward", "[4,7] bf16", NULL, "bf16 dx for f32 x");
    rejects(tg_layernorm_backward(y, y, x, g8, st4, st4), "layernorm_backward", "[8]", NULL, "gamma [8]");
    rejects(tg_layernorm_backward(y, y, x, g, s3, st4), "layernorm_backward", "[3]", NULL, "mean [3]");
    rejects(tg_layernorm_backward_dw(g8, NULL, y, x, st4, st4, 0), "layernorm_backward_dw", "[4,7]", "[8]", "dgamma [8] for x [4,7]");
    rejects(tg_layernorm_backward_dw(gi, NULL, y, x, st4, st4, 0), "layernorm_backward_dw", "[7] i32", NULL, "i32 dgamma");
    rejects(tg_layernorm_backward_dw(gb, NULL, y, x, st4, st4, 0), "layernorm_backward_dw", "[7] bf16", NULL,
            "bf16 dgamma for f32 activations");
    rejects(tg_layernorm_backward_dw(g, g8, y, x, st4, st4, 0), "layernorm_backward_dw", "[8]", NULL, "dbeta [8]");
    rejects(tg_layernorm_backward_dw(g, NULL, y8, x, st4, st4, 0), "layernorm_backward_dw", "[4,8]", NULL, "dy [4,8]");
    rejects(tg_layernorm_backward_dw(g, NULL, y, x, st4, st4, NAN), "layernorm_backward_dw", "accumulate", NULL, "NaN accumulate");
    {
        tg_tensor *gbb = keep(BF16(7)), *gff = keep(F32(7)), *dyb = keep(BF16(4, 7));
        rejects(tg_layernorm_backward_dw(gff, gbb, dyb, xb, st4, st4, 0), "layernorm_backward_dw", "f32", "bf16",
                "dgamma f32 with dbeta bf16");
    }

    /* rmsnorm */
    rejects(tg_rmsnorm_forward(y, st4, x, g8, 1e-5), "rmsnorm_forward", "[4,7]", "[8]", "gamma [8] for x [4,7]");
    rejects(tg_rmsnorm_forward(y8, st4, x, g, 1e-5), "rmsnorm_forward", "[4,7]", "[4,8]", "y [4,8]");
    rejects(tg_rmsnorm_forward(y, s3, x, g, 1e-5), "rmsnorm_forward", "[3]", NULL, "rstd [3]");
    rejects(tg_rmsnorm_forward(y, st4, x, g, INFINITY), "rmsnorm_forward", "eps", NULL, "infinite eps");
    rejects(tg_rmsnorm_backward(y, y8, x, g, st4), "rmsnorm_backward", "[4,8]", NULL, "dy [4,8]");
    rejects(tg_rmsnorm_backward(y, y, x, g, sb), "rmsnorm_backward", "[4] bf16", NULL, "bf16 rstd");
    rejects(tg_rmsnorm_backward_dw(g8, y, x, st4, 1), "rmsnorm_backward_dw", "[8]", NULL, "dgamma [8]");
    rejects(tg_rmsnorm_backward_dw(g, y, x, s3, 1), "rmsnorm_backward_dw", "[3]", NULL, "rstd [3]");

    /* gelu, swiglu */
    rejects(tg_gelu_forward(y8, x), "gelu_forward", "[4,7]", "[4,8]", "y [4,8] for x [4,7]");
    rejects(tg_gelu_forward(xb, x), "gelu_forward", "bf16", NULL, "bf16 y for f32 x");
    rejects(tg_gelu_forward(xi, xi), "gelu_forward", "[4,7] i32", NULL, "i32 x");
    rejects(tg_gelu_backward(y, y8, x), "gelu_backward", "[4,8]", NULL, "dy [4,8]");
    rejects(tg_gelu_backward(y8, y, x), "gelu_backward", "[4,8]", NULL, "dx [4,8]");
    {
        tg_tensor *x6 = keep(F32(4, 6)), *y3 = keep(F32(4, 3)), *y4 = keep(F32(4, 4)), *y33 = keep(F32(3, 3));
        rejects(tg_swiglu_forward(y3, x), "swiglu_forward", "[4,7]", "[4,3]", "odd x [4,7]");
        rejects(tg_swiglu_forward(y4, x6), "swiglu_forward", "[4,6]", "[4,4]", "y [4,4] for x [4,6]");
        rejects(tg_swiglu_forward(y33, x6), "swiglu_forward", "[4,6]", "[3,3]", "y [3,3] for x [4,6]");
        rejects(tg_swiglu_backward(y3, y3, x6), "swiglu_backward", "[4,6]", "[4,3]", "dx [4,3] for x [4,6]");
        rejects(tg_swiglu_backward(x6, y4, x6), "swiglu_backward", "[4,6]", "[4,4]", "dy [4,4] for x [4,6]");
    }

    /* bias */
    rejects(tg_bias_add(x, g8), "bias_add", "[4,7]", "[8]", "bias [8] for y [4,7]");
    rejects(tg_bias_add(x, gb), "bias_add", "[7] bf16", NULL, "bf16 bias for f32 y");
    rejects(tg_bias_backward_dw(g8, x, 0), "bias_backward_dw", "[4,7]", "[8]", "dbias [8] for dy [4,7]");
    rejects(tg_bias_backward_dw(gb, x, 0), "bias_backward_dw", "[7] bf16", NULL, "bf16 dbias for f32 dy");
    rejects(tg_bias_backward_dw(g, xi, 0), "bias_backward_dw", "i32", NULL, "i32 dy");

    /* attention: qkv (2, 5, 24), C = 8, 2 heads */
    {
        tg_tensor *qkv = keep(F32(2, 5, 24)), *out = keep(F32(2, 5, 8)), *lse = keep(F32(2, 2, 5));
        tg_tensor *q23 = keep(F32(2, 5, 23)), *o7 = keep(F32(2, 5, 7)), *l4 = keep(F32(2, 2, 4)), *q2 = keep(F32(10, 24));
        tg_tensor *lb = keep(BF16(2, 2, 5)), *ob = keep(BF16(2, 5, 8)), *dq = keep(F32(2, 5, 24)), *dq4 = keep(F32(2, 4, 24));
        rejects(tg_attention_forward(out, lse, q23, 2), "attention_forward", "[2,5,23]", NULL, "last dim not 3C");
        rejects(tg_attention_forward(out, lse, q2, 2), "attention_forward", "[10,24]", NULL, "2-D qkv");
        rejects(tg_attention_forward(out, lse, qkv, 3), "attention_forward", "[2,5,24]", "n_head = 3", "C = 8 with 3 heads");
        rejects(tg_attention_forward(out, lse, qkv, 0), "attention_forward", "[2,5,24]", "n_head = 0", "0 heads");
        rejects(tg_attention_forward(o7, lse, qkv, 2), "attention_forward", "[2,5,24]", "[2,5,7]", "out [2,5,7]");
        rejects(tg_attention_forward(ob, lse, qkv, 2), "attention_forward", "[2,5,8] bf16", NULL, "bf16 out for f32 qkv");
        rejects(tg_attention_forward(out, l4, qkv, 2), "attention_forward", "[2,2,4]", "[2,2,5]", "lse [2,2,4]");
        rejects(tg_attention_forward(out, lb, qkv, 2), "attention_forward", "[2,2,5] bf16", NULL, "bf16 lse");
        rejects(tg_attention_backward(dq4, out, qkv, out, lse, 2), "attention_backward", "[2,4,24]", "[2,5,24]", "dqkv [2,4,24]");
        rejects(tg_attention_backward(dq, o7, qkv, out, lse, 2), "attention_backward", "[2,5,7]", NULL, "dout [2,5,7]");
        rejects(tg_attention_backward(dq, out, qkv, o7, lse, 2), "attention_backward", "[2,5,7]", NULL, "out [2,5,7]");
        rejects(tg_attention_backward(dq, out, qkv, out, l4, 2), "attention_backward", "[2,2,4]", NULL, "lse [2,2,4]");
        rejects(tg_attention_backward(dq, out, qkv, out, lse, 3), "attention_backward", "n_head = 3", NULL, "3 heads");
    }

    /* embedding: idx (2, 4), V = 7, C = 5 */
    {
        tg_tensor *idx = keep(I32(2, 4)), *idxf = keep(F32(2, 4)), *idx3 = keep(I32(2, 3)), *out = keep(F32(2, 4, 5));
        tg_tensor *wte = keep(F32(7, 5)), *wte6 = keep(F32(7, 6)), *wpe = keep(F32(6, 5)), *wpe2 = keep(F32(2, 5));
        tg_tensor *wteb = keep(BF16(7, 5)), *o2 = keep(F32(8, 5));
        rejects(tg_embedding_forward(out, idxf, wte, wpe), "embedding_forward", "[2,4] f32", NULL, "f32 idx");
        rejects(tg_embedding_forward(out, idx3, wte, wpe), "embedding_forward", "[2,3]", "[2,4,5]", "idx [2,3] for out [2,4,5]");
        rejects(tg_embedding_forward(o2, idx, wte, wpe), "embedding_forward", "[2,4]", "[8,5]", "2-D out");
        rejects(tg_embedding_forward(out, idx, wte6, wpe), "embedding_forward", "[2,4,5]", "[7,6]", "wte [7,6] for C = 5");
        rejects(tg_embedding_forward(out, idx, wteb, wpe), "embedding_forward", "[7,5] bf16", NULL, "bf16 wte for f32 out");
        rejects(tg_embedding_forward(out, idx, wte, wpe2), "embedding_forward", "[2,5]", ">= 4", "wpe with 2 < T rows");
        rejects(tg_embedding_forward(out, idx, NULL, wpe), "embedding_forward", "wte is NULL", NULL, "no wte");
        rejects(tg_embedding_backward_dw(wte, wpe2, out, idx, 0), "embedding_backward_dw", "[2,5]", NULL, "dwpe with 2 < T rows");
        rejects(tg_embedding_backward_dw(wte6, wpe, out, idx, 0), "embedding_backward_dw", "[7,6]", NULL, "dwte [7,6]");
        rejects(tg_embedding_backward_dw(wteb, NULL, out, idx, 0), "embedding_backward_dw", "[7,5] bf16", NULL,
                "bf16 dwte for f32 dout");
        rejects(tg_embedding_backward_dw(wte, wpe, out, idx3, 0), "embedding_backward_dw", "[2,3]", "[2,4,5]", "idx [2,3]");
        rejects(tg_embedding_backward_dw(wte, wpe, out, idx, INFINITY), "embedding_backward_dw", "accumulate", NULL,
                "infinite accumulate");
    }

    /* cross-entropy: logits (6, 9) */
    {
        tg_tensor *lg = keep(F32(6, 9)), *lg3 = keep(F32(2, 3, 9)), *t = keep(I32(6)), *t5 = keep(I32(5)), *tf = keep(F32(6));
        tg_tensor *loss = keep(F32(2)), *loss3 = keep(F32(3)), *lossb = keep(BF16(2)), *ls = keep(F32(6)), *ls5 = keep(F32(5));
        tg_tensor *dl = keep(F32(6, 9)), *dl8 = keep(F32(6, 8));
        rejects(tg_cross_entropy_forward(loss, ls, lg3, t5, -1), "cross_entropy_forward", "[2,3,9]", "[5]",
                "targets [5] for logits [2,3,9] (6 rows)");
        nt_set(lg3, 0), nt_set(t, 1);
        ok(tg_cross_entropy_forward(loss, ls, lg3, t, -1) == TG_OK, "cross_entropy_forward takes logits (..., V) as rows");
        rejects(tg_cross_entropy_forward(loss, ls, lg, t5, -1), "cross_entropy_forward", "[6,9]", "[5]", "targets [5]");
        rejects(tg_cross_entropy_forward(loss, ls, lg, tf, -1), "cross_entropy_forward", "[6] f32", NULL, "f32 targets");
        rejects(tg_cross_entropy_forward(loss3, ls, lg, t, -1), "cross_entropy_forward", "[3]", NULL, "loss [3]");
        rejects(tg_cross_entropy_forward(loss, ls5, lg, t, -1), "cross_entropy_forward", "[5]", NULL, "losses [5]");
        rejects(tg_cross_entropy_backward(dl8, lg, t, loss, 1, -1), "cross_entropy_backward", "[6,9]", "[6,8]", "dlogits [6,8]");
        rejects(tg_cross_entropy_backward(dl, lg, t, lossb, 1, -1), "cross_entropy_backward", "[2] bf16", NULL, "bf16 loss");
        rejects(tg_cross_entropy_backward(dl, lg, t5, loss, 1, -1), "cross_entropy_backward", "[5]", NULL, "targets [5]");
        rejects(tg_cross_entropy_backward(dl, lg, t, loss, NAN, -1), "cross_entropy_backward", "dloss", NULL, "NaN dloss");
    }

    /* adamw: p (10) */
    {
        tg_tensor *p = keep(F32(10)), *pb = keep(BF16(10)), *p9 = keep(F32(9)), *gi10 = keep(I32(10)), *m = keep(F32(10));
        tg_tensor *v = keep(F32(10));
        rejects(tg_adamw_step(pb, NULL, p, m, v, 1e-3, 0.9, 0.95, 1e-8, 0, 1, 1), "adamw_step", "[10] bf16", NULL, "bf16 p");
        rejects(tg_adamw_step(p, NULL, p, p9, v, 1e-3, 0.9, 0.95, 1e-8, 0, 1, 1), "adamw_step", "[10]", "[9]", "m [9]");
        rejects(tg_adamw_step(p, NULL, p9, m, v, 1e-3, 0.9, 0.95, 1e-8, 0, 1, 1), "adamw_step", "[10]", "[9]", "g [9]");
        rejects(tg_adamw_step(p, NULL, gi10, m, v, 1e-3, 0.9, 0.95, 1e-8, 0, 1, 1), "adamw_step", "[10] i32", NULL, "i32 g");
        rejects(tg_adamw_step(p, m, p, m, v, 1e-3, 0.9, 0.95, 1e-8, 0, 1, 1), "adamw_step", "[10] f32", NULL, "f32 p_lowp");
        rejects(tg_adamw_step(p, NULL, p, m, v, 1e-3, 0.9, 0.95, 1e-8, 0, 0, 1), "adamw_step", "step = 0", NULL, "step 0");
        rejects(tg_adamw_step(p, NULL, p, m, v, 1e-3, 1.0, 0.95, 1e-8, 0, 1, 1), "adamw_step", "beta1 = 1", NULL, "beta1 = 1");
        rejects(tg_adamw_step(p, NULL, p, m, v, 1e-3, 0.9, 0.95, 0, 0, 1, 1), "adamw_step", "eps = 0", NULL, "eps = 0");
        rejects(tg_adamw_step(p, NULL, p, m, v, NAN, 0.9, 0.95, 1e-8, 0, 1, 1), "adamw_step", "lr", NULL, "NaN lr");
    }

    /* sumsq */
    {
        double out = 0;
        rejects(tg_sumsq(xi, &out), "sumsq", "[4,7] i32", NULL, "i32 tensor");
    }

    /* A backend without the kernel (the CUDA backend before its nn kernels exist). */
    {
        tg_stream *s = tg_stream_current(nt_cpu);
        const struct tg_backend *saved = s->be;
        struct tg_backend partial = tg_backend_cpu;
        tg_tensor *o = keep(F32(4, 7));
        partial.name = "partial";
        partial.gelu_forward = NULL;
        s->be = &partial;
        tg_status st = tg_gelu_forward(o, x);
        s->be = saved;
        ok(st == TG_ENOTSUP, "gelu_forward without a backend kernel -> TG_ENOTSUP");
        like(tg_last_error(), "gelu_forward", "  message names the op");
        like(tg_last_error(), "partial backend", "  message names the backend");
    }

    /* A good call still works after all that (errors left no state behind). */
    nt_set(x, 1), nt_set(g, 1);
    ok(tg_layernorm_forward(y, st4, st4, x, g, NULL, 1e-5) == TG_OK, "a good layernorm_forward still runs");
    (void)gb, (void)gi;

    for (int i = 0; i < npool; i++) tg_tensor_free(pool[i]);
    return done_testing();
}
