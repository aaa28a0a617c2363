/*
 * agt_tools: the agent's three tools, exactly the recipe's set and names:
 * execute_bash {command}, str_replace_editor {command, path, file_text,
 * old_str, new_str, insert_line, view_range} and submit {}.
 *
 * agt_tools_schemas() is the OpenAI `tools` array sent with every chat
 * completion; agt_tools_call() runs one call (name + JSON arguments string,
 * as the model produced them) and returns the observation text. Bad
 * arguments are observations too ("ERROR: ..."), so the model can correct
 * itself; nothing the model sends can crash the agent.
 */
#ifndef AGT_TOOLS_H
#define AGT_TOOLS_H

#include "agt_jail.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct agt_tools agt_tools_t;

typedef struct {
    const char *root;          /* working directory of commands (/testbed) */
    unsigned cmd_timeout_ms;   /* per command (recipe: 120 s) */
    size_t capture_bytes;      /* per stream kept while a command runs */
    size_t obs_max_bytes;      /* per stream shown to the model */
    unsigned head_lines;       /* lines kept at the start (recipe: 40) */
    unsigned tail_lines;       /* lines kept at the end (recipe: 40) */
    size_t clip_chars;         /* editor clipping (recipe: 10000) */
    size_t max_file_bytes;     /* editor refuses larger files */
    unsigned grace_ms;         /* see agt_exec_opts_t */
    const atomic_bool *cancel; /* kills a running command when set */
    const char *shell;         /* NULL: bash */
    const agt_jail_t *jail;    /* where commands run (borrowed; NULL: none) */
} agt_tools_cfg_t;

/* Outcome of one call. */
typedef enum {
    AGT_TOOL_OK = 0,     /* observation produced */
    AGT_TOOL_FAILED = 1, /* observation is an error message */
    AGT_TOOL_SUBMIT = 2  /* submit: the episode ends */
} agt_tool_status_t;

/* New tool set (cfg strings are copied). NULL on bad config. */
agt_tools_t *agt_tools_new(const agt_tools_cfg_t *cfg);
/* Frees *t and sets it to NULL; safe on NULL. */
void agt_tools_destroy(agt_tools_t **t);

/* The OpenAI tools array (a new reference). */
json_t *agt_tools_schemas(void);

/* Caps the next commands' timeout so they end by `ms_left` from now
 * (0: no cap beyond cmd_timeout_ms). */
void agt_tools_set_time_left(agt_tools_t *t, long ms_left);

/* Runs tool `name` with JSON-object arguments `args` (string, may be NULL
 * or empty). Returns the observation (caller frees); *status says how. */
char *agt_tools_call(agt_tools_t *t, const char *name, const char *args,
                     agt_tool_status_t *status);

/* Formats a command result as the observation text (exposed for tests). */
char *agt_tools_bash_observation(const agt_tools_cfg_t *cfg, int exit_code,
                                 bool timed_out, unsigned timeout_s,
                                 const char *out, size_t out_len,
                                 const char *err, size_t err_len);

#endif
