/*
 * trn_ranks: this process's rank, and the ranks it launches
 * (see trn_ranks.h).
 *
 * The launched ranks are children of this process. Each one asks the
 * kernel to TERM it when its launcher dies (PR_SET_PDEATHSIG), and checks
 * right after the fork that the launcher did not die before that, so a
 * rank never runs on alone. The launcher notices a child that exits early
 * through trn_ranks_alive, which trn_group calls inside its waits; at the
 * end trn_ranks_reap gives the children time to leave after the group's
 * STOP, then ends those still there.
 */
#include "trn_ranks.h"

#include "lisa/lisa_config.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_group.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A launched rank that cannot start reports this exit status (the
 * trainer's "engine" failure). */
#define S_EXIT_LAUNCH 4

struct trn_ranks {
    pid_t *pids; /* ranks this process launched; -1 once collected */
    int n;
    bool gone; /* one exited before the end */
};

/* The node-level settings (trainer.nnodes x trainer.n_gpus_per_node) of
 * a launcher: the world, its first rank and how many it stands for. */
static lisa_rc_t
s_plan_node(const trn_run_cfg_t *cfg, trn_ranks_plan_t *p, char *err,
            size_t errlen)
{
    if (cfg->node_rank < 0 || cfg->node_rank >= cfg->nodes ||
        cfg->nodes * cfg->gpus_per_node > TRN_GROUP_MAX_WORLD) {
        snprintf(err, errlen,
                 "bad trainer.nnodes / trainer.node_rank / "
                 "trainer.n_gpus_per_node");
        return LISA_INVALID;
    }
    p->world = cfg->nodes * cfg->gpus_per_node;
    p->rank = cfg->node_rank * cfg->gpus_per_node;
    p->launch = cfg->gpus_per_node;
    if (cfg->world > 1 && cfg->world != p->world) {
        snprintf(err, errlen,
                 "trainer.world_size %lld is not trainer.nnodes x "
                 "trainer.n_gpus_per_node (%lld)",
                 (long long) cfg->world, (long long) p->world);
        return LISA_INVALID;
    }
    return LISA_OK;
}

lisa_rc_t
trn_ranks_plan(const trn_run_cfg_t *cfg, bool train, trn_ranks_plan_t *p,
               char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->spawned = getenv("LISA_TRN_SPAWNED") != NULL;
    if (p->spawned) {
        const char *lr = getenv("LISA_TRN_LOCAL_RANK");
        int64_t v = 0;
        if (lr && lisa_config_parse_int(lr, 0, TRN_GROUP_MAX_WORLD - 1, &v) !=
                      LISA_OK) {
            snprintf(err, errlen, "bad LISA_TRN_LOCAL_RANK '%.32s'", lr);
            return LISA_INVALID;
        }
        p->local_rank = (int) v;
    }
    p->world = cfg->world;
    p->rank = cfg->rank;
    p->launch = 1;
    if (cfg->gpus_per_node < 1 || cfg->nodes < 1) {
        snprintf(err, errlen,
                 "trainer.n_gpus_per_node and trainer.nnodes "
                 "must be at least 1");
        return LISA_INVALID;
    }
    if (!p->spawned && (cfg->gpus_per_node > 1 || cfg->nodes > 1) &&
        s_plan_node(cfg, p, err, errlen) != LISA_OK)
        return LISA_INVALID;
    if (p->world < 1 || p->world > TRN_GROUP_MAX_WORLD || p->rank < 0 ||
        p->rank >= p->world) {
        snprintf(err, errlen, "bad rank %lld of world size %lld",
                 (long long) p->rank, (long long) p->world);
        return LISA_INVALID;
    }
    if (p->world > 1 && !train) {
        snprintf(err, errlen,
                 "serve runs one rank; data parallel is for train");
        return LISA_INVALID;
    }
    if (p->world > 1 && p->launch == 1 && !p->spawned &&
        (!cfg->bootstrap || !*cfg->bootstrap) && p->rank > 0) {
        snprintf(err, errlen,
                 "rank %lld needs trainer.bootstrap (rank 0's "
                 "tcp://HOST:PORT)",
                 (long long) p->rank);
        return LISA_INVALID;
    }
    return LISA_OK;
}

trn_ranks_t *
trn_ranks_new(void)
{
    return lisa_calloc(1, sizeof(trn_ranks_t));
}

void
trn_ranks_destroy(trn_ranks_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    trn_ranks_t *self = *self_p;
    if (self->n)
        (void) trn_ranks_reap(self, 0);
    lisa_free(&self->pids);
    lisa_free(self_p);
}

int
trn_ranks_count(const trn_ranks_t *self)
{
    return self ? self->n : 0;
}

int
trn_ranks_alive(void *ctx)
{
    trn_ranks_t *k = ctx;
    for (int i = 0; i < k->n; i++) {
        int st = 0;
        if (k->pids[i] > 0 && waitpid(k->pids[i], &st, WNOHANG) == k->pids[i]) {
            lisa_log_error("rank launched as pid %ld exited (%s %d)",
                           (long) k->pids[i],
                           WIFEXITED(st) ? "status" : "signal",
                           WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            k->pids[i] = -1;
            k->gone = true;
        }
    }
    return !k->gone;
}

/* Collects the ranks that have exited; returns how many are left and
 * adds those that failed to *failed. */
static int
s_collect(trn_ranks_t *k, int *failed)
{
    int left = 0;
    for (int i = 0; i < k->n; i++) {
        int st = 0;
        if (k->pids[i] <= 0)
            continue;
        if (waitpid(k->pids[i], &st, WNOHANG) == k->pids[i]) {
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                (*failed)++;
            k->pids[i] = -1;
        } else {
            left++;
        }
    }
    return left;
}

int
trn_ranks_reap(trn_ranks_t *k, int grace_ms)
{
    int failed = k->gone ? 1 : 0;
    struct timespec tick = {.tv_sec = 0, .tv_nsec = 50 * 1000000L};
    for (int phase = 0; phase < 3; phase++) {
        for (int waited = 0; waited < grace_ms; waited += 50) {
            if (!s_collect(k, &failed))
                return failed;
            nanosleep(&tick, NULL);
        }
        if (!s_collect(k, &failed))
            return failed;
        for (int i = 0; i < k->n; i++) /* then TERM, then KILL */
            if (k->pids[i] > 0)
                kill(k->pids[i], phase == 0 ? SIGTERM : SIGKILL);
        grace_ms = 5000;
    }
    return failed;
}

/* In the child after fork: the rank's environment, then this program
 * again. Never returns. */
_Noreturn static void
s_exec_rank(pid_t parent, char **av, const char *e_local, const char *e_dev)
{
    /* the rank ends with its launcher, whatever kills it */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(S_EXIT_LAUNCH);
    setenv("LISA_TRN_SPAWNED", "1", 1);
    setenv("LISA_TRN_LOCAL_RANK", e_local, 1);
    setenv("LISA_CUDA_DEVICE", e_dev, 1);
    execv("/proc/self/exe", av);
    _exit(127);
}

lisa_rc_t
trn_ranks_spawn(trn_ranks_t *k, int argc, char **argv, int first, int n,
                int world, const char *endpoint)
{
    const char *dev = getenv("LISA_CUDA_DEVICE");
    int64_t base = 0;
    if (dev && *dev && lisa_config_parse_int(dev, 0, 4096, &base) != LISA_OK) {
        lisa_log_error("cannot launch ranks: bad LISA_CUDA_DEVICE '%.32s'",
                       dev);
        return LISA_ERR;
    }
    if (n < 1 || k->pids)
        return n < 1 ? LISA_OK : LISA_ERR;
    k->pids = lisa_calloc((size_t) n, sizeof *k->pids);
    pid_t parent = getpid();
    for (int i = 1; i < n; i++) {
        char a_rank[64], a_world[64], a_boot[700], e_dev[32], e_local[32];
        snprintf(a_rank, sizeof a_rank, "trainer.rank=%d", first + i);
        snprintf(a_world, sizeof a_world, "trainer.world_size=%d", world);
        snprintf(a_boot, sizeof a_boot, "trainer.bootstrap=%s", endpoint);
        snprintf(e_dev, sizeof e_dev, "%lld", (long long) base + i);
        snprintf(e_local, sizeof e_local, "%d", i);
        char **av = lisa_calloc((size_t) argc + 6, sizeof *av);
        for (int j = 0; j < argc; j++)
            av[j] = argv[j];
        av[argc] = a_rank;
        av[argc + 1] = a_world;
        av[argc + 2] = a_boot;
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0)
            s_exec_rank(parent, av, e_local, e_dev);
        lisa_free(&av);
        if (pid < 0) {
            lisa_log_error("cannot launch rank %d: %s", first + i,
                           strerror(errno));
            return LISA_ERR;
        }
        k->pids[k->n++] = pid;
        lisa_log_info("launched rank %d as pid %ld on GPU %lld", first + i,
                      (long) pid, (long long) base + i);
    }
    return LISA_OK;
}
