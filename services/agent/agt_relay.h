/*
 * agt_relay: the sandbox's end of the package proxy
 * (`sandbox.network=packages`).
 *
 * pip and apt want a TCP proxy address; the gateway's package proxy is a
 * unix socket bound into the sandbox (local) or a TCP port (docker, k8s).
 * The relay listens on 127.0.0.1:<port> in the sandbox's own network
 * namespace (which the model's commands share) and passes each
 * connection on to the gateway's proxy, with "Proxy-Authorization:
 * Bearer <attempt token>" added after the request line: the token stays
 * in the agent, which no command can read. A thread accepts; each
 * connection (at most AGT_RELAY_MAX_CONNS at once) has a thread of its
 * own that copies bytes both ways until either side closes or it has
 * been quiet for AGT_RELAY_IDLE_MS. The gateway checks everything (the
 * token, the allow list, the caps); the relay only carries.
 */
#ifndef AGT_RELAY_H
#define AGT_RELAY_H

#include "lisa/lisa_rc.h"

#include <stdint.h>

#define AGT_RELAY_MAX_CONNS 32
#define AGT_RELAY_IDLE_MS   120000

typedef struct {
    const char *socket; /* the gateway proxy's unix socket, or */
    const char *url;    /* its http://host:port (used when no socket) */
    const char *token;  /* the attempt token (copied) */
    uint16_t port;      /* listen port on 127.0.0.1 (0: the kernel picks) */
} agt_relay_cfg_t;

typedef struct agt_relay agt_relay_t;

/* Listens and starts the accepting thread; NULL (logged) when the port
 * cannot be bound or the configuration is unusable. */
agt_relay_t *agt_relay_start(const agt_relay_cfg_t *cfg);

/* The port the relay listens on (0 for NULL). */
uint16_t agt_relay_port(const agt_relay_t *self);

/* Stops accepting (open connections end on their own). Safe on NULL;
 * sets NULL. */
void agt_relay_stop(agt_relay_t **self);

/* Points the model's commands at the relay: http_proxy, https_proxy (both
 * cases) in this process's environment, which commands inherit, and no
 * no_proxy. Call before any thread starts (setenv is not thread-safe). */
void agt_relay_env(uint16_t port);

#endif
