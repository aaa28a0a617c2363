/*
 * Fuzz target: the agent's handling of a model's tool call, name and
 * JSON arguments as the model produced them. The first byte picks the
 * function name (the three tools, or an unknown one); the rest is the
 * arguments string. Commands never run: the shell is /bin/true, which
 * ignores its arguments. The editor works inside a private temporary
 * directory that is emptied afterwards; since it accepts absolute paths,
 * an editor call that parses as an object and is not a `view` gets its
 * path replaced by a file inside that directory before the call (a view
 * only reads). Every call must give an
 * observation (bad arguments are observations too). Never a crash, a
 * leak or an out-of-bounds access.
 */
#include "agt_tools.h"
#include "lisa/lisa_mem.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static agt_tools_t *s_tools;
static char s_root[64];

static void
s_cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_root);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup of %s failed\n", s_root);
}

static void
s_setup(void)
{
    snprintf(s_root, sizeof s_root, "/tmp/lisa-fuzz-tools-XXXXXX");
    if (!mkdtemp(s_root))
        abort();
    agt_tools_cfg_t cfg = {
        .root = s_root,
        .cmd_timeout_ms = 2000,
        .capture_bytes = 1u << 16,
        .obs_max_bytes = 1u << 14,
        .head_lines = 40,
        .tail_lines = 40,
        .clip_chars = 10000,
        .max_file_bytes = 1u << 16,
        .grace_ms = 100,
        .cancel = NULL,
        .shell = "/bin/true",
    };
    s_tools = agt_tools_new(&cfg);
    if (!s_tools)
        abort();
    atexit(s_cleanup);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *names[] = {"execute_bash", "str_replace_editor",
                                  "submit", "no_such_tool", NULL};
    if (!s_tools)
        s_setup();
    if (size == 0)
        return 0;
    const char *name = names[data[0] % 5];
    char *args = lisa_malloc(size);
    memcpy(args, data + 1, size - 1);
    args[size - 1] = '\0';
    if (data[0] % 5 == 1) {
        json_t *o = json_loads(args, JSON_REJECT_DUPLICATES, NULL);
        const char *cmd = json_string_value(json_object_get(o, "command"));
        if (json_is_object(o) && !(cmd && strcmp(cmd, "view") == 0)) {
            json_object_set_new(o, "path", json_string("f.txt"));
            char *safe = json_dumps(o, JSON_COMPACT);
            if (safe) {
                lisa_free(&args);
                args = lisa_strdup(safe);
                free(safe);
            }
        }
        json_decref(o);
    }
    agt_tool_status_t st;
    char *obs = agt_tools_call(s_tools, name, args, &st);
    if (!obs)
        abort(); /* every call has an observation */
    lisa_free(&obs);
    lisa_free(&args);
    return 0;
}
