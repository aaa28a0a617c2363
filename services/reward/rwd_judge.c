/*
 * rwd_judge: LLM-as-judge over an OpenAI-compatible chat endpoint. See
 * rwd_judge.h. Each call is one lisa_http_request_sync (common's client,
 * blocking face): it runs on a scoring thread of the worker, never on the
 * worker's loop, so many run at once without sharing a handle; the
 * answer is bounded by RWD_JUDGE_MAX_REPLY; curl_global_init happens once
 * in main.
 */
#include "rwd_judge.h"

#include "lisa/lisa_http_client.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <ctype.h>
#include <czmq.h>
#include <jansson.h>
#include <string.h>

static const char s_prompt[] =
    "You are grading an answer against an official answer.\n"
    "Decide whether the CANDIDATE ANSWER is consistent with the OFFICIAL "
    "ANSWER for the QUESTION: equivalent values, expressions or choices "
    "count as consistent; missing, different or contradictory answers do "
    "not.\n\n"
    "QUESTION:\n%s\n\nOFFICIAL ANSWER:\n%s\n\nCANDIDATE ANSWER:\n%s\n\n"
    "Reply with exactly one word: CORRECT or INCORRECT.";

int
rwd_judge_verdict(const char *text)
{
    int v = -1;
    for (size_t i = 0; text && text[i]; i++) {
        if (i > 0 && isalpha((unsigned char) text[i - 1]))
            continue;
        size_t n = 0;
        while (isalpha((unsigned char) text[i + n]))
            n++;
        if (n == 9 && strncmp(text + i, "INCORRECT", 9) == 0)
            v = 0;
        else if (n == 7 && strncmp(text + i, "CORRECT", 7) == 0)
            v = 1;
    }
    return v;
}

/* Builds the request body (caller frees). */
static char *
s_body(const rwd_judge_config_t *cfg, const char *q, const char *off,
       const char *cand)
{
    size_t n = sizeof s_prompt + strlen(q) + strlen(off) + strlen(cand);
    char *prompt = lisa_malloc(n);
    snprintf(prompt, n, s_prompt, q, off, cand);
    json_t *msg = json_pack("{s:s, s:s}", "role", "user", "content", prompt);
    json_t *req = json_pack("{s:s, s:[o], s:f, s:I}", "model",
                            cfg->model ? cfg->model : "judge", "messages", msg,
                            "temperature", cfg->temperature, "max_tokens",
                            (json_int_t) cfg->max_tokens);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    lisa_free(&prompt);
    return body;
}

/* One HTTP call: LISA_OK with *content set, LISA_AGAIN when retryable,
 * LISA_INVALID when the reply cannot be read. */
static lisa_rc_t
s_call(const rwd_judge_config_t *cfg, const char *body, int64_t timeout_ms,
       char **content, long *status)
{
    lisa_rc_t rc = LISA_AGAIN;
    char url[1024];
    json_t *root = NULL;
    *content = NULL;
    *status = 0;
    const char *base = cfg->base_url ? cfg->base_url : "";
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    snprintf(url, sizeof url, "%.*s/chat/completions", (int) bl, base);
    static const char *const headers[] = {"Content-Type: application/json",
                                          NULL};
    lisa_http_request_t req = {
        .method = "POST",
        .url = url,
        .headers = headers,
        .body = body,
        .body_len = strlen(body),
        .timeout_ms = (long) timeout_ms,
        .connect_timeout_ms = (long) timeout_ms,
        .bearer_token = cfg->api_key && *cfg->api_key ? cfg->api_key : NULL,
        .max_response = RWD_JUDGE_MAX_REPLY,
    };
    lisa_http_response_t *resp = NULL;
    lisa_rc_t hr = lisa_http_request_sync(&req, &resp);
    if (hr == LISA_INVALID) {
        lisa_log_warn("judge: %s: %s", url, lisa_http_response_error(resp));
        rc = LISA_INVALID; /* a bad URL: retrying does not help */
        goto out;
    }
    if (hr != LISA_OK) {
        lisa_log_warn("judge: %s: %s (%s)", url, lisa_rc_str(hr),
                      lisa_http_response_error(resp));
        goto out;
    }
    *status = lisa_http_response_status(resp);
    if (*status == 429 || *status >= 500) {
        lisa_log_warn("judge: HTTP %ld", *status);
        goto out;
    }
    if (*status != 200) {
        lisa_log_warn("judge: HTTP %ld (not retried)", *status);
        rc = LISA_INVALID;
        goto out;
    }
    json_error_t err;
    size_t len = 0;
    const char *data = lisa_http_response_body(resp, &len);
    root = json_loadb(data, len, 0, &err);
    const char *text = NULL;
    json_t *choices = root ? json_object_get(root, "choices") : NULL;
    json_t *first = json_array_get(choices, 0);
    json_t *msg = json_object_get(first, "message");
    text = json_string_value(json_object_get(msg, "content"));
    if (!text) {
        lisa_log_warn("judge: reply without choices[0].message.content");
        rc = LISA_INVALID;
        goto out;
    }
    *content = lisa_strdup(text);
    rc = LISA_OK;
out:
    json_decref(root);
    lisa_http_response_destroy(&resp);
    return rc;
}

lisa_rc_t
rwd_judge_score(const rwd_judge_config_t *cfg, const char *question,
                const char *official, const char *candidate,
                int64_t deadline_ms, double *reward, char **verdict)
{
    lisa_rc_t rc = LISA_UNAVAILABLE;
    char *body = s_body(cfg, question ? question : "", official, candidate);
    if (verdict)
        *verdict = NULL;
    if (!body)
        return LISA_ERR;
    int64_t backoff = cfg->backoff_ms > 0 ? cfg->backoff_ms : 100;
    for (unsigned attempt = 0; attempt <= cfg->retries; attempt++) {
        int64_t timeout = cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000;
        if (deadline_ms > 0) {
            int64_t left = deadline_ms - zclock_mono();
            if (left <= 0) {
                rc = LISA_TIMEOUT;
                break;
            }
            if (left < timeout)
                timeout = left;
        }
        char *content = NULL;
        long status = 0;
        lisa_rc_t r = s_call(cfg, body, timeout, &content, &status);
        if (r == LISA_OK) {
            int v = rwd_judge_verdict(content);
            if (v >= 0) {
                *reward = v;
                if (verdict)
                    *verdict = lisa_strdup(v ? "CORRECT" : "INCORRECT");
                lisa_free(&content);
                rc = LISA_OK;
                break;
            }
            lisa_log_warn("judge: reply has no verdict");
        }
        lisa_free(&content);
        if (r == LISA_ERR) {
            rc = LISA_ERR;
            break;
        }
        if (attempt < cfg->retries) {
            int64_t wait = backoff;
            if (deadline_ms > 0 && zclock_mono() + wait >= deadline_ms) {
                rc = LISA_TIMEOUT;
                break;
            }
            zclock_sleep((int) wait);
            backoff *= 2;
        }
    }
    lisa_free(&body);
    return rc;
}
