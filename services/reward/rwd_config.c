/*
 * rwd_config: the settings table and its one parsing function. See
 * rwd_config.h.
 */
#include "rwd_config.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { O_STR, O_INT } s_type_t;

typedef struct {
    const char *name; /* flag without "--" */
    const char *env;
    s_type_t type;
    size_t off;
    const char *def;
    int64_t min, max; /* O_INT bounds */
    const char *help;
} s_opt_t;

#define S_OFF(f) offsetof(rwd_config_t, f)

static const s_opt_t s_opts[] = {
    {"broker", "LISA_REWARD_BROKER", O_STR, S_OFF(broker),
     "tcp://127.0.0.1:7103", 0, 0, "broker worker endpoint"},
    {"curve-cert", "LISA_REWARD_CURVE_CERT", O_STR, S_OFF(curve_cert), "", 0, 0,
     "this worker's secret CURVE certificate (empty: plain bus)"},
    {"broker-cert", "LISA_REWARD_BROKER_CERT", O_STR, S_OFF(broker_cert), "", 0,
     0, "the broker's public CURVE certificate"},
    {"worker-id", "LISA_REWARD_WORKER_ID", O_STR, S_OFF(worker_id), "", 0, 0,
     "worker id (empty: reward-HOST-PID-RANDOM)"},
    {"threads", "LISA_REWARD_THREADS", O_INT, S_OFF(threads), "4", 1, 64,
     "scoring threads"},
    {"capacity", "LISA_REWARD_CAPACITY", O_INT, S_OFF(capacity), "0", 0, 1024,
     "requests held at once (0: threads)"},
    {"heartbeat-ms", "LISA_REWARD_HEARTBEAT_MS", O_INT, S_OFF(heartbeat_ms),
     "1000", 10, 60000, "heartbeat interval"},
    {"liveness", "LISA_REWARD_LIVENESS", O_INT, S_OFF(liveness), "3", 1, 100,
     "missed heartbeats before reconnecting"},
    {"reconnect-ms", "LISA_REWARD_RECONNECT_MS", O_INT, S_OFF(reconnect_ms),
     "1000", 10, 600000, "first reconnect delay"},
    {"reconnect-max-ms", "LISA_REWARD_RECONNECT_MAX_MS", O_INT,
     S_OFF(reconnect_max_ms), "32000", 10, 3600000, "reconnect delay cap"},
    {"budget-ms", "LISA_REWARD_BUDGET_MS", O_INT, S_OFF(budget_ms), "30000", 1,
     3600000, "per-request budget when the request gives none"},
    {"judge-url", "LISA_JUDGE_URL", O_STR, S_OFF(judge_url), "", 0, 0,
     "OpenAI-compatible base URL of the LLM judge"},
    {"judge-model", "LISA_JUDGE_MODEL", O_STR, S_OFF(judge_model),
     "Qwen3-235B-A22B-Instruct-2507", 0, 0, "judge model name"},
    {"judge-key", "LISA_JUDGE_API_KEY", O_STR, S_OFF(judge_key), "", 0, 0,
     "judge bearer token"},
    {"judge-sources", "LISA_JUDGE_SOURCES", O_STR, S_OFF(judge_sources), "", 0,
     0, "comma-separated data-source prefixes scored by the judge"},
    {"judge-timeout-ms", "LISA_JUDGE_TIMEOUT_MS", O_INT,
     S_OFF(judge_timeout_ms), "60000", 100, 3600000, "per judge call"},
    {"judge-retries", "LISA_JUDGE_RETRIES", O_INT, S_OFF(judge_retries), "2", 0,
     10, "judge retries after the first call"},
    {"log-level", "LISA_LOG_LEVEL", O_STR, S_OFF(log_level), "info", 0, 0,
     "error|warn|info|debug"},
};

#define S_NOPTS (sizeof s_opts / sizeof s_opts[0])

static lisa_rc_t
s_set(rwd_config_t *cfg, const s_opt_t *o, const char *v, const char *from)
{
    char *base = (char *) cfg;
    if (o->type == O_STR) {
        char **dst = (char **) (void *) (base + o->off);
        lisa_free(dst);
        *dst = lisa_strdup(v);
        return LISA_OK;
    }
    errno = 0;
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (errno || !end || end == v || *end || x < o->min || x > o->max) {
        fprintf(stderr,
                "lisa-reward: %s %s: '%s' is not an integer in [%lld, %lld]\n",
                from, o->name, v, (long long) o->min, (long long) o->max);
        return LISA_INVALID;
    }
    *(int64_t *) (void *) (base + o->off) = (int64_t) x;
    return LISA_OK;
}

void
rwd_config_help(FILE *f)
{
    fprintf(f, "settings (flag / environment / default):\n");
    for (size_t i = 0; i < S_NOPTS; i++)
        fprintf(f, "  --%-18s %-28s %-12s %s\n", s_opts[i].name, s_opts[i].env,
                *s_opts[i].def ? s_opts[i].def : "\"\"", s_opts[i].help);
}

lisa_rc_t
rwd_config_parse(rwd_config_t *cfg, int argc, char **argv, int first)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < S_NOPTS; i++)
        if (s_set(cfg, &s_opts[i], s_opts[i].def, "default") != LISA_OK)
            return LISA_INVALID;
    for (size_t i = 0; i < S_NOPTS; i++) {
        const char *v = getenv(s_opts[i].env);
        if (v && s_set(cfg, &s_opts[i], v, s_opts[i].env) != LISA_OK)
            return LISA_INVALID;
    }
    for (int a = first; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            rwd_config_help(stdout);
            return LISA_AGAIN;
        }
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "lisa-reward: unexpected argument '%s'\n", arg);
            return LISA_INVALID;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t nl = eq ? (size_t) (eq - name) : strlen(name);
        const s_opt_t *o = NULL;
        for (size_t i = 0; i < S_NOPTS && !o; i++)
            if (strlen(s_opts[i].name) == nl &&
                strncmp(s_opts[i].name, name, nl) == 0)
                o = &s_opts[i];
        if (!o) {
            fprintf(stderr, "lisa-reward: unknown flag '%s' (see --help)\n",
                    arg);
            return LISA_INVALID;
        }
        const char *v = eq ? eq + 1 : (a + 1 < argc ? argv[++a] : NULL);
        if (!v) {
            fprintf(stderr, "lisa-reward: --%s needs a value\n", o->name);
            return LISA_INVALID;
        }
        if (s_set(cfg, o, v, "flag") != LISA_OK)
            return LISA_INVALID;
    }
    lisa_log_level_t lvl;
    if (lisa_log_level_parse(cfg->log_level, &lvl) != LISA_OK) {
        fprintf(stderr, "lisa-reward: bad log level '%s'\n", cfg->log_level);
        return LISA_INVALID;
    }
    lisa_log_set_level(lvl);
    return LISA_OK;
}

void
rwd_config_dump(const rwd_config_t *cfg)
{
    const char *base = (const char *) cfg;
    for (size_t i = 0; i < S_NOPTS; i++) {
        const s_opt_t *o = &s_opts[i];
        if (o->type == O_STR) {
            const char *v = *(char *const *) (const void *) (base + o->off);
            bool secret = strcmp(o->name, "judge-key") == 0 && v && *v;
            lisa_log_info("config %s=%s", o->name, secret ? "***" : v);
        } else {
            lisa_log_info(
                "config %s=%lld", o->name,
                (long long) *(const int64_t *) (const void *) (base + o->off));
        }
    }
}

void
rwd_config_clear(rwd_config_t *cfg)
{
    char *base = (char *) cfg;
    for (size_t i = 0; i < S_NOPTS; i++)
        if (s_opts[i].type == O_STR)
            lisa_free((char **) (void *) (base + s_opts[i].off));
    memset(cfg, 0, sizeof *cfg);
}
