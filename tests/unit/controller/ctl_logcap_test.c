/*
 * ctl_logcap tests: output under the cap is kept as written; output over
 * it keeps the head, a note with the dropped count and the last bytes, so
 * the file's last line is the writer's; removal of a sandbox that still
 * writes closes the log at once. The first test is the usage example.
 */
#include "ctl_logcap.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char s_path[64];

static int
s_logfile(void)
{
    snprintf(s_path, sizeof s_path, "/tmp/ctl_logcap_XXXXXX");
    int fd = mkstemp(s_path);
    cr_assert_geq(fd, 0);
    return fd;
}

static char *
s_slurp(size_t *n)
{
    FILE *f = fopen(s_path, "rb");
    cr_assert_not_null(f);
    char *buf = lisa_malloc(1 << 20);
    *n = fread(buf, 1, (1 << 20) - 1, f);
    buf[*n] = '\0';
    fclose(f);
    unlink(s_path);
    return buf;
}

static void
s_write(int fd, const char *s)
{
    cr_assert_eq(write(fd, s, strlen(s)), (ssize_t) strlen(s));
}

Test(ctl_logcap, usage_small_output_is_kept_whole)
{
    ctl_logcap_t *c = ctl_logcap_new(64 * 1024);
    cr_assert_not_null(c);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(ctl_logcap_add(c, "sb-1", p[0], s_logfile()), LISA_OK);
    s_write(p[1], "agent: started\nagent: exit 0 (ok)\n");
    close(p[1]); /* the sandbox ended */
    ctl_logcap_finish(c, "sb-1", false);
    size_t n = 0;
    char *got = s_slurp(&n);
    cr_assert_str_eq(got, "agent: started\nagent: exit 0 (ok)\n");
    lisa_free(&got);
    ctl_logcap_destroy(&c);
    cr_assert_null(c);
    ctl_logcap_destroy(&c);
}

Test(ctl_logcap, flood_keeps_head_note_and_last_line)
{
    ctl_logcap_t *c = ctl_logcap_new(16 * 1024);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(ctl_logcap_add(c, "sb-2", p[0], s_logfile()), LISA_OK);
    int p2[2];
    cr_assert_eq(pipe(p2), 0);
    cr_assert_eq(ctl_logcap_add(c, "sb-2", p2[0], dup(1)), LISA_CONFLICT);
    close(p2[1]);
    s_write(p[1], "FIRST LINE\n");
    char line[128];
    size_t sent = 11;
    for (int i = 0; i < 20000; i++) { /* ~1.3 MB through a 64 KiB pipe */
        int m = snprintf(line, sizeof line,
                         "noise line %06d xxxxxxxxxxxxxxxx"
                         "xxxxxxxxxxxxxxxxxxxxxx\n",
                         i);
        s_write(p[1], line);
        sent += (size_t) m;
    }
    s_write(p[1], "agent: exit 3 (the real last line)\n");
    sent += 35;
    close(p[1]);
    ctl_logcap_finish(c, "sb-2", false);
    size_t n = 0;
    char *got = s_slurp(&n);
    cr_assert_lt(n, 16 * 1024 + 256, "%zu bytes kept", n);
    cr_assert(strncmp(got, "FIRST LINE\n", 11) == 0);
    char *note = strstr(got, "bytes of this sandbox's output dropped");
    cr_assert_not_null(note);
    unsigned long long dropped = 0;
    char *start = note;
    while (start > got && start[-1] != '[')
        start--;
    cr_assert_eq(sscanf(start, "lisa-controller: %llu", &dropped), 1);
    cr_assert_eq(dropped + (unsigned long long) (16 * 1024), sent,
                 "dropped %llu of %zu", dropped, sent);
    size_t tail_len = strlen("agent: exit 3 (the real last line)\n");
    cr_assert_str_eq(got + n - tail_len,
                     "agent: exit 3 (the real last line)\n");
    lisa_free(&got);
    ctl_logcap_destroy(&c);
}

Test(ctl_logcap, forced_finish_with_a_live_writer)
{
    ctl_logcap_t *c = ctl_logcap_new(8 * 1024);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(ctl_logcap_add(c, "sb-3", p[0], s_logfile()), LISA_OK);
    s_write(p[1], "still running\n");
    ctl_logcap_finish(c, "sb-3", false); /* writer alive: stays open */
    cr_assert_eq(ctl_logcap_dropped(c, "sb-3"), 0);
    ctl_logcap_finish(c, "sb-3", true); /* removal */
    signal(SIGPIPE, SIG_IGN);
    cr_assert_eq(ctl_logcap_dropped(c, "sb-3"), 0); /* unknown now */
    cr_assert_eq(write(p[1], "x", 1), -1);          /* read end closed: EPIPE */
    close(p[1]);
    size_t n = 0;
    char *got = s_slurp(&n);
    cr_assert_str_eq(got, "still running\n");
    lisa_free(&got);
    ctl_logcap_destroy(&c);
}

static void
s_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* CPU time of this process, in ms. */
static double
s_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

/* A sandbox being started holds a copy of every pipe's read end from its
 * clone to its exec: a stream that ends meanwhile must leave the epoll
 * set, or its hang-up wakes the pump over and over while the copy lives
 * (here for half a second: an idle pump takes next to no CPU). */
Test(ctl_logcap, an_ended_stream_with_a_copy_elsewhere_stays_quiet)
{
    ctl_logcap_t *c = ctl_logcap_new(8 * 1024);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    int copy = dup(p[0]);
    cr_assert_geq(copy, 0);
    cr_assert_eq(ctl_logcap_add(c, "sb-4", p[0], s_logfile()), LISA_OK);
    s_write(p[1], "done\n");
    close(p[1]); /* the pump reads to the end and closes the stream */
    size_t n = 0;
    for (int i = 0; i < 200 && n < 5; i++) {
        struct stat st;
        n = stat(s_path, &st) == 0 ? (size_t) st.st_size : 0;
        s_sleep_ms(5);
    }
    cr_assert_eq(n, 5);
    s_sleep_ms(50);
    double t0 = s_cpu_ms();
    s_sleep_ms(500);
    double used = s_cpu_ms() - t0;
    cr_expect_lt(used, 25.0, "the pump took %.1f ms of CPU while idle", used);
    close(copy);
    char *got = s_slurp(&n);
    cr_assert_str_eq(got, "done\n");
    lisa_free(&got);
    ctl_logcap_destroy(&c);
}
