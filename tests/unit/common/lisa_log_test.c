/*
 * lisa_log tests: one line per event on a pipe, with time, service, level
 * and context; newlines and control characters escaped; level filtering
 * (also from LISA_LOG_LEVEL); long messages truncated to one line.
 */
#include "lisa/lisa_log.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int s_pipe[2];

static void
s_open(void)
{
    cr_assert_eq(pipe(s_pipe), 0);
    lisa_log_set_fd(s_pipe[1]);
}

/* Closes the write end and reads everything that was logged. */
static char *
s_collect(void)
{
    static char buf[65536];
    size_t n = 0;
    ssize_t r;
    lisa_log_set_fd(-1);
    close(s_pipe[1]);
    while (n + 1 < sizeof buf &&
           (r = read(s_pipe[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t) r;
    buf[n] = 0;
    close(s_pipe[0]);
    return buf;
}

static size_t
s_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

Test(lisa_log, usage_example)
{
    s_open();
    lisa_log_set_service("broker");
    lisa_log_set_level(LISA_LOG_INFO);
    lisa_log_write(LISA_LOG_INFO, "req=42 rollout=r-1", "claimed %d", 3);
    char *out = s_collect();
    cr_assert_eq(s_lines(out), 1, "%s", out);
    cr_assert(strstr(out, " broker INFO [req=42 rollout=r-1] claimed 3\n"),
              "%s", out);
    /* 2026-11-30T10:00:00.123Z */
    cr_assert_eq(out[4], '-');
    cr_assert_eq(out[10], 'T');
    cr_assert_eq(out[19], '.');
    cr_assert_eq(out[23], 'Z');
}

Test(lisa_log, one_line_per_event_with_escaping)
{
    s_open();
    lisa_log_set_level(LISA_LOG_DEBUG);
    lisa_log_info("first\nsecond");
    lisa_log_warn("tab\there\rcr\x01");
    lisa_log_error("plain");
    lisa_log_debug("dbg");
    char *out = s_collect();
    cr_assert_eq(s_lines(out), 4, "%s", out);
    cr_assert(strstr(out, "INFO first\\nsecond\n"), "%s", out);
    cr_assert(strstr(out, "WARN tab?here?cr?\n"), "%s", out);
    cr_assert(strstr(out, "ERROR plain\n"), "%s", out);
    cr_assert(strstr(out, "DEBUG dbg\n"), "%s", out);
}

Test(lisa_log, level_filtering)
{
    s_open();
    lisa_log_set_level(LISA_LOG_WARN);
    cr_assert(lisa_log_enabled(LISA_LOG_ERROR));
    cr_assert(lisa_log_enabled(LISA_LOG_WARN));
    cr_assert_not(lisa_log_enabled(LISA_LOG_INFO));
    lisa_log_debug("no");
    lisa_log_info("no");
    lisa_log_warn("yes-warn");
    lisa_log_error("yes-error");
    char *out = s_collect();
    cr_assert_eq(s_lines(out), 2, "%s", out);
    cr_assert_null(strstr(out, "no"));
    cr_assert_eq(lisa_log_level(), LISA_LOG_WARN);
}

Test(lisa_log, level_from_environment)
{
    setenv("LISA_LOG_LEVEL", "error", 1);
    s_open();
    lisa_log_warn("hidden");
    lisa_log_error("shown");
    char *out = s_collect();
    cr_assert_eq(s_lines(out), 1, "%s", out);
    cr_assert(strstr(out, "shown"));
    cr_assert_eq(lisa_log_level(), LISA_LOG_ERROR);
}

Test(lisa_log, level_parse)
{
    lisa_log_level_t l;
    cr_assert_eq(lisa_log_level_parse("DEBUG", &l), LISA_OK);
    cr_assert_eq(l, LISA_LOG_DEBUG);
    cr_assert_eq(lisa_log_level_parse("warning", &l), LISA_OK);
    cr_assert_eq(l, LISA_LOG_WARN);
    cr_assert_eq(lisa_log_level_parse("Info", &l), LISA_OK);
    cr_assert_eq(l, LISA_LOG_INFO);
    cr_assert_eq(lisa_log_level_parse("loud", &l), LISA_INVALID);
    cr_assert_eq(lisa_log_level_parse(NULL, &l), LISA_INVALID);
}

Test(lisa_log, long_messages_stay_one_line)
{
    static char big[8192];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    s_open();
    lisa_log_set_service("a-service-name-longer-than-thirty-one-bytes");
    lisa_log_info("%s", big);
    lisa_log_info("%s", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n");
    char *out = s_collect();
    cr_assert_eq(s_lines(out), 2, "%s", out);
    cr_assert(strstr(out, " a-service-name-longer-than-thir INFO "), "%s", out);
    /* The long line was cut inside the message, not after the newline. */
    size_t first = (size_t) (strchr(out, '\n') - out);
    cr_assert_gt(first, 1000);
    cr_assert_lt(first, 2048);
    cr_assert(strstr(out, "INFO \\n\\n\\n"), "%s", out);
}
