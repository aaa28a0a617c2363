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
 * the span it continues), so the sequences are rebuilt, by lisa_spanseq,
 * the builder the trainer uses: a span's sequence is its parent's
 * sequence, then its appended ids (mask 0), then its response ids (mask
 * 1); every span no other span continues ends one sequence (normally one
 * per segment). Spans that do not form whole chains (a gap, a prev_seq
 * naming no earlier span, a prompt_len the chain contradicts) are what
 * the trainer refuses: such a rollout is written without sequences, with
 * the reason in "sequence_error", and counted on stderr.
 */
#include "cli.h"
#include "cli_broker.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_spanseq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest sequence exported (tokens). */
#define S_MAX_TOKENS (16u * 1024u * 1024u)

/* The sequences of one final attempt as JSON, built by lisa_spanseq (the
 * trainer's builder): spans that do not form whole chains give no
 * sequences and a reason in *why (the caller reports it). */
static json_t *
s_sequences(Lisa__Span *const *spans, size_t n, size_t expected, char *why,
            size_t whylen)
{
    json_t *out = json_array();
    lisa_spanseqs_t seqs = {0};
    why[0] = '\0';
    if (n == 0)
        return out;
    if (lisa_spanseq_build(spans, n, expected, S_MAX_TOKENS, &seqs, why,
                           whylen) != LISA_OK)
        return out;
    for (size_t i = 0; i < seqs.n; i++) {
        const lisa_spanseq_t *q = &seqs.seqs[i];
        json_t *ids = json_array(), *mask = json_array(), *lp = json_array();
        for (size_t k = 0; k < q->len; k++) {
            json_array_append_new(ids, json_integer(q->tokens[k]));
            json_array_append_new(mask, json_integer(q->mask[k]));
            json_array_append_new(lp, json_real(q->logp[k]));
        }
        json_array_append_new(
            out,
            json_pack("{s:i, s:i, s:I, s:o, s:o, s:o}", "segment",
                      (int) q->segment, "last_seq", (int) q->last_seq,
                      "prompt_len", (json_int_t) q->prompt_len, "token_ids",
                      ids, "loss_mask", mask, "logprobs", lp));
    }
    lisa_spanseq_free(&seqs);
    return out;
}

typedef enum {
    S_WRITTEN,      /* with its sequences */
    S_NO_SEQUENCES, /* its spans gave none ("sequence_error" says why) */
    S_UNWRITABLE    /* nothing written: the export fails */
} s_emitted_t;

/* Writes one rollout's object: a line of its own, or (as_array) an
 * element of the array whose brackets the caller writes. */
static s_emitted_t
s_emit(FILE *f, const Lisa__ExportRep *ex, const Lisa__Rollout *r,
       bool as_array, size_t index)
{
    json_t *j = cli_rollout_json(r);
    Lisa__Span **spans = lisa_calloc(ex->n_spans + 1, sizeof *spans);
    size_t n = 0, expected = 0;
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
            ex->attempts[i]->attempt == r->attempts) {
            expected = ex->attempts[i]->span_count;
            if (ex->attempts[i]->result)
                json_object_set_new(
                    j, "answer", json_string(ex->attempts[i]->result->answer));
        }
    char why[256];
    json_object_set_new(j, "sequences",
                        s_sequences(spans, n, expected, why, sizeof why));
    lisa_free(&spans);
    if (why[0]) {
        json_object_set_new(j, "sequence_error", json_string(why));
        fprintf(stderr,
                "lisa export: rollout %s attempt %u: %s; exported "
                "without sequences\n",
                r->rollout_id, r->attempts, why);
    }
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    if (!s) {
        /* a record JSON cannot hold: never written half or as "null" */
        fprintf(stderr,
                "lisa export: rollout %s: the record cannot be written as "
                "JSON; stopping\n",
                r->rollout_id);
        json_decref(j);
        return S_UNWRITABLE;
    }
    if (as_array)
        fprintf(f, "%s%s", index ? ",\n" : "\n", s);
    else
        fprintf(f, "%s\n", s);
    free(s);
    json_decref(j);
    return why[0] ? S_NO_SEQUENCES : S_WRITTEN;
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
    size_t total = 0, broken = 0;
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
        for (size_t i = 0; i < rep->export->n_rollouts && !code; i++) {
            s_emitted_t e = s_emit(f, rep->export, rep->export->rollouts[i],
                                   as_array, total + i);
            broken += e == S_NO_SEQUENCES;
            code = e == S_UNWRITABLE ? 1 : 0;
        }
        total += rep->export->n_rollouts;
        snprintf(after, sizeof after, "%s", rep->export->next_after);
        lisa_rpc_reply_free(&rep);
    } while (after[0] && !code);
    if (as_array)
        fputs(total ? "\n]\n" : "]\n", f);
    if (fflush(f) != 0)
        code = 1;
    if (outpath)
        fclose(f);
    fprintf(stderr, "lisa export: %zu finished rollouts%s", total,
            prune ? " exported and pruned" : "");
    if (broken)
        fprintf(stderr,
                "; %zu without sequences (their spans do not form "
                "whole chains)",
                broken);
    fputc('\n', stderr);
    lisa_rpc_destroy(&rpc);
    return code;
}
