/* sample.c — picking the next token from a row of logits: greedy, temperature, top-k, top-p, with a seeded
 * generator. */
#include "text/text.h"

#include <math.h>
#include <stdlib.h>

/* splitmix64: the state advances by one constant per draw. */
static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* a ranks before b: larger logit, or the lower id on ties. */
static inline int before(const float *l, int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); }

static void sift_down(const float *l, int32_t *h, int64_t n, int64_t i) /* min-heap by `before` reversed */
{
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && before(l, h[c], h[c + 1])) c++; /* the one ranking later */
        if (!before(l, h[i], h[c])) return;
        int32_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

/* Sorts ids[0..n) by `before` (heap sort: no allocation, deterministic). */
static void sort_ids(const float *l, int32_t *ids, int64_t n)
{
    for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(l, ids, n, i);
    for (int64_t e = n - 1; e > 0; e--) {
        int32_t t = ids[0];
        ids[0] = ids[e];
        ids[e] = t;
        sift_down(l, ids, e, 0);
    }
    /* the heap keeps the latest-ranking id on top, so the array ends sorted first-ranking first */
}

tg_status tg_sample_logits(const float *logits, int64_t n, const tg_sample_opts *o, uint64_t *state, int64_t *token)
{
    TG_NONNULL(token, "token");
    *token = -1;
    TG_NONNULL(logits, "logits");
    TG_NONNULL(o, "the options");
    TG_NONNULL(state, "state");
    if (n < 1) return tg_error(TG_EINVAL, "sample: no logits");
    if (!(o->temperature >= 0 && isfinite(o->temperature)) || !(o->top_p > 0 && o->top_p <= 1) || o->top_k < 0)
        return tg_error(TG_EINVAL, "sample: temperature %g must be finite and >= 0, top_p %g in (0, 1], top_k %lld >= 0",
                        o->temperature, o->top_p, (long long)o->top_k);
    int finite = 0;
    for (int64_t i = 0; i < n; i++) {
        if (logits[i] != logits[i]) return tg_error(TG_EINVAL, "sample: logit %lld is NaN", (long long)i);
        finite |= isfinite(logits[i]);
    }
    /* all infinite: nothing to tell the candidates apart by (softmax of -inf everywhere is 0/0), so any id
     * returned would be made up */
    if (!finite) return tg_error(TG_EINVAL, "sample: no finite logit among the %lld (all infinite)", (long long)n);
    if (o->temperature == 0 || o->top_k == 1) { /* greedy: the first largest */
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (logits[i] > logits[best]) best = i;
        *token = best;
        return TG_OK;
    }
    int64_t k = o->top_k > 0 && o->top_k < n ? o->top_k : n;
    int32_t *ids = malloc((size_t)k * sizeof *ids);
    double *p = malloc((size_t)k * sizeof *p);
    if (!ids || !p) {
        free(ids);
        free(p);
        return tg_error(TG_ENOMEM, "sample: out of host memory");
    }
    int sorted = 0;
    if (k < n) { /* the k first-ranking ids: a heap whose top ranks last */
        for (int64_t i = 0; i < k; i++) ids[i] = (int32_t)i;
        for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(logits, ids, k, i);
        for (int64_t i = k; i < n; i++)
            if (before(logits, (int32_t)i, ids[0])) {
                ids[0] = (int32_t)i;
                sift_down(logits, ids, k, 0);
            }
        sort_ids(logits, ids, k);
        sorted = 1;
    } else {
        for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)i;
    }
    if (o->top_p < 1 && !sorted) {
        sort_ids(logits, ids, k);
        sorted = 1;
    }
    float mx = -INFINITY;
    for (int64_t i = 0; i < k; i++)
        if (logits[ids[i]] > mx) mx = logits[ids[i]];
    /* softmax((l - mx) / T); with +inf logits (inf - inf is NaN) its limit: the +inf ones share all of it */
    double sum = 0;
    for (int64_t i = 0; i < k; i++)
        sum += p[i] = isinf(mx) ? (logits[ids[i]] == mx ? 1.0 : 0.0) : exp((double)(logits[ids[i]] - mx) / o->temperature);
    int64_t keep = k;
    if (o->top_p < 1) { /* the smallest first-ranking set whose probability reaches top_p */
        double c = 0;
        for (int64_t i = 0; i < k; i++) {
            c += p[i];
            if (c >= o->top_p * sum) {
                keep = i + 1;
                break;
            }
        }
        sum = 0;
        for (int64_t i = 0; i < keep; i++) sum += p[i];
    }
    double u = (double)(next_u64(state) >> 11) * (1.0 / 9007199254740992.0) * sum;
    int64_t pick = keep - 1;
    double c = 0;
    for (int64_t i = 0; i < keep; i++) {
        c += p[i];
        if (u < c) {
            pick = i;
            break;
        }
    }
    *token = ids[pick];
    free(ids);
    free(p);
    return TG_OK;
}
