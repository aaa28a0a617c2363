/*
 * ctl_config: the controller's settings, one declarative lisa_config
 * table: name, environment variable, flag, type, default, bounds and help
 * per row. The table drives parsing, validation, --help, the start-up dump
 * and the Markdown reference. Precedence: defaults < --config file <
 * environment < flags. Durations take "500ms"/"2s"/"1m" (bare: ms), sizes
 * "512MiB"/"1GiB" (bare: bytes).
 */
#ifndef CTL_CONFIG_H
#define CTL_CONFIG_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    char *controller_id;   /* names this controller to the broker */
    char *broker_rpc;      /* broker ROUTER endpoint */
    char *broker_events;   /* broker PUB endpoint */
    char *curve_cert;      /* own secret CURVE certificate ("" = plain) */
    char *broker_cert;     /* the broker's public CURVE certificate */
    char *run_id;          /* claim only this run ("" = any) */
    char *backend;         /* local | docker | k8s */
    char *gateway_socket;  /* host path of the gateway's unix socket */
    char *gateway_url;     /* URL the sandbox uses when no socket */
    char *sandbox_network; /* none | packages (the gateway's proxy) */
    char *proxy_socket;    /* packages: host path of the proxy's socket */
    char *proxy_url;       /* packages: proxy URL as the sandbox sees it */
    char *state_dir;       /* local backend: labels and logs */
    char *agent_path;      /* host path of lisa-agent (local backend) */
    char *sandbox_cmd;     /* replaces the agent (tests, debugging) */
    char *bwrap;           /* bubblewrap binary */
    char *cgroup_root; /* cgroup v2 directory delegated to us ("" = rlimits) */
    char *docker_socket; /* Docker Engine API socket */
    char *image;         /* sandbox image (docker, k8s) */
    char *runtime;       /* docker runtime, e.g. runsc ("" = default) */
    char *network;       /* docker network ("" = none) */
    char *k8s_api;       /* API server URL ("" = in-cluster) */
    char *k8s_namespace;
    char *k8s_token_file;
    char *k8s_ca_file;
    char *log_level;
    uint64_t max_concurrency; /* sandboxes alive at once */
    uint64_t create_per_s;    /* sandbox creations per second (rate) */
    uint64_t create_burst;    /* creations allowed in a burst */
    uint64_t tick_ms;         /* reconcile period */
    uint64_t verify_ms;       /* cross-check with the broker */
    uint64_t grace_ms;        /* past a deadline before a sandbox is killed */
    uint64_t rpc_timeout_ms;
    uint64_t backoff_max_ms; /* longest pause after a backend outage */
    uint64_t sandbox_uid;    /* first uid of sandboxes when we run as root */
    uint64_t sandbox_uids;   /* uids in that range */
    uint64_t log_bytes;      /* local: output kept per attempt */
    uint64_t cpu_millis;     /* defaults when the broker's limits say 0 */
    uint64_t memory_bytes;
    uint64_t pids;
    uint64_t disk_bytes;
    uint64_t deadline_ms;   /* when a claim carries no deadline */
    uint64_t k8s_ttl_s;     /* ttlSecondsAfterFinished */
    uint64_t memory_rlimit; /* local without cgroups: RLIMIT_AS (0: off) */
    bool print_job;         /* print the k8s sandbox Job and exit */
} ctl_config_t;

/* Fills *cfg from defaults, --config file, environment and argv.
 * LISA_OK; LISA_AGAIN after printing --help to `out` (NULL: stdout);
 * LISA_INVALID with a message in err. Free with ctl_config_clear. */
lisa_rc_t ctl_config_load(ctl_config_t *cfg, int argc, char **argv, FILE *out,
                          char *err, size_t errlen) LISA_NODISCARD;

/* Writes the settings as a Markdown reference. */
lisa_rc_t ctl_config_markdown(FILE *out) LISA_NODISCARD;

/* Logs every setting at info level. */
void ctl_config_dump(const ctl_config_t *cfg);

/* Frees the strings of *cfg. */
void ctl_config_clear(ctl_config_t *cfg);

#endif
