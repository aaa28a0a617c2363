/*
 * cli_watch: `lisa watch` prints the broker's events as they happen.
 *
 * Events carry a sequence number that grows by one per event; a jump
 * means events were lost on the way (PUB drops when a subscriber is slow)
 * and is reported, so the operator knows to re-query.
 */
#include "cli.h"
#include "cli_broker.h"
#include "lisa/lisa_codec.h"
#include "lisa/lisa_curve.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
s_print(const char *topic, const Lisa__Event *ev, bool as_json)
{
    char when[40];
    cli_time(ev->time_ms, when, sizeof when);
    json_t *j = json_pack("{s:I, s:I, s:s}", "seq", (json_int_t) ev->seq,
                          "time_ms", (json_int_t) ev->time_ms, "topic", topic);
    if (ev->body_case == LISA__EVENT__BODY_ROLLOUT) {
        const Lisa__RolloutEvent *r = ev->rollout;
        json_object_set_new(
            j, "rollout",
            json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:s, s:I, s:f}",
                      "rollout_id", r->rollout_id, "attempt", (int) r->attempt,
                      "state", cli_state_name(r->state), "attempt_state",
                      cli_attempt_state_name(r->attempt_state), "failure_kind",
                      cli_failure_name(r->failure_kind), "reason", r->reason,
                      "run_id", r->run_id, "step", (json_int_t) r->step,
                      "reward", r->reward));
        if (!as_json) {
            printf("%8llu %s rollout %s #%u %-9s", (unsigned long long) ev->seq,
                   when, r->rollout_id, r->attempt, cli_state_name(r->state));
            if (r->state == LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED)
                printf(" reward=%g", r->reward);
            if (r->failure_kind)
                printf(" %s", cli_failure_name(r->failure_kind));
            if (r->reason && *r->reason)
                printf(" (%s)", r->reason);
            printf("\n");
        }
    } else if (ev->body_case == LISA__EVENT__BODY_POLICY) {
        json_object_set_new(j, "policy_version",
                            json_integer((json_int_t) ev->policy->version));
        if (!as_json)
            printf("%8llu %s policy version %llu\n",
                   (unsigned long long) ev->seq, when,
                   (unsigned long long) ev->policy->version);
    } else if (ev->body_case == LISA__EVENT__BODY_ENGINE &&
               ev->engine->engine) {
        const Lisa__Engine *e = ev->engine->engine;
        json_object_set_new(j, "engine",
                            json_pack("{s:s, s:s, s:b, s:b, s:I}", "engine_id",
                                      e->engine_id, "url", e->url, "up", e->up,
                                      "paused", e->paused, "policy_version",
                                      (json_int_t) e->policy_version));
        if (!as_json)
            printf("%8llu %s engine %s %s %s\n", (unsigned long long) ev->seq,
                   when, e->engine_id, e->up ? "up" : "down", e->url);
    }
    if (as_json)
        cli_print_json(j);
    else
        json_decref(j);
    fflush(stdout);
}

int
cli_watch(int argc, char **argv)
{
    const char *broker = NULL, *events = NULL, *topic = "";
    uint64_t count = 0, duration = 0;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0)
            as_json = true;
        else if (strcmp(a, "--broker") == 0 && v)
            broker = argv[++i];
        else if (strcmp(a, "--events") == 0 && v)
            events = argv[++i];
        else if (strcmp(a, "--topic") == 0 && v)
            topic = argv[++i];
        else if (strcmp(a, "--count") == 0 && cli_parse_u64(v, &count))
            i++;
        else if (strcmp(a, "--duration-ms") == 0 && cli_parse_u64(v, &duration))
            i++;
        else {
            FILE *o = strcmp(a, "--help") == 0 ? stdout : stderr;
            fprintf(o, "usage: lisa watch [--broker EP] [--events EP] "
                       "[--topic rollout|policy|engine]\n"
                       "                  [--count N] [--duration-ms MS] "
                       "[--json]\n"
                       "Prints events until interrupted (or N events / MS "
                       "ms).\n");
            return o == stdout ? 0 : 2;
        }
    }
    char *ep = cli_events_endpoint(events, cli_broker_endpoint(broker));
    zsys_init();
    zsys_set_logstream(NULL);
    zsock_t *sub = cli_curve() == 0 ? zsock_new(ZMQ_SUB) : NULL;
    if (sub)
        lisa_curve_client(sub);
    if (!sub || zsock_connect(sub, "%s", ep) != 0) {
        fprintf(stderr, "lisa watch: cannot connect to '%s'\n", ep);
        zsock_destroy(&sub);
        free(ep);
        return 1;
    }
    /* every topic, filtered here: the sequence numbers run across all of
     * them, so a gap is only a gap when every event is heard */
    zsock_set_subscribe(sub, "");
    size_t tlen = strlen(topic);
    if (!as_json)
        fprintf(stderr, "watching %s (Ctrl-C to stop)\n", ep);
    free(ep);
    uint64_t seen = 0, last_seq = 0;
    int64_t end = duration ? zclock_mono() + (int64_t) duration : 0;
    lisa_codec_stats_t stats = {0};
    while (!zsys_interrupted && (!count || seen < count)) {
        int64_t left = end ? end - zclock_mono() : 500;
        if (end && left <= 0)
            break;
        zmq_pollitem_t it = {zsock_resolve(sub), 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, (long) (left < 500 ? left : 500)) <= 0)
            continue;
        zmsg_t *m = zmsg_recv(sub);
        if (!m)
            break;
        char *t = zmsg_popstr(m);
        ProtobufCMessage *msg = NULL;
        if (t && zmsg_size(m) == 1 &&
            lisa_codec_decode_frame(&lisa__event__descriptor, zmsg_first(m),
                                    LISA_MAX_EVENT_FRAME, &stats, &msg,
                                    NULL) == LISA_OK) {
            const Lisa__Event *ev = (const Lisa__Event *) msg;
            if (last_seq && ev->seq > last_seq + 1)
                fprintf(stderr, "lisa watch: missed %llu events (%llu..%llu)\n",
                        (unsigned long long) (ev->seq - last_seq - 1),
                        (unsigned long long) last_seq + 1,
                        (unsigned long long) ev->seq - 1);
            last_seq = ev->seq;
            if (strncmp(t, topic, tlen) == 0) {
                s_print(t, ev, as_json);
                seen++;
            }
            lisa_codec_free(&msg);
        }
        zstr_free(&t);
        zmsg_destroy(&m);
    }
    zsock_destroy(&sub);
    return 0;
}
