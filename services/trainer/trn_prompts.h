/*
 * trn_prompts: the agent's prompts as data (the run setting agent.prompts).
 *
 * A prompt set is a YAML file in the layout of llm-in-sandbox's benchmark
 * configurations (llm_in_sandbox/benchmark/<name>/config.yaml): the keys
 * system_prompt and instance_prompt, and the directories working_dir,
 * input_dir and output_dir (defaults /testbed, /testbed/documents,
 * /testbed); any other key (dataset, split, ...) is ignored. The set is one
 * such file, used for every data source, or a directory holding
 * <name>/config.yaml per data source: a data source takes the longest
 * <name> it starts with (case-insensitively, so math_mini takes math), else
 * the directory's own config.yaml when there is one. A name without a
 * slash that is no path here is one of the sets shipped with lisa
 * (<prefix>/share/lisa/prompts/<name>, found from the executable).
 *
 * Rendering is upstream's, so its files give its prompts exactly: the
 * three directory placeholders are replaced as plain text first, then the
 * text is formatted as Python's str.format does it ({{ and }} are braces;
 * {problem_statement} in the instance prompt, {command_docs} and {demo}
 * in the system prompt stand for the statement and for nothing); an empty
 * instance prompt is the problem statement itself. Any other placeholder,
 * a conversion or format spec, or a lone brace is refused when the set is
 * loaded, naming the file. The trainer renders each task's pair and sends
 * it in the task (TaskSpec.system_prompt / instance_prompt); the agent
 * uses it instead of its built-in prompts.
 */
#ifndef TRN_PROMPTS_H
#define TRN_PROMPTS_H

#include "lisa/lisa_rc.h"

#include <stddef.h>

typedef struct trn_prompts_t trn_prompts_t;

/* Bytes of one prompt file, and of one rendered prompt. */
#define TRN_PROMPTS_FILE_MAX   (1024u * 1024u)
#define TRN_PROMPTS_RENDER_MAX (8u * 1024u * 1024u)
/* Data sources (subdirectories) of one set. */
#define TRN_PROMPTS_MAX_SOURCES 256u

/* Loads the set at `path` (a file, a directory, or a shipped set's name)
 * and checks every template. NULL with a reason in err (no such set, a
 * file that is not YAML in that layout, a bad placeholder). */
trn_prompts_t *trn_prompts_load(const char *path, char *err, size_t errlen);

/* Frees the set; safe on NULL and twice. */
void trn_prompts_destroy(trn_prompts_t **self);

/* Number of prompt files loaded. */
size_t trn_prompts_count(const trn_prompts_t *self);

/* Renders the prompts of `data_source` for `problem` into *system and
 * *user (caller frees with lisa_free). LISA_OK; LISA_NOTFOUND when the set
 * has no prompt for the data source (the agent's built-in prompts apply);
 * LISA_TOOLARGE over TRN_PROMPTS_RENDER_MAX. */
lisa_rc_t trn_prompts_render(const trn_prompts_t *self, const char *data_source,
                             const char *problem, char **system,
                             char **user) LISA_NODISCARD;

#endif
