/* nn-ref.c — float64 reference forwards of the nn modules (straightforward loops, no tricks). */
#include "nn-ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_linear(const double *x, int64_t n, int64_t in, const double *w, const double *b, int64_t out, double *y)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t k = 0; k < in; k++) s += x[i * in + k] * w[o * in + k];
            y[i * out + o] = s;
        }
}

void ref_layernorm(const double *x, int64_t n, int64_t c, const double *g, const double *b, double eps, double *y)
{
    for (int64_t i = 0; i < n; i++) {
        const double *r = x + i * c;
        double mean = 0, var = 0;
        for (int64_t k = 0; k < c; k++) mean += r[k];
        mean /= (double)c;
        for (int64_t k = 0; k < c; k++) var += (r[k] - mean) * (r[k] - mean);
        var /= (double)c;
        double rstd = 1.0 / sqrt(var + eps);
        for (int64_t k = 0; k < c; k++) y[i * c + k] = (r[k] - mean) * rstd * g[k] + (b ? b[k] : 0.0);
    }
}

void ref_rmsnorm(const double *x, int64_t n, int64_t c, const double *g, double eps, double *y)
{
    for (int64_t i = 0; i < n; i++) {
        const double *r = x + i * c;
        double ms = 0;
        for (int64_t k = 0; k < c; k++) ms += r[k] * r[k];
        double rstd = 1.0 / sqrt(ms / (double)c + eps);
        for (int64_t k = 0; k < c; k++) y[i * c + k] = r[k] * rstd * g[k];
    }
}

void ref_gelu(const double *x, int64_t n, double *y)
{
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    }
}

void ref_swiglu(const double *x, int64_t n, int64_t h, double *y)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < h; k++) {
            double a = x[i * 2 * h + k], b = x[i * 2 * h + h + k];
            y[i * h + k] = a / (1.0 + exp(-a)) * b;
        }
}

void ref_attention(const double *qkv, int64_t b, int64_t t, int64_t c, int nh, double *out)
{
    int64_t d = c / nh;
    double scale = 1.0 / sqrt((double)d), *p = malloc((size_t)t * sizeof *p);
    for (int64_t bi = 0; bi < b; bi++)
        for (int hh = 0; hh < nh; hh++)
            for (int64_t i = 0; i < t; i++) {
                const double *q = qkv + (bi * t + i) * 3 * c + hh * d;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *k = qkv + (bi * t + j) * 3 * c + c + hh * d;
                    double s = 0;
                    for (int64_t e = 0; e < d; e++) s += q[e] * k[e];
                    p[j] = s * scale;
                    if (p[j] > mx) mx = p[j];
                }
                for (int64_t j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
                double *o = out + (bi * t + i) * c + hh * d;
                for (int64_t e = 0; e < d; e++) o[e] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *v = qkv + (bi * t + j) * 3 * c + 2 * c + hh * d;
                    for (int64_t e = 0; e < d; e++) o[e] += p[j] / sum * v[e];
                }
            }
    free(p);
}

void ref_embedding(const int32_t *idx, int64_t b, int64_t t, const double *wte, const double *wpe, int64_t c, double *out)
{
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < t; i++)
            for (int64_t k = 0; k < c; k++)
                out[(bi * t + i) * c + k] = wte[(int64_t)idx[bi * t + i] * c + k] + (wpe ? wpe[i * c + k] : 0.0);
}

double ref_cross_entropy(const double *logits, int64_t n, int64_t v, const int32_t *targets, int ignore)
{
    double total = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        if (targets[i] == ignore) continue;
        const double *r = logits + i * v;
        double mx = -INFINITY, s = 0;
        for (int64_t k = 0; k < v; k++) mx = r[k] > mx ? r[k] : mx;
        for (int64_t k = 0; k < v; k++) s += exp(r[k] - mx);
        total += mx + log(s) - r[targets[i]];
        count++;
    }
    return count ? total / (double)count : 0.0;
}

static void norm(const double *x, int64_t n, int64_t c, int rms, double **p, double eps, double *y)
{
    if (rms) ref_rmsnorm(x, n, c, p[0], eps, y);
    else ref_layernorm(x, n, c, p[0], p[1], eps, y);
}

void ref_mlp(const double *x, int64_t n, int64_t c, int64_t h, int rms, int swiglu, double **p, double eps, double *y)
{
    int64_t h1 = swiglu ? 2 * h : h;
    double *a = malloc((size_t)(n * c) * sizeof *a), *f = malloc((size_t)(n * h1) * sizeof *f),
           *g = malloc((size_t)(n * h) * sizeof *g);
    norm(x, n, c, rms, p, eps, a);
    p += rms ? 1 : 2;
    ref_linear(a, n, c, p[0], p[1], h1, f);
    if (swiglu) ref_swiglu(f, n, h, g);
    else ref_gelu(f, n * h, g);
    ref_linear(g, n, h, p[2], p[3], c, y);
    free(a), free(f), free(g);
}

void ref_attn_block(const double *x, int64_t b, int64_t t, int64_t c, int nh, double **p, double *y)
{
    int64_t n = b * t;
    double *qkv = malloc((size_t)(n * 3 * c) * sizeof *qkv), *o = malloc((size_t)(n * c) * sizeof *o);
    ref_linear(x, n, c, p[0], p[1], 3 * c, qkv);
    ref_attention(qkv, b, t, c, nh, o);
    ref_linear(o, n, c, p[2], p[3], c, y);
    free(qkv), free(o);
}

void ref_layer(const double *x, int64_t b, int64_t t, int64_t c, int nh, int64_t h, int rms, int swiglu, double **p,
               double eps, double *y)
{
    int64_t n = b * t;
    double *a = malloc((size_t)(n * c) * sizeof *a), *hh = malloc((size_t)(n * c) * sizeof *hh);
    norm(x, n, c, rms, p, eps, a);
    p += rms ? 1 : 2;
    ref_attn_block(a, b, t, c, nh, p, hh);
    p += 4;
    for (int64_t i = 0; i < n * c; i++) hh[i] += x[i];
    ref_mlp(hh, n, c, h, rms, swiglu, p, eps, y);
    for (int64_t i = 0; i < n * c; i++) y[i] += hh[i];
    free(a), free(hh);
}
