/*
 * lisa_log: formats one line into a stack buffer and writes it with a
 * single write(2), so lines from several threads or processes sharing a
 * stderr never interleave.
 */
#include "lisa/lisa_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static char s_service[32] = "lisa";
static atomic_int s_level = LISA_LOG_INFO;
static atomic_int s_fd = -1;
static atomic_int s_level_from_env = 0;

static const char *const s_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void
lisa_log_set_service(const char *name)
{
    if (!name)
        return;
    snprintf(s_service, sizeof s_service, "%s", name);
}

void
lisa_log_set_level(lisa_log_level_t level)
{
    atomic_store(&s_level, (int) level);
    atomic_store(&s_level_from_env, 1);
}

static void
s_init_from_env(void)
{
    if (atomic_exchange(&s_level_from_env, 1))
        return;
    const char *env = getenv("LISA_LOG_LEVEL");
    lisa_log_level_t lvl;
    if (env && lisa_log_level_parse(env, &lvl) == LISA_OK)
        atomic_store(&s_level, (int) lvl);
}

lisa_log_level_t
lisa_log_level(void)
{
    s_init_from_env();
    return (lisa_log_level_t) atomic_load(&s_level);
}

lisa_rc_t
lisa_log_level_parse(const char *s, lisa_log_level_t *out)
{
    static const char *const lower[] = {"error", "warn", "info", "debug"};
    if (!s)
        return LISA_INVALID;
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, lower[i]) == 0) {
            *out = (lisa_log_level_t) i;
            return LISA_OK;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *out = LISA_LOG_WARN;
        return LISA_OK;
    }
    return LISA_INVALID;
}

bool
lisa_log_enabled(lisa_log_level_t level)
{
    return (int) level <= (int) lisa_log_level();
}

void
lisa_log_set_fd(int fd)
{
    atomic_store(&s_fd, fd);
}

void
lisa_log_write(lisa_log_level_t level, const char *ctx, const char *fmt, ...)
{
    if (!lisa_log_enabled(level))
        return;
    char line[2048];
    size_t n = 0;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n += strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    int w =
        snprintf(line + n, sizeof line - n, ".%03ldZ %s %s ",
                 ts.tv_nsec / 1000000L, s_service, s_names[(int) level & 3]);
    if (w > 0)
        n += (size_t) w;
    if (ctx && *ctx) {
        w = snprintf(line + n, sizeof line - n, "[%s] ", ctx);
        if (w > 0)
            n = n + (size_t) w < sizeof line ? n + (size_t) w : sizeof line - 1;
    }
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Escape control characters so one event stays one line. */
    for (const char *p = msg; *p && n + 4 < sizeof line; p++) {
        unsigned char c = (unsigned char) *p;
        if (c == '\n') {
            line[n++] = '\\';
            line[n++] = 'n';
        } else if (c < 0x20 || c == 0x7f) {
            line[n++] = '?';
        } else {
            line[n++] = (char) c;
        }
    }
    line[n++] = '\n';
    int fd = atomic_load(&s_fd);
    ssize_t r = write(fd >= 0 ? fd : STDERR_FILENO, line, n);
    (void) r;
}
