/*
 * lisa: the operator's command line. Dispatches to one subcommand.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} s_command_t;

static const s_command_t s_commands[] = {
#define CLI_COMMAND(name, fn, help) {name, fn, help},
#include "cli_commands.def"
#undef CLI_COMMAND
};

#define S_NCOMMANDS (sizeof s_commands / sizeof s_commands[0])

static void
s_usage(FILE *out)
{
    fprintf(out, "usage: lisa COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < S_NCOMMANDS; i++)
        fprintf(out, "  %-14s %s\n", s_commands[i].name, s_commands[i].help);
    fprintf(out, "\n`lisa COMMAND --help` describes one command.\n");
}

int
main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        s_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < S_NCOMMANDS; i++)
        if (strcmp(argv[1], s_commands[i].name) == 0)
            return s_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "lisa: unknown command '%s'\n\n", argv[1]);
    s_usage(stderr);
    return 2;
}
