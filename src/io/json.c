/* json.c — a small, strict JSON reader (RFC 8259): bounded depth, duplicate keys refused, no extensions. */
#include "io/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
    const char *s;
    size_t n, pos;
    int max_depth;
    char *err;
    size_t errn;
    int failed;
};

static int fail(struct parser *p, const char *fmt, ...)
{
    if (!p->failed) {
        int k = snprintf(p->err, p->errn, "at byte %zu: ", p->pos);
        va_list ap;
        va_start(ap, fmt);
        if (k >= 0 && (size_t)k < p->errn) vsnprintf(p->err + k, p->errn - (size_t)k, fmt, ap);
        va_end(ap);
        p->failed = 1;
    }
    return -1;
}

static void skip_ws(struct parser *p)
{
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int hex4(struct parser *p, unsigned *out)
{
    if (p->n - p->pos < 4) return fail(p, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return fail(p, "bad hex digit in a \\u escape");
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t tg_utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) k = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) k = 4, min = 0x10000;
    else return 0;
    if (n < k) return 0;
    unsigned cp = c & (0x7F >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

static int parse_string(struct parser *p, char **out, size_t *outlen)
{
    p->pos++; /* the opening quote */
    char *buf = malloc(p->n - p->pos + 1); /* the decoded string is never longer than its source */
    if (!buf) return fail(p, "out of memory");
    size_t len = 0;
    for (;;) {
        if (p->pos >= p->n) { free(buf); return fail(p, "unterminated string"); }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') { p->pos++; break; }
        if (c < 0x20) { free(buf); return fail(p, "control character 0x%02x in a string", c); }
        if (c == '\\') {
            p->pos++;
            if (p->pos >= p->n) { free(buf); return fail(p, "unterminated escape"); }
            char e = p->s[p->pos++];
            switch (e) {
            case '"': buf[len++] = '"'; break;
            case '\\': buf[len++] = '\\'; break;
            case '/': buf[len++] = '/'; break;
            case 'b': buf[len++] = '\b'; break;
            case 'f': buf[len++] = '\f'; break;
            case 'n': buf[len++] = '\n'; break;
            case 'r': buf[len++] = '\r'; break;
            case 't': buf[len++] = '\t'; break;
            case 'u': {
                unsigned cp;
                if (hex4(p, &cp)) { free(buf); return -1; }
                if (cp >= 0xDC00 && cp <= 0xDFFF) { free(buf); return fail(p, "lone low surrogate in a \\u escape"); }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned lo;
                    if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                        free(buf);
                        return fail(p, "high surrogate without its low half");
                    }
                    p->pos += 2;
                    if (hex4(p, &lo)) { free(buf); return -1; }
                    if (lo < 0xDC00 || lo > 0xDFFF) { free(buf); return fail(p, "bad low surrogate"); }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                len += put_utf8(buf + len, cp); /* 6 or 12 source bytes give at most 4 */
                break;
            }
            default: free(buf); return fail(p, "bad escape '\\%c'", e);
            }
            continue;
        }
        size_t k = tg_utf8_len((const unsigned char *)p->s + p->pos, p->n - p->pos);
        if (!k) { free(buf); return fail(p, "invalid UTF-8 in a string"); }
        memcpy(buf + len, p->s + p->pos, k);
        len += k;
        p->pos += k;
    }
    buf[len] = 0;
    *out = buf;
    *outlen = len;
    return 0;
}

static int parse_number(struct parser *p, tg_json *v)
{
    size_t start = p->pos;
    int integral = 1;
    if (p->s[p->pos] == '-') p->pos++;
    if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return fail(p, "bad number");
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') return fail(p, "number with a leading zero");
    } else {
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->n && p->s[p->pos] == '.') {
        integral = 0;
        p->pos++;
        if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return fail(p, "bad fraction");
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integral = 0;
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->n || p->s[p->pos] < '0' || p->s[p->pos] > '9') return fail(p, "bad exponent");
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    }
    char tmp[64];
    size_t k = p->pos - start;
    if (k >= sizeof tmp) return fail(p, "number too long");
    memcpy(tmp, p->s + start, k);
    tmp[k] = 0;
    v->num = strtod(tmp, NULL);
    v->type = TG_JSON_NUMBER;
    if (integral) {
        errno = 0;
        long long x = strtoll(tmp, NULL, 10);
        if (errno == 0) v->type = TG_JSON_INT, v->i = x;
    }
    return 0;
}

static int parse_value(struct parser *p, tg_json *v, int depth);

static int grow(tg_json *v, size_t *cap, int object)
{
    if (v->len < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 4;
    tg_json *items = realloc(v->items, nc * sizeof *items);
    if (!items) return -1;
    v->items = items;
    if (object) {
        char **keys = realloc(v->keys, nc * sizeof *keys);
        if (!keys) return -1;
        v->keys = keys;
    }
    *cap = nc;
    return 0;
}

static int parse_container(struct parser *p, tg_json *v, int depth, int object)
{
    if (depth >= p->max_depth) return fail(p, "nested deeper than %d levels", p->max_depth);
    v->type = object ? TG_JSON_OBJECT : TG_JSON_ARRAY;
    size_t cap = 0;
    char close = object ? '}' : ']';
    p->pos++;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; return 0; }
    for (;;) {
        skip_ws(p);
        if (grow(v, &cap, object)) return fail(p, "out of memory");
        char *key = NULL;
        if (object) {
            size_t klen;
            if (p->pos >= p->n || p->s[p->pos] != '"') return fail(p, "expected a string key");
            if (parse_string(p, &key, &klen)) return -1;
            if (strlen(key) != klen) { free(key); return fail(p, "key holds a NUL character"); }
            for (size_t i = 0; i < v->len; i++)
                if (strcmp(v->keys[i], key) == 0) {
                    int r = fail(p, "key \"%s\" given twice", key);
                    free(key);
                    return r;
                }
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') { free(key); return fail(p, "expected ':'"); }
            p->pos++;
            v->keys[v->len] = key;
        }
        memset(&v->items[v->len], 0, sizeof v->items[0]);
        v->len++; /* counted before parsing, so a failure frees what it got */
        if (parse_value(p, &v->items[v->len - 1], depth + 1)) return -1;
        skip_ws(p);
        if (p->pos >= p->n) return fail(p, "expected ',' or '%c'", close);
        if (p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->s[p->pos] == close) { p->pos++; return 0; }
        return fail(p, "expected ',' or '%c'", close);
    }
}

static int literal(struct parser *p, const char *word)
{
    size_t k = strlen(word);
    if (p->n - p->pos < k || memcmp(p->s + p->pos, word, k) != 0) return fail(p, "unexpected character '%c'", p->s[p->pos]);
    p->pos += k;
    return 0;
}

static int parse_value(struct parser *p, tg_json *v, int depth)
{
    skip_ws(p);
    if (p->pos >= p->n) return fail(p, "unexpected end of the text");
    char c = p->s[p->pos];
    if (c == '{') return parse_container(p, v, depth, 1);
    if (c == '[') return parse_container(p, v, depth, 0);
    if (c == '"') {
        v->type = TG_JSON_STRING;
        return parse_string(p, &v->str, &v->len);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    if (c == 't') { v->type = TG_JSON_BOOL; v->boolean = 1; return literal(p, "true"); }
    if (c == 'f') { v->type = TG_JSON_BOOL; return literal(p, "false"); }
    if (c == 'n') { v->type = TG_JSON_NULL; return literal(p, "null"); }
    return fail(p, "unexpected character '%c'", c);
}

void tg_json_free(tg_json *v)
{
    if (!v) return;
    if (v->type == TG_JSON_STRING) free(v->str);
    if (v->type == TG_JSON_ARRAY || v->type == TG_JSON_OBJECT) {
        for (size_t i = 0; i < v->len; i++) {
            tg_json_free(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof *v);
}

int tg_json_parse(const char *text, size_t n, int max_depth, tg_json *out, char *err, size_t errn)
{
    struct parser p = {text, n, 0, max_depth, err, errn, 0};
    memset(out, 0, sizeof *out);
    if (parse_value(&p, out, 0) == 0) {
        skip_ws(&p);
        if (p.pos == n) return 0;
        fail(&p, "text after the value");
    }
    tg_json_free(out);
    return -1;
}

const tg_json *tg_json_get(const tg_json *o, const char *key)
{
    if (!o || o->type != TG_JSON_OBJECT) return NULL;
    for (size_t i = 0; i < o->len; i++)
        if (strcmp(o->keys[i], key) == 0) return &o->items[i];
    return NULL;
}

static void put(char *buf, size_t cap, size_t *len, const char *s, size_t k)
{
    if (*len + k <= cap) memcpy(buf + *len, s, k);
    *len += k;
}

size_t tg_json_quote(char *buf, size_t cap, size_t *len, const char *s)
{
    size_t start = *len;
    put(buf, cap, len, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char e[8];
        if (*c == '"' || *c == '\\') {
            e[0] = '\\', e[1] = (char)*c;
            put(buf, cap, len, e, 2);
        } else if (*c < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", *c);
            put(buf, cap, len, e, 6);
        } else {
            put(buf, cap, len, (const char *)c, 1);
        }
    }
    put(buf, cap, len, "\"", 1);
    return *len - start;
}
