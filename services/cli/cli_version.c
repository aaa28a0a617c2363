/*
 * cli_version: `lisa version`.
 */
#include "cli.h"
#include "lisa.pb-c.h"

#include <stdio.h>

int
cli_version(int argc, char **argv)
{
    (void) argc;
    (void) argv;
    printf("lisa 0.1.0 (protocol 1)\n");
    return 0;
}
