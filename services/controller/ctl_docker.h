/*
 * ctl_docker: sandboxes as Docker containers, through the Engine API on
 * its unix socket (common's lisa_http_client on the controller's loop;
 * never the docker CLI).
 *
 * The API version is negotiated once (unversioned GET /version; every
 * later path is prefixed with /v<ApiVersion>), so current engines that
 * refuse old clients keep working. Each container: the sandbox image
 * running lisa-agent as a non-root user, NetworkMode none (the gateway's
 * unix socket is bound in; a URL gateway needs a named network), every
 * capability dropped, no-new-privileges, a read-only root with
 * size-limited tmpfs /testbed and /tmp, memory with swap disabled
 * (MemorySwap = Memory), NanoCpus, PidsLimit, an init process, and
 * optionally the runsc (gVisor) runtime. Labels carry run, rollout,
 * attempt, controller and deadline; the Docker socket itself is never
 * mounted into a sandbox. Containers are not auto-removed, so the exit
 * code, the OOM flag and the last log line can be read before removal.
 */
#ifndef CTL_DOCKER_H
#define CTL_DOCKER_H

#include "ctl_backend.h"

typedef struct {
    const char *controller_id;
    const char *socket; /* Engine API socket */
    const char *image;
    const char *runtime;        /* "" or e.g. "runsc" */
    const char *network;        /* "" -> "none" */
    const char *gateway_socket; /* host path bound to /run/lisa/gateway.sock */
    const char *gateway_url;    /* when no socket (needs a network) */
    const char *proxy_socket;   /* packages: the gateway's package proxy,
                                   bound to /run/lisa/proxy.sock */
    const char *proxy_url;      /* packages: its URL when no socket */
    const char *sandbox_cmd;    /* "" -> the image's lisa-agent */
    const char *user;           /* "" -> "65534:65534" */
} ctl_docker_cfg_t;

/* Fills *out with a docker backend (nothing is contacted until the
 * controller attaches it to its loop and calls it). */
lisa_rc_t ctl_docker_new(const ctl_docker_cfg_t *cfg,
                         ctl_backend_t *out) LISA_NODISCARD;

#endif
