/*
 * gw_config: the gateway's settings table (see the header).
 */
#include "gw_config.h"

#include <stddef.h>
#include <string.h>

#define S_E(a_, b_, c_, d_, e_, f_, g_)                                        \
    {                                                                          \
        .name = a_, .env = b_, .flag = c_, .type = d_, .def = e_, .help = f_,  \
        .offset = offsetof(gw_config_t, g_)                                    \
    }

const lisa_config_entry_t gw_config_table[] = {
    S_E("gateway.address", "LISA_GW_ADDRESS", "--address", LISA_CFG_STRING,
        "127.0.0.1", "TCP listen address (empty: no TCP listener)", address),
    S_E("gateway.port", "LISA_GW_PORT", "--port", LISA_CFG_UINT64, "7180",
        "TCP port (0: ephemeral)", port),
    S_E("gateway.unix", "LISA_GW_UNIX", "--unix", LISA_CFG_STRING, NULL,
        "unix-socket listener path for sandboxes", unix_path),
    S_E("gateway.port_file", "LISA_GW_PORT_FILE", "--port-file",
        LISA_CFG_STRING, NULL, "write the bound TCP port to this file",
        port_file),
    S_E("gateway.broker", "LISA_GW_BROKER", "--broker", LISA_CFG_STRING,
        "tcp://127.0.0.1:7100",
        "broker RPC endpoint (empty: no broker, spans are dropped)", broker),
    S_E("gateway.events", "LISA_GW_EVENTS", "--events", LISA_CFG_STRING,
        "tcp://127.0.0.1:7102",
        "broker event endpoint: the tokens of attempts that ended are "
        "refused (empty: not subscribed)",
        events),
    S_E("gateway.curve_cert", "LISA_GW_CURVE_CERT", "--curve-cert",
        LISA_CFG_STRING, NULL,
        "this gateway's secret CURVE certificate (empty: plain bus)",
        curve_cert),
    S_E("gateway.broker_cert", "LISA_GW_BROKER_CERT", "--broker-cert",
        LISA_CFG_STRING, NULL, "the broker's public CURVE certificate",
        broker_cert),
    {.name = "gateway.token_key",
     .env = "LISA_TOKEN_KEY",
     .flag = "--token-key",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "attempt-token HMAC key (hex, base64 or file:PATH)",
     .offset = offsetof(gw_config_t, token_key),
     .flags = LISA_CFG_SECRET | LISA_CFG_REQUIRED},
    {.name = "gateway.admin_key",
     .env = "LISA_GW_ADMIN_KEY",
     .flag = "--admin-key",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "bearer key for /admin/pause|resume|drain (empty: disabled)",
     .offset = offsetof(gw_config_t, admin_key),
     .flags = LISA_CFG_SECRET},
    {.name = "gateway.tokenizer",
     .env = "LISA_GW_TOKENIZER",
     .flag = "--tokenizer",
     .type = LISA_CFG_STRING,
     .def = NULL,
     .help = "directory with the model's tokenizer.json",
     .offset = offsetof(gw_config_t, tokenizer),
     .flags = LISA_CFG_REQUIRED},
    S_E("gateway.engines", "LISA_GW_ENGINES", "--engines", LISA_CFG_STRING,
        NULL, "static engines: id=url,id=url (besides the broker's list)",
        engines),
    S_E("gateway.model", "LISA_GW_MODEL", "--model", LISA_CFG_STRING, "lisa",
        "model name served on /v1/models and sent to engines", model),
    S_E("gateway.id", "LISA_GW_ID", "--id", LISA_CFG_STRING, "gw",
        "gateway name in spans and logs", gateway_id),
    {.name = "gateway.max_body",
     .env = "LISA_GW_MAX_BODY",
     .flag = "--max-body",
     .type = LISA_CFG_SIZE,
     .def = "8MiB",
     .help = "largest request body",
     .min = "1KiB",
     .max = "256MiB",
     .offset = offsetof(gw_config_t, max_body)},
    S_E("gateway.max_connections", "LISA_GW_MAX_CONNECTIONS",
        "--max-connections", LISA_CFG_UINT64, "8192", "open client connections",
        max_connections),
    S_E("gateway.request_timeout", "LISA_GW_REQUEST_TIMEOUT",
        "--request-timeout", LISA_CFG_DURATION, "30s",
        "deadline for a client to deliver a whole request (slow clients)",
        request_timeout_ms),
    S_E("gateway.upstream_timeout", "LISA_GW_UPSTREAM_TIMEOUT",
        "--upstream-timeout", LISA_CFG_DURATION, "10m",
        "deadline of one engine call", upstream_timeout_ms),
    S_E("gateway.upstream_retries", "LISA_GW_UPSTREAM_RETRIES",
        "--upstream-retries", LISA_CFG_UINT64, "2",
        "extra tries of an engine call after a connection error",
        upstream_retries),
    S_E("gateway.max_context", "LISA_GW_MAX_CONTEXT", "--max-context",
        LISA_CFG_UINT64, "65536",
        "prompt + response tokens of one attempt's sequence", max_context),
    S_E("gateway.default_max_tokens", "LISA_GW_DEFAULT_MAX_TOKENS",
        "--default-max-tokens", LISA_CFG_UINT64, "4096",
        "response tokens when the request names none", default_max_tokens),
    S_E("gateway.attempt_max_inflight", "LISA_GW_ATTEMPT_MAX_INFLIGHT",
        "--attempt-max-inflight", LISA_CFG_UINT64, "8",
        "open calls of one attempt on any route (429 beyond; 0: no cap)",
        attempt_max_inflight),
    S_E("gateway.max_attempts", "LISA_GW_MAX_ATTEMPTS", "--max-attempts",
        LISA_CFG_UINT64, "16384", "attempts with token state in memory",
        max_attempts),
    S_E("gateway.attempt_idle", "LISA_GW_ATTEMPT_IDLE", "--attempt-idle",
        LISA_CFG_DURATION, "2h", "forget an attempt idle this long",
        attempt_idle_ms),
    S_E("gateway.retry_after", "LISA_GW_RETRY_AFTER", "--retry-after",
        LISA_CFG_UINT64, "5", "Retry-After seconds of 429 answers",
        retry_after_s),
    S_E("gateway.span_queue", "LISA_GW_SPAN_QUEUE", "--span-queue",
        LISA_CFG_UINT64, "65536", "unacknowledged spans held in memory",
        span_queue),
    S_E("gateway.rpc_timeout", "LISA_GW_RPC_TIMEOUT", "--rpc-timeout",
        LISA_CFG_DURATION, "5s", "deadline of one broker RPC", rpc_timeout_ms),
    S_E("gateway.result_wait", "LISA_GW_RESULT_WAIT", "--result-wait",
        LISA_CFG_DURATION, "30s",
        "how long a result waits for its spans to be acknowledged",
        result_wait_ms),
    S_E("gateway.engine_refresh", "LISA_GW_ENGINE_REFRESH", "--engine-refresh",
        LISA_CFG_DURATION, "2s",
        "period of EngineListReq to the broker (0: static engines only)",
        engine_refresh_ms),
    S_E("gateway.health_interval", "LISA_GW_HEALTH_INTERVAL",
        "--health-interval", LISA_CFG_DURATION, "5s",
        "period of engine /healthz checks (0: off)", health_interval_ms),
    S_E("gateway.fail_limit", "LISA_GW_FAIL_LIMIT", "--fail-limit",
        LISA_CFG_UINT64, "3",
        "consecutive failures before an engine is marked down", fail_limit),
    S_E("gateway.engine_max_inflight", "LISA_GW_ENGINE_MAX_INFLIGHT",
        "--engine-max-inflight", LISA_CFG_UINT64, "0",
        "open calls per engine (0: no limit)", engine_max_inflight),
    S_E("gateway.http_threads", "LISA_GW_HTTP_THREADS", "--http-threads",
        LISA_CFG_UINT64, "0",
        "libmicrohttpd polling threads (0: run HTTP on the gateway's loop)",
        http_threads),
    S_E("gateway.proxy_unix", "LISA_GW_PROXY_UNIX", "--proxy-unix",
        LISA_CFG_STRING, NULL,
        "package proxy: unix-socket listener for sandboxes with "
        "sandbox.network=packages (empty: none)",
        proxy_unix),
    S_E("gateway.proxy_address", "LISA_GW_PROXY_ADDRESS", "--proxy-address",
        LISA_CFG_STRING, NULL,
        "package proxy: TCP listen address (empty: no TCP listener)",
        proxy_address),
    S_E("gateway.proxy_port", "LISA_GW_PROXY_PORT", "--proxy-port",
        LISA_CFG_UINT64, "7181", "package proxy: TCP port (0: ephemeral)",
        proxy_port),
    S_E("gateway.proxy_allow", "LISA_GW_PROXY_ALLOW", "--proxy-allow",
        LISA_CFG_STRING, "pypi.org,files.pythonhosted.org,deb.debian.org",
        "package proxy: hosts sandboxes may reach, host[:port],... (no "
        "port: 80 and 443)",
        proxy_allow),
    S_E("gateway.proxy_max_requests", "LISA_GW_PROXY_MAX_REQUESTS",
        "--proxy-max-requests", LISA_CFG_UINT64, "2000",
        "package proxy: requests of one attempt", proxy_max_requests),
    {.name = "gateway.proxy_max_bytes",
     .env = "LISA_GW_PROXY_MAX_BYTES",
     .flag = "--proxy-max-bytes",
     .type = LISA_CFG_SIZE,
     .def = "2GiB",
     .help = "package proxy: bytes relayed for one attempt (a transfer "
             "past it is cut)",
     .min = "1KiB",
     .offset = offsetof(gw_config_t, proxy_max_bytes)},
    S_E("gateway.proxy_idle", "LISA_GW_PROXY_IDLE", "--proxy-idle",
        LISA_CFG_DURATION, "60s",
        "package proxy: close a connection quiet this long", proxy_idle_ms),
};

const size_t gw_config_table_len =
    sizeof gw_config_table / sizeof gw_config_table[0];

lisa_rc_t
gw_config_load(gw_config_t *cfg, int argc, char **argv, char *err,
               size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    lisa_config_opts_t opts = {
        .prog = "lisa-gateway",
        .about = "The sandboxes' only door: OpenAI-compatible chat "
                 "completions (token-exact, recorded as spans) and the "
                 "task/heartbeat/result calls, proxied to the broker."};
    return lisa_config_load_ex(gw_config_table, gw_config_table_len, cfg, argc,
                               argv, &opts, err, errlen);
}

lisa_rc_t
gw_config_defaults(gw_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    char err[256];
    static const lisa_config_entry_t *t = gw_config_table;
    lisa_config_entry_t
        relaxed[sizeof gw_config_table / sizeof gw_config_table[0]];
    for (size_t i = 0; i < gw_config_table_len; i++) {
        relaxed[i] = t[i];
        relaxed[i].flags &= ~LISA_CFG_REQUIRED;
        relaxed[i].env = NULL;
    }
    return lisa_config_load(relaxed, gw_config_table_len, cfg, 0, NULL, err,
                            sizeof err);
}

void
gw_config_free(gw_config_t *cfg)
{
    lisa_config_free(gw_config_table, gw_config_table_len, cfg);
}
