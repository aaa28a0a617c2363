/*
 * gw_proxyhead: the package proxy's request heads and allow list (see the
 * header).
 */
#include "gw_proxyhead.h"

#include "lisa/lisa_buf.h"
#include "lisa/lisa_mem.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Headers that are the proxy's business, never the origin's. */
static const char *const s_dropped[] = {
    "host",
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
};

static lisa_rc_t s_fail(int *status, int code, char *err, size_t errlen,
                        const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static lisa_rc_t
s_fail(int *status, int code, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    *status = code;
    return LISA_INVALID;
}

/* End of the head (index past "\r\n\r\n" or "\n\n"), 0 when not found. */
static size_t
s_head_end(const char *buf, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* Parses "host[:port]" or "[v6]:port" of n bytes into h; port 0 when the
 * authority names none. */
static bool
s_authority(const char *a, size_t n, gw_proxyhead_t *h)
{
    const char *host = a, *port = NULL;
    size_t hl;
    if (n && a[0] == '[') {
        const char *rb = memchr(a, ']', n);
        if (!rb)
            return false;
        host = a + 1;
        hl = (size_t) (rb - host);
        for (size_t i = 0; i < hl; i++)
            if (!isxdigit((unsigned char) host[i]) && host[i] != ':' &&
                host[i] != '.')
                return false;
        size_t rest = n - (size_t) (rb + 1 - a);
        if (rest) {
            if (rb[1] != ':')
                return false;
            port = rb + 2;
        }
    } else {
        const char *colon = memchr(a, ':', n);
        hl = colon ? (size_t) (colon - a) : n;
        for (size_t i = 0; i < hl; i++)
            if (!isalnum((unsigned char) a[i]) && a[i] != '-' && a[i] != '.')
                return false;
        if (colon)
            port = colon + 1;
    }
    if (hl == 0 || hl >= sizeof h->host)
        return false;
    for (size_t i = 0; i < hl; i++)
        h->host[i] = (char) tolower((unsigned char) host[i]);
    h->host[hl] = '\0';
    h->port = 0;
    if (port) {
        size_t pl = n - (size_t) (port - a);
        unsigned v = 0;
        if (pl == 0 || pl > 5)
            return false;
        for (size_t i = 0; i < pl; i++) {
            if (!isdigit((unsigned char) port[i]))
                return false;
            v = v * 10u + (unsigned) (port[i] - '0');
        }
        if (v == 0 || v > 65535)
            return false;
        h->port = (uint16_t) v;
    }
    return true;
}

/* A character of an HTTP token (RFC 9110 tchar). */
static bool
s_tchar(char c)
{
    return isalnum((unsigned char) c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool
s_name_is(const char *name, size_t n, const char *want)
{
    return strlen(want) == n && strncasecmp(name, want, n) == 0;
}

/* The request target: CONNECT's authority, or GET/HEAD's absolute URL. */
static lisa_rc_t
s_target(const char *t, size_t tl, gw_proxyhead_t *h, int *status, char *err,
         size_t errlen)
{
    if (h->connect) {
        if (!s_authority(t, tl, h) || !h->port)
            return s_fail(status, 400, err, errlen, "CONNECT needs host:port");
        return LISA_OK;
    }
    if (tl < 7 || strncasecmp(t, "http://", 7) != 0)
        return s_fail(status, 400, err, errlen,
                      "an http:// URL in absolute form is needed (https "
                      "goes through CONNECT)");
    const char *a = t + 7;
    size_t rest = tl - 7;
    size_t al = 0;
    while (al < rest && a[al] != '/' && a[al] != '?')
        al++;
    if (memchr(a, '@', al))
        return s_fail(status, 400, err, errlen, "no userinfo in proxy URLs");
    if (!s_authority(a, al, h))
        return s_fail(status, 400, err, errlen, "bad host in the URL");
    if (!h->port)
        h->port = 80;
    h->path = al < rest ? a + al : "/";
    h->path_len = al < rest ? rest - al : 1;
    if (h->path[0] == '?') /* "http://host?x": the path is "/" */
        return s_fail(status, 400, err, errlen, "the URL needs a path");
    return LISA_OK;
}

/* One header line (name: value): the checks and Proxy-Authorization. */
static lisa_rc_t
s_header(const char *line, size_t n, gw_proxyhead_t *h, int *status, char *err,
         size_t errlen)
{
    if (line[0] == ' ' || line[0] == '\t')
        return s_fail(status, 400, err, errlen, "folded header lines");
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line)
        return s_fail(status, 400, err, errlen, "a header line without ':'");
    size_t nl = (size_t) (colon - line);
    for (size_t i = 0; i < nl; i++)
        if (!s_tchar(line[i]))
            return s_fail(status, 400, err, errlen,
                          "a header name with a character it may not have");
    const char *v = colon + 1;
    size_t vl = n - nl - 1;
    while (vl && (*v == ' ' || *v == '\t')) {
        v++;
        vl--;
    }
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
    if (s_name_is(line, nl, "proxy-authorization") && !h->auth[0]) {
        if (vl >= sizeof h->auth)
            return s_fail(status, 431, err, errlen,
                          "Proxy-Authorization too long");
        memcpy(h->auth, v, vl);
        h->auth[vl] = '\0';
    } else if (s_name_is(line, nl, "transfer-encoding") ||
               (s_name_is(line, nl, "content-length") &&
                !(vl == 1 && v[0] == '0'))) {
        if (!h->connect)
            return s_fail(status, 400, err, errlen, "%s requests carry no body",
                          h->method);
    }
    return LISA_OK;
}

lisa_rc_t
gw_proxyhead_parse(const char *buf, size_t len, gw_proxyhead_t *h, int *status,
                   char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    *status = 0;
    size_t end =
        s_head_end(buf, len < GW_PROXYHEAD_MAX ? len : GW_PROXYHEAD_MAX);
    if (!end)
        return len >= GW_PROXYHEAD_MAX
                   ? s_fail(status, 431, err, errlen,
                            "the request head passes %u bytes",
                            GW_PROXYHEAD_MAX)
                   : LISA_AGAIN;
    if (memchr(buf, '\0', end))
        return s_fail(status, 400, err, errlen, "a NUL byte in the head");
    h->head_len = end;
    /* request line: METHOD SP target SP HTTP/1.x */
    const char *eol = memchr(buf, '\n', end);
    size_t ll = (size_t) (eol - buf);
    if (ll && buf[ll - 1] == '\r')
        ll--;
    const char *sp1 = memchr(buf, ' ', ll);
    const char *sp2 =
        sp1 ? memchr(sp1 + 1, ' ', ll - (size_t) (sp1 + 1 - buf)) : NULL;
    if (!sp1 || !sp2 || (size_t) (buf + ll - sp2 - 1) != 8 ||
        strncmp(sp2 + 1, "HTTP/1.", 7) != 0)
        return s_fail(status, 400, err, errlen, "bad request line");
    size_t ml = (size_t) (sp1 - buf);
    if (s_name_is(buf, ml, "CONNECT") && strncmp(buf, "CONNECT", 7) == 0)
        h->connect = true;
    else if (!(ml == 3 && strncmp(buf, "GET", 3) == 0) &&
             !(ml == 4 && strncmp(buf, "HEAD", 4) == 0))
        return s_fail(status, 405, err, errlen,
                      "only CONNECT, GET and HEAD go through this proxy");
    memcpy(h->method, buf, ml);
    h->method[ml] = '\0';
    lisa_rc_t rc =
        s_target(sp1 + 1, (size_t) (sp2 - sp1 - 1), h, status, err, errlen);
    if (rc != LISA_OK)
        return rc;
    for (const char *p = eol + 1; p < buf + end;) {
        const char *e = memchr(p, '\n', (size_t) (buf + end - p));
        size_t n = (size_t) (e - p);
        if (n && p[n - 1] == '\r')
            n--;
        if (n == 0)
            break;
        rc = s_header(p, n, h, status, err, errlen);
        if (rc != LISA_OK)
            return rc;
        p = e + 1;
    }
    return LISA_OK;
}

char *
gw_proxyhead_upstream(const char *buf, const gw_proxyhead_t *h, size_t *out_len)
{
    lisa_buf_t b = LISA_BUF(2 * GW_PROXYHEAD_MAX);
    lisa_buf_printf(&b, "%s ", h->method);
    lisa_buf_put(&b, h->path, h->path_len);
    bool v6 = strchr(h->host, ':') != NULL;
    lisa_buf_printf(&b, " HTTP/1.1\r\nHost: %s%s%s", v6 ? "[" : "", h->host,
                    v6 ? "]" : "");
    if (h->port != 80)
        lisa_buf_printf(&b, ":%u", (unsigned) h->port);
    lisa_buf_puts(&b, "\r\n");
    const char *p = (const char *) memchr(buf, '\n', h->head_len) + 1;
    while (p < buf + h->head_len) {
        const char *e = memchr(p, '\n', (size_t) (buf + h->head_len - p));
        size_t n = (size_t) (e - p);
        if (n && p[n - 1] == '\r')
            n--;
        if (n == 0)
            break;
        size_t nl = (size_t) ((const char *) memchr(p, ':', n) - p);
        /* every Proxy-* header is the proxy's, whatever its name */
        bool drop = nl >= 6 && strncasecmp(p, "proxy-", 6) == 0;
        for (size_t i = 0; i < sizeof s_dropped / sizeof s_dropped[0]; i++)
            drop = drop || s_name_is(p, nl, s_dropped[i]);
        if (!drop) {
            lisa_buf_put(&b, p, n);
            lisa_buf_puts(&b, "\r\n");
        }
        p = e + 1;
    }
    lisa_buf_puts(&b, "Connection: close\r\n\r\n");
    *out_len = b.len;
    return lisa_buf_take(&b);
}

bool
gw_proxyhead_allowed(const char *allow, const char *host, uint16_t port)
{
    if (!allow || !host || !*host)
        return false;
    const char *p = allow;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, ", \t");
        if (n == 0)
            break;
        gw_proxyhead_t e;
        memset(&e, 0, sizeof e);
        if (s_authority(p, n, &e) && strcmp(e.host, host) == 0 &&
            (e.port ? e.port == port : (port == 80 || port == 443)))
            return true;
        p += n;
    }
    return false;
}
