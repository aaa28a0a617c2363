/*
 * agt_config: the agent's table for lisa_config, and the checks that span
 * several settings.
 */
#include "agt_config.h"

#include "lisa/lisa_config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const lisa_config_entry_t s_table[] = {
    {.name = "agent.gateway_url",
     .env = "LISA_GATEWAY_URL",
     .flag = "--gateway-url",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "gateway base URL, http://host:port",
     .offset = offsetof(agt_config_t, gateway_url)},
    {.name = "agent.gateway_socket",
     .env = "LISA_GATEWAY_SOCKET",
     .flag = "--gateway-socket",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "gateway unix socket path (used instead of TCP when set)",
     .offset = offsetof(agt_config_t, gateway_socket)},
    {.name = "agent.cmd_timeout_s",
     .env = "LISA_CMD_TIMEOUT_S",
     .flag = "--cmd-timeout-s",
     .type = LISA_CFG_UINT64,
     .def = "120",
     .help = "execute_bash time limit per command (seconds)",
     .offset = offsetof(agt_config_t, cmd_timeout_s),
     .min = "1",
     .max = "86400"},
    {.name = "agent.heartbeat_ms",
     .env = "LISA_HEARTBEAT_MS",
     .flag = "--heartbeat-ms",
     .type = LISA_CFG_UINT64,
     .def = "10000",
     .help = "heartbeat period (milliseconds)",
     .offset = offsetof(agt_config_t, heartbeat_ms),
     .min = "50",
     .max = "3600000"},
    {.name = "agent.http_timeout_s",
     .env = "LISA_HTTP_TIMEOUT_S",
     .flag = "--http-timeout-s",
     .type = LISA_CFG_UINT64,
     .def = "1200",
     .help = "time limit of one chat completion (seconds)",
     .offset = offsetof(agt_config_t, http_timeout_s),
     .min = "1",
     .max = "86400"},
    {.name = "agent.obs_max_bytes",
     .env = "LISA_OBS_MAX_BYTES",
     .flag = "--obs-max-bytes",
     .type = LISA_CFG_UINT64,
     .def = "16384",
     .help = "bytes of one output stream shown to the model",
     .offset = offsetof(agt_config_t, obs_max_bytes),
     .min = "256",
     .max = "16777216"},
    {.name = "agent.capture_bytes",
     .env = "LISA_CAPTURE_BYTES",
     .flag = "--capture-bytes",
     .type = LISA_CFG_UINT64,
     .def = "1048576",
     .help = "bytes of one output stream kept while a command runs",
     .offset = offsetof(agt_config_t, capture_bytes),
     .min = "1024",
     .max = "268435456"},
    {.name = "agent.head_lines",
     .env = "LISA_HEAD_LINES",
     .flag = "--head-lines",
     .type = LISA_CFG_UINT64,
     .def = "40",
     .help = "output lines kept at the start",
     .offset = offsetof(agt_config_t, head_lines),
     .min = "0",
     .max = "100000"},
    {.name = "agent.tail_lines",
     .env = "LISA_TAIL_LINES",
     .flag = "--tail-lines",
     .type = LISA_CFG_UINT64,
     .def = "40",
     .help = "output lines kept at the end",
     .offset = offsetof(agt_config_t, tail_lines),
     .min = "0",
     .max = "100000"},
    {.name = "agent.clip_chars",
     .env = "LISA_CLIP_CHARS",
     .flag = "--clip-chars",
     .type = LISA_CFG_UINT64,
     .def = "10000",
     .help = "editor output clipping (characters)",
     .offset = offsetof(agt_config_t, clip_chars),
     .min = "100",
     .max = "16777216"},
    {.name = "agent.max_answer_bytes",
     .env = "LISA_MAX_ANSWER_BYTES",
     .flag = "--max-answer-bytes",
     .type = LISA_CFG_UINT64,
     .def = "65536",
     .help = "bytes of answer.txt posted as the result",
     .offset = offsetof(agt_config_t, max_answer_bytes),
     .min = "1",
     .max = "16777216"},
    {.name = "agent.max_context_tokens",
     .env = "LISA_MAX_CONTEXT_TOKENS",
     .flag = "--max-context-tokens",
     .type = LISA_CFG_UINT64,
     .def = "65536",
     .help = "trajectory token budget when the task gives none",
     .offset = offsetof(agt_config_t, max_context_tokens),
     .min = "256",
     .max = "16777216"},
    {.name = "agent.max_tokens_per_call",
     .env = "LISA_MAX_TOKENS_PER_CALL",
     .flag = "--max-tokens-per-call",
     .type = LISA_CFG_UINT64,
     .def = "65536",
     .help = "response tokens of one call when the task gives none",
     .offset = offsetof(agt_config_t, max_tokens_per_call),
     .min = "16",
     .max = "16777216"},
    {.name = "agent.model_retries",
     .env = "LISA_MODEL_RETRIES",
     .flag = "--model-retries",
     .type = LISA_CFG_UINT64,
     .def = "5",
     .help = "attempts of one chat completion on transient errors",
     .offset = offsetof(agt_config_t, model_retries),
     .min = "1",
     .max = "100"},
    {.name = "agent.max_task_bytes",
     .env = "LISA_MAX_TASK_BYTES",
     .flag = "--max-task-bytes",
     .type = LISA_CFG_UINT64,
     .def = "67108864",
     .help = "bound of the task document",
     .offset = offsetof(agt_config_t, max_task_bytes),
     .min = "1024",
     .max = "1073741824"},
    {.name = "agent.network",
     .env = "LISA_SANDBOX_NETWORK",
     .flag = "--network",
     .type = LISA_CFG_STRING,
     .def = "none",
     .help = "sandbox.network: none, or packages (package indexes through "
             "the gateway's proxy)",
     .offset = offsetof(agt_config_t, network)},
    {.name = "agent.proxy_socket",
     .env = "LISA_PROXY_SOCKET",
     .flag = "--proxy-socket",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "packages: the gateway's package proxy, a unix socket",
     .offset = offsetof(agt_config_t, proxy_socket)},
    {.name = "agent.proxy_url",
     .env = "LISA_PROXY_URL",
     .flag = "--proxy-url",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "packages: the gateway's package proxy, http://host:port",
     .offset = offsetof(agt_config_t, proxy_url)},
    {.name = "agent.proxy_port",
     .env = "LISA_PROXY_PORT",
     .flag = "--proxy-port",
     .type = LISA_CFG_UINT64,
     .def = "3128",
     .help = "packages: the relay's port on 127.0.0.1 (pip and apt use it)",
     .offset = offsetof(agt_config_t, proxy_port),
     .min = "1",
     .max = "65535"},
    {.name = "agent.token",
     .env = "LISA_ATTEMPT_TOKEN",
     .flag = "--token",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "attempt token, sent as Authorization: Bearer",
     .offset = offsetof(agt_config_t, token),
     .flags = LISA_CFG_SECRET},
    {.name = "agent.testbed",
     .env = "LISA_TESTBED",
     .flag = "--testbed",
     .type = LISA_CFG_STRING,
     .def = "/testbed",
     .help = "working root; documents go to <root>/documents",
     .offset = offsetof(agt_config_t, testbed)},
    {.name = "agent.model",
     .env = "LISA_MODEL",
     .flag = "--model",
     .type = LISA_CFG_STRING,
     .def = "policy",
     .help = "model name sent in chat completion requests",
     .offset = offsetof(agt_config_t, model)},
    {.name = "agent.startup_s",
     .env = "LISA_STARTUP_S",
     .flag = "--startup-s",
     .type = LISA_CFG_UINT64,
     .def = "60",
     .help = "give up fetching the task after this (seconds)",
     .offset = offsetof(agt_config_t, startup_s),
     .min = "1",
     .max = "3600"},
    {.name = "agent.reserve_s",
     .env = "LISA_RESERVE_S",
     .flag = "--reserve-s",
     .type = LISA_CFG_UINT64,
     .def = "15",
     .help = "time kept before the deadline to post the result (seconds)",
     .offset = offsetof(agt_config_t, reserve_s),
     .min = "0",
     .max = "3600"},
    {.name = "agent.max_turns",
     .env = "LISA_MAX_TURNS",
     .flag = "--max-turns",
     .type = LISA_CFG_UINT64,
     .def = "100",
     .help = "turn limit when the task gives none",
     .offset = offsetof(agt_config_t, max_turns),
     .min = "1",
     .max = "100000"},
};

#define S_ROWS (sizeof s_table / sizeof s_table[0])

lisa_rc_t
agt_config_load(agt_config_t *cfg, int argc, char **argv, FILE *out, char *err,
                size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    lisa_config_opts_t opts = {
        .prog = "lisa-agent",
        .about = "Runs one LLM-in-Sandbox episode against the gateway.",
        .help_out = out,
    };
    lisa_rc_t rc = lisa_config_load_ex(s_table, S_ROWS, cfg, argc, argv, &opts,
                                       err, errlen);
    if (rc != LISA_OK)
        return rc;
    /* Unset strings read as "" everywhere else. */
    for (size_t i = 0; i < S_ROWS && rc == LISA_OK; i++) {
        char **slot = (char **) (void *) ((char *) cfg + s_table[i].offset);
        if (s_table[i].type == LISA_CFG_STRING && !*slot)
            rc = lisa_config_set(s_table, S_ROWS, cfg, s_table[i].name, "", err,
                                 errlen);
    }
    return rc;
}

lisa_rc_t
agt_config_validate(const agt_config_t *cfg, char *err, size_t errlen)
{
    if (!*cfg->gateway_url && !*cfg->gateway_socket) {
        snprintf(err, errlen,
                 "no gateway: set LISA_GATEWAY_URL or LISA_GATEWAY_SOCKET");
        return LISA_INVALID;
    }
    if (*cfg->gateway_url && strncmp(cfg->gateway_url, "http://", 7) != 0 &&
        strncmp(cfg->gateway_url, "https://", 8) != 0) {
        snprintf(err, errlen, "LISA_GATEWAY_URL must start with http://");
        return LISA_INVALID;
    }
    if (!*cfg->token) {
        snprintf(err, errlen, "no attempt token: set LISA_ATTEMPT_TOKEN");
        return LISA_INVALID;
    }
    bool packages = strcmp(cfg->network, "packages") == 0;
    if (!packages && strcmp(cfg->network, "none") != 0) {
        snprintf(err, errlen, "LISA_SANDBOX_NETWORK is none or packages");
        return LISA_INVALID;
    }
    if (packages && !*cfg->proxy_socket &&
        strncmp(cfg->proxy_url, "http://", 7) != 0) {
        snprintf(err, errlen,
                 "network packages needs LISA_PROXY_SOCKET or an http:// "
                 "LISA_PROXY_URL");
        return LISA_INVALID;
    }
    if (cfg->testbed[0] != '/') {
        snprintf(err, errlen, "LISA_TESTBED must be an absolute path");
        return LISA_INVALID;
    }
    return LISA_OK;
}

void
agt_config_dump(const agt_config_t *cfg)
{
    lisa_config_dump(s_table, S_ROWS, cfg, NULL);
}

void
agt_config_clear(agt_config_t *cfg)
{
    lisa_config_free(s_table, S_ROWS, cfg);
}
