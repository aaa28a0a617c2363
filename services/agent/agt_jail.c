/*
 * agt_jail: the commands' init, made with a raw clone (fork-like, no
 * stack of its own) into a new PID and mount namespace; the agent keeps
 * descriptors of both namespaces and each command's process setns()s to
 * them and forks once more, since a PID namespace applies to children
 * only. Process groups span namespaces, so killing the command's group
 * from the agent reaches the relay and the command alike.
 */
#define _GNU_SOURCE /* setns, CLONE_NEW* */
#include "agt_jail.h"

#include "agt_seccomp.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct agt_jail {
    agt_seccomp_t *filter;
    pid_t init; /* the commands' pid 1; -1 when they share ours */
    int pid_ns; /* its PID namespace; -1 when none */
    int mnt_ns; /* its mount namespace */
};

/* Drops every capability: effective, permitted, inheritable, ambient. */
static int
s_drop_caps(void)
{
    (void) prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    return syscall(SYS_capset, &hdr, data) == 0 ? 0 : -1;
}

/* The commands' pid 1: a private /proc for the namespace, then reaping
 * until the agent (its parent) is gone. Never returns. Its parent is
 * outside its PID namespace, so getppid() says 0 here whether or not the
 * agent lives: an agent that died before the parent-death signal was set
 * has closed the pipe's other end, and the ready byte fails (EPIPE or
 * SIGPIPE) before anything else is done. */
static void
s_init_main(const agt_jail_t *j, int ready)
{
    (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) != 0)
        _exit(2);
    static const char one = 1;
    if (write(ready, &one, 1) != 1)
        _exit(2);
    (void) syscall(SYS_close_range, 0u, ~0u, 0u);
    if (s_drop_caps() != 0 || agt_seccomp_apply(j->filter) != 0)
        _exit(3);
    for (;;) {
        if (waitpid(-1, NULL, 0) < 0) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
}

static int
s_ns_fd(pid_t pid, const char *ns)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/ns/%s", (long) pid, ns);
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* Starts the init; false when this process may not make namespaces.
 * The init is not dumpable (the agent's memory, token included, is its
 * copy until it dies), so opening its namespaces needs CAP_SYS_PTRACE in
 * the sandbox's user namespace, which the agent holds with the others. */
static bool
s_start_init(agt_jail_t *j)
{
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0)
        return false;
    sigset_t all, old;
    sigfillset(&all);
    (void) pthread_sigmask(SIG_SETMASK, &all, &old);
    long r = syscall(SYS_clone,
                     (unsigned long) (CLONE_NEWPID | CLONE_NEWNS | SIGCHLD), 0L,
                     0L, 0L, 0L);
    if (r == 0) {
        sigset_t none;
        sigemptyset(&none);
        (void) sigprocmask(SIG_SETMASK, &none, NULL);
        close(ready[0]);
        s_init_main(j, ready[1]);
    }
    int err = errno;
    (void) pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(ready[1]);
    if (r < 0) {
        close(ready[0]);
        lisa_log_info("jail: no namespace of their own for commands (%s): "
                      "they share the agent's",
                      strerror(err));
        return false;
    }
    j->init = (pid_t) r;
    /* One byte once its /proc is mounted; EOF if it failed. */
    char c = 0;
    ssize_t n;
    while ((n = read(ready[0], &c, 1)) < 0 && errno == EINTR) {
    }
    close(ready[0]);
    if (n != 1) {
        lisa_log_warn("jail: the commands' init did not start");
        return false;
    }
    j->pid_ns = s_ns_fd(j->init, "pid");
    j->mnt_ns = s_ns_fd(j->init, "mnt");
    if (j->pid_ns < 0 || j->mnt_ns < 0) {
        lisa_log_warn("jail: cannot open the commands' namespaces: %s",
                      strerror(errno));
        return false;
    }
    return true;
}

agt_jail_t *
agt_jail_new(void)
{
    agt_seccomp_t *f = agt_seccomp_new();
    if (!f) {
        lisa_log_error("jail: no system-call filter for this architecture");
        return NULL;
    }
    agt_jail_t *j = lisa_calloc(1, sizeof *j);
    j->filter = f;
    j->init = -1;
    j->pid_ns = -1;
    j->mnt_ns = -1;
    if (!s_start_init(j)) {
        if (j->init > 0) {
            (void) kill(j->init, SIGKILL);
            (void) waitpid(j->init, NULL, 0);
        }
        if (j->pid_ns >= 0)
            close(j->pid_ns);
        if (j->mnt_ns >= 0)
            close(j->mnt_ns);
        j->init = -1;
        j->pid_ns = j->mnt_ns = -1;
    }
    lisa_log_info("jail: commands run %s, under a %zu-instruction filter",
                  j->init > 0 ? "in a PID namespace of their own"
                              : "in the agent's PID namespace",
                  agt_seccomp_len(f));
    return j;
}

void
agt_jail_destroy(agt_jail_t **jp)
{
    if (!jp || !*jp)
        return;
    agt_jail_t *j = *jp;
    if (j->init > 0) {
        (void) kill(j->init, SIGKILL);
        while (waitpid(j->init, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    if (j->pid_ns >= 0)
        close(j->pid_ns);
    if (j->mnt_ns >= 0)
        close(j->mnt_ns);
    agt_seccomp_destroy(&j->filter);
    lisa_free(jp);
}

bool
agt_jail_own_pidns(const agt_jail_t *j)
{
    return j && j->init > 0;
}

/* Waits for the command and exits as it did. */
static void
s_relay(pid_t cmd)
{
    int status = 0;
    while (waitpid(cmd, &status, 0) < 0) {
        if (errno != EINTR)
            _exit(126);
    }
    if (WIFSIGNALED(status))
        _exit(128 + WTERMSIG(status));
    _exit(WEXITSTATUS(status));
}

int
agt_jail_enter(const agt_jail_t *j)
{
    if (!j)
        return -1;
    if (j->init > 0) {
        if (setns(j->pid_ns, CLONE_NEWPID) != 0 ||
            setns(j->mnt_ns, CLONE_NEWNS) != 0)
            return -1;
        pid_t cmd = fork();
        if (cmd < 0)
            return -1;
        if (cmd > 0)
            s_relay(cmd);
        /* The relay dying (the agent killing the group) ends us too. */
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
    }
    if (s_drop_caps() != 0)
        return -1;
    return agt_seccomp_apply(j->filter);
}
