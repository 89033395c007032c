/* cpu_fp8.c — CPU FP8 kernels: casts with amax (and transposed copies), transpose, dequantize, amax, and the
 * FP8 GEMM emulated exactly (codes decoded, products summed in double, scaled once, rounded once). */
#include "backend/cpu_impl.h"

#include <math.h>
#include <string.h>

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

static inline float ld_hp(const void *p, tg_dtype dt, int64_t i)
{
    return dt == TG_BF16 ? tg_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void st_hp(void *p, tg_dtype dt, int64_t i, float v)
{
    if (dt == TG_BF16) ((uint16_t *)p)[i] = tg_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* |v| as the bits amaxes compare (backend.h). */
static inline uint32_t abs_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x7fffffffu;
}

static void amax_store(float *amax, uint32_t m, int accumulate)
{
    if (accumulate) {
        uint32_t old;
        memcpy(&old, amax, sizeof old);
        if (old > m) m = old;
    }
    memcpy(amax, &m, sizeof m);
}

/* The 256 values of an FP8 format's codes. */
static void fp8_table(tg_dtype dt, float lut[256])
{
    for (int c = 0; c < 256; c++) lut[c] = tg_fp8_to_f32(dt, (uint8_t)c);
}

/* ------------------------------------------------------------------ cast (and transpose) */
static void cast_run(const void *p)
{
    const struct tg_fp8_cast_args *a = p;
    float scale = a->scale ? *a->scale : 1.0f;
    int64_t rows = a->rows, cols = a->cols, n = rows * cols;
    uint8_t *y = a->y, *yt = a->yt;
    uint32_t m = 0;
    if (!yt) { /* elementwise: parallel over all elements (a 1-D x is one row) */
#pragma omp parallel for reduction(max : m) if (n > CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float v = ld_hp(a->x, a->x_dt, i);
            uint32_t b = abs_bits(v);
            if (b > m) m = b;
            y[i] = tg_fp8_from_f32(a->y_dt, v * scale);
        }
    } else {
#pragma omp parallel for reduction(max : m) if (n > CPU_PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t c = 0; c < cols; c++) {
                float v = ld_hp(a->x, a->x_dt, r * cols + c);
                uint32_t b = abs_bits(v);
                if (b > m) m = b;
                uint8_t q = tg_fp8_from_f32(a->y_dt, v * scale);
                if (y) y[r * cols + c] = q;
                yt[c * rows + r] = q;
            }
        }
    }
    if (a->amax) amax_store(a->amax, m, a->accumulate);
    if (a->scale_inv) *a->scale_inv = 1.0f / scale;
}

/* gelu'(h) * dy rounded to dt: cpu_nn.c's gelu_backward, the same float formula. */
static inline float dgelu(float h, float dy, tg_dtype dt)
{
    float th = tanhf(GELU_K * (h + GELU_A * h * h * h));
    float d = 0.5f * (1.0f + th) + 0.5f * h * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * h * h);
    float g = dy * d;
    return dt == TG_BF16 ? tg_bf16_to_f32(tg_f32_to_bf16(g)) : g;
}

#define CT_TILE 64   /* the rows of a tile of tg_fp8_dbias_chunks */
#define COL_BLOCK 32 /* columns summed together, in double */

/* The gradient forms (gelu_x and/or dbias_part): parallel over the chunks (the 64-row tiles t with t % chunks
 * == p), each chunk's columns in blocks of COL_BLOCK summed in double in row order, rounded once. */
static void cast_grad_run(const void *p)
{
    const struct tg_fp8_cast_args *a = p;
    const float scale = a->scale ? *a->scale : 1.0f;
    const int64_t rows = a->rows, cols = a->cols, tiles = (rows + CT_TILE - 1) / CT_TILE;
    const int64_t chunks = a->dbias_part ? a->dbias_chunks : tiles;
    uint8_t *y = a->y, *yt = a->yt;
    uint32_t m = 0;
#pragma omp parallel for reduction(max : m) schedule(static) if (rows * cols > CPU_PAR_MIN)
    for (int64_t ch = 0; ch < chunks; ch++) {
        for (int64_t c0 = 0; c0 < cols; c0 += COL_BLOCK) {
            const int64_t w = cols - c0 < COL_BLOCK ? cols - c0 : COL_BLOCK;
            double db[COL_BLOCK] = {0};
            for (int64_t t = ch; t < tiles; t += chunks)
                for (int64_t r = t * CT_TILE; r < rows && r < (t + 1) * CT_TILE; r++)
                    for (int64_t j = 0; j < w; j++) {
                        const int64_t i = r * cols + c0 + j;
                        float v = ld_hp(a->x, a->x_dt, i);
                        if (a->gelu_x) v = dgelu(ld_hp(a->gelu_x, a->x_dt, i), v, a->x_dt);
                        const uint32_t b = abs_bits(v);
                        if (b > m) m = b;
                        const uint8_t q = tg_fp8_from_f32(a->y_dt, v * scale);
                        if (y) y[i] = q;
                        if (yt) yt[(c0 + j) * rows + r] = q;
                        db[j] += v;
                    }
            if (a->dbias_part)
                for (int64_t j = 0; j < w; j++) a->dbias_part[ch * cols + c0 + j] = (float)db[j];
        }
    }
    if (a->amax) amax_store(a->amax, m, a->accumulate);
    if (a->scale_inv) *a->scale_inv = 1.0f / scale;
}

tg_status cpu_fp8_cast(tg_stream *s, const struct tg_fp8_cast_args *a)
{
    return cpu_submit(s, a->gelu_x || a->dbias_part ? cast_grad_run : cast_run, a, sizeof *a);
}

/* g = x_dt(gelu(h)): cpu_nn.c's gelu_forward, the same float formula and rounding. */
static inline float gelu_fwd(float h, tg_dtype dt)
{
    float g = 0.5f * h * (1.0f + tanhf(GELU_K * (h + GELU_A * h * h * h)));
    return dt == TG_BF16 ? tg_bf16_to_f32(tg_f32_to_bf16(g)) : g;
}

/* tg_fp8_cast_transpose_gelu: cast_run's transposed form on g = gelu(x). */
static void cast_gelu_run(const void *p)
{
    const struct tg_fp8_cast_args *a = p;
    const float scale = a->scale ? *a->scale : 1.0f;
    const int64_t rows = a->rows, cols = a->cols;
    uint8_t *y = a->y, *yt = a->yt;
    uint32_t m = 0;
#pragma omp parallel for reduction(max : m) if (rows * cols > CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            const float v = gelu_fwd(ld_hp(a->x, a->x_dt, r * cols + c), a->x_dt);
            const uint32_t b = abs_bits(v);
            if (b > m) m = b;
            const uint8_t q = tg_fp8_from_f32(a->y_dt, v * scale);
            if (y) y[r * cols + c] = q;
            if (yt) yt[c * rows + r] = q;
        }
    }
    if (a->amax) amax_store(a->amax, m, a->accumulate);
    if (a->scale_inv) *a->scale_inv = 1.0f / scale;
}

tg_status cpu_fp8_cast_gelu(tg_stream *s, const struct tg_fp8_cast_args *a)
{
    return cpu_submit(s, cast_gelu_run, a, sizeof *a);
}

/* dbias = acc * dbias + the chunks' partials summed in chunk order, in double (cpu_nn.c's st_wgrad rounding). */
static void dbias_run(const void *p)
{
    const struct tg_fp8_dbias_args *a = p;
#pragma omp parallel for schedule(static) if (a->chunks * a->c > CPU_PAR_MIN)
    for (int64_t c = 0; c < a->c; c++) {
        double g = 0.0;
        for (int64_t ch = 0; ch < a->chunks; ch++) g += a->part[ch * a->c + c];
        double v = a->accumulate == 0 ? g : (double)a->accumulate * ld_hp(a->dbias, a->dw_dt, c) + g;
        st_hp(a->dbias, a->dw_dt, c, (float)v);
    }
}

tg_status cpu_fp8_dbias(tg_stream *s, const struct tg_fp8_dbias_args *a)
{
    return cpu_submit(s, dbias_run, a, sizeof *a);
}

static void transpose_run(const void *p)
{
    const struct tg_fp8_transpose_args *a = p;
    int64_t rows = a->rows, cols = a->cols;
#pragma omp parallel for if (rows * cols > CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) a->yt[c * rows + r] = a->x[r * cols + c];
}

tg_status cpu_fp8_transpose(tg_stream *s, const struct tg_fp8_transpose_args *a)
{
    return cpu_submit(s, transpose_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ dequantize, amax */
static void dequantize_run(const void *p)
{
    const struct tg_fp8_dequantize_args *a = p;
    float lut[256], si = a->scale_inv ? *a->scale_inv : 1.0f;
    fp8_table(a->x_dt, lut);
    int64_t n = a->n;
#pragma omp parallel for if (n > CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) st_hp(a->y, a->y_dt, i, lut[a->x[i]] * si);
}

tg_status cpu_fp8_dequantize(tg_stream *s, const struct tg_fp8_dequantize_args *a)
{
    return cpu_submit(s, dequantize_run, a, sizeof *a);
}

static void amax_run(const void *p)
{
    const struct tg_fp8_amax_args *a = p;
    int64_t n = a->n;
    uint32_t m = 0;
#pragma omp parallel for reduction(max : m) if (n > CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = abs_bits(ld_hp(a->x, a->dt, i));
        if (b > m) m = b;
    }
    amax_store(a->amax, m, a->accumulate);
}

tg_status cpu_fp8_amax(tg_stream *s, const struct tg_fp8_amax_args *a)
{
    return cpu_submit(s, amax_run, a, sizeof *a);
}

/* ------------------------------------------------------------------ GEMM */
static void gemm_run(const void *p)
{
    const struct tg_fp8_gemm_args *g = p;
    int64_t m = g->m, n = g->n, k = g->k;
    float la[256], lb[256];
    fp8_table(g->a_dt, la);
    fp8_table(g->b_dt, lb);
    /* the scales as cuBLASLt applies them: alpha * sa * sb on the f32 accumulator, here on the exact sum */
    double scale = (double)g->alpha * (g->a_scale_inv ? *g->a_scale_inv : 1.0f) * (g->b_scale_inv ? *g->b_scale_inv : 1.0f);
    uint32_t mx = 0;
#pragma omp parallel for reduction(max : mx) if (m * n * k > CPU_PAR_MIN)
    for (int64_t i = 0; i < m; i++) {
        const uint8_t *ar = g->a + i * k;
        for (int64_t j = 0; j < n; j++) {
            const uint8_t *br = g->b + j * k;
            double dot = 0.0; /* each product of two FP8 values is exact in double */
            for (int64_t q = 0; q < k; q++) dot += (double)la[ar[q]] * (double)lb[br[q]];
            double v = scale * dot;
            if (g->beta != 0.0f) v += (double)g->beta * ld_hp(g->c ? g->c : g->d, g->d_dt, i * n + j);
            float u;
            if (g->epi == TG_EPI_NONE) {
                u = (float)v;
            } else {
                float pre = (float)(v + (double)tg_bf16_to_f32(g->bias[j]));
                if (g->epi == TG_EPI_BIAS) {
                    u = pre;
                } else {
                    if (g->aux) st_hp(g->aux, g->d_dt, i * n + j, pre);
                    u = 0.5f * pre * (1.0f + tanhf(GELU_K * (pre + GELU_A * pre * pre * pre)));
                }
            }
            st_hp(g->d, g->d_dt, i * n + j, u);
            uint32_t b = abs_bits(ld_hp(g->d, g->d_dt, i * n + j));
            if (b > mx) mx = b;
        }
    }
    if (g->amax_d) amax_store(g->amax_d, mx, g->accumulate);
}

tg_status cpu_fp8_gemm(tg_stream *s, const struct tg_fp8_gemm_args *a)
{
    return cpu_submit(s, gemm_run, a, sizeof *a);
}
