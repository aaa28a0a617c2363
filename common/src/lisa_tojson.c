/*
 * lisa_tojson: Python-compatible JSON serialization of jansson values.
 * See the header for the rules; this file is a recursive writer over a
 * bounded growable buffer.
 */
#include "lisa/lisa_tojson.h"

#include "lisa/lisa_buf.h"
#include "lisa/lisa_mem.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
s_string(lisa_buf_t *b, const char *s, size_t n)
{
    lisa_buf_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            lisa_buf_put(b, s + i - run, run);
            run = 0;
            lisa_buf_puts(b, esc);
        } else {
            run++;
        }
    }
    lisa_buf_put(b, s + n - run, run);
    lisa_buf_put(b, "\"", 1);
}

size_t
lisa_tojson_float(double x, char buf[LISA_TOJSON_FLOAT_MAX])
{
    if (x == 0)
        return (size_t) snprintf(buf, LISA_TOJSON_FLOAT_MAX, "%s",
                                 signbit(x) ? "-0.0" : "0.0");
    /* Shortest %e that reads back as x. */
    char e[40];
    for (int prec = 0; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, x);
        if (strtod(e, NULL) == x)
            break;
    }
    /* e = [-]d[.ddd]e[+-]XX: collect digits and exponent. */
    const char *p = e;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < sizeof digits)
            digits[nd++] = *p;
    /* the exponent %e wrote: [+-]XX[X], always in range */
    long exp_l = *p == 'e' ? strtol(p + 1, NULL, 10) : 0;
    int exp10 = exp_l < -400 ? -400 : exp_l > 400 ? 400 : (int) exp_l;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    size_t k = 0;
    if (neg)
        buf[k++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                buf[k++] = (size_t) i < nd ? digits[i] : '0';
            buf[k++] = '.';
            if ((size_t) exp10 + 1 < nd)
                for (size_t i = (size_t) exp10 + 1; i < nd; i++)
                    buf[k++] = digits[i];
            else
                buf[k++] = '0';
        } else {
            buf[k++] = '0';
            buf[k++] = '.';
            for (int i = 0; i < -exp10 - 1; i++)
                buf[k++] = '0';
            for (size_t i = 0; i < nd; i++)
                buf[k++] = digits[i];
        }
        buf[k] = '\0';
        return k;
    }
    buf[k++] = digits[0];
    if (nd > 1) {
        buf[k++] = '.';
        for (size_t i = 1; i < nd; i++)
            buf[k++] = digits[i];
    }
    int w = snprintf(buf + k, LISA_TOJSON_FLOAT_MAX - k, "e%c%02d",
                     exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    return k + (w > 0 ? (size_t) w : 0);
}

static lisa_rc_t
s_value(lisa_buf_t *b, const json_t *v, int depth)
{
    if (depth > LISA_TOJSON_MAX_DEPTH)
        return LISA_INVALID;
    char num[48];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        lisa_buf_put(b, "{", 1);
        bool first = true;
        const char *key;
        size_t klen;
        json_t *val;
        /* jansson's iterators take a mutable object; nothing is changed */
        union {
            const json_t *c;
            json_t *m;
        } obj = {.c = v};
        json_object_keylen_foreach(obj.m, key, klen, val)
        {
            if (!first)
                lisa_buf_put(b, ", ", 2);
            first = false;
            s_string(b, key, klen);
            lisa_buf_put(b, ": ", 2);
            lisa_rc_t rc = s_value(b, val, depth + 1);
            if (rc != LISA_OK)
                return rc;
        }
        lisa_buf_put(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        lisa_buf_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                lisa_buf_put(b, ", ", 2);
            lisa_rc_t rc = s_value(b, json_array_get(v, i), depth + 1);
            if (rc != LISA_OK)
                return rc;
        }
        lisa_buf_put(b, "]", 1);
        break;
    case JSON_STRING:
        s_string(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT,
                 json_integer_value(v));
        lisa_buf_puts(b, num);
        break;
    case JSON_REAL:
        if (!isfinite(json_real_value(v)))
            return LISA_INVALID;
        lisa_tojson_float(json_real_value(v), num);
        lisa_buf_puts(b, num);
        break;
    case JSON_TRUE:
        lisa_buf_puts(b, "true");
        break;
    case JSON_FALSE:
        lisa_buf_puts(b, "false");
        break;
    case JSON_NULL:
        lisa_buf_puts(b, "null");
        break;
    }
    return b->full ? LISA_TOOLARGE : LISA_OK;
}

lisa_rc_t
lisa_tojson(const json_t *v, size_t max, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (!v)
        return LISA_INVALID;
    lisa_buf_t b = {.max = max};
    lisa_rc_t rc = s_value(&b, v, 0);
    if (rc == LISA_OK && b.full)
        rc = LISA_TOOLARGE;
    if (rc != LISA_OK) {
        lisa_free(&b.p);
        return rc;
    }
    lisa_buf_put(&b, "", 0);
    if (!b.p)
        b.p = lisa_malloc(1);
    b.p[b.len] = '\0';
    *out = b.p;
    if (len)
        *len = b.len;
    return LISA_OK;
}
