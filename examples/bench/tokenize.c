/* tokenize.c — tokenizer throughput on one core: encode (and decode) MB/s.
 *
 *   examples/bench/tokenize [--tokenizer DIR] [--bytes] [FILE]
 *
 * DIR holds GPT-2's vocab.json + merges.txt (or encoder.json + vocab.bpe). Without it the benchmark writes a
 * synthetic byte-level BPE vocabulary (about 40,000 merges building the corpus's frequent words, GPT-2's file
 * format) to a temporary directory and loads that. Without FILE it generates 32 MB of text (Zipf-distributed words,
 * numbers, punctuation, newlines). Prints MB/s of encode and decode and checks decode(encode(text)) == text. */
#include <tegraph.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

#define NWORDS 20000
static char words[NWORDS][16];

static void make_words(void)
{
    static const char *cons = "bcdfghklmnprstvwz", *vow = "aeiouy";
    for (int w = 0; w < NWORDS; w++) {
        int syl = 1 + (int)(next() % 3), n = 0;
        for (int s = 0; s < syl; s++) {
            words[w][n++] = cons[next() % strlen(cons)];
            words[w][n++] = vow[next() % strlen(vow)];
            if (next() % 3 == 0) words[w][n++] = cons[next() % strlen(cons)];
        }
        if (next() % 8 == 0) words[w][0] = (char)(words[w][0] - 32);
        words[w][n] = 0;
    }
}

/* Zipf-ish word index: rank ~ exp(uniform * log(N)). */
static int zipf(void) { return (int)(exp((double)(next() % 1000000) / 1e6 * log((double)NWORDS))) - 1; }

static char *make_text(size_t n)
{
    char *t = malloc(n + 64);
    size_t w = 0;
    while (w < n) {
        uint64_t r = next() % 100;
        if (r < 80) w += (size_t)sprintf(t + w, " %s", words[zipf()]);
        else if (r < 85) w += (size_t)sprintf(t + w, " %d", (int)(next() % 10000));
        else if (r < 92) t[w++] = ",.;:!?"[next() % 6];
        else if (r < 95) t[w++] = '\n';
        else if (r < 97) w += (size_t)sprintf(t + w, "'s");
        else w += (size_t)sprintf(t + w, " \xc3\xa9t\xc3\xa9");
    }
    t[n] = 0;
    return t;
}

static const char *mapped(unsigned char b, char *o)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    unsigned cp = b;
    if (!printable) {
        int n = 0;
        for (int k = 0; k < b; k++) {
            int p = (k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE);
            n += !p;
        }
        cp = 256 + (unsigned)n;
    }
    if (cp < 0x80) o[0] = (char)cp, o[1] = 0;
    else o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), o[2] = 0;
    return o;
}

static void put_mapped(FILE *f, const char *s, size_t n, int json)
{
    char b[4];
    for (size_t i = 0; i < n; i++) {
        mapped((unsigned char)s[i], b);
        if (json && (b[0] == '"' || b[0] == '\\')) fputc('\\', f);
        fputs(b, f);
    }
}

/* Merges that build " word" and "word" for the most frequent words, prefix by prefix. */
static void write_synthetic(const char *dir)
{
    char path[4200];
    int nmerge = 0, ntok = 256;
    size_t cap = 1 << 16, nt = 0;
    char (*toks)[20] = malloc(cap * sizeof *toks);
    enum { SEEN = 1 << 18 };
    uint32_t *seen = calloc(SEEN, sizeof *seen);
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    FILE *m = fopen(path, "w");
    fprintf(m, "#version: 0.2\n");
    for (int w = 0; w < NWORDS && nmerge < 40000; w++)
        for (int sp = 0; sp < 2; sp++) {
            char full[20];
            snprintf(full, sizeof full, "%s%.15s", sp ? " " : "", words[w]);
            size_t n = strlen(full);
            for (size_t k = 2; k <= n; k++) {
                uint64_t h = 1469598103934665603ull;
                for (size_t q = 0; q < k; q++) h = (h ^ (unsigned char)full[q]) * 1099511628211ull;
                size_t slot = h & (SEEN - 1);
                int dup = 0;
                while (seen[slot] && !dup) {
                    dup = strlen(toks[seen[slot] - 1]) == k && !memcmp(toks[seen[slot] - 1], full, k);
                    slot = (slot + 1) & (SEEN - 1);
                }
                if (dup) continue;
                seen[slot] = (uint32_t)nt + 1;
                put_mapped(m, full, k - 1, 0);
                fputc(' ', m);
                put_mapped(m, full + k - 1, 1, 0);
                fputc('\n', m);
                memcpy(toks[nt], full, k), toks[nt][k] = 0;
                nt++, nmerge++;
                if (nt == cap) break;
            }
        }
    fclose(m);
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    FILE *v = fopen(path, "w");
    fputc('{', v);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        fprintf(v, "%s\"", b ? ", " : "");
        put_mapped(v, &c, 1, 1);
        fprintf(v, "\": %d", b);
    }
    for (size_t q = 0; q < nt; q++) {
        fprintf(v, ", \"");
        put_mapped(v, toks[q], strlen(toks[q]), 1);
        fprintf(v, "\": %d", ntok++);
    }
    fprintf(v, ", \"<|endoftext|>\": %d}\n", ntok);
    fclose(v);
    free(toks);
    free(seen);
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *file = NULL;
    int bytes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--bytes")) bytes = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: tokenize [--tokenizer DIR] [--bytes] [FILE]\n");
            return 2;
        } else file = argv[i];
    }
    make_words();
    char *text;
    size_t n;
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            perror(file);
            return 1;
        }
        fseek(f, 0, SEEK_END);
        n = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        text = malloc(n + 1);
        if (fread(text, 1, n, f) != n) {
            perror(file);
            return 1;
        }
        fclose(f);
    } else {
        n = (size_t)32 << 20;
        text = make_text(n);
    }
    char tmp[64] = "";
    tg_tokenizer *t;
    tg_status st;
    double t0 = now();
    if (bytes) st = tg_tokenizer_bytes(&t);
    else if (dir) st = tg_tokenizer_gpt2(dir, &t);
    else {
        strcpy(tmp, "/tmp/tg-bench-bpe-XXXXXX");
        if (!mkdtemp(tmp)) {
            perror("mkdtemp");
            return 1;
        }
        write_synthetic(tmp);
        t0 = now();
        st = tg_tokenizer_gpt2(tmp, &t);
    }
    if (st != TG_OK) {
        fprintf(stderr, "tokenize: %s\n", tg_last_error());
        return 1;
    }
    double load = now() - t0;
    int32_t *ids;
    size_t nids;
    t0 = now();
    if (tg_tokenizer_encode(t, text, n, &ids, &nids, NULL, NULL) != TG_OK) {
        fprintf(stderr, "tokenize: %s\n", tg_last_error());
        return 1;
    }
    double enc = now() - t0;
    char *back;
    size_t blen;
    t0 = now();
    if (tg_tokenizer_decode(t, ids, nids, &back, &blen) != TG_OK) {
        fprintf(stderr, "tokenize: %s\n", tg_last_error());
        return 1;
    }
    double dec = now() - t0;
    int same = blen == n && memcmp(back, text, n) == 0;
    printf("tokenizer %s (%s, vocab %lld, %lld merges, loaded in %.2fs)\n", tg_tokenizer_kind(t),
           bytes ? "built in" : dir ? dir : "synthetic vocabulary", (long long)tg_tokenizer_vocab_size(t),
           (long long)tg_tokenizer_num_merges(t), load);
    printf("text %s: %.1f MB, %zu tokens (%.2f bytes/token)\n", file ? file : "generated", n / 1e6, nids,
           (double)n / (double)(nids ? nids : 1));
    printf("encode: %.1f MB/s (one core)\ndecode: %.1f MB/s\nround trip: %s\n", n / 1e6 / enc, n / 1e6 / dec,
           same ? "ok" : "MISMATCH");
    if (tmp[0]) {
        char p[128];
        snprintf(p, sizeof p, "%s/vocab.json", tmp), unlink(p);
        snprintf(p, sizeof p, "%s/merges.txt", tmp), unlink(p);
        rmdir(tmp);
    }
    free(ids), free(back), free(text);
    tg_tokenizer_free(t);
    return same ? 0 : 1;
}
