/* rlm-code native session JSONL straight into SQLite's Event rows, in C.
 *
 * Why this exists: a Python import of a 100,000-event rlm-code session spends about twice the CPU
 * of rlm-code's own load (docs/benchmarks.md): the cost is the Python objects made per field
 * (parsed dicts, canonical events, row lists), and then pysqlite binding each of them again.
 * Here a record is parsed into a flat node array, its row is computed, and the columns are bound
 * from C buffers to the very SQLite connection (and transaction) Django holds. No Python object
 * is made per event.
 *
 * It is a fast path, not a second converter: it takes only records that the Python converter
 * (rlm_native.py + event_rows.py) would take without a single problem, and produces exactly the
 * rows that code would. Anything else -- a problem to report, a second session in the file, a
 * number written in a way orjson would write differently, a NUL, a duplicate key -- makes it
 * stop and say so ("bail"); the caller then rolls its savepoint back and imports the file with
 * the Python path, which reports the problem. tests/test_rlm_native_c.py holds both to the same
 * rows.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * SQLite, reached through the library Python's own sqlite3 module uses (so the connection handle
 * we borrow belongs to the same library instance), with only the declarations we need.
 */
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
#define SQLITE_OK 0
#define SQLITE_DONE 101
#define SQLITE_STATIC ((void (*)(void *))0)
#define SQLITE_TRANSIENT ((void (*)(void *)) - 1)

static struct {
    int (*prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
    int (*bind_int64)(sqlite3_stmt *, int, long long);
    int (*bind_double)(sqlite3_stmt *, int, double);
    int (*bind_text)(sqlite3_stmt *, int, const char *, int, void (*)(void *));
    int (*bind_null)(sqlite3_stmt *, int);
    int (*step)(sqlite3_stmt *);
    int (*reset)(sqlite3_stmt *);
    int (*finalize)(sqlite3_stmt *);
    const char *(*errmsg)(sqlite3 *);
    const char *(*db_filename)(sqlite3 *, const char *);
    int (*get_autocommit)(sqlite3 *);
    const char *(*libversion)(void);
} sq;

static unsigned char *(*openssl_sha256)(const unsigned char *, size_t, unsigned char *);

/* ---------------------------------------------------------------------------------------------
 * Growable byte buffer.
 */
typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}
static inline void buf_put(Buf *b, const char *s, size_t n) {
    if (buf_grow(b, n)) abort();
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static inline void buf_putc(Buf *b, char c) {
    if (buf_grow(b, 1)) abort();
    b->p[b->n++] = c;
    b->p[b->n] = 0;
}
static inline void buf_puts(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }
static inline void buf_clear(Buf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}
static void buf_free(Buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
static void buf_set(Buf *b, const char *s, size_t n) {
    buf_clear(b);
    buf_put(b, s, n);
}
static void buf_int(Buf *b, long long v) {
    char tmp[24];
    char *end = tmp + sizeof tmp, *p = end;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--p = '-';
    buf_put(b, p, (size_t)(end - p));
}

/* ---------------------------------------------------------------------------------------------
 * JSON: a strict reader of what orjson reads the same way and writes back identically.
 *
 * Nodes live in one array per document; containers link their children (an object's are key,
 * value, key, value ...). Strings point into the text; `esc` says the span holds escapes.
 */
enum { J_NULL, J_FALSE, J_TRUE, J_INT, J_FLOAT, J_STR, J_ARR, J_OBJ };
/* Python's type() of each, for rlm_native's "type(old) is not type(value)". */
static const int TYPE_CLASS[] = {0, 1, 1, 2, 3, 4, 5, 6};

typedef struct {
    uint8_t t, esc;
    uint32_t len;          /* string: span bytes; number: text bytes; container: children */
    int32_t first, next;   /* first child, next sibling (-1: none) */
    const char *s;         /* string span (inside the quotes) or number text */
    union {
        long long i;
        double d;
    } v;
} JNode;

typedef struct {
    JNode *n;
    int count, cap;
    const char *why; /* why the text was refused */
} JDoc;

typedef struct {
    const char *p, *end;
    JDoc *doc;
} JP;

/* orjson writes back at most 254 nested levels; a deeper record is one the Python path refuses
 * ("cannot be stored"), so it is declined here (the root is depth 0). */
#define MAX_DEPTH 254

static int jd_new(JDoc *d, uint8_t t) {
    if (d->count == d->cap) {
        int cap = d->cap ? d->cap * 2 : 64;
        JNode *n = realloc(d->n, sizeof(JNode) * (size_t)cap);
        if (!n) abort();
        d->n = n;
        d->cap = cap;
    }
    JNode *x = &d->n[d->count];
    x->t = t;
    x->esc = 0;
    x->len = 0;
    x->first = x->next = -1;
    x->s = NULL;
    x->v.i = 0;
    return d->count++;
}

static inline void jp_ws(JP *jp) {
    const char *p = jp->p;
    while (p < jp->end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    jp->p = p;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static int jp_string(JP *jp, int node) {
    const char *p = jp->p + 1, *end = jp->end;
    const char *start = p;
    uint8_t esc = 0;
    while (1) {
        if (p >= end) return jp->doc->why = "unterminated string", -1;
        unsigned char c = (unsigned char)*p;
        if (c == '"') break;
        if (c < 0x20) return jp->doc->why = "control character in a string", -1;
        if (c == '\\') {
            esc = 1;
            if (p + 1 >= end) return jp->doc->why = "unterminated escape", -1;
            char e = p[1];
            if (e == 'u') {
                if (p + 6 > end) return jp->doc->why = "short \\u escape", -1;
                int u = hex4(p + 2);
                if (u < 0) return jp->doc->why = "bad \\u escape", -1;
                if (u == 0) return jp->doc->why = "NUL in a string", -1;
                if (u >= 0xDC00 && u <= 0xDFFF) return jp->doc->why = "lone surrogate", -1;
                if (u >= 0xD800 && u <= 0xDBFF) {
                    if (p + 12 > end || p[6] != '\\' || p[7] != 'u')
                        return jp->doc->why = "lone surrogate", -1;
                    int lo = hex4(p + 8);
                    if (lo < 0xDC00 || lo > 0xDFFF) return jp->doc->why = "lone surrogate", -1;
                    p += 12;
                } else {
                    p += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) return jp->doc->why = "bad escape", -1;
            p += 2;
            continue;
        }
        p++;
    }
    JNode *x = &jp->doc->n[node];
    x->s = start;
    x->len = (uint32_t)(p - start);
    x->esc = esc;
    jp->p = p + 1;
    return 0;
}

/* Significant digits of a decimal text (leading and trailing zeros dropped). */
static int sig_digits(const char *s, size_t n) {
    const char *a = s, *b = s + n;
    while (a < b && (*a == '0' || *a == '.' || *a == '-')) a++;
    while (b > a && (b[-1] == '0' || b[-1] == '.')) b--;
    int count = 0;
    for (const char *c = a; c < b; c++)
        if (*c != '.') count++;
    return count;
}

/* A number, accepted only in the text orjson would write back for the value it reads: an int
 * within 64 bits without "-0", or a float in Python's repr without an exponent (orjson and repr
 * agree there; they differ on exponents). */
static int jp_number(JP *jp, int node) {
    const char *p = jp->p, *end = jp->end, *start = p;
    if (p < end && *p == '-') p++;
    if (p >= end) return jp->doc->why = "bad number", -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return jp->doc->why = "bad number", -1;
    }
    const char *int_end = p;
    int is_float = 0;
    if (p < end && *p == '.') {
        is_float = 1;
        p++;
        const char *f = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == f) return jp->doc->why = "bad number", -1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) return jp->doc->why = "number with an exponent", -1;
    JNode *x = &jp->doc->n[node];
    x->s = start;
    x->len = (uint32_t)(p - start);
    jp->p = p;
    if (!is_float) {
        size_t n = (size_t)(p - start);
        if (n == 2 && start[0] == '-' && start[1] == '0') return jp->doc->why = "-0", -1;
        if (n > 20) return jp->doc->why = "integer beyond 64 bits", -1;
        char tmp[24];
        memcpy(tmp, start, n);
        tmp[n] = 0;
        errno = 0;
        char *e;
        long long v = strtoll(tmp, &e, 10);
        if (errno == ERANGE) return jp->doc->why = "integer beyond 64 bits", -1;
        x->t = J_INT;
        x->v.i = v;
        return 0;
    }
    x->t = J_FLOAT;
    size_t n = (size_t)(p - start);
    if (n > 60) return jp->doc->why = "float text too long", -1;
    char tmp[64];
    memcpy(tmp, start, n);
    tmp[n] = 0;
    double d = PyOS_string_to_double(tmp, NULL, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return jp->doc->why = "bad float", -1;
    }
    if (!isfinite(d)) return jp->doc->why = "float out of range", -1;
    x->v.d = d;
    /* Is the text Python's repr of the value? Integer part of at most 16 digits, a fraction
     * without trailing zeros (other than a lone 0), at most three zeros after the point of a
     * value below 1, and, beyond 15 significant digits, the repr itself to compare. */
    const char *digits = start[0] == '-' ? start + 1 : start;
    size_t int_digits = (size_t)(int_end - digits);
    const char *frac = int_end + 1;
    size_t frac_n = (size_t)(p - frac);
    if (int_digits > 16) return jp->doc->why = "float repr with an exponent", -1;
    if (frac_n > 1 && frac[frac_n - 1] == '0') return jp->doc->why = "float not in repr form", -1;
    if (int_digits == 1 && digits[0] == '0' && !(frac_n == 1 && frac[0] == '0')) {
        size_t zeros = 0;
        while (zeros < frac_n && frac[zeros] == '0') zeros++;
        if (zeros > 3) return jp->doc->why = "float repr with an exponent", -1;
    }
    if (sig_digits(start, n) > 15) {
        char *r = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (!r) {
            PyErr_Clear();
            return jp->doc->why = "float repr", -1;
        }
        int same = strlen(r) == n && memcmp(r, start, n) == 0;
        PyMem_Free(r);
        if (!same) return jp->doc->why = "float not in repr form", -1;
    }
    return 0;
}

static int jp_value(JP *jp, int depth);

/* Keys of one object must be unique (Python keeps the last; the payload text would differ). */
static int unescape(const char *s, size_t n, Buf *out);
static int keys_unique(JDoc *d, int obj) {
    JNode *o = &d->n[obj];
    if (o->len < 2) return 1;
    int any_esc = 0;
    for (int k = o->first; k >= 0; k = d->n[d->n[k].next].next)
        if (d->n[k].esc) any_esc = 1;
    if (any_esc) {
        /* Rare: compare unescaped keys pairwise. */
        Buf a = {0}, b = {0};
        int ok = 1;
        for (int k = o->first; k >= 0 && ok; k = d->n[d->n[k].next].next) {
            buf_clear(&a);
            unescape(d->n[k].s, d->n[k].len, &a);
            for (int m = d->n[d->n[k].next].next; m >= 0; m = d->n[d->n[m].next].next) {
                buf_clear(&b);
                unescape(d->n[m].s, d->n[m].len, &b);
                if (a.n == b.n && memcmp(a.p, b.p, a.n) == 0) {
                    ok = 0;
                    break;
                }
            }
        }
        buf_free(&a);
        buf_free(&b);
        return ok;
    }
    if (o->len <= 24) {
        for (int k = o->first; k >= 0; k = d->n[d->n[k].next].next)
            for (int m = d->n[d->n[k].next].next; m >= 0; m = d->n[d->n[m].next].next)
                if (d->n[k].len == d->n[m].len && memcmp(d->n[k].s, d->n[m].s, d->n[k].len) == 0)
                    return 0;
        return 1;
    }
    /* Larger objects: an open-addressing set of the key spans. */
    size_t cap = 64;
    while (cap < (size_t)o->len * 2) cap *= 2;
    int *slots = malloc(sizeof(int) * cap);
    if (!slots) abort();
    for (size_t i = 0; i < cap; i++) slots[i] = -1;
    int ok = 1;
    for (int k = o->first; k >= 0 && ok; k = d->n[d->n[k].next].next) {
        JNode *kn = &d->n[k];
        uint64_t h = 1469598103934665603ULL;
        for (uint32_t i = 0; i < kn->len; i++) h = (h ^ (unsigned char)kn->s[i]) * 1099511628211ULL;
        size_t at = (size_t)h & (cap - 1);
        while (slots[at] >= 0) {
            JNode *other = &d->n[slots[at]];
            if (other->len == kn->len && memcmp(other->s, kn->s, kn->len) == 0) {
                ok = 0;
                break;
            }
            at = (at + 1) & (cap - 1);
        }
        slots[at] = k;
    }
    free(slots);
    return ok;
}

static int jp_value(JP *jp, int depth) {
    jp_ws(jp);
    if (jp->p >= jp->end) return jp->doc->why = "unexpected end", -1;
    char c = *jp->p;
    int node;
    if (c == '{' || c == '[') {
        if (depth >= MAX_DEPTH) return jp->doc->why = "nested too deep", -1;
        int is_obj = c == '{';
        node = jd_new(jp->doc, is_obj ? J_OBJ : J_ARR);
        jp->p++;
        jp_ws(jp);
        char close = is_obj ? '}' : ']';
        if (jp->p < jp->end && *jp->p == close) {
            jp->p++;
            return node;
        }
        int last = -1;
        uint32_t count = 0;
        while (1) {
            if (is_obj) {
                jp_ws(jp);
                if (jp->p >= jp->end || *jp->p != '"') return jp->doc->why = "expected a key", -1;
                int key = jd_new(jp->doc, J_STR);
                if (jp_string(jp, key) < 0) return -1;
                if (last < 0) jp->doc->n[node].first = key;
                else jp->doc->n[last].next = key;
                last = key;
                jp_ws(jp);
                if (jp->p >= jp->end || *jp->p != ':') return jp->doc->why = "expected ':'", -1;
                jp->p++;
            }
            int child = jp_value(jp, depth + 1);
            if (child < 0) return -1;
            if (last < 0) jp->doc->n[node].first = child;
            else jp->doc->n[last].next = child;
            last = child;
            count++;
            jp_ws(jp);
            if (jp->p >= jp->end) return jp->doc->why = "unexpected end", -1;
            if (*jp->p == ',') {
                jp->p++;
                continue;
            }
            if (*jp->p == close) {
                jp->p++;
                break;
            }
            return jp->doc->why = "expected ',' or a closing bracket", -1;
        }
        jp->doc->n[node].len = count;
        if (is_obj && !keys_unique(jp->doc, node)) return jp->doc->why = "duplicate key", -1;
        return node;
    }
    if (c == '"') {
        node = jd_new(jp->doc, J_STR);
        if (jp_string(jp, node) < 0) return -1;
        return node;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        node = jd_new(jp->doc, J_INT);
        if (jp_number(jp, node) < 0) return -1;
        return node;
    }
    size_t left = (size_t)(jp->end - jp->p);
    if (left >= 4 && memcmp(jp->p, "null", 4) == 0) {
        jp->p += 4;
        return jd_new(jp->doc, J_NULL);
    }
    if (left >= 4 && memcmp(jp->p, "true", 4) == 0) {
        jp->p += 4;
        return jd_new(jp->doc, J_TRUE);
    }
    if (left >= 5 && memcmp(jp->p, "false", 5) == 0) {
        jp->p += 5;
        return jd_new(jp->doc, J_FALSE);
    }
    return jp->doc->why = "not JSON", -1;
}

/* Valid UTF-8 as orjson requires it (no overlong forms, no surrogates, nothing past U+10FFFF). */
static int valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) return 0;
            if (c == 0xED && s[i + 1] >= 0xA0) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90) return 0;
            if (c == 0xF4 && s[i + 1] >= 0x90) return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* Parse one whole text as a JSON value; -1 (and doc->why) if refused. */
static int jparse(JDoc *doc, const char *s, size_t n) {
    doc->count = 0;
    doc->why = NULL;
    JP jp = {s, s + n, doc};
    int root = jp_value(&jp, 0);
    if (root < 0) return -1;
    jp_ws(&jp);
    if (jp.p != jp.end) return doc->why = "text after the value", -1;
    return root;
}

static void put_utf8(Buf *out, unsigned cp) {
    char t[4];
    if (cp < 0x80) {
        buf_putc(out, (char)cp);
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3F));
        buf_put(out, t, 2);
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        buf_put(out, t, 3);
    } else {
        t[0] = (char)(0xF0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        buf_put(out, t, 4);
    }
}

/* A string span with escapes -> its UTF-8 text (appended). The span was validated by jp_string. */
static int unescape(const char *s, size_t n, Buf *out) {
    const char *p = s, *end = s + n;
    while (p < end) {
        const char *q = memchr(p, '\\', (size_t)(end - p));
        if (!q) {
            buf_put(out, p, (size_t)(end - p));
            break;
        }
        buf_put(out, p, (size_t)(q - p));
        char e = q[1];
        switch (e) {
        case 'b': buf_putc(out, '\b'); p = q + 2; break;
        case 'f': buf_putc(out, '\f'); p = q + 2; break;
        case 'n': buf_putc(out, '\n'); p = q + 2; break;
        case 'r': buf_putc(out, '\r'); p = q + 2; break;
        case 't': buf_putc(out, '\t'); p = q + 2; break;
        case 'u': {
            unsigned cp = (unsigned)hex4(q + 2);
            p = q + 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo = (unsigned)hex4(q + 8);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p = q + 12;
            }
            put_utf8(out, cp);
            break;
        }
        default: buf_putc(out, e); p = q + 2; break;
        }
    }
    return 0;
}

/* The UTF-8 text of a string node: its span when it has no escapes, else unescaped into
 * `scratch` (cleared first). */
static void jtext(const JDoc *d, int node, Buf *scratch, const char **s, size_t *n) {
    const JNode *x = &d->n[node];
    if (!x->esc) {
        *s = x->s;
        *n = x->len;
        return;
    }
    buf_clear(scratch);
    unescape(x->s, x->len, scratch);
    *s = scratch->p;
    *n = scratch->n;
}

/* orjson's escaping of UTF-8 text: quote, backslash and control characters only. */
static void write_escaped(Buf *out, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    buf_putc(out, '"');
    const char *run = s;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        buf_put(out, run, (size_t)(s + i - run));
        run = s + i + 1;
        switch (c) {
        case '"': buf_put(out, "\\\"", 2); break;
        case '\\': buf_put(out, "\\\\", 2); break;
        case '\b': buf_put(out, "\\b", 2); break;
        case '\f': buf_put(out, "\\f", 2); break;
        case '\n': buf_put(out, "\\n", 2); break;
        case '\r': buf_put(out, "\\r", 2); break;
        case '\t': buf_put(out, "\\t", 2); break;
        default: {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            buf_put(out, u, 6);
        }
        }
    }
    buf_put(out, run, (size_t)(s + n - run));
    buf_putc(out, '"');
}

static void jwrite(const JDoc *d, int node, Buf *out, Buf *scratch);

static void jwrite_str(const JDoc *d, int node, Buf *out, Buf *scratch) {
    const JNode *x = &d->n[node];
    if (!x->esc) {
        /* No escapes means no quote, backslash or control character: the span as it is. */
        buf_putc(out, '"');
        buf_put(out, x->s, x->len);
        buf_putc(out, '"');
        return;
    }
    const char *s;
    size_t n;
    jtext(d, node, scratch, &s, &n);
    /* `scratch` is reused by nested calls only after this write completes. */
    write_escaped(out, s, n);
}

/* The compact JSON orjson.dumps writes for the value orjson.loads reads from this node. */
static void jwrite(const JDoc *d, int node, Buf *out, Buf *scratch) {
    const JNode *x = &d->n[node];
    switch (x->t) {
    case J_NULL: buf_put(out, "null", 4); return;
    case J_FALSE: buf_put(out, "false", 5); return;
    case J_TRUE: buf_put(out, "true", 4); return;
    case J_INT:
    case J_FLOAT: buf_put(out, x->s, x->len); return;
    case J_STR: jwrite_str(d, node, out, scratch); return;
    case J_ARR: {
        buf_putc(out, '[');
        int first = 1;
        for (int c = x->first; c >= 0; c = d->n[c].next) {
            if (!first) buf_putc(out, ',');
            first = 0;
            jwrite(d, c, out, scratch);
        }
        buf_putc(out, ']');
        return;
    }
    case J_OBJ: {
        buf_putc(out, '{');
        int first = 1;
        for (int k = x->first; k >= 0; k = d->n[d->n[k].next].next) {
            if (!first) buf_putc(out, ',');
            first = 0;
            jwrite_str(d, k, out, scratch);
            buf_putc(out, ':');
            jwrite(d, d->n[k].next, out, scratch);
        }
        buf_putc(out, '}');
        return;
    }
    }
}

/* Python's truth value of the parsed value. */
static int jtruthy(const JDoc *d, int node) {
    const JNode *x = &d->n[node];
    switch (x->t) {
    case J_NULL:
    case J_FALSE: return 0;
    case J_TRUE: return 1;
    case J_INT: return x->v.i != 0;
    case J_FLOAT: return x->v.d != 0.0;
    case J_STR: return x->len > 0;
    default: return x->len > 0;
    }
}

/* The value of `key` in object `obj`, or -1. */
static int jget(const JDoc *d, int obj, const char *key) {
    if (obj < 0 || d->n[obj].t != J_OBJ) return -1;
    size_t kn = strlen(key);
    for (int k = d->n[obj].first; k >= 0; k = d->n[d->n[k].next].next) {
        const JNode *x = &d->n[k];
        if (!x->esc) {
            if (x->len == kn && memcmp(x->s, key, kn) == 0) return x->next;
        } else {
            Buf tmp = {0};
            unescape(x->s, x->len, &tmp);
            int same = tmp.n == kn && memcmp(tmp.p, key, kn) == 0;
            buf_free(&tmp);
            if (same) return x->next;
        }
    }
    return -1;
}

/* Python's == between two parsed values (1 == 1.0 == True, dicts regardless of order). */
static int jeq(const JDoc *a, int x, const JDoc *b, int y) {
    const JNode *p = &a->n[x], *q = &b->n[y];
    int pnum = p->t == J_FALSE || p->t == J_TRUE || p->t == J_INT || p->t == J_FLOAT;
    int qnum = q->t == J_FALSE || q->t == J_TRUE || q->t == J_INT || q->t == J_FLOAT;
    if (pnum || qnum) {
        if (!(pnum && qnum)) return 0;
        int pf = p->t == J_FLOAT, qf = q->t == J_FLOAT;
        long long pi = p->t == J_INT ? p->v.i : p->t == J_TRUE;
        long long qi = q->t == J_INT ? q->v.i : q->t == J_TRUE;
        if (pf && qf) return p->v.d == q->v.d;
        if (!pf && !qf) return pi == qi;
        double f = pf ? p->v.d : q->v.d;
        long long i = pf ? qi : pi;
        if (f != floor(f) || f < -9223372036854775808.0 || f >= 9223372036854775808.0) return 0;
        return (long long)f == i;
    }
    if (p->t != q->t) return 0;
    switch (p->t) {
    case J_NULL: return 1;
    case J_STR: {
        if (!p->esc && !q->esc) return p->len == q->len && memcmp(p->s, q->s, p->len) == 0;
        Buf s1 = {0}, s2 = {0};
        unescape(p->s, p->len, &s1);
        unescape(q->s, q->len, &s2);
        int same = s1.n == s2.n && (s1.n == 0 || memcmp(s1.p, s2.p, s1.n) == 0);
        buf_free(&s1);
        buf_free(&s2);
        return same;
    }
    case J_ARR: {
        if (p->len != q->len) return 0;
        for (int c = p->first, e = q->first; c >= 0; c = a->n[c].next, e = b->n[e].next)
            if (!jeq(a, c, b, e)) return 0;
        return 1;
    }
    case J_OBJ: {
        if (p->len != q->len) return 0;
        Buf key = {0};
        int same = 1;
        for (int k = p->first; k >= 0 && same; k = a->n[a->n[k].next].next) {
            const char *s;
            size_t n;
            jtext(a, k, &key, &s, &n);
            /* find the same key in q */
            int found = -1;
            Buf tmp = {0};
            for (int m = q->first; m >= 0; m = b->n[b->n[m].next].next) {
                const char *t;
                size_t tn;
                jtext(b, m, &tmp, &t, &tn);
                if (tn == n && (n == 0 || memcmp(t, s, n) == 0)) {
                    found = b->n[m].next;
                    break;
                }
            }
            buf_free(&tmp);
            if (found < 0 || !jeq(a, a->n[k].next, b, found)) same = 0;
        }
        buf_free(&key);
        return same;
    }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * SHA-256: OpenSSL's (loaded by Python's hashlib already) when it can be found, else this one.
 */
typedef struct {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t fill;
} Sha;

static const uint32_t SHA_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
static void sha_block(Sha *c, const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + SHA_K[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g; g = f; f = e; e = d + t1; d = cc; cc = b; b = a; a = t1 + t2;
    }
    c->h[0] += a; c->h[1] += b; c->h[2] += cc; c->h[3] += d;
    c->h[4] += e; c->h[5] += f; c->h[6] += g; c->h[7] += h;
}
static void sha_init(Sha *c) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof iv);
    c->len = 0;
    c->fill = 0;
}
static void sha_update(Sha *c, const unsigned char *p, size_t n) {
    c->len += n;
    while (n) {
        size_t take = 64 - c->fill < n ? 64 - c->fill : n;
        if (c->fill == 0 && n >= 64) {
            sha_block(c, p);
            p += 64;
            n -= 64;
            continue;
        }
        memcpy(c->buf + c->fill, p, take);
        c->fill += take;
        p += take;
        n -= take;
        if (c->fill == 64) {
            sha_block(c, c->buf);
            c->fill = 0;
        }
    }
}
static void sha_final(Sha *c, unsigned char out[32]) {
    uint64_t bits = c->len * 8;
    unsigned char pad = 0x80, zero = 0;
    sha_update(c, &pad, 1);
    while (c->fill != 56) sha_update(c, &zero, 1);
    unsigned char l[8];
    for (int i = 0; i < 8; i++) l[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha_update(c, l, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(c->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(c->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)c->h[i];
    }
}

/* The chain link: sha256(previous hash in hex + the record's text) in hex (models.Event). */
static void chain_hash(const char prev[64], const char *raw, size_t n, Buf *scratch, char out[65]) {
    unsigned char md[32];
    if (openssl_sha256) {
        buf_clear(scratch);
        buf_put(scratch, prev, 64);
        buf_put(scratch, raw, n);
        openssl_sha256((const unsigned char *)scratch->p, scratch->n, md);
    } else {
        Sha c;
        sha_init(&c);
        sha_update(&c, (const unsigned char *)prev, 64);
        sha_update(&c, (const unsigned char *)raw, n);
        sha_final(&c, md);
    }
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = 0;
}

/* ---------------------------------------------------------------------------------------------
 * Python numbers as the converter computes them: an int stays an int (its JSON has no ".0").
 */
typedef struct {
    int is_int;
    long long i;
    double d;
} Num;

static inline double num_f(Num n) { return n.is_int ? (double)n.i : n.d; }
static Num num_int(long long i) { Num n = {1, i, 0.0}; return n; }
static Num num_float(double d) { Num n = {0, 0, d}; return n; }
static int num_add(Num a, Num b, Num *out) {
    if (a.is_int && b.is_int) {
        if (__builtin_add_overflow(a.i, b.i, &out->i)) return -1;
        out->is_int = 1;
        return 0;
    }
    *out = num_float(num_f(a) + num_f(b));
    return 0;
}
/* The text orjson writes for the number; -1 where it would differ from Python's repr. */
static int num_text(Num n, Buf *out) {
    if (n.is_int) {
        buf_int(out, n.i);
        return 0;
    }
    if (!isfinite(n.d)) return -1;
    char *r = PyOS_double_to_string(n.d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!r) {
        PyErr_Clear();
        return -1;
    }
    int ok = strchr(r, 'e') == NULL;
    if (ok) buf_puts(out, r);
    PyMem_Free(r);
    return ok ? 0 : -1;
}
static Num node_num(const JDoc *d, int node) {
    const JNode *x = &d->n[node];
    if (x->t == J_INT) return num_int(x->v.i);
    if (x->t == J_TRUE) return num_int(1);
    if (x->t == J_FALSE) return num_int(0);
    return num_float(x->v.d);
}
static int is_number(const JDoc *d, int node) {
    uint8_t t = d->n[node].t;
    return t == J_INT || t == J_FLOAT || t == J_TRUE || t == J_FALSE;
}

/* ---------------------------------------------------------------------------------------------
 * Ordered maps of variable name -> compact JSON text of its value (a Python dict's order).
 */
typedef struct {
    char *name;
    size_t nlen;
    Buf val;
    int tclass;
} VarEntry;

typedef struct {
    VarEntry *e;
    size_t n, cap;
} VarMap;

static long vm_find(const VarMap *m, const char *name, size_t nlen) {
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].nlen == nlen && memcmp(m->e[i].name, name, nlen) == 0) return (long)i;
    return -1;
}
static void vm_set(VarMap *m, const char *name, size_t nlen, const char *val, size_t vlen, int tclass) {
    long at = vm_find(m, name, nlen);
    if (at < 0) {
        if (m->n == m->cap) {
            m->cap = m->cap ? m->cap * 2 : 16;
            m->e = realloc(m->e, sizeof(VarEntry) * m->cap);
            if (!m->e) abort();
        }
        VarEntry *e = &m->e[m->n++];
        e->name = malloc(nlen + 1);
        if (!e->name) abort();
        memcpy(e->name, name, nlen);
        e->name[nlen] = 0;
        e->nlen = nlen;
        memset(&e->val, 0, sizeof e->val);
        at = (long)m->n - 1;
    }
    buf_set(&m->e[at].val, val, vlen);
    m->e[at].tclass = tclass;
}
static void vm_clear(VarMap *m) {
    for (size_t i = 0; i < m->n; i++) {
        free(m->e[i].name);
        buf_free(&m->e[i].val);
    }
    m->n = 0;
}
static void vm_free(VarMap *m) {
    vm_clear(m);
    free(m->e);
    m->e = NULL;
    m->cap = 0;
}
static void vm_json(const VarMap *m, Buf *out) {
    buf_putc(out, '{');
    for (size_t i = 0; i < m->n; i++) {
        if (i) buf_putc(out, ',');
        write_escaped(out, m->e[i].name, m->e[i].nlen);
        buf_putc(out, ':');
        buf_put(out, m->e[i].val.p, m->e[i].val.n);
    }
    buf_putc(out, '}');
}

/* ---------------------------------------------------------------------------------------------
 * The import: converter state (rlm_native.Converter), writer state (event_rows.WriterState),
 * and the row being built.
 */
#define N_COLS 36
enum {
    C_SESSION, C_SEQ, C_KIND, C_SOURCE_TYPE, C_TS, C_LINE, C_STEP, C_STEP_POS, C_DEPTH, C_AGENT,
    C_PARENT, C_CHILD, C_TOOL, C_PAIR_ID, C_PAIR_SEQ, C_PAIR_DURATION, C_DURATION, C_COST,
    C_COST_UNPRICED, C_TOKENS, C_REWARD, C_IS_ERROR, C_FAIL_STREAK, C_PAYLOAD, C_RAW, C_STEP_STATE,
    C_STATE_CHANGE, C_HASH, C_PREV_HASH, C_COST_TOTAL, C_TOKENS_TOTAL, C_ERRORS_TOTAL, C_ELAPSED,
    C_REWARD_TOTAL, C_STEPS_TOTAL, C_KIND_COUNTS
};

/* One Event row; text columns own their bytes so that a call can wait for its response. */
typedef struct {
    long long seq, line, step, step_pos, depth, pair_seq, tokens, fail_streak, tokens_total,
        errors_total, steps_total;
    int has_step, has_step_pos, has_pair_seq, has_pair_duration, has_duration, has_tokens,
        has_reward, has_ts, is_error, has_step_state, has_state_change;
    double pair_duration, duration, reward, elapsed, reward_total;
    const char *kind, *source_type;
    char ts[27];
    Buf parent, child, tool, pair_id, payload, raw, step_state, state_change, kind_counts;
    char hash[65], prev_hash[65];
} Row;

static void row_free(Row *r) {
    buf_free(&r->parent); buf_free(&r->child); buf_free(&r->tool); buf_free(&r->pair_id);
    buf_free(&r->payload); buf_free(&r->raw); buf_free(&r->step_state);
    buf_free(&r->state_change); buf_free(&r->kind_counts);
}

/* The canonical kinds of rlm-code's event types (rlm_native.KINDS). */
static const char *const TYPES[][2] = {
    {"session_start", "session_start"}, {"session_end", "session_end"},
    {"step_start", "step_start"},       {"step_action", "action"},
    {"step_result", "result"},          {"step_end", "step_end"},
    {"state_snapshot", "state"},        {"memory_update", "memory_update"},
    {"variable_update", "variable_update"}, {"llm_request", "llm_call"},
    {"llm_response", "llm_response"},   {"child_spawn", "child_spawn"},
    {"child_result", "child_result"},   {"final_detected", "final"},
    {"checkpoint", "checkpoint"},       {"error", "error"},
};
enum {
    T_SESSION_START, T_SESSION_END, T_STEP_START, T_ACTION, T_RESULT, T_STEP_END, T_STATE,
    T_MEMORY, T_VARIABLE, T_LLM_REQUEST, T_LLM_RESPONSE, T_CHILD_SPAWN, T_CHILD_RESULT, T_FINAL,
    T_CHECKPOINT, T_ERROR, N_TYPES
};

/* StepState fields in rlm_native.STEP_DEFAULTS order. */
enum {
    S_STEP, S_TIMESTAMP, S_ACTION_TYPE, S_ACTION_CODE, S_ACTION_RATIONALE, S_SUCCESS, S_OUTPUT,
    S_ERROR, S_REWARD, S_CUMULATIVE, S_DURATION, S_TOKENS, S_RAW_ACTION, S_RAW_OBSERVATION, N_STEP
};
static const char *const STEP_NAMES[N_STEP] = {
    "step", "timestamp", "action_type", "action_code", "action_rationale", "success", "output",
    "error", "reward", "cumulative_reward", "duration_ms", "tokens_used", "raw_action",
    "raw_observation"};

typedef struct {
    int has[N_STEP];
    Buf text[N_STEP]; /* compact JSON of each field's value */
    int success, error_truthy;
    Num reward, cumulative;
    long long tokens;
} StepAcc;

typedef struct {
    char pair_id[32];
    Buf model;
} LlmOpen;

typedef struct {
    char *key; /* "family|pair_id" */
    long long seq;
    int has_ts, live;
    double ts_ms;
    Row *held; /* the call's row while it waits for its response, or NULL once written */
} OpenPair;

typedef struct {
    long long seq;
    int has_step_pos;
    long long step_pos;
    Buf variables, memory;
    long long steps;
    Num reward;
} Keyframe;

typedef struct {
    Buf name;
    long long seq;
    int has_step_pos;
    long long step_pos;
    char created_at[33];
    int has_created_at;
} CheckpointOut;

typedef struct {
    /* where */
    sqlite3 *db;
    sqlite3_stmt *insert, *update_pair;
    long long session_id;
    const char *why;   /* why the fast path stopped */
    long long why_line;
    /* converter */
    StepAcc step;
    int step_tokens_counted;
    LlmOpen *llm_open;
    size_t llm_open_n, llm_open_cap, llm_open_head;
    long long llm_counter;
    Num cumulative;
    long long emitted, steps;
    VarMap conv_vars;
    int has_conv_memory;
    Buf conv_memory;
    /* meta */
    Buf source_session_id, run_id, task, environment, model, final_answer;
    char started_at[33], ended_at[33];
    int has_started_at, has_ended_at, completed; /* completed: -1 None, 0, 1 */
    int has_total_reward;
    double total_reward;
    CheckpointOut *checkpoints;
    size_t n_checkpoints, cap_checkpoints;
    /* writer */
    long long next_seq, tokens_total, errors_total, steps_total, step_errors, step_successes;
    char head[65];
    int has_first_ts;
    double first_ts_ms, last_ts_ms, elapsed_ms;
    Num reward_total;
    const char *kind_names[N_TYPES];
    long long kind_counts[N_TYPES];
    int n_kinds;
    /* Open calls in the order Python's dict keeps them (answered ones stay, dead, until the
     * table is compacted), indexed by a hash of their key. */
    OpenPair *pairs;
    size_t n_pairs, cap_pairs, n_live, n_held;
    int32_t *slots;
    size_t n_slots;
    char errmsg[256];
    /* PostgreSQL: rows go out as binary COPY data through `write` (no database handle here);
     * calls answered after their row went out are updated once the COPY is over. */
    int pg;
    PyObject *write;
    Buf copy;
    long long (*updates)[3]; /* call seq, response seq, duration bits (or -1 for none) */
    double *update_durations;
    size_t n_updates, cap_updates;
    VarMap vars;
    int has_memory;
    Buf memory;
    int state_dirty;
    long long last_keyframe_seq;
    Buf *models;
    size_t n_models, cap_models;
    Keyframe *keyframes;
    size_t n_keyframes, cap_keyframes;
    /* scratch */
    JDoc doc, old;
    Buf s1, s2, s3, hashbuf;
    Row row;
} Import;

#define BAIL(im, msg) do { (im)->why = (msg); return -1; } while (0)

/* text(value) of rlm_native: None is "", anything else stays as it is (compact JSON). */
static void text_json(const JDoc *d, int node, Buf *out, Buf *scratch) {
    buf_clear(out);
    if (node < 0 || d->n[node].t == J_NULL) {
        buf_put(out, "\"\"", 2);
        return;
    }
    jwrite(d, node, out, scratch);
}

/* str(text(value)): a string's text, "" for none; any other type stops the fast path. */
static int str_text(Import *im, const JDoc *d, int node, Buf *out) {
    buf_clear(out);
    if (node < 0 || d->n[node].t == J_NULL) return 0;
    if (d->n[node].t != J_STR) BAIL(im, "a text field holds another type");
    const char *s;
    size_t n;
    jtext(d, node, &im->s3, &s, &n);
    buf_put(out, s, n);
    return 0;
}

/* Byte length of the first `limit` code points of UTF-8 text (Python's s[:limit]). */
static size_t utf8_prefix(const char *s, size_t n, size_t limit) {
    size_t count = 0, i = 0;
    for (; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (count == limit) return i;
            count++;
        }
    }
    return n;
}

/* _field_number: None when absent, the number as it is, a bool as an int; other types would
 * be a problem on the line. */
static int field_number(Import *im, const JDoc *d, int data, const char *name, int *present, Num *out) {
    int node = jget(d, data, name);
    *present = 0;
    if (node < 0) return 0;
    if (!is_number(d, node)) BAIL(im, "a numeric field holds another type");
    *present = 1;
    *out = node_num(d, node);
    return 0;
}

/* Python's `old == new` for a stored compact text and a parsed node. */
static int text_equals_node(Import *im, const Buf *old, const JDoc *d, int node, const Buf *new_text) {
    if (old->n == new_text->n && memcmp(old->p, new_text->p, old->n) == 0) return 1;
    int root = jparse(&im->old, old->p, old->n);
    if (root < 0) return 0;
    return jeq(&im->old, root, d, node);
}

static void close_step_field(StepAcc *st, int f, const char *text, size_t n) {
    buf_set(&st->text[f], text, n);
    st->has[f] = 1;
}

static void step_reset(StepAcc *st) {
    for (int f = 0; f < N_STEP; f++) {
        st->has[f] = 0;
        buf_clear(&st->text[f]);
    }
    st->success = st->error_truthy = 0;
}

/* _legacy_text: what rlm-code reads from a step_end in the legacy action/observation shape. */
static int legacy_text(const JDoc *d, int f, int action, int observation) {
    int v;
    switch (f) {
    case S_ACTION_TYPE: return jget(d, action, "action");
    case S_ACTION_CODE: return jget(d, action, "code");
    case S_ACTION_RATIONALE:
        v = jget(d, action, "reasoning");
        return v >= 0 ? v : jget(d, action, "rationale");
    case S_OUTPUT:
        v = jget(d, observation, "output");
        return v >= 0 ? v : jget(d, observation, "stdout");
    default:
        v = jget(d, observation, "error");
        return v >= 0 ? v : jget(d, observation, "stderr");
    }
}

typedef struct {
    int kind_index, data, stamp, has_ts, has_step, has_duration, failed; /* failed: -1 None */
    long long step;
    Num duration;
    double ts_ms;
    char ts_text[27];
    char stamp_text[33];
    int has_tokens, has_reward, has_cumulative, is_error;
    long long tokens;
    Num reward, cumulative;
    int has_step_state, has_state_change;
} Ev;

static int days_in_month(int y, int m) {
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return dm[m - 1];
}
static long long days_from_civil(long long y, unsigned m, unsigned d) {
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}
static int digits(const char *s, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* rlm-code's timestamp shape "2026-11-22T05:47:01.346935+00:00" (rlm_native's first branch of
 * parse_timestamp_text): the instant in ms as Python's datetime.timestamp() * 1000 computes it,
 * and the naive UTC text Django stores. Any other shape stops the fast path. */
static int parse_stamp(Import *im, const char *s, size_t n, Ev *ev) {
    if (n != 32 || memcmp(s + 26, "+00:00", 6) != 0 || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
        s[13] != ':' || s[16] != ':' || s[19] != '.' || memcmp(s + 20, "000000", 6) == 0)
        BAIL(im, "timestamp not in rlm-code's shape");
    int y, mo, d, h, mi, se, us;
    if (digits(s, 4, &y) || digits(s + 5, 2, &mo) || digits(s + 8, 2, &d) || digits(s + 11, 2, &h) ||
        digits(s + 14, 2, &mi) || digits(s + 17, 2, &se) || digits(s + 20, 6, &us))
        BAIL(im, "timestamp digits");
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 59)
        BAIL(im, "timestamp out of range");
    long long days = days_from_civil(y, (unsigned)mo, (unsigned)d);
    long long micros = ((days * 86400 + h * 3600 + mi * 60 + se) * 1000000LL) + us;
    /* Python divides the exact microseconds; a double holds them exactly only up to 2**53
     * (years 1685 to 2255): beyond, the result could differ in its last bit. */
    if (micros > (1LL << 53) || micros < -(1LL << 53)) BAIL(im, "timestamp beyond 2**53 microseconds");
    /* timedelta.total_seconds(): the microseconds over 10**6, rounded once; then * 1000.0. */
    ev->ts_ms = ((double)micros / 1e6) * 1000.0;
    ev->has_ts = 1;
    memcpy(ev->ts_text, s, 10);
    ev->ts_text[10] = ' ';
    memcpy(ev->ts_text + 11, s + 11, 15);
    ev->ts_text[26] = 0;
    memcpy(ev->stamp_text, s, 32);
    ev->stamp_text[32] = 0;
    return 0;
}

/* step_end's variables and memory_notes as a state change (rlm_native.state_change_of). */
static int state_change_of(Import *im, const JDoc *d, int data, Row *row, Ev *ev) {
    int variables = jget(d, data, "variables");
    int notes = jget(d, data, "memory_notes");
    if (variables >= 0 && d->n[variables].t == J_NULL) variables = -1;
    if (notes >= 0 && d->n[notes].t == J_NULL) notes = -1;
    if (variables >= 0 && d->n[variables].t != J_OBJ) BAIL(im, "variables not an object");
    if (notes >= 0 && d->n[notes].t != J_ARR) BAIL(im, "memory_notes not an array");
    int have_changed = 0, replace = 0;
    Buf *changed = &im->s1; /* "name":value,... of the changed variables */
    buf_clear(changed);
    Buf value = {0}, name = {0};
    if (variables >= 0) {
        /* current.keys() <= variables.keys(): every current name is among the new ones. */
        size_t found = 0;
        for (int k = d->n[variables].first; k >= 0; k = d->n[d->n[k].next].next) {
            const char *s;
            size_t n;
            jtext(d, k, &name, &s, &n);
            if (vm_find(&im->conv_vars, s, n) >= 0) found++;
        }
        if (found < im->conv_vars.n) {
            replace = 1;
            have_changed = 1;
        }
        VarMap next = {0};
        for (int k = d->n[variables].first; k >= 0; k = d->n[d->n[k].next].next) {
            int v = d->n[k].next;
            const char *s;
            size_t n;
            jtext(d, k, &name, &s, &n);
            Buf keyname = {0};
            buf_put(&keyname, s, n);
            buf_clear(&value);
            jwrite(d, v, &value, &im->s3);
            int tclass = TYPE_CLASS[d->n[v].t];
            int differs = 1;
            if (!replace) {
                long at = vm_find(&im->conv_vars, keyname.p, keyname.n);
                if (at >= 0 && im->conv_vars.e[at].tclass == tclass &&
                    text_equals_node(im, &im->conv_vars.e[at].val, d, v, &value))
                    differs = 0;
            }
            if (replace || differs) {
                if (changed->n) buf_putc(changed, ',');
                write_escaped(changed, keyname.p, keyname.n);
                buf_putc(changed, ':');
                buf_put(changed, value.p, value.n);
                have_changed = 1;
                if (!replace) vm_set(&im->vars, keyname.p, keyname.n, value.p, value.n, tclass);
            }
            vm_set(&next, keyname.p, keyname.n, value.p, value.n, tclass);
            buf_free(&keyname);
        }
        if (replace) {
            vm_clear(&im->vars);
            for (size_t i = 0; i < next.n; i++)
                vm_set(&im->vars, next.e[i].name, next.e[i].nlen, next.e[i].val.p, next.e[i].val.n, next.e[i].tclass);
        }
        vm_free(&im->conv_vars);
        im->conv_vars = next;
    }
    int have_notes = 0;
    if (notes >= 0) {
        buf_clear(&value);
        jwrite(d, notes, &value, &im->s3);
        int same = im->has_conv_memory && text_equals_node(im, &im->conv_memory, d, notes, &value);
        if (!same) {
            have_notes = 1;
            buf_set(&im->conv_memory, value.p, value.n);
            im->has_conv_memory = 1;
            buf_set(&im->memory, value.p, value.n);
            im->has_memory = 1;
        }
    }
    if (have_changed || have_notes || replace) {
        Buf *out = &row->state_change;
        buf_clear(out);
        buf_putc(out, '{');
        if (have_notes) {
            buf_puts(out, "\"memory\":");
            buf_put(out, im->conv_memory.p, im->conv_memory.n);
        }
        if (have_changed) {
            if (have_notes) buf_putc(out, ',');
            buf_puts(out, "\"variables\":{");
            buf_put(out, changed->p, changed->n);
            buf_putc(out, '}');
        }
        if (replace) buf_puts(out, ",\"replace\":true");
        buf_putc(out, '}');
        ev->has_state_change = 1;
        im->state_dirty = 1;
    }
    buf_free(&value);
    buf_free(&name);
    return 0;
}

/* raw_action / raw_observation of a closing step, when its events did not bring it: the
 * step_end's own object, else the legacy action/observation object, else {}. */
static void raw_dict_field(Import *im, const JDoc *d, int data, int f, int fallback) {
    StepAcc *st = &im->step;
    if (st->has[f]) return;
    Buf *t = &im->s2;
    int v = jget(d, data, STEP_NAMES[f]);
    buf_clear(t);
    if (v >= 0 && d->n[v].t == J_OBJ) jwrite(d, v, t, &im->s3);
    else if (fallback >= 0) jwrite(d, fallback, t, &im->s3);
    else buf_put(t, "{}", 2);
    close_step_field(st, f, t->p, t->n);
}

/* close_step: the StepState merged from the step's events, a step_end's own fields filling in
 * what they did not bring (rlm_native.Converter.close_step). */
static int close_step(Import *im, const JDoc *d, int data, Ev *ev, Row *row) {
    StepAcc *st = &im->step;
    Buf *t = &im->s2;
    if (!st->has[S_STEP]) {
        int v = jget(d, data, "step");
        long long step;
        if (v < 0 || d->n[v].t == J_NULL) {
            step = ev->has_step ? ev->step : 0;
        } else if (d->n[v].t == J_INT) {
            step = d->n[v].v.i;
        } else {
            BAIL(im, "data.step not an integer");
        }
        buf_clear(t);
        buf_int(t, step);
        close_step_field(st, S_STEP, t->p, t->n);
        int ts = jget(d, data, "timestamp");
        buf_clear(t);
        if (ts >= 0 && jtruthy(d, ts)) jwrite(d, ts, t, &im->s3);
        else if (ev->stamp >= 0) write_escaped(t, ev->stamp_text, 32);
        else buf_put(t, "\"\"", 2);
        close_step_field(st, S_TIMESTAMP, t->p, t->n);
    }
    int action = jget(d, data, "action"), observation = jget(d, data, "observation");
    int fa = action >= 0 && d->n[action].t == J_OBJ ? action : -1;
    int fo = observation >= 0 && d->n[observation].t == J_OBJ ? observation : -1;
    static const int TEXTS[] = {S_ACTION_TYPE, S_ACTION_CODE, S_ACTION_RATIONALE, S_OUTPUT, S_ERROR};
    for (int i = 0; i < 5; i++) {
        int f = TEXTS[i];
        if (st->has[f]) continue;
        int v = jget(d, data, STEP_NAMES[f]);
        if (v < 0) v = legacy_text(d, f, fa, fo);
        text_json(d, v, t, &im->s3);
        close_step_field(st, f, t->p, t->n);
        if (f == S_ERROR) st->error_truthy = v >= 0 && jtruthy(d, v);
    }
    if (!st->has[S_SUCCESS]) {
        int v = jget(d, data, "success");
        st->success = v >= 0 && jtruthy(d, v);
        close_step_field(st, S_SUCCESS, st->success ? "true" : "false", st->success ? 4 : 5);
    }
    int present;
    Num n;
    if (!st->has[S_REWARD]) {
        if (field_number(im, d, data, "reward", &present, &n)) return -1;
        st->reward = present ? n : num_float(0.0);
        buf_clear(t);
        if (num_text(st->reward, t)) BAIL(im, "reward text");
        close_step_field(st, S_REWARD, t->p, t->n);
    }
    if (!st->has[S_CUMULATIVE]) {
        if (field_number(im, d, data, "cumulative_reward", &present, &n)) return -1;
        if (present) st->cumulative = n;
        else if (num_add(im->cumulative, st->reward, &st->cumulative)) BAIL(im, "cumulative overflow");
        buf_clear(t);
        if (num_text(st->cumulative, t)) BAIL(im, "cumulative_reward text");
        close_step_field(st, S_CUMULATIVE, t->p, t->n);
    }
    if (!st->has[S_DURATION]) {
        if (field_number(im, d, data, "duration_ms", &present, &n)) return -1;
        if (!present) n = ev->has_duration && num_f(ev->duration) != 0.0 ? ev->duration : num_float(0.0);
        buf_clear(t);
        if (num_text(n, t)) BAIL(im, "duration text");
        close_step_field(st, S_DURATION, t->p, t->n);
    }
    if (!st->has[S_TOKENS]) {
        if (field_number(im, d, data, "tokens_used", &present, &n)) return -1;
        if (present && !n.is_int) BAIL(im, "tokens_used not an integer");
        st->tokens = present ? n.i : 0;
        buf_clear(t);
        buf_int(t, st->tokens);
        close_step_field(st, S_TOKENS, t->p, t->n);
    }
    raw_dict_field(im, d, data, S_RAW_ACTION, fa);
    raw_dict_field(im, d, data, S_RAW_OBSERVATION, fo);
    if (!im->step_tokens_counted) {
        long long base = ev->has_tokens ? ev->tokens : 0;
        if (__builtin_add_overflow(base, st->tokens, &ev->tokens)) BAIL(im, "tokens overflow");
        ev->has_tokens = 1;
    }
    im->step_tokens_counted = 0;
    Buf *out = &row->step_state;
    buf_clear(out);
    buf_putc(out, '{');
    for (int f = 0; f < N_STEP; f++) {
        if (f) buf_putc(out, ',');
        buf_putc(out, '"');
        buf_puts(out, STEP_NAMES[f]);
        buf_put(out, "\":", 2);
        buf_put(out, st->text[f].p, st->text[f].n);
    }
    buf_putc(out, '}');
    ev->has_step_state = 1;
    ev->has_reward = 1;
    ev->reward = st->reward;
    ev->has_cumulative = 1;
    ev->cumulative = st->cumulative;
    ev->failed = !st->success;
    im->cumulative = st->cumulative;
    im->steps++;
    /* the step's error text decides step_errors (event_rows: step_state.get("error")) */
    return 0;
}

static void held_free(Row *r) {
    row_free(r);
    free(r);
}

static int bind_row(Import *im, Row *r);

/* A row whose seq comes before `seq` must be written (the call it waits for is answered or
 * given up on); rows are written as soon as nothing of theirs can change. */
static int copy_row(Import *im, Row *r);
static int write_row(Import *im, Row *r) {
    if (im->pg) return copy_row(im, r);
    if (bind_row(im, r)) return -1;
    if (sq.step(im->insert) != SQLITE_DONE) {
        /* copied now: the next call on the connection may free SQLite's message */
        snprintf(im->errmsg, sizeof im->errmsg, "%s", sq.errmsg(im->db));
        im->why = im->errmsg;
        sq.reset(im->insert);
        return -2;
    }
    sq.reset(im->insert);
    return 0;
}

static void bind_text_buf(sqlite3_stmt *st, int col, const Buf *b) {
    sq.bind_text(st, col, b->n ? b->p : "", (int)b->n, SQLITE_STATIC);
}

/* --- PostgreSQL binary COPY (the layout of ingest._copy_types, checked by copy_file) --- */
static void be16(Buf *b, int v) {
    char t[2] = {(char)(v >> 8), (char)v};
    buf_put(b, t, 2);
}
static void be32(Buf *b, long v) {
    char t[4] = {(char)(v >> 24), (char)(v >> 16), (char)(v >> 8), (char)v};
    buf_put(b, t, 4);
}
static void be64(Buf *b, unsigned long long v) {
    char t[8];
    for (int i = 0; i < 8; i++) t[i] = (char)(v >> (56 - 8 * i));
    buf_put(b, t, 8);
}
static void c_null(Buf *b) { be32(b, -1); }
static void c_int(Buf *b, long long v) { be32(b, 8); be64(b, (unsigned long long)v); }
static void c_float(Buf *b, double v) {
    unsigned long long u;
    memcpy(&u, &v, 8);
    be32(b, 8);
    be64(b, u);
}
static void c_bool(Buf *b, int v) { be32(b, 1); buf_putc(b, v ? 1 : 0); }
static void c_text(Buf *b, const char *s, size_t n) { be32(b, (long)n); buf_put(b, s, n); }
static void c_buf(Buf *b, const Buf *t) { c_text(b, t->p, t->n); }

/* The stored text "YYYY-MM-DD HH:MM:SS.ffffff" back to microseconds since 2000-01-01 UTC. */
static long long pg_micros(const char *ts) {
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0, us = 0;
    digits(ts, 4, &y); digits(ts + 5, 2, &mo); digits(ts + 8, 2, &d);
    digits(ts + 11, 2, &h); digits(ts + 14, 2, &mi); digits(ts + 17, 2, &se); digits(ts + 20, 6, &us);
    long long days = days_from_civil(y, (unsigned)mo, (unsigned)d) - 10957; /* 1970 -> 2000 */
    return (days * 86400 + h * 3600 + mi * 60 + se) * 1000000LL + us;
}

#define COPY_FLUSH (1 << 20)
static int copy_flush(Import *im) {
    if (!im->copy.n) return 0;
    PyObject *r = PyObject_CallFunction(im->write, "y#", im->copy.p, (Py_ssize_t)im->copy.n);
    buf_clear(&im->copy);
    if (!r) {
        im->why = "writing the COPY data failed";
        return -3;
    }
    Py_DECREF(r);
    return 0;
}

static int copy_row(Import *im, Row *r) {
    Buf *b = &im->copy;
    be16(b, N_COLS);
    c_int(b, im->session_id);
    c_int(b, r->seq);
    c_text(b, r->kind, strlen(r->kind));
    c_text(b, r->source_type, strlen(r->source_type));
    if (r->has_ts) c_int(b, pg_micros(r->ts)); else c_null(b);
    c_int(b, r->line);
    if (r->has_step) c_int(b, r->step); else c_null(b);
    if (r->has_step_pos) c_int(b, r->step_pos); else c_null(b);
    c_int(b, r->depth);
    c_text(b, "", 0); /* agent_id */
    c_buf(b, &r->parent);
    c_buf(b, &r->child);
    c_buf(b, &r->tool);
    c_buf(b, &r->pair_id);
    if (r->has_pair_seq) c_int(b, r->pair_seq); else c_null(b);
    if (r->has_pair_duration) c_float(b, r->pair_duration); else c_null(b);
    if (r->has_duration) c_float(b, r->duration); else c_null(b);
    c_null(b);     /* cost_usd */
    c_bool(b, 0);  /* cost_unpriced */
    if (r->has_tokens) c_int(b, r->tokens); else c_null(b);
    if (r->has_reward) c_float(b, r->reward); else c_null(b);
    c_bool(b, r->is_error);
    c_int(b, r->fail_streak);
    c_buf(b, &r->payload);
    c_buf(b, &r->raw);
    if (r->has_step_state) c_buf(b, &r->step_state); else c_null(b);
    if (r->has_state_change) c_buf(b, &r->state_change); else c_null(b);
    c_text(b, r->hash, 64);
    c_text(b, r->prev_hash, 64);
    c_float(b, 0.0); /* cost_total */
    c_int(b, r->tokens_total);
    c_int(b, r->errors_total);
    c_float(b, r->elapsed);
    c_float(b, r->reward_total);
    c_int(b, r->steps_total);
    c_buf(b, &r->kind_counts);
    return b->n >= COPY_FLUSH ? copy_flush(im) : 0;
}

static void add_update(Import *im, long long call_seq, long long response_seq, int has_duration, double duration) {
    if (im->n_updates == im->cap_updates) {
        im->cap_updates = im->cap_updates ? im->cap_updates * 2 : 64;
        im->updates = realloc(im->updates, sizeof *im->updates * im->cap_updates);
        im->update_durations = realloc(im->update_durations, sizeof(double) * im->cap_updates);
        if (!im->updates || !im->update_durations) abort();
    }
    im->updates[im->n_updates][0] = call_seq;
    im->updates[im->n_updates][1] = response_seq;
    im->updates[im->n_updates][2] = has_duration;
    im->update_durations[im->n_updates] = duration;
    im->n_updates++;
}

static int bind_row(Import *im, Row *r) {
    sqlite3_stmt *st = im->insert;
    int c = 1;
    sq.bind_int64(st, c++, im->session_id);
    sq.bind_int64(st, c++, r->seq);
    sq.bind_text(st, c++, r->kind, -1, SQLITE_STATIC);
    sq.bind_text(st, c++, r->source_type, -1, SQLITE_STATIC);
    if (r->has_ts) sq.bind_text(st, c++, r->ts, 26, SQLITE_STATIC);
    else sq.bind_null(st, c++);
    sq.bind_int64(st, c++, r->line);
    if (r->has_step) sq.bind_int64(st, c++, r->step); else sq.bind_null(st, c++);
    if (r->has_step_pos) sq.bind_int64(st, c++, r->step_pos); else sq.bind_null(st, c++);
    sq.bind_int64(st, c++, r->depth);
    sq.bind_text(st, c++, "", 0, SQLITE_STATIC); /* agent_id */
    bind_text_buf(st, c++, &r->parent);
    bind_text_buf(st, c++, &r->child);
    bind_text_buf(st, c++, &r->tool);
    bind_text_buf(st, c++, &r->pair_id);
    if (r->has_pair_seq) sq.bind_int64(st, c++, r->pair_seq); else sq.bind_null(st, c++);
    if (r->has_pair_duration) sq.bind_double(st, c++, r->pair_duration); else sq.bind_null(st, c++);
    if (r->has_duration) sq.bind_double(st, c++, r->duration); else sq.bind_null(st, c++);
    sq.bind_null(st, c++);        /* cost_usd */
    sq.bind_int64(st, c++, 0);    /* cost_unpriced */
    if (r->has_tokens) sq.bind_int64(st, c++, r->tokens); else sq.bind_null(st, c++);
    if (r->has_reward) sq.bind_double(st, c++, r->reward); else sq.bind_null(st, c++);
    sq.bind_int64(st, c++, r->is_error);
    sq.bind_int64(st, c++, r->fail_streak);
    bind_text_buf(st, c++, &r->payload);
    bind_text_buf(st, c++, &r->raw);
    if (r->has_step_state) bind_text_buf(st, c++, &r->step_state); else sq.bind_null(st, c++);
    if (r->has_state_change) bind_text_buf(st, c++, &r->state_change); else sq.bind_null(st, c++);
    sq.bind_text(st, c++, r->hash, 64, SQLITE_STATIC);
    sq.bind_text(st, c++, r->prev_hash, 64, SQLITE_STATIC);
    sq.bind_double(st, c++, 0.0); /* cost_total: rlm-code records carry no cost */
    sq.bind_int64(st, c++, r->tokens_total);
    sq.bind_int64(st, c++, r->errors_total);
    sq.bind_double(st, c++, r->elapsed);
    sq.bind_double(st, c++, r->reward_total);
    sq.bind_int64(st, c++, r->steps_total);
    bind_text_buf(st, c++, &r->kind_counts);
    return 0;
}

static uint64_t key_hash(const char *key) {
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *c = (const unsigned char *)key; *c; c++) h = (h ^ *c) * 1099511628211ULL;
    return h;
}

static OpenPair *find_pair(Import *im, const char *key, size_t *index) {
    if (!im->n_slots) return NULL;
    for (size_t at = (size_t)key_hash(key) & (im->n_slots - 1);; at = (at + 1) & (im->n_slots - 1)) {
        int32_t i = im->slots[at];
        if (i < 0) return NULL;
        if (im->pairs[i].live && strcmp(im->pairs[i].key, key) == 0) {
            *index = (size_t)i;
            return &im->pairs[i];
        }
    }
}

/* Drop answered calls from the array (keeping the order of the rest) and index it again. */
static void reindex_pairs(Import *im) {
    size_t kept = 0;
    for (size_t i = 0; i < im->n_pairs; i++) {
        if (im->pairs[i].live) im->pairs[kept++] = im->pairs[i];
        else free(im->pairs[i].key);
    }
    im->n_pairs = kept;
    size_t n = 64;
    while (n < 4 * kept + 4) n *= 2;
    free(im->slots);
    im->slots = malloc(sizeof(int32_t) * n);
    if (!im->slots) abort();
    for (size_t i = 0; i < n; i++) im->slots[i] = -1;
    im->n_slots = n;
    for (size_t i = 0; i < kept; i++) {
        size_t at = (size_t)key_hash(im->pairs[i].key) & (n - 1);
        while (im->slots[at] >= 0) at = (at + 1) & (n - 1);
        im->slots[at] = (int32_t)i;
    }
}

static void drop_pair(Import *im, size_t i) {
    im->pairs[i].live = 0;
    im->n_live--;
}

static size_t add_pair(Import *im, const char *key, long long seq, int has_ts, double ts_ms) {
    if (im->n_pairs == im->cap_pairs) {
        im->cap_pairs = im->cap_pairs ? im->cap_pairs * 2 : 16;
        im->pairs = realloc(im->pairs, sizeof(OpenPair) * im->cap_pairs);
        if (!im->pairs) abort();
    }
    if (2 * (im->n_pairs + 1) > im->n_slots) reindex_pairs(im);
    size_t i = im->n_pairs++;
    OpenPair *p = &im->pairs[i];
    p->key = strdup(key);
    if (!p->key) abort();
    p->seq = seq;
    p->has_ts = has_ts;
    p->ts_ms = ts_ms;
    p->live = 1;
    p->held = NULL;
    im->n_live++;
    size_t at = (size_t)key_hash(key) & (im->n_slots - 1);
    while (im->slots[at] >= 0) at = (at + 1) & (im->n_slots - 1);
    im->slots[at] = (int32_t)i;
    return i;
}

/* Calls wait (held in memory) for their response so that their pair columns are written with
 * them; past this many a waiting call is written as it is and updated when answered. */
#define MAX_HELD 64

static int kind_index_of(Import *im, const char *kind) {
    for (int i = 0; i < im->n_kinds; i++)
        if (im->kind_names[i] == kind) return i;
    im->kind_names[im->n_kinds] = kind;
    im->kind_counts[im->n_kinds] = 0;
    return im->n_kinds++;
}

static void keyframe(Import *im, long long seq, int has_step_pos, long long step_pos) {
    if (im->n_keyframes == im->cap_keyframes) {
        im->cap_keyframes = im->cap_keyframes ? im->cap_keyframes * 2 : 16;
        im->keyframes = realloc(im->keyframes, sizeof(Keyframe) * im->cap_keyframes);
        if (!im->keyframes) abort();
    }
    Keyframe *k = &im->keyframes[im->n_keyframes++];
    memset(k, 0, sizeof *k);
    k->seq = seq;
    k->has_step_pos = has_step_pos;
    k->step_pos = step_pos;
    vm_json(&im->vars, &k->variables);
    if (im->has_memory) buf_put(&k->memory, im->memory.p, im->memory.n);
    else buf_put(&k->memory, "[]", 2);
    k->steps = im->steps_total;
    k->reward = im->reward_total;
    im->last_keyframe_seq = seq;
    im->state_dirty = 0;
}

/* One record (an object the Python path would take without a problem) -> one row. */
static int process(Import *im, long long line, const char *text, size_t n) {
    JDoc *d = &im->doc;
    if (!valid_utf8((const unsigned char *)text, n)) BAIL(im, "invalid UTF-8");
    int rec = jparse(d, text, n);
    if (rec < 0) BAIL(im, d->why);
    if (d->n[rec].t != J_OBJ) BAIL(im, "not an object");
    Row *row = &im->row;
    Ev ev;
    memset(&ev, 0, sizeof ev);
    ev.failed = -1;
    ev.stamp = -1;

    int et = jget(d, rec, "event_type");
    if (et < 0 || d->n[et].t != J_STR || d->n[et].esc || d->n[et].len == 0) BAIL(im, "event_type");
    int type = -1;
    for (int i = 0; i < N_TYPES; i++)
        if (strlen(TYPES[i][0]) == d->n[et].len && memcmp(TYPES[i][0], d->n[et].s, d->n[et].len) == 0) {
            type = i;
            break;
        }
    if (type < 0) BAIL(im, "unknown event_type");
    if (type == T_SESSION_START && im->emitted) BAIL(im, "a second session in the file");

    /* base_event */
    int data = jget(d, rec, "data");
    if (data >= 0 && d->n[data].t != J_OBJ) BAIL(im, "data not an object");
    ev.data = data;
    int stamp = jget(d, rec, "timestamp");
    if (stamp >= 0 && d->n[stamp].t != J_NULL) {
        if (d->n[stamp].t != J_STR || d->n[stamp].esc) BAIL(im, "timestamp not text");
        if (parse_stamp(im, d->n[stamp].s, d->n[stamp].len, &ev)) return -1;
        ev.stamp = stamp;
    }
    int step = jget(d, rec, "step");
    if (step >= 0 && d->n[step].t != J_NULL) {
        if (d->n[step].t != J_INT) BAIL(im, "step not an integer");
        ev.has_step = 1;
        ev.step = d->n[step].v.i;
    }
    int run_id = jget(d, rec, "run_id");
    if (run_id >= 0 && d->n[run_id].t == J_STR && d->n[run_id].len && im->run_id.n == 0) {
        const char *s;
        size_t sn;
        jtext(d, run_id, &im->s3, &s, &sn);
        buf_set(&im->run_id, s, sn);
        if (im->source_session_id.n == 0) buf_set(&im->source_session_id, s, sn);
    }
    int duration = jget(d, rec, "duration_ms");
    if (duration >= 0) {
        if (!is_number(d, duration)) BAIL(im, "duration_ms not a number");
        ev.has_duration = 1;
        ev.duration = node_num(d, duration);
    }
    long long depth = 0;
    int depth_node = jget(d, rec, "depth");
    if (depth_node >= 0) {
        if (d->n[depth_node].t != J_INT) BAIL(im, "depth not an integer");
        depth = d->n[depth_node].v.i;
    }
    buf_clear(&row->parent);
    int parent = jget(d, rec, "parent_id");
    if (parent >= 0 && jtruthy(d, parent)) {
        if (d->n[parent].t != J_STR) BAIL(im, "parent_id not text");
        const char *s;
        size_t sn;
        jtext(d, parent, &im->s3, &s, &sn);
        buf_put(&row->parent, s, utf8_prefix(s, sn, 200));
    }

    buf_clear(&row->child);
    buf_clear(&row->tool);
    buf_clear(&row->pair_id);
    buf_clear(&row->payload);
    buf_clear(&row->state_change);
    buf_clear(&row->step_state);
    int payload_is_data = 1;
    StepAcc *st = &im->step;
    Buf *t = &im->s2;
    int present;
    Num num;

    switch (type) {
    case T_SESSION_START:
        if (str_text(im, d, jget(d, data, "task"), &im->task)) return -1;
        if (str_text(im, d, jget(d, data, "environment"), &im->environment)) return -1;
        if (str_text(im, d, jget(d, data, "model"), &im->model)) return -1;
        if (ev.has_ts && !im->has_started_at) {
            memcpy(im->started_at, ev.stamp_text, 33);
            im->has_started_at = 1;
        }
        break;
    case T_STEP_START: {
        if (!ev.has_step) {
            int v = jget(d, data, "step");
            if (v >= 0) {
                if (d->n[v].t != J_INT) BAIL(im, "data.step not an integer");
                ev.has_step = 1;
                ev.step = d->n[v].v.i;
            }
        }
        step_reset(st);
        buf_clear(t);
        buf_int(t, ev.has_step ? ev.step : 0);
        close_step_field(st, S_STEP, t->p, t->n);
        buf_clear(t);
        if (ev.stamp >= 0) write_escaped(t, ev.stamp_text, 32);
        else buf_put(t, "\"\"", 2);
        close_step_field(st, S_TIMESTAMP, t->p, t->n);
        im->step_tokens_counted = 0;
        break;
    }
    case T_ACTION: {
        int action = jget(d, data, "action");
        if (action >= 0 && d->n[action].t != J_OBJ) BAIL(im, "data.action not an object");
        text_json(d, jget(d, action, "action"), t, &im->s3);
        close_step_field(st, S_ACTION_TYPE, t->p, t->n);
        text_json(d, jget(d, action, "code"), t, &im->s3);
        close_step_field(st, S_ACTION_CODE, t->p, t->n);
        text_json(d, jget(d, data, "rationale"), t, &im->s3);
        close_step_field(st, S_ACTION_RATIONALE, t->p, t->n);
        buf_clear(t);
        if (action >= 0) jwrite(d, action, t, &im->s3);
        else buf_put(t, "{}", 2);
        close_step_field(st, S_RAW_ACTION, t->p, t->n);
        break;
    }
    case T_RESULT: {
        int obs = jget(d, data, "observation");
        if (obs >= 0 && d->n[obs].t != J_OBJ) BAIL(im, "data.observation not an object");
        int v = jget(d, data, "success");
        st->success = v >= 0 && jtruthy(d, v);
        close_step_field(st, S_SUCCESS, st->success ? "true" : "false", st->success ? 4 : 5);
        v = jget(d, obs, "output");
        if (v < 0) v = jget(d, obs, "stdout");
        text_json(d, v, t, &im->s3);
        close_step_field(st, S_OUTPUT, t->p, t->n);
        v = jget(d, obs, "error");
        if (v < 0) v = jget(d, obs, "stderr");
        text_json(d, v, t, &im->s3);
        close_step_field(st, S_ERROR, t->p, t->n);
        st->error_truthy = v >= 0 && jtruthy(d, v);
        if (field_number(im, d, data, "reward", &present, &num)) return -1;
        st->reward = present ? num : num_float(0.0);
        buf_clear(t);
        if (num_text(st->reward, t)) BAIL(im, "reward text");
        close_step_field(st, S_REWARD, t->p, t->n);
        if (field_number(im, d, data, "cumulative_reward", &present, &num)) return -1;
        if (present) st->cumulative = num;
        else if (num_add(im->cumulative, st->reward, &st->cumulative)) BAIL(im, "cumulative overflow");
        buf_clear(t);
        if (num_text(st->cumulative, t)) BAIL(im, "cumulative_reward text");
        close_step_field(st, S_CUMULATIVE, t->p, t->n);
        Num dur = ev.has_duration && num_f(ev.duration) != 0.0 ? ev.duration : num_float(0.0);
        buf_clear(t);
        if (num_text(dur, t)) BAIL(im, "duration text");
        close_step_field(st, S_DURATION, t->p, t->n);
        if (field_number(im, d, data, "tokens_used", &present, &num)) return -1;
        if (present && !num.is_int) BAIL(im, "tokens_used not an integer");
        st->tokens = present ? num.i : 0;
        buf_clear(t);
        buf_int(t, st->tokens);
        close_step_field(st, S_TOKENS, t->p, t->n);
        buf_clear(t);
        if (obs >= 0) jwrite(d, obs, t, &im->s3);
        else buf_put(t, "{}", 2);
        close_step_field(st, S_RAW_OBSERVATION, t->p, t->n);
        ev.has_tokens = 1;
        ev.tokens = st->tokens;
        ev.has_cumulative = 1;
        ev.cumulative = st->cumulative;
        ev.failed = !st->success;
        im->step_tokens_counted = 1;
        break;
    }
    case T_STEP_END: {
        if (close_step(im, d, data, &ev, row)) return -1;
        int error_truthy = st->error_truthy;
        step_reset(st);
        st->error_truthy = error_truthy; /* read below, when the row counts step errors */
        if (state_change_of(im, d, data, row, &ev)) return -1;
        /* The payload keeps only what neither the step nor the state change holds. */
        payload_is_data = 0;
        buf_putc(&row->payload, '{');
        int any = 0;
        for (int k = data >= 0 ? d->n[data].first : -1; k >= 0; k = d->n[d->n[k].next].next) {
            const char *s;
            size_t sn;
            jtext(d, k, &im->s3, &s, &sn);
            int kept = 0;
            for (int f = 0; f < N_STEP && !kept; f++)
                kept = strlen(STEP_NAMES[f]) == sn && memcmp(STEP_NAMES[f], s, sn) == 0;
            if (!kept) kept = (sn == 9 && memcmp(s, "variables", 9) == 0) || (sn == 12 && memcmp(s, "memory_notes", 12) == 0);
            if (kept) continue;
            if (any) buf_putc(&row->payload, ',');
            any = 1;
            jwrite_str(d, k, &row->payload, &im->s3);
            buf_putc(&row->payload, ':');
            jwrite(d, d->n[k].next, &row->payload, &im->s3);
        }
        buf_putc(&row->payload, '}');
        break;
    }
    case T_MEMORY: {
        int notes = jget(d, data, "notes");
        if (notes < 0 || d->n[notes].t != J_ARR) BAIL(im, "data.notes not an array");
        buf_clear(t);
        jwrite(d, notes, t, &im->s3);
        buf_set(&im->conv_memory, t->p, t->n);
        im->has_conv_memory = 1;
        buf_set(&im->memory, t->p, t->n);
        im->has_memory = 1;
        buf_puts(&row->state_change, "{\"memory\":");
        buf_put(&row->state_change, t->p, t->n);
        buf_putc(&row->state_change, '}');
        ev.has_state_change = 1;
        im->state_dirty = 1;
        break;
    }
    case T_VARIABLE: {
        int name = jget(d, data, "name");
        if (name < 0 || d->n[name].t != J_STR || d->n[name].len == 0) BAIL(im, "variable_update without a name");
        int preview = jget(d, data, "preview");
        buf_clear(t);
        if (preview >= 0) jwrite(d, preview, t, &im->s3);
        else buf_put(t, "\"\"", 2);
        int tclass = preview >= 0 ? TYPE_CLASS[d->n[preview].t] : 4;
        const char *s;
        size_t sn;
        jtext(d, name, &im->s1, &s, &sn);
        vm_set(&im->conv_vars, s, sn, t->p, t->n, tclass);
        vm_set(&im->vars, s, sn, t->p, t->n, tclass);
        buf_puts(&row->state_change, "{\"variables\":{");
        write_escaped(&row->state_change, s, sn);
        buf_putc(&row->state_change, ':');
        buf_put(&row->state_change, t->p, t->n);
        buf_put(&row->state_change, "}}", 2);
        ev.has_state_change = 1;
        im->state_dirty = 1;
        break;
    }
    case T_LLM_REQUEST: {
        im->llm_counter++;
        char pid[32];
        snprintf(pid, sizeof pid, "llm-%lld", im->llm_counter);
        int model = jget(d, data, "model");
        buf_clear(t);
        if (model >= 0 && jtruthy(d, model)) {
            if (d->n[model].t != J_STR) BAIL(im, "model not text");
            const char *s;
            size_t sn;
            jtext(d, model, &im->s3, &s, &sn);
            buf_put(t, s, utf8_prefix(s, sn, 200));
        } else if (im->model.n) {
            buf_put(t, im->model.p, utf8_prefix(im->model.p, im->model.n, 200));
        }
        buf_puts(&row->pair_id, pid);
        buf_put(&row->tool, t->p, t->n);
        if (im->llm_open_n == im->llm_open_cap) {
            /* compact the consumed head, then grow */
            if (im->llm_open_head) {
                for (size_t i = 0; i < im->llm_open_head; i++) buf_free(&im->llm_open[i].model);
                memmove(im->llm_open, im->llm_open + im->llm_open_head, sizeof(LlmOpen) * (im->llm_open_n - im->llm_open_head));
                im->llm_open_n -= im->llm_open_head;
                im->llm_open_head = 0;
            }
            if (im->llm_open_n == im->llm_open_cap) {
                im->llm_open_cap = im->llm_open_cap ? im->llm_open_cap * 2 : 16;
                im->llm_open = realloc(im->llm_open, sizeof(LlmOpen) * im->llm_open_cap);
                if (!im->llm_open) abort();
            }
        }
        LlmOpen *o = &im->llm_open[im->llm_open_n++];
        memcpy(o->pair_id, pid, sizeof pid);
        memset(&o->model, 0, sizeof o->model);
        buf_put(&o->model, t->p, t->n);
        break;
    }
    case T_LLM_RESPONSE: {
        static const char *const TOKENS[] = {"tokens_in", "tokens_out"};
        for (int i = 0; i < 2; i++) {
            int v = jget(d, data, TOKENS[i]);
            if (v >= 0 && !is_number(d, v)) BAIL(im, "token count not a number");
        }
        if (im->llm_open_head < im->llm_open_n) {
            LlmOpen *o = &im->llm_open[im->llm_open_head++];
            buf_puts(&row->pair_id, o->pair_id);
            buf_put(&row->tool, o->model.p, o->model.n);
        }
        break;
    }
    case T_CHILD_SPAWN:
    case T_CHILD_RESULT: {
        int child = jget(d, data, "child_id");
        if (child >= 0 && jtruthy(d, child)) {
            if (d->n[child].t != J_STR) BAIL(im, "child_id not text");
            const char *s;
            size_t sn;
            jtext(d, child, &im->s3, &s, &sn);
            size_t keep = utf8_prefix(s, sn, 200);
            buf_put(&row->child, s, keep);
            buf_put(&row->pair_id, s, keep);
        }
        if (type == T_CHILD_RESULT) {
            int v = jget(d, data, "success");
            if (v >= 0) ev.failed = !jtruthy(d, v);
        }
        break;
    }
    case T_FINAL: {
        if (str_text(im, d, jget(d, data, "answer"), &im->final_answer)) return -1;
        int v = jget(d, data, "completed");
        im->completed = v < 0 ? 1 : jtruthy(d, v);
        break;
    }
    case T_CHECKPOINT: {
        if (im->n_checkpoints == im->cap_checkpoints) {
            im->cap_checkpoints = im->cap_checkpoints ? im->cap_checkpoints * 2 : 4;
            im->checkpoints = realloc(im->checkpoints, sizeof(CheckpointOut) * im->cap_checkpoints);
            if (!im->checkpoints) abort();
        }
        CheckpointOut *c = &im->checkpoints[im->n_checkpoints];
        memset(c, 0, sizeof *c);
        int name = jget(d, data, "checkpoint_name");
        if (name >= 0 && jtruthy(d, name)) {
            if (d->n[name].t != J_STR) BAIL(im, "checkpoint_name not text");
            const char *s;
            size_t sn;
            jtext(d, name, &im->s3, &s, &sn);
            buf_put(&c->name, s, sn);
        } else {
            char tmp[48];
            snprintf(tmp, sizeof tmp, "checkpoint_%lld", ev.has_step ? ev.step : 0);
            buf_puts(&c->name, tmp);
        }
        c->seq = im->emitted;
        c->has_step_pos = im->steps > 0;
        c->step_pos = im->steps - 1;
        c->has_created_at = ev.has_ts;
        if (ev.has_ts) memcpy(c->created_at, ev.stamp_text, 33);
        im->n_checkpoints++;
        break;
    }
    case T_ERROR:
        ev.is_error = 1;
        break;
    case T_SESSION_END: {
        int v = jget(d, data, "completed");
        if (v >= 0) im->completed = jtruthy(d, v);
        v = jget(d, data, "final_response");
        if (v >= 0 && jtruthy(d, v)) {
            if (d->n[v].t != J_STR) BAIL(im, "final_response not text");
            const char *s;
            size_t sn;
            jtext(d, v, &im->s3, &s, &sn);
            buf_set(&im->final_answer, s, sn);
        }
        v = jget(d, data, "total_reward");
        if (v >= 0) {
            if (!is_number(d, v)) BAIL(im, "total_reward not a number");
            im->has_total_reward = 1;
            im->total_reward = num_f(node_num(d, v));
        }
        if (ev.has_ts) {
            memcpy(im->ended_at, ev.stamp_text, 33);
            im->has_ended_at = 1;
        }
        break;
    }
    default:
        break;
    }
    im->emitted++;
    if (payload_is_data) {
        if (data >= 0) jwrite(d, data, &row->payload, &im->s3);
        else buf_put(&row->payload, "{}", 2);
    }

    /* --- event_rows.EventRows.add ------------------------------------------------------- */
    long long seq = im->next_seq++;
    const char *kind = TYPES[type][1];
    row->seq = seq;
    row->kind = kind;
    row->source_type = TYPES[type][0];
    row->has_ts = ev.has_ts;
    if (ev.has_ts) memcpy(row->ts, ev.ts_text, 27);
    row->line = line;
    row->has_step = ev.has_step;
    row->step = ev.step;
    row->depth = depth;
    if (ev.has_ts) {
        if (!im->has_first_ts) {
            im->has_first_ts = 1;
            im->first_ts_ms = ev.ts_ms;
        }
        im->last_ts_ms = ev.ts_ms;
        if (ev.ts_ms - im->first_ts_ms > im->elapsed_ms) im->elapsed_ms = ev.ts_ms - im->first_ts_ms;
    }
    row->has_tokens = ev.has_tokens;
    row->tokens = ev.tokens;
    if (ev.has_tokens && __builtin_add_overflow(im->tokens_total, ev.tokens, &im->tokens_total))
        BAIL(im, "tokens total beyond 64 bits");
    row->is_error = ev.is_error;
    if (ev.is_error) im->errors_total++;
    if (ev.has_cumulative) im->reward_total = ev.cumulative;
    else if (ev.has_reward && num_add(im->reward_total, ev.reward, &im->reward_total)) BAIL(im, "reward overflow");
    row->has_reward = ev.has_reward;
    row->reward = num_f(ev.reward);
    row->has_duration = ev.has_duration;
    row->duration = num_f(ev.duration);
    row->has_step_pos = 0;
    row->has_step_state = ev.has_step_state;
    if (ev.has_step_state) {
        row->has_step_pos = 1;
        row->step_pos = im->steps_total++;
        if (st->error_truthy) im->step_errors++;
        if (!ev.failed) im->step_successes++;
        st->error_truthy = 0;
    }
    row->fail_streak = 0;
    if (row->tool.n) {
        /* rlm-code's tool column is the model of an LLM call/response, which never fails. */
        int known = 0;
        for (size_t i = 0; i < im->n_models && !known; i++)
            known = im->models[i].n == row->tool.n && memcmp(im->models[i].p, row->tool.p, row->tool.n) == 0;
        if (!known) {
            if (im->n_models == im->cap_models) {
                im->cap_models = im->cap_models ? im->cap_models * 2 : 4;
                im->models = realloc(im->models, sizeof(Buf) * im->cap_models);
                if (!im->models) abort();
            }
            memset(&im->models[im->n_models], 0, sizeof(Buf));
            buf_put(&im->models[im->n_models++], row->tool.p, row->tool.n);
        }
    }
    row->has_pair_seq = row->has_pair_duration = 0;
    int is_call = type == T_LLM_REQUEST || type == T_CHILD_SPAWN;
    int is_response = type == T_LLM_RESPONSE || type == T_CHILD_RESULT;
    char key[256 + 16];
    long call_pair = -1; /* this call's entry in the open pairs */
    if (row->pair_id.n && (is_call || is_response)) {
        const char *family = type == T_LLM_REQUEST || type == T_LLM_RESPONSE ? "llm" : "child";
        if (row->pair_id.n > 240) BAIL(im, "pair id too long");
        snprintf(key, sizeof key, "%s|%s", family, row->pair_id.p);
        size_t at;
        OpenPair *open = find_pair(im, key, &at);
        if (is_response && open) {
            row->has_pair_seq = 1;
            row->pair_seq = open->seq;
            if (ev.has_duration) {
                row->has_pair_duration = 1;
                row->pair_duration = num_f(ev.duration);
            } else if (open->has_ts && ev.has_ts) {
                row->has_pair_duration = 1;
                row->pair_duration = ev.ts_ms - open->ts_ms > 0.0 ? ev.ts_ms - open->ts_ms : 0.0;
            }
            Row *call = open->held;
            if (call) {
                call->has_pair_seq = 1;
                call->pair_seq = seq;
                call->has_pair_duration = row->has_pair_duration;
                call->pair_duration = row->pair_duration;
                int rc = write_row(im, call);
                held_free(call);
                open->held = NULL;
                im->n_held--;
                if (rc) { drop_pair(im, at); return rc; }
            } else if (im->pg) {
                add_update(im, open->seq, seq, row->has_pair_duration, row->pair_duration);
            } else {
                sqlite3_stmt *u = im->update_pair;
                sq.bind_int64(u, 1, seq);
                if (row->has_pair_duration) sq.bind_double(u, 2, row->pair_duration);
                else sq.bind_null(u, 2);
                sq.bind_int64(u, 3, im->session_id);
                sq.bind_int64(u, 4, open->seq);
                int rc = sq.step(u);
                sq.reset(u);
                if (rc != SQLITE_DONE) {
                    drop_pair(im, at);
                    snprintf(im->errmsg, sizeof im->errmsg, "%s", sq.errmsg(im->db));
                    im->why = im->errmsg;
                    return -2;
                }
            }
            drop_pair(im, at);
        } else if (is_call) {
            if (open) {
                /* The same id called again: the earlier call stays unanswered, and the newer
                 * takes its place in open_pairs (where Python's dict keeps the key). */
                if (open->held) {
                    int rc = write_row(im, open->held);
                    held_free(open->held);
                    open->held = NULL;
                    im->n_held--;
                    if (rc) return rc;
                }
                open->seq = seq;
                open->has_ts = ev.has_ts;
                open->ts_ms = ev.ts_ms;
                call_pair = (long)at;
            } else {
                call_pair = (long)add_pair(im, key, seq, ev.has_ts, ev.ts_ms);
            }
        }
    }
    if (ev.has_state_change) row->has_state_change = 1;
    else row->has_state_change = 0;
    row->tokens_total = im->tokens_total;
    row->errors_total = im->errors_total;
    row->elapsed = im->elapsed_ms;
    row->reward_total = num_f(im->reward_total);
    row->steps_total = im->steps_total;

    /* seal_rows: counts by kind and the hash chain */
    int ki = kind_index_of(im, kind);
    im->kind_counts[ki]++;
    buf_clear(&row->kind_counts);
    buf_putc(&row->kind_counts, '{');
    for (int i = 0; i < im->n_kinds; i++) {
        if (i) buf_putc(&row->kind_counts, ',');
        buf_putc(&row->kind_counts, '"');
        buf_puts(&row->kind_counts, im->kind_names[i]);
        buf_put(&row->kind_counts, "\":", 2);
        buf_int(&row->kind_counts, im->kind_counts[i]);
    }
    buf_putc(&row->kind_counts, '}');
    buf_set(&row->raw, text, n);
    memcpy(row->prev_hash, im->head, 65);
    chain_hash(im->head, text, n, &im->hashbuf, row->hash);
    memcpy(im->head, row->hash, 65);

    int rc;
    if (call_pair >= 0 && im->n_held < MAX_HELD) {
        /* Wait for the response: move this row's buffers into a held copy. */
        Row *held = malloc(sizeof(Row));
        if (!held) abort();
        *held = *row;
        memset(&row->parent, 0, sizeof(Buf) * 9);
        im->pairs[call_pair].held = held;
        im->n_held++;
        rc = 0;
    } else {
        rc = write_row(im, row);
    }
    if (rc) return rc;
    if (im->state_dirty && seq - im->last_keyframe_seq >= 256)
        keyframe(im, seq, row->has_step_pos, row->step_pos);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The module: import_file(...) and the clean-up of an Import.
 */
static void import_free(Import *im) {
    for (int f = 0; f < N_STEP; f++) buf_free(&im->step.text[f]);
    for (size_t i = 0; i < im->llm_open_n; i++) buf_free(&im->llm_open[i].model);
    free(im->llm_open);
    vm_free(&im->conv_vars);
    vm_free(&im->vars);
    buf_free(&im->conv_memory);
    buf_free(&im->memory);
    buf_free(&im->source_session_id); buf_free(&im->run_id); buf_free(&im->task);
    buf_free(&im->environment); buf_free(&im->model); buf_free(&im->final_answer);
    for (size_t i = 0; i < im->n_checkpoints; i++) buf_free(&im->checkpoints[i].name);
    free(im->checkpoints);
    for (size_t i = 0; i < im->n_pairs; i++) {
        free(im->pairs[i].key);
        if (im->pairs[i].held) held_free(im->pairs[i].held);
    }
    free(im->pairs);
    free(im->slots);
    buf_free(&im->copy);
    free(im->updates);
    free(im->update_durations);
    for (size_t i = 0; i < im->n_models; i++) buf_free(&im->models[i]);
    free(im->models);
    for (size_t i = 0; i < im->n_keyframes; i++) {
        buf_free(&im->keyframes[i].variables);
        buf_free(&im->keyframes[i].memory);
    }
    free(im->keyframes);
    free(im->doc.n);
    free(im->old.n);
    buf_free(&im->s1); buf_free(&im->s2); buf_free(&im->s3); buf_free(&im->hashbuf);
    row_free(&im->row);
    if (im->insert) sq.finalize(im->insert);
    if (im->update_pair) sq.finalize(im->update_pair);
}

/* Write the calls still waiting for a response, in seq order (they stay unanswered). */
static int flush_held(Import *im) {
    while (1) {
        OpenPair *first = NULL;
        for (size_t i = 0; i < im->n_pairs; i++)
            if (im->pairs[i].live && im->pairs[i].held && (!first || im->pairs[i].seq < first->seq))
                first = &im->pairs[i];
        if (!first) return 0;
        int rc = write_row(im, first->held);
        held_free(first->held);
        first->held = NULL;
        im->n_held--;
        if (rc) return rc;
    }
}

static PyObject *num_obj(Num n) { return n.is_int ? PyLong_FromLongLong(n.i) : PyFloat_FromDouble(n.d); }
static PyObject *text_obj(const Buf *b) { return PyUnicode_DecodeUTF8(b->n ? b->p : "", (Py_ssize_t)b->n, "strict"); }
static PyObject *stamp_obj(int has, const char *s) {
    if (!has) Py_RETURN_NONE;
    return PyUnicode_FromStringAndSize(s, 32);
}

static int set_item(PyObject *dict, const char *key, PyObject *value) {
    if (!value) return -1;
    int rc = PyDict_SetItemString(dict, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *result_of(Import *im) {
    PyObject *r = PyDict_New();
    if (!r) return NULL;
    PyObject *meta = PyDict_New(), *counts = PyDict_New(), *pairs = PyDict_New();
    PyObject *models = PyList_New(0), *checkpoints = PyList_New(0), *keyframes = PyList_New(0);
    if (!meta || !counts || !pairs || !models || !checkpoints || !keyframes) goto fail;
    if (set_item(meta, "source_session_id", text_obj(&im->source_session_id)) ||
        set_item(meta, "run_id", text_obj(&im->run_id)) || set_item(meta, "task", text_obj(&im->task)) ||
        set_item(meta, "environment", text_obj(&im->environment)) ||
        set_item(meta, "model", text_obj(&im->model)) ||
        set_item(meta, "final_answer", text_obj(&im->final_answer)) ||
        set_item(meta, "started_at", stamp_obj(im->has_started_at, im->started_at)) ||
        set_item(meta, "ended_at", stamp_obj(im->has_ended_at, im->ended_at)))
        goto fail;
    PyObject *completed = im->completed < 0 ? Py_NewRef(Py_None) : PyBool_FromLong(im->completed);
    if (set_item(meta, "completed", completed)) goto fail;
    PyObject *total = im->has_total_reward ? PyFloat_FromDouble(im->total_reward) : Py_NewRef(Py_None);
    if (set_item(meta, "total_reward", total)) goto fail;
    for (int i = 0; i < im->n_kinds; i++)
        if (set_item(counts, im->kind_names[i], PyLong_FromLongLong(im->kind_counts[i]))) goto fail;
    for (size_t i = 0; i < im->n_pairs; i++) {
        if (!im->pairs[i].live) continue;
        PyObject *ts = im->pairs[i].has_ts ? PyFloat_FromDouble(im->pairs[i].ts_ms) : Py_NewRef(Py_None);
        PyObject *v = Py_BuildValue("[LN]", im->pairs[i].seq, ts);
        if (set_item(pairs, im->pairs[i].key, v)) goto fail;
    }
    for (size_t i = 0; i < im->n_models; i++) {
        PyObject *m = text_obj(&im->models[i]);
        if (!m || PyList_Append(models, m)) { Py_XDECREF(m); goto fail; }
        Py_DECREF(m);
    }
    for (size_t i = 0; i < im->n_checkpoints; i++) {
        CheckpointOut *c = &im->checkpoints[i];
        PyObject *sp = c->has_step_pos ? PyLong_FromLongLong(c->step_pos) : Py_NewRef(Py_None);
        PyObject *v = Py_BuildValue("(NLNN)", text_obj(&c->name), c->seq, sp, stamp_obj(c->has_created_at, c->created_at));
        if (!v || PyList_Append(checkpoints, v)) { Py_XDECREF(v); goto fail; }
        Py_DECREF(v);
    }
    for (size_t i = 0; i < im->n_keyframes; i++) {
        Keyframe *k = &im->keyframes[i];
        PyObject *sp = k->has_step_pos ? PyLong_FromLongLong(k->step_pos) : Py_NewRef(Py_None);
        PyObject *v = Py_BuildValue("(LNNNLN)", k->seq, sp, text_obj(&k->variables), text_obj(&k->memory), k->steps, num_obj(k->reward));
        if (!v || PyList_Append(keyframes, v)) { Py_XDECREF(v); goto fail; }
        Py_DECREF(v);
    }
    Buf vars = {0};
    vm_json(&im->vars, &vars);
    PyObject *vars_obj = text_obj(&vars);
    buf_free(&vars);
    Buf mem = {0};
    if (im->has_memory) buf_put(&mem, im->memory.p, im->memory.n);
    else buf_put(&mem, "[]", 2);
    PyObject *mem_obj = text_obj(&mem);
    buf_free(&mem);
    if (set_item(r, "variables", vars_obj) || set_item(r, "memory", mem_obj) ||
        set_item(r, "next_seq", PyLong_FromLongLong(im->next_seq)) ||
        set_item(r, "head", PyUnicode_FromStringAndSize(im->head, 64)) ||
        set_item(r, "tokens_total", PyLong_FromLongLong(im->tokens_total)) ||
        set_item(r, "errors_total", PyLong_FromLongLong(im->errors_total)) ||
        set_item(r, "reward_total", num_obj(im->reward_total)) ||
        set_item(r, "steps_total", PyLong_FromLongLong(im->steps_total)) ||
        set_item(r, "step_errors", PyLong_FromLongLong(im->step_errors)) ||
        set_item(r, "step_successes", PyLong_FromLongLong(im->step_successes)) ||
        set_item(r, "first_ts_ms", im->has_first_ts ? PyFloat_FromDouble(im->first_ts_ms) : Py_NewRef(Py_None)) ||
        set_item(r, "last_ts_ms", im->has_first_ts ? PyFloat_FromDouble(im->last_ts_ms) : Py_NewRef(Py_None)) ||
        set_item(r, "elapsed_ms", PyFloat_FromDouble(im->elapsed_ms)) ||
        set_item(r, "state_dirty", PyBool_FromLong(im->state_dirty)) ||
        set_item(r, "last_keyframe_seq", PyLong_FromLongLong(im->last_keyframe_seq)))
        goto fail;
    PyObject *updates = PyList_New(0);
    if (!updates) goto fail;
    for (size_t i = 0; i < im->n_updates; i++) {
        PyObject *duration = im->updates[i][2] ? PyFloat_FromDouble(im->update_durations[i]) : Py_NewRef(Py_None);
        PyObject *v = Py_BuildValue("(LNL)", im->updates[i][0], duration, im->updates[i][1]);
        if (!v || PyList_Append(updates, v)) { Py_XDECREF(v); Py_DECREF(updates); goto fail; }
        Py_DECREF(v);
    }
    if (set_item(r, "pair_updates", updates)) goto fail;
    if (set_item(r, "meta", meta) || set_item(r, "kind_counts", counts) || set_item(r, "open_pairs", pairs) ||
        set_item(r, "models", models) || set_item(r, "checkpoints", checkpoints) || set_item(r, "keyframes", keyframes)) {
        meta = counts = pairs = models = checkpoints = keyframes = NULL;
        goto fail;
    }
    return r;
fail:
    Py_XDECREF(meta); Py_XDECREF(counts); Py_XDECREF(pairs); Py_XDECREF(models);
    Py_XDECREF(checkpoints); Py_XDECREF(keyframes);
    Py_DECREF(r);
    return NULL;
}

/* The sqlite3 handle inside a sqlite3.Connection: its first field after the object header
 * (CPython 3.11 to 3.13, checked at build time below). The caller proves it is the right one
 * (exact type, same database file, a transaction open). */
typedef struct {
    PyObject_HEAD
    sqlite3 *db;
} ConnectionHead;

static int resolve(const char *module_path) {
    static int resolved = 0;
    if (resolved) return 0;
    void *h = dlopen(module_path, RTLD_NOW | RTLD_NOLOAD);
    if (!h) return -1;
    /* every function is looked up before any is used: a missing one leaves `resolved` 0 */
#define LOAD(field, name) if (!(*(void **)&sq.field = dlsym(h, name))) return -1
    LOAD(prepare_v2, "sqlite3_prepare_v2");
    LOAD(bind_int64, "sqlite3_bind_int64");
    LOAD(bind_double, "sqlite3_bind_double");
    LOAD(bind_text, "sqlite3_bind_text");
    LOAD(bind_null, "sqlite3_bind_null");
    LOAD(step, "sqlite3_step");
    LOAD(reset, "sqlite3_reset");
    LOAD(finalize, "sqlite3_finalize");
    LOAD(errmsg, "sqlite3_errmsg");
    LOAD(db_filename, "sqlite3_db_filename");
    LOAD(get_autocommit, "sqlite3_get_autocommit");
    LOAD(libversion, "sqlite3_libversion");
#undef LOAD
    void *crypto = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_NOLOAD);
    if (crypto) *(void **)&openssl_sha256 = dlsym(crypto, "SHA256");
    resolved = 1;
    return 0;
}

static PyObject *bail_result(Import *im, long long line) {
    return Py_BuildValue("(sL)", im->why ? im->why : "stopped", line);
}

/* One line of the file as read_records takes it: its CR/LF ending stripped, and skipped when
 * nothing but whitespace is left (bytes.strip's set), as load_json_line skips it. */
static int process_line(Import *im, long long number, const char *text, size_t n) {
    while (n && (text[n - 1] == '\r' || text[n - 1] == '\n')) n--;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        if (c != ' ' && c != '\t' && c != '\r' && c != '\x0b' && c != '\x0c') return process(im, number, text, n);
    }
    return 0;
}

/* Read the file line by line and turn each record into its row; the result (or the reason to
 * decline, or NULL with a Python exception set). */
static PyObject *run(Import *im, const char *path, PyObject *progress, long long every) {
    PyObject *result = NULL;
    FILE *f = NULL;
    Buf line = {0};
    char *block = NULL;
    f = fopen(path, "rb");
    if (!f) {
        im->why = "cannot open the file";
        result = bail_result(im, 0);
        goto out;
    }
    const size_t BLOCK = 1 << 20;
    block = malloc(BLOCK);
    if (!block) abort();
    long long number = 0, bytes = 0, next_report = every;
    size_t got;
    int first = 1, failed = 0;
    long long fail_line = 0;
    while (!failed && (got = fread(block, 1, BLOCK, f)) > 0) {
        if (first && got >= 2 && (unsigned char)block[0] == 0x1f && (unsigned char)block[1] == 0x8b) {
            im->why = "a gzip file";
            failed = 1;
            break;
        }
        if (first && got >= 3 && memcmp(block, "\xEF\xBB\xBF", 3) == 0) {
            im->why = "a byte-order mark";
            fail_line = 1;
            failed = 1;
            break;
        }
        first = 0;
        bytes += (long long)got;
        size_t start = 0;
        while (start < got) {
            char *nl = memchr(block + start, '\n', got - start);
            size_t end = nl ? (size_t)(nl - block) : got;
            if (!nl) {
                buf_put(&line, block + start, end - start);
                break;
            }
            const char *text;
            size_t n;
            if (line.n) {
                buf_put(&line, block + start, end - start);
                text = line.p;
                n = line.n;
            } else {
                text = block + start;
                n = end - start;
            }
            number++;
            if (process_line(im, number, text, n)) {
                failed = 1;
                fail_line = number;
                break;
            }
            buf_clear(&line);
            start = end + 1;
        }
        if (!failed && progress != Py_None && im->next_seq >= next_report) {
            next_report = im->next_seq + every;
            PyObject *r = PyObject_CallFunction(progress, "LL", im->next_seq, bytes);
            if (!r) goto out;
            Py_DECREF(r);
        }
    }
    if (!failed && ferror(f)) {
        im->why = "read error";
        failed = 1;
    }
    if (!failed && line.n) {
        /* the last line, without a line ending */
        number++;
        if (process_line(im, number, line.p, line.n)) {
            failed = 1;
            fail_line = number;
        }
    }
    if (!failed && flush_held(im)) failed = 1;
    if (!failed && im->pg) {
        be16(&im->copy, -1); /* the COPY trailer */
        if (copy_flush(im)) failed = 1;
    }
    if (failed) {
        /* a Python exception (the COPY write or the progress) goes up as it is */
        if (!PyErr_Occurred()) result = bail_result(im, fail_line);
        goto out;
    }
    if (progress != Py_None) {
        PyObject *r = PyObject_CallFunction(progress, "LL", im->next_seq, bytes);
        if (!r) goto out;
        Py_DECREF(r);
    }
    result = result_of(im);
out:
    if (f) fclose(f);
    free(block);
    buf_free(&line);
    return result;
}

static Import *new_import(long long session_id) {
    Import *im = calloc(1, sizeof(Import));
    if (!im) return NULL;
    im->session_id = session_id;
    im->completed = -1;
    im->last_keyframe_seq = -1;
    im->reward_total = num_float(0.0);
    im->cumulative = num_float(0.0);
    memset(im->head, '0', 64);
    return im;
}

/* import_file(connection, sqlite_module_path, db_filename, insert_sql, update_sql, path,
 *             session_id, progress, progress_every)
 * -> dict (the states after the last row), or (why, line) when the Python path must do it. */
static PyObject *import_file(PyObject *self, PyObject *args) {
    PyObject *conn, *progress;
    const char *module_path, *db_filename, *insert_sql, *path;
    long long session_id, every;
    if (!PyArg_ParseTuple(args, "OssssLOL", &conn, &module_path, &db_filename, &insert_sql, &path,
                          &session_id, &progress, &every))
        return NULL;
    if (strcmp(Py_TYPE(conn)->tp_name, "sqlite3.Connection") != 0)
        return PyErr_Format(PyExc_TypeError, "expected a sqlite3.Connection");
#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
    /* The handle's place inside sqlite3.Connection is known (and tested) for 3.11 to 3.13 only:
     * elsewhere, decline rather than read a pointer from an unknown layout. */
    return Py_BuildValue("(sL)", "untested Python version for the SQLite handle", 0LL);
#endif
    if (resolve(module_path)) return Py_BuildValue("(sL)", "cannot reach SQLite's functions", 0LL);
    sqlite3 *db = ((ConnectionHead *)conn)->db;
    const char *name = db ? sq.db_filename(db, "main") : NULL;
    if (!name || strcmp(name, db_filename) != 0) return Py_BuildValue("(sL)", "not the expected database", 0LL);
    if (sq.get_autocommit(db)) return Py_BuildValue("(sL)", "not inside a transaction", 0LL);

    Import *im = new_import(session_id);
    if (!im) return PyErr_NoMemory();
    im->db = db;
    PyObject *result = NULL;
    if (sq.prepare_v2(db, insert_sql, -1, &im->insert, NULL) != SQLITE_OK) {
        im->why = "cannot prepare the insert";
        result = bail_result(im, 0);
        goto done;
    }
    static const char update[] =
        "UPDATE sessions_app_event SET pair_seq = ?, pair_duration_ms = ? WHERE session_id = ? AND seq = ?";
    if (sq.prepare_v2(db, update, -1, &im->update_pair, NULL) != SQLITE_OK) {
        im->why = "cannot prepare the update";
        result = bail_result(im, 0);
        goto done;
    }
    result = run(im, path, progress, every);
done:
    import_free(im);
    free(im);
    return result;
}


/* The PostgreSQL column types of ingest._copy_types that copy_row writes. */
static const char *const COPY_TYPES[N_COLS] = {
    "bigint", "bigint", "varchar", "varchar", "timestamp with time zone", "bigint", "bigint",
    "bigint", "bigint", "varchar", "varchar", "varchar", "varchar", "varchar", "bigint",
    "double precision", "double precision", "double precision", "boolean", "bigint",
    "double precision", "boolean", "bigint", "text", "text", "text", "text", "varchar", "varchar",
    "double precision", "bigint", "bigint", "double precision", "double precision", "bigint",
    "text"};

/* copy_file(types, path, session_id, write, progress, progress_every) -> as import_file, the
 * rows going out through write(bytes) as the data of a binary COPY (header to trailer). */
static PyObject *copy_file(PyObject *self, PyObject *args) {
    PyObject *types, *write, *progress;
    const char *path;
    long long session_id, every;
    if (!PyArg_ParseTuple(args, "OsLOOL", &types, &path, &session_id, &write, &progress, &every)) return NULL;
    if (!PyList_Check(types) || PyList_GET_SIZE(types) != N_COLS)
        return Py_BuildValue("(sL)", "unexpected column types", 0LL);
    for (int i = 0; i < N_COLS; i++) {
        const char *t = PyUnicode_AsUTF8(PyList_GET_ITEM(types, i));
        if (!t) return NULL;
        if (strcmp(t, COPY_TYPES[i]) != 0) return Py_BuildValue("(sL)", "unexpected column types", 0LL);
    }
    Import *im = new_import(session_id);
    if (!im) return PyErr_NoMemory();
    im->pg = 1;
    im->write = write;
    buf_put(&im->copy, "PGCOPY\n\xff\r\n\0", 11);
    be32(&im->copy, 0); /* flags */
    be32(&im->copy, 0); /* header extension */
    PyObject *result = run(im, path, progress, every);
    import_free(im);
    free(im);
    return result;
}

/* jcompact(text) -> the compact JSON orjson would write back, or None where the fast path
 * would stop (and why). For the tests that hold this reader to orjson. */
static PyObject *jcompact(PyObject *self, PyObject *args) {
    const char *s;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y#", &s, &n)) return NULL;
    JDoc d = {0};
    Buf out = {0}, scratch = {0};
    PyObject *r;
    if (!valid_utf8((const unsigned char *)s, (size_t)n)) {
        r = Py_BuildValue("(Os)", Py_None, "invalid UTF-8");
    } else {
        int root = jparse(&d, s, (size_t)n);
        if (root < 0) {
            r = Py_BuildValue("(Os)", Py_None, d.why);
        } else {
            jwrite(&d, root, &out, &scratch);
            r = Py_BuildValue("(y#O)", out.p ? out.p : "", (Py_ssize_t)out.n, Py_None);
        }
    }
    free(d.n);
    buf_free(&out);
    buf_free(&scratch);
    return r;
}

/* jequal(a, b) -> Python's a == b of the two parsed texts, computed by the C reader. */
static PyObject *jequal(PyObject *self, PyObject *args) {
    const char *a, *b;
    Py_ssize_t an, bn;
    if (!PyArg_ParseTuple(args, "y#y#", &a, &an, &b, &bn)) return NULL;
    JDoc da = {0}, db = {0};
    int ra = jparse(&da, a, (size_t)an), rb = jparse(&db, b, (size_t)bn);
    PyObject *r;
    if (ra < 0 || rb < 0) r = Py_NewRef(Py_None);
    else r = PyBool_FromLong(jeq(&da, ra, &db, rb));
    free(da.n);
    free(db.n);
    return r;
}

static PyMethodDef methods[] = {
    {"import_file", import_file, METH_VARARGS, "Import an rlm-code session file into SQLite rows."},
    {"copy_file", copy_file, METH_VARARGS, "An rlm-code session file as PostgreSQL binary COPY data."},
    {"jcompact", jcompact, METH_VARARGS, "The compact JSON orjson writes for a text (tests)."},
    {"jequal", jequal, METH_VARARGS, "Python's == of two JSON texts (tests)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rlm_native_c", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rlm_native_c(void) { return PyModule_Create(&module); }
