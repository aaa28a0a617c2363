/*
 * agt_seccomp and agt_jail tests: a child under the filter gets EPERM from
 * every refused call (ENOSYS from clone3) and can still fork, start
 * threads and unshare what is not a namespace; commands run through a
 * jail cannot read a non-dumpable agent, cannot make namespaces, and are
 * still timed out and killed. The first test is the usage example.
 */
#define _GNU_SOURCE
#include "agt_exec.h"
#include "agt_jail.h"
#include "agt_seccomp.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn in a forked child under the filter; its exit status. */
static int
s_in_child(const agt_seccomp_t *f, int (*fn)(void))
{
    /* No assertion in the child: it would report as a stray process. */
    pid_t pid = fork();
    if (pid == 0) {
        if (agt_seccomp_apply(f) != 0)
            _exit(100);
        _exit(fn());
    }
    cr_assert_geq(pid, 0);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "child died of signal %d",
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return WEXITSTATUS(status);
}

static int
s_refused(long r, int want)
{
    return r == -1 && errno == want;
}

static void *
s_thread(void *arg)
{
    return arg;
}

/* 0 when every refused call is refused and the rest works; else the
 * number of the first check that failed. */
static int
s_probe(void)
{
    char buf[8];
    struct iovec lv = {buf, sizeof buf}, rv = {buf, sizeof buf};
    if (!s_refused(ptrace(PTRACE_TRACEME, 0, NULL, NULL), EPERM))
        return 1;
    if (!s_refused(unshare(CLONE_NEWUSER), EPERM))
        return 2;
    if (!s_refused(unshare(CLONE_NEWNS), EPERM))
        return 3;
    if (!s_refused(syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0),
                   EPERM))
        return 4;
    if (!s_refused(syscall(SYS_clone3, NULL, 0), ENOSYS))
        return 5;
    if (!s_refused(mount("none", "/mnt", "tmpfs", 0, NULL), EPERM))
        return 6;
    if (!s_refused(process_vm_readv(getppid(), &lv, 1, &rv, 1, 0), EPERM))
        return 7;
    if (!s_refused(syscall(SYS_keyctl, 0, 0, 0, 0, 0), EPERM))
        return 8;
    if (!s_refused(syscall(SYS_bpf, 0, NULL, 0), EPERM))
        return 9;
    if (!s_refused(syscall(SYS_userfaultfd, 0), EPERM))
        return 10;
    if (!s_refused(syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0), EPERM))
        return 11;
    if (!s_refused(syscall(SYS_setns, 0, 0), EPERM))
        return 12;
    if (!s_refused(syscall(SYS_umount2, "/", 0), EPERM))
        return 13;
    if (!s_refused(syscall(SYS_init_module, NULL, 0, ""), EPERM))
        return 14;
    /* What ordinary programs need still works. */
    if (unshare(CLONE_FILES) != 0)
        return 20;
    pid_t c = fork();
    if (c < 0)
        return 21;
    if (c == 0)
        _exit(7);
    int st = 0;
    if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 7)
        return 22;
    pthread_t th;
    if (pthread_create(&th, NULL, s_thread, NULL) != 0 ||
        pthread_join(th, NULL) != 0)
        return 23;
    if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
        return 24;
    return 0;
}

/* True when a child of this process may make a PID and a mount
 * namespace (root, or a user namespace that allows it). */
static bool
s_can_make_namespaces(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(unshare(CLONE_NEWPID | CLONE_NEWNS) == 0 ? 0 : 1);
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
           WEXITSTATUS(st) == 0;
}

Test(agt_seccomp, usage_refused_calls_and_working_ones)
{
    agt_seccomp_t *f = agt_seccomp_new();
    cr_assert_not_null(f);
    cr_assert_gt(agt_seccomp_len(f), 60u);
    cr_assert_eq(s_in_child(f, s_probe), 0, "check %d failed",
                 s_in_child(f, s_probe));
    agt_seccomp_destroy(&f);
    cr_assert_null(f);
    agt_seccomp_destroy(&f);
    cr_assert_eq(agt_seccomp_apply(NULL), -1);
}

static char *
s_run(const agt_jail_t *j, const char *cmd, unsigned timeout_ms, int *code,
      long *elapsed)
{
    agt_exec_opts_t o = {.cwd = "/tmp",
                         .timeout_ms = timeout_ms,
                         .capture_bytes = 4096,
                         .grace_ms = 200,
                         .jail = j};
    agt_exec_result_t r;
    cr_assert_eq(agt_exec_run(cmd, &o, &r), LISA_OK);
    *code = r.exit_code;
    if (elapsed)
        *elapsed = r.elapsed_ms;
    char *out = lisa_strdup(r.out);
    agt_exec_result_clear(&r);
    return out;
}

Test(agt_jail, commands_cannot_reach_a_non_dumpable_agent)
{
    cr_assert_eq(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), 0);
    agt_jail_t *j = agt_jail_new();
    cr_assert_not_null(j);
    char cmd[256];
    snprintf(cmd, sizeof cmd,
             "head -c 16 /proc/%ld/environ >/dev/null 2>&1 && echo ENV-READ;"
             " echo done",
             (long) getpid());
    int code = 0;
    char *out = s_run(j, cmd, 5000, &code, NULL);
    cr_assert_str_eq(out, "done\n");
    lisa_free(&out);
    /* No new namespaces from a command (unshare from util-linux). */
    out = s_run(j, "unshare -U true 2>/dev/null && echo NS-MADE; echo done",
                5000, &code, NULL);
    cr_assert_str_eq(out, "done\n");
    lisa_free(&out);
    /* Where this process may make them, the commands get namespaces of
     * their own (the init once took its parent, in the namespace outside,
     * for gone, as getppid() says 0 there, and never started). */
    if (s_can_make_namespaces())
        cr_assert(agt_jail_own_pidns(j), "the jail made no namespaces");
    if (agt_jail_own_pidns(j)) {
        /* Their own PID namespace: the init and the shell, a few more. */
        out = s_run(j, "ls /proc | grep -c '^[0-9][0-9]*$'", 5000, &code, NULL);
        cr_assert_lt(atoi(out), 6, "%s", out);
        lisa_free(&out);
        cr_assert_eq(access("/proc/self/ns/pid", F_OK), 0);
    }
    /* Exit codes come through the relay; a timeout still kills. */
    out = s_run(j, "exit 3", 5000, &code, NULL);
    cr_assert_eq(code, 3);
    lisa_free(&out);
    long ms = 0;
    out = s_run(j, "sleep 20", 300, &code, &ms);
    cr_assert_eq(code, 124);
    cr_assert_lt(ms, 3000);
    lisa_free(&out);
    agt_jail_destroy(&j);
    cr_assert_null(j);
    agt_jail_destroy(&j);
}
