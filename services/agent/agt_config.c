/*
 * agt_config: table-driven settings.
 */
#include "agt_config.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { S_STR, S_UINT } s_type_t;

static const struct {
    const char *name; /* flag --name=value */
    const char *env;
    s_type_t type;
    size_t offset;
    const char *def;
    unsigned long min, max; /* S_UINT bounds */
    int secret;
    const char *help;
} s_table[] = {
    {"gateway-url", "LISA_GATEWAY_URL", S_STR,
     offsetof(agt_config_t, gateway_url), "", 0, 0, 0,
     "gateway base URL, http://host:port"},
    {"gateway-socket", "LISA_GATEWAY_SOCKET", S_STR,
     offsetof(agt_config_t, gateway_socket), "", 0, 0, 0,
     "gateway unix socket path (used instead of TCP when set)"},
    {"token", "LISA_ATTEMPT_TOKEN", S_STR, offsetof(agt_config_t, token), "", 0,
     0, 1, "attempt token, sent as Authorization: Bearer"},
    {"testbed", "LISA_TESTBED", S_STR, offsetof(agt_config_t, testbed),
     "/testbed", 0, 0, 0, "working root; documents go to <root>/documents"},
    {"model", "LISA_MODEL", S_STR, offsetof(agt_config_t, model), "policy", 0,
     0, 0, "model name sent in chat completion requests"},
    {"cmd-timeout-s", "LISA_CMD_TIMEOUT_S", S_UINT,
     offsetof(agt_config_t, cmd_timeout_s), "120", 1, 86400, 0,
     "execute_bash time limit per command (seconds)"},
    {"heartbeat-ms", "LISA_HEARTBEAT_MS", S_UINT,
     offsetof(agt_config_t, heartbeat_ms), "10000", 50, 3600000, 0,
     "heartbeat period (milliseconds)"},
    {"http-timeout-s", "LISA_HTTP_TIMEOUT_S", S_UINT,
     offsetof(agt_config_t, http_timeout_s), "1200", 1, 86400, 0,
     "time limit of one chat completion (seconds)"},
    {"startup-s", "LISA_STARTUP_S", S_UINT, offsetof(agt_config_t, startup_s),
     "60", 1, 3600, 0, "give up fetching the task after this (seconds)"},
    {"reserve-s", "LISA_RESERVE_S", S_UINT, offsetof(agt_config_t, reserve_s),
     "15", 0, 3600, 0, "time kept before the deadline to post the result"},
    {"obs-max-bytes", "LISA_OBS_MAX_BYTES", S_UINT,
     offsetof(agt_config_t, obs_max_bytes), "16384", 256, 16777216, 0,
     "bytes of one output stream shown to the model"},
    {"capture-bytes", "LISA_CAPTURE_BYTES", S_UINT,
     offsetof(agt_config_t, capture_bytes), "1048576", 1024, 268435456, 0,
     "bytes of one output stream kept while a command runs"},
    {"head-lines", "LISA_HEAD_LINES", S_UINT,
     offsetof(agt_config_t, head_lines), "40", 0, 100000, 0,
     "output lines kept at the start"},
    {"tail-lines", "LISA_TAIL_LINES", S_UINT,
     offsetof(agt_config_t, tail_lines), "40", 0, 100000, 0,
     "output lines kept at the end"},
    {"clip-chars", "LISA_CLIP_CHARS", S_UINT,
     offsetof(agt_config_t, clip_chars), "10000", 100, 16777216, 0,
     "editor output clipping (characters)"},
    {"max-answer-bytes", "LISA_MAX_ANSWER_BYTES", S_UINT,
     offsetof(agt_config_t, max_answer_bytes), "65536", 1, 16777216, 0,
     "bytes of answer.txt posted as the result"},
    {"max-turns", "LISA_MAX_TURNS", S_UINT, offsetof(agt_config_t, max_turns),
     "100", 1, 100000, 0, "turn limit when the task gives none"},
    {"max-context-tokens", "LISA_MAX_CONTEXT_TOKENS", S_UINT,
     offsetof(agt_config_t, max_context_tokens), "65536", 256, 16777216, 0,
     "trajectory token budget when the task gives none"},
    {"max-tokens-per-call", "LISA_MAX_TOKENS_PER_CALL", S_UINT,
     offsetof(agt_config_t, max_tokens_per_call), "65536", 16, 16777216, 0,
     "response tokens of one call when the task gives none"},
    {"model-retries", "LISA_MODEL_RETRIES", S_UINT,
     offsetof(agt_config_t, model_retries), "5", 1, 100, 0,
     "attempts of one chat completion on transient errors"},
    {"max-task-bytes", "LISA_MAX_TASK_BYTES", S_UINT,
     offsetof(agt_config_t, max_task_bytes), "67108864", 1024, 1073741824, 0,
     "bound of the task document"},
};

#define S_ROWS (sizeof s_table / sizeof s_table[0])

static const char *
s_getenv(const char *name)
{
    return getenv(name);
}

static lisa_rc_t
s_set(agt_config_t *cfg, size_t row, const char *val, char *err, size_t errlen)
{
    char *base = (char *) cfg + s_table[row].offset;
    if (s_table[row].type == S_STR) {
        char **slot = (char **) (void *) base;
        if (strlen(val) > 4096) {
            snprintf(err, errlen, "%s: value too long", s_table[row].name);
            return LISA_INVALID;
        }
        lisa_free(slot);
        *slot = lisa_strdup(val);
        return LISA_OK;
    }
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(val, &end, 10);
    if (!*val || *end || errno || val[0] == '-' || v < s_table[row].min ||
        v > s_table[row].max) {
        snprintf(err, errlen, "%s: '%.64s' is not an integer in [%lu, %lu]",
                 s_table[row].name, val, s_table[row].min, s_table[row].max);
        return LISA_INVALID;
    }
    *(unsigned *) (void *) base = (unsigned) v;
    return LISA_OK;
}

lisa_rc_t
agt_config_load(agt_config_t *cfg, int argc, char **argv,
                const char *(*env)(const char *), int *help, char *err,
                size_t errlen)
{
    lisa_rc_t rc = LISA_OK;
    memset(cfg, 0, sizeof *cfg);
    *help = 0;
    if (!env)
        env = s_getenv;
    for (size_t i = 0; i < S_ROWS; i++) {
        rc = s_set(cfg, i, s_table[i].def, err, errlen);
        if (rc != LISA_OK)
            return rc;
        const char *v = env(s_table[i].env);
        if (v) {
            rc = s_set(cfg, i, v, err, errlen);
            if (rc != LISA_OK)
                return rc;
        }
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            *help = 1;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t row = S_ROWS;
        if (strncmp(arg, "--", 2) == 0 && eq) {
            for (size_t i = 0; i < S_ROWS; i++) {
                size_t n = strlen(s_table[i].name);
                if ((size_t) (eq - arg - 2) == n &&
                    strncmp(arg + 2, s_table[i].name, n) == 0)
                    row = i;
            }
        }
        if (row == S_ROWS) {
            snprintf(err, errlen, "unknown argument '%.64s' (see --help)", arg);
            return LISA_INVALID;
        }
        rc = s_set(cfg, row, eq + 1, err, errlen);
        if (rc != LISA_OK)
            return rc;
    }
    return LISA_OK;
}

lisa_rc_t
agt_config_validate(const agt_config_t *cfg, char *err, size_t errlen)
{
    if (!*cfg->gateway_url && !*cfg->gateway_socket) {
        snprintf(err, errlen,
                 "no gateway: set LISA_GATEWAY_URL or LISA_GATEWAY_SOCKET");
        return LISA_INVALID;
    }
    if (*cfg->gateway_url && strncmp(cfg->gateway_url, "http://", 7) != 0 &&
        strncmp(cfg->gateway_url, "https://", 8) != 0) {
        snprintf(err, errlen, "LISA_GATEWAY_URL must start with http://");
        return LISA_INVALID;
    }
    if (!*cfg->token) {
        snprintf(err, errlen, "no attempt token: set LISA_ATTEMPT_TOKEN");
        return LISA_INVALID;
    }
    if (cfg->testbed[0] != '/') {
        snprintf(err, errlen, "LISA_TESTBED must be an absolute path");
        return LISA_INVALID;
    }
    return LISA_OK;
}

void
agt_config_help(FILE *f)
{
    fprintf(f, "usage: lisa-agent [--name=value ...]\n\n"
               "Runs one LLM-in-Sandbox episode against the gateway.\n"
               "Settings (flag, environment variable, default):\n");
    for (size_t i = 0; i < S_ROWS; i++)
        fprintf(f, "  --%-22s %-26s %-10s %s\n", s_table[i].name,
                s_table[i].env, *s_table[i].def ? s_table[i].def : "\"\"",
                s_table[i].help);
}

void
agt_config_dump(const agt_config_t *cfg)
{
    for (size_t i = 0; i < S_ROWS; i++) {
        const char *base = (const char *) cfg + s_table[i].offset;
        if (s_table[i].type == S_STR) {
            const char *v = *(char *const *) (const void *) base;
            lisa_log_info("config %s=%s", s_table[i].name,
                          s_table[i].secret ? (*v ? "***" : "") : v);
        } else {
            lisa_log_info("config %s=%u", s_table[i].name,
                          *(const unsigned *) (const void *) base);
        }
    }
}

void
agt_config_clear(agt_config_t *cfg)
{
    for (size_t i = 0; i < S_ROWS; i++) {
        if (s_table[i].type != S_STR)
            continue;
        char **slot = (char **) (void *) ((char *) cfg + s_table[i].offset);
        lisa_free(slot);
    }
}
