/* json.h — a small, strict JSON reader for file headers: bounded depth and size, no extensions. */
#ifndef TG_IO_JSON_H
#define TG_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum tg_json_type { TG_JSON_NULL, TG_JSON_BOOL, TG_JSON_INT, TG_JSON_NUMBER, TG_JSON_STRING, TG_JSON_ARRAY, TG_JSON_OBJECT } tg_json_type;

/* A parsed value. Objects keep their members in file order (keys[i] names
 * items[i]); a key that occurs twice in one object is a parse error. INT is
 * a number written without fraction or exponent that fits an int64. */
typedef struct tg_json {
    tg_json_type type;
    int boolean;
    int64_t i;
    double num;
    char *str;      /* STRING: NUL-terminated UTF-8 (strlen may be < len when it holds \u0000) */
    size_t len;     /* STRING: bytes; ARRAY / OBJECT: members */
    struct tg_json *items;
    char **keys;    /* OBJECT only */
} tg_json;

/* Parses text[0..n) as one JSON value followed only by whitespace. Returns 0
 * and fills *out, or -1 with a message ("at byte 17: expected ':'") in err. */
int tg_json_parse(const char *text, size_t n, int max_depth, tg_json *out, char *err, size_t errn);
void tg_json_free(tg_json *v);
/* The member of object o named key, or NULL. */
const tg_json *tg_json_get(const tg_json *o, const char *key);
/* The length of the valid UTF-8 sequence at s (at most n bytes), 0 if it is not one (JSON text is UTF-8). */
size_t tg_utf8_len(const unsigned char *s, size_t n);
/* Appends s as a JSON string literal (quotes, escapes) to buf of capacity cap
 * at *len; returns the bytes it needs (writes nothing past cap). */
size_t tg_json_quote(char *buf, size_t cap, size_t *len, const char *s);

#endif
