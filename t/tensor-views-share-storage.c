/* tensor-views-share-storage.c — views, narrow and refs share storage, outlive their parent, print shapes, and reject bad bounds. */
#include <tegraph.h>

#include "tap.h"

#include <stdlib.h>
#include <string.h>

static const tg_device cpu = {TG_CPU, 0};

static tg_tensor *iota(tg_dtype dt, int ndim, const int64_t *shape)
{
    tg_tensor *t = NULL;
    if (tg_tensor_new(dt, ndim, shape, cpu, &t) != TG_OK) bail_out("tensor: %s", tg_last_error());
    size_t n = (size_t)tg_tensor_numel(t);
    double *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (double)i;
    if (tg_tensor_write_f64(t, v, n) != TG_OK) bail_out("write: %s", tg_last_error());
    free(v);
    return t;
}

/* Whether t holds first, first+1, ... (or `value` everywhere when first < 0). */
static int holds(const tg_tensor *t, double first, double value)
{
    size_t n = (size_t)tg_tensor_numel(t);
    double *v = malloc((n ? n : 1) * sizeof *v);
    int good = tg_tensor_read_f64(t, v, n) == TG_OK;
    for (size_t i = 0; good && i < n; i++) good = v[i] == (first < 0 ? value : first + (double)i);
    free(v);
    return good;
}

int main(void)
{
    plan(NO_PLAN);
    char buf[64];
    int64_t s46[2] = {4, 6}, s23[2] = {2, 3};
    tg_tensor *t = iota(TG_F32, 2, s46), *v = NULL, *n = NULL, *r = NULL, *vv = NULL, *same = NULL;

    is_int(tg_tensor_ndim(t), 2, "ndim");
    is_int(tg_tensor_dim(t, 0) * 10 + tg_tensor_dim(t, 1), 46, "dims 4 and 6");
    is_int(tg_tensor_numel(t), 24, "numel");
    like(tg_tensor_shape_str(t, buf, sizeof buf), "[4,6]", "shape string [4,6]");

    /* view: elements [6, 12) as (2, 3) */
    ok(tg_tensor_view(t, 6, 2, s23, &v) == TG_OK, "view of 6 elements at offset 6");
    ok(!strcmp(tg_tensor_shape_str(v, buf, sizeof buf), "[2,3]"), "view shape string is [2,3] (got %s)", buf);
    ok((char *)tg_tensor_data(v) == (char *)tg_tensor_data(t) + 6 * sizeof(float), "view data is 6 floats into the parent");
    ok(holds(v, 6, 0), "view reads the parent's elements 6..11");
    ok(tg_fill(v, 100) == TG_OK, "fill the view");
    double pv[24];
    tg_tensor_read_f64(t, pv, 24);
    int outside = 1, inside = 1;
    for (int i = 0; i < 24; i++) {
        if (i >= 6 && i < 12) inside &= pv[i] == 100;
        else outside &= pv[i] == i;
    }
    ok(inside && outside, "the fill shows in the parent at 6..11 and nowhere else");

    /* narrow: rows [1, 3) */
    ok(tg_tensor_narrow(t, 1, 2, &n) == TG_OK, "narrow rows [1, 3)");
    like(tg_tensor_shape_str(n, buf, sizeof buf), "[2,6]", "narrow shape [2,6]");
    ok((char *)tg_tensor_data(n) == (char *)tg_tensor_data(t) + 6 * sizeof(float), "narrow starts at row 1");
    int64_t s26[2] = {2, 6};
    ok(tg_tensor_view(t, 6, 2, s26, &same) == TG_OK && tg_tensor_same_memory(n, same), "narrow = the view at offset 6 of shape [2,6]");
    ok(!tg_tensor_same_memory(n, v), "narrow and the smaller view are not the same memory");
    ok(!tg_tensor_same_memory(n, t), "narrow and its parent are not the same memory");

    /* ref: same storage, same shape, own name */
    ok(tg_tensor_ref(t, &r) == TG_OK && tg_tensor_same_memory(r, t) && tg_tensor_same_shape(r, t), "ref = parent");
    ok(tg_tensor_set_name(r, "weights") == TG_OK && !strcmp(tg_tensor_name(r), "weights"), "a handle has a name");
    ok(tg_tensor_name(t) == NULL, "names belong to handles, the parent has none");

    /* Views keep storage alive. */
    tg_tensor_free(t);
    tg_tensor_free(r);
    t = r = NULL;
    ok(holds(v, -1, 100), "the view still reads its elements after the parent and its ref are freed");
    int64_t s3[1] = {3};
    ok(tg_tensor_view(n, 3, 1, s3, &vv) == TG_OK, "a view of the narrow view");
    ok(holds(vv, -1, 100), "it reads the parent's elements 9..11 (100 from the earlier fill)");
    double nv[12];
    tg_tensor_read_f64(n, nv, 12);
    ok(nv[0] == 100 && nv[5] == 100 && nv[6] == 12 && nv[11] == 17, "narrow reads 100 x6 then 12..17");
    ok(tg_fill(vv, -5) == TG_OK, "write through the view of a view (its elements 3..5 of the narrow)");
    tg_tensor_read_f64(n, nv, 12);
    ok(nv[2] == 100 && nv[3] == -5 && nv[5] == -5 && nv[6] == 12, "the write shows in the narrow view");
    double sv[12];
    tg_tensor_read_f64(same, sv, 12);
    ok(sv[3] == -5 && tg_tensor_same_memory(n, same), "another view of the same elements sees it too");
    tg_tensor_free(v), tg_tensor_free(n), tg_tensor_free(vv);
    ok(1, "freeing views in any order is fine");
    tg_tensor_read_f64(same, nv, 12);
    ok(nv[3] == -5 && nv[11] == 17, "the last handle still reads the storage");
    tg_tensor_free(same);

    /* Ops through a narrow view touch only its rows. */
    int64_t s43[2] = {4, 3};
    tg_tensor *a = iota(TG_BF16, 2, s43), *rows = NULL, *src = NULL;
    int64_t s13[2] = {1, 3};
    ok(tg_tensor_narrow(a, 2, 1, &rows) == TG_OK && tg_tensor_new(TG_BF16, 2, s13, cpu, &src) == TG_OK, "narrow a bf16 [4,3] to row 2");
    ok((char *)tg_tensor_data(rows) == (char *)tg_tensor_data(a) + 6 * 2, "bf16 offsets are in 2-byte elements");
    tg_fill(src, 0.5);
    ok(tg_binary(TG_ADD, rows, rows, src) == TG_OK, "row 2 += 0.5 in place");
    double av[12];
    tg_tensor_read_f64(a, av, 12);
    ok(av[5] == 5 && av[6] == 6.5 && av[8] == 8.5 && av[9] == 9, "only row 2 changed (%g %g %g %g)", av[5], av[6], av[8], av[9]);
    tg_tensor_free(rows), tg_tensor_free(src);

    /* Shape strings of other ranks. */
    int64_t s1234[4] = {1, 2, 3, 4}, s7[1] = {7};
    tg_tensor *t4 = NULL, *t1 = NULL, *t0 = NULL;
    ok(tg_tensor_new(TG_F32, 4, s1234, cpu, &t4) == TG_OK && !strcmp(tg_tensor_shape_str(t4, buf, sizeof buf), "[1,2,3,4]"),
       "4-d shape string [1,2,3,4] (got %s)", buf);
    ok(tg_tensor_new(TG_I32, 1, s7, cpu, &t1) == TG_OK && !strcmp(tg_tensor_shape_str(t1, buf, sizeof buf), "[7]"),
       "1-d shape string [7]");
    ok(tg_tensor_new(TG_F32, 0, NULL, cpu, &t0) == TG_OK && !strcmp(tg_tensor_shape_str(t0, buf, sizeof buf), "[]") &&
           tg_tensor_numel(t0) == 1,
       "0-d tensor: shape string [] and one element");

    /* Bad bounds are refused with messages naming the shapes. */
    tg_tensor *bad = NULL;
    is_int(tg_tensor_view(a, 8, 2, s23, &bad), TG_EINVAL, "a view past the end ([2,3] at offset 8 of 12) is refused");
    like(tg_last_error(), "[4,3]", "the message names the parent's shape");
    is_int(tg_tensor_view(a, -1, 1, s3, &bad), TG_EINVAL, "a negative offset is refused");
    int64_t neg[1] = {-2};
    is_int(tg_tensor_view(a, 0, 1, neg, &bad), TG_EINVAL, "a negative size is refused");
    is_int(tg_tensor_narrow(a, 3, 2, &bad), TG_EINVAL, "narrow rows [3, 5) of 4 is refused");
    like(tg_last_error(), "[4,3]", "the message names the shape");
    is_int(tg_tensor_narrow(a, -1, 1, &bad), TG_EINVAL, "narrow from a negative row is refused");
    is_int(tg_tensor_narrow(t0, 0, 1, &bad), TG_EINVAL, "narrow of a 0-d tensor is refused");
    int64_t s5[5] = {1, 1, 1, 1, 1};
    is_int(tg_tensor_new(TG_F32, 5, s5, cpu, &bad), TG_EINVAL, "5 dimensions are refused");
    int64_t huge[2] = {(int64_t)1 << 40, (int64_t)1 << 30};
    is_int(tg_tensor_new(TG_F32, 2, huge, cpu, &bad), TG_EINVAL, "a shape whose byte size overflows is refused");
    like(tg_last_error(), "too many elements", "the message says why");
    like(tg_last_error(), "[1099511627776,1073741824]", "and names the shape");
    ok(bad == NULL, "no tensor came out of the failures");
    ok(tg_tensor_view(a, 12, 1, (int64_t[]){0}, &bad) == TG_OK && tg_tensor_numel(bad) == 0, "an empty view at the end is fine");
    tg_tensor_free(bad);

    tg_tensor_free(a), tg_tensor_free(t4), tg_tensor_free(t1), tg_tensor_free(t0);
    return done_testing();
}
