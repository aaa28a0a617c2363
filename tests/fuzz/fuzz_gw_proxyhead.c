/*
 * Fuzz target: the package proxy's request heads (gw_proxyhead), bytes a
 * sandbox sends. A parse succeeds or names a status; a parsed head's
 * length and path lie inside the input; the head written upstream has
 * no proxy header, a Host line and one blank line at its end; an allow
 * list naming one host matches that host alone, and one read from the
 * input never matches an empty host. The module is compiled into the target.
 */
#include "../../services/gateway/gw_proxyhead.c"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool
s_has_header(const char *head, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i + nl + 2 <= len; i++)
        if (head[i] == '\n' && strncasecmp(head + i + 1, name, nl) == 0)
            return true;
    return false;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *) data;
    gw_proxyhead_t h;
    int status = 0;
    char err[200];
    lisa_rc_t rc = gw_proxyhead_parse(buf, size, &h, &status, err, sizeof err);
    if (rc == LISA_INVALID && status != 400 && status != 405 && status != 431)
        abort();
    if (rc == LISA_OK) {
        if (h.head_len > size || h.head_len > GW_PROXYHEAD_MAX || !h.host[0])
            abort();
        if (!h.connect) {
            bool inside = h.path >= buf && h.path + h.path_len <= buf + size;
            if (h.path_len == 0 ||
                (!inside && !(h.path_len == 1 && h.path[0] == '/')))
                abort();
            size_t n;
            char *up = gw_proxyhead_upstream(buf, &h, &n);
            if (n < 4 || memcmp(up + n - 4, "\r\n\r\n", 4) != 0 ||
                s_has_header(up, n, "proxy-") || !s_has_header(up, n, "host:"))
                abort();
            lisa_free(&up);
        }
        /* an allow list naming one host (no port: 80 and 443) matches
         * that host alone (the input may name it too) */
        bool named = strcmp(h.host, "lisa-never.invalid") == 0 &&
                     (h.port == 80 || h.port == 443);
        if (gw_proxyhead_allowed("lisa-never.invalid", h.host, h.port) != named)
            abort();
    }
    /* the input as an allow list */
    char *allow = lisa_strndup(buf, size < 4096 ? size : 4096);
    if (gw_proxyhead_allowed(allow, "", 443))
        abort();
    (void) gw_proxyhead_allowed(allow, "pypi.org", 443);
    lisa_free(&allow);
    return 0;
}
