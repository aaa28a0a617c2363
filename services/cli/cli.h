/*
 * cli: the `lisa` command line's subcommand table.
 *
 * Every subcommand is a function  int fn(int argc, char **argv)  declared
 * here through cli_commands.def; main.c dispatches on argv[1].
 */
#ifndef CLI_H
#define CLI_H

#define CLI_COMMAND(name, fn, help) int fn(int argc, char **argv);
#include "cli_commands.def"
#undef CLI_COMMAND

#endif
