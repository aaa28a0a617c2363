/*
 * gw_proxy: the package proxy, the one way a sandbox in
 * `sandbox.network=packages` mode reaches anything but the gateway.
 *
 * An HTTP forward proxy on listeners of its own (a unix socket bound into
 * local sandboxes, a TCP port for docker and k8s): "GET http://host/path"
 * is sent on to the origin in origin form with "Connection: close", and
 * "CONNECT host:port" opens a tunnel (https; the TLS is the client's, end
 * to end). Every request needs "Proxy-Authorization: Bearer <attempt
 * token>" (407 otherwise), and its host and port must be on the
 * operator's allow list (403 otherwise). Each attempt has caps on the
 * requests it makes and the bytes relayed for it (both directions): a
 * request over a cap is answered 429, a transfer that passes the byte cap
 * is cut. One log line per request names the attempt, the target, the
 * outcome and the bytes; lisa_gateway_proxy_requests_total (by outcome)
 * and lisa_gateway_proxy_bytes_total count them.
 *
 * Nothing blocks the gateway's loop: the sockets are non-blocking in one
 * epoll set of the module's own, whose descriptor the zloop polls; a host
 * name is resolved on a short-lived thread that hands its answer back
 * through a socket in the same set (numeric hosts are resolved at once).
 */
#ifndef GW_PROXY_H
#define GW_PROXY_H

#include "gw_auth.h"
#include "gw_metrics.h"
#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdint.h>

typedef struct {
    const char *unix_path; /* listener for local sandboxes (NULL/"": none) */
    const char *address;   /* TCP listen address (NULL/"": none) */
    uint16_t port;         /* TCP port (0: ephemeral) */
    const char *allow;     /* "host[:port],..." (gw_proxyhead_allowed) */
    uint64_t max_requests; /* per attempt */
    uint64_t max_bytes;    /* relayed per attempt, both directions */
    uint64_t idle_ms;      /* a connection quiet this long is closed */
    uint64_t max_conns;    /* open client connections, all attempts */
} gw_proxy_cfg_t;

typedef struct gw_proxy_t gw_proxy_t;

/* Starts the proxy on `loop`; `auth` and `m` are borrowed and outlive it.
 * NULL (logged) when a listener cannot be opened. */
gw_proxy_t *gw_proxy_new(const gw_proxy_cfg_t *cfg, zloop_t *loop,
                         gw_auth_t *auth, gw_metrics_t *m);

/* Closes every connection and listener. Safe on NULL; sets NULL. */
void gw_proxy_destroy(gw_proxy_t **self);

/* The bound TCP port (0 when there is no TCP listener). */
uint16_t gw_proxy_port(const gw_proxy_t *self);

#endif
