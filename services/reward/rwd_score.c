/*
 * rwd_score: routing table and the rules' glue. See rwd_score.h.
 *
 * Each route is a row (data-source prefix -> rule function). A rule fills
 * the reward, the rule name, the extracted text and adds its details to the
 * explanation object; the common part (bounds, empty answers, JSON
 * rendering, UTF-8 hygiene) lives here once.
 */
#include "rwd_score.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"
#include "rwd_ifeval.h"
#include "rwd_math.h"
#include "rwd_mc.h"
#include "rwd_rouge.h"

#include <ctype.h>
#include <czmq.h>
#include <jansson.h>
#include <string.h>

struct rwd_scorer {
    char *judge_sources;
    char *judge_url;
    char *judge_model;
    char *judge_key;
    rwd_judge_config_t judge;
};

typedef lisa_rc_t (*s_rule_fn)(const rwd_scorer_t *s, const rwd_input_t *in,
                               json_t *expl, rwd_result_t *r);

static lisa_rc_t s_rule_math(const rwd_scorer_t *s, const rwd_input_t *in,
                             json_t *expl, rwd_result_t *r);
static lisa_rc_t s_rule_mc(const rwd_scorer_t *s, const rwd_input_t *in,
                           json_t *expl, rwd_result_t *r);
static lisa_rc_t s_rule_qa(const rwd_scorer_t *s, const rwd_input_t *in,
                           json_t *expl, rwd_result_t *r);
static lisa_rc_t s_rule_ifeval(const rwd_scorer_t *s, const rwd_input_t *in,
                               json_t *expl, rwd_result_t *r);
static lisa_rc_t s_rule_judge(const rwd_scorer_t *s, const rwd_input_t *in,
                              json_t *expl, rwd_result_t *r);

typedef struct {
    const char *prefix;
    const char *route;
    s_rule_fn fn;
} s_route_t;

/* The recipe's routing by data-source prefix. */
static const s_route_t s_routes[] = {
    {"math", "math", s_rule_math},
    {"physics", "math", s_rule_math},
    {"chem", "mc", s_rule_mc},
    {"biomed", "mc", s_rule_mc},
    {"instruct_pretrain", "qa", s_rule_qa},
    {"long_context", "qa", s_rule_qa},
    {"instruct_follow", "ifeval", s_rule_ifeval},
};

static const s_route_t *
s_find_route(const char *ds)
{
    for (size_t i = 0; ds && i < sizeof s_routes / sizeof s_routes[0]; i++)
        if (strncmp(ds, s_routes[i].prefix, strlen(s_routes[i].prefix)) == 0)
            return &s_routes[i];
    return NULL;
}

const char *
rwd_score_route(const char *data_source)
{
    const s_route_t *r = s_find_route(data_source);
    return r ? r->route : NULL;
}

const char *
rwd_score_prefix(size_t i)
{
    return i < sizeof s_routes / sizeof s_routes[0] ? s_routes[i].prefix : NULL;
}

rwd_scorer_t *
rwd_scorer_new(const rwd_scorer_config_t *cfg)
{
    rwd_scorer_t *s = lisa_calloc(1, sizeof *s);
    if (cfg) {
        s->judge = cfg->judge;
        s->judge_sources = lisa_strdup(cfg->judge_sources);
        s->judge_url = lisa_strdup(cfg->judge.base_url);
        s->judge_model = lisa_strdup(cfg->judge.model);
        s->judge_key = lisa_strdup(cfg->judge.api_key);
        s->judge.base_url = s->judge_url;
        s->judge.model = s->judge_model;
        s->judge.api_key = s->judge_key;
        if (s->judge_sources && *s->judge_sources && !s->judge_url) {
            lisa_log_error("judge sources given without a judge URL");
            rwd_scorer_destroy(&s);
        }
    }
    return s;
}

void
rwd_scorer_destroy(rwd_scorer_t **s)
{
    if (!s || !*s)
        return;
    lisa_free(&(*s)->judge_sources);
    lisa_free(&(*s)->judge_url);
    lisa_free(&(*s)->judge_model);
    lisa_free(&(*s)->judge_key);
    lisa_free(s);
}

void
rwd_result_clear(rwd_result_t *r)
{
    if (!r)
        return;
    lisa_free(&r->extracted);
    free(r->explanation_json); /* from json_dumps */
    memset(r, 0, sizeof *r);
}

static void
s_set_str(json_t *o, const char *key, const char *s, size_t n)
{
    char *v = lisa_utf8_scrub(s, n, RWD_MAX_EXTRACTED);
    json_object_set_new(o, key, json_string(v));
    lisa_free(&v);
}

static void
s_trim(const char **s, size_t *len)
{
    while (*len && isspace((unsigned char) **s)) {
        (*s)++;
        (*len)--;
    }
    while (*len && isspace((unsigned char) (*s)[*len - 1]))
        (*len)--;
}

/* The final answer: the last \boxed{} content, else the whole text. */
static void
s_final(const char *s, size_t n, const char **out, size_t *olen,
        const char **source)
{
    size_t off, bl;
    if (rwd_math_last_boxed(s, n, &off, &bl)) {
        *out = s + off;
        *olen = bl;
        *source = "boxed";
    } else {
        *out = s;
        *olen = n;
        *source = "whole";
    }
}

static lisa_rc_t
s_rule_math(const rwd_scorer_t *s, const rwd_input_t *in, json_t *expl,
            rwd_result_t *r)
{
    (void) s;
    const char *pred, *gold, *src, *gsrc;
    size_t pl, gl;
    s_final(in->answer, in->answer_len, &pred, &pl, &src);
    s_final(in->ground_truth, in->truth_len, &gold, &gl, &gsrc);
    rwd_math_why_t why;
    bool eq = rwd_math_equal(gold, gl, pred, pl, &why);
    r->reward = eq ? 1.0 : 0.0;
    r->rule = "math_equiv";
    r->extracted = lisa_utf8_scrub(pred, pl, RWD_MAX_EXTRACTED);
    json_object_set_new(expl, "source", json_string(src));
    s_set_str(expl, "gold", gold, gl);
    json_object_set_new(expl, "how", json_string(why.how));
    json_object_set_new(expl, "gold_parsed", json_boolean(why.gold_parsed));
    json_object_set_new(expl, "pred_parsed", json_boolean(why.pred_parsed));
    return LISA_OK;
}

static lisa_rc_t
s_rule_mc(const rwd_scorer_t *s, const rwd_input_t *in, json_t *expl,
          rwd_result_t *r)
{
    (void) s;
    const char *how;
    char letter = 0;
    r->reward = rwd_mc_score(in->answer, in->answer_len, in->ground_truth,
                             in->truth_len, &how, &letter);
    r->rule = "mc_letter";
    char buf[2] = {letter, '\0'};
    r->extracted = lisa_strdup(buf);
    json_object_set_new(expl, "match", json_string(how));
    s_set_str(expl, "gold", in->ground_truth, in->truth_len);
    return LISA_OK;
}

static void
s_mask_str(uint32_t m, char *out)
{
    size_t w = 0;
    for (int i = 0; i < 26; i++) {
        if (!(m & (1u << i)))
            continue;
        if (w)
            out[w++] = ',';
        out[w++] = (char) ('A' + i);
    }
    out[w] = '\0';
}

/* extra_info, parsed when a rule needs it; NULL when absent. */
static lisa_rc_t
s_extra(const rwd_input_t *in, json_t **out, rwd_result_t *r)
{
    *out = NULL;
    if (!in->extra_info_json || !*in->extra_info_json)
        return LISA_OK;
    json_error_t err;
    json_t *j = json_loads(in->extra_info_json, JSON_REJECT_DUPLICATES, &err);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        lisa_errf(r->error, sizeof r->error, "extra_info is not a JSON object");
        return LISA_INVALID;
    }
    *out = j;
    return LISA_OK;
}

static bool
s_is_mc(const char *qa_type)
{
    if (!qa_type)
        return false;
    char low[64];
    size_t n = 0;
    for (; qa_type[n] && n + 1 < sizeof low; n++)
        low[n] = (char) tolower((unsigned char) qa_type[n]);
    low[n] = '\0';
    return strstr(low, "choice") || strcmp(low, "mc") == 0 ||
           strcmp(low, "mcq") == 0;
}

static lisa_rc_t
s_rule_qa(const rwd_scorer_t *s, const rwd_input_t *in, json_t *expl,
          rwd_result_t *r)
{
    json_t *extra = NULL;
    lisa_rc_t rc = s_extra(in, &extra, r);
    if (rc != LISA_OK)
        return rc;
    const char *qa_type = json_string_value(json_object_get(extra, "qa_type"));
    json_object_set_new(expl, "qa_type",
                        qa_type ? json_string(qa_type) : json_null());
    if (s_is_mc(qa_type)) {
        if (memchr(in->ground_truth, ',', in->truth_len)) {
            const char *how;
            uint32_t p, g;
            r->reward = rwd_mc_f1(in->answer, in->answer_len, in->ground_truth,
                                  in->truth_len, &how, &p, &g);
            r->rule = "mc_f1";
            char ps[64], gs[64];
            s_mask_str(p, ps);
            s_mask_str(g, gs);
            r->extracted = lisa_strdup(ps);
            json_object_set_new(expl, "match", json_string(how));
            json_object_set_new(expl, "gold_letters", json_string(gs));
        } else {
            rc = s_rule_mc(s, in, expl, r);
        }
        json_decref(extra);
        return rc;
    }
    json_decref(extra);
    /* Open-ended: equivalence first, else ROUGE-L F-measure. */
    const char *pred, *src;
    size_t pl;
    s_final(in->answer, in->answer_len, &pred, &pl, &src);
    rwd_math_why_t why;
    if (rwd_math_equal(in->ground_truth, in->truth_len, pred, pl, &why)) {
        r->reward = 1.0;
        r->rule = "open_equiv";
        r->extracted = lisa_utf8_scrub(pred, pl, RWD_MAX_EXTRACTED);
        json_object_set_new(expl, "source", json_string(src));
        json_object_set_new(expl, "how", json_string(why.how));
        return LISA_OK;
    }
    rwd_rouge_info_t info;
    r->reward = rwd_rouge_l(in->ground_truth, in->truth_len, in->answer,
                            in->answer_len, in->deadline_ms, &info);
    if (info.timed_out) {
        lisa_errf(r->error, sizeof r->error,
                  "ROUGE-L ran past the request's budget");
        return LISA_TIMEOUT;
    }
    r->rule = "rouge_l";
    r->extracted =
        lisa_utf8_scrub(in->answer, in->answer_len, RWD_MAX_EXTRACTED);
    json_object_set_new(expl, "lcs", json_integer((json_int_t) info.lcs));
    json_object_set_new(expl, "target_tokens",
                        json_integer((json_int_t) info.target_tokens));
    json_object_set_new(expl, "pred_tokens",
                        json_integer((json_int_t) info.pred_tokens));
    json_object_set_new(expl, "precision", json_real(info.precision));
    json_object_set_new(expl, "recall", json_real(info.recall));
    json_object_set_new(expl, "truncated", json_boolean(info.truncated));
    return LISA_OK;
}

/* IFEval/IFBench: the reward is the recipe's, loose and all-or-nothing;
 * strict verdicts and the fractions are reported beside it. */
static lisa_rc_t
s_rule_ifeval(const rwd_scorer_t *s, const rwd_input_t *in, json_t *expl,
              rwd_result_t *r)
{
    (void) s;
    lisa_rc_t rc;
    rwd_ifeval_t *e = rwd_ifeval_new(in->ground_truth, in->truth_len, &rc,
                                     r->error, sizeof r->error);
    if (!e)
        return rc;
    rwd_ifeval_verdict_t v;
    rc = rwd_ifeval_judge(e, in->answer, in->answer_len, &v);
    if (rc != LISA_OK) {
        lisa_errf(r->error, sizeof r->error, "response over %u bytes",
                  RWD_IF_MAX_RESPONSE);
        rwd_ifeval_destroy(&e);
        return rc;
    }
    json_t *ids = json_array(), *strict = json_array(), *loose = json_array();
    for (size_t i = 0; i < v.count; i++) {
        json_array_append_new(ids, json_string(rwd_ifeval_id(e, i)));
        json_array_append_new(strict, json_boolean(v.strict[i]));
        json_array_append_new(loose, json_boolean(v.loose[i]));
    }
    double n = (double) v.count;
    json_object_set_new(expl, "instructions", ids);
    json_object_set_new(expl, "strict", strict);
    json_object_set_new(expl, "loose", loose);
    json_object_set_new(expl, "strict_all",
                        json_boolean(v.strict_passed == v.count));
    json_object_set_new(expl, "loose_all",
                        json_boolean(v.loose_passed == v.count));
    json_object_set_new(expl, "strict_fraction",
                        json_real((double) v.strict_passed / n));
    json_object_set_new(expl, "loose_fraction",
                        json_real((double) v.loose_passed / n));
    r->reward = v.loose_passed == v.count ? 1.0 : 0.0;
    r->rule = "ifeval_loose";
    r->extracted =
        lisa_utf8_scrub(in->answer, in->answer_len, RWD_MAX_EXTRACTED);
    rwd_ifeval_destroy(&e);
    return LISA_OK;
}

static lisa_rc_t
s_rule_judge(const rwd_scorer_t *s, const rwd_input_t *in, json_t *expl,
             rwd_result_t *r)
{
    json_t *extra = NULL;
    lisa_rc_t rc = s_extra(in, &extra, r);
    if (rc != LISA_OK)
        return rc;
    const char *q =
        json_string_value(json_object_get(extra, "problem_statement"));
    char *gold =
        lisa_utf8_scrub(in->ground_truth, in->truth_len, RWD_MAX_TRUTH);
    char *cand = lisa_utf8_scrub(in->answer, in->answer_len, RWD_MAX_ANSWER);
    char *verdict = NULL;
    double v = 0.0;
    rc = rwd_judge_score(&s->judge, q ? q : "", gold, cand, in->deadline_ms, &v,
                         &verdict);
    if (rc == LISA_OK) {
        r->reward = v;
        r->rule = "judge";
        r->extracted =
            lisa_utf8_scrub(in->answer, in->answer_len, RWD_MAX_EXTRACTED);
        json_object_set_new(expl, "verdict", json_string(verdict));
        json_object_set_new(
            expl, "model",
            json_string(s->judge.model ? s->judge.model : "judge"));
    } else {
        lisa_errf(r->error, sizeof r->error, "judge failed: %s",
                  lisa_rc_str(rc));
    }
    lisa_free(&verdict);
    lisa_free(&gold);
    lisa_free(&cand);
    json_decref(extra);
    return rc;
}

static bool
s_judged(const rwd_scorer_t *s, const char *ds)
{
    const char *p = s->judge_sources;
    if (!p || !*p || !ds)
        return false;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t) (e - p) : strlen(p);
        if (n > 0 && strncmp(ds, p, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

lisa_rc_t
rwd_score(const rwd_scorer_t *s, const rwd_input_t *in, rwd_result_t *r)
{
    memset(r, 0, sizeof *r);
    const char *ds = in->data_source ? in->data_source : "";
    const s_route_t *route = s_find_route(ds);
    bool judged = s_judged(s, ds);
    if (!route && !judged) {
        lisa_errf(r->error, sizeof r->error, "unknown data source '%.64s'", ds);
        return LISA_INVALID;
    }
    if (in->answer_len > RWD_MAX_ANSWER || in->truth_len > RWD_MAX_TRUTH ||
        (in->extra_info_json && strlen(in->extra_info_json) > RWD_MAX_EXTRA)) {
        lisa_errf(r->error, sizeof r->error,
                  "input over its bound (answer %u, ground truth %u, "
                  "extra_info %u bytes)",
                  RWD_MAX_ANSWER, RWD_MAX_TRUTH, RWD_MAX_EXTRA);
        return LISA_TOOLARGE;
    }
    json_t *expl = json_object();
    json_object_set_new(expl, "data_source", json_string(ds));
    json_object_set_new(expl, "route",
                        json_string(judged ? "judge" : route->route));
    const char *a = in->answer ? in->answer : "";
    size_t al = in->answer ? in->answer_len : 0;
    s_trim(&a, &al);
    lisa_rc_t rc = LISA_OK;
    if (al == 0) {
        r->reward = 0.0;
        r->rule = "empty";
        r->extracted = lisa_strdup("");
    } else {
        rwd_input_t copy = *in;
        if (!copy.ground_truth)
            copy.ground_truth = "";
        rc = judged ? s_rule_judge(s, &copy, expl, r)
                    : route->fn(s, &copy, expl, r);
    }
    if (rc == LISA_OK) {
        json_object_set_new(expl, "rule", json_string(r->rule));
        json_object_set_new(expl, "extracted",
                            json_string(r->extracted ? r->extracted : ""));
        json_object_set_new(expl, "reward", json_real(r->reward));
        r->explanation_json = json_dumps(expl, JSON_COMPACT);
    } else {
        lisa_free(&r->extracted);
    }
    json_decref(expl);
    return rc;
}
