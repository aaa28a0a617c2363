/*
 * ctl_cgroup: plain file writes under /sys/fs/cgroup. The probe's child
 * only opens, writes and exits between fork and _exit.
 */
#include "ctl_cgroup.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_BASE "/sys/fs/cgroup"

static bool
s_put(const char *dir, const char *file, const char *val)
{
    char path[4352];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t w = write(fd, val, strlen(val));
    int c = close(fd);
    return w == (ssize_t) strlen(val) && c == 0;
}

/* True when the whitespace-separated list in dir/file names all three. */
static bool
s_has_all(const char *dir, const char *file)
{
    char path[4352], buf[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    static const char *want[] = {"memory", "pids", "cpu"};
    for (size_t i = 0; i < 3; i++) {
        bool found = false;
        char copy[512], *save = NULL;
        memcpy(copy, buf, n + 1);
        for (char *t = strtok_r(copy, " \n", &save); t && !found;
             t = strtok_r(NULL, " \n", &save))
            found = strcmp(t, want[i]) == 0;
        if (!found)
            return false;
    }
    return true;
}

/* A forked process can join `dir`. */
static bool
s_can_join(const char *dir)
{
    char path[4352];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY);
        _exit(fd >= 0 && write(fd, "0", 1) == 1 ? 0 : 1);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return false;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static bool
s_probe(const char *dir)
{
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/probe-%ld", dir, (long) getpid());
    if (mkdir(probe, 0755) != 0 && errno != EEXIST)
        return false;
    bool ok = s_put(probe, "memory.max", "max") &&
              s_put(probe, "pids.max", "max") &&
              s_put(probe, "cpu.max", "max 100000") && s_can_join(probe);
    (void) rmdir(probe);
    return ok;
}

char *
ctl_cgroup_auto(const char *controller_id)
{
    const char *why = NULL;
    if (geteuid() != 0)
        why = "not root";
    else if (access(S_BASE "/cgroup.controllers", R_OK) != 0)
        why = "no cgroup v2 hierarchy at " S_BASE;
    else if (!s_has_all(S_BASE, "cgroup.controllers"))
        why = "memory, pids or cpu controller missing";
    if (why) {
        lisa_log_info("local: no cgroup for sandboxes (%s): a uid each and "
                      "rlimits",
                      why);
        return NULL;
    }
    (void) s_put(S_BASE, "cgroup.subtree_control", "+memory +pids +cpu");
    char name[160];
    size_t k = 0;
    for (const char *p = controller_id; *p && k < 128; p++)
        name[k++] =
            (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'
                ? *p
                : '_';
    name[k] = '\0';
    char buf[sizeof S_BASE + sizeof name + 8];
    snprintf(buf, sizeof buf, "%s/lisa-%s", S_BASE, name);
    char *dir = lisa_strdup(buf);
    bool made = mkdir(dir, 0755) == 0;
    if (!made && errno != EEXIST)
        why = "cannot make its directory";
    else if (!s_has_all(S_BASE, "cgroup.subtree_control"))
        why = "controllers not delegated below the root";
    else if (!s_put(dir, "cgroup.subtree_control", "+memory +pids +cpu"))
        why = "cannot enable controllers for its children";
    else if (!s_probe(dir))
        why = "a probe cgroup did not take the limits or a process";
    if (why) {
        lisa_log_info("local: no cgroup for sandboxes (%s: %s): a uid each "
                      "and rlimits",
                      dir, why);
        if (made)
            (void) rmdir(dir);
        lisa_free(&dir);
        return NULL;
    }
    lisa_log_info("local: sandboxes get cgroups under %s", dir);
    return dir;
}

void
ctl_cgroup_release(const char *dir)
{
    if (dir && *dir)
        (void) rmdir(dir);
}
