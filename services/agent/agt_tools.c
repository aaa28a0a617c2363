/*
 * agt_tools: tool table, argument parsing and observation formatting.
 */
#include "agt_tools.h"

#include "agt_editor.h"
#include "agt_exec.h"
#include "agt_text.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <stdlib.h>
#include <string.h>

#define S_MAX_ARGS_BYTES (4u * 1024u * 1024u)

struct agt_tools {
    agt_tools_cfg_t cfg;
    char *root;
    char *shell;
    agt_editor_t *editor;
    long ms_left;
};

agt_tools_t *
agt_tools_new(const agt_tools_cfg_t *cfg)
{
    if (!cfg || !cfg->root || !*cfg->root || cfg->capture_bytes < 64 ||
        cfg->obs_max_bytes < 64)
        return NULL;
    agt_tools_t *t = lisa_calloc(1, sizeof *t);
    t->cfg = *cfg;
    t->root = lisa_strdup(cfg->root);
    t->shell = cfg->shell ? lisa_strdup(cfg->shell) : NULL;
    t->cfg.root = t->root;
    t->cfg.shell = t->shell;
    t->editor = agt_editor_new(t->root, cfg->clip_chars, cfg->max_file_bytes);
    return t;
}

void
agt_tools_destroy(agt_tools_t **t)
{
    if (!t || !*t)
        return;
    agt_editor_destroy(&(*t)->editor);
    lisa_free(&(*t)->root);
    lisa_free(&(*t)->shell);
    lisa_free(t);
}

void
agt_tools_set_time_left(agt_tools_t *t, long ms_left)
{
    t->ms_left = ms_left;
}

/* The schemas, in the recipe's order of the `tools=` list. */
static const char s_schemas[] =
    "["
    "{\"type\":\"function\",\"function\":{\"name\":\"str_replace_editor\","
    "\"description\":\"View, create and edit files. `view` shows a file "
    "with line numbers (cat -n) or lists a directory two levels deep; "
    "`create` writes a new file (or replaces one) with `file_text`; "
    "`str_replace` replaces `old_str`, which must occur exactly once, by "
    "`new_str`; `insert` adds `new_str` after line `insert_line` (0: at "
    "the top). Long outputs are clipped; search with grep -n first.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"command\":{\"type\":\"string\",\"enum\":[\"view\",\"create\","
    "\"str_replace\",\"insert\"],\"description\":\"The operation.\"},"
    "\"path\":{\"type\":\"string\",\"description\":\"Absolute path of the "
    "file or directory, e.g. /testbed/solve.py.\"},"
    "\"file_text\":{\"type\":\"string\",\"description\":\"Content of the "
    "new file (create).\"},"
    "\"old_str\":{\"type\":\"string\",\"description\":\"Exact text to "
    "replace, unique in the file (str_replace).\"},"
    "\"new_str\":{\"type\":\"string\",\"description\":\"Replacement text "
    "(str_replace) or text to insert (insert).\"},"
    "\"insert_line\":{\"type\":\"integer\",\"description\":\"Insert after "
    "this line number (insert).\"},"
    "\"view_range\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
    "\"description\":\"[start, end] lines to view, 1-based; end -1 means "
    "to the end of the file (view).\"}},"
    "\"required\":[\"command\",\"path\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"execute_bash\","
    "\"description\":\"Run a bash command in /testbed. Every call starts a "
    "fresh shell: `cd` and exported variables do not persist, files and "
    "installed packages do. Commands are stopped after the time limit; "
    "long outputs keep only their first and last lines.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"command\":{\"type\":\"string\",\"description\":\"The bash command to "
    "run.\"}},\"required\":[\"command\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"submit\","
    "\"description\":\"Finish the task. Write the final answer to the "
    "answer file before calling this; submit takes no arguments.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{},"
    "\"required\":[]}}}"
    "]";

json_t *
agt_tools_schemas(void)
{
    json_error_t err;
    json_t *t = json_loads(s_schemas, 0, &err);
    if (!t) {
        /* A compile-time constant: failing here is a programmer error. */
        lisa_log_error("tools: schema text does not parse: %s", err.text);
        abort();
    }
    return t;
}

static void
s_section(lisa_buf_t *sb, const agt_tools_cfg_t *cfg, const char *name,
          const char *s, size_t len)
{
    char *lines = agt_text_cut_lines(s, len, cfg->head_lines, cfg->tail_lines);
    char *capped = agt_text_cap_bytes(lines, strlen(lines), cfg->obs_max_bytes);
    lisa_buf_printf(sb, "[%s]\n", name);
    lisa_buf_puts(sb, capped);
    if (*capped && capped[strlen(capped) - 1] != '\n')
        lisa_buf_puts(sb, "\n");
    lisa_free(&lines);
    lisa_free(&capped);
}

char *
agt_tools_bash_observation(const agt_tools_cfg_t *cfg, int exit_code,
                           bool timed_out, unsigned timeout_s, const char *out,
                           size_t out_len, const char *err, size_t err_len)
{
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(4 * cfg->obs_max_bytes + 4096);
    if (timed_out)
        lisa_buf_printf(&sb,
                        "The command took too long to execute (>%us) and was "
                        "stopped.\n",
                        timeout_s);
    lisa_buf_printf(&sb, "Exit code: %d\n", exit_code);
    lisa_buf_puts(&sb, "Execution output of [execute_bash]:\n");
    s_section(&sb, cfg, "STDOUT", out, out_len);
    if (err_len)
        s_section(&sb, cfg, "STDERR", err, err_len);
    return lisa_buf_take(&sb);
}

static char *
s_bash(agt_tools_t *t, json_t *args, agt_tool_status_t *status)
{
    const char *cmd = json_string_value(json_object_get(args, "command"));
    if (!cmd || !*cmd) {
        *status = AGT_TOOL_FAILED;
        return lisa_strdup("ERROR: execute_bash needs a non-empty string "
                           "argument `command`.");
    }
    unsigned timeout = t->cfg.cmd_timeout_ms;
    if (t->ms_left > 0 && (unsigned long) t->ms_left < timeout)
        timeout = (unsigned) t->ms_left;
    agt_exec_opts_t o = {
        .cwd = t->root,
        .timeout_ms = timeout,
        .capture_bytes = t->cfg.capture_bytes,
        .grace_ms = t->cfg.grace_ms,
        .cancel = t->cfg.cancel,
        .shell = t->shell,
        .jail = t->cfg.jail,
    };
    agt_exec_result_t r;
    lisa_rc_t rc = agt_exec_run(cmd, &o, &r);
    if (rc != LISA_OK) {
        *status = AGT_TOOL_FAILED;
        return lisa_strdup("ERROR: the command could not be started.");
    }
    char *obs = agt_tools_bash_observation(&t->cfg, r.exit_code, r.timed_out,
                                           (timeout + 999) / 1000, r.out,
                                           r.out_len, r.err, r.err_len);
    if (r.cancelled) {
        lisa_free(&obs);
        obs = lisa_strdup("ERROR: the command was stopped because the "
                          "attempt was cancelled.");
    }
    agt_exec_result_clear(&r);
    *status = AGT_TOOL_OK;
    return obs;
}

static bool
s_long_arg(json_t *v, long *out)
{
    if (json_is_integer(v)) {
        *out = (long) json_integer_value(v);
        return true;
    }
    /* Models sometimes quote numbers. */
    const char *s = json_string_value(v);
    if (!s || !*s)
        return false;
    char *end = NULL;
    long n = strtol(s, &end, 10);
    if (*end)
        return false;
    *out = n;
    return true;
}

static char *
s_editor(agt_tools_t *t, json_t *args, agt_tool_status_t *status)
{
    agt_editor_req_t req = {0};
    req.command = json_string_value(json_object_get(args, "command"));
    req.path = json_string_value(json_object_get(args, "path"));
    req.file_text = json_string_value(json_object_get(args, "file_text"));
    req.old_str = json_string_value(json_object_get(args, "old_str"));
    req.new_str = json_string_value(json_object_get(args, "new_str"));
    json_t *il = json_object_get(args, "insert_line");
    if (il && !json_is_null(il)) {
        if (!s_long_arg(il, &req.insert_line)) {
            *status = AGT_TOOL_FAILED;
            return lisa_strdup("ERROR: `insert_line` must be an integer.");
        }
        req.has_insert_line = true;
    }
    json_t *vr = json_object_get(args, "view_range");
    if (vr && !json_is_null(vr)) {
        if (!json_is_array(vr) || json_array_size(vr) != 2 ||
            !s_long_arg(json_array_get(vr, 0), &req.view_start) ||
            !s_long_arg(json_array_get(vr, 1), &req.view_end)) {
            *status = AGT_TOOL_FAILED;
            return lisa_strdup("ERROR: `view_range` must be a list of two "
                               "integers [start, end].");
        }
        req.has_view_range = true;
    }
    bool failed = false;
    char *obs = agt_editor_exec(t->editor, &req, &failed);
    *status = failed ? AGT_TOOL_FAILED : AGT_TOOL_OK;
    return obs;
}

static char *
s_submit(agt_tools_t *t, json_t *args, agt_tool_status_t *status)
{
    (void) t;
    (void) args;
    *status = AGT_TOOL_SUBMIT;
    return lisa_strdup("<<< Finished >>>");
}

static const struct {
    const char *name;
    char *(*fn)(agt_tools_t *, json_t *, agt_tool_status_t *);
} s_table[] = {
    {"execute_bash", s_bash},
    {"str_replace_editor", s_editor},
    {"submit", s_submit},
};

char *
agt_tools_call(agt_tools_t *t, const char *name, const char *args,
               agt_tool_status_t *status)
{
    *status = AGT_TOOL_FAILED;
    if (!name)
        return lisa_strdup("ERROR: the tool call has no function name.");
    size_t i = 0;
    for (; i < sizeof s_table / sizeof s_table[0]; i++)
        if (strcmp(name, s_table[i].name) == 0)
            break;
    if (i == sizeof s_table / sizeof s_table[0]) {
        lisa_buf_t sb;
        sb = LISA_BUF_CUT(512);
        lisa_buf_printf(&sb,
                        "ERROR: unknown function `%.128s`; available: "
                        "execute_bash, str_replace_editor, submit.",
                        name);
        return lisa_buf_take(&sb);
    }
    json_t *obj = NULL;
    if (args && *args) {
        if (strlen(args) > S_MAX_ARGS_BYTES)
            return lisa_strdup("ERROR: the arguments are too large.");
        json_error_t err;
        obj = json_loads(args, JSON_REJECT_DUPLICATES, &err);
        if (obj && !json_is_object(obj)) {
            json_decref(obj);
            lisa_buf_t sb;
            sb = LISA_BUF_CUT(512);
            lisa_buf_printf(&sb,
                            "ERROR: the arguments of %s must be a JSON "
                            "object.",
                            name);
            return lisa_buf_take(&sb);
        }
        if (!obj) {
            lisa_buf_t sb;
            sb = LISA_BUF_CUT(512);
            lisa_buf_printf(&sb,
                            "ERROR: the arguments of %s are not a valid JSON "
                            "object (%s at position %d).",
                            name, err.text, err.position);
            return lisa_buf_take(&sb);
        }
    } else {
        obj = json_object();
    }
    char *obs = s_table[i].fn(t, obj, status);
    json_decref(obj);
    return obs;
}
