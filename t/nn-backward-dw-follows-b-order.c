/* nn-backward-dw-follows-b-order.c — the microbatch protocol in the engine: backward_dw(mb) of a microbatch that is
 * not the wgrad store's head fails naming both microbatches and leaves every store (a composite's children too)
 * and every gradient as it was, after which the right order computes the expected gradients; mb = 0 lets the
 * engine pick (forward: next in the step, 1 outside steps; backward: the oldest forward waiting; backward_dw:
 * the head). */
#include "nn/nn.h"
#include "tap.h"

#include <math.h>
#include <string.h>

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        if ((call) != TG_OK) bail_out("%s: %s", #call, tg_last_error());                               \
    } while (0)

static const tg_device CPU = {TG_CPU, 0};

static tg_tensor *filled(int64_t rows, int64_t cols, double seed)
{
    int64_t shape[2] = {rows, cols};
    tg_tensor *t;
    CHECK(tg_tensor_new(TG_F32, 2, shape, CPU, &t));
    double v[64];
    for (int64_t i = 0; i < rows * cols; i++) v[i] = sin(seed + 0.7 * (double)i);
    CHECK(tg_tensor_write_f64(t, v, (size_t)(rows * cols)));
    return t;
}

static tg_module *linear(const char *name, int64_t in, int64_t out)
{
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = CPU;
    o.name = name;
    o.delay_wgrad = 1;
    o.bias = 0;
    tg_module *m;
    CHECK(tg_linear_new(in, out, &o, &m));
    return m;
}

/* "[1,2]": the microbatches in m's wgrad store, head first. */
static const char *store(const tg_module *m, char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "[");
    for (const struct tg_saved *s = m->wq_head; s && len < n; s = s->next)
        len += (size_t)snprintf(buf + len, n - len, "%s%d", s == m->wq_head ? "" : ",", s->mb);
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

static double max_abs(const tg_tensor *t)
{
    double v[64], m = 0;
    size_t n = (size_t)tg_tensor_numel(t);
    CHECK(tg_tensor_read_f64(t, v, n));
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
    return m;
}

static double max_diff(const tg_tensor *a, const tg_tensor *b)
{
    double u[64], v[64], m = 0;
    size_t n = (size_t)tg_tensor_numel(a);
    CHECK(tg_tensor_read_f64(a, u, n));
    CHECK(tg_tensor_read_f64(b, v, n));
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(u[i] - v[i]));
    return m;
}

static int fired[3];
static tg_status count_hook(void *ud, tg_param *p, const tg_hook_info *info)
{
    (void)ud, (void)p;
    if (info->microbatch >= 1 && info->microbatch <= 2) fired[info->microbatch]++;
    return TG_OK;
}

int main(void)
{
    plan(NO_PLAN);
    char a[32], b[32];
    tg_tensor *x[3] = {NULL, filled(2, 3, 0.1), filled(2, 3, 1.3)}, *dy[3] = {NULL, filled(2, 4, 2.2), filled(2, 4, 3.7)};
    tg_tensor *y = NULL, *dx = NULL;

    /* ------------------------------------------------------------ a leaf */
    tg_module *fc = linear("h.0.fc", 3, 4);
    tg_param *w = fc->params[0];
    CHECK(tg_param_add_hook(w, count_hook, NULL, NULL, NULL));
    CHECK(tg_step_begin(2));
    for (int mb = 1; mb <= 2; mb++) {
        CHECK(tg_module_forward(fc, mb, x[mb], &y));
        tg_tensor_free(y);
    }
    for (int mb = 1; mb <= 2; mb++) {
        CHECK(tg_module_backward(fc, mb, dy[mb], &dx));
        tg_tensor_free(dx);
    }
    tg_status st = tg_module_backward_dw(fc, 2);
    is_int(st, TG_ESTATE, "backward_dw(2) with microbatch 1 at the store's head fails (TG_ESTATE)");
    like(tg_last_error(), "Linear 'h.0.fc' backward_dw (microbatch 2): the wgrad store's head is microbatch 1 (W must follow B order)",
         "the message names the module and both microbatches");
    like(store(fc, a, sizeof a), "[1,2]", "the store is left as it was");
    ok(max_abs(w->grad) == 0.0 && fired[1] + fired[2] == 0, "no wgrad was computed and no hook fired");
    CHECK(tg_module_backward_dw(fc, 1));
    CHECK(tg_module_backward_dw(fc, 2));
    ok(fired[1] == 1 && fired[2] == 1, "then W in B order fires the hooks once per microbatch");
    ok(tg_step_end() == TG_OK, "and the step check passes");
    /* dW = dy1^T x1 + dy2^T x2 */
    int64_t ws[2] = {4, 3};
    tg_tensor *ref;
    CHECK(tg_tensor_new(TG_F32, 2, ws, CPU, &ref));
    CHECK(tg_gemm(ref, dy[1], 1, x[1], 0, 1.0, 0.0));
    CHECK(tg_gemm(ref, dy[2], 1, x[2], 0, 1.0, 1.0));
    ok(max_diff(w->grad, ref) < 1e-6, "the gradient is the sum of both microbatches' (max diff %.2e)", max_diff(w->grad, ref));

    /* ------------------------------------------------------------ a composite checks every child before popping */
    tg_module *ca = linear("a", 3, 4), *cb = linear("b", 4, 2), *kids[2] = {ca, cb}, *seq;
    tg_module_opts o;
    tg_module_opts_default(&o);
    o.device = CPU;
    o.name = "seq";
    CHECK(tg_sequential_new(kids, 2, &o, &seq));
    tg_tensor *dys[3] = {NULL, filled(2, 2, 0.4), filled(2, 2, 0.9)};
    CHECK(tg_step_begin(2));
    for (int mb = 1; mb <= 2; mb++) {
        CHECK(tg_module_forward(seq, mb, x[mb], &y));
        tg_tensor_free(y);
    }
    for (int mb = 1; mb <= 2; mb++) {
        CHECK(tg_module_backward(seq, mb, dys[mb], &dx));
        tg_tensor_free(dx);
    }
    st = tg_module_backward_dw(seq, 2);
    is_int(st, TG_ESTATE, "a composite's backward_dw(2) out of B order fails");
    like(tg_last_error(), "Sequential 'seq' backward_dw (microbatch 2): the wgrad store of Linear 'b' has microbatch 1 at its head",
         "the message names the composite, the child and both microbatches");
    ok(strcmp(store(ca, a, sizeof a), "[1,2]") == 0 && strcmp(store(cb, b, sizeof b), "[1,2]") == 0,
       "no child's store was popped (a %s, b %s)", a, b);
    CHECK(tg_module_backward_dw(ca, 1)); /* the children's heads now differ: a at 2, b at 1 */
    st = tg_module_backward_dw(seq, 1);
    like(st == TG_ESTATE ? tg_last_error() : "(no error)", "the wgrad store of Linear 'a' has microbatch 2 at its head",
         "with the heads apart, the child whose head differs is named");
    like(store(cb, b, sizeof b), "[1,2]", "and the child that would have matched was not popped either");
    CHECK(tg_module_backward_dw(cb, 1));
    CHECK(tg_module_backward_dw(seq, 2));
    ok(!tg_module_need_backward_dw(seq), "W in B order empties both stores");
    CHECK(tg_step_end());

    /* ------------------------------------------------------------ mb = 0: the engine picks */
    tg_module *e = linear("e", 3, 4);
    CHECK(tg_step_begin(3));
    CHECK(tg_module_forward(e, 1, x[1], &y));
    tg_tensor_free(y);
    CHECK(tg_module_forward(e, 0, x[2], &y));
    tg_tensor_free(y);
    CHECK(tg_module_forward(e, 0, x[1], &y));
    tg_tensor_free(y);
    int saved[4] = {0};
    for (const struct tg_saved *s = e->saved; s; s = s->next)
        if (s->mb >= 1 && s->mb <= 3) saved[s->mb]++;
    ok(saved[1] == 1 && saved[2] == 1 && saved[3] == 1, "in a step, forward with mb 0 runs one past the last forward (2, then 3)");
    CHECK(tg_module_backward(e, 2, dy[1], &dx));
    tg_tensor_free(dx);
    CHECK(tg_module_backward(e, 0, dy[1], &dx));
    tg_tensor_free(dx);
    CHECK(tg_module_backward(e, 0, dy[1], &dx));
    tg_tensor_free(dx);
    like(store(e, a, sizeof a), "[2,1,3]", "backward with mb 0 takes the oldest forward still waiting (1, then 3)");
    st = tg_module_backward(e, 0, dy[1], &dx);
    is_int(st, TG_ESTATE, "backward with mb 0 and no forward waiting fails");
    like(tg_last_error(), "Linear 'e' backward: no forward is waiting for its backward", "naming the module");
    CHECK(tg_module_backward_dw(e, 0));
    like(store(e, a, sizeof a), "[1,3]", "backward_dw with mb 0 pops the head");
    CHECK(tg_module_backward_dw(e, 1));
    CHECK(tg_module_backward_dw(e, 3));
    CHECK(tg_step_end());

    CHECK(tg_module_forward(e, 0, x[1], &y));
    tg_tensor_free(y);
    CHECK(tg_module_forward(e, 0, x[2], &y));
    tg_tensor_free(y);
    ok(e->saved && e->saved->mb == 1 && !e->saved->next, "outside steps, forward with mb 0 is microbatch 1, the second replacing the first");
    CHECK(tg_module_backward(e, 0, dy[1], &dx));
    tg_tensor_free(dx);
    is_int(tg_module_backward(e, 0, dy[1], &dx), TG_ESTATE, "so one backward with mb 0 follows them, not two");
    CHECK(tg_module_backward_dw(e, 1));
    is_int(tg_module_backward_dw(e, -1), TG_EINVAL, "a negative microbatch is refused");
    like(tg_last_error(), "microbatch -1", "naming it");

    for (int i = 1; i <= 2; i++) tg_tensor_free(x[i]), tg_tensor_free(dy[i]), tg_tensor_free(dys[i]);
    tg_tensor_free(ref);
    tg_module_release(fc);
    tg_module_release(seq);
    tg_module_release(ca);
    tg_module_release(cb);
    tg_module_release(e);
    return done_testing();
}
