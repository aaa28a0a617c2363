/*
 * rwd_config: lisa-reward's settings as one declarative table.
 *
 * Each row names a setting, its environment variable, its flag, its type,
 * its default and a help line; the same table drives --help, parsing,
 * validation and the start-up dump. Precedence: defaults < environment <
 * flags. The parsing is kept in rwd_config_parse alone so that the shared
 * lisa_config module can replace it without touching the service.
 */
#ifndef RWD_CONFIG_H
#define RWD_CONFIG_H

#include "lisa/lisa_rc.h"

#include <stdint.h>
#include <stdio.h>

typedef struct {
    char *broker;         /* worker: broker endpoint (DEALER connects) */
    char *curve_cert;     /* worker: own secret CURVE certificate */
    char *broker_cert;    /* worker: the broker's public certificate */
    char *worker_id;      /* worker: id sent in WorkerReady ("" ->
                             reward-HOST-PID-RANDOM) */
    int64_t threads;      /* worker: scoring threads */
    int64_t capacity;     /* worker: requests accepted at once (0 -> threads) */
    int64_t heartbeat_ms; /* worker: heartbeat interval */
    int64_t liveness;     /* worker: heartbeats missed before reconnecting */
    int64_t reconnect_ms; /* worker: first reconnect delay */
    int64_t reconnect_max_ms; /* worker: reconnect delay cap */
    int64_t budget_ms;        /* default per-request budget (request's 0) */
    char *judge_url;          /* LLM judge base URL ("" -> no judge) */
    char *judge_model;        /* LLM judge model name */
    char *judge_key;          /* LLM judge bearer token */
    char *judge_sources;      /* data-source prefixes routed to the judge */
    int64_t judge_timeout_ms; /* per judge HTTP call */
    int64_t judge_retries;    /* judge retries after the first call */
    char *log_level;          /* error|warn|info|debug */
} rwd_config_t;

/* Fills cfg from defaults, then the environment, then argv[first..argc).
 * Returns LISA_OK, LISA_INVALID (message on stderr) or LISA_AGAIN when
 * --help was printed. Free with rwd_config_clear. */
lisa_rc_t rwd_config_parse(rwd_config_t *cfg, int argc, char **argv,
                           int first) LISA_NODISCARD;

/* Prints the settings table (flags, env vars, defaults, help) to f. */
void rwd_config_help(FILE *f);

/* Logs every setting at info level (the judge key is masked). */
void rwd_config_dump(const rwd_config_t *cfg);

/* Frees the strings of cfg and zeroes it. */
void rwd_config_clear(rwd_config_t *cfg);

#endif
