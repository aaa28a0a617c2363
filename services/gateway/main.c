/*
 * lisa-gateway: read the configuration, run the gateway's loop until
 * SIGINT/SIGTERM, tear down (kept requests are answered 503).
 */
#include "gw_config.h"
#include "gw_server.h"
#include "lisa/lisa_curve.h"
#include "lisa/lisa_log.h"

#include <czmq.h>
#include <stdio.h>
#include <sys/resource.h>

/* Each open call holds two sockets (agent, engine): lift the soft
 * descriptor limit to the hard one so thousands of calls fit. */
static void
s_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            lisa_log_warn("cannot raise the open-files limit");
    }
}

int
main(int argc, char **argv)
{
    lisa_log_set_service("gateway");
    const char *lvl = getenv("LISA_LOG_LEVEL");
    lisa_log_level_t level;
    if (lvl && lisa_log_level_parse(lvl, &level) == LISA_OK)
        lisa_log_set_level(level);
    gw_config_t cfg;
    char err[512];
    lisa_rc_t rc = gw_config_load(&cfg, argc, argv, err, sizeof err);
    if (rc == LISA_AGAIN)
        return 0;
    if (rc != LISA_OK) {
        fprintf(stderr, "lisa-gateway: %s\n", err);
        return 2;
    }
    lisa_config_dump(gw_config_table, gw_config_table_len, &cfg, NULL);
    if (lisa_curve_use(cfg.curve_cert, cfg.broker_cert, err, sizeof err) !=
        LISA_OK) {
        fprintf(stderr, "lisa-gateway: %s\n", err);
        gw_config_free(&cfg);
        return 2;
    }
    s_raise_nofile();
    zsys_init();
    zsys_catch_interrupts();
    zloop_t *loop = zloop_new();
    gw_server_t *gw = gw_server_new(&cfg, loop);
    int code = 1;
    if (gw) {
        zloop_start(loop);
        lisa_log_info("gateway stopping");
        code = 0;
    }
    gw_server_destroy(&gw);
    zloop_destroy(&loop);
    gw_config_free(&cfg);
    lisa_curve_forget();
    return code;
}
