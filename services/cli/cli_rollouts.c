/*
 * cli_rollouts: `lisa rollouts` lists rollouts by run, step and state.
 */
#include "cli.h"
#include "cli_broker.h"

#include <stdio.h>
#include <string.h>

int
cli_rollouts(int argc, char **argv)
{
    const char *broker = NULL, *run = "", *state = NULL;
    uint64_t step = 0, limit = 100;
    bool by_step = false, as_json = false, all = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0)
            as_json = true;
        else if (strcmp(a, "--all") == 0)
            all = true;
        else if (strcmp(a, "--broker") == 0 && v)
            broker = argv[++i];
        else if (strcmp(a, "--run") == 0 && v)
            run = argv[++i];
        else if (strcmp(a, "--state") == 0 && v && cli_state_parse(v))
            state = argv[++i];
        else if (strcmp(a, "--step") == 0 && cli_parse_u64(v, &step)) {
            by_step = true;
            i++;
        } else if (strcmp(a, "--limit") == 0 && cli_parse_u64(v, &limit) &&
                   limit >= 1 && limit <= 1000)
            i++;
        else {
            FILE *o = strcmp(a, "--help") == 0 ? stdout : stderr;
            fprintf(o, "usage: lisa rollouts [--run RUN] [--step S] "
                       "[--state queued|claimed|running|scoring|succeeded|"
                       "failed|cancelled]\n"
                       "                     [--limit N] [--all] [--broker "
                       "EP] [--json]\n");
            return o == stdout ? 0 : 2;
        }
    }
    lisa_rpc_t *rpc = cli_connect(cli_broker_endpoint(broker));
    if (!rpc)
        return 1;
    char after[256] = "";
    int code = 0;
    size_t shown = 0;
    if (!as_json)
        printf("%-28s %-9s %3s %8s %-14s %-10s %s\n", "ROLLOUT", "STATE", "ATT",
               "REWARD", "DATA_SOURCE", "FAILURE", "REASON");
    do {
        Lisa__Request req = LISA__REQUEST__INIT;
        Lisa__QueryReq q = LISA__QUERY_REQ__INIT;
        q.run_id = (char *) (uintptr_t) run;
        q.by_step = by_step;
        q.step = step;
        q.state = state ? cli_state_parse(state) : 0;
        q.limit = (uint32_t) limit;
        q.after = after;
        req.body_case = LISA__REQUEST__BODY_QUERY;
        req.query = &q;
        Lisa__Reply *rep = NULL;
        code = cli_call(rpc, "rollouts", &req, &rep);
        if (code)
            break;
        for (size_t i = 0; i < rep->query->n_rollouts; i++) {
            const Lisa__Rollout *r = rep->query->rollouts[i];
            if (as_json) {
                cli_print_json(cli_rollout_json(r));
                continue;
            }
            char reward[32] = "-";
            if (r->has_reward && r->reward)
                snprintf(reward, sizeof reward, "%.4g", r->reward->value);
            printf("%-28s %-9s %3u %8s %-14s %-10s %s\n", r->rollout_id,
                   cli_state_name(r->state), r->attempts, reward,
                   r->data_source,
                   r->failure_kind ? cli_failure_name(r->failure_kind) : "-",
                   r->reason);
        }
        shown += rep->query->n_rollouts;
        snprintf(after, sizeof after, "%s", rep->query->next_after);
        lisa_rpc_reply_free(&rep);
    } while (all && after[0]);
    if (!code && !as_json && after[0])
        printf("(more: --all, or --limit)\n");
    if (!code && !as_json)
        printf("%zu rollouts\n", shown);
    lisa_rpc_destroy(&rpc);
    return code;
}
