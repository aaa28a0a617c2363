/*
 * agt_exec tests: fresh shell per call, bounded capture, timeouts and
 * cancellation kill the whole process group. The first test is the usage
 * example.
 */
#include "agt_exec.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char s_dir[64];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/agt_exec_XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void
s_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    cr_assert_eq(system(cmd), 0);
}

/* True when pid runs (a zombie counts as dead: it holds no resources). */
static int
s_alive(long pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

static agt_exec_opts_t
s_opts(unsigned timeout_ms)
{
    agt_exec_opts_t o = {.cwd = s_dir,
                         .timeout_ms = timeout_ms,
                         .capture_bytes = 64 * 1024,
                         .grace_ms = 200};
    return o;
}

TestSuite(agt_exec, .init = s_setup, .fini = s_teardown);

Test(agt_exec, usage)
{
    agt_exec_opts_t o = s_opts(10000);
    agt_exec_result_t r;
    cr_assert_eq(agt_exec_run("echo out; echo err >&2; pwd; exit 3", &o, &r),
                 LISA_OK);
    cr_assert_eq(r.exit_code, 3);
    cr_assert_not(r.timed_out);
    char want[128];
    snprintf(want, sizeof want, "out\n%s\n", s_dir);
    cr_assert_str_eq(r.out, want);
    cr_assert_str_eq(r.err, "err\n");
    agt_exec_result_clear(&r);
}

Test(agt_exec, shell_state_does_not_persist_files_do)
{
    agt_exec_opts_t o = s_opts(10000);
    agt_exec_result_t r;
    cr_assert_eq(agt_exec_run("echo x > f.txt; cd /; export FOO=1", &o, &r),
                 LISA_OK);
    agt_exec_result_clear(&r);
    cr_assert_eq(agt_exec_run("pwd; echo \"[$FOO]\"; cat f.txt", &o, &r),
                 LISA_OK);
    char want[128];
    snprintf(want, sizeof want, "%s\n[]\nx\n", s_dir);
    cr_assert_str_eq(r.out, want);
    agt_exec_result_clear(&r);
}

Test(agt_exec, stdin_is_empty)
{
    agt_exec_opts_t o = s_opts(5000);
    agt_exec_result_t r;
    cr_assert_eq(agt_exec_run("cat; echo done", &o, &r), LISA_OK);
    cr_assert_str_eq(r.out, "done\n");
    agt_exec_result_clear(&r);
}

Test(agt_exec, timeout_kills_the_process_group)
{
    agt_exec_opts_t o = s_opts(400);
    agt_exec_result_t r;
    /* A background child and a foreground sleep: both must die. */
    cr_assert_eq(agt_exec_run("sleep 60 & echo $! > bg.pid; echo started; "
                              "sleep 60",
                              &o, &r),
                 LISA_OK);
    cr_assert(r.timed_out);
    cr_assert_eq(r.exit_code, 124);
    cr_assert_str_eq(r.out, "started\n");
    cr_assert_lt(r.elapsed_ms, 5000);
    char path[128];
    snprintf(path, sizeof path, "%s/bg.pid", s_dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    long pid = 0;
    cr_assert_eq(fscanf(f, "%ld", &pid), 1);
    fclose(f);
    /* The killed child is reparented and reaped by init; allow a moment. */
    int alive = 1;
    for (int i = 0; i < 100 && alive; i++) {
        alive = s_alive(pid);
        if (alive)
            nanosleep(&(struct timespec){0, 20000000L}, NULL);
    }
    cr_assert_not(alive, "background child %ld survived the timeout", pid);
    agt_exec_result_clear(&r);
}

Test(agt_exec, capture_is_bounded)
{
    agt_exec_opts_t o = s_opts(20000);
    o.capture_bytes = 4096;
    agt_exec_result_t r;
    cr_assert_eq(agt_exec_run("echo FIRST; head -c 20000000 /dev/zero | tr "
                              "'\\0' 'a'; echo; echo LAST",
                              &o, &r),
                 LISA_OK);
    cr_assert_eq(r.exit_code, 0);
    cr_assert_eq(r.out_total, 6 + 20000000 + 1 + 5);
    cr_assert_lt(r.out_len, 4096 + 100);
    cr_assert_eq(strncmp(r.out, "FIRST\n", 6), 0);
    cr_assert_str_eq(r.out + r.out_len - 5, "LAST\n");
    cr_assert(strstr(r.out, "bytes of output not captured"));
    agt_exec_result_clear(&r);
}

Test(agt_exec, signal_exit_code)
{
    agt_exec_opts_t o = s_opts(5000);
    agt_exec_result_t r;
    cr_assert_eq(agt_exec_run("kill -TERM $$", &o, &r), LISA_OK);
    cr_assert_eq(r.exit_code, 128 + SIGTERM);
    agt_exec_result_clear(&r);
}

Test(agt_exec, background_child_holding_pipes_does_not_block)
{
    agt_exec_opts_t o = s_opts(30000);
    agt_exec_result_t r;
    cr_assert_eq(agt_exec_run("(sleep 3; echo late) & echo now", &o, &r),
                 LISA_OK);
    cr_assert_eq(r.exit_code, 0);
    cr_assert_not(r.timed_out);
    cr_assert_str_eq(r.out, "now\n");
    cr_assert_lt(r.elapsed_ms, 2500);
    agt_exec_result_clear(&r);
}

Test(agt_exec, cancel_flag_kills)
{
    agt_exec_opts_t o = s_opts(30000);
    atomic_bool cancel = true;
    o.cancel = &cancel;
    agt_exec_result_t r;
    cr_assert_eq(agt_exec_run("sleep 30", &o, &r), LISA_OK);
    cr_assert(r.cancelled);
    cr_assert_lt(r.elapsed_ms, 3000);
    agt_exec_result_clear(&r);
}

Test(agt_exec, missing_cwd_and_bad_options)
{
    agt_exec_opts_t o = s_opts(5000);
    agt_exec_result_t r;
    o.cwd = "/nonexistent/dir";
    cr_assert_eq(agt_exec_run("echo hi", &o, &r), LISA_OK);
    cr_assert_eq(r.exit_code, 126);
    cr_assert(strstr(r.err, "working directory"));
    agt_exec_result_clear(&r);
    o.capture_bytes = 1;
    cr_assert_eq(agt_exec_run("echo hi", &o, &r), LISA_INVALID);
    agt_exec_result_clear(&r);
}
