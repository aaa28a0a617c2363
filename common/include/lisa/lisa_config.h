/*
 * lisa_config: declarative configuration tables.
 *
 * A service describes its whole configuration as one static table: for each
 * setting its dotted name, environment variable, command-line flag, type,
 * default (as text), help, and where it lives in the service's config
 * struct. The one table drives parsing, validation, `--help`, the start-up
 * dump of the effective values and the Markdown configuration reference, so
 * those can never drift apart.
 *
 *   typedef struct { char *rpc; uint64_t max_frame; uint64_t lease_ms; } cfg_t;
 *   static const lisa_config_entry_t s_table[] = {
 *       {.name = "broker.rpc_endpoint", .env = "LISA_BROKER_RPC",
 *        .flag = "--rpc", .type = LISA_CFG_STRING,
 *        .def = "tcp://127.0.0.1:7100", .help = "ROUTER endpoint",
 *        .offset = offsetof(cfg_t, rpc)},
 *       {.name = "broker.lease", .env = "LISA_BROKER_LEASE", .flag = "--lease",
 *        .type = LISA_CFG_DURATION, .def = "30s", .min = "100ms",
 *        .help = "lease of a claimed rollout", .offset = offsetof(cfg_t,
 * lease_ms)},
 *   };
 *   lisa_config_source_t src[2];
 *   lisa_config_opts_t opts = {.about = "lisa-broker: ...", .sources = src};
 *   rc = lisa_config_load_ex(s_table, 2, &cfg, argc, argv, &opts, err,
 *                            sizeof err);
 *   // LISA_AGAIN: --help was printed, exit 0; LISA_INVALID: err says why.
 *   lisa_config_dump(s_table, 2, &cfg, src);  // one log line per entry
 *   ...
 *   lisa_config_free(s_table, 2, &cfg);
 *
 * Precedence, lowest first: defaults < file (`--config FILE`) < environment
 * < command line (`--flag value`, `--flag=value` and positional
 * `name=value`, applied left to right). Config files hold `name = value`
 * lines; a line whose first non-blank character is `#` is a comment; a
 * value may be wrapped in double quotes to keep surrounding blanks.
 *
 * Field types in the config struct: STRING char * (owned, freed by
 * lisa_config_free; NULL when unset), INT64 int64_t, UINT64 uint64_t,
 * DOUBLE double, BOOL bool, DURATION uint64_t milliseconds ("500ms", "2s",
 * "1m", "1h", "1d"; a bare number is ms), SIZE uint64_t bytes ("16MiB",
 * "4KiB", "1GB", "512"; K/M/G/T alone are binary).
 */
#ifndef LISA_CONFIG_H
#define LISA_CONFIG_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Bounds on input. */
#define LISA_CONFIG_MAX_FILE   (1u << 20) /* bytes of one config file */
#define LISA_CONFIG_MAX_LINE   8192u      /* bytes of one file line */
#define LISA_CONFIG_MAX_STRING 8192u      /* bytes of one string value */

typedef enum {
    LISA_CFG_STRING = 0,
    LISA_CFG_INT64,
    LISA_CFG_UINT64,
    LISA_CFG_DOUBLE,
    LISA_CFG_BOOL,
    LISA_CFG_DURATION,
    LISA_CFG_SIZE
} lisa_config_type_t;

/* Entry flags. */
#define LISA_CFG_SECRET   0x1u /* printed as "***" by dump */
#define LISA_CFG_REQUIRED 0x2u /* must be set (non-empty) by some source */

/* One setting. `env`, `flag`, `def`, `min`, `max` may be NULL. Names and
 * flags have no '=', blanks or control characters; a BOOL flag "--x" also
 * accepts "--no-x". `min`/`max`
 * are written in the entry's own syntax ("100ms", "1MiB"); for STRING they
 * bound the length in bytes. */
typedef struct {
    const char *name; /* "broker.rpc_endpoint": file key and name=value */
    const char *env;  /* "LISA_BROKER_RPC" */
    const char *flag; /* "--rpc" */
    lisa_config_type_t type;
    const char *def;  /* default value as text; NULL: NULL / 0 / false */
    const char *help; /* one line */
    size_t offset;    /* offsetof(service_cfg_t, field) */
    unsigned flags;   /* LISA_CFG_SECRET | LISA_CFG_REQUIRED */
    const char *min;  /* inclusive lower bound, or NULL */
    const char *max;  /* inclusive upper bound, or NULL */
} lisa_config_entry_t;

/* Where an effective value came from. */
typedef enum {
    LISA_CFG_FROM_DEFAULT = 0,
    LISA_CFG_FROM_FILE,
    LISA_CFG_FROM_ENV,
    LISA_CFG_FROM_FLAG,
    LISA_CFG_FROM_ARG /* positional name=value */
} lisa_config_origin_t;

typedef struct {
    lisa_config_origin_t origin;
    char where[160]; /* "default", "file f.conf:3", "env LISA_X", "flag --x",
                        "argument a.b" (never the value) */
} lisa_config_source_t;

/* Optional knobs of lisa_config_load_ex; every field may be 0/NULL. */
typedef struct {
    const char *prog;              /* name in --help; NULL: argv[0] */
    const char *about;             /* paragraph printed under usage */
    FILE *help_out;                /* where --help goes; NULL: stdout */
    lisa_config_source_t *sources; /* out: n sources, one per entry */
    char **rest;      /* out: positional args without '=' (borrowed argv) */
    size_t rest_max;  /* capacity of rest; 0: such args are errors */
    size_t *rest_len; /* out: how many were stored in rest */
} lisa_config_opts_t;

/* Fills *cfg (zeroed, or loaded before: its strings are freed) from
 * defaults, `--config FILE`, the environment and argv (argv may be NULL
 * when argc is 0). Returns LISA_OK; LISA_AGAIN after printing
 * --help (caller exits 0); LISA_INVALID (err names the entry and the
 * source; cfg strings already freed); LISA_ERR when the file can't be read.
 */
lisa_rc_t lisa_config_load(const lisa_config_entry_t *table, size_t n,
                           void *cfg, int argc, char **argv, char *err,
                           size_t errlen) LISA_NODISCARD;

/* lisa_config_load with options (opts may be NULL). */
lisa_rc_t lisa_config_load_ex(const lisa_config_entry_t *table, size_t n,
                              void *cfg, int argc, char **argv,
                              const lisa_config_opts_t *opts, char *err,
                              size_t errlen) LISA_NODISCARD;

/* Applies config-file text (`name = value` lines; no defaults, no
 * environment) onto an already loaded cfg; `name` labels errors
 * ("file.conf:3"), `sources` (may be NULL) receives n origins. */
lisa_rc_t lisa_config_load_text(const lisa_config_entry_t *table, size_t n,
                                void *cfg, const char *text, size_t len,
                                const char *name, lisa_config_source_t *sources,
                                char *err, size_t errlen) LISA_NODISCARD;

/* Frees the STRING fields of cfg and sets them to NULL; safe twice. */
void lisa_config_free(const lisa_config_entry_t *table, size_t n, void *cfg);

/* A deep copy of cfg (`size` bytes) into dst: every field, with the STRING
 * fields of the table duplicated, so each copy is freed on its own. */
void lisa_config_copy(const lisa_config_entry_t *table, size_t n, void *dst,
                      const void *src, size_t size);

/* Sets entry `name` in cfg from text `value` (validated like any source).
 * LISA_NOTFOUND for an unknown name, LISA_INVALID for a bad value. */
lisa_rc_t lisa_config_set(const lisa_config_entry_t *table, size_t n, void *cfg,
                          const char *name, const char *value, char *err,
                          size_t errlen) LISA_NODISCARD;

/* Writes the effective value of table[i] as text into buf (secret entries
 * as-is: callers mask). Returns buf. */
const char *lisa_config_format(const lisa_config_entry_t *e, const void *cfg,
                               char *buf, size_t len);

/* Logs one INFO line per entry: name, value (secrets "***") and, when
 * sources is not NULL, where the value came from. */
void lisa_config_dump(const lisa_config_entry_t *table, size_t n,
                      const void *cfg, const lisa_config_source_t *sources);

/* Prints usage generated from the table (flags, env vars, defaults). */
void lisa_config_help(FILE *out, const char *prog, const char *about,
                      const lisa_config_entry_t *table, size_t n);

/* Writes the table as a Markdown reference section with heading `title`.
 * Returns LISA_OK or LISA_ERR on a write error. */
lisa_rc_t lisa_config_markdown(FILE *out, const char *title,
                               const lisa_config_entry_t *table,
                               size_t n) LISA_NODISCARD;

/* Parses a duration ("500ms", "2s", "1m", "1h", "1d", bare = ms) into ms. */
lisa_rc_t lisa_config_parse_duration(const char *s,
                                     uint64_t *ms) LISA_NODISCARD;

/* Parses a size ("16MiB", "4KiB", "1GB", "8K", bare = bytes) into bytes. */
lisa_rc_t lisa_config_parse_size(const char *s, uint64_t *bytes) LISA_NODISCARD;

/* Parses a whole decimal integer within [lo, hi] (no spaces, no suffix):
 * the checked replacement for atoi. LISA_INVALID otherwise (*out kept). */
lisa_rc_t lisa_config_parse_int(const char *s, int64_t lo, int64_t hi,
                                int64_t *out) LISA_NODISCARD;

/* Parses true/false/yes/no/on/off/1/0 (case-insensitive). */
lisa_rc_t lisa_config_parse_bool(const char *s, bool *out) LISA_NODISCARD;

/* Short name of a type ("string", "duration", ...). */
const char *lisa_config_type_str(lisa_config_type_t t);

#endif
