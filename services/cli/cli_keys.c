/*
 * cli_keys: `lisa keys DIR`, a fresh CURVE key set for one deployment
 * (lisa_curve_keygen has the layout).
 */
#include "cli.h"
#include "lisa/lisa_curve.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>

int
cli_keys(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        bool help = argc == 2 && (strcmp(argv[1], "--help") == 0 ||
                                  strcmp(argv[1], "-h") == 0);
        FILE *o = help ? stdout : stderr;
        fprintf(o, "usage: lisa keys DIR\n"
                   "Writes a CURVE key set: DIR/broker.cert and "
                   "broker.cert_secret (the broker's pair),\n"
                   "DIR/ROLE.cert_secret for each role (controller, gateway, "
                   "trainer, reward,\n"
                   "operator) and DIR/clients/ROLE.cert (the public "
                   "certificates the broker admits).\n");
        return help ? 0 : 2;
    }
    zsys_init();
    zsys_set_logstream(NULL);
    char err[300] = "";
    if (lisa_curve_keygen(argv[1], err, sizeof err) != LISA_OK) {
        fprintf(stderr, "lisa keys: %s\n", err);
        return 1;
    }
    printf("%s\n", argv[1]);
    return 0;
}
