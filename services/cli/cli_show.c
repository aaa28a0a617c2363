/*
 * cli_show: `lisa show ROLLOUT` prints one rollout with its attempts, its
 * transition history, its spans and its reward.
 */
#include "cli.h"
#include "cli_broker.h"

#include <stdio.h>
#include <string.h>

int
cli_show(int argc, char **argv)
{
    const char *broker = NULL, *id = NULL;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            as_json = true;
        else if (strcmp(argv[i], "--broker") == 0 && i + 1 < argc)
            broker = argv[++i];
        else if (argv[i][0] != '-' && !id)
            id = argv[i];
        else {
            FILE *o = strcmp(argv[i], "--help") == 0 ? stdout : stderr;
            fprintf(o, "usage: lisa show ROLLOUT [--broker EP] [--json]\n");
            return o == stdout ? 0 : 2;
        }
    }
    if (!id) {
        fprintf(stderr, "usage: lisa show ROLLOUT [--broker EP] [--json]\n");
        return 2;
    }
    lisa_rpc_t *rpc = cli_connect(cli_broker_endpoint(broker));
    if (!rpc)
        return 1;
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__QueryReq q = LISA__QUERY_REQ__INIT;
    char *ids[1] = {(char *) (uintptr_t) id};
    q.n_rollout_ids = 1;
    q.rollout_ids = ids;
    q.with_attempts = q.with_spans = q.with_transitions = true;
    req.body_case = LISA__REQUEST__BODY_QUERY;
    req.query = &q;
    Lisa__Reply *rep = NULL;
    int code = cli_call(rpc, "show", &req, &rep);
    if (code) {
        lisa_rpc_destroy(&rpc);
        return code;
    }
    const Lisa__QueryRep *qr = rep->query;
    const Lisa__Rollout *r = qr->rollouts[0];
    if (as_json) {
        json_t *j = cli_rollout_json(r);
        json_t *atts = json_array(), *spans = json_array(), *tr = json_array();
        for (size_t i = 0; i < qr->n_attempts; i++)
            json_array_append_new(atts, cli_attempt_json(qr->attempts[i]));
        for (size_t i = 0; i < qr->n_spans; i++)
            json_array_append_new(spans, cli_span_json(qr->spans[i]));
        for (size_t i = 0; i < qr->n_transitions; i++) {
            const Lisa__Transition *t = qr->transitions[i];
            json_array_append_new(
                tr, json_pack("{s:i, s:s, s:s, s:s, s:s, s:I}", "attempt",
                              (int) t->attempt, "from",
                              cli_state_name(t->from_state), "to",
                              cli_state_name(t->to_state), "event", t->event,
                              "reason", t->reason, "time_ms",
                              (json_int_t) t->time_ms));
        }
        json_object_set_new(j, "attempt_list", atts);
        json_object_set_new(j, "spans", spans);
        json_object_set_new(j, "transitions", tr);
        cli_print_json(j);
    } else {
        char t1[40], t2[40];
        cli_time(r->created_ms, t1, sizeof t1);
        cli_time(r->ended_ms, t2, sizeof t2);
        printf("rollout   %s\n", r->rollout_id);
        printf("state     %s", cli_state_name(r->state));
        if (r->failure_kind)
            printf(" (%s)", cli_failure_name(r->failure_kind));
        printf("\nreason    %s\n", *r->reason ? r->reason : "-");
        printf("group     %s  index %u\n", r->group_id, r->index_in_group);
        printf("run       %s  step %llu  policy %llu  mode %s\n", r->run_id,
               (unsigned long long) r->step,
               (unsigned long long) r->policy_version,
               r->mode == LISA__MODE__MODE_VAL ? "val" : "train");
        printf("task      %s  data_source %s\n", r->task_id, r->data_source);
        printf("attempts  %u of at most %u\n", r->attempts, r->max_attempts);
        printf("created   %s  ended %s\n", t1, t2);
        if (r->has_reward && r->reward)
            printf("reward    %g  rule %s  extracted '%s'  by %s\n",
                   r->reward->value, r->reward->rule, r->reward->extracted,
                   r->reward->worker_id);
        else
            printf("reward    -\n");
        printf("\n%-3s %-9s %-10s %-16s %5s %s\n", "#", "STATE", "FAILURE",
               "SANDBOX", "SPANS", "REASON / ANSWER");
        for (size_t i = 0; i < qr->n_attempts; i++) {
            const Lisa__Attempt *a = qr->attempts[i];
            printf("%-3u %-9s %-10s %-16s %5u %s\n", a->attempt,
                   cli_attempt_state_name(a->state),
                   a->failure_kind ? cli_failure_name(a->failure_kind) : "-",
                   *a->sandbox_id ? a->sandbox_id : "-", a->span_count,
                   *a->reason ? a->reason : "");
            if (a->result)
                printf("    answer: %.200s%s (turns %u, %s)\n",
                       a->result->answer,
                       strlen(a->result->answer) > 200 ? "..." : "",
                       a->result->turns, a->result->end_reason);
        }
        printf("\nhistory\n");
        for (size_t i = 0; i < qr->n_transitions; i++) {
            const Lisa__Transition *t = qr->transitions[i];
            cli_time(t->time_ms, t1, sizeof t1);
            printf("  %s  #%u %-9s -> %-9s %-14s %s\n", t1, t->attempt,
                   cli_state_name(t->from_state), cli_state_name(t->to_state),
                   t->event, t->reason);
        }
        printf("\nspans\n");
        printf("  %-3s %-4s %5s %5s %8s %9s %-10s %s\n", "#", "SEQ", "PREV",
               "SEG", "APPENDED", "RESPONSE", "FINISH", "POLICY");
        for (size_t i = 0; i < qr->n_spans; i++) {
            const Lisa__Span *s = qr->spans[i];
            printf("  %-3u %-4u %5d %5u %8zu %9zu %-10s %llu\n", s->attempt,
                   s->seq, s->prev_seq, s->segment, s->n_appended_ids,
                   s->n_response_ids, s->finish_reason,
                   (unsigned long long) s->policy_version);
        }
    }
    lisa_rpc_reply_free(&rep);
    lisa_rpc_destroy(&rpc);
    return 0;
}
