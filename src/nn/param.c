/* param.c — parameters: data, f32 master copy, grad / main_grad buffers, hooks, refcounting. */
#include "nn/nn.h"

#include <string.h>

static tg_status zeros_like(const tg_tensor *t, tg_dtype dt, tg_tensor **out)
{
    TG_TRY(tg_tensor_new(dt, t->ndim, t->shape, tg_tensor_device(t), out));
    tg_status st = tg_fill(*out, 0.0);
    if (st != TG_OK) {
        tg_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

tg_status tg_param_new(const char *name, tg_tensor *data, int fuse_wgrad_accumulation, tg_param **out)
{
    *out = NULL;
    if (!data) return tg_error(TG_EINVAL, "param_new: %s: no data tensor", name ? name : "(unnamed)");
    if (data->dtype != TG_F32 && data->dtype != TG_BF16) {
        tg_status st = tg_error(TG_EINVAL, "param_new: %s: dtype %s (parameters are f32 or bf16)", name ? name : "(unnamed)",
                                tg_dtype_name(data->dtype));
        tg_tensor_free(data);
        return st;
    }
    tg_param *p = calloc(1, sizeof *p);
    if (!p) {
        tg_tensor_free(data);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    p->name = strdup(name ? name : "");
    p->data = data;
    p->refcount = 1;
    p->contributors = 1;
    p->fuse_wgrad_accumulation = fuse_wgrad_accumulation != 0;
    tg_status st = p->name ? TG_OK : tg_error(TG_ENOMEM, "out of host memory");
    if (st == TG_OK) st = zeros_like(data, data->dtype, &p->grad);
    if (st == TG_OK && data->dtype == TG_BF16) {
        st = tg_tensor_new(TG_F32, data->ndim, data->shape, tg_tensor_device(data), &p->master);
        if (st == TG_OK) st = tg_copy(p->master, data);
    }
    if (st == TG_OK && p->fuse_wgrad_accumulation) st = zeros_like(data, TG_F32, &p->main_grad);
    tg_engine_link(p);
    if (st != TG_OK) {
        tg_param_release(p);
        return st;
    }
    *out = p;
    return TG_OK;
}

tg_param *tg_param_retain(tg_param *p)
{
    if (p) p->refcount++;
    return p;
}

void tg_param_release(tg_param *p)
{
    if (!p || --p->refcount > 0) return;
    tg_engine_unlink(p);
    for (int i = 0; i < p->nhooks; i++)
        if (p->hooks[i].free_ud) p->hooks[i].free_ud(p->hooks[i].ud);
    free(p->hooks);
    tg_tensor_free(p->data);
    tg_tensor_free(p->master);
    tg_tensor_free(p->grad);
    tg_tensor_free(p->main_grad);
    free(p->contrib_mb);
    free(p->fired_mb);
    free(p->slot_mb);
    free(p->name);
    free(p);
}

tg_status tg_param_add_hook(tg_param *p, tg_hook_fn fn, void *ud, void (*free_ud)(void *), int *id)
{
    if (id) *id = 0;
    if (!p) return tg_error(TG_EINVAL, "add_hook: no parameter");
    if (!fn) return tg_error(TG_EINVAL, "add_hook on %s: no function", p->name);
    if (p->dispatching) return tg_error(TG_ESTATE, "add_hook on %s: its hooks are running (add it after)", p->name);
    for (int i = 0; i < p->nhooks; i++)
        if (p->hooks[i].fn == fn && p->hooks[i].ud == ud)
            return tg_error(TG_EINVAL, "add_hook on %s: this hook (function and data) is already registered as hook id %d",
                            p->name, p->hooks[i].id);
    struct tg_hook *h = realloc(p->hooks, (size_t)(p->nhooks + 1) * sizeof *h);
    if (!h) return tg_error(TG_ENOMEM, "out of host memory");
    p->hooks = h;
    p->hooks[p->nhooks++] = (struct tg_hook){.fn = fn, .ud = ud, .free_ud = free_ud, .id = ++p->last_hook_id};
    if (id) *id = p->last_hook_id;
    return TG_OK;
}

tg_status tg_param_remove_hook(tg_param *p, int id)
{
    if (!p) return tg_error(TG_EINVAL, "remove_hook: no parameter");
    if (p->dispatching) return tg_error(TG_ESTATE, "remove_hook on %s: its hooks are running (remove it after)", p->name);
    for (int i = 0; i < p->nhooks; i++) {
        if (p->hooks[i].id != id) continue;
        struct tg_hook h = p->hooks[i];
        memmove(&p->hooks[i], &p->hooks[i + 1], (size_t)(p->nhooks - i - 1) * sizeof *p->hooks);
        p->nhooks--;
        if (h.free_ud) h.free_ud(h.ud);
        return TG_OK;
    }
    return tg_error(TG_EINVAL, "remove_hook on %s: no hook with id %d", p->name, id);
}

int tg_param_hook_count(const tg_param *p) { return p ? p->nhooks : 0; }
const char *tg_param_name(const tg_param *p) { return p ? p->name : ""; }
tg_tensor *tg_param_data(const tg_param *p) { return p ? p->data : NULL; }
tg_tensor *tg_param_grad(const tg_param *p) { return p ? p->grad : NULL; }
tg_tensor *tg_param_main_grad(const tg_param *p) { return p ? p->main_grad : NULL; }

tg_tensor *tg_param_wgrad_target(tg_param *p) { return p->fuse_wgrad_accumulation ? p->main_grad : p->grad; }

/* *slot (main_grad or master) becomes p's own handle, in p's shape, on view's storage (f32, p's element count,
 * p's device); the caller keeps view. */
static tg_status rebind_f32(tg_param *p, tg_tensor *view, tg_tensor **slot, const char *what)
{
    char a[64], b[64];
    if (!view || view->dtype != TG_F32 || tg_tensor_numel(view) != tg_tensor_numel(p->data))
        return tg_error(TG_EINVAL, "%s of %s: expected %lld f32 elements (shape %s), got %s %s", what, p->name,
                        (long long)tg_tensor_numel(p->data), tg_tensor_shape_str(p->data, a, sizeof a),
                        view ? tg_tensor_shape_str(view, b, sizeof b) : "nothing", view ? tg_dtype_name(view->dtype) : "");
    tg_device x = tg_tensor_device(view), y = tg_tensor_device(p->data);
    if (x.type != y.type || x.index != y.index)
        return tg_error(TG_EINVAL, "%s of %s: the buffer is on another device than the parameter", what, p->name);
    tg_tensor *ref;
    TG_TRY(tg_tensor_view(view, 0, p->data->ndim, p->data->shape, &ref));
    tg_tensor_free(*slot);
    *slot = ref;
    return TG_OK;
}

tg_status tg_param_set_main_grad(tg_param *p, tg_tensor *view) { return rebind_f32(p, view, &p->main_grad, "set_main_grad"); }

/* The values are the caller's: the buffer's, not the old master's. */
tg_status tg_param_set_master(tg_param *p, tg_tensor *view)
{
    if (!p->master)
        return tg_error(TG_EINVAL, "set_master of %s: the parameter is %s and has no f32 master copy (its data is the master)",
                        p->name, tg_dtype_name(p->data->dtype));
    return rebind_f32(p, view, &p->master, "set_master");
}

tg_status tg_param_zero_grad(tg_param *p)
{
    if (p->grad) TG_TRY(tg_fill(p->grad, 0.0));
    if (p->main_grad) TG_TRY(tg_fill(p->main_grad, 0.0));
    return TG_OK;
}
