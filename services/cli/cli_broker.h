/*
 * cli_broker: what the broker-facing `lisa` subcommands share: finding the
 * broker, calling it with a deadline, and turning records into tables or
 * JSON.
 */
#ifndef CLI_BROKER_H
#define CLI_BROKER_H

#include "lisa.pb-c.h"
#include "lisa/lisa_rpc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Default deadline of one CLI call. */
#define CLI_TIMEOUT_MS 10000

/* The broker endpoint: `flag` when set, else $LISA_BROKER, else
 * tcp://127.0.0.1:7100. */
const char *cli_broker_endpoint(const char *flag);

/* The event endpoint: `flag`, else $LISA_BROKER_EVENTS, else the broker
 * endpoint with its port + 2 (the default layout). Caller frees. */
char *cli_events_endpoint(const char *flag, const char *broker);

/* Sets the bus identity from $LISA_CURVE_CERT (this operator's secret
 * certificate) and $LISA_BROKER_CERT (the broker's public one); both unset
 * means a plain bus. Returns 0, or 1 with a message on stderr. */
int cli_curve(void);

/* A client for `endpoint` with the identity of cli_curve (NULL and a
 * message on failure). */
lisa_rpc_t *cli_connect(const char *endpoint);

/* Calls the broker; on LISA_OK with CODE_OK returns 0 and *rep. Otherwise
 * prints "lisa CMD: ..." to stderr and returns the exit code (1). */
int cli_call(lisa_rpc_t *rpc, const char *cmd, Lisa__Request *req,
             Lisa__Reply **rep);

/* Short lower-case names. */
const char *cli_state_name(Lisa__RolloutState s);
const char *cli_attempt_state_name(Lisa__AttemptState s);
const char *cli_failure_name(Lisa__FailureKind k);
/* Parses a rollout state name ("queued", ...); 0 when unknown. */
Lisa__RolloutState cli_state_parse(const char *s);

/* JSON views of records (new references). */
json_t *cli_rollout_json(const Lisa__Rollout *r);
json_t *cli_attempt_json(const Lisa__Attempt *a);
json_t *cli_span_json(const Lisa__Span *s);

/* Prints a JSON value on one line to stdout and frees it. */
void cli_print_json(json_t *j);

/* Parses an unsigned decimal; false when not a number. */
bool cli_parse_u64(const char *s, uint64_t *out);

/* Formats epoch milliseconds as "YYYY-mm-ddTHH:MM:SS.mmmZ" ("-" for 0). */
void cli_time(uint64_t ms, char *out, size_t n);

#endif
