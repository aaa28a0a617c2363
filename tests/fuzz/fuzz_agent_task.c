/*
 * Fuzz target: the agent's parsing of the task the gateway hands it (a
 * TaskView JSON object) and of the file paths in it. The bytes are loaded
 * as JSON; an object goes through agt_task_parse, and every checked file
 * path through agt_task_path_ok again. Nothing is written to disk. Never
 * a crash, a leak or an out-of-bounds access.
 */
#include "agt_task.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *view =
        json_loadb((const char *) data, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!view)
        return 0;
    agt_task_t task;
    char err[256];
    if (agt_task_parse(view, &task, err, sizeof err) == LISA_OK) {
        for (size_t i = 0; i < json_array_size(task.files); i++) {
            json_t *f = json_array_get(task.files, i);
            const char *p = json_string_value(json_object_get(f, "path"));
            if (!p || !agt_task_path_ok(p))
                abort(); /* parse accepted a path the check refuses */
        }
        agt_task_clear(&task);
    }
    json_decref(view);
    return 0;
}
