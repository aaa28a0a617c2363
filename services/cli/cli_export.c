/*
 * cli_export: `lisa export` writes finished rollouts as JSON lines, ready
 * for training: per rollout, the token sequences of its final attempt with
 * a loss mask (1 = a token the engine sampled) and the sampling logprobs,
 * plus the reward. With --json the same objects come as one JSON array
 * (a single document) instead of one line each. With --prune, what was
 * exported is deleted from the broker (the broker only deletes what it
 * returned in the same reply).
 *
 * Spans are stored linearly (each span holds only the ids appended since
 * the span it continues), so the sequences are rebuilt here: a span's
 * sequence is its parent's sequence, then its appended ids (mask 0), then
 * its response ids (mask 1). Every span no other span continues is the end
 * of one sequence (normally one per segment).
 */
#include "cli.h"
#include "cli_broker.h"
#include "lisa/lisa_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t *ids;
    uint8_t *mask;
    float *lp;
    size_t n;
    size_t prompt_len; /* length before the first sampled token */
} s_seq_t;

static void
s_append(s_seq_t *q, const uint32_t *ids, const float *lp, size_t n,
         uint8_t mask)
{
    q->ids = lisa_realloc(q->ids, (q->n + n + 1) * sizeof *q->ids);
    q->mask = lisa_realloc(q->mask, (q->n + n + 1) * sizeof *q->mask);
    q->lp = lisa_realloc(q->lp, (q->n + n + 1) * sizeof *q->lp);
    for (size_t i = 0; i < n; i++) {
        q->ids[q->n + i] = ids[i];
        q->mask[q->n + i] = mask;
        q->lp[q->n + i] = lp ? lp[i] : 0.0f;
    }
    q->n += n;
}

static json_t *
s_sequences(const Lisa__Span *const *spans, size_t n)
{
    json_t *out = json_array();
    s_seq_t *seqs = lisa_calloc(n + 1, sizeof *seqs);
    bool *parent = lisa_calloc(n + 1, sizeof *parent);
    for (size_t i = 0; i < n; i++) {
        const Lisa__Span *s = spans[i];
        if (s->prev_seq >= 0) {
            for (size_t k = 0; k < i; k++)
                if (spans[k]->seq == (uint32_t) s->prev_seq) {
                    s_append(&seqs[i], seqs[k].ids, seqs[k].lp, seqs[k].n, 0);
                    memcpy(seqs[i].mask, seqs[k].mask, seqs[k].n);
                    seqs[i].prompt_len = seqs[k].prompt_len;
                    parent[k] = true;
                    break;
                }
        }
        s_append(&seqs[i], s->appended_ids, NULL, s->n_appended_ids, 0);
        if (s->prev_seq < 0)
            seqs[i].prompt_len = seqs[i].n;
        s_append(&seqs[i], s->response_ids, s->response_logprobs,
                 s->n_response_ids, 1);
    }
    for (size_t i = 0; i < n; i++) {
        if (!parent[i]) {
            json_t *ids = json_array(), *mask = json_array(),
                   *lp = json_array();
            for (size_t k = 0; k < seqs[i].n; k++) {
                json_array_append_new(ids, json_integer(seqs[i].ids[k]));
                json_array_append_new(mask, json_integer(seqs[i].mask[k]));
                json_array_append_new(lp, json_real(seqs[i].lp[k]));
            }
            json_array_append_new(
                out, json_pack("{s:i, s:i, s:I, s:o, s:o, s:o}", "segment",
                               (int) spans[i]->segment, "last_seq",
                               (int) spans[i]->seq, "prompt_len",
                               (json_int_t) seqs[i].prompt_len, "token_ids",
                               ids, "loss_mask", mask, "logprobs", lp));
        }
        lisa_free(&seqs[i].ids);
        lisa_free(&seqs[i].mask);
        lisa_free(&seqs[i].lp);
    }
    lisa_free(&seqs);
    lisa_free(&parent);
    return out;
}

/* Writes one rollout's object: a line of its own, or (as_array) an
 * element of the array whose brackets the caller writes. */
static void
s_emit(FILE *f, const Lisa__ExportRep *ex, const Lisa__Rollout *r,
       bool as_array, size_t index)
{
    json_t *j = cli_rollout_json(r);
    const Lisa__Span **spans = lisa_calloc(ex->n_spans + 1, sizeof *spans);
    size_t n = 0;
    for (size_t i = 0; i < ex->n_spans; i++)
        if (strcmp(ex->spans[i]->rollout_id, r->rollout_id) == 0 &&
            ex->spans[i]->attempt == r->attempts)
            spans[n++] = ex->spans[i];
    json_object_set_new(j, "final_attempt", json_integer(r->attempts));
    json_object_set_new(j, "span_count", json_integer((json_int_t) n));
    json_object_set_new(j, "reward_value",
                        r->has_reward && r->reward ? json_real(r->reward->value)
                                                   : json_null());
    for (size_t i = 0; i < ex->n_attempts; i++)
        if (strcmp(ex->attempts[i]->rollout_id, r->rollout_id) == 0 &&
            ex->attempts[i]->attempt == r->attempts && ex->attempts[i]->result)
            json_object_set_new(j, "answer",
                                json_string(ex->attempts[i]->result->answer));
    json_object_set_new(j, "sequences", s_sequences(spans, n));
    lisa_free(&spans);
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (as_array)
        fprintf(f, "%s%s", index ? ",\n" : "\n", s);
    else
        fprintf(f, "%s\n", s);
    free(s);
    json_decref(j);
}

int
cli_export(int argc, char **argv)
{
    const char *broker = NULL, *run = "", *outpath = NULL;
    bool prune = false, as_array = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--prune") == 0)
            prune = true;
        else if (strcmp(a, "--json") == 0)
            as_array = true;
        else if (strcmp(a, "--broker") == 0 && v)
            broker = argv[++i];
        else if (strcmp(a, "--run") == 0 && v)
            run = argv[++i];
        else if (strcmp(a, "-o") == 0 && v)
            outpath = argv[++i];
        else {
            FILE *o = strcmp(a, "--help") == 0 ? stdout : stderr;
            fprintf(o, "usage: lisa export [--run RUN] [-o FILE] [--json] "
                       "[--prune] [--broker EP]\n"
                       "Writes finished rollouts as JSON lines (token ids, "
                       "loss mask, logprobs, reward);\n"
                       "--json writes them as one JSON array instead.\n");
            return o == stdout ? 0 : 2;
        }
    }
    FILE *f = outpath ? fopen(outpath, "w") : stdout;
    if (!f) {
        fprintf(stderr, "lisa export: cannot write '%s'\n", outpath);
        return 1;
    }
    lisa_rpc_t *rpc = cli_connect(cli_broker_endpoint(broker));
    if (!rpc) {
        if (outpath)
            fclose(f);
        return 1;
    }
    char after[256] = "";
    size_t total = 0;
    int code = 0;
    if (as_array)
        fputc('[', f);
    do {
        Lisa__Request req = LISA__REQUEST__INIT;
        Lisa__ExportReq q = LISA__EXPORT_REQ__INIT;
        q.run_id = (char *) (uintptr_t) run;
        q.after = after;
        q.limit = 50;
        q.prune = prune;
        req.body_case = LISA__REQUEST__BODY_EXPORT;
        req.export = &q;
        Lisa__Reply *rep = NULL;
        code = cli_call(rpc, "export", &req, &rep);
        if (code)
            break;
        for (size_t i = 0; i < rep->export->n_rollouts; i++)
            s_emit(f, rep->export, rep->export->rollouts[i], as_array,
                   total + i);
        total += rep->export->n_rollouts;
        snprintf(after, sizeof after, "%s", rep->export->next_after);
        lisa_rpc_reply_free(&rep);
    } while (after[0]);
    if (as_array)
        fputs(total ? "\n]\n" : "]\n", f);
    if (fflush(f) != 0)
        code = 1;
    if (outpath)
        fclose(f);
    fprintf(stderr, "lisa export: %zu finished rollouts%s\n", total,
            prune ? " exported and pruned" : "");
    lisa_rpc_destroy(&rpc);
    return code;
}
