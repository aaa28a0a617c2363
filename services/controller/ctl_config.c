/*
 * ctl_config: the controller's table for lisa_config, and the checks that
 * span several settings.
 */
#include "ctl_config.h"

#include "lisa/lisa_config.h"
#include "lisa/lisa_log.h"

#include <stddef.h>
#include <string.h>

static const lisa_config_entry_t s_table[] = {
    {.name = "controller.controller_id",
     .env = "LISA_CTL_ID",
     .flag = "--controller-id",
     .type = LISA_CFG_STRING,
     .def = "ctl-1",
     .help = "this controller's id (labels its sandboxes)",
     .offset = offsetof(ctl_config_t, controller_id)},
    {.name = "controller.broker_rpc",
     .env = "LISA_BROKER_RPC_URL",
     .flag = "--broker-rpc",
     .type = LISA_CFG_STRING,
     .def = "tcp://127.0.0.1:7100",
     .help = "broker RPC endpoint",
     .offset = offsetof(ctl_config_t, broker_rpc)},
    {.name = "controller.broker_events",
     .env = "LISA_BROKER_EVENTS_URL",
     .flag = "--broker-events",
     .type = LISA_CFG_STRING,
     .def = "tcp://127.0.0.1:7102",
     .help = "broker event endpoint",
     .offset = offsetof(ctl_config_t, broker_events)},
    {.name = "controller.curve_cert",
     .env = "LISA_CTL_CURVE_CERT",
     .flag = "--curve-cert",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "this controller's secret CURVE certificate (empty: plain bus)",
     .offset = offsetof(ctl_config_t, curve_cert)},
    {.name = "controller.broker_cert",
     .env = "LISA_CTL_BROKER_CERT",
     .flag = "--broker-cert",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "the broker's public CURVE certificate",
     .offset = offsetof(ctl_config_t, broker_cert)},
    {.name = "controller.run_id",
     .env = "LISA_CTL_RUN",
     .flag = "--run-id",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "claim only this run",
     .offset = offsetof(ctl_config_t, run_id)},
    {.name = "controller.backend",
     .env = "LISA_CTL_BACKEND",
     .flag = "--backend",
     .type = LISA_CFG_STRING,
     .def = "local",
     .help = "sandbox backend: local, docker or k8s",
     .offset = offsetof(ctl_config_t, backend)},
    {.name = "controller.gateway_socket",
     .env = "LISA_GATEWAY_SOCKET",
     .flag = "--gateway-socket",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "host path of the gateway's unix socket (bound into sandboxes)",
     .offset = offsetof(ctl_config_t, gateway_socket)},
    {.name = "controller.gateway_url",
     .env = "LISA_GATEWAY_URL",
     .flag = "--gateway-url",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "gateway URL as the sandbox sees it (when no socket)",
     .offset = offsetof(ctl_config_t, gateway_url)},
    {.name = "controller.sandbox_network",
     .env = "LISA_CTL_SANDBOX_NETWORK",
     .flag = "--sandbox-network",
     .type = LISA_CFG_STRING,
     .def = "none",
     .help = "sandbox.network: none (no network), or packages (package "
             "indexes only, through the gateway's proxy)",
     .offset = offsetof(ctl_config_t, sandbox_network)},
    {.name = "controller.proxy_socket",
     .env = "LISA_CTL_PROXY_SOCKET",
     .flag = "--proxy-socket",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "packages: host path of the gateway's package-proxy socket "
             "(gateway.proxy_unix; bound into sandboxes)",
     .offset = offsetof(ctl_config_t, proxy_socket)},
    {.name = "controller.proxy_url",
     .env = "LISA_CTL_PROXY_URL",
     .flag = "--proxy-url",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "packages: the gateway's package proxy as the sandbox sees it, "
             "http://host:port (when no socket: docker with a network, k8s)",
     .offset = offsetof(ctl_config_t, proxy_url)},
    {.name = "controller.state_dir",
     .env = "LISA_CTL_STATE",
     .flag = "--state-dir",
     .type = LISA_CFG_STRING,
     .def = "lisa-controller",
     .help = "local backend: directory of sandbox labels and logs",
     .offset = offsetof(ctl_config_t, state_dir)},
    {.name = "controller.agent_path",
     .env = "LISA_CTL_AGENT",
     .flag = "--agent",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "host path of lisa-agent (default: next to this binary)",
     .offset = offsetof(ctl_config_t, agent_path)},
    {.name = "controller.sandbox_cmd",
     .env = "LISA_CTL_SANDBOX_CMD",
     .flag = "--sandbox-cmd",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "run this shell command in the sandbox instead of the agent",
     .offset = offsetof(ctl_config_t, sandbox_cmd)},
    {.name = "controller.bwrap",
     .env = "LISA_CTL_BWRAP",
     .flag = "--bwrap",
     .type = LISA_CFG_STRING,
     .def = "bwrap",
     .help = "bubblewrap binary",
     .offset = offsetof(ctl_config_t, bwrap)},
    {.name = "controller.cgroup_root",
     .env = "LISA_CTL_CGROUP",
     .flag = "--cgroup-root",
     .type = LISA_CFG_STRING,
     .def = "auto",
     .help = "cgroup v2 directory for per-sandbox limits: a writable "
             "path, auto (a probed subtree when root on cgroup v2) or "
             "empty (a uid per sandbox and rlimits)",
     .offset = offsetof(ctl_config_t, cgroup_root)},
    {.name = "controller.docker_socket",
     .env = "LISA_DOCKER_SOCKET",
     .flag = "--docker-socket",
     .type = LISA_CFG_STRING,
     .def = "/var/run/docker.sock",
     .help = "Docker Engine API socket",
     .offset = offsetof(ctl_config_t, docker_socket)},
    {.name = "controller.image",
     .env = "LISA_CTL_IMAGE",
     .flag = "--image",
     .type = LISA_CFG_STRING,
     .def = "lisa-sandbox:latest",
     .help = "sandbox image (docker, k8s)",
     .offset = offsetof(ctl_config_t, image)},
    {.name = "controller.runtime",
     .env = "LISA_CTL_RUNTIME",
     .flag = "--runtime",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "docker runtime, e.g. runsc",
     .offset = offsetof(ctl_config_t, runtime)},
    {.name = "controller.network",
     .env = "LISA_CTL_NETWORK",
     .flag = "--network",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help =
         "docker network of sandboxes (empty: none; a URL gateway needs one)",
     .offset = offsetof(ctl_config_t, network)},
    {.name = "controller.k8s_api",
     .env = "LISA_K8S_API",
     .flag = "--k8s-api",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "Kubernetes API server URL (empty: in-cluster)",
     .offset = offsetof(ctl_config_t, k8s_api)},
    {.name = "controller.k8s_namespace",
     .env = "LISA_K8S_NAMESPACE",
     .flag = "--k8s-namespace",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "namespace of sandbox Jobs (empty: in-cluster namespace)",
     .offset = offsetof(ctl_config_t, k8s_namespace)},
    {.name = "controller.k8s_token_file",
     .env = "LISA_K8S_TOKEN_FILE",
     .flag = "--k8s-token-file",
     .type = LISA_CFG_STRING,
     .def = "/var/run/secrets/kubernetes.io/serviceaccount/token",
     .help = "bearer token file (re-read every 5 minutes)",
     .offset = offsetof(ctl_config_t, k8s_token_file)},
    {.name = "controller.k8s_ca_file",
     .env = "LISA_K8S_CA_FILE",
     .flag = "--k8s-ca-file",
     .type = LISA_CFG_STRING,
     .def = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
     .help = "API server CA bundle",
     .offset = offsetof(ctl_config_t, k8s_ca_file)},
    {.name = "controller.log_level",
     .env = "LISA_LOG_LEVEL",
     .flag = "--log-level",
     .type = LISA_CFG_STRING,
     .def = "info",
     .help = "error, warn, info or debug",
     .offset = offsetof(ctl_config_t, log_level)},
    {.name = "controller.max_concurrency",
     .env = "LISA_CTL_MAX",
     .flag = "--max-concurrency",
     .type = LISA_CFG_UINT64,
     .def = "8",
     .help = "sandboxes alive at once",
     .offset = offsetof(ctl_config_t, max_concurrency),
     .min = "1",
     .max = "100000"},
    {.name = "controller.create_per_s",
     .env = "LISA_CTL_RATE",
     .flag = "--create-per-s",
     .type = LISA_CFG_UINT64,
     .def = "10",
     .help = "sandbox creations per second",
     .offset = offsetof(ctl_config_t, create_per_s),
     .min = "1",
     .max = "100000"},
    {.name = "controller.create_burst",
     .env = "LISA_CTL_BURST",
     .flag = "--create-burst",
     .type = LISA_CFG_UINT64,
     .def = "10",
     .help = "sandbox creations allowed in a burst",
     .offset = offsetof(ctl_config_t, create_burst),
     .min = "1",
     .max = "100000"},
    {.name = "controller.tick_ms",
     .env = "LISA_CTL_TICK_MS",
     .flag = "--tick-ms",
     .type = LISA_CFG_DURATION,
     .def = "200",
     .help = "reconcile period",
     .offset = offsetof(ctl_config_t, tick_ms),
     .min = "10ms",
     .max = "60000ms"},
    {.name = "controller.verify_ms",
     .env = "LISA_CTL_VERIFY_MS",
     .flag = "--verify-ms",
     .type = LISA_CFG_DURATION,
     .def = "5000",
     .help = "cross-check running attempts with the broker this often",
     .offset = offsetof(ctl_config_t, verify_ms),
     .min = "50ms",
     .max = "3600000ms"},
    {.name = "controller.grace_ms",
     .env = "LISA_CTL_GRACE_MS",
     .flag = "--grace-ms",
     .type = LISA_CFG_DURATION,
     .def = "5000",
     .help = "time past a deadline before the sandbox is killed",
     .offset = offsetof(ctl_config_t, grace_ms),
     .min = "0ms",
     .max = "3600000ms"},
    {.name = "controller.backoff_max_ms",
     .env = "LISA_CTL_BACKOFF_MAX_MS",
     .flag = "--backoff-max-ms",
     .type = LISA_CFG_DURATION,
     .def = "60000",
     .help = "longest claim pause after a backend outage",
     .offset = offsetof(ctl_config_t, backoff_max_ms),
     .min = "10ms",
     .max = "3600000ms"},
    {.name = "controller.cpu_millis",
     .env = "LISA_CTL_CPU_MILLIS",
     .flag = "--cpu-millis",
     .type = LISA_CFG_UINT64,
     .def = "1000",
     .help = "default CPU limit (millicores)",
     .offset = offsetof(ctl_config_t, cpu_millis),
     .min = "10",
     .max = "1000000"},
    {.name = "controller.pids",
     .env = "LISA_CTL_PIDS",
     .flag = "--pids",
     .type = LISA_CFG_UINT64,
     .def = "256",
     .help = "default process limit",
     .offset = offsetof(ctl_config_t, pids),
     .min = "8",
     .max = "1000000"},
    {.name = "controller.memory_rlimit",
     .env = "LISA_CTL_MEMORY_RLIMIT",
     .flag = "--memory-rlimit",
     .type = LISA_CFG_BOOL,
     .def = "true",
     .help = "local backend without cgroups: cap the address space (0 for  "
             "sanitizer builds, which reserve terabytes)",
     .offset = offsetof(ctl_config_t, memory_rlimit)},
    {.name = "controller.k8s_ttl_s",
     .env = "LISA_K8S_TTL_S",
     .flag = "--k8s-ttl-s",
     .type = LISA_CFG_UINT64,
     .def = "600",
     .help = "ttlSecondsAfterFinished of sandbox Jobs",
     .offset = offsetof(ctl_config_t, k8s_ttl_s),
     .min = "0",
     .max = "604800"},
    {.name = "controller.rpc_timeout_ms",
     .env = "LISA_CTL_RPC_TIMEOUT_MS",
     .flag = "--rpc-timeout-ms",
     .type = LISA_CFG_DURATION,
     .def = "3000",
     .help = "deadline of one broker call",
     .offset = offsetof(ctl_config_t, rpc_timeout_ms),
     .min = "10ms",
     .max = "600000ms"},
    {.name = "controller.sandbox_uid",
     .env = "LISA_CTL_SANDBOX_UID",
     .flag = "--sandbox-uid",
     .type = LISA_CFG_UINT64,
     .def = "700000000",
     .help = "local backend as root: first uid of the sandboxes' range "
             "(one uid per live sandbox; no account needs it)",
     .offset = offsetof(ctl_config_t, sandbox_uid),
     .min = "1",
     .max = "4294967294"},
    {.name = "controller.sandbox_uids",
     .env = "LISA_CTL_SANDBOX_UIDS",
     .flag = "--sandbox-uids",
     .type = LISA_CFG_UINT64,
     .def = "65536",
     .help = "local backend as root: uids in the sandboxes' range (at "
             "least max_concurrency)",
     .offset = offsetof(ctl_config_t, sandbox_uids),
     .min = "1",
     .max = "16777216"},
    {.name = "controller.log_bytes",
     .env = "LISA_CTL_LOG_BYTES",
     .flag = "--log-bytes",
     .type = LISA_CFG_SIZE,
     .def = "1MiB",
     .help = "local backend: a sandbox's output kept on the host per "
             "attempt (the rest is counted and dropped)",
     .offset = offsetof(ctl_config_t, log_bytes),
     .min = "4KiB",
     .max = "1GiB"},
    {.name = "controller.memory_bytes",
     .env = "LISA_CTL_MEMORY",
     .flag = "--memory-bytes",
     .type = LISA_CFG_SIZE,
     .def = "2GiB",
     .help = "default memory limit (no swap)",
     .offset = offsetof(ctl_config_t, memory_bytes),
     .min = "16MiB",
     .max = "1TiB"},
    {.name = "controller.disk_bytes",
     .env = "LISA_CTL_DISK",
     .flag = "--disk-bytes",
     .type = LISA_CFG_SIZE,
     .def = "1GiB",
     .help = "default /testbed size",
     .offset = offsetof(ctl_config_t, disk_bytes),
     .min = "1MiB",
     .max = "1TiB"},
    {.name = "controller.deadline_ms",
     .env = "LISA_CTL_DEADLINE_MS",
     .flag = "--deadline-ms",
     .type = LISA_CFG_DURATION,
     .def = "1800000",
     .help = "deadline when a claim carries none",
     .offset = offsetof(ctl_config_t, deadline_ms),
     .min = "1000ms",
     .max = "604800000ms"},
    {.name = "controller.print_job",
     .flag = "--print-job",
     .type = LISA_CFG_BOOL,
     .def = "false",
     .help = "print the Job the k8s backend would create for an example "
             "attempt (JSON) and exit",
     .offset = offsetof(ctl_config_t, print_job)},
};

#define S_ROWS (sizeof s_table / sizeof s_table[0])

lisa_rc_t
ctl_config_load(ctl_config_t *cfg, int argc, char **argv, FILE *out, char *err,
                size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    lisa_config_opts_t opts = {
        .prog = "lisa-controller",
        .about = "Turns queued rollouts into sandboxes and cleans up after "
                 "them.",
        .help_out = out,
    };
    lisa_rc_t rc = lisa_config_load_ex(s_table, S_ROWS, cfg, argc, argv, &opts,
                                       err, errlen);
    if (rc != LISA_OK)
        return rc;
    static const char *backends[] = {"local", "docker", "k8s"};
    int known = 0;
    for (size_t i = 0; i < 3; i++)
        known |= cfg->backend && strcmp(cfg->backend, backends[i]) == 0;
    if (!known) {
        snprintf(err, errlen, "backend '%.32s' is not local, docker or k8s",
                 cfg->backend ? cfg->backend : "");
        return LISA_INVALID;
    }
    if (!cfg->controller_id || !*cfg->controller_id ||
        strlen(cfg->controller_id) > 63) {
        snprintf(err, errlen, "controller-id must have 1 to 63 bytes");
        return LISA_INVALID;
    }
    if (strcmp(cfg->sandbox_network, "none") != 0 &&
        strcmp(cfg->sandbox_network, "packages") != 0) {
        snprintf(err, errlen, "sandbox-network '%.32s' is not none or packages",
                 cfg->sandbox_network);
        return LISA_INVALID;
    }
    if (strcmp(cfg->sandbox_network, "packages") == 0 &&
        !(cfg->proxy_socket && *cfg->proxy_socket) &&
        !(cfg->proxy_url && strncmp(cfg->proxy_url, "http://", 7) == 0)) {
        snprintf(err, errlen,
                 "sandbox-network packages needs --proxy-socket "
                 "or an http:// --proxy-url");
        return LISA_INVALID;
    }
    /* Unset strings read as "" everywhere else. */
    for (size_t i = 0; i < S_ROWS; i++) {
        if (s_table[i].type != LISA_CFG_STRING)
            continue;
        char **slot = (char **) (void *) ((char *) cfg + s_table[i].offset);
        if (!*slot)
            rc = lisa_config_set(s_table, S_ROWS, cfg, s_table[i].name, "", err,
                                 errlen);
        if (rc != LISA_OK)
            return rc;
    }
    return LISA_OK;
}

void
ctl_config_dump(const ctl_config_t *cfg)
{
    lisa_config_dump(s_table, S_ROWS, cfg, NULL);
}

void
ctl_config_clear(ctl_config_t *cfg)
{
    lisa_config_free(s_table, S_ROWS, cfg);
}

lisa_rc_t
ctl_config_markdown(FILE *out)
{
    return lisa_config_markdown(out, "lisa-controller", s_table, S_ROWS);
}
