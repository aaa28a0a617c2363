/*
 * Fuzz target: the config-file parser and the command-line parser. The
 * first byte picks the mode: file text onto a table of every type, or the
 * rest split at newlines into argv. Parsing must never crash, leak or read
 * out of bounds, and a failed load must leave no string behind.
 */
#include "lisa/lisa_config.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    char *s;
    int64_t i;
    uint64_t u;
    double d;
    bool b;
    uint64_t ms;
    uint64_t bytes;
} s_cfg_t;

static const lisa_config_entry_t s_table[] = {
    {.name = "a.s",
     .flag = "--s",
     .type = LISA_CFG_STRING,
     .def = "x",
     .offset = offsetof(s_cfg_t, s),
     .max = "64"},
    {.name = "a.i",
     .flag = "--i",
     .type = LISA_CFG_INT64,
     .def = "0",
     .offset = offsetof(s_cfg_t, i),
     .min = "-5",
     .max = "5"},
    {.name = "a.u",
     .flag = "--u",
     .type = LISA_CFG_UINT64,
     .offset = offsetof(s_cfg_t, u)},
    {.name = "a.d",
     .flag = "--d",
     .type = LISA_CFG_DOUBLE,
     .def = "0.5",
     .offset = offsetof(s_cfg_t, d),
     .min = "0",
     .max = "1"},
    {.name = "a.b",
     .flag = "--b",
     .type = LISA_CFG_BOOL,
     .offset = offsetof(s_cfg_t, b)},
    {.name = "a.ms",
     .flag = "--ms",
     .type = LISA_CFG_DURATION,
     .def = "1s",
     .offset = offsetof(s_cfg_t, ms),
     .min = "1ms"},
    {.name = "a.bytes",
     .flag = "--bytes",
     .type = LISA_CFG_SIZE,
     .def = "1KiB",
     .offset = offsetof(s_cfg_t, bytes),
     .max = "1GiB"},
};

#define S_N (sizeof s_table / sizeof s_table[0])

static void
s_file(const uint8_t *data, size_t size)
{
    s_cfg_t c;
    char err[256];
    memset(&c, 0, sizeof c);
    if (lisa_config_load(s_table, S_N, &c, 0, NULL, err, sizeof err) != LISA_OK)
        abort();
    lisa_rc_t rc = lisa_config_load_text(s_table, S_N, &c, (const char *) data,
                                         size, "fuzz", NULL, err, sizeof err);
    if (rc == LISA_OK && c.s && strlen(c.s) > 64)
        abort();
    if (rc == LISA_OK && (c.i < -5 || c.i > 5 || c.d < 0 || c.d > 1))
        abort();
    lisa_config_free(s_table, S_N, &c);
}

static void
s_argv(const uint8_t *data, size_t size)
{
    char *buf = lisa_memdup(data, size);
    char *argv[64];
    if (strstr(buf, "--config")) { /* would open files named by the input */
        lisa_free(&buf);
        return;
    }
    int argc = 0;
    argv[argc++] = "fuzz";
    for (char *p = buf; argc < 63;) {
        argv[argc++] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = 0;
        p = nl + 1;
    }
    argv[argc] = NULL;
    s_cfg_t c;
    char err[256];
    memset(&c, 0, sizeof c);
    FILE *devnull = fopen("/dev/null", "w");
    lisa_config_opts_t o = {.help_out = devnull};
    lisa_rc_t rc =
        lisa_config_load_ex(s_table, S_N, &c, argc, argv, &o, err, sizeof err);
    if (rc == LISA_INVALID && c.s != NULL)
        abort();
    lisa_config_free(s_table, S_N, &c);
    if (devnull)
        fclose(devnull);
    lisa_free(&buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        lisa_log_set_level(LISA_LOG_ERROR);
        quiet = 1;
    }
    if (size < 1)
        return 0;
    if (data[0] & 1)
        s_argv(data + 1, size - 1);
    else
        s_file(data + 1, size - 1);
    return 0;
}
