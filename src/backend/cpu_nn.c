/* cpu_nn.c — CPU reference kernels of the transformer ops (norms, activations, attention, embedding, loss, AdamW); deterministic. */
#include "backend/cpu_impl.h"
#include "core/debug.h"

#include <math.h>
#include <string.h>

/* Results never depend on the thread count: work is split by rows (or by
 * blocks of columns for sums over rows), and every sum runs in one fixed
 * order inside one thread. bf16 is loaded to f32 and rounded on store. */

static inline float ld(const void *p, tg_dtype dt, int64_t i)
{
    return dt == TG_BF16 ? tg_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void st(void *p, tg_dtype dt, int64_t i, float v)
{
    if (dt == TG_BF16) ((uint16_t *)p)[i] = tg_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* wgrad store: p[i] = acc * p[i] + g, acc == 0 overwrites (NaN in p ignored). */
static inline void st_wgrad(void *p, tg_dtype dt, int64_t i, float acc, double g)
{
    double v = acc == 0 ? g : (double)acc * ld(p, dt, i) + g;
    st(p, dt, i, (float)v);
}

/* The bf16 study's rounding of f32 values (core/debug.h: round_residual, round_grads with autocast_gemm). */
static int study_round(tg_dtype dt, tg_debug_flag flag)
{
    return dt == TG_F32 && tg_debug_get(TG_DEBUG_AUTOCAST_GEMM) && tg_debug_get(flag);
}

/* A parameter element, rounded to bf16 when rp (round_params). */
static inline float ldp(const void *p, tg_dtype dt, int64_t i, int rp)
{
    float v = ld(p, dt, i);
    return rp ? tg_bf16_to_f32(tg_f32_to_bf16(v)) : v;
}

static void study_round_f32(void *p, int64_t n)
{
    float *f = p;
    for (int64_t i = 0; i < n; i++) f[i] = tg_bf16_to_f32(tg_f32_to_bf16(f[i]));
}

static tg_status float_only(const char *what, tg_dtype dt)
{
    if (dt == TG_F32 || dt == TG_BF16) return TG_OK;
    return tg_error(TG_ENOTSUP, "cpu %s: dtype %s is not supported", what,
                    (unsigned)dt < TG_DTYPE_COUNT ? tg_dtype_name(dt) : "(invalid)");
}

/* Column block of the sums over rows (wgrads): one thread owns a block. */
#define COL_BLOCK 32

/* ------------------------------------------------------------------ layernorm */
/* Row r's statistics: mean and rstd as stored (f32), the sums in double. */
static void layernorm_stats(const struct tg_layernorm_forward_args *a, int64_t r, float *mean, float *rstd)
{
    const int64_t o = r * a->c, c = a->c;
    const tg_dtype dt = a->dt;
    double sum = 0, var = 0;
    for (int64_t j = 0; j < c; j++) sum += ld(a->x, dt, o + j);
    double mu = sum / (double)c;
    for (int64_t j = 0; j < c; j++) {
        double d = ld(a->x, dt, o + j) - mu;
        var += d * d;
    }
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt(var / (double)c + a->eps));
}

/* Output element j of row r in f32, before it is rounded to dt. */
static inline float layernorm_value(const struct tg_layernorm_forward_args *a, int64_t r, int64_t j, float m, float rs,
                                    int rp)
{
    float v = (ld(a->x, a->dt, r * a->c + j) - m) * rs * ldp(a->gamma, a->dt, j, rp);
    if (a->beta) v += ldp(a->beta, a->dt, j, rp);
    return v;
}

static void layernorm_forward_run(const void *p)
{
    const struct tg_layernorm_forward_args *a = p;
    int64_t n = a->n, c = a->c;
    tg_dtype dt = a->dt;
    const int rp = study_round(dt, TG_DEBUG_ROUND_PARAMS);
#pragma omp parallel for schedule(static) if (n * c > CPU_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        float m, rs;
        layernorm_stats(a, r, &m, &rs);
        a->mean[r] = m;
        a->rstd[r] = rs;
        for (int64_t j = 0; j < c; j++) st(a->y, dt, r * c + j, layernorm_value(a, r, j, m, rs, rp));
    }
}

/* tg_layernorm_forward_fp8: layernorm_forward_run's values rounded to dt, then cast as cpu_fp8.c's cast_run
 * (amax of the rounded values, compared as bits). */
static void layernorm_fp8_run(const void *p)
{
    const struct tg_layernorm_fp8_args *f = p;
    const struct tg_layernorm_forward_args *a = &f->ln;
    const int64_t n = a->n, c = a->c;
    const tg_dtype dt = a->dt;
    const int rp = study_round(dt, TG_DEBUG_ROUND_PARAMS);
    const float scale = f->scale ? *f->scale : 1.0f;
    uint32_t mx = 0;
#pragma omp parallel for schedule(static) reduction(max : mx) if (n * c > CPU_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        float m, rs;
        layernorm_stats(a, r, &m, &rs);
        a->mean[r] = m;
        a->rstd[r] = rs;
        for (int64_t j = 0; j < c; j++) {
            float v = layernorm_value(a, r, j, m, rs, rp);
            if (dt == TG_BF16) v = tg_bf16_to_f32(tg_f32_to_bf16(v));
            uint32_t b;
            memcpy(&b, &v, sizeof b);
            b &= 0x7fffffffu;
            if (b > mx) mx = b;
            f->y8[r * c + j] = tg_fp8_from_f32(f->y8_dt, v * scale);
        }
    }
    if (f->amax) {
        uint32_t old;
        memcpy(&old, f->amax, sizeof old);
        if (f->accumulate && old > mx) mx = old;
        memcpy(f->amax, &mx, sizeof mx);
    }
    if (f->scale_inv) *f->scale_inv = 1.0f / scale;
}

static void layernorm_backward_run(const void *p)
{
    const struct tg_layernorm_backward_args *a = p;
    int64_t n = a->n, c = a->c;
    tg_dtype dt = a->dt;
    const int rp = study_round(dt, TG_DEBUG_ROUND_PARAMS);
#pragma omp parallel for schedule(static) if (n * c > CPU_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        const int64_t o = r * c;
        const float m = a->mean[r], rs = a->rstd[r];
        double s1 = 0, s2 = 0; /* sum dxhat, sum dxhat * xhat */
        for (int64_t j = 0; j < c; j++) {
            float xhat = (ld(a->x, dt, o + j) - m) * rs, dxhat = ld(a->dy, dt, o + j) * ldp(a->gamma, dt, j, rp);
            s1 += dxhat;
            s2 += (double)dxhat * xhat;
        }
        const float m1 = (float)(s1 / (double)c), m2 = (float)(s2 / (double)c);
        for (int64_t j = 0; j < c; j++) {
            float xhat = (ld(a->x, dt, o + j) - m) * rs, dxhat = ld(a->dy, dt, o + j) * ldp(a->gamma, dt, j, rp);
            float d = rs * (dxhat - m1 - xhat * m2);
            if (a->dres) d += ld(a->dres, dt, o + j); /* f32 sum, one rounding */
            st(a->dx, dt, o + j, d);
        }
    }
    if (study_round(dt, TG_DEBUG_ROUND_RESIDUAL)) study_round_f32(a->dx, n * c);
}

static void layernorm_backward_dw_run(const void *p)
{
    const struct tg_layernorm_backward_dw_args *a = p;
    int64_t n = a->n, c = a->c;
    tg_dtype dt = a->dt;
#pragma omp parallel for schedule(static) if (n * c > CPU_PAR_MIN)
    for (int64_t c0 = 0; c0 < c; c0 += COL_BLOCK) {
        int64_t w = c - c0 < COL_BLOCK ? c - c0 : COL_BLOCK;
        double dg[COL_BLOCK] = {0}, db[COL_BLOCK] = {0};
        for (int64_t r = 0; r < n; r++) {
            const int64_t o = r * c + c0;
            const float m = a->mean[r], rs = a->rstd[r];
            for (int64_t j = 0; j < w; j++) {
                float dy = ld(a->dy, dt, o + j), xhat = (ld(a->x, dt, o + j) - m) * rs;
                dg[j] += (double)dy * xhat;
                db[j] += dy;
            }
        }
        for (int64_t j = 0; j < w; j++) {
            st_wgrad(a->dgamma, a->dw_dt, c0 + j, a->accumulate, dg[j]);
            if (a->dbeta) st_wgrad(a->dbeta, a->dw_dt, c0 + j, a->accumulate, db[j]);
        }
    }
    if (study_round(a->dw_dt, TG_DEBUG_ROUND_GRADS)) {
        study_round_f32(a->dgamma, c);
        if (a->dbeta) study_round_f32(a->dbeta, c);
    }
}

tg_status cpu_layernorm_forward(tg_stream *s, const struct tg_layernorm_forward_args *a)
{
    TG_TRY(float_only("layernorm_forward", a->dt));
    return cpu_submit(s, layernorm_forward_run, a, sizeof *a);
}

tg_status cpu_layernorm_forward_fp8(tg_stream *s, const struct tg_layernorm_fp8_args *a)
{
    TG_TRY(float_only("layernorm_forward_fp8", a->ln.dt));
    return cpu_submit(s, layernorm_fp8_run, a, sizeof *a);
}

tg_status cpu_layernorm_backward(tg_stream *s, const struct tg_layernorm_backward_args *a)
{
    TG_TRY(float_only("layernorm_backward", a->dt));
    return cpu_submit(s, layernorm_backward_run, a, sizeof *a);
}

tg_status cpu_layernorm_backward_dw(tg_stream *s, const struct tg_layernorm_backward_dw_args *a)
{
    TG_TRY(float_only("layernorm_backward_dw", a->dt));
    TG_TRY(float_only("layernorm_backward_dw", a->dw_dt));
    return cpu_submit(s, layernorm_backward_dw_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ rmsnorm */
static void rmsnorm_forward_run(const void *p)
{
    const struct tg_rmsnorm_forward_args *a = p;
    int64_t n = a->n, c = a->c;
    tg_dtype dt = a->dt;
#pragma omp parallel for schedule(static) if (n * c > CPU_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        const int64_t o = r * c;
        double ss = 0;
        for (int64_t j = 0; j < c; j++) {
            double v = ld(a->x, dt, o + j);
            ss += v * v;
        }
        float rs = (float)(1.0 / sqrt(ss / (double)c + a->eps));
        a->rstd[r] = rs;
        for (int64_t j = 0; j < c; j++) st(a->y, dt, o + j, ld(a->x, dt, o + j) * rs * ld(a->gamma, dt, j));
    }
}

static void rmsnorm_backward_run(const void *p)
{
    const struct tg_rmsnorm_backward_args *a = p;
    int64_t n = a->n, c = a->c;
    tg_dtype dt = a->dt;
#pragma omp parallel for schedule(static) if (n * c > CPU_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        const int64_t o = r * c;
        const float rs = a->rstd[r];
        double s2 = 0; /* sum dxhat * xhat */
        for (int64_t j = 0; j < c; j++)
            s2 += (double)(ld(a->dy, dt, o + j) * ld(a->gamma, dt, j)) * (ld(a->x, dt, o + j) * rs);
        const float m2 = (float)(s2 / (double)c);
        for (int64_t j = 0; j < c; j++) {
            float xhat = ld(a->x, dt, o + j) * rs, dxhat = ld(a->dy, dt, o + j) * ld(a->gamma, dt, j);
            float d = rs * (dxhat - xhat * m2);
            if (a->dres) d += ld(a->dres, dt, o + j); /* f32 sum, one rounding */
            st(a->dx, dt, o + j, d);
        }
    }
    if (study_round(dt, TG_DEBUG_ROUND_RESIDUAL)) study_round_f32(a->dx, n * c);
}

static void rmsnorm_backward_dw_run(const void *p)
{
    const struct tg_rmsnorm_backward_dw_args *a = p;
    int64_t n = a->n, c = a->c;
    tg_dtype dt = a->dt;
#pragma omp parallel for schedule(static) if (n * c > CPU_PAR_MIN)
    for (int64_t c0 = 0; c0 < c; c0 += COL_BLOCK) {
        int64_t w = c - c0 < COL_BLOCK ? c - c0 : COL_BLOCK;
        double dg[COL_BLOCK] = {0};
        for (int64_t r = 0; r < n; r++) {
            const int64_t o = r * c + c0;
            const float rs = a->rstd[r];
            for (int64_t j = 0; j < w; j++) dg[j] += (double)ld(a->dy, dt, o + j) * (ld(a->x, dt, o + j) * rs);
        }
        for (int64_t j = 0; j < w; j++) st_wgrad(a->dgamma, a->dw_dt, c0 + j, a->accumulate, dg[j]);
    }
}

tg_status cpu_rmsnorm_forward(tg_stream *s, const struct tg_rmsnorm_forward_args *a)
{
    TG_TRY(float_only("rmsnorm_forward", a->dt));
    return cpu_submit(s, rmsnorm_forward_run, a, sizeof *a);
}

tg_status cpu_rmsnorm_backward(tg_stream *s, const struct tg_rmsnorm_backward_args *a)
{
    TG_TRY(float_only("rmsnorm_backward", a->dt));
    return cpu_submit(s, rmsnorm_backward_run, a, sizeof *a);
}

tg_status cpu_rmsnorm_backward_dw(tg_stream *s, const struct tg_rmsnorm_backward_dw_args *a)
{
    TG_TRY(float_only("rmsnorm_backward_dw", a->dt));
    TG_TRY(float_only("rmsnorm_backward_dw", a->dw_dt));
    return cpu_submit(s, rmsnorm_backward_dw_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ gelu (tanh), swiglu */
#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

static void gelu_forward_run(const void *p)
{
    const struct tg_gelu_forward_args *a = p;
    int64_t n = a->n;
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float x = ld(a->x, a->dt, i);
        st(a->y, a->dt, i, 0.5f * x * (1.0f + tanhf(GELU_K * (x + GELU_A * x * x * x))));
    }
}

static void gelu_backward_run(const void *p)
{
    const struct tg_gelu_backward_args *a = p;
    int64_t n = a->n;
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float x = ld(a->x, a->dt, i), th = tanhf(GELU_K * (x + GELU_A * x * x * x));
        float d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        st(a->dx, a->dt, i, ld(a->dy, a->dt, i) * d);
    }
}

static void swiglu_forward_run(const void *p)
{
    const struct tg_swiglu_forward_args *a = p;
    int64_t n = a->n, h = a->h;
#pragma omp parallel for schedule(static) if (n * h > CPU_PAR_MIN)
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < h; j++) {
            float u = ld(a->x, a->dt, r * 2 * h + j), g = ld(a->x, a->dt, r * 2 * h + h + j);
            st(a->y, a->dt, r * h + j, u / (1.0f + expf(-u)) * g);
        }
}

static void swiglu_backward_run(const void *p)
{
    const struct tg_swiglu_backward_args *a = p;
    int64_t n = a->n, h = a->h;
#pragma omp parallel for schedule(static) if (n * h > CPU_PAR_MIN)
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < h; j++) {
            int64_t iu = r * 2 * h + j, ig = iu + h;
            float u = ld(a->x, a->dt, iu), g = ld(a->x, a->dt, ig), dy = ld(a->dy, a->dt, r * h + j);
            float sg = 1.0f / (1.0f + expf(-u));
            st(a->dx, a->dt, iu, dy * g * sg * (1.0f + u * (1.0f - sg)));
            st(a->dx, a->dt, ig, dy * u * sg);
        }
}

tg_status cpu_gelu_forward(tg_stream *s, const struct tg_gelu_forward_args *a)
{
    TG_TRY(float_only("gelu_forward", a->dt));
    return cpu_submit(s, gelu_forward_run, a, sizeof *a);
}

tg_status cpu_gelu_backward(tg_stream *s, const struct tg_gelu_backward_args *a)
{
    TG_TRY(float_only("gelu_backward", a->dt));
    return cpu_submit(s, gelu_backward_run, a, sizeof *a);
}

tg_status cpu_swiglu_forward(tg_stream *s, const struct tg_swiglu_forward_args *a)
{
    TG_TRY(float_only("swiglu_forward", a->dt));
    return cpu_submit(s, swiglu_forward_run, a, sizeof *a);
}

tg_status cpu_swiglu_backward(tg_stream *s, const struct tg_swiglu_backward_args *a)
{
    TG_TRY(float_only("swiglu_backward", a->dt));
    return cpu_submit(s, swiglu_backward_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ bias */
static void bias_add_run(const void *p)
{
    const struct tg_bias_add_args *a = p;
    int64_t n = a->n, c = a->c;
#pragma omp parallel for schedule(static) if (n * c > CPU_PAR_MIN)
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < c; j++) st(a->y, a->dt, r * c + j, ld(a->y, a->dt, r * c + j) + ld(a->bias, a->dt, j));
}

static void bias_backward_dw_run(const void *p)
{
    const struct tg_bias_backward_dw_args *a = p;
    int64_t n = a->n, c = a->c;
#pragma omp parallel for schedule(static) if (n * c > CPU_PAR_MIN)
    for (int64_t c0 = 0; c0 < c; c0 += COL_BLOCK) {
        int64_t w = c - c0 < COL_BLOCK ? c - c0 : COL_BLOCK;
        double db[COL_BLOCK] = {0};
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < w; j++) db[j] += ld(a->dy, a->dt, r * c + c0 + j);
        for (int64_t j = 0; j < w; j++) st_wgrad(a->dbias, a->dw_dt, c0 + j, a->accumulate, db[j]);
    }
}

tg_status cpu_bias_add(tg_stream *s, const struct tg_bias_add_args *a)
{
    TG_TRY(float_only("bias_add", a->dt));
    return cpu_submit(s, bias_add_run, a, sizeof *a);
}

tg_status cpu_bias_backward_dw(tg_stream *s, const struct tg_bias_backward_dw_args *a)
{
    TG_TRY(float_only("bias_backward_dw", a->dt));
    TG_TRY(float_only("bias_backward_dw", a->dw_dt));
    return cpu_submit(s, bias_backward_dw_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ causal attention
 * Per (batch, head), one thread; q_t, k_t, v_t of head h live at columns
 * h*d, c + h*d, 2c + h*d of token t's qkv row. Probabilities are recomputed
 * in backward from the saved log-sum-exp: p_ij = exp(s_ij - lse_i). */

/* scale * (q_i . k_j), the one definition of a score (forward and backward agree). */
static inline __attribute__((always_inline)) float att_score(const void *qkv, tg_dtype dt, int64_t qi, int64_t kj, int64_t d, float scale)
{
    float acc = 0;
    for (int64_t e = 0; e < d; e++) acc += ld(qkv, dt, qi + e) * ld(qkv, dt, kj + e);
    return acc * scale;
}

/* The bodies take the dtype as a constant (always inlined into one copy per
 * dtype), so the element loads fold and the inner loops vectorise. */
static inline __attribute__((always_inline)) void attention_forward_body(const struct tg_attention_forward_args *a,
                                                                          const tg_dtype dt)
{
    const int64_t B = a->b, T = a->t, C = a->c, H = a->n_head, D = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(static) if (B * H * T * T * D > CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            float s[T > 0 ? T : 1], o[D > 0 ? D : 1];
            for (int64_t i = 0; i < T; i++) {
                const int64_t qi = (b * T + i) * C3 + h * D;
                float mx = -INFINITY;
                for (int64_t j = 0; j <= i; j++) {
                    s[j] = att_score(a->qkv, dt, qi, (b * T + j) * C3 + C + h * D, D, scale);
                    if (s[j] > mx) mx = s[j];
                }
                float l = 0;
                for (int64_t j = 0; j <= i; j++) l += (s[j] = expf(s[j] - mx));
                for (int64_t e = 0; e < D; e++) o[e] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const int64_t vj = (b * T + j) * C3 + 2 * C + h * D;
                    for (int64_t e = 0; e < D; e++) o[e] += s[j] * ld(a->qkv, dt, vj + e);
                }
                const float inv = 1.0f / l;
                for (int64_t e = 0; e < D; e++) st(a->out, dt, (b * T + i) * C + h * D + e, o[e] * inv);
                a->lse[(b * H + h) * T + i] = mx + logf(l);
            }
        }
}

static inline __attribute__((always_inline)) void attention_backward_body(const struct tg_attention_backward_args *a,
                                                                           const tg_dtype dt)
{
    const int64_t B = a->b, T = a->t, C = a->c, H = a->n_head, D = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(static) if (B * H * T * T * D > CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            float dd[T > 0 ? T : 1], g1[D > 0 ? D : 1], g2[D > 0 ? D : 1]; /* dd_i = dout_i . out_i */
            const float *lse = a->lse + (b * H + h) * T;
            for (int64_t i = 0; i < T; i++) {
                const int64_t oi = (b * T + i) * C + h * D;
                float acc = 0;
                for (int64_t e = 0; e < D; e++) acc += ld(a->dout, dt, oi + e) * ld(a->out, dt, oi + e);
                dd[i] = acc;
            }
            /* dq_i = scale * sum_{j <= i} ds_ij k_j, ds_ij = p_ij (dout_i . v_j - dd_i) */
            for (int64_t i = 0; i < T; i++) {
                const int64_t qi = (b * T + i) * C3 + h * D, oi = (b * T + i) * C + h * D;
                for (int64_t e = 0; e < D; e++) g1[e] = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const int64_t kj = (b * T + j) * C3 + C + h * D, vj = kj + C;
                    float pr = expf(att_score(a->qkv, dt, qi, kj, D, scale) - lse[i]), dp = 0;
                    for (int64_t e = 0; e < D; e++) dp += ld(a->dout, dt, oi + e) * ld(a->qkv, dt, vj + e);
                    float ds = pr * (dp - dd[i]);
                    for (int64_t e = 0; e < D; e++) g1[e] += ds * ld(a->qkv, dt, kj + e);
                }
                for (int64_t e = 0; e < D; e++) st(a->dqkv, dt, qi + e, g1[e] * scale);
            }
            /* dk_j = scale * sum_{i >= j} ds_ij q_i; dv_j = sum_{i >= j} p_ij dout_i */
            for (int64_t j = 0; j < T; j++) {
                const int64_t kj = (b * T + j) * C3 + C + h * D, vj = kj + C;
                for (int64_t e = 0; e < D; e++) g1[e] = g2[e] = 0;
                for (int64_t i = j; i < T; i++) {
                    const int64_t qi = (b * T + i) * C3 + h * D, oi = (b * T + i) * C + h * D;
                    float pr = expf(att_score(a->qkv, dt, qi, kj, D, scale) - lse[i]), dp = 0;
                    for (int64_t e = 0; e < D; e++) dp += ld(a->dout, dt, oi + e) * ld(a->qkv, dt, vj + e);
                    float ds = pr * (dp - dd[i]);
                    for (int64_t e = 0; e < D; e++) {
                        g1[e] += ds * ld(a->qkv, dt, qi + e);
                        g2[e] += pr * ld(a->dout, dt, oi + e);
                    }
                }
                for (int64_t e = 0; e < D; e++) {
                    st(a->dqkv, dt, kj + e, g1[e] * scale);
                    st(a->dqkv, dt, vj + e, g2[e]);
                }
            }
        }
}

static void attention_forward_run(const void *p)
{
    const struct tg_attention_forward_args *a = p;
    if (a->dt == TG_BF16) attention_forward_body(a, TG_BF16);
    else attention_forward_body(a, TG_F32);
}

static void attention_backward_run(const void *p)
{
    const struct tg_attention_backward_args *a = p;
    if (a->dt == TG_BF16) attention_backward_body(a, TG_BF16);
    else attention_backward_body(a, TG_F32);
}

/* The attention kernels keep a row of scores (positions) and head-dim accumulators per thread on the stack:
 * both are bounded so that stays well inside a thread's stack (a context this long is for a GPU anyway). */
#define ATT_CPU_MAX (1 << 16)
static tg_status att_rows_fit(const char *what, int64_t positions, int64_t c, int64_t n_head)
{
    const int64_t d = n_head > 0 ? c / n_head : c;
    if (positions > ATT_CPU_MAX)
        return tg_error(TG_ENOTSUP, "%s: %lld positions, more than the CPU kernel's %d", what, (long long)positions,
                        ATT_CPU_MAX);
    if (d > ATT_CPU_MAX)
        return tg_error(TG_ENOTSUP, "%s: head dim %lld, more than the CPU kernel's %d", what, (long long)d, ATT_CPU_MAX);
    return TG_OK;
}

tg_status cpu_attention_forward(tg_stream *s, const struct tg_attention_forward_args *a)
{
    TG_TRY(float_only("attention_forward", a->dt));
    TG_TRY(att_rows_fit("attention_forward", a->t, a->c, a->n_head));
    return cpu_submit(s, attention_forward_run, a, sizeof *a);
}

/* The cache rows of the new positions first, then one query row per (batch, head, new position), scored the
 * way attention_forward scores (same order of operations, so a cached decode reproduces a full forward). */
static inline __attribute__((always_inline)) void attention_kv_body(const struct tg_attention_kv_args *a,
                                                                     const tg_dtype dt)
{
    const int64_t B = a->b, Tn = a->tn, Tm = a->tmax, P = a->pos, C = a->c, H = a->n_head, D = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Tn; i++)
            for (int64_t e = 0; e < C; e++) {
                st(a->kcache, dt, (b * Tm + P + i) * C + e, ld(a->qkv, dt, (b * Tn + i) * C3 + C + e));
                st(a->vcache, dt, (b * Tm + P + i) * C + e, ld(a->qkv, dt, (b * Tn + i) * C3 + 2 * C + e));
            }
#pragma omp parallel for collapse(2) schedule(static) if (B * H * Tn * (P + Tn) * D > CPU_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            float s[P + Tn], o[D > 0 ? D : 1];
            for (int64_t i = 0; i < Tn; i++) {
                const int64_t qi = (b * Tn + i) * C3 + h * D, L = P + i;
                float mx = -INFINITY;
                for (int64_t j = 0; j <= L; j++) {
                    const int64_t kj = (b * Tm + j) * C + h * D;
                    float acc = 0;
                    for (int64_t e = 0; e < D; e++) acc += ld(a->qkv, dt, qi + e) * ld(a->kcache, dt, kj + e);
                    s[j] = acc * scale;
                    if (s[j] > mx) mx = s[j];
                }
                float l = 0;
                for (int64_t j = 0; j <= L; j++) l += (s[j] = expf(s[j] - mx));
                for (int64_t e = 0; e < D; e++) o[e] = 0;
                for (int64_t j = 0; j <= L; j++) {
                    const int64_t vj = (b * Tm + j) * C + h * D;
                    for (int64_t e = 0; e < D; e++) o[e] += s[j] * ld(a->vcache, dt, vj + e);
                }
                const float inv = 1.0f / l;
                for (int64_t e = 0; e < D; e++) st(a->out, dt, (b * Tn + i) * C + h * D + e, o[e] * inv);
            }
        }
}

static void attention_kv_run(const void *p)
{
    const struct tg_attention_kv_args *a = p;
    if (a->dt == TG_BF16) attention_kv_body(a, TG_BF16);
    else attention_kv_body(a, TG_F32);
}

tg_status cpu_attention_kv(tg_stream *s, const struct tg_attention_kv_args *a)
{
    TG_TRY(float_only("attention_kv", a->dt));
    TG_TRY(att_rows_fit("attention_kv", a->pos + a->tn, a->c, a->n_head));
    return cpu_submit(s, attention_kv_run, a, sizeof *a);
}

tg_status cpu_attention_backward(tg_stream *s, const struct tg_attention_backward_args *a)
{
    TG_TRY(float_only("attention_backward", a->dt));
    TG_TRY(att_rows_fit("attention_backward", a->t, a->c, a->n_head));
    return cpu_submit(s, attention_backward_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ embedding */
/* Notes the first of the n ids outside [0, v) (ignore: an id that is never bad) in check k. */
static void index_scan(struct tg_index_check *check, int k, const int32_t *ids, int64_t n, int64_t v, int has_ignore,
                       int ignore)
{
    if (!check) return;
    for (int64_t r = 0; r < n; r++) {
        const int32_t id = ids[r];
        if ((id >= 0 && id < v) || (has_ignore && id == ignore)) continue;
        const unsigned long long key = (unsigned long long)(r < 0xffffffffLL ? r : 0xffffffffLL) << 32 | (uint32_t)id;
        if (key < check->first[k]) check->first[k] = key, check->limit[k] = v;
        return;
    }
}

static void embedding_forward_run(const void *p)
{
    const struct tg_embedding_forward_args *a = p;
    index_scan(a->check, TG_INDEX_EMBEDDING, a->idx, a->b * a->t, a->v, 0, 0);
    const int64_t BT = a->b * a->t, C = a->c;
    const int rp = study_round(a->dt, TG_DEBUG_ROUND_PARAMS);
#pragma omp parallel for schedule(static) if (BT * C > CPU_PAR_MIN)
    for (int64_t r = 0; r < BT; r++) {
        const int64_t id = a->idx[r], t = r % a->t;
        const int valid = id >= 0 && id < a->v;
        for (int64_t j = 0; j < C; j++) {
            float v = valid ? ldp(a->wte, a->dt, id * C + j, rp) : 0.0f;
            if (a->wpe) v += ldp(a->wpe, a->dt, t * C + j, rp);
            st(a->out, a->dt, r * C + j, v);
        }
    }
    if (study_round(a->dt, TG_DEBUG_ROUND_RESIDUAL)) study_round_f32(a->out, BT * C);
}

/* Row `row` of dwte: the dout rows of positions pos[0..npos) (increasing), summed in that order. */
static void embedding_dwte_row(const struct tg_embedding_backward_dw_args *a, int64_t row, const int64_t *pos,
                               int64_t npos, double *acc)
{
    const int64_t C = a->c;
    for (int64_t j = 0; j < C; j++) acc[j] = 0;
    for (int64_t k = 0; k < npos; k++)
        for (int64_t j = 0; j < C; j++) acc[j] += ld(a->dout, a->dt, pos[k] * C + j);
    for (int64_t j = 0; j < C; j++) st_wgrad(a->dwte, a->dwte_dt, row * C + j, a->accumulate, acc[j]);
}

static void embedding_backward_dw_run(const void *p)
{
    const struct tg_embedding_backward_dw_args *a = p;
    const int64_t BT = a->b * a->t, C = a->c, V = a->v;
    if (a->dwte) index_scan(a->check, TG_INDEX_EMBEDDING, a->idx, BT, V, 0, 0);
    if (a->dwte) {
        /* Bucket positions by id (counting sort, stable: increasing positions per id),
         * then one thread per vocabulary row sums its bucket in order. */
        int64_t *start = malloc((size_t)(V + 1) * sizeof *start), *pos = malloc((size_t)(BT ? BT : 1) * sizeof *pos);
        if (start && pos) {
            memset(start, 0, (size_t)(V + 1) * sizeof *start);
            for (int64_t r = 0; r < BT; r++)
                if (a->idx[r] >= 0 && a->idx[r] < V) start[a->idx[r] + 1]++;
            for (int64_t v = 0; v < V; v++) start[v + 1] += start[v];
            for (int64_t r = 0; r < BT; r++) {
                int64_t id = a->idx[r];
                if (id >= 0 && id < V) pos[start[id]++] = r;
            }
            for (int64_t v = V; v > 0; v--) start[v] = start[v - 1]; /* the fill moved each start to its end */
            start[0] = 0;
#pragma omp parallel for schedule(static) if (V * C > CPU_PAR_MIN)
            for (int64_t v = 0; v < V; v++) {
                double acc[C > 0 ? C : 1];
                embedding_dwte_row(a, v, pos + start[v], start[v + 1] - start[v], acc);
            }
        } else {
            /* No memory for the buckets: scan all positions per row (same order, same result). */
#pragma omp parallel for schedule(static) if (V * C > CPU_PAR_MIN)
            for (int64_t v = 0; v < V; v++) {
                double acc[C > 0 ? C : 1];
                for (int64_t j = 0; j < C; j++) acc[j] = 0;
                for (int64_t r = 0; r < BT; r++)
                    if (a->idx[r] == v)
                        for (int64_t j = 0; j < C; j++) acc[j] += ld(a->dout, a->dt, r * C + j);
                for (int64_t j = 0; j < C; j++) st_wgrad(a->dwte, a->dwte_dt, v * C + j, a->accumulate, acc[j]);
            }
        }
        free(start);
        free(pos);
    }
    if (a->dwpe) {
#pragma omp parallel for schedule(static) if (a->tmax * C > CPU_PAR_MIN)
        for (int64_t t = 0; t < a->tmax; t++)
            for (int64_t j = 0; j < C; j++) {
                double acc = 0;
                if (t < a->t)
                    for (int64_t b = 0; b < a->b; b++) acc += ld(a->dout, a->dt, (b * a->t + t) * C + j);
                st_wgrad(a->dwpe, a->dwpe_dt, t * C + j, a->accumulate, acc);
            }
    }
    if (a->dwte && study_round(a->dwte_dt, TG_DEBUG_ROUND_GRADS)) study_round_f32(a->dwte, V * C);
    if (a->dwpe && study_round(a->dwpe_dt, TG_DEBUG_ROUND_GRADS)) study_round_f32(a->dwpe, a->tmax * C);
}

tg_status cpu_embedding_forward(tg_stream *s, const struct tg_embedding_forward_args *a)
{
    TG_TRY(float_only("embedding_forward", a->dt));
    return cpu_submit(s, embedding_forward_run, a, sizeof *a);
}

tg_status cpu_embedding_backward_dw(tg_stream *s, const struct tg_embedding_backward_dw_args *a)
{
    TG_TRY(float_only("embedding_backward_dw", a->dt));
    if (a->dwte) TG_TRY(float_only("embedding_backward_dw", a->dwte_dt));
    if (a->dwpe) TG_TRY(float_only("embedding_backward_dw", a->dwpe_dt));
    return cpu_submit(s, embedding_backward_dw_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ cross-entropy */
/* max and sum of exp(x - max) of row r (f32 exponentials, double sum). */
static void ce_row_stats(const void *logits, tg_dtype dt, int64_t o, int64_t v, float *mx, double *sum)
{
    float m = -INFINITY;
    double s = 0;
    for (int64_t j = 0; j < v; j++) {
        float x = ld(logits, dt, o + j);
        if (x > m) m = x;
    }
    for (int64_t j = 0; j < v; j++) s += expf(ld(logits, dt, o + j) - m);
    *mx = m;
    *sum = s;
}

static void cross_entropy_forward_run(const void *p)
{
    const struct tg_cross_entropy_forward_args *a = p;
    index_scan(a->check, TG_INDEX_TARGET, a->targets, a->n, a->v, 1, a->ignore_index);
    const int64_t N = a->n, V = a->v;
#pragma omp parallel for schedule(static) if (N * V > CPU_PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        const int32_t tgt = a->targets[r];
        if (tgt == a->ignore_index) a->losses[r] = 0;
        else if (tgt < 0 || tgt >= V) a->losses[r] = NAN;
        else {
            float mx;
            double sum;
            ce_row_stats(a->logits, a->dt, r * V, V, &mx, &sum);
            a->losses[r] = (float)(mx + log(sum) - ld(a->logits, a->dt, r * V + tgt));
        }
    }
    double total = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < N; r++)
        if (a->targets[r] != a->ignore_index) total += a->losses[r], count++;
    a->loss[0] = count ? (float)(total / (double)count) : 0.0f;
    a->loss[1] = (float)count;
}

static void cross_entropy_backward_run(const void *p)
{
    const struct tg_cross_entropy_backward_args *a = p;
    index_scan(a->check, TG_INDEX_TARGET, a->targets, a->n, a->v, 1, a->ignore_index);
    const int64_t N = a->n, V = a->v;
    const float count = a->loss[1];
    const double scale = count > 0 ? (double)a->dloss / count : 0.0;
#pragma omp parallel for schedule(static) if (N * V > CPU_PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        const int32_t tgt = a->targets[r];
        if (tgt == a->ignore_index || tgt < 0 || tgt >= V) {
            for (int64_t j = 0; j < V; j++) st(a->dlogits, a->dt, r * V + j, 0.0f);
            continue;
        }
        float mx;
        double sum;
        ce_row_stats(a->logits, a->dt, r * V, V, &mx, &sum);
        for (int64_t j = 0; j < V; j++) { /* reads logits[j] before writing dlogits[j] (they may alias) */
            double pr = expf(ld(a->logits, a->dt, r * V + j) - mx) / sum;
            st(a->dlogits, a->dt, r * V + j, (float)(scale * (pr - (j == tgt))));
        }
    }
}

static void cross_entropy_fused_run(const void *p)
{
    const struct tg_cross_entropy_fused_args *a = p;
    index_scan(a->check, TG_INDEX_TARGET, a->targets, a->n, a->v, 1, a->ignore_index);
    const int64_t N = a->n, V = a->v;
    const float count = a->loss[1];
    const double scale = count > 0 ? (double)a->dloss / count : 0.0;
#pragma omp parallel for schedule(static) if (N * V > CPU_PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        const int32_t tgt = a->targets[r];
        if (tgt == a->ignore_index || tgt < 0 || tgt >= V) {
            a->losses[r] = tgt == a->ignore_index ? 0.0f : NAN;
            if (a->dlogits)
                for (int64_t j = 0; j < V; j++) st(a->dlogits, a->dt, r * V + j, 0.0f);
            continue;
        }
        float mx;
        double sum;
        ce_row_stats(a->logits, a->dt, r * V, V, &mx, &sum);
        a->losses[r] = (float)(mx + log(sum) - ld(a->logits, a->dt, r * V + tgt));
        if (!a->dlogits) continue;
        for (int64_t j = 0; j < V; j++) { /* reads logits[j] before writing dlogits[j] (they may alias) */
            double pr = expf(ld(a->logits, a->dt, r * V + j) - mx) / sum;
            st(a->dlogits, a->dt, r * V + j, (float)(scale * (pr - (j == tgt))));
        }
    }
}

static void cross_entropy_mean_run(const void *p)
{
    const struct tg_cross_entropy_mean_args *a = p;
    index_scan(a->check, TG_INDEX_TARGET, a->targets, a->n, a->v, 1, a->ignore_index);
    double total = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < a->n; r++)
        if (a->targets[r] != a->ignore_index) total += a->losses ? a->losses[r] : 0.0, count++;
    a->loss[0] = count ? (float)(total / (double)count) : 0.0f;
    a->loss[1] = (float)count;
}

tg_status cpu_cross_entropy_fused(tg_stream *s, const struct tg_cross_entropy_fused_args *a)
{
    TG_TRY(float_only("cross_entropy_fused", a->dt));
    return cpu_submit(s, cross_entropy_fused_run, a, sizeof *a);
}

tg_status cpu_cross_entropy_mean(tg_stream *s, const struct tg_cross_entropy_mean_args *a)
{
    return cpu_submit(s, cross_entropy_mean_run, a, sizeof *a);
}

tg_status cpu_cross_entropy_forward(tg_stream *s, const struct tg_cross_entropy_forward_args *a)
{
    TG_TRY(float_only("cross_entropy_forward", a->dt));
    return cpu_submit(s, cross_entropy_forward_run, a, sizeof *a);
}

tg_status cpu_cross_entropy_backward(tg_stream *s, const struct tg_cross_entropy_backward_args *a)
{
    TG_TRY(float_only("cross_entropy_backward", a->dt));
    return cpu_submit(s, cross_entropy_backward_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ AdamW */
/* One tensor's update, shared by the single and multi-tensor kernels so both
 * do the same operations in the same order (bit-identical results). */
static inline void adamw_tensor(float *P, float *M, float *V, uint16_t *PL, const void *G, tg_dtype g_dt, int64_t n,
                                double lr, double b1, double b2, double eps, double wd, double gs, double bc1,
                                double bc2)
{
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        double g = gs * ld(G, g_dt, i);
        double m = b1 * M[i] + (1.0 - b1) * g, v = b2 * V[i] + (1.0 - b2) * g * g;
        double w = P[i];
        w -= lr * (m / bc1 / (sqrt(v / bc2) + eps) + wd * w);
        M[i] = (float)m;
        V[i] = (float)v;
        P[i] = (float)w;
        if (PL) PL[i] = tg_f32_to_bf16(P[i]);
    }
}

/* lr and bias corrections of the call, from the device lr and step count when
 * capturable (read now, at run or replay time), else the host values it was
 * issued with. 0 for a count below 1 (a device count never advanced): the step
 * then changes nothing, where 1 - b^0 = 0 would divide by zero. */
static int adamw_sched(const float *lr_dev, const int32_t *step_dev, float lr, int64_t step, double b1, double b2,
                       double *lr_out, double *bc1, double *bc2)
{
    const int64_t t = step_dev ? *step_dev : step;
    *lr_out = lr_dev ? *lr_dev : lr;
    *bc1 = 1.0 - pow(b1, (double)t), *bc2 = 1.0 - pow(b2, (double)t);
    return t >= 1;
}

static void adamw_run(const void *p)
{
    const struct tg_adamw_args *a = p;
    const double b1 = a->beta1, b2 = a->beta2;
    double lr, bc1, bc2;
    if (!adamw_sched(a->lr_dev, a->step_dev, a->lr, a->step, b1, b2, &lr, &bc1, &bc2)) return;
    adamw_tensor(a->p, a->m, a->v, a->p_lowp, a->g, a->g_dt, a->n, lr, b1, b2, a->eps, a->weight_decay,
                 a->grad_scale, bc1, bc2);
}

tg_status cpu_adamw(tg_stream *s, const struct tg_adamw_args *a)
{
    TG_TRY(float_only("adamw", a->g_dt));
    return cpu_submit(s, adamw_run, a, sizeof *a);
}

/* optim.clip_factor of the norm sqrt(sumsq): 0 when it is not finite, 1 within max_norm. */
static double clip_factor(float sumsq, double max_norm)
{
    const double norm = sqrt((double)sumsq);
    if (!isfinite(norm)) return 0.0;
    return norm <= max_norm ? 1.0 : max_norm / (norm + 1e-6);
}

static void adamw_multi_run(const void *p)
{
    const struct tg_adamw_multi_args *a = p;
    const double b1 = a->beta1, b2 = a->beta2;
    double lr, bc1, bc2;
    if (!adamw_sched(a->lr_dev, a->step_dev, a->lr, a->step, b1, b2, &lr, &bc1, &bc2)) return;
    double f = 1.0;
    if (a->clip_sumsq) {
        f = clip_factor(*a->clip_sumsq, a->max_norm);
        if (f == 0) return; /* a non-finite gradient norm: the step changes nothing */
    }
    /* rounded to f32 as tg_adamw_step's grad_scale is, so the two agree bit for bit */
    const double gs = (float)((double)a->grad_scale * f);
    for (int k = 0; k < a->ntensors; k++) {
        const struct tg_adamw_multi_tensor *t = &a->t[k];
        adamw_tensor(t->p, t->m, t->v, t->p_lowp, t->g, t->g_dt, t->n, lr, b1, b2, a->eps, t->weight_decay, gs,
                     bc1, bc2);
    }
}

tg_status cpu_adamw_multi(tg_stream *s, const struct tg_adamw_multi_args *a)
{
    for (int k = 0; k < a->ntensors; k++) TG_TRY(float_only("adamw_multi", a->t[k].g_dt));
    return cpu_submit(s, adamw_multi_run, a, tg_adamw_multi_args_size(a->ntensors));
}

static void adamw_count_run(const void *p)
{
    const struct tg_adamw_count_args *a = p;
    if (*a->step < INT32_MAX) {
        *a->step += 1;
    } else if (a->check) {
        const unsigned long long key = (uint32_t)*a->step;
        if (key < a->check->first[TG_INDEX_STEP]) a->check->first[TG_INDEX_STEP] = key;
    }
}

tg_status cpu_adamw_count(tg_stream *s, const struct tg_adamw_count_args *a)
{
    return cpu_submit(s, adamw_count_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ sum of squares of many tensors */
#define SUMSQ_CHUNK 32768 /* fixed, so the sum's order does not depend on the thread count */

static void sumsq_multi_run(const void *p)
{
    const struct tg_sumsq_multi_args *a = p;
    double total = 0, part[64];
    for (int k = 0; k < a->ntensors; k++) {
        const struct tg_sumsq_multi_tensor *t = &a->t[k];
        const int64_t nch = (t->n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
        for (int64_t c0 = 0; c0 < nch; c0 += 64) { /* partials of up to 64 chunks, then added in order */
            const int nc = nch - c0 < 64 ? (int)(nch - c0) : 64;
#pragma omp parallel for schedule(static) if (nc > 1)
            for (int j = 0; j < nc; j++) {
                const int64_t lo = (c0 + j) * SUMSQ_CHUNK, hi = lo + SUMSQ_CHUNK < t->n ? lo + SUMSQ_CHUNK : t->n;
                double acc = 0;
                for (int64_t i = lo; i < hi; i++) {
                    double x = ld(t->x, t->dt, i);
                    acc += x * x;
                }
                part[j] = acc;
            }
            for (int j = 0; j < nc; j++) total += part[j];
        }
    }
    *a->out = (float)total;
}

tg_status cpu_sumsq_multi(tg_stream *s, const struct tg_sumsq_multi_args *a)
{
    for (int k = 0; k < a->ntensors; k++) TG_TRY(float_only("sumsq_multi", a->t[k].dt));
    return cpu_submit(s, sumsq_multi_run, a, tg_sumsq_multi_args_size(a->ntensors));
}

static void zero_multi_run(const void *p)
{
    const struct tg_zero_multi_args *a = p;
    for (int k = 0; k < a->n; k++) memset(a->t[k].p, 0, (size_t)a->t[k].bytes);
}

tg_status cpu_zero_multi(tg_stream *s, const struct tg_zero_multi_args *a)
{
    return cpu_submit(s, zero_multi_run, a, tg_zero_multi_args_size(a->n));
}

static void copy_multi_run(const void *p)
{
    const struct tg_copy_multi_args *a = p;
    for (int k = 0; k < a->n; k++) {
        const struct tg_copy_multi_pair *c = &a->t[k];
        if (c->dst_dt == c->src_dt) {
            memmove(c->dst, c->src, (size_t)c->n * tg_dtype_size(c->src_dt)); /* the bits, NaN payloads too */
        } else if (c->dst_dt == TG_BF16) {
            for (int64_t i = 0; i < c->n; i++) ((uint16_t *)c->dst)[i] = tg_f32_to_bf16(((const float *)c->src)[i]);
        } else {
            for (int64_t i = 0; i < c->n; i++) ((float *)c->dst)[i] = tg_bf16_to_f32(((const uint16_t *)c->src)[i]);
        }
    }
}

tg_status cpu_copy_multi(tg_stream *s, const struct tg_copy_multi_args *a)
{
    return cpu_submit(s, copy_multi_run, a, tg_copy_multi_args_size(a->n));
}
