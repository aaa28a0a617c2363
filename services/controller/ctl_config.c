/*
 * ctl_config: table-driven settings.
 */
#include "ctl_config.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { S_STR, S_U64 } s_type_t;

typedef struct {
    const char *name;
    const char *env;
    s_type_t type;
    size_t offset;
    const char *def;
    uint64_t min, max;
    const char *help;
} s_row_t;

#define STR(f, n, e, d, h)                                                     \
    {                                                                          \
        n, e, S_STR, offsetof(ctl_config_t, f), d, 0, 0, h                     \
    }
#define U64(f, n, e, d, lo, hi, h)                                             \
    {                                                                          \
        n, e, S_U64, offsetof(ctl_config_t, f), d, lo, hi, h                   \
    }

static const s_row_t s_table[] = {
    STR(controller_id, "controller-id", "LISA_CTL_ID", "ctl-1",
        "this controller's id (labels its sandboxes)"),
    STR(broker_rpc, "broker-rpc", "LISA_BROKER_RPC_URL", "tcp://127.0.0.1:7100",
        "broker RPC endpoint"),
    STR(broker_events, "broker-events", "LISA_BROKER_EVENTS_URL",
        "tcp://127.0.0.1:7102", "broker event endpoint"),
    STR(run_id, "run-id", "LISA_CTL_RUN", "", "claim only this run"),
    STR(backend, "backend", "LISA_CTL_BACKEND", "local",
        "sandbox backend: local, docker or k8s"),
    STR(gateway_socket, "gateway-socket", "LISA_GATEWAY_SOCKET", "",
        "host path of the gateway's unix socket (bound into sandboxes)"),
    STR(gateway_url, "gateway-url", "LISA_GATEWAY_URL", "",
        "gateway URL as the sandbox sees it (when no socket)"),
    STR(state_dir, "state-dir", "LISA_CTL_STATE", "lisa-controller",
        "local backend: directory of sandbox labels and logs"),
    STR(agent_path, "agent", "LISA_CTL_AGENT", "",
        "host path of lisa-agent (default: next to this binary)"),
    STR(sandbox_cmd, "sandbox-cmd", "LISA_CTL_SANDBOX_CMD", "",
        "run this shell command in the sandbox instead of the agent"),
    STR(bwrap, "bwrap", "LISA_CTL_BWRAP", "bwrap", "bubblewrap binary"),
    STR(cgroup_root, "cgroup-root", "LISA_CTL_CGROUP", "",
        "writable cgroup v2 directory for per-sandbox limits"),
    STR(docker_socket, "docker-socket", "LISA_DOCKER_SOCKET",
        "/var/run/docker.sock", "Docker Engine API socket"),
    STR(image, "image", "LISA_CTL_IMAGE", "lisa-sandbox:latest",
        "sandbox image (docker, k8s)"),
    STR(runtime, "runtime", "LISA_CTL_RUNTIME", "",
        "docker runtime, e.g. runsc"),
    STR(network, "network", "LISA_CTL_NETWORK", "",
        "docker network of sandboxes (empty: none; a URL gateway needs one)"),
    STR(k8s_api, "k8s-api", "LISA_K8S_API", "",
        "Kubernetes API server URL (empty: in-cluster)"),
    STR(k8s_namespace, "k8s-namespace", "LISA_K8S_NAMESPACE", "",
        "namespace of sandbox Jobs (empty: in-cluster namespace)"),
    STR(k8s_token_file, "k8s-token-file", "LISA_K8S_TOKEN_FILE",
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "bearer token file (re-read every 5 minutes)"),
    STR(k8s_ca_file, "k8s-ca-file", "LISA_K8S_CA_FILE",
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        "API server CA bundle"),
    STR(log_level, "log-level", "LISA_LOG_LEVEL", "info",
        "error, warn, info or debug"),
    U64(max_concurrency, "max-concurrency", "LISA_CTL_MAX", "8", 1, 100000,
        "sandboxes alive at once"),
    U64(create_per_s, "create-per-s", "LISA_CTL_RATE", "10", 1, 100000,
        "sandbox creations per second"),
    U64(create_burst, "create-burst", "LISA_CTL_BURST", "10", 1, 100000,
        "sandbox creations allowed in a burst"),
    U64(tick_ms, "tick-ms", "LISA_CTL_TICK_MS", "200", 10, 60000,
        "reconcile period"),
    U64(verify_ms, "verify-ms", "LISA_CTL_VERIFY_MS", "5000", 50, 3600000,
        "cross-check running attempts with the broker this often"),
    U64(grace_ms, "grace-ms", "LISA_CTL_GRACE_MS", "5000", 0, 3600000,
        "time past a deadline before the sandbox is killed"),
    U64(rpc_timeout_ms, "rpc-timeout-ms", "LISA_CTL_RPC_TIMEOUT_MS", "3000", 10,
        600000, "deadline of one broker call"),
    U64(backoff_max_ms, "backoff-max-ms", "LISA_CTL_BACKOFF_MAX_MS", "60000",
        10, 3600000, "longest claim pause after a backend outage"),
    U64(sandbox_uid, "sandbox-uid", "LISA_CTL_SANDBOX_UID", "65534", 1,
        4294967294u, "uid of sandboxes when the controller runs as root"),
    U64(cpu_millis, "cpu-millis", "LISA_CTL_CPU_MILLIS", "1000", 10, 1000000,
        "default CPU limit (millicores)"),
    U64(memory_bytes, "memory-bytes", "LISA_CTL_MEMORY", "2147483648", 16777216,
        1099511627776ull, "default memory limit (no swap)"),
    U64(pids, "pids", "LISA_CTL_PIDS", "256", 8, 1000000,
        "default process limit"),
    U64(disk_bytes, "disk-bytes", "LISA_CTL_DISK", "1073741824", 1048576,
        1099511627776ull, "default /testbed size"),
    U64(deadline_ms, "deadline-ms", "LISA_CTL_DEADLINE_MS", "1800000", 1000,
        604800000, "deadline when a claim carries none"),
    U64(memory_rlimit, "memory-rlimit", "LISA_CTL_MEMORY_RLIMIT", "1", 0, 1,
        "local backend without cgroups: cap the address space (0 for "
        "sanitizer builds, which reserve terabytes)"),
    U64(k8s_ttl_s, "k8s-ttl-s", "LISA_K8S_TTL_S", "600", 0, 604800,
        "ttlSecondsAfterFinished of sandbox Jobs"),
};

#define S_ROWS (sizeof s_table / sizeof s_table[0])

static const char *
s_getenv(const char *n)
{
    return getenv(n);
}

static lisa_rc_t
s_set(ctl_config_t *cfg, const s_row_t *row, const char *val, char *err,
      size_t errlen)
{
    char *base = (char *) cfg + row->offset;
    if (row->type == S_STR) {
        if (strlen(val) > 4096) {
            snprintf(err, errlen, "%s: value too long", row->name);
            return LISA_INVALID;
        }
        char **slot = (char **) (void *) base;
        lisa_free(slot);
        *slot = lisa_strdup(val);
        return LISA_OK;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (!*val || *end || errno || val[0] == '-' || v < row->min ||
        v > row->max) {
        snprintf(err, errlen, "%s: '%.64s' is not an integer in [%llu, %llu]",
                 row->name, val, (unsigned long long) row->min,
                 (unsigned long long) row->max);
        return LISA_INVALID;
    }
    *(uint64_t *) (void *) base = (uint64_t) v;
    return LISA_OK;
}

static void
s_help(FILE *out)
{
    fprintf(out, "usage: lisa-controller [--name=value ...]\n\n"
                 "Turns queued rollouts into sandboxes and cleans up after "
                 "them.\nSettings (flag, environment variable, default):\n");
    for (size_t i = 0; i < S_ROWS; i++)
        fprintf(out, "  --%-18s %-24s %-22s %s\n", s_table[i].name,
                s_table[i].env, *s_table[i].def ? s_table[i].def : "\"\"",
                s_table[i].help);
}

lisa_rc_t
ctl_config_load(ctl_config_t *cfg, int argc, char **argv,
                const char *(*env)(const char *), FILE *out, char *err,
                size_t errlen)
{
    lisa_rc_t rc;
    memset(cfg, 0, sizeof *cfg);
    if (!env)
        env = s_getenv;
    for (size_t i = 0; i < S_ROWS; i++) {
        if ((rc = s_set(cfg, &s_table[i], s_table[i].def, err, errlen)))
            return rc;
        const char *v = env(s_table[i].env);
        if (v && (rc = s_set(cfg, &s_table[i], v, err, errlen)))
            return rc;
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            s_help(out ? out : stdout);
            return LISA_AGAIN;
        }
        const char *eq = strchr(arg, '=');
        const s_row_t *row = NULL;
        for (size_t i = 0; eq && strncmp(arg, "--", 2) == 0 && i < S_ROWS;
             i++) {
            size_t n = strlen(s_table[i].name);
            if ((size_t) (eq - arg - 2) == n &&
                strncmp(arg + 2, s_table[i].name, n) == 0)
                row = &s_table[i];
        }
        if (!row) {
            snprintf(err, errlen, "unknown argument '%.64s' (see --help)", arg);
            return LISA_INVALID;
        }
        if ((rc = s_set(cfg, row, eq + 1, err, errlen)))
            return rc;
    }
    static const char *backends[] = {"local", "docker", "k8s"};
    int known = 0;
    for (size_t i = 0; i < 3; i++)
        known |= strcmp(cfg->backend, backends[i]) == 0;
    if (!known) {
        snprintf(err, errlen, "backend '%.32s' is not local, docker or k8s",
                 cfg->backend);
        return LISA_INVALID;
    }
    if (!*cfg->controller_id || strlen(cfg->controller_id) > 63) {
        snprintf(err, errlen, "controller-id must have 1 to 63 bytes");
        return LISA_INVALID;
    }
    return LISA_OK;
}

void
ctl_config_dump(const ctl_config_t *cfg)
{
    for (size_t i = 0; i < S_ROWS; i++) {
        const char *base = (const char *) cfg + s_table[i].offset;
        if (s_table[i].type == S_STR)
            lisa_log_info("config %s=%s", s_table[i].name,
                          *(char *const *) (const void *) base);
        else
            lisa_log_info(
                "config %s=%llu", s_table[i].name,
                (unsigned long long) *(const uint64_t *) (const void *) base);
    }
}

void
ctl_config_clear(ctl_config_t *cfg)
{
    for (size_t i = 0; i < S_ROWS; i++) {
        if (s_table[i].type != S_STR)
            continue;
        char **slot = (char **) (void *) ((char *) cfg + s_table[i].offset);
        lisa_free(slot);
    }
}
