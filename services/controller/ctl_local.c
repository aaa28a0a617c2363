/*
 * ctl_local: fork + exec of bwrap, labels in a state directory.
 *
 * The state files are the truth a restarted controller reads; while it
 * runs, the backend keeps each file's content in memory (a table by
 * name), so a listing reads the directory and reaps children but opens
 * only files it has not seen yet. Each child gets a pidfd in one epoll
 * set: the set polls readable when a sandbox ended (the wake descriptor),
 * and removal waits on the pidfd instead of sleeping.
 *
 * The child that becomes bwrap shares the controller's memory until it
 * execs (clone with CLONE_VM | CLONE_VFORK, on a stack of its own): no
 * page tables copied and torn down per sandbox. It runs with every
 * signal blocked until it has reset the controller's handlers, and
 * changes credentials with raw system calls (glibc's wrappers would
 * signal the controller's other threads). Sanitizer builds fork.
 *
 * Each child starts as pid 1 of a PID namespace of its own, so the
 * sandbox ends whole when that process ends: bubblewrap's outer process
 * dies with the controller, and the kernel then kills every process of
 * the namespace, its inner process too. Without it, a controller killed
 * while a sandbox starts can leave bubblewrap's inner process behind
 * (blocked for good on its parent's go-ahead, or armed with its own
 * parent-death signal after that parent had gone).
 */
#define _GNU_SOURCE /* clone */
#include "ctl_local.h"

#include "ctl_cgroup.h"
#include "ctl_logcap.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_SANDBOXES 100000u
#define S_MAX_ARGS      160u
#define S_MAX_SYS_ARGS  64u
#define S_KILL_WAIT_MS  2000
#define S_CHILD_STACK   (64u * 1024u)
#define S_NOFILE        4096u
#define S_UID_LOCKS     "/run/lisa-sandbox-uids"
#define S_ENVP          10u /* the sandbox's environment, NULL included */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define S_SPAWN_FORK 1
#endif

typedef struct {
    char *controller_id;
    char *state_dir;
    char *bwrap;
    char *agent_path;
    char *sandbox_cmd;
    char *gateway_socket;
    char *gateway_url;
    char *proxy_socket; /* packages mode: "" when off */
    char *proxy_url;
    char *cgroup_root;
    bool cgroup_auto; /* made by ctl_cgroup_auto: removed at the end */
    unsigned uid_base, uid_count, uid_next; /* sandbox uids (as root) */
    bool as_root;
    bool uid_locks; /* S_UID_LOCKS exists: uids are claimed host-wide */
    bool no_memory_rlimit;
    ctl_logcap_t *logs;             /* NULL: output uncapped */
    char *bwrap_path;               /* resolved bwrap, NULL until found */
    char *sys_args[S_MAX_SYS_ARGS]; /* system directory arguments */
    size_t n_sys_args;
    zhashx_t *known; /* name -> s_entry_t: state files read or written */
    uint64_t gen;    /* listing generation */
    int epfd;        /* epoll set of the children's pidfds; -1 when none */
    int self_fd;     /* our own pidfd, for the child's check; -1 when none */
    bool no_pidns;   /* a PID namespace per child was refused: none */
} s_local_t;

/* One state file, parsed. */
typedef struct {
    ctl_sandbox_t sb;
    long pid;
    unsigned long long pid_start;
    unsigned uid; /* the sandbox's uid; 0 when unknown */
    int has_exit;
} s_state_t;

/* What the backend knows of one state file. */
typedef struct {
    s_state_t st;
    bool ignored; /* another controller's, or damaged: not listed */
    int pidfd;    /* our child's pidfd, in the epoll set; -1 when none */
    int uid_lock; /* flock on the uid's file while we hold it; -1: none */
    uint64_t gen; /* the listing that last saw the file */
} s_entry_t;

static char *
s_path(const s_local_t *l, const char *name, const char *ext)
{
    size_t n = strlen(l->state_dir) + strlen(name) + strlen(ext) + 2;
    char *p = lisa_malloc(n);
    snprintf(p, n, "%s/%s%s", l->state_dir, name, ext);
    return p;
}

/* Start time of pid (field 22 of /proc/pid/stat), 0 when gone. */
static unsigned long long
s_pid_start(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    if (p[2] == 'Z' || p[2] == 'X')
        return 0; /* a zombie runs nothing */
    /* Fields after ')' start at field 3 (state). */
    int field = 3;
    for (p += 2; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return strtoull(p, NULL, 10);
}

static lisa_rc_t
s_write_state(const s_local_t *l, const s_state_t *st)
{
    char *path = s_path(l, st->sb.name, ".state");
    char *tmp = s_path(l, st->sb.name, ".state.tmp");
    lisa_rc_t rc = LISA_ERR;
    FILE *f = fopen(tmp, "w");
    if (f) {
        fprintf(f,
                "name=%s\ncontroller=%s\nrun=%s\nrollout=%s\nattempt=%u\n"
                "created_ms=%" PRIu64 "\ndeadline_ms=%" PRIu64
                "\npid=%ld\npid_start=%llu\nuid=%u\n",
                st->sb.name, st->sb.controller_id, st->sb.run_id,
                st->sb.rollout_id, st->sb.attempt, st->sb.created_ms,
                st->sb.deadline_ms, st->pid, st->pid_start, st->uid);
        if (st->has_exit)
            fprintf(f, "exit=%d\noom=%d\n", st->sb.exit_code,
                    st->sb.oom ? 1 : 0);
        if (fclose(f) == 0 && rename(tmp, path) == 0)
            rc = LISA_OK;
    }
    if (rc != LISA_OK) {
        lisa_log_error("local: cannot write %s: %s", path, strerror(errno));
        (void) unlink(tmp);
    }
    lisa_free(&path);
    lisa_free(&tmp);
    return rc;
}

static void
s_copy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

static lisa_rc_t
s_read_state(const s_local_t *l, const char *name, s_state_t *st)
{
    memset(st, 0, sizeof *st);
    char *path = s_path(l, name, ".state");
    FILE *f = fopen(path, "r");
    lisa_free(&path);
    if (!f)
        return LISA_NOTFOUND;
    char line[512];
    int lines = 0;
    while (fgets(line, sizeof line, f) && lines++ < 64) {
        line[strcspn(line, "\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *k = line, *v = eq + 1;
        if (strcmp(k, "name") == 0)
            s_copy(st->sb.name, sizeof st->sb.name, v);
        else if (strcmp(k, "controller") == 0)
            s_copy(st->sb.controller_id, sizeof st->sb.controller_id, v);
        else if (strcmp(k, "run") == 0)
            s_copy(st->sb.run_id, sizeof st->sb.run_id, v);
        else if (strcmp(k, "rollout") == 0)
            s_copy(st->sb.rollout_id, sizeof st->sb.rollout_id, v);
        else if (strcmp(k, "attempt") == 0)
            st->sb.attempt = (unsigned) strtoul(v, NULL, 10);
        else if (strcmp(k, "created_ms") == 0)
            st->sb.created_ms = strtoull(v, NULL, 10);
        else if (strcmp(k, "deadline_ms") == 0)
            st->sb.deadline_ms = strtoull(v, NULL, 10);
        else if (strcmp(k, "pid") == 0)
            st->pid = strtol(v, NULL, 10);
        else if (strcmp(k, "pid_start") == 0)
            st->pid_start = strtoull(v, NULL, 10);
        else if (strcmp(k, "uid") == 0)
            st->uid = (unsigned) strtoul(v, NULL, 10);
        else if (strcmp(k, "exit") == 0) {
            st->sb.exit_code = (int) strtol(v, NULL, 10);
            st->has_exit = 1;
        } else if (strcmp(k, "oom") == 0)
            st->sb.oom = strcmp(v, "1") == 0;
    }
    fclose(f);
    if (strcmp(st->sb.name, name) != 0 || st->pid <= 0) {
        lisa_log_warn("local: state file of %s is damaged", name);
        return LISA_INVALID;
    }
    return LISA_OK;
}

static char *
s_cgroup_dir(const s_local_t *l, const char *name)
{
    if (!*l->cgroup_root)
        return NULL;
    size_t n = strlen(l->cgroup_root) + strlen(name) + 2;
    char *p = lisa_malloc(n);
    snprintf(p, n, "%s/%s", l->cgroup_root, name);
    return p;
}

static int
s_write_file(const char *dir, const char *file, const char *val)
{
    char path[4352];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, val, strlen(val));
    int c = close(fd);
    return w == (ssize_t) strlen(val) && c == 0 ? 0 : -1;
}

/* True when memory.events of the sandbox's cgroup counts an OOM kill. */
static bool
s_cgroup_oom(const s_local_t *l, const char *name)
{
    char *dir = s_cgroup_dir(l, name);
    if (!dir)
        return false;
    char path[4352];
    snprintf(path, sizeof path, "%s/memory.events", dir);
    lisa_free(&dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[128];
    bool oom = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long long n = 0;
        if (sscanf(line, "oom_kill %llu", &n) == 1 && n > 0)
            oom = true;
    }
    fclose(f);
    return oom;
}

/* Looks `prog` up in PATH unless it has a slash. Caller frees. */
static char *
s_which(const char *prog)
{
    if (strchr(prog, '/'))
        return access(prog, X_OK) == 0 ? lisa_strdup(prog) : NULL;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    char *dup = lisa_strdup(path);
    char *save = NULL;
    char *found = NULL;
    for (char *d = strtok_r(dup, ":", &save); d && !found;
         d = strtok_r(NULL, ":", &save)) {
        size_t n = strlen(d) + strlen(prog) + 2;
        char *cand = lisa_malloc(n);
        snprintf(cand, n, "%s/%s", d, prog);
        if (access(cand, X_OK) == 0)
            found = cand;
        else
            lisa_free(&cand);
    }
    lisa_free(&dup);
    return found;
}

static lisa_rc_t
s_ping(void *impl)
{
    s_local_t *l = impl;
    char *b = s_which(l->bwrap);
    bool ok = b != NULL && access(l->state_dir, W_OK) == 0;
    if (!ok)
        lisa_log_warn("local: %s", b ? "state directory not writable"
                                     : "bubblewrap not found");
    lisa_free(&b);
    return ok ? LISA_OK : LISA_UNAVAILABLE;
}

/* argv builder with a fixed bound. */
typedef struct {
    char *v[S_MAX_ARGS + 1];
    size_t n;
    char *owned[32];
    size_t n_owned;
} s_argv_t;

static void
s_arg(s_argv_t *a, const char *s)
{
    if (a->n < S_MAX_ARGS)
        a->v[a->n++] = (char *) (uintptr_t) s;
    a->v[a->n] = NULL;
}

static const char *
s_own(s_argv_t *a, char *s)
{
    if (a->n_owned < sizeof a->owned / sizeof a->owned[0])
        a->owned[a->n_owned++] = s;
    return s;
}

static const char *
s_num(s_argv_t *a, uint64_t v)
{
    char *s = lisa_malloc(24);
    snprintf(s, 24, "%" PRIu64, v);
    return s_own(a, s);
}

static void
s_sys_arg(s_local_t *l, const char *a)
{
    if (l->n_sys_args < S_MAX_SYS_ARGS)
        l->sys_args[l->n_sys_args++] = lisa_strdup(a);
}

/* System directories, worked out once: symlinks are recreated,
 * directories bound read-only; missing ones are skipped. */
static void
s_system_dirs(s_local_t *l)
{
    static const char *dirs[] = {"/bin",   "/sbin",  "/lib",
                                 "/lib32", "/lib64", "/libx32"};
    s_sys_arg(l, "--ro-bind");
    s_sys_arg(l, "/usr");
    s_sys_arg(l, "/usr");
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        struct stat st;
        if (lstat(dirs[i], &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            char target[4096];
            ssize_t n = readlink(dirs[i], target, sizeof target - 1);
            if (n <= 0)
                continue;
            target[n] = '\0';
            s_sys_arg(l, "--symlink");
            s_sys_arg(l, target);
            s_sys_arg(l, dirs[i]);
        } else if (S_ISDIR(st.st_mode)) {
            s_sys_arg(l, "--ro-bind");
            s_sys_arg(l, dirs[i]);
            s_sys_arg(l, dirs[i]);
        }
    }
    /* The few /etc files programs need; never the whole host /etc. */
    static const char *etc[] = {"/etc/ld.so.cache",  "/etc/ld.so.conf",
                                "/etc/ld.so.conf.d", "/etc/alternatives",
                                "/etc/localtime",    "/etc/nsswitch.conf",
                                "/etc/passwd",       "/etc/group",
                                "/etc/ssl",          "/etc/mime.types"};
    for (size_t i = 0; i < sizeof etc / sizeof etc[0]; i++) {
        s_sys_arg(l, "--ro-bind-try");
        s_sys_arg(l, etc[i]);
        s_sys_arg(l, etc[i]);
    }
}

typedef struct {
    const char *bwrap;
    char *const *argv;
    char *const *envp;
    int logfd;
    const char *cgroup_procs;
    uint64_t memory_bytes; /* 0: no address-space limit */
    uint64_t disk_bytes;   /* largest file */
    unsigned pids, uid;
    bool as_root;
    pid_t parent;
    int parent_fd; /* the controller's pidfd; -1: check getppid() */
} s_child_args_t;

static void
s_limit(int res, uint64_t v)
{
    struct rlimit r = {(rlim_t) v, (rlim_t) v};
    (void) setrlimit(res, &r);
}

/* Child after clone or fork: async-signal-safe system calls only, then
 * exec; it never returns. */
static void
s_child(const s_child_args_t *c)
{
    (void) setsid();
    if (c->cgroup_procs) {
        int fd = open(c->cgroup_procs, O_WRONLY);
        if (fd < 0 || write(fd, "0", 1) != 1)
            _exit(125);
        close(fd);
    } else {
        if (c->memory_bytes) {
            s_limit(RLIMIT_AS, c->memory_bytes);
            s_limit(RLIMIT_DATA, c->memory_bytes);
        }
        /* No pids controller: RLIMIT_NPROC bounds a fork bomb. It counts
         * every process of the uid, so it is set only when the sandbox
         * runs as a uid of its own (root, the controller, is exempt). */
        if (c->pids && c->as_root)
            s_limit(RLIMIT_NPROC, c->pids);
    }
    s_limit(RLIMIT_CORE, 0);
    s_limit(RLIMIT_NOFILE, S_NOFILE);
    if (c->disk_bytes)
        s_limit(RLIMIT_FSIZE, c->disk_bytes);
    /* The controller's handlers are not the sandbox's: default them (this
     * child has its own copy of the table) before unblocking. */
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        (void) signal(sigs[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    (void) sigprocmask(SIG_SETMASK, &none, NULL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
        (void) dup2(devnull, STDIN_FILENO);
    (void) dup2(c->logfd, STDOUT_FILENO);
    (void) dup2(c->logfd, STDERR_FILENO);
    if (c->as_root) {
        if (syscall(SYS_setgroups, 0, NULL) != 0 ||
            syscall(SYS_setgid, (gid_t) c->uid) != 0 ||
            syscall(SYS_setuid, (uid_t) c->uid) != 0)
            _exit(125);
    }
    /* Die with the controller from here on (a credential change clears
     * the setting, so it comes after setuid), also before bwrap has set
     * up its own --die-with-parent; a parent already gone means exit (in
     * a PID namespace of our own getppid() is 0: the pidfd tells). */
    (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (c->parent_fd >= 0) {
        struct pollfd gone = {.fd = c->parent_fd, .events = POLLIN};
        if (poll(&gone, 1, 0) != 0)
            _exit(125);
    } else if (getppid() != c->parent) {
        _exit(125);
    }
    execve(c->bwrap, c->argv, c->envp);
    static const char msg[] = "cannot execute bubblewrap\n";
    (void) write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
}

static int
s_child_main(void *arg)
{
    s_child((const s_child_args_t *) arg);
    return 127;
}

/* Starts the child, as pid 1 of a new PID namespace when newpid; its
 * pid, or -1 with errno. */
static pid_t
s_clone(const s_child_args_t *c, bool newpid)
{
    int ns = newpid ? CLONE_NEWPID : 0;
#ifdef S_SPAWN_FORK
    /* fork() cannot make a namespace: the raw call, fork's semantics. */
    pid_t pid = (pid_t) syscall(SYS_clone, ns | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0)
        (void) s_child_main((void *) (uintptr_t) c);
#else
    /* The parent waits (CLONE_VFORK) until the child has exec'd or
     * exited, so the stack can go right after. */
    char *stack = lisa_malloc(S_CHILD_STACK);
    pid_t pid =
        clone(s_child_main, stack + S_CHILD_STACK,
              CLONE_VM | CLONE_VFORK | ns | SIGCHLD, (void *) (uintptr_t) c);
    int err = errno;
    lisa_free(&stack);
    errno = err;
#endif
    return pid;
}

static pid_t
s_spawn(s_local_t *l, s_child_args_t *c)
{
    sigset_t all, old;
    sigfillset(&all);
    (void) pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = -1;
    bool ns = !l->no_pidns && l->self_fd >= 0;
    if (ns) {
        c->parent_fd = l->self_fd;
        pid = s_clone(c, true);
        /* refused: for good (no privilege, no support), or this once (a
         * namespace limit reached) */
        int e = pid < 0 ? errno : 0;
        ns = !(e == EPERM || e == EINVAL || e == ENOSPC || e == EUSERS);
        if (!ns)
            lisa_log_warn("local: no PID namespace for this sandbox (%s): a "
                          "controller killed while it starts can leave part "
                          "of it running",
                          strerror(e));
        if (!ns && e != ENOSPC && e != EUSERS)
            l->no_pidns = true;
    }
    if (!ns) {
        c->parent_fd = -1;
        pid = s_clone(c, false);
    }
    int err = errno;
    (void) pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = err;
    return pid;
}

static lisa_rc_t
s_setup_cgroup(const s_local_t *l, const ctl_spec_t *spec, char **procs)
{
    *procs = NULL;
    char *dir = s_cgroup_dir(l, spec->name);
    if (!dir)
        return LISA_OK;
    lisa_rc_t rc = LISA_ERR;
    char v[64];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        goto out;
    snprintf(v, sizeof v, "%" PRIu64, spec->memory_bytes);
    if (s_write_file(dir, "memory.max", v) != 0)
        goto out;
    (void) s_write_file(dir, "memory.swap.max", "0");
    snprintf(v, sizeof v, "%u", spec->pids);
    if (s_write_file(dir, "pids.max", v) != 0)
        goto out;
    snprintf(v, sizeof v, "%u 100000", spec->cpu_millis * 100u);
    if (s_write_file(dir, "cpu.max", v) != 0)
        goto out;
    size_t n = strlen(dir) + 16;
    *procs = lisa_malloc(n);
    snprintf(*procs, n, "%s/cgroup.procs", dir);
    rc = LISA_OK;
out:
    if (rc != LISA_OK)
        lisa_log_error("local: cgroup %s: %s", dir, strerror(errno));
    lisa_free(&dir);
    return rc;
}

/* ---- the table of known state files --------------------------------- */

static void
s_pidfd_close(s_entry_t *e)
{
    if (e->pidfd >= 0)
        close(e->pidfd); /* leaves the epoll set with its last descriptor */
    e->pidfd = -1;
}

static void
s_entry_free(void **item)
{
    if (!item || !*item)
        return;
    s_entry_t *e = *item;
    s_pidfd_close(e);
    if (e->uid_lock >= 0)
        close(e->uid_lock); /* gives the uid back to every controller */
    lisa_free(item);
}

/* The entry of `name`, reading its state file the first time; NULL when
 * the file is gone. */
static s_entry_t *
s_known(s_local_t *l, const char *name)
{
    s_entry_t *e = zhashx_lookup(l->known, name);
    if (e)
        return e;
    s_state_t st;
    lisa_rc_t rc = s_read_state(l, name, &st);
    if (rc == LISA_NOTFOUND)
        return NULL;
    e = lisa_calloc(1, sizeof *e);
    e->pidfd = -1;
    e->uid_lock = -1;
    if (rc != LISA_OK || strcmp(st.sb.controller_id, l->controller_id) != 0)
        e->ignored = true;
    else
        e->st = st;
    zhashx_update(l->known, name, e);
    return e;
}

/* Drops entries whose file the listing `gen` did not see. */
static void
s_sweep(s_local_t *l, uint64_t gen)
{
    size_t n = 0, cap = 0;
    char **gone = NULL;
    for (s_entry_t *e = zhashx_first(l->known); e; e = zhashx_next(l->known)) {
        if (e->gen == gen)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            gone = lisa_realloc(gone, cap * sizeof *gone);
        }
        gone[n++] = lisa_strdup(zhashx_cursor(l->known));
    }
    for (size_t i = 0; i < n; i++) {
        zhashx_delete(l->known, gone[i]);
        lisa_free(&gone[i]);
    }
    lisa_free(&gone);
}

/* A pidfd for our child `pid` in the epoll set; -1 when the kernel has
 * none (the tick still sees the exit). */
static int
s_watch(s_local_t *l, pid_t pid)
{
    int fd = pidfd_open(pid, 0);
    if (fd < 0)
        return -1;
    if (l->epfd >= 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
            lisa_log_debug("local: epoll_ctl: %s", strerror(errno));
    }
    return fd;
}

/* The bubblewrap command line of one sandbox. Every writable file system
 * in it is a tmpfs of a set size, together the spec's disk: /testbed
 * (three quarters), /tmp and /dev/shm (an eighth each); the root and /dev
 * are read-only, so nothing else can be written. */
static void
s_bwrap_argv(s_local_t *l, const ctl_spec_t *spec, const char *bwrap,
             s_argv_t *a)
{
    bool use_socket = *l->gateway_socket != '\0';
    uint64_t eighth = spec->disk_bytes / 8;
    s_arg(a, bwrap);
    s_arg(a, "--unshare-all");
    if (!use_socket)
        s_arg(a, "--share-net"); /* the gateway is only reachable by URL */
    /* No --new-session: the sandbox's init must stay in bwrap's process
     * group, so that killing the group reaches it even when bwrap died
     * before the init armed its own parent-death signal. The sandbox has
     * no terminal (stdin is /dev/null, output a pipe, setsid above). */
    s_arg(a, "--die-with-parent");
    /* The command is the namespace's pid 1: no bwrap reaper holding a copy
     * of the environment (the token) where the model could read it
     * (/proc/1/environ). The agent scrubs its own copy and reaps. */
    s_arg(a, "--as-pid-1");
    s_arg(a, "--cap-drop");
    s_arg(a, "ALL");
    if (!*l->sandbox_cmd) {
        /* The agent alone, inside the sandbox's user namespace: it makes
         * the PID and mount namespace its commands run in, which drop
         * every capability before they exec (agt_jail). */
        static const char *caps[] = {"CAP_SYS_ADMIN", "CAP_SYS_CHROOT",
                                     "CAP_SYS_PTRACE"};
        for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
            s_arg(a, "--cap-add");
            s_arg(a, caps[i]);
        }
    }
    s_arg(a, "--hostname");
    s_arg(a, "sandbox");
    for (size_t i = 0; i < l->n_sys_args; i++)
        s_arg(a, l->sys_args[i]);
    s_arg(a, "--proc");
    s_arg(a, "/proc");
    s_arg(a, "--dev");
    s_arg(a, "/dev");
    s_arg(a, "--size");
    s_arg(a, s_num(a, eighth));
    s_arg(a, "--tmpfs");
    s_arg(a, "/dev/shm");
    s_arg(a, "--size");
    s_arg(a, s_num(a, spec->disk_bytes - 2 * eighth));
    s_arg(a, "--tmpfs");
    s_arg(a, "/testbed");
    s_arg(a, "--size");
    s_arg(a, s_num(a, eighth));
    s_arg(a, "--tmpfs");
    s_arg(a, "/tmp");
    s_arg(a, "--dir");
    s_arg(a, "/run/lisa");
    if (use_socket) {
        s_arg(a, "--bind");
        s_arg(a, l->gateway_socket);
        s_arg(a, "/run/lisa/gateway.sock");
    }
    if (*l->proxy_socket) {
        s_arg(a, "--bind");
        s_arg(a, l->proxy_socket);
        s_arg(a, "/run/lisa/proxy.sock");
    }
    if (*l->agent_path) {
        s_arg(a, "--ro-bind");
        s_arg(a, l->agent_path);
        s_arg(a, "/run/lisa/lisa-agent");
    }
    s_arg(a, "--remount-ro");
    s_arg(a, "/dev");
    s_arg(a, "--remount-ro");
    s_arg(a, "/");
    s_arg(a, "--chdir");
    s_arg(a, "/testbed");
    s_arg(a, "--");
    if (*l->sandbox_cmd) {
        s_arg(a, "/bin/sh");
        s_arg(a, "-c");
        s_arg(a, l->sandbox_cmd);
    } else {
        s_arg(a, "/run/lisa/lisa-agent");
    }
}

/* The sandbox's environment; returns the count. The token travels here
 * (the agent is not dumpable, so no other process reads it), never on a
 * command line. */
static size_t
s_envp(const s_local_t *l, const ctl_spec_t *spec, char *envp[S_ENVP])
{
    size_t ne = 0;
    const char *fixed[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/testbed",
                           "LANG=C.UTF-8", "LISA_TESTBED=/testbed"};
    for (size_t i = 0; i < 4; i++)
        envp[ne++] = lisa_strdup(fixed[i]);
    size_t tn = strlen(spec->token) + 32;
    envp[ne] = lisa_malloc(tn);
    snprintf(envp[ne++], tn, "LISA_ATTEMPT_TOKEN=%s", spec->token);
    if (*l->gateway_socket) {
        envp[ne++] = lisa_strdup("LISA_GATEWAY_SOCKET=/run/lisa/gateway.sock");
    } else {
        size_t un = strlen(l->gateway_url) + 32;
        envp[ne] = lisa_malloc(un);
        snprintf(envp[ne++], un, "LISA_GATEWAY_URL=%s", l->gateway_url);
    }
    /* packages mode: the agent relays to the gateway's package proxy */
    if (*l->proxy_socket || *l->proxy_url) {
        envp[ne++] = lisa_strdup("LISA_SANDBOX_NETWORK=packages");
        if (*l->proxy_socket) {
            envp[ne++] = lisa_strdup("LISA_PROXY_SOCKET=/run/lisa/proxy.sock");
        } else {
            size_t un = strlen(l->proxy_url) + 32;
            envp[ne] = lisa_malloc(un);
            snprintf(envp[ne++], un, "LISA_PROXY_URL=%s", l->proxy_url);
        }
    }
    return ne;
}

/* A uid of the range no listed sandbox holds (round robin, so a uid just
 * given back is the last to be reused); the controller's own when it is
 * not root. */
/* Claims `uid` against other controllers on this host: an exclusive
 * flock on <S_UID_LOCKS>/<uid>, held while the sandbox lives and dropped
 * by the kernel when this process dies. The descriptor, or -1 when the
 * uid is taken; -2 when there is no lock directory (no claim made). */
static int
s_claim_uid(const s_local_t *l, unsigned uid)
{
    if (!l->uid_locks)
        return -2;
    char path[64];
    snprintf(path, sizeof path, S_UID_LOCKS "/%u", uid);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -2;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static lisa_rc_t
s_pick_uid(s_local_t *l, unsigned *uid, int *lock)
{
    *lock = -1;
    if (!l->as_root) {
        *uid = (unsigned) geteuid();
        return LISA_OK;
    }
    for (unsigned i = 0; i < l->uid_count; i++) {
        unsigned k = (l->uid_next + i) % l->uid_count;
        unsigned cand = l->uid_base + k;
        bool used = false;
        for (s_entry_t *e = zhashx_first(l->known); e && !used;
             e = zhashx_next(l->known))
            used = e->st.uid == cand;
        if (used)
            continue;
        int fd = s_claim_uid(l, cand);
        if (fd == -1)
            continue; /* another controller's sandbox has it */
        l->uid_next = (k + 1) % l->uid_count;
        *uid = cand;
        *lock = fd >= 0 ? fd : -1;
        return LISA_OK;
    }
    lisa_log_error("local: all %u sandbox uids from %u are in use "
                   "(controller.sandbox_uids)",
                   l->uid_count, l->uid_base);
    return LISA_UNAVAILABLE;
}

/* Output: a pipe to the log pump, or the file itself without one. The
 * write end for the child in *wfd. */
static lisa_rc_t
s_open_log(s_local_t *l, const char *name, const char *logp, int *wfd)
{
    *wfd = -1;
    int logfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (logfd < 0) {
        lisa_log_error("local: cannot open %s: %s", logp, strerror(errno));
        return LISA_ERR;
    }
    int p[2];
    if (!l->logs || pipe2(p, O_CLOEXEC) != 0) {
        *wfd = logfd; /* uncapped: the pump could not start */
        return LISA_OK;
    }
    if (ctl_logcap_add(l->logs, name, p[0], logfd) != LISA_OK) {
        close(p[1]);
        return LISA_ERR;
    }
    *wfd = p[1];
    return LISA_OK;
}

/* Records a started sandbox: its state file (the sandbox is killed when
 * that fails), its pid watch and its entry, which takes *uid_lock. */
static lisa_rc_t
s_record(s_local_t *l, const ctl_spec_t *spec, pid_t pid, unsigned uid,
         int *uid_lock)
{
    s_state_t st;
    memset(&st, 0, sizeof st);
    s_copy(st.sb.name, sizeof st.sb.name, spec->name);
    s_copy(st.sb.controller_id, sizeof st.sb.controller_id,
           spec->controller_id);
    s_copy(st.sb.run_id, sizeof st.sb.run_id, spec->run_id);
    s_copy(st.sb.rollout_id, sizeof st.sb.rollout_id, spec->rollout_id);
    st.sb.attempt = spec->attempt;
    st.sb.created_ms = spec->created_ms;
    st.sb.deadline_ms = spec->deadline_ms;
    st.pid = (long) pid;
    st.pid_start = s_pid_start(pid);
    st.uid = uid;
    int pidfd = s_watch(l, pid);
    lisa_rc_t rc = s_write_state(l, &st);
    if (rc != LISA_OK) {
        (void) kill(-pid, SIGKILL);
        (void) kill(pid, SIGKILL);
        (void) waitpid(pid, NULL, 0);
        if (pidfd >= 0)
            close(pidfd);
        return rc;
    }
    s_entry_t *e = lisa_calloc(1, sizeof *e);
    e->st = st;
    e->pidfd = pidfd;
    e->uid_lock = *uid_lock;
    *uid_lock = -1;
    e->gen = l->gen;
    zhashx_update(l->known, spec->name, e);
    lisa_log_info("local: started %s (pid %ld, uid %u) for rollout %s "
                  "attempt %u",
                  spec->name, (long) pid, uid, spec->rollout_id, spec->attempt);
    return LISA_OK;
}

static lisa_rc_t
s_start(void *impl, const ctl_spec_t *spec)
{
    s_local_t *l = impl;
    lisa_rc_t rc = LISA_ERR;
    char *state = s_path(l, spec->name, ".state");
    char *logp = s_path(l, spec->name, ".log");
    char *procs = NULL;
    s_argv_t a;
    memset(&a, 0, sizeof a);
    char *envp[S_ENVP] = {0};
    size_t ne = 0;
    int logfd = -1;
    unsigned uid = 0;
    int uid_lock = -1;
    if (access(state, F_OK) == 0) {
        rc = LISA_CONFLICT;
        goto out;
    }
    if (!l->bwrap_path || access(l->bwrap_path, X_OK) != 0) {
        lisa_free(&l->bwrap_path);
        l->bwrap_path = s_which(l->bwrap);
    }
    const char *bwrap = l->bwrap_path;
    if (!bwrap) {
        lisa_log_error("local: bubblewrap '%s' not found", l->bwrap);
        rc = LISA_UNAVAILABLE;
        goto out;
    }
    rc = s_pick_uid(l, &uid, &uid_lock);
    if (rc != LISA_OK)
        goto out;
    rc = LISA_ERR;
    s_bwrap_argv(l, spec, bwrap, &a);
    if (a.n >= S_MAX_ARGS) {
        lisa_log_error("local: too many bubblewrap arguments");
        goto out;
    }
    ne = s_envp(l, spec, envp);
    if (s_open_log(l, spec->name, logp, &logfd) != LISA_OK)
        goto out;
    if (s_setup_cgroup(l, spec, &procs) != LISA_OK)
        goto out;
    s_child_args_t ca = {
        .bwrap = bwrap,
        .argv = a.v,
        .envp = envp,
        .logfd = logfd,
        .cgroup_procs = procs,
        .memory_bytes = l->no_memory_rlimit ? 0 : spec->memory_bytes,
        .disk_bytes = spec->disk_bytes,
        .pids = spec->pids,
        .uid = uid,
        .as_root = l->as_root,
        .parent = getpid(),
        .parent_fd = -1,
    };
    pid_t pid = s_spawn(l, &ca);
    if (pid < 0) {
        lisa_log_error("local: clone: %s", strerror(errno));
        rc = LISA_UNAVAILABLE;
        goto out;
    }
    rc = s_record(l, spec, pid, uid, &uid_lock);
out:
    if (uid_lock >= 0)
        close(uid_lock);
    if (logfd >= 0)
        close(logfd);
    if (rc != LISA_OK && rc != LISA_CONFLICT)
        ctl_logcap_finish(l->logs, spec->name, true);
    for (size_t i = 0; i < ne; i++) {
        if (strncmp(envp[i], "LISA_ATTEMPT_TOKEN=", 19) == 0)
            memset(envp[i], 0, strlen(envp[i]));
        lisa_free(&envp[i]);
    }
    for (size_t i = 0; i < a.n_owned; i++)
        lisa_free(&a.owned[i]);
    lisa_free(&procs);
    lisa_free(&state);
    lisa_free(&logp);
    return rc;
}

/* Brings st up to date: reaps our child, or checks a pid we adopted. */
static void
s_refresh(s_local_t *l, s_state_t *st)
{
    if (st->has_exit) {
        st->sb.phase = CTL_PHASE_EXITED;
        return;
    }
    int status = 0;
    pid_t w = waitpid((pid_t) st->pid, &status, WNOHANG);
    if (w == (pid_t) st->pid) {
        /* Every writer of its output is gone with it. */
        ctl_logcap_finish(l->logs, st->sb.name, false);
        st->has_exit = 1;
        if (WIFEXITED(status))
            st->sb.exit_code = WEXITSTATUS(status);
        else if (WIFSIGNALED(status))
            st->sb.exit_code = 128 + WTERMSIG(status);
        st->sb.oom = s_cgroup_oom(l, st->sb.name);
        (void) s_write_state(l, st);
        st->sb.phase = CTL_PHASE_EXITED;
        return;
    }
    if (w == 0) {
        st->sb.phase = CTL_PHASE_RUNNING;
        return;
    }
    /* Not our child (we restarted): alive only if the pid still names the
     * same process. */
    unsigned long long start = s_pid_start(st->pid);
    if (start && start == st->pid_start) {
        st->sb.phase = CTL_PHASE_RUNNING;
        return;
    }
    ctl_logcap_finish(l->logs, st->sb.name, false);
    st->has_exit = 1;
    st->sb.exit_code = -1;
    st->sb.oom = s_cgroup_oom(l, st->sb.name);
    (void) s_write_state(l, st);
    st->sb.phase = CTL_PHASE_EXITED;
}

/* s_refresh on a known entry; an ended child's pidfd is closed. */
static void
s_update(s_local_t *l, s_entry_t *e)
{
    s_refresh(l, &e->st);
    if (e->st.has_exit)
        s_pidfd_close(e);
}

static lisa_rc_t
s_list(void *impl, ctl_sandbox_t **out, size_t *n)
{
    s_local_t *l = impl;
    *out = NULL;
    *n = 0;
    DIR *d = opendir(l->state_dir);
    if (!d)
        return LISA_UNAVAILABLE;
    uint64_t gen = ++l->gen;
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && *n < S_MAX_SANDBOXES) {
        size_t len = strlen(de->d_name);
        if (len < 7 || len - 6 >= CTL_NAME_MAX ||
            strcmp(de->d_name + len - 6, ".state") != 0)
            continue;
        char name[CTL_NAME_MAX];
        memcpy(name, de->d_name, len - 6);
        name[len - 6] = '\0';
        s_entry_t *e = s_known(l, name);
        if (!e)
            continue;
        e->gen = gen;
        if (e->ignored)
            continue;
        s_update(l, e);
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            *out = lisa_realloc(*out, cap * sizeof **out);
        }
        (*out)[(*n)++] = e->st.sb;
    }
    if (!de)
        s_sweep(l, gen); /* the whole directory was read */
    closedir(d);
    return LISA_OK;
}

/* Waits until the killed process `e` names is gone (reaped when ours). */
static void
s_wait_gone(s_entry_t *e)
{
    pid_t pid = (pid_t) e->st.pid;
    if (e->pidfd >= 0) {
        struct pollfd p = {.fd = e->pidfd, .events = POLLIN};
        (void) poll(&p, 1, S_KILL_WAIT_MS);
        (void) waitpid(pid, NULL, WNOHANG);
        return;
    }
    for (int i = 0; i < S_KILL_WAIT_MS / 10; i++) {
        pid_t w = waitpid(pid, NULL, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD && !s_pid_start(pid)))
            break;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* pidfds of pid's children (the sandbox's init under bwrap), opened
 * before the kill: an init exits only once its pid namespace is empty, so
 * waiting on it means no process of the sandbox is left (they would
 * count against the next sandbox's process limit). */
static size_t
s_child_fds(pid_t pid, int *fds, size_t max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/task/%ld/children", (long) pid,
             (long) pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = 0;
    long c;
    while (n < max && fscanf(f, "%ld", &c) == 1) {
        int fd = pidfd_open((pid_t) c, 0);
        if (fd >= 0)
            fds[n++] = fd;
    }
    fclose(f);
    return n;
}

static lisa_rc_t
s_remove(void *impl, const char *name)
{
    s_local_t *l = impl;
    s_entry_t *e = zhashx_lookup(l->known, name);
    s_entry_t tmp = {.pidfd = -1, .uid_lock = -1};
    lisa_rc_t rc = LISA_OK;
    if (!e || e->ignored) {
        /* Not listed yet, or not a file we list: read it as it is now. */
        rc = s_read_state(l, name, &tmp.st);
        if (rc == LISA_NOTFOUND) {
            zhashx_delete(l->known, name);
            return LISA_NOTFOUND;
        }
        e = &tmp;
    }
    if (rc == LISA_OK) {
        s_update(l, e);
        /* bwrap leads its process group; the sandbox's init is in it (and
         * everything dies with the init). A bwrap that died unobserved
         * may have left the init behind: kill the group then too. */
        int kids[4];
        size_t nk = e->st.sb.phase != CTL_PHASE_EXITED
                        ? s_child_fds((pid_t) e->st.pid, kids, 4)
                        : 0;
        if (e->st.sb.phase != CTL_PHASE_EXITED || e->st.sb.exit_code < 0)
            (void) kill((pid_t) -e->st.pid, SIGKILL);
        if (e->st.sb.phase != CTL_PHASE_EXITED) {
            (void) kill((pid_t) e->st.pid, SIGKILL);
            s_wait_gone(e);
            for (size_t i = 0; i < nk; i++) {
                struct pollfd p = {.fd = kids[i], .events = POLLIN};
                (void) poll(&p, 1, S_KILL_WAIT_MS);
                close(kids[i]);
            }
        }
    }
    char *dir = s_cgroup_dir(l, name);
    if (dir) {
        (void) s_write_file(dir, "cgroup.kill", "1");
        for (int i = 0; i < 100 && rmdir(dir) != 0 && errno == EBUSY; i++) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        lisa_free(&dir);
    }
    ctl_logcap_finish(l->logs, name, true);
    char *state = s_path(l, name, ".state");
    char *logp = s_path(l, name, ".log");
    (void) unlink(state);
    (void) unlink(logp);
    lisa_free(&state);
    lisa_free(&logp);
    zhashx_delete(l->known, name);
    return LISA_OK;
}

static int
s_wake_fd(void *impl)
{
    return ((s_local_t *) impl)->epfd;
}

static void
s_destroy(void *impl)
{
    s_local_t *l = impl;
    lisa_free(&l->controller_id);
    lisa_free(&l->state_dir);
    lisa_free(&l->bwrap);
    lisa_free(&l->agent_path);
    lisa_free(&l->sandbox_cmd);
    lisa_free(&l->gateway_socket);
    lisa_free(&l->gateway_url);
    lisa_free(&l->proxy_socket);
    lisa_free(&l->proxy_url);
    if (l->cgroup_auto)
        ctl_cgroup_release(l->cgroup_root);
    lisa_free(&l->cgroup_root);
    lisa_free(&l->bwrap_path);
    for (size_t i = 0; i < l->n_sys_args; i++)
        lisa_free(&l->sys_args[i]);
    zhashx_destroy(&l->known);
    ctl_logcap_destroy(&l->logs);
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->self_fd >= 0)
        close(l->self_fd);
    lisa_free(&l);
}

static void s_log_tail(void *impl, const char *name, char *buf, size_t len);

static const ctl_backend_ops_t s_ops = {
    .name = "local",
    .ping = s_ping,
    .start = s_start,
    .list = s_list,
    .remove = s_remove,
    .log_tail = s_log_tail,
    .destroy = s_destroy,
    .wake_fd = s_wake_fd,
    .dies_with_controller = true,
};

static void
s_log_tail(void *impl, const char *name, char *buf, size_t len)
{
    buf[0] = '\0';
    if (len < 2)
        return;
    ctl_logcap_finish(((s_local_t *) impl)->logs, name, false);
    char *logp = s_path(impl, name, ".log");
    FILE *f = fopen(logp, "r");
    lisa_free(&logp);
    if (!f)
        return;
    char tail[4096];
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : 0;
    long from =
        size > (long) sizeof tail - 1 ? size - (long) sizeof tail + 1 : 0;
    (void) fseek(f, from, SEEK_SET);
    size_t n = fread(tail, 1, sizeof tail - 1, f);
    fclose(f);
    tail[n] = '\0';
    while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == '\r'))
        tail[--n] = '\0';
    char *last = strrchr(tail, '\n');
    snprintf(buf, len, "%s", last ? last + 1 : tail);
}

lisa_rc_t
ctl_local_new(const ctl_local_cfg_t *cfg, ctl_backend_t *out)
{
    if (!cfg || !cfg->state_dir || !*cfg->state_dir || !cfg->controller_id)
        return LISA_INVALID;
    if (!(cfg->gateway_socket && *cfg->gateway_socket) &&
        !(cfg->gateway_url && *cfg->gateway_url)) {
        lisa_log_error("local: set a gateway socket or URL");
        return LISA_INVALID;
    }
    uint64_t base = cfg->sandbox_uid ? cfg->sandbox_uid : CTL_LOCAL_UID_BASE;
    uint64_t count = cfg->sandbox_uids ? cfg->sandbox_uids : CTL_LOCAL_UIDS;
    if (base + count > 4294967295ull) {
        lisa_log_error("local: the sandbox uid range passes 4294967294");
        return LISA_INVALID;
    }
    if (mkdir(cfg->state_dir, 0700) != 0 && errno != EEXIST) {
        lisa_log_error("local: cannot create %s: %s", cfg->state_dir,
                       strerror(errno));
        return LISA_ERR;
    }
    s_local_t *l = lisa_calloc(1, sizeof *l);
    l->controller_id = lisa_strdup(cfg->controller_id);
    l->state_dir = lisa_strdup(cfg->state_dir);
    l->bwrap = lisa_strdup(cfg->bwrap ? cfg->bwrap : "bwrap");
    l->agent_path = lisa_strdup(cfg->agent_path ? cfg->agent_path : "");
    l->sandbox_cmd = lisa_strdup(cfg->sandbox_cmd ? cfg->sandbox_cmd : "");
    l->gateway_socket =
        lisa_strdup(cfg->gateway_socket ? cfg->gateway_socket : "");
    l->gateway_url = lisa_strdup(cfg->gateway_url ? cfg->gateway_url : "");
    l->proxy_socket = lisa_strdup(cfg->proxy_socket ? cfg->proxy_socket : "");
    l->proxy_url = lisa_strdup(cfg->proxy_url ? cfg->proxy_url : "");
    if (cfg->cgroup_root && strcmp(cfg->cgroup_root, "auto") == 0) {
        l->cgroup_root = ctl_cgroup_auto(cfg->controller_id);
        l->cgroup_auto = l->cgroup_root != NULL;
        if (!l->cgroup_root)
            l->cgroup_root = lisa_strdup("");
    } else {
        l->cgroup_root = lisa_strdup(cfg->cgroup_root ? cfg->cgroup_root : "");
    }
    l->uid_base = cfg->sandbox_uid ? cfg->sandbox_uid : CTL_LOCAL_UID_BASE;
    l->uid_count = cfg->sandbox_uids ? cfg->sandbox_uids : CTL_LOCAL_UIDS;
    l->as_root = geteuid() == 0;
    l->uid_locks =
        l->as_root && (mkdir(S_UID_LOCKS, 0700) == 0 || errno == EEXIST);
    l->no_memory_rlimit = cfg->no_memory_rlimit;
    l->logs =
        ctl_logcap_new(cfg->log_bytes ? cfg->log_bytes : CTL_LOCAL_LOG_BYTES);
    if (!l->as_root && !*l->cgroup_root)
        lisa_log_warn("local: not running as root: every sandbox runs as "
                      "uid %u, so their process limit is shared (set "
                      "controller.cgroup_root for one of their own)",
                      (unsigned) geteuid());
    s_system_dirs(l);
    l->known = zhashx_new();
    zhashx_set_destructor(l->known, s_entry_free);
    l->self_fd = pidfd_open(getpid(), 0); /* close-on-exec */
    if (l->self_fd < 0)
        lisa_log_warn("local: pidfd_open: %s: no PID namespace per sandbox "
                      "(a controller killed while one starts can leave part "
                      "of it running)",
                      strerror(errno));
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0)
        lisa_log_warn("local: epoll_create1: %s (exits seen at ticks only)",
                      strerror(errno));
    out->ops = &s_ops;
    out->impl = l;
    return LISA_OK;
}
