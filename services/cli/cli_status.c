/*
 * cli_status: `lisa status` prints the broker's counters.
 */
#include "cli.h"
#include "cli_broker.h"

#include <stdio.h>
#include <string.h>

int
cli_status(int argc, char **argv)
{
    const char *broker = NULL, *run = "";
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            as_json = true;
        else if (strcmp(argv[i], "--broker") == 0 && i + 1 < argc)
            broker = argv[++i];
        else if (strcmp(argv[i], "--run") == 0 && i + 1 < argc)
            run = argv[++i];
        else {
            fprintf(argv[i][1] == 'h' ? stdout : stderr,
                    "usage: lisa status [--run RUN] [--broker EP] [--json]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    lisa_rpc_t *rpc = cli_connect(cli_broker_endpoint(broker));
    if (!rpc)
        return 1;
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__StatsReq q = LISA__STATS_REQ__INIT;
    q.run_id = (char *) (uintptr_t) run;
    req.body_case = LISA__REQUEST__BODY_STATS;
    req.stats = &q;
    Lisa__Reply *rep = NULL;
    int code = cli_call(rpc, "status", &req, &rep);
    if (code == 0) {
        const Lisa__Stats *s = rep->stats->stats;
        struct {
            const char *name;
            uint64_t v;
        } rows[] = {
            {"queued", s->queued},
            {"claimed", s->claimed},
            {"running", s->running},
            {"scoring", s->scoring},
            {"succeeded", s->succeeded},
            {"failed", s->failed},
            {"cancelled", s->cancelled},
            {"spans", s->spans},
            {"workers", s->workers},
            {"engines_up", s->engines_up},
            {"policy_version", s->policy_version},
            {"event_seq", s->event_seq},
            {"bad_frames", s->bad_frames},
            {"rpc_errors", s->rpc_errors},
            {"span_duplicates", s->span_duplicates},
            {"spans_dropped", s->spans_dropped},
            {"group_commits", s->group_commits},
            {"stale_scores", s->stale_scores},
        };
        if (as_json) {
            json_t *j = json_object();
            for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
                json_object_set_new(j, rows[i].name,
                                    json_integer((json_int_t) rows[i].v));
            cli_print_json(j);
        } else {
            printf("broker %s%s%s\n", lisa_rpc_endpoint(rpc),
                   *run ? "  run " : "", run);
            for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
                printf("  %-16s %12llu\n", rows[i].name,
                       (unsigned long long) rows[i].v);
        }
        lisa_rpc_reply_free(&rep);
    }
    lisa_rpc_destroy(&rpc);
    return code;
}
