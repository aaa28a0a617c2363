/*
 * agt_editor: the str_replace_editor tool (view / create / str_replace /
 * insert) with the recipe's semantics, minus its gotcha: `view` works on
 * every text file, not only *.py and *.rst, and directory listings show
 * every non-hidden entry (documents are .txt files).
 *
 * Relative paths are taken from the working root (/testbed in the
 * sandbox). The model owns its sandbox, so absolute paths are allowed;
 * bounds protect the agent itself: files above max_file_bytes are refused,
 * every answer is clipped at clip_chars with a note on how to look further.
 * Results are observation text for the model; errors start with "ERROR:".
 */
#ifndef AGT_EDITOR_H
#define AGT_EDITOR_H

#include <stdbool.h>
#include <stddef.h>

typedef struct agt_editor agt_editor_t;

/* One tool call's arguments (strings borrowed; NULL when absent). */
typedef struct {
    const char *command; /* view | create | str_replace | insert */
    const char *path;
    const char *file_text; /* create */
    const char *old_str;   /* str_replace */
    const char *new_str;   /* str_replace (default ""), insert */
    bool has_insert_line;
    long insert_line; /* insert after this line; 0: at the top */
    bool has_view_range;
    long view_start; /* 1-based */
    long view_end;   /* inclusive; -1: to the end */
} agt_editor_req_t;

/* New editor working under `root`; clip_chars 0 -> 10000, max_file_bytes
 * 0 -> 8 MiB. */
agt_editor_t *agt_editor_new(const char *root, size_t clip_chars,
                             size_t max_file_bytes);
/* Frees *ed and sets it to NULL; safe on NULL. */
void agt_editor_destroy(agt_editor_t **ed);

/* Runs one request; returns the observation text (caller frees). Sets
 * *failed (may be NULL) when the text is an error. */
char *agt_editor_exec(agt_editor_t *ed, const agt_editor_req_t *req,
                      bool *failed);

#endif
