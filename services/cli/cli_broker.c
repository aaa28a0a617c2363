/*
 * cli_broker: shared plumbing of the broker subcommands.
 */
#include "cli_broker.h"

#include "lisa/lisa_config.h"
#include "lisa/lisa_curve.h"
#include "lisa/lisa_log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *
cli_broker_endpoint(const char *flag)
{
    if (flag && *flag)
        return flag;
    const char *env = getenv("LISA_BROKER");
    return env && *env ? env : "tcp://127.0.0.1:7100";
}

char *
cli_events_endpoint(const char *flag, const char *broker)
{
    if (flag && *flag)
        return strdup(flag);
    const char *env = getenv("LISA_BROKER_EVENTS");
    if (env && *env)
        return strdup(env);
    /* the events port is the RPC port + 2 (the default layout) */
    const char *colon = strrchr(broker, ':');
    size_t cap = strlen(broker) + 16;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    int64_t port = 0;
    if (!colon ||
        lisa_config_parse_int(colon + 1, 1, 65533, &port) != LISA_OK) {
        snprintf(out, cap, "%s", broker); /* no port to move: as given */
        return out;
    }
    snprintf(out, cap, "%.*s:%lld", (int) (colon - broker), broker,
             (long long) port + 2);
    return out;
}

int
cli_curve(void)
{
    char err[256] = "";
    if (lisa_curve_use(getenv("LISA_CURVE_CERT"), getenv("LISA_BROKER_CERT"),
                       err, sizeof err) != LISA_OK) {
        fprintf(stderr, "lisa: %s\n", err);
        return 1;
    }
    return 0;
}

lisa_rpc_t *
cli_connect(const char *endpoint)
{
    lisa_log_set_level(LISA_LOG_WARN);
    if (cli_curve() != 0)
        return NULL;
    lisa_rpc_t *rpc = lisa_rpc_new(endpoint, "lisa-cli");
    if (!rpc)
        fprintf(stderr, "lisa: cannot connect to '%s'\n", endpoint);
    return rpc;
}

int
cli_call(lisa_rpc_t *rpc, const char *cmd, Lisa__Request *req,
         Lisa__Reply **rep)
{
    lisa_rc_t rc = lisa_rpc_call(rpc, req, CLI_TIMEOUT_MS, rep);
    if (rc == LISA_TIMEOUT) {
        fprintf(stderr,
                "lisa %s: no answer from the broker at %s within %d ms\n", cmd,
                lisa_rpc_endpoint(rpc), CLI_TIMEOUT_MS);
        return 1;
    }
    if (rc != LISA_OK) {
        fprintf(stderr, "lisa %s: %s\n", cmd, lisa_rc_str(rc));
        return 1;
    }
    if ((*rep)->code != LISA__CODE__CODE_OK) {
        fprintf(stderr, "lisa %s: %s: %s\n", cmd,
                lisa_rc_str(lisa_rpc_reply_rc(*rep)), (*rep)->error);
        lisa_rpc_reply_free(rep);
        return 1;
    }
    return 0;
}

static const char *const s_states[] = {"unspecified", "queued",   "claimed",
                                       "running",     "scoring",  "succeeded",
                                       "failed",      "cancelled"};
static const char *const s_astates[] = {"unspecified", "claimed",   "running",
                                        "scoring",     "succeeded", "failed",
                                        "cancelled"};
static const char *const s_kinds[] = {
    "none",       "infra",    "lease", "sandbox", "agent",
    "turn_limit", "deadline", "oom",   "reward",  "cancelled"};

const char *
cli_state_name(Lisa__RolloutState s)
{
    return (unsigned) s < 8 ? s_states[s] : "?";
}

const char *
cli_attempt_state_name(Lisa__AttemptState s)
{
    return (unsigned) s < 7 ? s_astates[s] : "?";
}

const char *
cli_failure_name(Lisa__FailureKind k)
{
    return (unsigned) k < 10 ? s_kinds[k] : "?";
}

Lisa__RolloutState
cli_state_parse(const char *s)
{
    for (unsigned i = 1; i < 8; i++)
        if (strcmp(s, s_states[i]) == 0)
            return (Lisa__RolloutState) i;
    return LISA__ROLLOUT_STATE__ROLLOUT_STATE_UNSPECIFIED;
}

json_t *
cli_rollout_json(const Lisa__Rollout *r)
{
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:s, s:s, s:i, s:i, s:I, s:I, "
        "s:I, s:s, s:s, s:i}",
        "rollout_id", r->rollout_id, "group_id", r->group_id, "run_id",
        r->run_id, "step", (json_int_t) r->step, "policy_version",
        (json_int_t) r->policy_version, "mode",
        r->mode == LISA__MODE__MODE_VAL ? "val" : "train", "state",
        cli_state_name(r->state), "failure_kind",
        cli_failure_name(r->failure_kind), "reason", r->reason, "attempts",
        (int) r->attempts, "max_attempts", (int) r->max_attempts, "created_ms",
        (json_int_t) r->created_ms, "deadline_ms", (json_int_t) r->deadline_ms,
        "ended_ms", (json_int_t) r->ended_ms, "task_id", r->task_id,
        "data_source", r->data_source, "index_in_group",
        (int) r->index_in_group);
    if (r->has_reward && r->reward)
        json_object_set_new(
            j, "reward",
            json_pack("{s:f, s:s, s:s, s:s, s:I}", "value", r->reward->value,
                      "rule", r->reward->rule, "extracted",
                      r->reward->extracted, "worker_id", r->reward->worker_id,
                      "scored_ms", (json_int_t) r->reward->scored_ms));
    else
        json_object_set_new(j, "reward", json_null());
    return j;
}

json_t *
cli_attempt_json(const Lisa__Attempt *a)
{
    json_t *j = json_pack(
        "{s:s, s:i, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:i}",
        "rollout_id", a->rollout_id, "attempt", (int) a->attempt, "state",
        cli_attempt_state_name(a->state), "failure_kind",
        cli_failure_name(a->failure_kind), "reason", a->reason, "sandbox_id",
        a->sandbox_id, "controller_id", a->controller_id, "claimed_ms",
        (json_int_t) a->claimed_ms, "started_ms", (json_int_t) a->started_ms,
        "ended_ms", (json_int_t) a->ended_ms, "lease_expiry_ms",
        (json_int_t) a->lease_expiry_ms, "deadline_ms",
        (json_int_t) a->deadline_ms, "span_count", (int) a->span_count);
    if (a->result)
        json_object_set_new(
            j, "result",
            json_pack("{s:s, s:i, s:s, s:s}", "answer", a->result->answer,
                      "turns", (int) a->result->turns, "end_reason",
                      a->result->end_reason, "detail", a->result->detail));
    return j;
}

static json_t *
s_ids(const uint32_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

json_t *
cli_span_json(const Lisa__Span *s)
{
    json_t *lp = json_array();
    for (size_t i = 0; i < s->n_response_logprobs; i++)
        json_array_append_new(lp, json_real(s->response_logprobs[i]));
    return json_pack(
        "{s:s, s:i, s:i, s:i, s:i, s:o, s:o, s:o, s:s, s:I, s:s, s:I, s:I, "
        "s:i}",
        "rollout_id", s->rollout_id, "attempt", (int) s->attempt, "seq",
        (int) s->seq, "prev_seq", (int) s->prev_seq, "segment",
        (int) s->segment, "appended_ids",
        s_ids(s->appended_ids, s->n_appended_ids), "response_ids",
        s_ids(s->response_ids, s->n_response_ids), "response_logprobs", lp,
        "finish_reason", s->finish_reason, "policy_version",
        (json_int_t) s->policy_version, "engine_id", s->engine_id, "start_ms",
        (json_int_t) s->start_ms, "end_ms", (json_int_t) s->end_ms,
        "prompt_len", (int) s->prompt_len);
}

void
cli_print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
    json_decref(j);
}

bool
cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

void
cli_time(uint64_t ms, char *out, size_t n)
{
    if (!ms) {
        snprintf(out, n, "-");
        return;
    }
    time_t t = (time_t) (ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char buf[32];
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, n, "%s.%03uZ", buf, (unsigned) (ms % 1000));
}
