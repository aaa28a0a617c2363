/*
 * lisa-agent: the LLM-in-Sandbox agent that runs inside each sandbox.
 * Makes itself non-dumpable before anything reads the attempt token (no
 * process of the same uid may then read its memory, environment or
 * descriptors through /proc, nor ptrace it), reads its configuration
 * (the gateway endpoint and the token), hides the token from the
 * processes it starts, runs one attempt and exits with a status from
 * agt_exit.h. The commands' own confinement is agt_jail's.
 */
#include "agt_config.h"
#include "agt_exit.h"
#include "agt_run.h"
#include "lisa/lisa_log.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

/* Removes the token from the environment and overwrites its bytes, so
 * neither the model's commands nor /proc/<pid>/environ can read it. */
static void
s_scrub_env(const char *name)
{
    char *v = getenv(name);
    if (v)
        memset(v, 'x', strlen(v));
    unsetenv(name);
}

int
main(int argc, char **argv)
{
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        perror("prctl(PR_SET_DUMPABLE)");
        return AGT_EXIT_INTERNAL;
    }
    lisa_log_set_service("agent");
    agt_config_t cfg;
    char err[256];
    lisa_rc_t rc = agt_config_load(&cfg, argc, argv, stdout, err, sizeof err);
    if (rc == LISA_AGAIN) { /* --help */
        agt_config_clear(&cfg);
        return AGT_EXIT_OK;
    }
    if (rc != LISA_OK) {
        lisa_log_error("config: %s", err);
        agt_config_clear(&cfg);
        return AGT_EXIT_USAGE;
    }
    s_scrub_env("LISA_ATTEMPT_TOKEN");
    if (agt_config_validate(&cfg, err, sizeof err) != LISA_OK) {
        lisa_log_error("config: %s", err);
        agt_config_clear(&cfg);
        return AGT_EXIT_USAGE;
    }
    agt_config_dump(&cfg);
    signal(SIGPIPE, SIG_IGN);
    int code = agt_run(&cfg);
    agt_config_clear(&cfg);
    return code;
}
