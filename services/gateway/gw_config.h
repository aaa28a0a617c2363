/*
 * gw_config: the gateway's configuration, one declarative table.
 *
 * The table (gw_config.c) drives --help, parsing (defaults < --config file
 * < LISA_GW_* environment < flags), validation and the start-up dump.
 */
#ifndef GW_CONFIG_H
#define GW_CONFIG_H

#include "lisa/lisa_config.h"
#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *address;     /* TCP listen address */
    uint64_t port;     /* TCP port (0: ephemeral) */
    char *unix_path;   /* optional unix-socket listener */
    char *port_file;   /* write the bound port here (tests) */
    char *broker;      /* broker RPC endpoint; "" runs without a broker */
    char *events;      /* broker PUB endpoint; "" does not subscribe */
    char *curve_cert;  /* own secret CURVE certificate ("" = plain) */
    char *broker_cert; /* the broker's public CURVE certificate */
    char *token_key;   /* HMAC key spec (text, or file: and a path) */
    char *admin_key;   /* bearer key of the admin routes; "" disables them */
    char *tokenizer;   /* directory with tokenizer.json */
    char *engines;     /* static engines "id=url,id=url" */
    char *model;       /* model name served on /v1/models */
    char *gateway_id;  /* name in spans and logs */
    uint64_t max_body; /* bytes of a request body */
    uint64_t max_connections;
    uint64_t request_timeout_ms; /* deadline to receive a request */
    uint64_t upstream_timeout_ms;
    uint64_t upstream_retries; /* extra tries on connection errors */
    uint64_t max_context;      /* prompt + response tokens per attempt */
    uint64_t default_max_tokens;
    uint64_t max_attempts;       /* attempts with token state */
    uint64_t attempt_idle_ms;    /* forget an idle attempt after this */
    uint64_t retry_after_s;      /* Retry-After of 429 answers */
    uint64_t span_queue;         /* unacknowledged spans held */
    uint64_t rpc_timeout_ms;     /* broker RPC deadline */
    uint64_t result_wait_ms;     /* wait for span acks before a result */
    uint64_t engine_refresh_ms;  /* EngineListReq period (0: off) */
    uint64_t health_interval_ms; /* engine /healthz period (0: off) */
    uint64_t fail_limit;         /* failures before an engine is down */
    uint64_t engine_max_inflight;
    uint64_t http_threads;
    uint64_t attempt_max_inflight; /* open calls per attempt (0: no cap) */
    char *proxy_unix;    /* package proxy: unix listener for sandboxes */
    char *proxy_address; /* package proxy: TCP listen address */
    uint64_t proxy_port;
    char *proxy_allow; /* package proxy: "host[:port],..." */
    uint64_t proxy_max_requests;
    uint64_t proxy_max_bytes;
    uint64_t proxy_idle_ms;
} gw_config_t;

/* The table and its length. */
extern const lisa_config_entry_t gw_config_table[];
extern const size_t gw_config_table_len;

/* Loads *cfg from argv/env/file (see lisa_config_load). */
lisa_rc_t gw_config_load(gw_config_t *cfg, int argc, char **argv, char *err,
                         size_t errlen) LISA_NODISCARD;

/* Defaults only (tests); then adjust fields. */
lisa_rc_t gw_config_defaults(gw_config_t *cfg) LISA_NODISCARD;

/* Frees the strings; safe twice. */
void gw_config_free(gw_config_t *cfg);

#endif
