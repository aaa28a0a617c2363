/*
 * agt_config: the agent's configuration, one declarative table.
 *
 * Each row names a setting, its environment variable, its flag
 * (--name=value), its type, default and help line; the table drives
 * parsing, validation, --help and the start-up dump (secrets are masked).
 * Precedence: defaults < environment < flags. The sandbox passes only the
 * gateway endpoint and the attempt token; every other row has a default
 * that matches the recipe.
 */
#ifndef AGT_CONFIG_H
#define AGT_CONFIG_H

#include "lisa/lisa_rc.h"

#include <stdio.h>

typedef struct {
    char *gateway_url;         /* http://host:port */
    char *gateway_socket;      /* unix socket path (instead of TCP) */
    char *token;               /* attempt token (Bearer) */
    char *testbed;             /* working root, /testbed */
    char *model;               /* `model` field of chat requests */
    unsigned cmd_timeout_s;    /* execute_bash limit per command */
    unsigned heartbeat_ms;     /* heartbeat period */
    unsigned http_timeout_s;   /* one chat completion */
    unsigned startup_s;        /* give up fetching the task after this */
    unsigned reserve_s;        /* time kept before the deadline to post */
    unsigned obs_max_bytes;    /* per stream shown to the model */
    unsigned capture_bytes;    /* per stream captured while running */
    unsigned head_lines;       /* output lines kept at the start */
    unsigned tail_lines;       /* output lines kept at the end */
    unsigned clip_chars;       /* editor clipping */
    unsigned max_answer_bytes; /* answer.txt bytes posted */
    unsigned max_turns;        /* defaults when the task gives 0 */
    unsigned max_context_tokens;
    unsigned max_tokens_per_call;
    unsigned model_retries;  /* attempts per chat completion */
    unsigned max_task_bytes; /* bound of the task document */
} agt_config_t;

/* Fills *cfg from defaults, then `env` lookups (getenv when NULL), then
 * argv flags. Returns LISA_OK, or LISA_INVALID with a message in err.
 * Sets *help when --help was given. Free with agt_config_clear. */
lisa_rc_t agt_config_load(agt_config_t *cfg, int argc, char **argv,
                          const char *(*env)(const char *), int *help,
                          char *err, size_t errlen) LISA_NODISCARD;

/* Checks cross-field rules (an endpoint and a token are set, ...). */
lisa_rc_t agt_config_validate(const agt_config_t *cfg, char *err,
                              size_t errlen) LISA_NODISCARD;

/* Prints the --help text. */
void agt_config_help(FILE *f);

/* Logs every setting (secrets masked), one line each at info level. */
void agt_config_dump(const agt_config_t *cfg);

/* Frees the strings of *cfg. */
void agt_config_clear(agt_config_t *cfg);

#endif
