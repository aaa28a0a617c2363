/*
 * lisa_config tests: precedence over a real file, the environment and argv;
 * every type with good and bad text; bounds; error messages that name the
 * entry and the source; --help, the start-up dump and the Markdown
 * reference generated from one table.
 */
#include "lisa/lisa_config.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *endpoint;
    char *secret;
    int64_t offset;
    uint64_t workers;
    double temperature;
    bool verbose;
    uint64_t lease_ms;
    uint64_t max_frame;
    char *name;
} s_cfg_t;

static const lisa_config_entry_t s_table[] = {
    {.name = "svc.endpoint",
     .env = "LISA_T_ENDPOINT",
     .flag = "--endpoint",
     .type = LISA_CFG_STRING,
     .def = "tcp://127.0.0.1:7100",
     .help = "where to listen",
     .offset = offsetof(s_cfg_t, endpoint)},
    {.name = "svc.secret",
     .env = "LISA_T_SECRET",
     .flag = "--secret",
     .type = LISA_CFG_STRING,
     .help = "shared key",
     .offset = offsetof(s_cfg_t, secret),
     .flags = LISA_CFG_SECRET},
    {.name = "svc.offset",
     .env = "LISA_T_OFFSET",
     .flag = "--offset",
     .type = LISA_CFG_INT64,
     .def = "-3",
     .help = "signed offset",
     .offset = offsetof(s_cfg_t, offset),
     .min = "-100",
     .max = "100"},
    {.name = "svc.workers",
     .env = "LISA_T_WORKERS",
     .flag = "--workers",
     .type = LISA_CFG_UINT64,
     .def = "4",
     .help = "worker threads",
     .offset = offsetof(s_cfg_t, workers),
     .min = "1",
     .max = "64"},
    {.name = "svc.temperature",
     .env = "LISA_T_TEMP",
     .flag = "--temperature",
     .type = LISA_CFG_DOUBLE,
     .def = "1.0",
     .help = "sampling temperature",
     .offset = offsetof(s_cfg_t, temperature),
     .min = "0",
     .max = "2"},
    {.name = "svc.verbose",
     .env = "LISA_T_VERBOSE",
     .flag = "--verbose",
     .type = LISA_CFG_BOOL,
     .def = "false",
     .help = "log more",
     .offset = offsetof(s_cfg_t, verbose)},
    {.name = "svc.lease",
     .env = "LISA_T_LEASE",
     .flag = "--lease",
     .type = LISA_CFG_DURATION,
     .def = "30s",
     .help = "lease of a claim",
     .offset = offsetof(s_cfg_t, lease_ms),
     .min = "100ms",
     .max = "1h"},
    {.name = "svc.max_frame",
     .env = "LISA_T_MAX_FRAME",
     .flag = "--max-frame",
     .type = LISA_CFG_SIZE,
     .def = "16MiB",
     .help = "largest frame | bytes",
     .offset = offsetof(s_cfg_t, max_frame),
     .max = "1GiB"},
    {.name = "svc.name",
     .type = LISA_CFG_STRING,
     .def = "alpha",
     .help = "no flag, no env: file and name=value only",
     .offset = offsetof(s_cfg_t, name),
     .min = "1",
     .max = "8"},
};

#define S_N (sizeof s_table / sizeof s_table[0])

/* Loads with argv given as a NULL-terminated list after the program. */
static lisa_rc_t
s_load(s_cfg_t *cfg, lisa_config_source_t *src, char *err, size_t errlen,
       const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *) "lisa-test";
    for (; args && *args; args++)
        argv[argc++] = (char *) *args;
    argv[argc] = NULL;
    lisa_config_opts_t o = {.sources = src};
    memset(cfg, 0, sizeof *cfg);
    return lisa_config_load_ex(s_table, S_N, cfg, argc, argv, &o, err, errlen);
}

/* Writes text to a new temporary file; path receives its name. */
static void
s_write_tmp(char *path, size_t len, const char *text)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/lisa_cfg_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t) strlen(text));
    close(fd);
}

Test(lisa_config, usage_example)
{
    typedef struct {
        char *rpc;
        uint64_t lease_ms;
    } cfg_t;
    static const lisa_config_entry_t table[] = {
        {.name = "broker.rpc_endpoint",
         .env = "LISA_BROKER_RPC",
         .flag = "--rpc",
         .type = LISA_CFG_STRING,
         .def = "tcp://127.0.0.1:7100",
         .help = "ROUTER endpoint",
         .offset = offsetof(cfg_t, rpc)},
        {.name = "broker.lease",
         .env = "LISA_BROKER_LEASE",
         .flag = "--lease",
         .type = LISA_CFG_DURATION,
         .def = "30s",
         .min = "100ms",
         .help = "lease of a claimed rollout",
         .offset = offsetof(cfg_t, lease_ms)},
    };
    char *argv[] = {"lisa-broker", "--rpc", "tcp://127.0.0.1:9999", NULL};
    setenv("LISA_BROKER_LEASE", "2m", 1);
    cfg_t cfg = {0};
    char err[256];
    cr_assert_eq(lisa_config_load(table, 2, &cfg, 3, argv, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_str_eq(cfg.rpc, "tcp://127.0.0.1:9999");
    cr_assert_eq(cfg.lease_ms, 120000);
    lisa_config_free(table, 2, &cfg);
    cr_assert_null(cfg.rpc);
}

Test(lisa_config, defaults_fill_every_type)
{
    s_cfg_t c;
    char err[256];
    lisa_config_source_t src[S_N];
    cr_assert_eq(s_load(&c, src, err, sizeof err, NULL), LISA_OK, "%s", err);
    cr_assert_str_eq(c.endpoint, "tcp://127.0.0.1:7100");
    cr_assert_null(c.secret);
    cr_assert_eq(c.offset, -3);
    cr_assert_eq(c.workers, 4);
    cr_assert_float_eq(c.temperature, 1.0, 0);
    cr_assert_eq(c.verbose, false);
    cr_assert_eq(c.lease_ms, 30000);
    cr_assert_eq(c.max_frame, 16u << 20);
    cr_assert_str_eq(c.name, "alpha");
    for (size_t i = 0; i < S_N; i++) {
        cr_assert_eq(src[i].origin, LISA_CFG_FROM_DEFAULT);
        cr_assert_str_eq(src[i].where, "default");
    }
    lisa_config_free(s_table, S_N, &c);
}

Test(lisa_config, copy_owns_its_strings)
{
    s_cfg_t c, d;
    char err[256];
    lisa_config_source_t src[S_N];
    static const char *const args[] = {"--secret", "s3", NULL};
    cr_assert_eq(s_load(&c, src, err, sizeof err, args), LISA_OK, "%s", err);
    lisa_config_copy(s_table, S_N, &d, &c, sizeof d);
    cr_assert_str_eq(d.endpoint, c.endpoint);
    cr_assert_neq(d.endpoint, c.endpoint); /* its own string */
    cr_assert_str_eq(d.secret, "s3");
    cr_assert_neq(d.secret, c.secret);
    cr_assert_str_eq(d.name, "alpha");
    cr_assert_eq(d.workers, c.workers);
    cr_assert_eq(d.lease_ms, c.lease_ms);
    /* each freed on its own (ASan builds catch a shared pointer) */
    lisa_config_free(s_table, S_N, &c);
    cr_assert_str_eq(d.endpoint, "tcp://127.0.0.1:7100");
    lisa_config_free(s_table, S_N, &d);
    cr_assert_null(d.secret);
}

Test(lisa_config, precedence_default_file_env_flag)
{
    char path[256], cfgarg[300], err[256];
    s_write_tmp(path, sizeof path,
                "# a comment\n"
                "\n"
                "svc.endpoint = tcp://file:1\n"
                "  svc.workers=8  \r\n"
                "svc.offset = 10\n"
                "svc.lease = 5s\n"
                "svc.name = \" fil \"\n");
    setenv("LISA_T_WORKERS", "16", 1);
    setenv("LISA_T_OFFSET", "20", 1);
    setenv("LISA_T_TEMP", "", 1); /* empty: not set */
    snprintf(cfgarg, sizeof cfgarg, "--config=%s", path);
    const char *args[] = {cfgarg, "--offset", "30", NULL};
    s_cfg_t c;
    lisa_config_source_t src[S_N];
    cr_assert_eq(s_load(&c, src, err, sizeof err, args), LISA_OK, "%s", err);
    cr_assert_str_eq(c.endpoint, "tcp://file:1"); /* file over default */
    cr_assert_eq(c.lease_ms, 5000);
    cr_assert_eq(c.workers, 16);               /* env over file */
    cr_assert_eq(c.offset, 30);                /* flag over env */
    cr_assert_float_eq(c.temperature, 1.0, 0); /* default */
    cr_assert_str_eq(c.name, " fil ");         /* quotes keep blanks */

    char where[300];
    snprintf(where, sizeof where, "file %s:3", path);
    cr_assert_eq(src[0].origin, LISA_CFG_FROM_FILE);
    cr_assert_str_eq(src[0].where, where);
    cr_assert_eq(src[3].origin, LISA_CFG_FROM_ENV);
    cr_assert_str_eq(src[3].where, "env LISA_T_WORKERS");
    cr_assert_eq(src[2].origin, LISA_CFG_FROM_FLAG);
    cr_assert_str_eq(src[2].where, "flag --offset");
    cr_assert_eq(src[4].origin, LISA_CFG_FROM_DEFAULT);
    lisa_config_free(s_table, S_N, &c);
    unlink(path);
}

Test(lisa_config, flag_forms_and_positional_overrides)
{
    const char *args[] = {
        "--verbose", "--workers=2",        "svc.workers=3",   "--endpoint",
        "tcp://a:1", "--lease=2m",         "svc.name=beta",   "--max-frame",
        "4KiB",      "--temperature=0.25", "svc.offset=-100", NULL};
    s_cfg_t c;
    char err[256];
    lisa_config_source_t src[S_N];
    cr_assert_eq(s_load(&c, src, err, sizeof err, args), LISA_OK, "%s", err);
    cr_assert(c.verbose);
    cr_assert_eq(c.workers, 3); /* left to right: the later one wins */
    cr_assert_eq(src[3].origin, LISA_CFG_FROM_ARG);
    cr_assert_str_eq(src[3].where, "argument svc.workers");
    cr_assert_str_eq(c.endpoint, "tcp://a:1");
    cr_assert_eq(c.lease_ms, 120000);
    cr_assert_str_eq(c.name, "beta");
    cr_assert_eq(c.max_frame, 4096);
    cr_assert_float_eq(c.temperature, 0.25, 0);
    cr_assert_eq(c.offset, -100);
    lisa_config_free(s_table, S_N, &c);

    const char *neg[] = {"--verbose", "--no-verbose", NULL};
    cr_assert_eq(s_load(&c, NULL, err, sizeof err, neg), LISA_OK, "%s", err);
    cr_assert_not(c.verbose);
    lisa_config_free(s_table, S_N, &c);
    const char *expl[] = {"--verbose=off", NULL};
    cr_assert_eq(s_load(&c, NULL, err, sizeof err, expl), LISA_OK);
    cr_assert_not(c.verbose);
    lisa_config_free(s_table, S_N, &c);
}

/* Loads with one flag set to text; returns rc, err filled. */
static lisa_rc_t
s_try(const char *flag, const char *text, s_cfg_t *c, char *err, size_t len)
{
    const char *args[] = {flag, text, NULL};
    return s_load(c, NULL, err, len, args);
}

Test(lisa_config, every_type_accepts_good_text)
{
    static const struct {
        const char *flag, *text;
        size_t off;
        uint64_t want; /* as uint64 bits of the field */
    } cases[] = {
        {"--offset", "-100", offsetof(s_cfg_t, offset), (uint64_t) -100},
        {"--offset", "+7", offsetof(s_cfg_t, offset), 7},
        {"--workers", "64", offsetof(s_cfg_t, workers), 64},
        {"--lease", "500ms", offsetof(s_cfg_t, lease_ms), 500},
        {"--lease", "2s", offsetof(s_cfg_t, lease_ms), 2000},
        {"--lease", "1m", offsetof(s_cfg_t, lease_ms), 60000},
        {"--lease", "1h", offsetof(s_cfg_t, lease_ms), 3600000},
        {"--lease", "250", offsetof(s_cfg_t, lease_ms), 250},
        {"--lease", "3 S", offsetof(s_cfg_t, lease_ms), 3000},
        {"--max-frame", "512", offsetof(s_cfg_t, max_frame), 512},
        {"--max-frame", "16MiB", offsetof(s_cfg_t, max_frame), 16u << 20},
        {"--max-frame", "1 GiB", offsetof(s_cfg_t, max_frame), 1u << 30},
        {"--max-frame", "1GB", offsetof(s_cfg_t, max_frame), 1000000000},
        {"--max-frame", "8k", offsetof(s_cfg_t, max_frame), 8192},
        {"--max-frame", "3kb", offsetof(s_cfg_t, max_frame), 3000},
        {"--max-frame", "2M", offsetof(s_cfg_t, max_frame), 2u << 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_cfg_t c;
        char err[256];
        cr_assert_eq(s_try(cases[i].flag, cases[i].text, &c, err, sizeof err),
                     LISA_OK, "%s %s: %s", cases[i].flag, cases[i].text, err);
        uint64_t got;
        memcpy(&got, (char *) &c + cases[i].off, sizeof got);
        cr_assert_eq(got, cases[i].want, "%s %s", cases[i].flag, cases[i].text);
        lisa_config_free(s_table, S_N, &c);
    }
    static const char *yes[] = {"true", "YES", "on", "1"};
    static const char *no[] = {"false", "No", "OFF", "0"};
    for (size_t i = 0; i < 4; i++) {
        bool b;
        cr_assert_eq(lisa_config_parse_bool(yes[i], &b), LISA_OK);
        cr_assert(b);
        cr_assert_eq(lisa_config_parse_bool(no[i], &b), LISA_OK);
        cr_assert_not(b);
    }
    uint64_t v;
    cr_assert_eq(lisa_config_parse_duration("1d", &v), LISA_OK);
    cr_assert_eq(v, 86400000);
    cr_assert_eq(lisa_config_parse_size("18446744073709551615", &v), LISA_OK);
    cr_assert_eq(v, UINT64_MAX);
    cr_assert_eq(lisa_config_parse_size("1TiB", &v), LISA_OK);
    cr_assert_eq(v, 1ull << 40);
}

Test(lisa_config, every_type_refuses_bad_text_naming_entry_and_source)
{
    static const struct {
        const char *flag, *text, *name;
    } cases[] = {
        {"--offset", "12abc", "svc.offset"},
        {"--offset", "", "svc.offset"},
        {"--offset", " 5", "svc.offset"},
        {"--offset", "9223372036854775808", "svc.offset"},
        {"--offset", "0x10", "svc.offset"},
        {"--workers", "-1", "svc.workers"},
        {"--workers", "18446744073709551616", "svc.workers"},
        {"--workers", "4.0", "svc.workers"},
        {"--temperature", "nan", "svc.temperature"},
        {"--temperature", "inf", "svc.temperature"},
        {"--temperature", "1e999", "svc.temperature"},
        {"--temperature", "1,5", "svc.temperature"},
        {"--verbose=maybe", NULL, "svc.verbose"},
        {"--lease", "2x", "svc.lease"},
        {"--lease", "-1s", "svc.lease"},
        {"--lease", "1.5s", "svc.lease"},
        {"--lease", "s", "svc.lease"},
        {"--lease", "99999999999999999999", "svc.lease"},
        {"--lease", "999999999999999999h", "svc.lease"},
        {"--max-frame", "12x", "svc.max_frame"},
        {"--max-frame", "MiB", "svc.max_frame"},
        {"--max-frame", "-1", "svc.max_frame"},
        {"--max-frame", "16MiBs", "svc.max_frame"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_cfg_t c;
        char err[256] = "";
        cr_assert_eq(s_try(cases[i].flag, cases[i].text, &c, err, sizeof err),
                     LISA_INVALID, "%s %s", cases[i].flag,
                     cases[i].text ? cases[i].text : "");
        cr_assert(strstr(err, cases[i].name) != NULL, "%s", err);
        cr_assert(strncmp(err, "flag --", 7) == 0, "%s", err);
        cr_assert(strstr(err, "is not") != NULL, "%s", err);
        /* On failure the strings were already freed. */
        cr_assert_null(c.endpoint);
        cr_assert_null(c.name);
    }
}

Test(lisa_config, bounds_are_enforced_with_clear_messages)
{
    static const struct {
        const char *flag, *text, *msg;
    } cases[] = {
        {"--offset", "101", "above the maximum 100"},
        {"--offset", "-101", "below the minimum -100"},
        {"--workers", "0", "below the minimum 1"},
        {"--workers", "65", "above the maximum 64"},
        {"--temperature", "2.0001", "above the maximum 2"},
        {"--temperature", "-0.5", "below the minimum 0"},
        {"--lease", "99ms", "below the minimum 100ms"},
        {"--lease", "61m", "above the maximum 1h"},
        {"--max-frame", "1025MiB", "above the maximum 1GiB"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_cfg_t c;
        char err[256] = "";
        cr_assert_eq(s_try(cases[i].flag, cases[i].text, &c, err, sizeof err),
                     LISA_INVALID, "%s %s", cases[i].flag, cases[i].text);
        cr_assert(strstr(err, cases[i].msg) != NULL, "%s", err);
    }
    /* Edges are inclusive. */
    s_cfg_t c;
    char err[256];
    cr_assert_eq(s_try("--lease", "1h", &c, err, sizeof err), LISA_OK);
    lisa_config_free(s_table, S_N, &c);
    cr_assert_eq(s_try("--max-frame", "1GiB", &c, err, sizeof err), LISA_OK);
    lisa_config_free(s_table, S_N, &c);
    /* String bounds are on length. */
    const char *lng[] = {"svc.name=ninechars", NULL};
    cr_assert_eq(s_load(&c, NULL, err, sizeof err, lng), LISA_INVALID);
    cr_assert(strstr(err, "length above the maximum 8"), "%s", err);
    cr_assert(strstr(err, "argument svc.name: svc.name: 'ninechars'"), "%s",
              err);
    const char *empty[] = {"svc.name=", NULL};
    cr_assert_eq(s_load(&c, NULL, err, sizeof err, empty), LISA_INVALID);
    cr_assert(strstr(err, "length below the minimum 1"), "%s", err);
}

Test(lisa_config, environment_errors_name_the_variable)
{
    setenv("LISA_T_LEASE", "forever", 1);
    s_cfg_t c;
    char err[256];
    cr_assert_eq(s_load(&c, NULL, err, sizeof err, NULL), LISA_INVALID);
    cr_assert(strstr(err, "env LISA_T_LEASE: svc.lease: 'forever' is not"),
              "%s", err);
    /* A flag does not rescue a bad environment: every source is checked. */
    const char *args[] = {"--lease", "1s", NULL};
    cr_assert_eq(s_load(&c, NULL, err, sizeof err, args), LISA_INVALID);
}

Test(lisa_config, secret_values_never_appear_in_errors)
{
    static const lisa_config_entry_t t[] = {{.name = "k",
                                             .env = "LISA_T_K",
                                             .type = LISA_CFG_STRING,
                                             .flags = LISA_CFG_SECRET,
                                             .max = "4",
                                             .offset = 0}};
    char *val = NULL;
    char err[256];
    setenv("LISA_T_K", "hunter2-long", 1);
    cr_assert_eq(lisa_config_load(t, 1, &val, 0, NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert_null(strstr(err, "hunter2"), "%s", err);
    cr_assert(strstr(err, "***"), "%s", err);
    /* Nor in the recorded source of a positional override. */
    unsetenv("LISA_T_K");
    char *argv[] = {"x", "k=abc", NULL};
    lisa_config_source_t src[1];
    lisa_config_opts_t o = {.sources = src};
    cr_assert_eq(lisa_config_load_ex(t, 1, &val, 2, argv, &o, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_str_eq(src[0].where, "argument k");
    lisa_config_free(t, 1, &val);
}

Test(lisa_config, unknown_and_malformed_arguments)
{
    static const struct {
        const char *a, *b, *msg;
    } cases[] = {
        {"--nope", NULL, "flag --nope: unknown flag '--nope' (see --help)"},
        {"--nope=3", NULL, "flag --nope: unknown flag '--nope'"},
        {"--worker", "3", "unknown flag '--worker' (did you mean --workers)"},
        {"svc.zzzzz=3", NULL, "unknown setting 'svc.zzzzz' (see --help)"},
        {"svc.lesae=3", NULL, "'svc.lesae' (did you mean svc.lease)"},
        {"stray", NULL, "argument stray: unexpected"},
        {"--workers", NULL, "flag --workers: svc.workers: missing value"},
        {"--config", NULL, "flag --config: missing value"},
        {"--no-workers", NULL, "unknown flag"},
        {"--verbose", "false", "argument false: unexpected"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[] = {cases[i].a, cases[i].b, NULL};
        s_cfg_t c;
        char err[256] = "";
        cr_assert_eq(s_load(&c, NULL, err, sizeof err, args), LISA_INVALID,
                     "%s", cases[i].a);
        cr_assert(strstr(err, cases[i].msg) != NULL, "%s", err);
    }
}

Test(lisa_config, positional_args_can_be_collected)
{
    char *argv[] = {"lisa",         "submit", "svc.workers=2", "a.json", "--",
                    "--not-a-flag", NULL};
    char *rest[4];
    size_t nrest = 99;
    lisa_config_opts_t o = {.rest = rest, .rest_max = 4, .rest_len = &nrest};
    s_cfg_t c = {0};
    char err[256];
    cr_assert_eq(
        lisa_config_load_ex(s_table, S_N, &c, 6, argv, &o, err, sizeof err),
        LISA_OK, "%s", err);
    cr_assert_eq(nrest, 3);
    cr_assert_str_eq(rest[0], "submit");
    cr_assert_str_eq(rest[1], "a.json");
    cr_assert_str_eq(rest[2], "--not-a-flag");
    cr_assert_eq(c.workers, 2);
    lisa_config_free(s_table, S_N, &c);
}

Test(lisa_config, file_errors_have_file_and_line)
{
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"svc.workers = 2\njust words\n", ":2: expected 'name = value'"},
        {"\n\n# c\nsvc.bogus = 1\n", ":4: unknown setting 'svc.bogus'"},
        {"svc.Workers = 1\n", ":1: unknown setting 'svc.Workers' (did you "
                              "mean svc.workers)"},
        {"svc.workers = 2\nsvc.lease = soon\n",
         ":2: svc.lease: 'soon' is not a duration"},
        {"svc.workers = 99\n", ":1: svc.workers: '99' is above the maximum"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256], err[512] = "";
        s_write_tmp(path, sizeof path, cases[i].text);
        const char *args[] = {"--config", path, NULL};
        s_cfg_t c;
        cr_assert_eq(s_load(&c, NULL, err, sizeof err, args), LISA_INVALID);
        cr_assert(strstr(err, cases[i].msg) != NULL, "%s", err);
        cr_assert(strncmp(err, "file ", 5) == 0 && strstr(err, path), "%s",
                  err);
        unlink(path);
    }
    s_cfg_t c;
    char err[512];
    const char *missing[] = {"--config", "/nonexistent/lisa.conf", NULL};
    cr_assert_eq(s_load(&c, NULL, err, sizeof err, missing), LISA_ERR);
    cr_assert(strstr(err, "/nonexistent/lisa.conf: cannot open"), "%s", err);
}

Test(lisa_config, file_text_bounds)
{
    s_cfg_t c;
    char err[256];
    cr_assert_eq(s_load(&c, NULL, err, sizeof err, NULL), LISA_OK);
    cr_assert_eq(lisa_config_load_text(s_table, S_N, &c, "svc.name=a\0b", 12,
                                       "t", NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "NUL"), "%s", err);
    size_t big = LISA_CONFIG_MAX_LINE + 20;
    char *line = lisa_malloc(big + 1);
    memset(line, 'x', big);
    memcpy(line, "svc.endpoint=", 13);
    line[big] = 0;
    cr_assert_eq(lisa_config_load_text(s_table, S_N, &c, line, big, "t", NULL,
                                       err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "file t:1: line longer than"), "%s", err);
    lisa_free(&line);
    /* Text without a trailing newline and with CRLF works. */
    const char *ok = "svc.workers = 5\r\nsvc.verbose = yes";
    cr_assert_eq(lisa_config_load_text(s_table, S_N, &c, ok, strlen(ok), "t",
                                       NULL, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_eq(c.workers, 5);
    cr_assert(c.verbose);
    lisa_config_free(s_table, S_N, &c);
}

Test(lisa_config, required_entries)
{
    static const lisa_config_entry_t t[] = {{.name = "a.key",
                                             .env = "LISA_T_REQ",
                                             .flag = "--key",
                                             .type = LISA_CFG_STRING,
                                             .flags = LISA_CFG_REQUIRED,
                                             .offset = 0}};
    char *val = NULL;
    char err[256];
    char *argv[] = {"x", "--key", "v", NULL};
    cr_assert_eq(lisa_config_load(t, 1, &val, 1, argv, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "a.key: required; set --key or LISA_T_REQ"), "%s",
              err);
    cr_assert_eq(lisa_config_load(t, 1, &val, 3, argv, err, sizeof err),
                 LISA_OK);
    cr_assert_str_eq(val, "v");
    lisa_config_free(t, 1, &val);
    setenv("LISA_T_REQ", "from-env", 1);
    cr_assert_eq(lisa_config_load(t, 1, &val, 1, argv, err, sizeof err),
                 LISA_OK);
    cr_assert_str_eq(val, "from-env");
    lisa_config_free(t, 1, &val);
}

Test(lisa_config, bad_tables_are_refused)
{
    static const lisa_config_entry_t dup[] = {
        {.name = "a", .flag = "--a", .type = LISA_CFG_INT64, .offset = 0},
        {.name = "b", .flag = "--a", .type = LISA_CFG_INT64, .offset = 8}};
    static const lisa_config_entry_t badflag[] = {
        {.name = "a", .flag = "-a", .type = LISA_CFG_INT64, .offset = 0}};
    static const lisa_config_entry_t baddef[] = {
        {.name = "a", .def = "x", .type = LISA_CFG_INT64, .offset = 0}};
    static const lisa_config_entry_t badmax[] = {
        {.name = "a", .max = "1x", .type = LISA_CFG_INT64, .offset = 0}};
    static const lisa_config_entry_t reserved[] = {
        {.name = "a", .flag = "--help", .type = LISA_CFG_BOOL, .offset = 0}};
    static const lisa_config_entry_t badname[] = {
        {.name = "a b", .type = LISA_CFG_INT64, .offset = 0}};
    static const lisa_config_entry_t eqflag[] = {
        {.name = "a", .flag = "--a=b", .type = LISA_CFG_INT64, .offset = 0}};
    static const lisa_config_entry_t bareflag[] = {
        {.name = "a", .flag = "--", .type = LISA_CFG_INT64, .offset = 0}};
    int64_t v[2];
    char err[256];
    cr_assert_eq(lisa_config_load(badname, 1, v, 0, NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert_eq(lisa_config_load(eqflag, 1, v, 0, NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert_eq(lisa_config_load(bareflag, 1, v, 0, NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert_eq(lisa_config_load(dup, 2, v, 0, NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "b clashes with a"), "%s", err);
    cr_assert_eq(lisa_config_load(badflag, 1, v, 0, NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert_eq(lisa_config_load(baddef, 1, v, 0, NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "default: a: 'x' is not an integer"), "%s", err);
    cr_assert_eq(lisa_config_load(badmax, 1, v, 0, NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert_eq(lisa_config_load(reserved, 1, v, 0, NULL, err, sizeof err),
                 LISA_INVALID);
}

Test(lisa_config, help_is_generated_from_the_table)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    char *argv[] = {"/usr/bin/lisa-test", "--workers", "bogus", "--help", NULL};
    lisa_config_opts_t o = {.help_out = out, .about = "A test service."};
    s_cfg_t c = {0};
    char err[256];
    cr_assert_eq(
        lisa_config_load_ex(s_table, S_N, &c, 4, argv, &o, err, sizeof err),
        LISA_AGAIN);
    fclose(out);
    cr_assert(strstr(buf, "usage: lisa-test [--config FILE]"), "%s", buf);
    cr_assert(strstr(buf, "A test service."));
    cr_assert(strstr(buf, "--endpoint STR"));
    cr_assert(strstr(buf, "env LISA_T_ENDPOINT"));
    cr_assert(strstr(buf, "default tcp://127.0.0.1:7100"));
    cr_assert(strstr(buf, "--lease DURATION"));
    cr_assert(strstr(buf, "default 30s, 100ms .. 1h"), "%s", buf);
    cr_assert(strstr(buf, "--verbose[=BOOL]"));
    cr_assert(strstr(buf, "<= 1GiB"));
    cr_assert(strstr(buf, "length 1 .. 8"));
    cr_assert(strstr(buf, "svc.name=STR"));
    for (size_t i = 0; i < S_N; i++)
        cr_assert(strstr(buf, s_table[i].help), "%s", s_table[i].help);
    cr_assert_null(c.endpoint); /* nothing was loaded */
    free(buf);
}

Test(lisa_config, dump_logs_one_line_per_entry_with_source)
{
    setenv("LISA_T_SECRET", "hunter2", 1);
    const char *args[] = {"--workers", "7", NULL};
    s_cfg_t c;
    char err[256];
    lisa_config_source_t src[S_N];
    cr_assert_eq(s_load(&c, src, err, sizeof err, args), LISA_OK);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    lisa_log_set_fd(p[1]);
    lisa_config_dump(s_table, S_N, &c, src);
    lisa_log_set_fd(-1);
    close(p[1]);
    char buf[8192];
    ssize_t n, total = 0;
    while ((n = read(p[0], buf + total, sizeof buf - 1 - (size_t) total)) > 0)
        total += n;
    buf[total] = 0;
    close(p[0]);
    size_t lines = 0;
    for (char *q = buf; *q; q++)
        lines += *q == '\n';
    cr_assert_eq(lines, S_N, "%s", buf);
    cr_assert(strstr(buf, "config svc.workers = 7 (flag --workers)"), "%s",
              buf);
    cr_assert(strstr(buf, "config svc.secret = *** (env LISA_T_SECRET)"), "%s",
              buf);
    cr_assert_null(strstr(buf, "hunter2"));
    cr_assert(strstr(buf, "config svc.lease = 30s (default)"), "%s", buf);
    cr_assert(strstr(buf, "config svc.max_frame = 16MiB (default)"), "%s", buf);
    lisa_config_free(s_table, S_N, &c);
}

Test(lisa_config, format_round_trips_through_set)
{
    const char *args[] = {"--offset=-42",
                          "--workers=9",
                          "--temperature=0.1",
                          "--verbose",
                          "--lease=1500",
                          "--max-frame=3MiB",
                          NULL};
    s_cfg_t a, b;
    char err[256], buf[128];
    cr_assert_eq(s_load(&a, NULL, err, sizeof err, args), LISA_OK, "%s", err);
    cr_assert_eq(s_load(&b, NULL, err, sizeof err, NULL), LISA_OK);
    for (size_t i = 0; i < S_N; i++) {
        lisa_config_format(&s_table[i], &a, buf, sizeof buf);
        if (s_table[i].type == LISA_CFG_STRING && !*buf)
            continue;
        cr_assert_eq(lisa_config_set(s_table, S_N, &b, s_table[i].name, buf,
                                     err, sizeof err),
                     LISA_OK, "%s: %s", buf, err);
    }
    cr_assert_eq(a.offset, b.offset);
    cr_assert_eq(a.workers, b.workers);
    cr_assert_float_eq(a.temperature, b.temperature, 0);
    cr_assert_eq(a.verbose, b.verbose);
    cr_assert_eq(a.lease_ms, b.lease_ms);
    cr_assert_eq(a.max_frame, b.max_frame);
    cr_assert_str_eq(a.endpoint, b.endpoint);
    cr_assert_eq(
        lisa_config_set(s_table, S_N, &b, "svc.none", "1", err, sizeof err),
        LISA_NOTFOUND);
    cr_assert_eq(
        lisa_config_set(s_table, S_N, &b, "svc.workers", "0", err, sizeof err),
        LISA_INVALID);
    lisa_config_free(s_table, S_N, &a);
    lisa_config_free(s_table, S_N, &b);
    lisa_config_free(s_table, S_N, &b); /* safe twice */
}

Test(lisa_config, markdown_reference)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    cr_assert_eq(lisa_config_markdown(out, "svc", s_table, S_N), LISA_OK);
    fclose(out);
    cr_assert(strstr(buf, "### svc\n"));
    cr_assert(strstr(buf, "| Name | Flag | Environment | Type | Default |"));
    cr_assert(strstr(buf, "| `svc.lease` | `--lease` | `LISA_T_LEASE` | "
                          "duration | `30s` | 100ms .. 1h | lease of a "
                          "claim |"),
              "%s", buf);
    cr_assert(strstr(buf, "largest frame \\| bytes"), "%s", buf);
    cr_assert(strstr(buf, "(secret)"));
    size_t rows = 0;
    for (char *q = buf; (q = strstr(q, "\n| `")); q++)
        rows++;
    cr_assert_eq(rows, S_N, "%s", buf);
    free(buf);
}

Test(lisa_config, parse_int_is_whole_and_bounded)
{
    int64_t v = 7;
    cr_assert_eq(lisa_config_parse_int("42", 0, 100, &v), LISA_OK);
    cr_assert_eq(v, 42);
    cr_assert_eq(lisa_config_parse_int("-3", -5, 5, &v), LISA_OK);
    cr_assert_eq(v, -3);
    const char *bad[] = {
        "",  " 1", "1 ", "1x", "x", "0x10", "101", "-1", "99999999999999999999",
        "+", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        cr_assert_eq(lisa_config_parse_int(bad[i], 0, 100, &v), LISA_INVALID,
                     "'%s'", bad[i]);
        cr_assert_eq(v, 7, "'%s' changed the output", bad[i]);
    }
    cr_assert_eq(lisa_config_parse_int(NULL, 0, 1, &v), LISA_INVALID);
}
