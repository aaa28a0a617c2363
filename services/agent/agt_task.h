/*
 * agt_task: the task as the gateway hands it to the agent (a TaskView,
 * docs/agent-api.md), checked, and its input files placed in the sandbox.
 *
 * The task is untrusted input like any other: every field has a type and
 * a bound, and a file path must be relative, free of ".." components and
 * control characters, so no file lands outside <root>/documents. The
 * answer file is read back with a size bound.
 */
#ifndef AGT_TASK_H
#define AGT_TASK_H

#include "lisa/lisa_rc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The fields the agent uses (a parsed record; strings owned). */
typedef struct {
    char *rollout_id;
    unsigned attempt;
    char *data_source;
    char *problem_statement;
    char *qa_type; /* extra_info.qa_type or NULL */
    json_t *files; /* the checked files array (owned ref) */
    size_t n_files;
    unsigned max_turns; /* 0: not given */
    unsigned max_context_tokens;
    unsigned max_tokens_per_call;
    uint64_t deadline_ms; /* absolute, Unix epoch; 0: none */
    int64_t time_left_ms; /* relative to the answer; -1: not given */
    double temperature;   /* < 0: not given */
    double top_p;         /* <= 0: not given */
    /* the run's prompts (task.prompt, rendered by the trainer from
     * agent.prompts): used instead of the built-in ones; NULL: not given */
    char *system_prompt, *user_prompt;
} agt_task_t;

/* Parses and checks a TaskView object into *task (free with
 * agt_task_clear). LISA_INVALID with a reason in err on bad input. */
lisa_rc_t agt_task_parse(json_t *view, agt_task_t *task, char *err,
                         size_t errlen) LISA_NODISCARD;

/* True when `path` may be written below the documents directory. */
bool agt_task_path_ok(const char *path);

/* Writes the task's files below <root>/documents/ (created). LISA_ERR with
 * a reason in err when the file system refuses. */
lisa_rc_t agt_task_write_files(const agt_task_t *task, const char *root,
                               char *err, size_t errlen) LISA_NODISCARD;

/* Reads at most max bytes of <root>/answer.txt, cleaned to UTF-8, into
 * *answer (caller frees; "" when missing). *truncated when longer, *found
 * when the file exists. */
lisa_rc_t agt_task_read_answer(const char *root, size_t max, char **answer,
                               bool *truncated, bool *found) LISA_NODISCARD;

/* Frees the contents of *task. */
void agt_task_clear(agt_task_t *task);

#endif
