/* nn-ops-util.h — helpers shared by the nn-ops tests: tensors from doubles, a seeded RNG, rounding, error norms. */
#ifndef TG_NN_OPS_UTIL_H
#define TG_NN_OPS_UTIL_H

#include "core/core.h"
#include "core/ops_nn.h"
#include "core/ops_optim.h"

#include <stddef.h>

extern const tg_device nt_cpu;

/* Uniform in [lo, hi) from a fixed-seed generator (same sequence every run). */
double nt_uniform(double lo, double hi);
void nt_fill_uniform(double *x, size_t n, double lo, double hi);
/* x rounded to f32 / bf16, in place (the values a tensor of that dtype holds). */
void nt_round(double *x, size_t n, tg_dtype dt);

/* A new tensor (bails out on failure); with values when vals != NULL. */
tg_tensor *nt_new(tg_dtype dt, int ndim, const int64_t *shape, const double *vals);
/* nt_make(dt, vals, dims...) */
#define nt_make(dt, vals, ...) nt_new((dt), NT_NDIM(__VA_ARGS__), (const int64_t[]){__VA_ARGS__}, (vals))
#define NT_NDIM(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
/* An uninitialised (r, c) tensor, or a vector of r when c == 0. */
tg_tensor *nt_matrix(tg_dtype dt, int64_t r, int64_t c);
/* An f32 tensor of one element v. */
tg_tensor *nt_scalar(float v);
/* Whether a and b hold the same bytes (and as many). */
int nt_same_bytes(const tg_tensor *a, const tg_tensor *b);
/* The first element of an f32 tensor. */
float nt_read_f32(const tg_tensor *t);
/* Integer ids (i32). */
tg_tensor *nt_ids(int ndim, const int64_t *shape, const int32_t *ids);
/* All elements as doubles into a new array (free it). */
double *nt_get(const tg_tensor *t);
/* Appends t's elements, as doubles, to the array *buf of *n (grown with realloc; free it). */
void nt_append(double **buf, size_t *n, const tg_tensor *t);
/* Sets every element to v. */
void nt_set(tg_tensor *t, double v);
/* Bails out with the message when st != TG_OK. */
void nt_check(tg_status st, const char *what);

/* max |got - want| / max(max |want|, floor): a normwise relative error. */
double nt_rel_max(const double *got, const double *want, size_t n, double floor);
/* ||got - want||_2 / ||want||_2 (0 when both are 0). */
double nt_rel_l2(const double *got, const double *want, size_t n);
/* Whether any element is NaN. */
int nt_any_nan(const double *x, size_t n);

#endif
