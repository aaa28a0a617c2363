/*
 * brk_config: the broker's settings, declared once in a lisa_config table.
 *
 * Each setting has a name, an environment variable, a command-line flag, a
 * type, a default, a range and a help line; the table drives --help,
 * parsing, validation and the start-up dump. Precedence, lowest first:
 * defaults, a config file (--config FILE, lines "name = value", '#'
 * comments), environment, flags. Durations take units ("250ms", "30s";
 * a bare number is milliseconds), sizes too ("16MiB"; bare is bytes).
 */
#ifndef BRK_CONFIG_H
#define BRK_CONFIG_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    char *rpc_endpoint;      /* ROUTER for RPC */
    char *span_endpoint;     /* PULL for SpanPush */
    char *event_endpoint;    /* PUB for events */
    char *worker_endpoint;   /* ROUTER for reward workers */
    char *data_dir;          /* holds broker.db (+ -wal, -shm) */
    char *sync;              /* "full" or "normal" */
    char *token_key_file;    /* HMAC key for attempt tokens ("" = random) */
    char *curve;             /* "on" or "off" */
    char *curve_cert;        /* the broker's secret certificate */
    char *curve_clients;     /* directory of clients' public certificates */
    char *ports_file;        /* write bound endpoints here ("" = no) */
    char *log_level;         /* error|warn|info|debug */
    uint64_t lease_ms;       /* attempt lease, renewed by heartbeats */
    uint64_t deadline_ms;    /* default attempt deadline */
    uint64_t max_attempts;   /* default retry bound */
    uint64_t backoff_ms;     /* first retry delay, doubled per attempt */
    uint64_t backoff_max_ms; /* retry delay cap */
    uint64_t tick_ms;        /* lease/deadline/liveness scan period */
    uint64_t group_max;      /* most messages in one group commit */
    uint64_t worker_heartbeat_ms; /* heartbeat to reward workers */
    uint64_t worker_liveness; /* missed heartbeats before a worker is dead */
    uint64_t score_budget_ms; /* most time a worker may spend on a score */
    uint64_t score_tries;     /* dispatches of one score on worker errors */
    uint64_t score_unroutable_ms; /* wait when no worker serves a source */
    uint64_t max_wait_ms;         /* bound on WaitReq.timeout_ms */
    uint64_t max_waits;           /* concurrent waits held */
    uint64_t max_rpc_frame;       /* bytes */
    uint64_t max_span_frame;      /* bytes */
    uint64_t max_worker_frame;    /* bytes */
    uint64_t max_batch;           /* rollouts per enqueue, spans per put */
    uint64_t max_answer;          /* bytes of an attempt's answer */
    uint64_t span_segment;        /* bytes of one span log segment */
} brk_config_t;

/* Fills *cfg from defaults, file, environment and argv (argv[0] skipped).
 * Returns LISA_OK, LISA_AGAIN when --help was printed to `out`, or
 * LISA_INVALID with a message on `err`. Free with brk_config_free. */
lisa_rc_t brk_config_load(brk_config_t *cfg, int argc, char **argv, FILE *out,
                          FILE *err) LISA_NODISCARD;

/* Frees the strings of *cfg. */
void brk_config_free(brk_config_t *cfg);

/* Writes one "name = value" line per setting (the start-up dump). */
void brk_config_dump(const brk_config_t *cfg, FILE *out);

/* Writes the settings as a Markdown reference section. */
lisa_rc_t brk_config_markdown(FILE *out) LISA_NODISCARD;

#endif
