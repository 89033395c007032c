/* tokenizer.c — byte-level and GPT-2 byte-level BPE tokenizers: vocabulary and merge files, pre-tokenization,
 * merges by rank, a piece cache, decoding. */
#include "io/file.h"
#include "text/text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE_BYTES ((size_t)256 << 20) /* vocabulary and merge files larger than this are refused */
#define MAX_TOKEN_BYTES 1024               /* one vocabulary entry, as bytes */
#define MAX_VOCAB ((int64_t)1 << 24)
#define CACHE_SLOTS 65536                  /* piece cache: power of two */
#define CACHE_MAX_PIECE 48                 /* longer pieces are merged every time */

struct pair_slot { /* merges: (a, b) -> rank, merged token */
    uint64_t key;  /* (a << 32 | b) + 1; 0: empty */
    int32_t rank, merged;
};

struct cache_slot {
    uint64_t hash;    /* 0: empty */
    uint32_t off, n;  /* the piece's bytes in cache_bytes */
    uint32_t ioff, ni; /* its ids in cache_ids */
};

struct tg_tokenizer {
    int kind;                  /* 0 bytes, 1 bpe */
    int64_t vocab_size;
    int64_t eot;               /* id of <|endoftext|>, or -1 */
    unsigned char **tok;       /* (vocab) each token's bytes */
    uint32_t *tok_len;
    int32_t byte_id[256];      /* the token of each single byte */
    struct pair_slot *pairs;
    size_t pair_mask;
    int64_t nmerges;
    /* piece cache (BPE) */
    struct cache_slot *cache;
    unsigned char *cache_bytes;
    int32_t *cache_ids;
    size_t cache_nbytes, cache_nids, cache_cap_bytes, cache_cap_ids, cache_used;
    /* work buffers */
    int32_t *work;
    size_t work_cap;
};

/* ------------------------------------------------------------------ GPT-2's byte-to-unicode map
 * Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to themselves; the
 * other 68 bytes map to code points 256, 257, ... in byte order. */
static void byte_to_unicode(uint32_t cp[256])
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* One UTF-8 code point at s[i..n): its value (or -1 when the bytes are not valid UTF-8) and its length (1 for an
 * invalid byte). Overlong forms, surrogates and values past U+10FFFF are invalid. */
static inline int32_t utf8_next(const unsigned char *s, size_t i, size_t n, int *len)
{
    unsigned c = s[i];
    *len = 1;
    if (c < 0x80) return (int32_t)c;
    int need;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) need = 1, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, v = c & 0x07, min = 0x10000;
    else return -1;
    if (i + (size_t)need >= n) return -1;
    for (int k = 1; k <= need; k++) {
        unsigned d = s[i + (size_t)k];
        if ((d & 0xC0) != 0x80) return -1;
        v = (v << 6) | (d & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return -1;
    *len = need + 1;
    return (int32_t)v;
}

/* ------------------------------------------------------------------ character classes of the pre-tokenizer */
enum { CL_OTHER = 0, CL_LETTER = 1, CL_NUMBER = 2, CL_SPACE = 3 };

static unsigned char ascii_class[128];

static void init_ascii_class(void)
{
    for (int c = 0; c < 128; c++) {
        int cl = CL_OTHER;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cl = CL_LETTER;
        else if (c >= '0' && c <= '9') cl = CL_NUMBER;
        else if (c == ' ' || (c >= '\t' && c <= '\r')) cl = CL_SPACE;
        ascii_class[c] = (unsigned char)cl;
    }
}

/* The class of a non-ASCII code point (cp >= 0x80; -1: an invalid byte, "other"). Unicode White_Space exactly;
 * decimal digits of the common scripts and the Latin-1 / number-form / circled numbers; punctuation and symbol
 * blocks (Latin-1 punctuation, general punctuation to miscellaneous symbols, CJK punctuation, full-width
 * punctuation, emoji and pictographs) as other; every remaining code point as a letter (this also counts
 * combining marks, which \p{L} does not). */
static int unicode_class(int32_t cp)
{
    if (cp < 0) return CL_OTHER;
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
        cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return CL_SPACE;
    if (cp < 0xC0) {
        if (cp == 0xB2 || cp == 0xB3 || cp == 0xB9 || (cp >= 0xBC && cp <= 0xBE)) return CL_NUMBER;
        if (cp == 0xAA || cp == 0xB5 || cp == 0xBA) return CL_LETTER;
        return CL_OTHER;
    }
    if (cp == 0xD7 || cp == 0xF7) return CL_OTHER;
    static const int32_t digits[] = {0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6,
                                     0xD66, 0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0xFF10};
    for (size_t k = 0; k < sizeof digits / sizeof *digits; k++)
        if (cp >= digits[k] && cp <= digits[k] + 9) return CL_NUMBER;
    if ((cp >= 0x2070 && cp <= 0x2079) || (cp >= 0x2080 && cp <= 0x2089) || (cp >= 0x2150 && cp <= 0x2189) ||
        (cp >= 0x2460 && cp <= 0x249B) || (cp >= 0x24EA && cp <= 0x24FF) || (cp >= 0x2776 && cp <= 0x2793))
        return CL_NUMBER;
    if ((cp >= 0x2010 && cp <= 0x2027) || (cp >= 0x2030 && cp <= 0x205E) || (cp >= 0x20A0 && cp <= 0x20CF) ||
        (cp >= 0x2190 && cp <= 0x245F) || (cp >= 0x2500 && cp <= 0x2775) || (cp >= 0x2794 && cp <= 0x2BFF) ||
        (cp >= 0x2E00 && cp <= 0x2E7F) || (cp >= 0x3001 && cp <= 0x3004) || (cp >= 0x3008 && cp <= 0x3020) ||
        (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF01 && cp <= 0xFF0F) || (cp >= 0xFF1A && cp <= 0xFF20) ||
        (cp >= 0xFF3B && cp <= 0xFF40) || (cp >= 0xFF5B && cp <= 0xFF65) || (cp >= 0x1F000 && cp <= 0x1FAFF) ||
        cp == 0xFFFD)
        return CL_OTHER;
    if (cp >= 0xE000 && cp <= 0xF8FF) return CL_OTHER; /* private use */
    return CL_LETTER;
}

/* The class and byte length of the character at s[i]. */
static inline int char_class(const unsigned char *s, size_t i, size_t n, int *len)
{
    if (s[i] < 0x80) {
        *len = 1;
        return ascii_class[s[i]];
    }
    return unicode_class(utf8_next(s, i, n, len));
}

/* The end of the piece starting at i (GPT-2's rule, the regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * tried in that order at i). */
static size_t piece_end(const unsigned char *s, size_t i, size_t n)
{
    if (s[i] == '\'' && i + 1 < n) {
        unsigned c1 = s[i + 1], c2 = i + 2 < n ? s[i + 2] : 0;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return i + 3;
    }
    size_t j = i;
    if (s[j] == ' ' && j + 1 < n) j++;
    int len, cl = char_class(s, j, n, &len);
    if (j == i + 1 && cl == CL_SPACE) { /* "  ": not an optional-space prefix; a whitespace run */
        j = i;
        cl = CL_SPACE;
        len = 1;
    }
    if (cl != CL_SPACE) {
        size_t k = j + (size_t)len;
        while (k < n) {
            int l2, c2 = char_class(s, k, n, &l2);
            if (c2 != cl) break;
            k += (size_t)l2;
        }
        return k;
    }
    /* whitespace run at i: to its end when the text ends there; else all but its last character (which goes with
     * the next piece), or the single character when the run has one */
    size_t k = i, last = i;
    while (k < n) {
        int l2, c2 = char_class(s, k, n, &l2);
        if (c2 != CL_SPACE) break;
        last = k;
        k += (size_t)l2;
    }
    if (k == n || last == i) return k;
    return last;
}

/* ------------------------------------------------------------------ hashing */
static inline uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull ^ (n * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    h ^= h >> 29;
    return h ? h : 1;
}

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static inline const struct pair_slot *pair_find(const tg_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    for (size_t i = mix64(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        const struct pair_slot *p = &t->pairs[i];
        if (p->key == key) return p;
        if (p->key == 0) return NULL;
    }
}

/* ------------------------------------------------------------------ construction */
static tg_tokenizer *tok_alloc(int kind, int64_t vocab)
{
    tg_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->vocab_size = vocab;
    t->eot = -1;
    t->tok = calloc((size_t)vocab, sizeof *t->tok);
    t->tok_len = calloc((size_t)vocab, sizeof *t->tok_len);
    if (!t->tok || !t->tok_len) {
        tg_tokenizer_free(t);
        return NULL;
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    return t;
}

void tg_tokenizer_free(tg_tokenizer *t)
{
    if (!t) return;
    if (t->tok)
        for (int64_t i = 0; i < t->vocab_size; i++) free(t->tok[i]);
    free(t->tok);
    free(t->tok_len);
    free(t->pairs);
    free(t->cache);
    free(t->cache_bytes);
    free(t->cache_ids);
    free(t->work);
    free(t);
}

tg_status tg_tokenizer_bytes(tg_tokenizer **out)
{
    TG_NONNULL(out, "out");
    *out = NULL;
    init_ascii_class();
    tg_tokenizer *t = tok_alloc(0, 256);
    if (!t) return tg_error(TG_ENOMEM, "tokenizer: out of host memory");
    for (int b = 0; b < 256; b++) {
        t->tok[b] = malloc(1);
        if (!t->tok[b]) {
            tg_tokenizer_free(t);
            return tg_error(TG_ENOMEM, "tokenizer: out of host memory");
        }
        t->tok[b][0] = (unsigned char)b;
        t->tok_len[b] = 1;
        t->byte_id[b] = b;
    }
    *out = t;
    return TG_OK;
}

/* The whole file, NUL-terminated. */
static tg_status read_file(const char *path, char **buf, size_t *len)
{
    *buf = NULL;
    int fd;
    size_t size;
    TG_TRY(tg_file_open_read(path, 0, &fd, &size, NULL)); /* a FIFO or a device is refused, not waited on */
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int err = errno;
        close(fd);
        return tg_error(TG_EIO, "%s: cannot open: %s", path, strerror(err));
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    if (!b) {
        fclose(f);
        return tg_error(TG_ENOMEM, "%s: out of host memory", path);
    }
    for (;;) {
        if (n == cap) {
            if (cap >= MAX_FILE_BYTES) {
                free(b);
                fclose(f);
                return tg_error(TG_EINVAL, "%s: larger than %zu MiB, not a tokenizer file", path, MAX_FILE_BYTES >> 20);
            }
            cap *= 2;
            char *nb = realloc(b, cap + 1);
            if (!nb) {
                free(b);
                fclose(f);
                return tg_error(TG_ENOMEM, "%s: out of host memory", path);
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(b);
        return tg_error(TG_EIO, "%s: read error", path);
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return TG_OK;
}

/* Line number of byte offset off in buf. */
static int line_of(const char *buf, size_t off)
{
    int line = 1;
    for (size_t i = 0; i < off; i++) line += buf[i] == '\n';
    return line;
}

/* Appends code point cp as UTF-8. */
static size_t put_utf8(unsigned char *o, uint32_t cp)
{
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) return o[0] = (unsigned char)(0xC0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (unsigned char)(0xE0 | cp >> 12), o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
               o[2] = (unsigned char)(0x80 | (cp & 0x3F)), 3;
    return o[0] = (unsigned char)(0xF0 | cp >> 18), o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)),
           o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (unsigned char)(0x80 | (cp & 0x3F)), 4;
}

/* A JSON string at buf[*i] (at the opening quote), UTF-8 out into o (cap bytes); moves *i past the closing
 * quote. Strict: control characters, bad escapes, lone surrogates and invalid UTF-8 are refused. */
static tg_status json_string(const char *path, const char *buf, size_t n, size_t *i, unsigned char *o, size_t cap,
                             size_t *olen)
{
    size_t k = *i + 1, w = 0;
    for (;;) {
        if (k >= n) return tg_error(TG_EINVAL, "%s:%d: unterminated string", path, line_of(buf, *i));
        unsigned char c = (unsigned char)buf[k];
        if (w + 4 > cap) return tg_error(TG_EINVAL, "%s:%d: string longer than %zu bytes", path, line_of(buf, *i), cap - 4);
        if (c == '"') break;
        if (c < 0x20) return tg_error(TG_EINVAL, "%s:%d: control character 0x%02x in a string", path, line_of(buf, k), c);
        if (c == '\\') {
            if (k + 1 >= n) return tg_error(TG_EINVAL, "%s:%d: unterminated escape", path, line_of(buf, k));
            char e = buf[k + 1];
            const char *map = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e);
            if (e != 'u') {
                if (!map || ((map - "\"\"\\\\//b\bf\fn\nr\rt\t") & 1))
                    return tg_error(TG_EINVAL, "%s:%d: bad escape \\%c", path, line_of(buf, k), e);
                o[w++] = (unsigned char)map[1];
                k += 2;
                continue;
            }
            uint32_t cp = 0;
            for (int pass = 0; pass < 2; pass++) {
                uint32_t v = 0;
                if (k + 6 > n || buf[k] != '\\' || buf[k + 1] != 'u')
                    return tg_error(TG_EINVAL, "%s:%d: lone surrogate in \\u escape", path, line_of(buf, k));
                for (int d = 0; d < 4; d++) {
                    char h = buf[k + 2 + (size_t)d];
                    int x = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (x < 0) return tg_error(TG_EINVAL, "%s:%d: bad \\u escape", path, line_of(buf, k));
                    v = v << 4 | (uint32_t)x;
                }
                k += 6;
                if (pass == 0) {
                    if (v >= 0xDC00 && v <= 0xDFFF)
                        return tg_error(TG_EINVAL, "%s:%d: lone low surrogate in \\u escape", path, line_of(buf, k));
                    if (v < 0xD800 || v > 0xDBFF) {
                        cp = v;
                        break;
                    }
                    cp = v;
                } else {
                    if (v < 0xDC00 || v > 0xDFFF)
                        return tg_error(TG_EINVAL, "%s:%d: lone high surrogate in \\u escape", path, line_of(buf, k));
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (v - 0xDC00);
                }
            }
            w += put_utf8(o + w, cp);
            continue;
        }
        int len;
        if (utf8_next((const unsigned char *)buf, k, n, &len) < 0)
            return tg_error(TG_EINVAL, "%s:%d: invalid UTF-8 in a string", path, line_of(buf, k));
        memcpy(o + w, buf + k, (size_t)len);
        w += (size_t)len;
        k += (size_t)len;
    }
    *i = k + 1;
    *olen = w;
    return TG_OK;
}

static size_t skip_ws(const char *buf, size_t n, size_t i)
{
    while (i < n && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r')) i++;
    return i;
}

/* Maps a token's text (GPT-2's byte-to-unicode form, UTF-8) back to bytes into o (room for cap); -1 when a
 * character is not in the map, cap + 1 when the bytes do not fit. */
static long unmap_token(const int32_t *unmap, const unsigned char *s, size_t n, unsigned char *o, size_t cap)
{
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        int len;
        int32_t cp = utf8_next(s, i, n, &len);
        if (cp < 0 || cp >= 512 || unmap[cp] < 0) return -1;
        if (w == cap) return (long)cap + 1;
        o[w++] = (unsigned char)unmap[cp];
        i += (size_t)len;
    }
    return (long)w;
}

struct vocab_entry {
    unsigned char *bytes;
    uint32_t len;
    int32_t id;
};

/* Token lookup by bytes while loading (open addressing over the vocabulary). */
struct tok_index {
    int32_t *slot; /* id + 1; 0 empty */
    size_t mask;
};

static int32_t index_find(const tg_tokenizer *t, const struct tok_index *x, const unsigned char *p, size_t n)
{
    for (size_t i = hash_bytes(p, n) & x->mask;; i = (i + 1) & x->mask) {
        int32_t s = x->slot[i];
        if (s == 0) return -1;
        if (t->tok_len[s - 1] == n && memcmp(t->tok[s - 1], p, n) == 0) return s - 1;
    }
}

/* Parses the vocabulary, the n bytes at buf of the file path: one JSON object of token text -> id, ids 0..V-1
 * each once. */
static tg_status load_vocab(const char *path, const char *buf, size_t n, tg_tokenizer **out)
{
    *out = NULL;
    int32_t unmap[512];
    uint32_t cp[256];
    byte_to_unicode(cp);
    for (int k = 0; k < 512; k++) unmap[k] = -1;
    for (int b = 0; b < 256; b++) unmap[cp[b]] = b;
    struct vocab_entry *ent = NULL;
    size_t nent = 0, cap = 0;
    unsigned char text[MAX_TOKEN_BYTES * 4 + 8], bytes[MAX_TOKEN_BYTES * 4 + 8];
    tg_status st = TG_OK;
    tg_tokenizer *t = NULL;
    int64_t max_id = -1;
    size_t i = skip_ws(buf, n, 0);
    if (i >= n || buf[i] != '{') {
        st = tg_error(TG_EINVAL, "%s: not a vocabulary: expected a JSON object of token -> id", path);
        goto done;
    }
    i = skip_ws(buf, n, i + 1);
    if (i < n && buf[i] == '}') {
        st = tg_error(TG_EINVAL, "%s: the vocabulary is empty", path);
        goto done;
    }
    for (;;) {
        if (i >= n || buf[i] != '"') {
            st = tg_error(TG_EINVAL, "%s:%d: expected a token string", path, line_of(buf, i < n ? i : n));
            goto done;
        }
        size_t at = i, tlen = 0;
        if ((st = json_string(path, buf, n, &i, text, sizeof text, &tlen)) != TG_OK) goto done;
        long blen = unmap_token(unmap, text, tlen, bytes, MAX_TOKEN_BYTES);
        if (blen < 0 || blen > MAX_TOKEN_BYTES) {
            st = tg_error(TG_EINVAL, "%s:%d: token \"%.*s\" is not in GPT-2's byte-to-unicode form%s", path,
                          line_of(buf, at), (int)(tlen > 60 ? 60 : tlen), (const char *)text,
                          blen > MAX_TOKEN_BYTES ? " (too long)" : "");
            goto done;
        }
        if (tlen == 0) {
            st = tg_error(TG_EINVAL, "%s:%d: empty token", path, line_of(buf, at));
            goto done;
        }
        i = skip_ws(buf, n, i);
        if (i >= n || buf[i] != ':') {
            st = tg_error(TG_EINVAL, "%s:%d: expected ':' after a token", path, line_of(buf, i < n ? i : n));
            goto done;
        }
        i = skip_ws(buf, n, i + 1);
        int64_t v = 0;
        size_t d0 = i;
        while (i < n && buf[i] >= '0' && buf[i] <= '9' && i - d0 < 9) v = v * 10 + (buf[i++] - '0');
        if (i == d0 || (i < n && (buf[i] == '.' || buf[i] == 'e' || buf[i] == 'E' || (buf[i] >= '0' && buf[i] <= '9'))) ||
            (buf[d0] == '0' && i - d0 > 1) || v >= MAX_VOCAB) {
            st = tg_error(TG_EINVAL, "%s:%d: the id of token \"%.*s\" is not an integer in 0..%lld", path,
                          line_of(buf, d0), (int)(tlen > 60 ? 60 : tlen), (const char *)text, (long long)MAX_VOCAB - 1);
            goto done;
        }
        if (nent == cap) {
            cap = cap ? 2 * cap : 1024;
            struct vocab_entry *ne = realloc(ent, cap * sizeof *ent);
            if (!ne) {
                st = tg_error(TG_ENOMEM, "%s: out of host memory", path);
                goto done;
            }
            ent = ne;
        }
        ent[nent].bytes = malloc((size_t)blen ? (size_t)blen : 1);
        if (!ent[nent].bytes) {
            st = tg_error(TG_ENOMEM, "%s: out of host memory", path);
            goto done;
        }
        memcpy(ent[nent].bytes, bytes, (size_t)blen);
        ent[nent].len = (uint32_t)blen;
        ent[nent].id = (int32_t)v;
        nent++;
        if (v > max_id) max_id = v;
        i = skip_ws(buf, n, i);
        if (i < n && buf[i] == ',') {
            i = skip_ws(buf, n, i + 1);
            continue;
        }
        if (i < n && buf[i] == '}') break;
        st = tg_error(TG_EINVAL, "%s:%d: expected ',' or '}'", path, line_of(buf, i < n ? i : n));
        goto done;
    }
    if (skip_ws(buf, n, i + 1) != n) {
        st = tg_error(TG_EINVAL, "%s:%d: text after the vocabulary object", path, line_of(buf, skip_ws(buf, n, i + 1)));
        goto done;
    }
    if ((int64_t)nent != max_id + 1) {
        st = tg_error(TG_EINVAL, "%s: %zu tokens but ids up to %lld: ids must be 0..%zu, each once", path, nent,
                      (long long)max_id, nent - 1);
        goto done;
    }
    t = tok_alloc(1, max_id + 1);
    if (!t) {
        st = tg_error(TG_ENOMEM, "%s: out of host memory", path);
        goto done;
    }
    for (size_t e = 0; e < nent; e++) {
        int32_t id = ent[e].id;
        if (t->tok[id]) {
            st = tg_error(TG_EINVAL, "%s: id %d is given to two tokens", path, (int)id);
            goto done;
        }
        t->tok[id] = ent[e].bytes;
        t->tok_len[id] = ent[e].len;
        ent[e].bytes = NULL;
    }
done:
    for (size_t e = 0; e < nent; e++) free(ent[e].bytes);
    free(ent);
    if (st != TG_OK) {
        tg_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TG_OK;
}

/* Parses the merges, the n bytes at buf of the file path ("a b" per line, ranked by order; an optional
 * "#version" first line), into t->pairs. */
static tg_status load_merges(const char *path, const char *buf, size_t n, tg_tokenizer *t, const char *vocab_path)
{
    int32_t unmap[512];
    uint32_t cp[256];
    byte_to_unicode(cp);
    for (int k = 0; k < 512; k++) unmap[k] = -1;
    for (int b = 0; b < 256; b++) unmap[cp[b]] = b;
    tg_status st = TG_OK;
    struct tok_index ix = {0};
    size_t isz = 1;
    while (isz < (size_t)t->vocab_size * 2) isz <<= 1;
    ix.slot = calloc(isz, sizeof *ix.slot);
    ix.mask = isz - 1;
    size_t lines = 1;
    for (size_t k = 0; k < n; k++) lines += buf[k] == '\n';
    size_t psz = 1;
    while (psz < lines * 2 + 2) psz <<= 1;
    t->pairs = calloc(psz, sizeof *t->pairs);
    t->pair_mask = psz - 1;
    if (!ix.slot || !t->pairs) {
        st = tg_error(TG_ENOMEM, "%s: out of host memory", path);
        goto done;
    }
    for (int64_t id = 0; id < t->vocab_size; id++) {
        size_t h = hash_bytes(t->tok[id], t->tok_len[id]) & ix.mask;
        while (ix.slot[h]) {
            int32_t o = ix.slot[h] - 1;
            if (t->tok_len[o] == t->tok_len[id] && memcmp(t->tok[o], t->tok[id], t->tok_len[id]) == 0) {
                st = tg_error(TG_EINVAL, "%s: ids %d and %lld are the same token", vocab_path, (int)o, (long long)id);
                goto done;
            }
            h = (h + 1) & ix.mask;
        }
        ix.slot[h] = (int32_t)id + 1;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = index_find(t, &ix, &c, 1);
        if (t->byte_id[b] < 0) {
            st = tg_error(TG_EINVAL, "%s: byte 0x%02x has no token (a byte-level vocabulary holds all 256 bytes)",
                          vocab_path, b);
            goto done;
        }
    }
    static const char eot[] = "<|endoftext|>";
    t->eot = index_find(t, &ix, (const unsigned char *)eot, sizeof eot - 1);
    size_t i = 0;
    int line = 0;
    unsigned char ab[2][MAX_TOKEN_BYTES + 8], merged[2 * MAX_TOKEN_BYTES + 8];
    while (i < n) {
        size_t e = i;
        while (e < n && buf[e] != '\n') e++;
        line++;
        size_t le = e;
        if (le > i && buf[le - 1] == '\r') le--;
        if (line == 1 && le - i >= 8 && memcmp(buf + i, "#version", 8) == 0) {
            i = e + 1;
            continue;
        }
        if (le == i) { /* empty lines: only at the end */
            size_t k = e;
            while (k < n && (buf[k] == '\n' || buf[k] == '\r')) k++;
            if (k != n) {
                st = tg_error(TG_EINVAL, "%s:%d: empty line among the merges", path, line);
                goto done;
            }
            break;
        }
        const char *sp = memchr(buf + i, ' ', le - i);
        if (!sp || sp == buf + i || sp + 1 == buf + le || memchr(sp + 1, ' ', (size_t)(buf + le - sp - 1))) {
            st = tg_error(TG_EINVAL, "%s:%d: expected two tokens separated by one space", path, line);
            goto done;
        }
        const char *part[2] = {buf + i, sp + 1};
        size_t plen[2] = {(size_t)(sp - (buf + i)), (size_t)(buf + le - sp - 1)};
        long blen[2];
        int32_t id[2];
        for (int p = 0; p < 2; p++) {
            blen[p] = unmap_token(unmap, (const unsigned char *)part[p], plen[p], ab[p], MAX_TOKEN_BYTES);
            if (blen[p] < 0 || blen[p] > MAX_TOKEN_BYTES) {
                st = tg_error(TG_EINVAL, "%s:%d: \"%.*s\" is not in GPT-2's byte-to-unicode form%s", path, line,
                              (int)(plen[p] > 60 ? 60 : plen[p]), part[p],
                              blen[p] > MAX_TOKEN_BYTES ? " (longer than any vocabulary entry)" : "");
                goto done;
            }
            id[p] = index_find(t, &ix, ab[p], (size_t)blen[p]);
            if (id[p] < 0) {
                st = tg_error(TG_EINVAL, "%s:%d: token \"%.*s\" is not in the vocabulary %s", path, line,
                              (int)(plen[p] > 60 ? 60 : plen[p]), part[p], vocab_path);
                goto done;
            }
        }
        memcpy(merged, ab[0], (size_t)blen[0]);
        memcpy(merged + blen[0], ab[1], (size_t)blen[1]);
        int32_t m = index_find(t, &ix, merged, (size_t)(blen[0] + blen[1]));
        if (m < 0) {
            st = tg_error(TG_EINVAL, "%s:%d: the merge of \"%.*s\" and \"%.*s\" is not in the vocabulary %s", path, line,
                          (int)plen[0], part[0], (int)plen[1], part[1], vocab_path);
            goto done;
        }
        uint64_t key = (((uint64_t)(uint32_t)id[0] << 32) | (uint32_t)id[1]) + 1;
        size_t h = mix64(key) & t->pair_mask;
        while (t->pairs[h].key && t->pairs[h].key != key) h = (h + 1) & t->pair_mask;
        if (t->pairs[h].key == 0) { /* a repeated pair keeps its first (lowest) rank */
            t->pairs[h].key = key;
            t->pairs[h].rank = (int32_t)t->nmerges;
            t->pairs[h].merged = m;
        }
        t->nmerges++;
        i = e + 1;
    }
    if (t->nmerges == 0) st = tg_error(TG_EINVAL, "%s: no merges", path);
done:
    free(ix.slot);
    return st;
}

/* Whether p names something (stat: opening a FIFO to find out would wait for a writer; read_file refuses what is
 * not a regular file, naming it). */
static int file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

tg_status tg_tokenizer_gpt2(const char *dir, tg_tokenizer **out)
{
    TG_NONNULL(out, "out");
    *out = NULL;
    TG_NONNULL(dir, "dir");
    init_ascii_class();
    char vpath[4096], mpath[4096];
    static const char *const names[2][2] = {{"vocab.json", "merges.txt"}, {"encoder.json", "vocab.bpe"}};
    int which = -1;
    for (int k = 0; k < 2 && which < 0; k++) {
        snprintf(vpath, sizeof vpath, "%s/%s", dir, names[k][0]);
        snprintf(mpath, sizeof mpath, "%s/%s", dir, names[k][1]);
        if (file_exists(vpath) && file_exists(mpath)) which = k;
    }
    if (which < 0)
        return tg_error(TG_EIO, "%s: no GPT-2 tokenizer here: expected vocab.json + merges.txt (Hugging Face) or "
                                "encoder.json + vocab.bpe (OpenAI)", dir);
    char *vbuf = NULL, *mbuf = NULL;
    size_t vn = 0, mn = 0;
    tg_status st = read_file(vpath, &vbuf, &vn);
    if (st == TG_OK) st = read_file(mpath, &mbuf, &mn);
    if (st == TG_OK) st = tg_tokenizer_gpt2_memory(vbuf, vn, vpath, mbuf, mn, mpath, out);
    free(vbuf);
    free(mbuf);
    return st;
}

tg_status tg_tokenizer_gpt2_memory(const char *vocab, size_t vocab_len, const char *vocab_name, const char *merges,
                                   size_t merges_len, const char *merges_name, tg_tokenizer **out)
{
    *out = NULL;
    init_ascii_class();
    if (!vocab) vocab_len = 0;
    if (!merges) merges_len = 0;
    tg_tokenizer *t;
    TG_TRY(load_vocab(vocab_name, vocab, vocab_len, &t));
    tg_status st = load_merges(merges_name, merges, merges_len, t, vocab_name);
    if (st == TG_OK) {
        t->cache = calloc(CACHE_SLOTS, sizeof *t->cache);
        t->cache_cap_bytes = (size_t)CACHE_SLOTS * 12;
        t->cache_cap_ids = (size_t)CACHE_SLOTS * 4;
        t->cache_bytes = malloc(t->cache_cap_bytes);
        t->cache_ids = malloc(t->cache_cap_ids * sizeof *t->cache_ids);
        if (!t->cache || !t->cache_bytes || !t->cache_ids) st = tg_error(TG_ENOMEM, "%s: out of host memory", vocab_name);
    }
    if (st != TG_OK) {
        tg_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TG_OK;
}

int64_t tg_tokenizer_vocab_size(const tg_tokenizer *t) { return t ? t->vocab_size : 0; }
int64_t tg_tokenizer_eot(const tg_tokenizer *t) { return t ? t->eot : -1; }
int64_t tg_tokenizer_num_merges(const tg_tokenizer *t) { return t ? t->nmerges : 0; }
const char *tg_tokenizer_kind(const tg_tokenizer *t) { return !t ? "" : t->kind ? "gpt2" : "bytes"; }

/* ------------------------------------------------------------------ encoding */
struct ids_out {
    int32_t *p;
    size_t n, cap;
};

static inline int ids_reserve(struct ids_out *o, size_t more)
{
    if (o->n + more <= o->cap) return 0;
    if (more > SIZE_MAX / sizeof *o->p - o->n) return -1; /* the byte count would wrap */
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->n + more) cap = cap > SIZE_MAX / 2 / sizeof *o->p ? o->n + more : cap * 2;
    int32_t *np = realloc(o->p, cap * sizeof *np);
    if (!np) return -1;
    o->p = np;
    o->cap = cap;
    return 0;
}

/* BPE of one piece into w (its byte tokens merged by rank, GPT-2's way: the lowest-ranked adjacent pair, every
 * occurrence left to right, until no pair has a merge). Returns the number of tokens. */
static size_t bpe_piece(const tg_tokenizer *t, const unsigned char *s, size_t n, int32_t *w)
{
    for (size_t i = 0; i < n; i++) w[i] = t->byte_id[s[i]];
    size_t m = n;
    while (m > 1) {
        int32_t best = INT32_MAX, a = 0, b = 0, merged = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            const struct pair_slot *p = pair_find(t, w[i], w[i + 1]);
            if (p && p->rank < best) best = p->rank, a = w[i], b = w[i + 1], merged = p->merged;
        }
        if (best == INT32_MAX) break;
        size_t o = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && w[i] == a && w[i + 1] == b) {
                w[o++] = merged;
                i += 2;
            } else {
                w[o++] = w[i++];
            }
        }
        m = o;
    }
    return m;
}

static void cache_clear(tg_tokenizer *t)
{
    memset(t->cache, 0, CACHE_SLOTS * sizeof *t->cache);
    t->cache_nbytes = t->cache_nids = t->cache_used = 0;
}

static tg_status encode_bpe(tg_tokenizer *t, const unsigned char *s, size_t n, struct ids_out *o,
                            tg_tokenizer_progress progress, void *ud)
{
    size_t next_report = (size_t)1 << 22;
    for (size_t i = 0; i < n;) {
        size_t e = piece_end(s, i, n), len = e - i;
        if (len <= CACHE_MAX_PIECE) {
            uint64_t h = hash_bytes(s + i, len);
            size_t k = h & (CACHE_SLOTS - 1);
            struct cache_slot *c;
            for (;; k = (k + 1) & (CACHE_SLOTS - 1)) {
                c = &t->cache[k];
                if (c->hash == 0) break;
                if (c->hash == h && c->n == len && memcmp(t->cache_bytes + c->off, s + i, len) == 0) break;
            }
            if (c->hash == 0) { /* not cached: merge, then remember */
                if (ids_reserve(o, len)) return tg_error(TG_ENOMEM, "tokenizer: out of host memory");
                size_t m = bpe_piece(t, s + i, len, o->p + o->n);
                if (t->cache_used * 2 >= CACHE_SLOTS || t->cache_nbytes + len > t->cache_cap_bytes ||
                    t->cache_nids + m > t->cache_cap_ids) {
                    cache_clear(t);
                    for (k = h & (CACHE_SLOTS - 1); t->cache[k].hash; k = (k + 1) & (CACHE_SLOTS - 1)) {}
                    c = &t->cache[k];
                }
                c->hash = h;
                c->off = (uint32_t)t->cache_nbytes;
                c->n = (uint32_t)len;
                c->ioff = (uint32_t)t->cache_nids;
                c->ni = (uint32_t)m;
                memcpy(t->cache_bytes + t->cache_nbytes, s + i, len);
                memcpy(t->cache_ids + t->cache_nids, o->p + o->n, m * sizeof(int32_t));
                t->cache_nbytes += len;
                t->cache_nids += m;
                t->cache_used++;
                o->n += m;
            } else {
                if (ids_reserve(o, c->ni)) return tg_error(TG_ENOMEM, "tokenizer: out of host memory");
                memcpy(o->p + o->n, t->cache_ids + c->ioff, c->ni * sizeof(int32_t));
                o->n += c->ni;
            }
        } else {
            if (ids_reserve(o, len)) return tg_error(TG_ENOMEM, "tokenizer: out of host memory");
            o->n += bpe_piece(t, s + i, len, o->p + o->n);
        }
        i = e;
        if (progress && i >= next_report) {
            if (progress(ud, i, n)) return tg_error(TG_EINVAL, "tokenizer: encoding stopped by the progress callback");
            next_report = i + ((size_t)1 << 22);
        }
    }
    if (progress && progress(ud, n, n)) return tg_error(TG_EINVAL, "tokenizer: encoding stopped by the progress callback");
    return TG_OK;
}

tg_status tg_tokenizer_encode(tg_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *nids,
                              tg_tokenizer_progress progress, void *ud)
{
    TG_NONNULL(ids, "ids");
    TG_NONNULL(nids, "nids");
    *ids = NULL;
    *nids = 0;
    TG_NONNULL(t, "the tokenizer");
    if (!text && len > 0) return tg_error(TG_EINVAL, "tg_tokenizer_encode: text is NULL (%zu bytes)", len);
    struct ids_out o = {0};
    const unsigned char *s = (const unsigned char *)text;
    if (t->kind == 0) {
        if (ids_reserve(&o, len ? len : 1)) return tg_error(TG_ENOMEM, "tokenizer: out of host memory");
        for (size_t i = 0; i < len; i++) o.p[i] = s[i];
        o.n = len;
        if (progress && progress(ud, len, len)) {
            free(o.p);
            return tg_error(TG_EINVAL, "tokenizer: encoding stopped by the progress callback");
        }
    } else {
        if (ids_reserve(&o, 16)) return tg_error(TG_ENOMEM, "tokenizer: out of host memory");
        tg_status st = encode_bpe(t, s, len, &o, progress, ud);
        if (st != TG_OK) {
            free(o.p);
            return st;
        }
    }
    *ids = o.p;
    *nids = o.n;
    return TG_OK;
}

tg_status tg_tokenizer_decode(const tg_tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len)
{
    TG_NONNULL(text, "text");
    TG_NONNULL(len, "len");
    *text = NULL;
    *len = 0;
    TG_NONNULL(t, "the tokenizer");
    if (!ids && n > 0) return tg_error(TG_EINVAL, "tg_tokenizer_decode: ids is NULL (%zu ids)", n);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return tg_error(TG_EINVAL, "tokenizer: token %zu is %d, outside the vocabulary 0..%lld", i + 1, (int)ids[i],
                            (long long)t->vocab_size - 1);
        total += t->tok_len[ids[i]];
    }
    char *o = malloc(total + 1);
    if (!o) return tg_error(TG_ENOMEM, "tokenizer: out of host memory");
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(o + w, t->tok[ids[i]], t->tok_len[ids[i]]);
        w += t->tok_len[ids[i]];
    }
    o[w] = 0;
    *text = o;
    *len = w;
    return TG_OK;
}

const unsigned char *tg_tokenizer_token(const tg_tokenizer *t, int64_t id, size_t *len)
{
    if (!t || !len || id < 0 || id >= t->vocab_size) return NULL;
    *len = t->tok_len[id];
    return t->tok[id];
}

size_t tg_tokenizer_pieces(const char *text, size_t len, size_t *ends, size_t max)
{
    if (!text) return 0;
    if (!ends) max = 0;
    init_ascii_class();
    const unsigned char *s = (const unsigned char *)text;
    size_t k = 0;
    for (size_t i = 0; i < len; k++) {
        i = piece_end(s, i, len);
        if (k < max) ends[k] = i;
    }
    return k;
}
