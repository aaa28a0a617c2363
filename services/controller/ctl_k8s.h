/*
 * ctl_k8s: sandboxes as Kubernetes batch/v1 Jobs, through the API server's
 * REST interface (common's lisa_http_client on the controller's loop,
 * bearer token, CA bundle).
 *
 * Each attempt is one Job with a deterministic name (rollout + attempt),
 * so a repeated create answers 409 and is taken as "exists". The Job:
 * backoffLimit 0 and restartPolicy Never (the broker owns retries),
 * activeDeadlineSeconds from the attempt's deadline, ttlSecondsAfterFinished
 * for garbage collection, automountServiceAccountToken false, a non-root
 * security context with every capability dropped, no privilege escalation,
 * a read-only root, RuntimeDefault seccomp, emptyDir /testbed and /tmp
 * with size limits, CPU/memory/ephemeral-storage limits. Labels carry the
 * controller (the list selector); annotations carry the exact run,
 * rollout, attempt and deadline.
 *
 * The controller's view is a cache: one LIST (keeping its
 * resourceVersion), then a WATCH from that version, a streaming request
 * whose events update the cache as they arrive. Bookmarks advance the version;
 * a 410 Gone, in the stream as an ERROR event or as a status, drops the
 * cache and re-lists. Deletes use propagationPolicy=Background, since the
 * API's default for Jobs orphans their pods. The token file is re-read
 * every five minutes (tokens are rotated).
 */
#ifndef CTL_K8S_H
#define CTL_K8S_H

#include "ctl_backend.h"

typedef struct {
    const char *controller_id;
    const char *api;        /* https://host:port; "" -> in-cluster */
    const char *namespace_; /* "" -> the service account's namespace */
    const char *token_file; /* bearer token ("" -> none) */
    const char *ca_file;    /* CA bundle ("" -> system) */
    const char *image;
    const char *gateway_url; /* the sandbox reaches the gateway by URL */
    const char *proxy_url;   /* packages: the gateway's package proxy */
    const char *sandbox_cmd; /* "" -> the image's lisa-agent */
    unsigned ttl_s;          /* ttlSecondsAfterFinished */
} ctl_k8s_cfg_t;

/* Fills *out with a k8s backend (nothing is contacted yet). */
lisa_rc_t ctl_k8s_new(const ctl_k8s_cfg_t *cfg,
                      ctl_backend_t *out) LISA_NODISCARD;

/* The Job the backend creates for `spec`, as indented JSON text (free
 * with free()); NULL when cfg or spec lacks the image, the gateway URL or
 * an id. Contacts nothing: for `lisa-controller --print-job` and tests. */
char *ctl_k8s_job_json(const ctl_k8s_cfg_t *cfg, const ctl_spec_t *spec);

#endif
