/* nn-ref.h — float64 reference forwards of the nn modules, for the nn tests. */
#ifndef TG_NN_REF_H
#define TG_NN_REF_H

#include <stdint.h>

/* y (N, out) = x (N, in) W^T (out, in) + b (out; NULL: none) */
void ref_linear(const double *x, int64_t n, int64_t in, const double *w, const double *b, int64_t out, double *y);
/* b NULL: no beta */
void ref_layernorm(const double *x, int64_t n, int64_t c, const double *g, const double *b, double eps, double *y);
void ref_rmsnorm(const double *x, int64_t n, int64_t c, const double *g, double eps, double *y);
void ref_gelu(const double *x, int64_t n, double *y);
/* x (N, 2H) -> y (N, H) */
void ref_swiglu(const double *x, int64_t n, int64_t h, double *y);
/* qkv (B, T, 3C) -> out (B, T, C), causal, scale 1/sqrt(C/nh) */
void ref_attention(const double *qkv, int64_t b, int64_t t, int64_t c, int nh, double *out);
/* out (B, T, C) = wte[idx] + wpe[t] */
void ref_embedding(const int32_t *idx, int64_t b, int64_t t, const double *wte, const double *wpe, int64_t c, double *out);
/* mean over rows with target != ignore of logsumexp(row) - row[target] */
double ref_cross_entropy(const double *logits, int64_t n, int64_t v, const int32_t *targets, int ignore);

/* Composites, parameters in tg_module_parameters order (norm is 0 layernorm, 1 rmsnorm; biases on). */
/* P: norm.w, [norm.b], fc1.w, fc1.b, fc2.w, fc2.b */
void ref_mlp(const double *x, int64_t n, int64_t c, int64_t h, int rms, int swiglu, double **p, double eps, double *y);
/* P: qkv.w, qkv.b, proj.w, proj.b */
void ref_attn_block(const double *x, int64_t b, int64_t t, int64_t c, int nh, double **p, double *y);
/* P: attn_norm.w, [.b], attn (4), mlp (5 or 6) */
void ref_layer(const double *x, int64_t b, int64_t t, int64_t c, int nh, int64_t h, int rms, int swiglu, double **p,
               double eps, double *y);

#endif
