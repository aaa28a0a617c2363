/*
 * rwd_lines: the JSON-lines scorer behind `lisa-reward score`. See
 * rwd_lines.h. Reads with a fixed-size buffer so one huge line cannot
 * grow memory without bound.
 */
#include "rwd_lines.h"

#include "lisa.pb-c.h"
#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <jansson.h>
#include <string.h>

static char *
s_error_line(lisa_rc_t rc, const char *msg)
{
    json_t *o = json_pack("{s:s, s:s}", "error", msg, "code",
                          protobuf_c_enum_descriptor_get_value(
                              &lisa__code__descriptor, lisa_rc_to_code(rc))
                              ->name);
    if (!o) /* msg not UTF-8 */
        o = json_pack("{s:s, s:s}", "error", "invalid input", "code",
                      "CODE_INVALID");
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* A string field, or the first of a few fallbacks. */
static const char *
s_field(json_t *root, const char *key, size_t *len)
{
    json_t *v = json_object_get(root, key);
    if (json_is_string(v)) {
        *len = json_string_length(v);
        return json_string_value(v);
    }
    return NULL;
}

char *
rwd_lines_one(const rwd_scorer_t *s, const char *line, size_t len,
              int64_t budget_ms, bool *ok)
{
    json_error_t err;
    char *out = NULL, *extra_str = NULL;
    rwd_result_t r;
    memset(&r, 0, sizeof r);
    *ok = false;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
    if (!root || !json_is_object(root)) {
        char msg[256];
        snprintf(msg, sizeof msg, "not a JSON object: %s",
                 root ? "other JSON value" : err.text);
        json_decref(root);
        return s_error_line(LISA_INVALID, msg);
    }
    size_t dsl = 0, al = 0, gl = 0;
    const char *ds = s_field(root, "data_source", &dsl);
    json_t *extra = json_object_get(root, "extra_info");
    const char *ans = s_field(root, "answer", &al);
    const char *gt = s_field(root, "ground_truth", &gl);
    if (!gt && json_is_object(extra))
        gt = s_field(extra, "ground_truth", &gl);
    if (!gt) {
        json_t *rm = json_object_get(root, "reward_model");
        if (json_is_object(rm))
            gt = s_field(rm, "ground_truth", &gl);
    }
    json_t *av = json_object_get(root, "answer");
    if (!ds || !gt || (av && !json_is_string(av) && !json_is_null(av))) {
        out = s_error_line(LISA_INVALID,
                           "need string fields data_source, ground_truth "
                           "and answer");
        goto done;
    }
    if (json_is_object(extra))
        extra_str = json_dumps(extra, JSON_COMPACT);
    else if (json_is_string(extra))
        extra_str = strdup(json_string_value(extra));
    rwd_input_t in = {
        .data_source = ds,
        .answer = ans ? ans : "",
        .answer_len = ans ? al : 0,
        .ground_truth = gt,
        .truth_len = gl,
        .extra_info_json = extra_str,
        .deadline_ms = budget_ms > 0 ? zclock_mono() + budget_ms : 0,
    };
    lisa_rc_t rc = rwd_score(s, &in, &r);
    if (rc != LISA_OK) {
        out = s_error_line(rc, r.error);
        goto done;
    }
    json_error_t e2;
    json_t *expl = json_loads(r.explanation_json, 0, &e2);
    json_t *o = json_pack("{s:f, s:s, s:s, s:o}", "reward", r.reward, "rule",
                          r.rule, "extracted", r.extracted ? r.extracted : "",
                          "explanation", expl ? expl : json_object());
    out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    *ok = true;
done:
    free(extra_str);
    rwd_result_clear(&r);
    json_decref(root);
    return out;
}

lisa_rc_t
rwd_lines_run(const rwd_scorer_t *s, FILE *in, FILE *out, int64_t budget_ms,
              rwd_lines_stats_t *stats)
{
    rwd_lines_stats_t local = {0, 0, 0};
    if (!stats)
        stats = &local;
    *stats = local;
    char *buf = lisa_malloc(RWD_LINES_MAX + 1);
    size_t len = 0;
    bool overflow = false;
    int c;
    lisa_rc_t rc = LISA_OK;
    for (;;) {
        c = getc_unlocked(in);
        if (c != EOF && c != '\n') {
            if (len < RWD_LINES_MAX)
                buf[len++] = (char) c;
            else
                overflow = true;
            continue;
        }
        bool blank = true;
        for (size_t i = 0; i < len && blank; i++)
            blank = strchr(" \t\r", buf[i]) != NULL;
        if (!blank || overflow) {
            stats->lines++;
            bool ok = false;
            char *line = overflow
                             ? s_error_line(LISA_TOOLARGE,
                                            "line longer than the 4 MiB bound")
                             : rwd_lines_one(s, buf, len, budget_ms, &ok);
            if (ok)
                stats->scored++;
            else
                stats->errors++;
            if (fputs(line, out) == EOF || fputc('\n', out) == EOF)
                rc = LISA_ERR;
            free(line);
            fflush(out);
        }
        len = 0;
        overflow = false;
        if (c == EOF || rc != LISA_OK)
            break;
    }
    if (ferror(in))
        rc = LISA_ERR;
    lisa_free(&buf);
    return rc;
}
