/*
 * lisa-reward: the reward evaluator.
 *
 *   lisa-reward worker [--broker tcp://127.0.0.1:7103] [settings]
 *   lisa-reward score  [settings] < lines.jsonl > rewards.jsonl
 *
 * main reads the settings, starts the chosen subcommand and tears down in
 * reverse; the work lives in rwd_worker (the broker protocol) and
 * rwd_lines (JSON lines), both on top of rwd_score.
 */
#include "lisa/lisa_curve.h"
#include "lisa/lisa_log.h"
#include "rwd_config.h"
#include "rwd_lines.h"
#include "rwd_rouge.h"
#include "rwd_score.h"
#include "rwd_worker.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

static rwd_scorer_t *
s_scorer(const rwd_config_t *cfg)
{
    rwd_scorer_config_t sc = {
        .judge_sources = cfg->judge_sources,
        .judge =
            {
                .base_url = *cfg->judge_url ? cfg->judge_url : NULL,
                .model = cfg->judge_model,
                .api_key = cfg->judge_key,
                .timeout_ms = cfg->judge_timeout_ms,
                .retries = (unsigned) cfg->judge_retries,
                .backoff_ms = 200,
                .temperature = 0.7,
                .max_tokens = 16384,
            },
    };
    return rwd_scorer_new(&sc);
}

static int
s_cmd_score(const rwd_config_t *cfg)
{
    rwd_scorer_t *s = s_scorer(cfg);
    if (!s)
        return 2;
    rwd_lines_stats_t st;
    lisa_rc_t rc = rwd_lines_run(s, stdin, stdout, cfg->budget_ms, &st);
    lisa_log_debug("score: %llu lines, %llu scored, %llu errors",
                   (unsigned long long) st.lines,
                   (unsigned long long) st.scored,
                   (unsigned long long) st.errors);
    rwd_scorer_destroy(&s);
    return rc == LISA_OK ? 0 : 1;
}

static int
s_cmd_worker(const rwd_config_t *cfg)
{
    rwd_config_dump(cfg);
    char err[256] = "";
    if (lisa_curve_use(cfg->curve_cert, cfg->broker_cert, err, sizeof err) !=
        LISA_OK) {
        lisa_log_error("%s", err);
        return 2;
    }
    rwd_scorer_t *s = s_scorer(cfg);
    if (!s)
        return 2;
    rwd_worker_t *w = rwd_worker_new(cfg, s);
    int code = 1;
    if (w && rwd_worker_run(w) == LISA_OK)
        code = 0;
    rwd_worker_destroy(&w);
    rwd_scorer_destroy(&s);
    lisa_curve_forget();
    return code;
}

/* Diagnostics: rouge-score tokens (stemmed) of each stdin line. */
static int
s_cmd_tokens(const rwd_config_t *cfg)
{
    (void) cfg;
    static char line[1 << 16], out[1 << 17];
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strcspn(line, "\n");
        (void) rwd_rouge_tokens(line, n, out, sizeof out);
        puts(out);
    }
    return 0;
}

typedef struct {
    const char *name;
    int (*fn)(const rwd_config_t *cfg);
    const char *help;
} s_cmd_t;

static const s_cmd_t s_cmds[] = {
    {"worker", s_cmd_worker, "serve scoring requests from the broker"},
    {"score", s_cmd_score, "score JSON lines from stdin to stdout"},
    {"tokens", s_cmd_tokens, "print ROUGE tokens of each stdin line"},
};

static void
s_usage(FILE *f)
{
    fprintf(f, "usage: lisa-reward COMMAND [--setting value ...]\n");
    for (size_t i = 0; i < sizeof s_cmds / sizeof s_cmds[0]; i++)
        fprintf(f, "  %-8s %s\n", s_cmds[i].name, s_cmds[i].help);
    rwd_config_help(f);
}

int
main(int argc, char **argv)
{
    lisa_log_set_service("reward");
    if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        s_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const s_cmd_t *cmd = NULL;
    for (size_t i = 0; i < sizeof s_cmds / sizeof s_cmds[0]; i++)
        if (strcmp(argv[1], s_cmds[i].name) == 0)
            cmd = &s_cmds[i];
    if (!cmd) {
        fprintf(stderr, "lisa-reward: unknown command '%s'\n", argv[1]);
        s_usage(stderr);
        return 2;
    }
    rwd_config_t cfg;
    lisa_rc_t rc = rwd_config_parse(&cfg, argc, argv, 2);
    if (rc != LISA_OK) {
        rwd_config_clear(&cfg);
        return rc == LISA_AGAIN ? 0 : 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int code = cmd->fn(&cfg);
    curl_global_cleanup();
    rwd_config_clear(&cfg);
    return code;
}
