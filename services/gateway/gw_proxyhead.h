/*
 * gw_proxyhead: the request head a sandbox sends to the package proxy
 * (gw_proxy), parsed and checked, and the operator's allow list.
 *
 * A forward proxy sees two shapes: "CONNECT host:port HTTP/1.1" (a tunnel,
 * for https) and "GET http://host[:port]/path HTTP/1.1" (absolute form,
 * for plain http; HEAD too). Nothing else is accepted: no other method, no
 * origin-form target, no https:// in absolute form, no userinfo, no body,
 * no header name that is not an HTTP token.
 * The head is bounded (GW_PROXYHEAD_MAX); host names are lowered and
 * limited to letters, digits, '-' and '.', or a bracketed IPv6 literal.
 * The allow list is "host[:port],..."; an entry without a port allows
 * ports 80 and 443. The attempt token travels in Proxy-Authorization
 * ("Bearer <token>"), added by the agent's relay inside the sandbox.
 */
#ifndef GW_PROXYHEAD_H
#define GW_PROXYHEAD_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_PROXYHEAD_MAX  16384u /* bytes of a request head */
#define GW_PROXYHEAD_HOST 256u   /* bytes of a host name + NUL */
#define GW_PROXYHEAD_AUTH 560u   /* bytes of Proxy-Authorization + NUL */

typedef struct {
    bool connect;                 /* CONNECT (a tunnel) */
    char method[8];               /* CONNECT, GET or HEAD */
    char host[GW_PROXYHEAD_HOST]; /* lowered; IPv6 without brackets */
    uint16_t port;
    const char *path; /* origin-form target in the buffer (GET/HEAD) */
    size_t path_len;  /* its length */
    char auth[GW_PROXYHEAD_AUTH]; /* Proxy-Authorization value; "" none */
    size_t head_len;              /* bytes of the head, blank line included */
} gw_proxyhead_t;

/* Parses the head at the start of buf[0..len). LISA_OK fills *h (its path
 * points into buf); LISA_AGAIN when the head is not complete yet;
 * otherwise the status to answer in *status (400, 405, 431) with `err`
 * saying why. */
lisa_rc_t gw_proxyhead_parse(const char *buf, size_t len, gw_proxyhead_t *h,
                             int *status, char *err,
                             size_t errlen) LISA_NODISCARD;

/* The head to send upstream for GET/HEAD: origin-form request line, the
 * client's end-to-end headers (Proxy-*, Host and hop-by-hop ones left
 * out), "Host:" from the target and "Connection: close". `buf` is the one
 * that was parsed. Caller frees (lisa_free); *out_len gets the length. */
char *gw_proxyhead_upstream(const char *buf, const gw_proxyhead_t *h,
                            size_t *out_len);

/* True when host:port is on `allow` ("host[:port],...", blanks ignored;
 * hosts compared without case; "[v6]:port" for IPv6). */
bool gw_proxyhead_allowed(const char *allow, const char *host, uint16_t port);

#endif
