/*
 * lisa-broker: the rollout broker. Reads its config, starts the server,
 * runs until SIGINT/SIGTERM, tears down.
 */
#include "brk_config.h"
#include "brk_server.h"
#include "lisa/lisa_log.h"

#include <czmq.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static volatile sig_atomic_t s_stop = 0;

/* Writes "name=endpoint" lines to path atomically (tests read it). */
static int
s_write_ports(const brk_server_t *srv, const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    const char *names[] = {"rpc", "spans", "events", "workers"};
    for (size_t i = 0; i < 4; i++)
        fprintf(f, "%s=%s\n", names[i], brk_server_endpoint(srv, names[i]));
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

int
main(int argc, char **argv)
{
    brk_config_t cfg;
    lisa_rc_t rc = brk_config_load(&cfg, argc, argv, stdout, stderr);
    if (rc == LISA_AGAIN)
        return 0;
    if (rc != LISA_OK)
        return 2;
    lisa_log_set_service("broker");
    lisa_log_level_t level;
    if (lisa_log_level_parse(cfg.log_level, &level) == LISA_OK)
        lisa_log_set_level(level);
    zsys_init();
    zsys_set_logstream(NULL);
    if (lisa_log_enabled(LISA_LOG_DEBUG))
        brk_config_dump(&cfg, stderr);

    int code = 1;
    brk_server_t *srv = brk_server_new(&cfg);
    if (!srv)
        goto out;
    if (cfg.ports_file[0] && s_write_ports(srv, cfg.ports_file) != 0) {
        lisa_log_error("cannot write ports file '%s'", cfg.ports_file);
        goto out;
    }
    code = brk_server_run(srv, &s_stop) == LISA_OK ? 0 : 1;
    lisa_log_info("broker stopping");
out:
    brk_server_destroy(&srv);
    brk_config_free(&cfg);
    return code;
}
