/*
 * agt_run: the attempt's lifecycle as a straight line with one exit per
 * failure class. The deadline the loop works to is the task's deadline
 * minus a reserve kept for posting the result.
 */
#include "agt_run.h"

#include "agt_exit.h"
#include "agt_gateway.h"
#include "agt_heartbeat.h"
#include "agt_jail.h"
#include "agt_loop.h"
#include "agt_prompt.h"
#include "agt_relay.h"
#include "agt_task.h"
#include "agt_tools.h"
#include "lisa/lisa_clock.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Monotonic deadline of the loop, or 0 when the task has none. */
static long
s_deadline(const agt_task_t *t, unsigned reserve_s)
{
    long left;
    if (t->time_left_ms >= 0)
        left = (long) t->time_left_ms;
    else if (t->deadline_ms)
        left = (long) t->deadline_ms - (int64_t) lisa_clock_wall_ms();
    else
        return 0;
    return lisa_clock_mono_ms() + left - (long) reserve_s * 1000L;
}

static int
s_exit_of_fetch(lisa_rc_t rc)
{
    switch (rc) {
    case LISA_UNAUTHORIZED:
        return AGT_EXIT_UNAUTHORIZED;
    case LISA_CONFLICT:
        return AGT_EXIT_CANCELLED;
    case LISA_INVALID:
    case LISA_TOOLARGE:
        return AGT_EXIT_TASK;
    default:
        return AGT_EXIT_GATEWAY;
    }
}

static int
s_post_result(agt_gateway_t *gw, const agt_config_t *cfg,
              const agt_loop_out_t *lo)
{
    char *answer = NULL;
    bool truncated = false, found = false;
    lisa_rc_t rc =
        agt_task_read_answer(cfg->testbed, (size_t) cfg->max_answer_bytes,
                             &answer, &truncated, &found);
    char detail[768];
    snprintf(detail, sizeof detail, "%s%s%s", lo->detail,
             found ? "" : "; no answer file",
             truncated ? "; answer truncated" : "");
    if (rc != LISA_OK)
        lisa_log_warn("answer file unreadable; posting an empty answer");
    json_t *body = json_pack("{s:s,s:i,s:s,s:s}", "answer", answer, "turns",
                             (int) lo->turns, "end_reason", lo->end_reason,
                             "detail", detail);
    lisa_free(&answer);
    agt_reply_t rep;
    /* The result matters most: retry well past the loop's reserve. */
    rc = agt_gateway_call_retry(gw, "POST", "/lisa/v1/result", body, 0, 30000,
                                6, 0, NULL, &rep);
    json_decref(body);
    int code = AGT_EXIT_OK;
    if (rc == LISA_OK) {
        lisa_log_info("result posted: end_reason=%s turns=%u answer_file=%s",
                      lo->end_reason, lo->turns, found ? "yes" : "no");
    } else if (rc == LISA_CONFLICT) {
        lisa_log_warn("result refused, attempt closed: %s", rep.error);
        code = AGT_EXIT_CANCELLED;
    } else if (rc == LISA_UNAUTHORIZED) {
        lisa_log_error("result refused, token rejected: %s", rep.error);
        code = AGT_EXIT_UNAUTHORIZED;
    } else {
        lisa_log_error("result could not be posted: %s", rep.error);
        code = AGT_EXIT_RESULT;
    }
    agt_reply_clear(&rep);
    return code;
}

/* Fetches the task and places its files under the testbed: AGT_EXIT_OK
 * or the exit code that says what failed. */
static int
s_task(const agt_config_t *cfg, agt_gateway_t *gw, agt_task_t *task)
{
    char err[512] = "";
    agt_reply_t rep;
    long startup_deadline =
        lisa_clock_mono_ms() + (long) cfg->startup_s * 1000L;
    lisa_rc_t rc =
        agt_gateway_call_retry(gw, "GET", "/lisa/v1/task", NULL, 0, 30000, 1000,
                               startup_deadline, NULL, &rep);
    if (rc != LISA_OK) {
        lisa_log_error("cannot fetch the task: %s (%s)", rep.error,
                       lisa_rc_str(rc));
        agt_reply_clear(&rep);
        return s_exit_of_fetch(rc);
    }
    rc = agt_task_parse(rep.body, task, err, sizeof err);
    agt_reply_clear(&rep);
    if (rc != LISA_OK) {
        lisa_log_error("bad task: %s", err);
        return AGT_EXIT_TASK;
    }
    lisa_log_info("task: rollout=%s attempt=%u data_source=%s files=%zu",
                  task->rollout_id, task->attempt, task->data_source,
                  task->n_files);
    if (mkdir(cfg->testbed, 0755) != 0) {
        struct stat st;
        if (stat(cfg->testbed, &st) != 0 || !S_ISDIR(st.st_mode)) {
            lisa_log_error("cannot create %s", cfg->testbed);
            return AGT_EXIT_TESTBED;
        }
    }
    rc = agt_task_write_files(task, cfg->testbed, err, sizeof err);
    if (rc != LISA_OK) {
        lisa_log_error("cannot place the input files: %s", err);
        return rc == LISA_INVALID ? AGT_EXIT_TASK : AGT_EXIT_TESTBED;
    }
    return AGT_EXIT_OK;
}

int
agt_run(const agt_config_t *cfg)
{
    int code = AGT_EXIT_INTERNAL;
    atomic_bool cancel = false;
    agt_task_t task;
    memset(&task, 0, sizeof task);
    agt_heartbeat_t *hb = NULL;
    agt_tools_t *tools = NULL;
    agt_jail_t *jail = NULL;
    agt_relay_t *relay = NULL;
    char *sys = NULL, *user = NULL;
    json_t *tool_defs = NULL;
    agt_gateway_cfg_t gcfg = {
        .base_url = cfg->gateway_url,
        .unix_socket = cfg->gateway_socket,
        .token = cfg->token,
        .max_reply_bytes = (size_t) cfg->max_task_bytes,
    };
    agt_gateway_t *gw = agt_gateway_new(&gcfg);
    if (!gw) {
        lisa_log_error("cannot create the gateway client");
        return AGT_EXIT_INTERNAL;
    }

    /* 1. The task, 2. the sandbox's working tree. */
    code = s_task(cfg, gw, &task);
    if (code != AGT_EXIT_OK)
        goto out;
    code = AGT_EXIT_INTERNAL;
    lisa_rc_t rc;

    /* 3. Where the model's commands run (before any thread starts), then
     * heartbeats, prompts, tools. */
    jail = agt_jail_new();
    if (!jail) {
        lisa_log_error("cannot confine the model's commands");
        goto out;
    }
    bool packages = strcmp(cfg->network, "packages") == 0;
    if (packages) {
        agt_relay_env((uint16_t) cfg->proxy_port);
        agt_relay_cfg_t rcfg = {.socket = cfg->proxy_socket,
                                .url = cfg->proxy_url,
                                .token = cfg->token,
                                .port = (uint16_t) cfg->proxy_port};
        relay = agt_relay_start(&rcfg);
        if (!relay)
            goto out;
    }
    hb = agt_heartbeat_start(&gcfg, (unsigned) cfg->heartbeat_ms, &cancel);
    if (!hb) {
        lisa_log_error("cannot start heartbeats");
        goto out;
    }
    agt_prompt_in_t pin = {
        .data_source = task.data_source,
        .qa_type = task.qa_type,
        .problem = task.problem_statement,
        .root = cfg->testbed,
        .n_files = task.n_files,
        .packages = packages,
    };
    /* the run's prompts when the task carries them, else the built-in */
    sys = task.system_prompt ? lisa_strdup(task.system_prompt)
                             : agt_prompt_system(&pin);
    user = task.user_prompt ? lisa_strdup(task.user_prompt)
                            : agt_prompt_user(&pin);
    tool_defs = agt_prompt_tools(&pin);
    agt_tools_cfg_t tcfg = {
        .root = cfg->testbed,
        .cmd_timeout_ms = (unsigned) (cfg->cmd_timeout_s * 1000u),
        .capture_bytes = (size_t) cfg->capture_bytes,
        .obs_max_bytes = (size_t) cfg->obs_max_bytes,
        .head_lines = (unsigned) cfg->head_lines,
        .tail_lines = (unsigned) cfg->tail_lines,
        .clip_chars = (size_t) cfg->clip_chars,
        .grace_ms = 500,
        .cancel = &cancel,
        .jail = jail,
    };
    tools = agt_tools_new(&tcfg);
    if (!tools) {
        lisa_log_error("cannot set up the tools");
        goto out;
    }

    /* 4. The episode. */
    agt_loop_cfg_t lcfg = {
        .max_turns =
            task.max_turns ? task.max_turns : (unsigned) cfg->max_turns,
        .max_context_tokens = task.max_context_tokens
                                  ? task.max_context_tokens
                                  : (unsigned) cfg->max_context_tokens,
        .max_tokens_per_call = task.max_tokens_per_call
                                   ? task.max_tokens_per_call
                                   : (unsigned) cfg->max_tokens_per_call,
        .temperature = task.temperature,
        .top_p = task.top_p,
        .deadline_ms = s_deadline(&task, (unsigned) cfg->reserve_s),
        .http_timeout_ms = (long) cfg->http_timeout_s * 1000L,
        .retries = (unsigned) cfg->model_retries,
        .model = cfg->model,
        .cancel = &cancel,
        .tools = tool_defs,
    };
    agt_heartbeat_note(hb, "turn 0");
    agt_loop_out_t lo;
    rc = agt_loop_run(&lcfg, gw, tools, hb, sys, user, &lo);

    /* 5. The result. */
    if (rc == LISA_CONFLICT) {
        lisa_log_warn("attempt cancelled after %u turns; no result posted",
                      lo.turns);
        code = AGT_EXIT_CANCELLED;
    } else if (rc == LISA_UNAUTHORIZED) {
        lisa_log_error("the gateway refused the token; no result posted");
        code = AGT_EXIT_UNAUTHORIZED;
    } else if (rc == LISA_UNAVAILABLE || rc == LISA_TIMEOUT) {
        lisa_log_error("model calls kept failing (%s); no result posted",
                       lo.detail);
        code = AGT_EXIT_MODEL;
    } else {
        code = s_post_result(gw, cfg, &lo);
        if (code == AGT_EXIT_OK && rc != LISA_OK)
            code = AGT_EXIT_ERROR_POSTED;
    }
out:
    json_decref(tool_defs);
    agt_heartbeat_stop(&hb);
    agt_tools_destroy(&tools);
    agt_relay_stop(&relay);
    agt_jail_destroy(&jail);
    lisa_free(&sys);
    lisa_free(&user);
    agt_task_clear(&task);
    agt_gateway_destroy(&gw);
    lisa_log_info("exit %d (%s)", code, agt_exit_name(code));
    return code;
}
