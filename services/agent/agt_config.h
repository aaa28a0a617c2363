/*
 * agt_config: the agent's configuration, one declarative lisa_config
 * table: each row names a setting, its environment variable, its flag,
 * type, default, bounds and help line; the table drives parsing,
 * validation, --help and the start-up dump (the token is masked).
 * Precedence: defaults < --config file < environment < flags. The sandbox
 * passes only the gateway endpoint and the attempt token; every other row has a
 * default that matches the recipe.
 */
#ifndef AGT_CONFIG_H
#define AGT_CONFIG_H

#include "lisa/lisa_rc.h"

#include <stdint.h>
#include <stdio.h>

typedef struct {
    char *gateway_url;         /* http://host:port */
    char *gateway_socket;      /* unix socket path (instead of TCP) */
    char *token;               /* attempt token (Bearer) */
    char *testbed;             /* working root, /testbed */
    char *model;               /* `model` field of chat requests */
    uint64_t cmd_timeout_s;    /* execute_bash limit per command */
    uint64_t heartbeat_ms;     /* heartbeat period */
    uint64_t http_timeout_s;   /* one chat completion */
    uint64_t startup_s;        /* give up fetching the task after this */
    uint64_t reserve_s;        /* time kept before the deadline to post */
    uint64_t obs_max_bytes;    /* per stream shown to the model */
    uint64_t capture_bytes;    /* per stream captured while running */
    uint64_t head_lines;       /* output lines kept at the start */
    uint64_t tail_lines;       /* output lines kept at the end */
    uint64_t clip_chars;       /* editor clipping */
    uint64_t max_answer_bytes; /* answer.txt bytes posted */
    uint64_t max_turns;        /* defaults when the task gives 0 */
    uint64_t max_context_tokens;
    uint64_t max_tokens_per_call;
    uint64_t model_retries;  /* attempts per chat completion */
    uint64_t max_task_bytes; /* bound of the task document */
    char *network;           /* sandbox.network: "none" or "packages" */
    char *proxy_socket;      /* packages: the gateway proxy's socket */
    char *proxy_url;         /* packages: or its http://host:port */
    uint64_t proxy_port;     /* packages: the relay's port on 127.0.0.1 */
} agt_config_t;

/* Fills *cfg from defaults, --config file, environment and argv.
 * LISA_OK; LISA_AGAIN after printing --help to `out` (NULL: stdout);
 * LISA_INVALID with a message in err. Free with agt_config_clear. */
lisa_rc_t agt_config_load(agt_config_t *cfg, int argc, char **argv, FILE *out,
                          char *err, size_t errlen) LISA_NODISCARD;

/* Checks cross-field rules (an endpoint and a token are set, ...). */
lisa_rc_t agt_config_validate(const agt_config_t *cfg, char *err,
                              size_t errlen) LISA_NODISCARD;

/* Logs every setting (secrets masked), one line each at info level. */
void agt_config_dump(const agt_config_t *cfg);

/* Frees the strings of *cfg. */
void agt_config_clear(agt_config_t *cfg);

#endif
