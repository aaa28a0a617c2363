/*
 * brk_config: the broker's settings as one lisa_config table.
 *
 * The table below is the only place a setting is named: lisa_config turns
 * it into the parser (defaults < --config FILE < environment < flags), the
 * validation (types and ranges), --help and the start-up dump.
 */
#include "brk_config.h"

#include "lisa/lisa_config.h"

#include <stddef.h>
#include <string.h>

#define E(n, e_, f_, t_, d_, lo, hi, h_)                                       \
    {                                                                          \
        .name = #n, .env = e_, .flag = f_, .type = t_, .def = d_, .help = h_,  \
        .offset = offsetof(brk_config_t, n), .min = lo, .max = hi              \
    }

static const lisa_config_entry_t s_table[] = {
    E(rpc_endpoint, "LISA_BROKER_RPC", "--rpc", LISA_CFG_STRING, "tcp://*:7100",
      NULL, NULL, "ROUTER endpoint for RPC"),
    E(span_endpoint, "LISA_BROKER_SPANS", "--spans", LISA_CFG_STRING,
      "tcp://*:7101", NULL, NULL, "PULL endpoint for span ingest"),
    E(event_endpoint, "LISA_BROKER_EVENTS", "--events", LISA_CFG_STRING,
      "tcp://*:7102", NULL, NULL, "PUB endpoint for events"),
    E(worker_endpoint, "LISA_BROKER_WORKERS", "--workers", LISA_CFG_STRING,
      "tcp://*:7103", NULL, NULL, "ROUTER endpoint for reward workers"),
    E(data_dir, "LISA_BROKER_DATA", "--data", LISA_CFG_STRING, "lisa-data", "1",
      "4000", "directory of the SQLite store"),
    E(sync, "LISA_BROKER_SYNC", "--sync", LISA_CFG_STRING, "full", NULL, NULL,
      "full: acknowledge after the WAL is fsynced (survives power loss); "
      "normal: after COMMIT (survives process crashes)"),
    E(token_key_file, "LISA_TOKEN_KEY_FILE", "--token-key", LISA_CFG_STRING, "",
      NULL, NULL,
      "file with the attempt-token HMAC key as hex or base64 text "
      "(empty: a random key per start)"),
    E(curve, "LISA_BROKER_CURVE", "--curve", LISA_CFG_STRING, "on", NULL, NULL,
      "on: every socket is CURVE-encrypted, admits only the keys in "
      "curve_clients and authorises each request by the key's role; off: "
      "an open, unauthenticated bus (tests only)"),
    E(curve_cert, "LISA_BROKER_CURVE_CERT", "--curve-cert", LISA_CFG_STRING, "",
      NULL, NULL,
      "the broker's secret certificate (zcert file; 'lisa keys' makes it)"),
    E(curve_clients, "LISA_BROKER_CURVE_CLIENTS", "--curve-clients",
      LISA_CFG_STRING, "", NULL, NULL,
      "directory of the clients' public certificates, each with its role "
      "(controller, gateway, trainer, reward or operator) as metadata"),
    E(ports_file, "LISA_BROKER_PORTS_FILE", "--ports-file", LISA_CFG_STRING, "",
      NULL, NULL, "write the bound endpoints to this file once listening"),
    E(log_level, "LISA_LOG_LEVEL", "--log-level", LISA_CFG_STRING, "info", NULL,
      NULL, "error, warn, info or debug"),
    E(lease_ms, "LISA_BROKER_LEASE_MS", "--lease-ms", LISA_CFG_DURATION, "30s",
      "10ms", "1d", "attempt lease; heartbeats renew it"),
    E(deadline_ms, "LISA_BROKER_DEADLINE_MS", "--deadline-ms",
      LISA_CFG_DURATION, "30m", "10ms", "7d",
      "default deadline of an attempt (claim to scored)"),
    E(max_attempts, "LISA_BROKER_MAX_ATTEMPTS", "--max-attempts",
      LISA_CFG_UINT64, "3", "1", "100",
      "default attempts per rollout for retryable failures"),
    E(backoff_ms, "LISA_BROKER_BACKOFF_MS", "--backoff-ms", LISA_CFG_DURATION,
      "1s", "0", "1h", "delay before the first retry; doubles per attempt"),
    E(backoff_max_ms, "LISA_BROKER_BACKOFF_MAX_MS", "--backoff-max-ms",
      LISA_CFG_DURATION, "30s", "0", "1h", "cap of the retry delay"),
    E(tick_ms, "LISA_BROKER_TICK_MS", "--tick-ms", LISA_CFG_DURATION, "100ms",
      "1ms", "10s", "period of the lease, deadline and liveness scan"),
    E(group_max, "LISA_BROKER_GROUP_MAX", "--group-max", LISA_CFG_UINT64,
      "4096", "1", "1000000", "most messages folded into one group commit"),
    E(worker_heartbeat_ms, "LISA_BROKER_WORKER_HB_MS", "--worker-hb-ms",
      LISA_CFG_DURATION, "1s", "10ms", "1m",
      "heartbeat interval with reward workers"),
    E(worker_liveness, "LISA_BROKER_WORKER_LIVENESS", "--worker-liveness",
      LISA_CFG_UINT64, "3", "1", "100",
      "missed heartbeats before a worker is declared dead"),
    E(score_budget_ms, "LISA_BROKER_SCORE_BUDGET_MS", "--score-budget-ms",
      LISA_CFG_DURATION, "1m", "10ms", "1h",
      "time a reward worker may spend on one score"),
    E(score_tries, "LISA_BROKER_SCORE_TRIES", "--score-tries", LISA_CFG_UINT64,
      "3", "1", "100", "dispatches of a score when workers answer with errors"),
    E(score_unroutable_ms, "LISA_BROKER_SCORE_UNROUTABLE_MS",
      "--score-unroutable-ms", LISA_CFG_DURATION, "30s", "10ms", "1d",
      "wait of a score whose data source no connected reward worker serves"),
    E(max_wait_ms, "LISA_BROKER_MAX_WAIT_MS", "--max-wait-ms",
      LISA_CFG_DURATION, "1h", "1ms", "1d",
      "bound on a wait request's timeout"),
    E(max_waits, "LISA_BROKER_MAX_WAITS", "--max-waits", LISA_CFG_UINT64,
      "1024", "1", "1000000", "wait requests held at once"),
    E(max_rpc_frame, "LISA_BROKER_MAX_RPC_FRAME", "--max-rpc-frame",
      LISA_CFG_SIZE, "16MiB", "1KiB", "1GiB", "largest RPC request frame"),
    E(max_span_frame, "LISA_BROKER_MAX_SPAN_FRAME", "--max-span-frame",
      LISA_CFG_SIZE, "8MiB", "1KiB", "1GiB", "largest SpanPush frame"),
    E(max_worker_frame, "LISA_BROKER_MAX_WORKER_FRAME", "--max-worker-frame",
      LISA_CFG_SIZE, "16MiB", "1KiB", "1GiB", "largest reward-worker frame"),
    E(max_batch, "LISA_BROKER_MAX_BATCH", "--max-batch", LISA_CFG_UINT64,
      "100000", "1", "10000000",
      "most rollouts per enqueue, spans per put, ids per wait or cancel"),
    E(max_answer, "LISA_BROKER_MAX_ANSWER", "--max-answer", LISA_CFG_SIZE,
      "1MiB", "1", "1GiB", "largest answer text of an attempt"),
    E(span_segment, "LISA_BROKER_SPAN_SEGMENT", "--span-segment", LISA_CFG_SIZE,
      "64MiB", "4KiB", "4GiB",
      "size of one span log segment file (pruning deletes whole segments)"),
};

#define S_N (sizeof s_table / sizeof s_table[0])

lisa_rc_t
brk_config_load(brk_config_t *cfg, int argc, char **argv, FILE *out, FILE *err)
{
    memset(cfg, 0, sizeof *cfg);
    char msg[512] = "";
    lisa_config_opts_t opts = {
        .prog = "lisa-broker",
        .about = "lisa-broker: the rollout broker (system of record).",
        .help_out = out,
    };
    lisa_rc_t rc = lisa_config_load_ex(s_table, S_N, cfg, argc, argv, &opts,
                                       msg, sizeof msg);
    if (rc == LISA_AGAIN)
        return rc;
    if (rc != LISA_OK) {
        fprintf(err, "lisa-broker: %s\n", msg);
        return LISA_INVALID;
    }
    if (strcmp(cfg->sync, "full") != 0 && strcmp(cfg->sync, "normal") != 0) {
        fprintf(err, "lisa-broker: sync must be 'full' or 'normal'\n");
        brk_config_free(cfg);
        return LISA_INVALID;
    }
    if (strcmp(cfg->curve, "on") != 0 && strcmp(cfg->curve, "off") != 0) {
        fprintf(err, "lisa-broker: curve must be 'on' or 'off'\n");
        brk_config_free(cfg);
        return LISA_INVALID;
    }
    return LISA_OK;
}

void
brk_config_free(brk_config_t *cfg)
{
    lisa_config_free(s_table, S_N, cfg);
}

void
brk_config_dump(const brk_config_t *cfg, FILE *out)
{
    char buf[4200];
    for (size_t i = 0; i < S_N; i++)
        fprintf(out, "%s = %s\n", s_table[i].name,
                lisa_config_format(&s_table[i], cfg, buf, sizeof buf));
}

lisa_rc_t
brk_config_markdown(FILE *out)
{
    return lisa_config_markdown(out, "lisa-broker settings", s_table, S_N);
}
