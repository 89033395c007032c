/* fp8_gemm.c — benchmark: GPU GEMM TFLOP/s, FP8 (E4M3 x E4M3 -> bf16, tg_fp8_gemm through cuBLASLt) and bf16
 * (tg_gemm), N x N x N (default 8192). Each figure is the median over --iters calls, each between two timing
 * events, after 3 warm-up calls: the timing of examples/bench/peers/fp8_gemm.py (torch._scaled_mm).
 *   examples/bench/fp8_gemm [N [ITERS]] */
#include <tegraph.h>

#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define TRY(call)                                                                                      \
    do {                                                                                               \
        if ((call) != TG_OK) {                                                                         \
            fprintf(stderr, "fp8_gemm: %s: %s\n", #call, tg_last_error());                             \
            return -1;                                                                                 \
        }                                                                                              \
    } while (0)

/* Median ms of one call of the GEMM (fp8 or bf16). */
static double median_ms(int fp8, tg_tensor *d, tg_tensor *a, tg_tensor *b, tg_tensor *sa, tg_tensor *sb, int iters,
                        tg_device dev)
{
    tg_stream *s = tg_stream_current(dev);
    tg_event *e0, *e1;
    TRY(tg_event_new(dev, 1, &e0));
    TRY(tg_event_new(dev, 1, &e1));
    double *ms = calloc((size_t)iters, sizeof *ms);
    for (int i = -3; i < iters; i++) {
        TRY(tg_event_record(e0, s));
        if (fp8) TRY(tg_fp8_gemm(d, a, 0, sa, b, 1, sb, 1.0, 0.0, TG_EPI_NONE, NULL, NULL, NULL, 0));
        else TRY(tg_gemm(d, a, 0, b, 1, 1.0, 0.0));
        TRY(tg_event_record(e1, s));
        TRY(tg_event_sync(e1));
        if (i >= 0) TRY(tg_event_elapsed(e0, e1, &ms[i]));
    }
    qsort(ms, (size_t)iters, sizeof *ms, cmp);
    double m = ms[iters / 2];
    free(ms);
    tg_event_free(e0), tg_event_free(e1);
    return m;
}

int main(int argc, char **argv)
{
    int64_t n = argc > 1 ? atoll(argv[1]) : 8192;
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    if (n < 16 || n % 16 || iters < 1) {
        fprintf(stderr, "usage: fp8_gemm [N (a multiple of 16, default 8192) [ITERS (default 20)]]\n");
        return 2;
    }
    if (tg_device_count(TG_CUDA) == 0) {
        fprintf(stderr, "fp8_gemm: no CUDA device\n");
        return 1;
    }
    tg_device dev = {TG_CUDA, 0};
    int64_t shape[2] = {n, n}, one = 1;
    tg_tensor *x = NULL, *a = NULL, *b = NULL, *d = NULL, *sa = NULL, *sb = NULL, *xa = NULL, *xb = NULL;
    if (tg_tensor_new(TG_F32, 2, shape, dev, &x) || tg_tensor_new(TG_E4M3, 2, shape, dev, &a) ||
        tg_tensor_new(TG_E4M3, 2, shape, dev, &b) || tg_tensor_new(TG_BF16, 2, shape, dev, &d) ||
        tg_tensor_new(TG_F32, 1, &one, dev, &sa) || tg_tensor_new(TG_F32, 1, &one, dev, &sb) ||
        tg_tensor_new(TG_BF16, 2, shape, dev, &xa) || tg_tensor_new(TG_BF16, 2, shape, dev, &xb) || tg_fill(sa, 1) ||
        tg_fill(sb, 1) || tg_randn(x, 0, 1) || tg_fp8_cast(a, x, NULL, NULL, NULL, 0) || tg_randn(x, 0, 1) ||
        tg_fp8_cast(b, x, NULL, NULL, NULL, 0) || tg_randn(xa, 0, 1) || tg_randn(xb, 0, 1)) {
        fprintf(stderr, "fp8_gemm: setup: %s\n", tg_last_error());
        return 1;
    }
    char name[256] = "";
    tg_device_describe(dev, name, sizeof name, NULL);
    double flops = 2.0 * (double)n * (double)n * (double)n;
    printf("tegraph %s, %s\n", tg_version(), name);
    double f8 = median_ms(1, d, a, b, sa, sb, iters, dev);
    if (f8 < 0) return 1;
    printf("fp8 e4m3 gemm %lld^3 (bf16 out): %.3f ms %.0f TFLOP/s\n", (long long)n, f8, flops / f8 / 1e9);
    double b16 = median_ms(0, d, xa, xb, NULL, NULL, iters, dev);
    if (b16 < 0) return 1;
    printf("bf16 gemm %lld^3: %.3f ms %.0f TFLOP/s\n", (long long)n, b16, flops / b16 / 1e9);
    printf("fp8 / bf16: %.2fx\n", b16 / f8);
    tg_tensor *all[] = {x, a, b, d, sa, sb, xa, xb};
    for (int i = 0; i < 8; i++) tg_tensor_free(all[i]);
    return 0;
}
