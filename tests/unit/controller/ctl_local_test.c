/*
 * ctl_local tests: real bubblewrap sandboxes. The first test is the usage
 * example.
 */
#include "ctl_local.h"
#include "lisa/lisa_clock.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char s_dir[64];
static char s_sock[128];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/ctl_local_XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
    chmod(s_dir, 0755);
    /* A stand-in for the gateway's socket file (bound into the sandbox). */
    snprintf(s_sock, sizeof s_sock, "%s/gw.sock", s_dir);
    FILE *f = fopen(s_sock, "w");
    fclose(f);
}

static void
s_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(ctl_local, .init = s_setup, .fini = s_teardown, .timeout = 60);

static ctl_backend_t
s_backend(const char *cmd)
{
    char state[128];
    snprintf(state, sizeof state, "%s/state", s_dir);
    ctl_local_cfg_t c = {.controller_id = "ctl-t",
                         .state_dir = state,
                         .bwrap = "bwrap",
                         .agent_path = "",
                         .sandbox_cmd = cmd,
                         .gateway_socket = s_sock};
    ctl_backend_t be;
    cr_assert_eq(ctl_local_new(&c, &be), LISA_OK);
    return be;
}

static ctl_spec_t
s_spec(const char *name, const char *rollout)
{
    ctl_spec_t sp = {.name = name,
                     .controller_id = "ctl-t",
                     .run_id = "run-1",
                     .rollout_id = rollout,
                     .attempt = 1,
                     .token = "secret-token",
                     .created_ms = lisa_clock_wall_ms(),
                     .deadline_ms = lisa_clock_wall_ms() + 60000,
                     .cpu_millis = 1000,
                     .memory_bytes = 1ull << 30,
                     .pids = 64,
                     .disk_bytes = 1 << 20};
    return sp;
}

/* Lists until the named sandbox reaches `phase` (or 10 s pass). */
static ctl_sandbox_t
s_wait_phase(ctl_backend_t *be, const char *name, ctl_phase_t phase)
{
    ctl_sandbox_t found = {0};
    for (int i = 0; i < 1000; i++) {
        ctl_sandbox_t *l = NULL;
        size_t n = 0;
        cr_assert_eq(be->ops->list(be->impl, &l, &n), LISA_OK);
        bool hit = false;
        for (size_t k = 0; k < n; k++)
            if (strcmp(l[k].name, name) == 0 && l[k].phase == phase) {
                found = l[k];
                hit = true;
            }
        lisa_free(&l);
        if (hit)
            return found;
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    cr_assert_fail("sandbox %s never reached phase %d", name, (int) phase);
    return found;
}

Test(ctl_local, usage)
{
    /* The sandbox sees only what it is given: no network, a private
     * /testbed, the gateway socket, the token in its environment. */
    ctl_backend_t be = s_backend(
        "test -S /run/lisa/gateway.sock -o -e /run/lisa/gateway.sock || "
        "exit 11; test \"$LISA_ATTEMPT_TOKEN\" = secret-token || exit 12; "
        "test \"$(pwd)\" = /testbed || exit 13; echo x > /testbed/f || exit "
        "14; touch /usr/nope 2>/dev/null && exit 15; "
        "cat /proc/net/dev | grep -q eth && exit 16; "
        "test \"$(id -u)\" != 0 || exit 17; echo sandbox-ok; exit 3");
    cr_assert_eq(be.ops->ping(be.impl), LISA_OK);
    ctl_spec_t sp = s_spec("lisa-r-1-a1", "r-1");
    cr_assert_eq(be.ops->start(be.impl, &sp), LISA_OK);
    ctl_sandbox_t sb = s_wait_phase(&be, "lisa-r-1-a1", CTL_PHASE_EXITED);
    char tail[256];
    be.ops->log_tail(be.impl, "lisa-r-1-a1", tail, sizeof tail);
    cr_assert_eq(sb.exit_code, 3, "exit %d, log: %s", sb.exit_code, tail);
    cr_assert_str_eq(tail, "sandbox-ok");
    cr_assert_str_eq(sb.rollout_id, "r-1");
    cr_assert_str_eq(sb.run_id, "run-1");
    cr_assert_eq(sb.attempt, 1);
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-1-a1"), LISA_OK);
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-1-a1"), LISA_NOTFOUND);
    be.ops->destroy(be.impl);
}

Test(ctl_local, duplicate_start_is_a_conflict)
{
    ctl_backend_t be = s_backend("sleep 30");
    ctl_spec_t sp = s_spec("lisa-r-2-a1", "r-2");
    cr_assert_eq(be.ops->start(be.impl, &sp), LISA_OK);
    cr_assert_eq(be.ops->start(be.impl, &sp), LISA_CONFLICT);
    s_wait_phase(&be, "lisa-r-2-a1", CTL_PHASE_RUNNING);
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-2-a1"), LISA_OK);
    be.ops->destroy(be.impl);
}

Test(ctl_local, remove_kills_the_whole_sandbox)
{
    ctl_backend_t be = s_backend("sleep 300 & sleep 300 & wait");
    ctl_spec_t sp = s_spec("lisa-r-3-a1", "r-3");
    cr_assert_eq(be.ops->start(be.impl, &sp), LISA_OK);
    s_wait_phase(&be, "lisa-r-3-a1", CTL_PHASE_RUNNING);
    nanosleep(&(struct timespec){0, 200000000L}, NULL);
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-3-a1"), LISA_OK);
    /* No `sleep 300` may survive (they ran as the sandbox uid). */
    nanosleep(&(struct timespec){0, 200000000L}, NULL);
    int rc = system("pgrep -u 65534 -f 'sleep 300' >/dev/null");
    cr_assert_neq(WEXITSTATUS(rc), 0, "a sandbox process survived");
    ctl_sandbox_t *l = NULL;
    size_t n = 9;
    cr_assert_eq(be.ops->list(be.impl, &l, &n), LISA_OK);
    cr_assert_eq(n, 0);
    lisa_free(&l);
    be.ops->destroy(be.impl);
}

Test(ctl_local, labels_survive_a_restart)
{
    ctl_backend_t be = s_backend("exit 0");
    ctl_spec_t sp = s_spec("lisa-r-4-a2", "r-4");
    sp.attempt = 2;
    cr_assert_eq(be.ops->start(be.impl, &sp), LISA_OK);
    s_wait_phase(&be, "lisa-r-4-a2", CTL_PHASE_EXITED);
    be.ops->destroy(be.impl);
    /* A new backend object (a restarted controller) sees the same label. */
    ctl_backend_t again = s_backend("exit 0");
    ctl_sandbox_t sb = s_wait_phase(&again, "lisa-r-4-a2", CTL_PHASE_EXITED);
    cr_assert_eq(sb.attempt, 2);
    cr_assert_eq(sb.exit_code, 0);
    cr_assert_str_eq(sb.controller_id, "ctl-t");
    again.ops->destroy(again.impl);
}

Test(ctl_local, testbed_size_is_limited)
{
    ctl_backend_t be = s_backend(
        "head -c 4000000 /dev/zero > /testbed/big 2>/dev/null && exit 0; "
        "exit 9");
    ctl_spec_t sp = s_spec("lisa-r-5-a1", "r-5");
    cr_assert_eq(be.ops->start(be.impl, &sp), LISA_OK);
    ctl_sandbox_t sb = s_wait_phase(&be, "lisa-r-5-a1", CTL_PHASE_EXITED);
    cr_assert_eq(sb.exit_code, 9, "a 4 MB file fit in a 1 MB /testbed");
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-5-a1"), LISA_OK);
    be.ops->destroy(be.impl);
}

Test(ctl_local, memory_limit_applies)
{
    ctl_backend_t be = s_backend(
        "python3 -c 'b = bytearray(800 * 1024 * 1024)' 2>/dev/null && exit "
        "0; exit 8");
    ctl_spec_t sp = s_spec("lisa-r-6-a1", "r-6");
    sp.memory_bytes = 256ull << 20;
    cr_assert_eq(be.ops->start(be.impl, &sp), LISA_OK);
    ctl_sandbox_t sb = s_wait_phase(&be, "lisa-r-6-a1", CTL_PHASE_EXITED);
    cr_assert_eq(sb.exit_code, 8, "800 MB fit under a 256 MB limit");
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-6-a1"), LISA_OK);
    be.ops->destroy(be.impl);
}

/* The uid= line of a sandbox's state file. */
static unsigned
s_state_uid(const char *name)
{
    char path[256], line[256];
    snprintf(path, sizeof path, "%s/state/%s.state", s_dir, name);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    unsigned uid = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "uid=%u", &uid) == 1)
            break;
    fclose(f);
    return uid;
}

Test(ctl_local, each_sandbox_has_a_uid_of_its_own)
{
    ctl_backend_t be = s_backend("sleep 30");
    ctl_spec_t a = s_spec("lisa-r-7-a1", "r-7");
    ctl_spec_t b = s_spec("lisa-r-8-a1", "r-8");
    cr_assert_eq(be.ops->start(be.impl, &a), LISA_OK);
    cr_assert_eq(be.ops->start(be.impl, &b), LISA_OK);
    (void) s_wait_phase(&be, "lisa-r-7-a1", CTL_PHASE_RUNNING);
    (void) s_wait_phase(&be, "lisa-r-8-a1", CTL_PHASE_RUNNING);
    unsigned ua = s_state_uid("lisa-r-7-a1"), ub = s_state_uid("lisa-r-8-a1");
    if (geteuid() == 0) {
        cr_assert_neq(ua, ub);
        cr_assert_geq(ua, CTL_LOCAL_UID_BASE);
        cr_assert_geq(ub, CTL_LOCAL_UID_BASE);
    } else {
        cr_assert_eq(ua, (unsigned) geteuid());
    }
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-7-a1"), LISA_OK);
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-8-a1"), LISA_OK);
    be.ops->destroy(be.impl);
}

Test(ctl_local, root_dev_and_system_dirs_are_read_only)
{
    ctl_backend_t be = s_backend(
        "for f in /x /dev/x /usr/x /run/lisa/x; do "
        "echo x > $f 2>/dev/null && exit 7; done; "
        "echo x > /tmp/x && echo x > /dev/shm/x && echo x > /testbed/x && "
        "exit 0; exit 8");
    ctl_spec_t sp = s_spec("lisa-r-9-a1", "r-9");
    cr_assert_eq(be.ops->start(be.impl, &sp), LISA_OK);
    ctl_sandbox_t sb = s_wait_phase(&be, "lisa-r-9-a1", CTL_PHASE_EXITED);
    cr_assert_eq(sb.exit_code, 0,
                 "exit %d (7: a read-only path was "
                 "written, 8: a tmpfs was not)",
                 sb.exit_code);
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-9-a1"), LISA_OK);
    be.ops->destroy(be.impl);
}

Test(ctl_local, output_is_capped_and_the_last_line_kept)
{
    char state[128];
    snprintf(state, sizeof state, "%s/state", s_dir);
    ctl_local_cfg_t c = {.controller_id = "ctl-t",
                         .state_dir = state,
                         .bwrap = "bwrap",
                         .agent_path = "",
                         .sandbox_cmd = "head -c 3000000 /dev/zero | tr '\\0' "
                                        "y; echo; echo END-LINE-5; exit 4",
                         .gateway_socket = s_sock,
                         .log_bytes = 16384};
    ctl_backend_t be;
    cr_assert_eq(ctl_local_new(&c, &be), LISA_OK);
    ctl_spec_t sp = s_spec("lisa-r-10-a1", "r-10");
    cr_assert_eq(be.ops->start(be.impl, &sp), LISA_OK);
    ctl_sandbox_t sb = s_wait_phase(&be, "lisa-r-10-a1", CTL_PHASE_EXITED);
    cr_assert_eq(sb.exit_code, 4);
    char tail[256];
    be.ops->log_tail(be.impl, "lisa-r-10-a1", tail, sizeof tail);
    cr_assert_str_eq(tail, "END-LINE-5");
    char path[256];
    snprintf(path, sizeof path, "%s/lisa-r-10-a1.log", state);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_leq(st.st_size, 16384 + 256, "%lld bytes kept",
                  (long long) st.st_size);
    cr_assert_eq(be.ops->remove(be.impl, "lisa-r-10-a1"), LISA_OK);
    be.ops->destroy(be.impl);
}
