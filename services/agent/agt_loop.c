/*
 * agt_loop: the step table is small enough to read top to bottom: check
 * the stop conditions, mark the steps left, call the model, run the first
 * tool call, append the observation.
 */
#include "agt_loop.h"

#include "agt_prompt.h"
#include "agt_text.h"
#include "lisa/lisa_clock.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_utf8.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

const char *
agt_loop_steps_text(unsigned left, char *buf, size_t len)
{
    if (left <= 1)
        snprintf(buf, len,
                 "You have reached the maximum number of steps. Please "
                 "submit your answer NOW.");
    else
        snprintf(buf, len, "Steps Remaining: %u", left);
    return buf;
}

static void
s_end(agt_loop_out_t *out, const char *reason, lisa_rc_t rc, const char *fmt,
      const char *arg)
{
    out->end_reason = reason;
    out->rc = rc;
    snprintf(out->detail, sizeof out->detail, "%s%s", fmt, arg ? arg : "");
}

/* Appends text to the content of the last message. */
static void
s_append_to_last(json_t *msgs, const char *text)
{
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *c = json_string_value(json_object_get(last, "content"));
    lisa_buf_t sb;
    sb = LISA_BUF_CUT((c ? strlen(c) : 0) + strlen(text) + 2);
    if (c && *c) {
        lisa_buf_puts(&sb, c);
        lisa_buf_puts(&sb, "\n");
    }
    lisa_buf_puts(&sb, text);
    char *s = lisa_buf_take(&sb);
    json_object_set_new(last, "content", json_string(s));
    lisa_free(&s);
}

static json_t *
s_msg(const char *role, const char *content)
{
    char *clean = lisa_utf8_scrub(content, strlen(content), SIZE_MAX);
    json_t *m = json_pack("{s:s,s:s}", "role", role, "content", clean);
    lisa_free(&clean);
    return m;
}

/* Characters of a message that count toward the context estimate. */
static size_t
s_msg_chars(json_t *m)
{
    size_t n = 16;
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c))
        n += json_string_length(c);
    json_t *r = json_object_get(m, "reasoning_content");
    if (json_is_string(r))
        n += json_string_length(r);
    json_t *tc = json_object_get(m, "tool_calls");
    if (tc) {
        char *d = json_dumps(tc, JSON_COMPACT);
        n += d ? strlen(d) : 0;
        free(d);
    }
    return n;
}

/* The assistant message to keep: role, content, tool_calls and
 * reasoning_content of the reply, nothing else. */
static json_t *
s_assistant(json_t *msg)
{
    json_t *a = json_object();
    json_object_set_new(a, "role", json_string("assistant"));
    json_t *c = json_object_get(msg, "content");
    json_object_set(a, "content", json_is_string(c) ? c : json_null());
    json_t *r = json_object_get(msg, "reasoning_content");
    if (json_is_string(r))
        json_object_set(a, "reasoning_content", r);
    json_t *tc = json_object_get(msg, "tool_calls");
    if (json_is_array(tc) && json_array_size(tc) > 0)
        json_object_set(a, "tool_calls", tc);
    return a;
}

size_t
agt_loop_shrink_max_tokens(size_t max_tokens, size_t context_left)
{
    size_t floor = AGT_OVERFLOW_FLOOR;
    if (context_left < floor)
        floor = context_left;
    if (floor == 0) /* no room at all: nothing to retry with */
        return max_tokens;
    size_t cut = max_tokens / 2;
    if (cut < floor)
        cut = floor;
    return cut < max_tokens ? cut : max_tokens;
}

/* The chat request of a turn. */
static json_t *
s_request(const agt_loop_cfg_t *cfg, json_t *msgs, json_t *tool_defs,
          size_t max_tokens)
{
    json_t *req = json_pack("{s:s,s:O,s:O,s:s,s:I}", "model", cfg->model,
                            "messages", msgs, "tools", tool_defs, "tool_choice",
                            "auto", "max_tokens", (json_int_t) max_tokens);
    if (cfg->temperature >= 0)
        json_object_set_new(req, "temperature", json_real(cfg->temperature));
    if (cfg->top_p > 0)
        json_object_set_new(req, "top_p", json_real(cfg->top_p));
    return req;
}

/* How the episode ends when a model call failed. */
static void
s_call_failed(const agt_loop_cfg_t *cfg, agt_loop_out_t *out, lisa_rc_t rc,
              const agt_reply_t *rep)
{
    if (strcmp(rep->err_code, "context_length_exceeded") == 0)
        s_end(out, "context", LISA_OK,
              "the gateway refused the context: ", rep->error);
    else if (rc == LISA_CONFLICT)
        s_end(out, "cancelled", LISA_CONFLICT,
              "the attempt is closed: ", rep->error);
    else if (cfg->deadline_ms && lisa_clock_mono_ms() >= cfg->deadline_ms)
        s_end(out, "deadline", LISA_OK,
              "the deadline passed during a model call: ", rep->error);
    else if (cfg->cancel && atomic_load(cfg->cancel))
        s_end(out, "cancelled", LISA_CONFLICT, "cancelled during a model call",
              NULL);
    else
        s_end(out, "error", rc, "model call failed: ", rep->error);
}

/* Runs the reply's first tool call and returns the message that answers
 * it (a nudge when there was none; NULL after submit, *submitted set). */
static json_t *
s_observe(const agt_loop_cfg_t *cfg, agt_tools_t *tools, unsigned turn,
          json_t *msg, bool *submitted)
{
    json_t *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
    json_t *fn = json_object_get(call, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *margs = json_object_get(fn, "arguments");
    json_t *obs_msg = NULL;
    *submitted = false;
    if (!call || !name) {
        lisa_log_info("turn %u: no tool call", turn);
        return s_msg("user", AGT_PROMPT_CONTINUE);
    }
    char *args_dump = NULL;
    const char *args = json_string_value(margs);
    if (!args && json_is_object(margs)) {
        args_dump = json_dumps(margs, JSON_COMPACT);
        args = args_dump;
    }
    if (cfg->deadline_ms)
        agt_tools_set_time_left(tools, cfg->deadline_ms - lisa_clock_mono_ms());
    agt_tool_status_t st;
    char *obs = agt_tools_call(tools, name, args, &st);
    free(args_dump);
    lisa_log_info("turn %u: %s -> %s", turn, name,
                  st == AGT_TOOL_FAILED ? "error" : "ok");
    if (st == AGT_TOOL_SUBMIT) {
        *submitted = true;
    } else {
        const char *id = json_string_value(json_object_get(call, "id"));
        obs_msg = s_msg("tool", obs);
        json_object_set_new(obs_msg, "tool_call_id", json_string(id ? id : ""));
        json_object_set_new(obs_msg, "name", json_string(name));
    }
    lisa_free(&obs);
    return obs_msg;
}

lisa_rc_t
agt_loop_run(const agt_loop_cfg_t *cfg, agt_gateway_t *gw, agt_tools_t *tools,
             agt_heartbeat_t *hb, const char *system, const char *user,
             agt_loop_out_t *out)
{
    memset(out, 0, sizeof *out);
    json_t *msgs = json_array();
    json_t *tool_defs =
        cfg->tools ? json_incref(cfg->tools) : agt_tools_schemas();
    json_array_append_new(msgs, s_msg("system", system));
    json_array_append_new(msgs, s_msg("user", user));
    /* Context accounting: tokens of the conversation as of the last
     * reply (from usage when given), plus characters appended since / 4. */
    size_t known_tokens = 0, chars_since = 0;
    /* max_tokens cap of a call; cut back on context-overflow refusals. */
    size_t call_cap = cfg->max_tokens_per_call;
    unsigned overflow_retries = 0;
    bool same_turn = false; /* retrying a refused call: history as is */
    for (size_t i = 0; i < json_array_size(msgs); i++)
        chars_since += s_msg_chars(json_array_get(msgs, i));

    for (;;) {
        if (cfg->cancel && atomic_load(cfg->cancel)) {
            s_end(out, "cancelled", LISA_CONFLICT,
                  "the gateway cancelled the attempt", NULL);
            break;
        }
        long now = lisa_clock_mono_ms();
        if (cfg->deadline_ms && now >= cfg->deadline_ms) {
            s_end(out, "deadline", LISA_OK, "the deadline passed", NULL);
            break;
        }
        if (out->turns >= cfg->max_turns) {
            s_end(out, "turn_limit", LISA_OK, "the turn limit was reached",
                  NULL);
            break;
        }
        if (!same_turn) {
            char steps[128];
            agt_loop_steps_text(cfg->max_turns - out->turns, steps,
                                sizeof steps);
            s_append_to_last(msgs, steps);
            chars_since += strlen(steps) + 1;
        }
        same_turn = false;
        size_t est = known_tokens + (chars_since + 3) / 4;
        if (est >= cfg->max_context_tokens) {
            char d[96];
            snprintf(d, sizeof d, "%zu of %u tokens", est,
                     cfg->max_context_tokens);
            s_end(out, "context", LISA_OK, "context budget exhausted: ", d);
            break;
        }
        size_t max_tokens = cfg->max_context_tokens - est;
        if (max_tokens > call_cap)
            max_tokens = call_cap;

        json_t *req = s_request(cfg, msgs, tool_defs, max_tokens);
        long timeout = cfg->http_timeout_ms;
        if (cfg->deadline_ms && cfg->deadline_ms - now < timeout)
            timeout = cfg->deadline_ms - now;
        agt_reply_t rep;
        lisa_rc_t rc = agt_gateway_call_retry(
            gw, "POST", "/v1/chat/completions", req, out->turns + 1, timeout,
            cfg->retries, cfg->deadline_ms, cfg->cancel, &rep);
        json_decref(req);
        if (rc != LISA_OK &&
            strcmp(rep.err_code, "context_length_exceeded") == 0) {
            size_t cut = agt_loop_shrink_max_tokens(
                max_tokens, cfg->max_context_tokens - est);
            if (cut < max_tokens && overflow_retries < AGT_OVERFLOW_RETRIES) {
                lisa_log_warn("context overflow with max_tokens %zu: "
                              "retrying with %zu",
                              max_tokens, cut);
                call_cap = cut;
                overflow_retries++;
                same_turn = true;
                agt_reply_clear(&rep);
                continue; /* the same turn again, with a smaller budget */
            }
        }
        if (rc != LISA_OK) {
            s_call_failed(cfg, out, rc, &rep);
            agt_reply_clear(&rep);
            break;
        }
        out->turns++;
        char note[64];
        snprintf(note, sizeof note, "turn %u", out->turns);
        agt_heartbeat_note(hb, note);

        json_t *choice =
            json_array_get(json_object_get(rep.body, "choices"), 0);
        json_t *msg = json_object_get(choice, "message");
        if (!json_is_object(msg)) {
            s_end(out, "error", LISA_INVALID,
                  "the model reply has no choices[0].message", NULL);
            agt_reply_clear(&rep);
            break;
        }
        json_t *am = s_assistant(msg);
        json_array_append_new(msgs, am);
        json_t *usage = json_object_get(rep.body, "usage");
        json_int_t pt =
            json_integer_value(json_object_get(usage, "prompt_tokens"));
        json_int_t ct =
            json_integer_value(json_object_get(usage, "completion_tokens"));
        if (pt > 0) {
            known_tokens = (size_t) pt + (size_t) (ct > 0 ? ct : 0);
            chars_since = 0;
        } else {
            chars_since += s_msg_chars(am);
        }

        bool submitted = false;
        json_t *obs_msg = s_observe(cfg, tools, out->turns, msg, &submitted);
        agt_reply_clear(&rep);
        if (submitted) {
            s_end(out, "submit", LISA_OK, "the model submitted", NULL);
            break;
        }
        chars_since += s_msg_chars(obs_msg);
        json_array_append_new(msgs, obs_msg);
    }
    lisa_log_info("episode ended: %s after %u turns (%s)", out->end_reason,
                  out->turns, out->detail);
    json_decref(tool_defs);
    json_decref(msgs);
    return out->rc;
}
