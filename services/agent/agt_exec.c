/*
 * agt_exec: fork + exec of `bash -c` with poll(2)-driven capture.
 *
 * Between fork and exec the child only calls async-signal-safe functions
 * (the agent has a heartbeat thread). The parent sets the child's process
 * group too, so a kill right after fork cannot miss it.
 */
#include "agt_exec.h"

#include "lisa/lisa_clock.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* One captured stream: head bytes, then a ring of tail bytes. */
typedef struct {
    int fd;
    char *head;
    size_t head_len, head_max;
    char *ring;
    size_t ring_len, ring_pos, ring_max;
    size_t total;
} s_stream_t;

static void
s_stream_init(s_stream_t *st, int fd, size_t cap)
{
    memset(st, 0, sizeof *st);
    st->fd = fd;
    st->head_max = cap / 2;
    st->ring_max = cap - cap / 2;
    st->head = lisa_malloc(st->head_max);
    st->ring = lisa_malloc(st->ring_max);
}

static void
s_stream_feed(s_stream_t *st, const char *buf, size_t n)
{
    st->total += n;
    size_t take = st->head_max - st->head_len;
    if (take > n)
        take = n;
    memcpy(st->head + st->head_len, buf, take);
    st->head_len += take;
    for (size_t i = take; i < n; i++) {
        st->ring[st->ring_pos] = buf[i];
        st->ring_pos = (st->ring_pos + 1) % st->ring_max;
        if (st->ring_len < st->ring_max)
            st->ring_len++;
    }
}

/* Joins head + marker + tail into a NUL-terminated string. */
static char *
s_stream_take(s_stream_t *st, size_t *len)
{
    size_t dropped = st->total - st->head_len - st->ring_len;
    char marker[96];
    int m = 0;
    if (dropped)
        m = snprintf(marker, sizeof marker,
                     "\n<%zu bytes of output not captured>\n", dropped);
    size_t n = st->head_len + (size_t) m + st->ring_len;
    char *s = lisa_malloc(n + 1);
    memcpy(s, st->head, st->head_len);
    memcpy(s + st->head_len, marker, (size_t) m);
    size_t start = (st->ring_pos + st->ring_max - st->ring_len) % st->ring_max;
    for (size_t i = 0; i < st->ring_len; i++)
        s[st->head_len + (size_t) m + i] = st->ring[(start + i) % st->ring_max];
    s[n] = '\0';
    *len = n;
    lisa_free(&st->head);
    lisa_free(&st->ring);
    return s;
}

static int
s_cloexec_pipe(int p[2])
{
    if (pipe(p) != 0)
        return -1;
    for (int i = 0; i < 2; i++)
        (void) fcntl(p[i], F_SETFD, FD_CLOEXEC);
    return 0;
}

/* Child side: only async-signal-safe calls until exec. */
static void
s_child(const char *shell, const char *cmd, const char *cwd, int out_w,
        int err_w, const agt_jail_t *jail)
{
    (void) setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    (void) sigprocmask(SIG_SETMASK, &none, NULL);
    (void) signal(SIGPIPE, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
        (void) dup2(devnull, STDIN_FILENO);
    (void) dup2(out_w, STDOUT_FILENO);
    (void) dup2(err_w, STDERR_FILENO);
    if (jail && agt_jail_enter(jail) != 0) {
        static const char msg[] = "cannot confine the command\n";
        (void) write(STDERR_FILENO, msg, sizeof msg - 1);
        _exit(126);
    }
    if (chdir(cwd) != 0) {
        static const char msg[] = "cannot enter working directory\n";
        (void) write(STDERR_FILENO, msg, sizeof msg - 1);
        _exit(126);
    }
    execlp(shell, shell, "-c", cmd, (char *) NULL);
    static const char msg[] = "cannot execute the shell\n";
    (void) write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
}

static void
s_kill_group(pid_t pid)
{
    if (pid > 0)
        (void) kill(-pid, SIGKILL);
}

lisa_rc_t
agt_exec_run(const char *cmd, const agt_exec_opts_t *opts,
             agt_exec_result_t *res)
{
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    if (!cmd || !opts || !opts->cwd || opts->capture_bytes < 64)
        return LISA_INVALID;
    const char *shell = opts->shell ? opts->shell : "bash";
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    if (s_cloexec_pipe(po) != 0 || s_cloexec_pipe(pe) != 0) {
        lisa_log_error("exec: pipe: %s", strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (po[i] >= 0)
                close(po[i]);
        }
        return LISA_ERR;
    }
    long start = lisa_clock_mono_ms();
    pid_t pid = fork();
    if (pid < 0) {
        lisa_log_error("exec: fork: %s", strerror(errno));
        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        return LISA_ERR;
    }
    if (pid == 0)
        s_child(shell, cmd, opts->cwd, po[1], pe[1], opts->jail);
    (void) setpgid(pid, pid);
    close(po[1]);
    close(pe[1]);

    s_stream_t st[2];
    s_stream_init(&st[0], po[0], opts->capture_bytes);
    s_stream_init(&st[1], pe[0], opts->capture_bytes);
    int status = 0;
    bool exited = false;
    long exit_at = 0;
    char buf[16384];
    for (;;) {
        long now = lisa_clock_mono_ms();
        if (!exited) {
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid) {
                exited = true;
                exit_at = now;
            }
        }
        if (st[0].fd < 0 && st[1].fd < 0) {
            if (exited)
                break;
        } else if (exited && now - exit_at >= (long) opts->grace_ms) {
            break; /* a background child holds the pipes */
        }
        if (!exited && opts->timeout_ms &&
            now - start >= (long) opts->timeout_ms) {
            res->timed_out = true;
            s_kill_group(pid);
            break;
        }
        if (!exited && opts->cancel && atomic_load(opts->cancel)) {
            res->cancelled = true;
            s_kill_group(pid);
            break;
        }
        struct pollfd pfd[2];
        nfds_t n = 0;
        for (int i = 0; i < 2; i++) {
            if (st[i].fd >= 0) {
                pfd[n].fd = st[i].fd;
                pfd[n].events = POLLIN;
                pfd[n].revents = 0;
                n++;
            }
        }
        if (n == 0) {
            struct timespec ts = {0, 5 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        int pr = poll(pfd, n, 50);
        if (pr < 0 && errno != EINTR)
            break;
        for (nfds_t k = 0; pr > 0 && k < n; k++) {
            if (!pfd[k].revents)
                continue;
            s_stream_t *s = st[0].fd == pfd[k].fd ? &st[0] : &st[1];
            ssize_t r = read(s->fd, buf, sizeof buf);
            if (r > 0) {
                s_stream_feed(s, buf, (size_t) r);
            } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(s->fd);
                s->fd = -1;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        if (st[i].fd >= 0)
            close(st[i].fd);
    }
    if (!exited) {
        /* Killed above: reap it (SIGKILL cannot be ignored). */
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    if (res->timed_out)
        res->exit_code = 124;
    else if (WIFEXITED(status))
        res->exit_code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        res->exit_code = 128 + WTERMSIG(status);
    res->out = s_stream_take(&st[0], &res->out_len);
    res->out_total = st[0].total;
    res->err = s_stream_take(&st[1], &res->err_len);
    res->err_total = st[1].total;
    res->elapsed_ms = lisa_clock_mono_ms() - start;
    /* As a sandbox's pid 1 the agent inherits every orphan: reap them now,
     * when no child of ours is outstanding. */
    if (getpid() == 1) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
    }
    return LISA_OK;
}

void
agt_exec_result_clear(agt_exec_result_t *res)
{
    if (!res)
        return;
    lisa_free(&res->out);
    lisa_free(&res->err);
}
