/*
 * brk_config: the table, and the three small parsers it drives.
 */
#include "brk_config.h"

#include "lisa/lisa_mem.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { S_STR, S_U64 } s_type_t;

typedef struct {
    const char *name;
    const char *env;
    const char *flag;
    s_type_t type;
    size_t offset;
    const char *def;
    uint64_t min;
    uint64_t max;
    const char *help;
} s_setting_t;

#define STR(n, env, flag, def, help)                                           \
    {                                                                          \
#n, env, flag, S_STR, offsetof(brk_config_t, n), def, 0, 0, help       \
    }
#define U64(n, env, flag, def, lo, hi, help)                                   \
    {                                                                          \
#n, env, flag, S_U64, offsetof(brk_config_t, n), def, lo, hi, help     \
    }

static const s_setting_t s_settings[] = {
    STR(rpc_endpoint, "LISA_BROKER_RPC", "--rpc", "tcp://*:7100",
        "ROUTER endpoint for RPC"),
    STR(span_endpoint, "LISA_BROKER_SPANS", "--spans", "tcp://*:7101",
        "PULL endpoint for span ingest"),
    STR(event_endpoint, "LISA_BROKER_EVENTS", "--events", "tcp://*:7102",
        "PUB endpoint for events"),
    STR(worker_endpoint, "LISA_BROKER_WORKERS", "--workers", "tcp://*:7103",
        "ROUTER endpoint for reward workers"),
    STR(data_dir, "LISA_BROKER_DATA", "--data", "lisa-data",
        "directory of the SQLite store"),
    STR(sync, "LISA_BROKER_SYNC", "--sync", "full",
        "full: fsync each group commit (survives power loss); normal: "
        "survives process crashes only"),
    STR(token_key_file, "LISA_TOKEN_KEY_FILE", "--token-key", "",
        "file with the attempt-token HMAC key (empty: random per start)"),
    STR(ports_file, "LISA_BROKER_PORTS_FILE", "--ports-file", "",
        "write the bound endpoints to this file once listening"),
    STR(log_level, "LISA_LOG_LEVEL", "--log-level", "info",
        "error, warn, info or debug"),
    U64(lease_ms, "LISA_BROKER_LEASE_MS", "--lease-ms", "30000", 10, 86400000,
        "attempt lease; heartbeats renew it"),
    U64(deadline_ms, "LISA_BROKER_DEADLINE_MS", "--deadline-ms", "1800000", 10,
        604800000, "default deadline of an attempt (claim to scored)"),
    U64(max_attempts, "LISA_BROKER_MAX_ATTEMPTS", "--max-attempts", "3", 1, 100,
        "default attempts per rollout for retryable failures"),
    U64(backoff_ms, "LISA_BROKER_BACKOFF_MS", "--backoff-ms", "1000", 0,
        3600000, "delay before the first retry; doubles per attempt"),
    U64(backoff_max_ms, "LISA_BROKER_BACKOFF_MAX_MS", "--backoff-max-ms",
        "30000", 0, 3600000, "cap of the retry delay"),
    U64(tick_ms, "LISA_BROKER_TICK_MS", "--tick-ms", "100", 1, 10000,
        "period of the lease, deadline and liveness scan"),
    U64(group_max, "LISA_BROKER_GROUP_MAX", "--group-max", "4096", 1, 1000000,
        "most messages folded into one group commit"),
    U64(worker_heartbeat_ms, "LISA_BROKER_WORKER_HB_MS", "--worker-hb-ms",
        "1000", 10, 60000, "heartbeat interval with reward workers"),
    U64(worker_liveness, "LISA_BROKER_WORKER_LIVENESS", "--worker-liveness",
        "3", 1, 100, "missed heartbeats before a worker is declared dead"),
    U64(score_budget_ms, "LISA_BROKER_SCORE_BUDGET_MS", "--score-budget-ms",
        "60000", 10, 3600000, "time a reward worker may spend on one score"),
    U64(score_tries, "LISA_BROKER_SCORE_TRIES", "--score-tries", "3", 1, 100,
        "dispatches of a score when workers answer with errors"),
    U64(max_wait_ms, "LISA_BROKER_MAX_WAIT_MS", "--max-wait-ms", "3600000", 1,
        86400000, "bound on a wait request's timeout"),
    U64(max_waits, "LISA_BROKER_MAX_WAITS", "--max-waits", "1024", 1, 1000000,
        "wait requests held at once"),
    U64(max_rpc_frame, "LISA_BROKER_MAX_RPC_FRAME", "--max-rpc-frame",
        "16777216", 1024, 1073741824, "largest RPC request frame"),
    U64(max_span_frame, "LISA_BROKER_MAX_SPAN_FRAME", "--max-span-frame",
        "8388608", 1024, 1073741824, "largest SpanPush frame"),
    U64(max_worker_frame, "LISA_BROKER_MAX_WORKER_FRAME", "--max-worker-frame",
        "16777216", 1024, 1073741824, "largest reward-worker frame"),
    U64(max_batch, "LISA_BROKER_MAX_BATCH", "--max-batch", "100000", 1,
        10000000, "most rollouts per enqueue and spans per put"),
    U64(max_answer, "LISA_BROKER_MAX_ANSWER", "--max-answer", "1048576", 1,
        1073741824, "largest answer text of an attempt"),
};

#define S_N (sizeof s_settings / sizeof s_settings[0])

static lisa_rc_t
s_set(brk_config_t *cfg, const s_setting_t *s, const char *value, FILE *err,
      const char *origin)
{
    char *base = (char *) cfg + s->offset;
    if (s->type == S_STR) {
        char **p = (char **) (void *) base;
        lisa_free(p);
        *p = lisa_strdup(value);
        return LISA_OK;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (errno || !end || end == value || *end || value[0] == '-' ||
        v < s->min || v > s->max) {
        fprintf(err,
                "lisa-broker: %s: %s = '%s' is not a number in [%llu, %llu]\n",
                origin, s->name, value, (unsigned long long) s->min,
                (unsigned long long) s->max);
        return LISA_INVALID;
    }
    uint64_t u = v;
    memcpy(base, &u, sizeof u);
    return LISA_OK;
}

static const s_setting_t *
s_by_name(const char *name)
{
    for (size_t i = 0; i < S_N; i++)
        if (strcmp(s_settings[i].name, name) == 0)
            return &s_settings[i];
    return NULL;
}

static char *
s_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' ||
                 s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static lisa_rc_t
s_file(brk_config_t *cfg, const char *path, FILE *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(err, "lisa-broker: cannot read config file '%s'\n", path);
        return LISA_INVALID;
    }
    char line[4096];
    lisa_rc_t rc = LISA_OK;
    while (rc == LISA_OK && fgets(line, sizeof line, f)) {
        char *l = s_trim(line);
        if (!*l || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            fprintf(err, "lisa-broker: %s: bad line '%s'\n", path, l);
            rc = LISA_INVALID;
            break;
        }
        *eq = '\0';
        const s_setting_t *s = s_by_name(s_trim(l));
        if (!s) {
            fprintf(err, "lisa-broker: %s: unknown setting '%s'\n", path,
                    s_trim(l));
            rc = LISA_INVALID;
            break;
        }
        rc = s_set(cfg, s, s_trim(eq + 1), err, path);
    }
    fclose(f);
    return rc;
}

static void
s_help(FILE *out)
{
    fprintf(out, "usage: lisa-broker [--config FILE] [FLAG VALUE]...\n\n");
    for (size_t i = 0; i < S_N; i++)
        fprintf(out, "  %-20s %-28s %s (default %s)\n", s_settings[i].flag,
                s_settings[i].env, s_settings[i].help,
                *s_settings[i].def ? s_settings[i].def : "\"\"");
}

lisa_rc_t
brk_config_load(brk_config_t *cfg, int argc, char **argv, FILE *out, FILE *err)
{
    memset(cfg, 0, sizeof *cfg);
    lisa_rc_t rc = LISA_OK;
    for (size_t i = 0; i < S_N && rc == LISA_OK; i++)
        rc = s_set(cfg, &s_settings[i], s_settings[i].def, err, "default");
    const char *file = NULL;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--help") == 0 || strcmp(argv[a], "-h") == 0) {
            s_help(out);
            return LISA_AGAIN;
        }
        if (strcmp(argv[a], "--config") == 0 && a + 1 < argc)
            file = argv[a + 1];
    }
    if (rc == LISA_OK && file)
        rc = s_file(cfg, file, err);
    for (size_t i = 0; i < S_N && rc == LISA_OK; i++) {
        const char *v = getenv(s_settings[i].env);
        if (v)
            rc = s_set(cfg, &s_settings[i], v, err, s_settings[i].env);
    }
    for (int a = 1; a < argc && rc == LISA_OK; a++) {
        if (strcmp(argv[a], "--config") == 0) {
            a++;
            continue;
        }
        const s_setting_t *s = NULL;
        for (size_t i = 0; i < S_N; i++)
            if (strcmp(argv[a], s_settings[i].flag) == 0)
                s = &s_settings[i];
        if (!s || a + 1 >= argc) {
            fprintf(err, "lisa-broker: unknown flag or missing value: %s\n",
                    argv[a]);
            rc = LISA_INVALID;
            break;
        }
        rc = s_set(cfg, s, argv[++a], err, "flag");
    }
    if (rc == LISA_OK && strcmp(cfg->sync, "full") != 0 &&
        strcmp(cfg->sync, "normal") != 0) {
        fprintf(err, "lisa-broker: sync must be 'full' or 'normal'\n");
        rc = LISA_INVALID;
    }
    if (rc != LISA_OK)
        brk_config_free(cfg);
    return rc;
}

void
brk_config_free(brk_config_t *cfg)
{
    for (size_t i = 0; i < S_N; i++)
        if (s_settings[i].type == S_STR)
            lisa_free((char *) cfg + s_settings[i].offset);
}

void
brk_config_dump(const brk_config_t *cfg, FILE *out)
{
    for (size_t i = 0; i < S_N; i++) {
        const char *base = (const char *) cfg + s_settings[i].offset;
        if (s_settings[i].type == S_STR) {
            const char *v;
            memcpy(&v, base, sizeof v);
            fprintf(out, "%s = %s\n", s_settings[i].name, v ? v : "");
        } else {
            uint64_t v;
            memcpy(&v, base, sizeof v);
            fprintf(out, "%s = %llu\n", s_settings[i].name,
                    (unsigned long long) v);
        }
    }
}
