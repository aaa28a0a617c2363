/*
 * lisa-controller: turns queued rollouts into sandboxes and cleans up
 * after them. Reads its configuration, makes the backend, runs the
 * reconcile loop until SIGINT/SIGTERM, tears down in reverse.
 */
#include "ctl_backend.h"
#include "ctl_config.h"
#include "ctl_docker.h"
#include "ctl_k8s.h"
#include "ctl_local.h"
#include "ctl_server.h"
#include "lisa/lisa_clock.h"
#include "lisa/lisa_curve.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <curl/curl.h>
#include <czmq.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t s_stop = 0;

static void
s_on_signal(int sig)
{
    (void) sig;
    s_stop = 1;
}

/* lisa-agent next to this binary, when not configured. */
static char *
s_default_agent(void)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return lisa_strdup("");
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return lisa_strdup("");
    snprintf(slash + 1, sizeof self - (size_t) (slash + 1 - self),
             "lisa-agent");
    return lisa_strdup(self);
}

static lisa_rc_t
s_make_backend(const ctl_config_t *cfg, ctl_backend_t *be)
{
    /* the package proxy reaches sandboxes only in packages mode */
    bool pk = strcmp(cfg->sandbox_network, "packages") == 0;
    const char *proxy_socket = pk ? cfg->proxy_socket : NULL;
    const char *proxy_url = pk ? cfg->proxy_url : NULL;
    if (strcmp(cfg->backend, "local") == 0) {
        char *agent =
            *cfg->agent_path ? lisa_strdup(cfg->agent_path) : s_default_agent();
        ctl_local_cfg_t lc = {
            .controller_id = cfg->controller_id,
            .state_dir = cfg->state_dir,
            .bwrap = cfg->bwrap,
            .agent_path = agent,
            .sandbox_cmd = cfg->sandbox_cmd,
            .gateway_socket = cfg->gateway_socket,
            .gateway_url = cfg->gateway_url,
            .proxy_socket = proxy_socket,
            .proxy_url = proxy_url,
            .cgroup_root = cfg->cgroup_root,
            .sandbox_uid = (unsigned) cfg->sandbox_uid,
            .sandbox_uids = (unsigned) cfg->sandbox_uids,
            .log_bytes = cfg->log_bytes,
            .no_memory_rlimit = !cfg->memory_rlimit,
        };
        lisa_rc_t rc = ctl_local_new(&lc, be);
        lisa_free(&agent);
        return rc;
    }
    if (strcmp(cfg->backend, "docker") == 0) {
        ctl_docker_cfg_t dc = {
            .controller_id = cfg->controller_id,
            .socket = cfg->docker_socket,
            .image = cfg->image,
            .runtime = cfg->runtime,
            .network = cfg->network,
            .gateway_socket = cfg->gateway_socket,
            .gateway_url = cfg->gateway_url,
            .proxy_socket = proxy_socket,
            .proxy_url = proxy_url,
            .sandbox_cmd = cfg->sandbox_cmd,
        };
        return ctl_docker_new(&dc, be);
    }
    if (strcmp(cfg->backend, "k8s") == 0) {
        ctl_k8s_cfg_t kc = {
            .controller_id = cfg->controller_id,
            .api = cfg->k8s_api,
            .namespace_ = cfg->k8s_namespace,
            .token_file = cfg->k8s_token_file,
            .ca_file = cfg->k8s_ca_file,
            .image = cfg->image,
            .gateway_url = cfg->gateway_url,
            .proxy_url = proxy_url,
            .sandbox_cmd = cfg->sandbox_cmd,
            .ttl_s = (unsigned) cfg->k8s_ttl_s,
        };
        return ctl_k8s_new(&kc, be);
    }
    lisa_log_error("backend %s is not built in", cfg->backend);
    return LISA_UNSUPPORTED;
}

/* --print-job: the k8s backend's Job for an example attempt, built from
 * this configuration (image, gateway URL, TTL, limits, deadline). */
static lisa_rc_t
s_print_job(const ctl_config_t *cfg)
{
    char name[CTL_NAME_MAX];
    ctl_backend_name("example-rollout", 1, name);
    uint64_t now = lisa_clock_wall_ms();
    ctl_spec_t spec = {
        .name = name,
        .controller_id = cfg->controller_id,
        .run_id = *cfg->run_id ? cfg->run_id : "example-run",
        .rollout_id = "example-rollout",
        .attempt = 1,
        .token = "example-attempt-token",
        .created_ms = now,
        .deadline_ms = now + cfg->deadline_ms,
        .cpu_millis = (uint32_t) cfg->cpu_millis,
        .memory_bytes = cfg->memory_bytes,
        .pids = (uint32_t) cfg->pids,
        .disk_bytes = cfg->disk_bytes,
    };
    ctl_k8s_cfg_t kc = {
        .controller_id = cfg->controller_id,
        .image = cfg->image,
        .gateway_url = cfg->gateway_url,
        .proxy_url = strcmp(cfg->sandbox_network, "packages") == 0
                         ? cfg->proxy_url
                         : NULL,
        .sandbox_cmd = cfg->sandbox_cmd,
        .ttl_s = (unsigned) cfg->k8s_ttl_s,
    };
    char *text = ctl_k8s_job_json(&kc, &spec);
    if (!text) {
        lisa_log_error("--print-job: needs --image and --gateway-url");
        return LISA_INVALID;
    }
    printf("%s\n", text);
    free(text);
    return LISA_OK;
}

int
main(int argc, char **argv)
{
    lisa_log_set_service("controller");
    ctl_config_t cfg;
    char err[256];
    lisa_rc_t rc = ctl_config_load(&cfg, argc, argv, stdout, err, sizeof err);
    if (rc == LISA_AGAIN) {
        ctl_config_clear(&cfg);
        return 0;
    }
    if (rc != LISA_OK) {
        lisa_log_error("config: %s", err);
        ctl_config_clear(&cfg);
        return 2;
    }
    if (cfg.print_job) {
        rc = s_print_job(&cfg);
        ctl_config_clear(&cfg);
        return rc == LISA_OK ? 0 : 2;
    }
    lisa_log_level_t lvl;
    if (lisa_log_level_parse(cfg.log_level, &lvl) == LISA_OK)
        lisa_log_set_level(lvl);
    ctl_config_dump(&cfg);
    if (lisa_curve_use(cfg.curve_cert, cfg.broker_cert, err, sizeof err) !=
        LISA_OK) {
        lisa_log_error("config: %s", err);
        ctl_config_clear(&cfg);
        return 2;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        lisa_log_error("curl_global_init failed");
        ctl_config_clear(&cfg);
        return 1;
    }
    zsys_init();
    zsys_handler_set(NULL);
    signal(SIGINT, s_on_signal);
    signal(SIGTERM, s_on_signal);
    signal(SIGPIPE, SIG_IGN);
    ctl_backend_t be = {0};
    if (s_make_backend(&cfg, &be) != LISA_OK) {
        ctl_config_clear(&cfg);
        return 2;
    }
    ctl_server_t *srv = ctl_server_new(&cfg, &be);
    if (!srv) {
        ctl_config_clear(&cfg);
        return 1;
    }
    rc = ctl_server_run(srv, &s_stop);
    ctl_server_destroy(&srv);
    ctl_config_clear(&cfg);
    lisa_curve_forget();
    zsys_shutdown();
    curl_global_cleanup();
    return rc == LISA_OK ? 0 : 1;
}
