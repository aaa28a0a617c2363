/*
 * agt_exit: names and classes of exit codes.
 */
#include "agt_exit.h"

#include <stddef.h>

static const struct {
    int code;
    const char *name;
    int retryable;
} s_table[] = {
    {AGT_EXIT_OK, "ok", 0},
    {AGT_EXIT_INTERNAL, "internal", 1},
    {AGT_EXIT_USAGE, "usage", 1},
    {AGT_EXIT_GATEWAY, "gateway", 1},
    {AGT_EXIT_UNAUTHORIZED, "unauthorized", 1},
    {AGT_EXIT_TASK, "task", 0},
    {AGT_EXIT_TESTBED, "testbed", 1},
    {AGT_EXIT_MODEL, "model", 1},
    {AGT_EXIT_RESULT, "result", 1},
    {AGT_EXIT_CANCELLED, "cancelled", 0},
    {AGT_EXIT_ERROR_POSTED, "error_posted", 0},
};

const char *
agt_exit_name(int code)
{
    for (size_t i = 0; i < sizeof s_table / sizeof s_table[0]; i++)
        if (s_table[i].code == code)
            return s_table[i].name;
    return "unknown";
}

int
agt_exit_retryable(int code)
{
    for (size_t i = 0; i < sizeof s_table / sizeof s_table[0]; i++)
        if (s_table[i].code == code)
            return s_table[i].retryable;
    return 1;
}
