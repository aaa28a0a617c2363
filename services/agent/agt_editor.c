/*
 * agt_editor: file edits done in memory and written back whole (write to a
 * temporary file in the same directory, then rename), so a crash never
 * leaves a half-written file.
 */
#include "agt_editor.h"

#include "agt_text.h"
#include "lisa/lisa_mem.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_SNIPPET_LINES 4   /* lines shown around an edit */
#define S_LIST_MAX      400 /* entries of a directory listing */

struct agt_editor {
    char *root;
    size_t clip;
    size_t max_file;
};

agt_editor_t *
agt_editor_new(const char *root, size_t clip_chars, size_t max_file_bytes)
{
    if (!root || !*root)
        return NULL;
    agt_editor_t *ed = lisa_calloc(1, sizeof *ed);
    ed->root = lisa_strdup(root);
    ed->clip = clip_chars ? clip_chars : 10000;
    ed->max_file = max_file_bytes ? max_file_bytes : 8u * 1024u * 1024u;
    return ed;
}

void
agt_editor_destroy(agt_editor_t **ed)
{
    if (!ed || !*ed)
        return;
    lisa_free(&(*ed)->root);
    lisa_free(ed);
}

static char *s_err(bool *failed, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static char *
s_err(bool *failed, const char *fmt, ...)
{
    if (failed)
        *failed = true;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(sizeof msg + 16);
    lisa_buf_puts(&sb, "ERROR: ");
    lisa_buf_puts(&sb, msg);
    return lisa_buf_take(&sb);
}

/* Full path of `path` (relative ones below the root). Caller frees. */
static char *
s_resolve(const agt_editor_t *ed, const char *path)
{
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(8192);
    if (path[0] != '/') {
        lisa_buf_puts(&sb, ed->root);
        lisa_buf_puts(&sb, "/");
    }
    lisa_buf_puts(&sb, path);
    return lisa_buf_take(&sb);
}

typedef enum {
    S_READ_OK,
    S_READ_MISSING,
    S_READ_BIG,
    S_READ_BINARY,
    S_READ_ERR
} s_read_t;

static s_read_t
s_read_file(const char *full, size_t max, char **data, size_t *len)
{
    FILE *f = fopen(full, "rb");
    if (!f)
        return errno == ENOENT ? S_READ_MISSING : S_READ_ERR;
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(max);
    char buf[16384];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        lisa_buf_put(&sb, buf, n);
        if (sb.full)
            break;
    }
    bool err = ferror(f) != 0;
    fclose(f);
    if (sb.full || err) {
        lisa_buf_free(&sb);
        return err ? S_READ_ERR : S_READ_BIG;
    }
    if (sb.len && memchr(sb.p, '\0', sb.len)) {
        lisa_buf_free(&sb);
        return S_READ_BINARY;
    }
    *len = sb.len;
    *data = lisa_buf_take(&sb);
    return S_READ_OK;
}

static int
s_mkdirs(const char *full)
{
    char *dup = lisa_strdup(full);
    for (char *p = dup + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dup, 0755) != 0 && errno != EEXIST) {
            lisa_free(&dup);
            return -1;
        }
        *p = '/';
    }
    lisa_free(&dup);
    return 0;
}

/* Writes atomically (temp file + rename). Returns 0 or -1 with errno. */
static int
s_write_file(const char *full, const char *data, size_t len)
{
    size_t n = strlen(full) + 32;
    char *tmp = lisa_malloc(n);
    snprintf(tmp, n, "%s.agt-tmp-%ld", full, (long) getpid());
    FILE *f = fopen(tmp, "wb");
    int rc = -1;
    if (f) {
        size_t w = len ? fwrite(data, 1, len, f) : 0;
        int cl = fclose(f);
        if (w == len && cl == 0 && rename(tmp, full) == 0)
            rc = 0;
        else
            (void) unlink(tmp);
    }
    lisa_free(&tmp);
    return rc;
}

static char *
s_read_error(bool *failed, s_read_t r, const char *path, size_t max)
{
    char big[32];
    snprintf(big, sizeof big, "%zu", max);
    switch (r) {
    case S_READ_MISSING:
        return s_err(failed, "The path %s does not exist.", path);
    case S_READ_BIG:
        return s_err(failed,
                     "%s is larger than %s bytes; inspect it with grep -n, "
                     "head, tail or sed through execute_bash.",
                     path, big);
    case S_READ_BINARY:
        return s_err(failed,
                     "%s looks like a binary file; inspect it through "
                     "execute_bash (file, xxd, python3).",
                     path);
    default:
        return s_err(failed, "Cannot read %s.", path);
    }
}

/* Byte offset of the start of 1-based line `line` (len when past the end). */
static size_t
s_line_offset(const char *s, size_t len, long line)
{
    size_t i = 0;
    for (long l = 1; l < line && i < len; i++)
        if (s[i] == '\n')
            l++;
    return i;
}

/* 1-based line number of byte offset `off`. */
static long
s_line_of(const char *s, size_t off)
{
    long l = 1;
    for (size_t i = 0; i < off; i++)
        if (s[i] == '\n')
            l++;
    return l;
}

/* Numbered lines [from, to] of s (clamped), clipped. */
static char *
s_snippet(const agt_editor_t *ed, const char *s, size_t len, long from, long to)
{
    long lines = (long) agt_text_count_lines(s, len);
    if (from < 1)
        from = 1;
    if (to > lines)
        to = lines;
    if (to < from)
        return lisa_strdup("");
    size_t a = s_line_offset(s, len, from);
    size_t b = s_line_offset(s, len, to + 1);
    char *num = agt_text_number(s + a, b - a, from, ed->clip + 4096);
    char *clip = agt_text_clip(num, ed->clip);
    lisa_free(&num);
    return clip;
}

static char *
s_view_dir(const agt_editor_t *ed, const char *path, const char *full)
{
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(ed->clip + 4096);
    lisa_buf_printf(&sb,
                    "Files and directories up to 2 levels deep in %s, hidden "
                    "items left out:\n",
                    path);
    lisa_buf_printf(&sb, "%s\n", full);
    unsigned shown = 0;
    DIR *d = opendir(full);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && shown < S_LIST_MAX) {
        if (e->d_name[0] == '.')
            continue;
        lisa_buf_printf(&sb, "%s/%s\n", full, e->d_name);
        shown++;
        size_t n = strlen(full) + strlen(e->d_name) + 2;
        char *sub = lisa_malloc(n);
        snprintf(sub, n, "%s/%s", full, e->d_name);
        struct stat stt;
        if (stat(sub, &stt) == 0 && S_ISDIR(stt.st_mode)) {
            DIR *d2 = opendir(sub);
            struct dirent *e2;
            while (d2 && (e2 = readdir(d2)) != NULL && shown < S_LIST_MAX) {
                if (e2->d_name[0] == '.')
                    continue;
                lisa_buf_printf(&sb, "%s/%s\n", sub, e2->d_name);
                shown++;
            }
            if (d2)
                closedir(d2);
        }
        lisa_free(&sub);
    }
    if (d)
        closedir(d);
    if (shown >= S_LIST_MAX)
        lisa_buf_printf(&sb, "<listing stopped after %d entries>\n",
                        S_LIST_MAX);
    char *all = lisa_buf_take(&sb);
    char *clip = agt_text_clip(all, ed->clip);
    lisa_free(&all);
    return clip;
}

static char *
s_view(agt_editor_t *ed, const agt_editor_req_t *req, const char *full,
       bool *failed)
{
    struct stat st;
    if (stat(full, &st) != 0)
        return s_err(failed, "The path %s does not exist.", req->path);
    if (S_ISDIR(st.st_mode)) {
        if (req->has_view_range)
            return s_err(failed,
                         "view_range is not allowed when %s is a "
                         "directory.",
                         req->path);
        return s_view_dir(ed, req->path, full);
    }
    char *data = NULL;
    size_t len = 0;
    s_read_t r = s_read_file(full, ed->max_file, &data, &len);
    if (r != S_READ_OK)
        return s_read_error(failed, r, req->path, ed->max_file);
    long lines = (long) agt_text_count_lines(data, len);
    long from = 1, to = lines;
    if (req->has_view_range) {
        from = req->view_start;
        to = req->view_end == -1 ? lines : req->view_end;
        if (from < 1 || from > (lines ? lines : 1) || to < from || to > lines) {
            char rng[96];
            snprintf(rng, sizeof rng, "[%ld, %ld] (the file has %ld lines)",
                     req->view_start, req->view_end, lines);
            lisa_free(&data);
            return s_err(failed, "Invalid view_range %s for %s.", rng,
                         req->path);
        }
    }
    char *snip = s_snippet(ed, data, len, from, to);
    lisa_free(&data);
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(ed->clip + 8192);
    lisa_buf_printf(&sb, "Here's the result of running `cat -n` on %s:\n",
                    req->path);
    lisa_buf_puts(&sb, snip);
    lisa_free(&snip);
    return lisa_buf_take(&sb);
}

static char *
s_create(agt_editor_t *ed, const agt_editor_req_t *req, const char *full,
         bool *failed)
{
    if (!req->file_text)
        return s_err(failed, "Parameter `file_text` is required for "
                             "command: create.");
    size_t len = strlen(req->file_text);
    if (len > ed->max_file)
        return s_err(failed, "file_text for %s is too large.", req->path);
    struct stat st;
    if (stat(full, &st) == 0 && S_ISDIR(st.st_mode))
        return s_err(failed, "%s is a directory.", req->path);
    if (s_mkdirs(full) != 0 || s_write_file(full, req->file_text, len) != 0)
        return s_err(failed, "Cannot write %s: %s", req->path, strerror(errno));
    char *snip = s_snippet(ed, req->file_text, len, 1, (long) len + 1);
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(ed->clip + 8192);
    lisa_buf_printf(&sb, "File created successfully at: %s\n", req->path);
    lisa_buf_puts(&sb, snip);
    lisa_free(&snip);
    return lisa_buf_take(&sb);
}

static char *
s_edited(agt_editor_t *ed, const char *path, const char *data, size_t len,
         long from, long to)
{
    char *snip = s_snippet(ed, data, len, from, to);
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(ed->clip + 8192);
    lisa_buf_printf(&sb,
                    "The file %s has been edited. Here's a snippet of the "
                    "edited file:\n",
                    path);
    lisa_buf_puts(&sb, snip);
    lisa_buf_puts(&sb, "Review the changes and make sure they are as "
                       "expected. Edit the file again if necessary.");
    lisa_free(&snip);
    return lisa_buf_take(&sb);
}

static char *
s_str_replace(agt_editor_t *ed, const agt_editor_req_t *req, const char *full,
              bool *failed)
{
    if (!req->old_str)
        return s_err(failed, "Parameter `old_str` is required for command: "
                             "str_replace.");
    if (!*req->old_str)
        return s_err(failed, "`old_str` must not be empty.");
    char *data = NULL;
    size_t len = 0;
    s_read_t r = s_read_file(full, ed->max_file, &data, &len);
    if (r != S_READ_OK)
        return s_read_error(failed, r, req->path, ed->max_file);
    size_t olen = strlen(req->old_str);
    const char *first = strstr(data, req->old_str);
    if (!first) {
        lisa_free(&data);
        return s_err(failed,
                     "No replacement was performed: old_str did not appear "
                     "verbatim in %s.",
                     req->path);
    }
    /* Count occurrences and the lines they start on. */
    lisa_buf_t where;
    where = LISA_BUF_CUT(512);
    unsigned count = 0;
    for (const char *p = first; p; p = strstr(p + 1, req->old_str)) {
        lisa_buf_printf(&where, "%s%ld", count ? ", " : "",
                        s_line_of(data, (size_t) (p - data)));
        count++;
    }
    if (count > 1) {
        char *lines = lisa_buf_take(&where);
        char *e = s_err(failed,
                        "No replacement was performed: old_str occurs more "
                        "than once, on lines [%s] of %s. Make it unique.",
                        lines, req->path);
        lisa_free(&lines);
        lisa_free(&data);
        return e;
    }
    lisa_buf_free(&where);
    const char *nw = req->new_str ? req->new_str : "";
    size_t nlen = strlen(nw);
    size_t off = (size_t) (first - data);
    if (len - olen + nlen > ed->max_file) {
        lisa_free(&data);
        return s_err(failed, "The edit would make %s too large.", req->path);
    }
    lisa_buf_t out;
    out = LISA_BUF_CUT(len - olen + nlen);
    lisa_buf_put(&out, data, off);
    lisa_buf_put(&out, nw, nlen);
    lisa_buf_put(&out, data + off + olen, len - off - olen);
    lisa_free(&data);
    size_t nl = out.len;
    char *result = lisa_buf_take(&out);
    if (s_write_file(full, result, nl) != 0) {
        lisa_free(&result);
        return s_err(failed, "Cannot write %s: %s", req->path, strerror(errno));
    }
    long line = s_line_of(result, off);
    long added = (long) agt_text_count_lines(nw, nlen);
    char *obs = s_edited(ed, req->path, result, nl, line - S_SNIPPET_LINES,
                         line + added + S_SNIPPET_LINES);
    lisa_free(&result);
    return obs;
}

static char *
s_insert(agt_editor_t *ed, const agt_editor_req_t *req, const char *full,
         bool *failed)
{
    if (!req->has_insert_line || !req->new_str)
        return s_err(failed, "Parameters `insert_line` and `new_str` are "
                             "required for command: insert.");
    char *data = NULL;
    size_t len = 0;
    s_read_t r = s_read_file(full, ed->max_file, &data, &len);
    if (r != S_READ_OK)
        return s_read_error(failed, r, req->path, ed->max_file);
    long lines = (long) agt_text_count_lines(data, len);
    if (req->insert_line < 0 || req->insert_line > lines) {
        char rng[96];
        snprintf(rng, sizeof rng, "%ld (valid: 0 to %ld)", req->insert_line,
                 lines);
        lisa_free(&data);
        return s_err(failed, "Invalid insert_line %s for %s.", rng, req->path);
    }
    size_t off = s_line_offset(data, len, req->insert_line + 1);
    size_t nlen = strlen(req->new_str);
    if (len + nlen + 2 > ed->max_file) {
        lisa_free(&data);
        return s_err(failed, "The edit would make %s too large.", req->path);
    }
    lisa_buf_t out;
    out = LISA_BUF_CUT(len + nlen + 2);
    lisa_buf_put(&out, data, off);
    /* A last line without a newline gets one before the insertion. */
    if (off > 0 && data[off - 1] != '\n')
        lisa_buf_put(&out, "\n", 1);
    lisa_buf_put(&out, req->new_str, nlen);
    if (nlen == 0 || req->new_str[nlen - 1] != '\n')
        lisa_buf_put(&out, "\n", 1);
    lisa_buf_put(&out, data + off, len - off);
    lisa_free(&data);
    size_t nl = out.len;
    char *result = lisa_buf_take(&out);
    if (s_write_file(full, result, nl) != 0) {
        lisa_free(&result);
        return s_err(failed, "Cannot write %s: %s", req->path, strerror(errno));
    }
    long added = (long) agt_text_count_lines(req->new_str, nlen);
    char *obs = s_edited(ed, req->path, result, nl,
                         req->insert_line + 1 - S_SNIPPET_LINES,
                         req->insert_line + added + S_SNIPPET_LINES);
    lisa_free(&result);
    return obs;
}

char *
agt_editor_exec(agt_editor_t *ed, const agt_editor_req_t *req, bool *failed)
{
    if (failed)
        *failed = false;
    if (!req->command)
        return s_err(failed, "Parameter `command` is required.");
    if (!req->path || !*req->path)
        return s_err(failed, "Parameter `path` is required.");
    if (strlen(req->path) > 4096)
        return s_err(failed, "The path is too long.");
    static const struct {
        const char *name;
        char *(*fn)(agt_editor_t *, const agt_editor_req_t *, const char *,
                    bool *);
    } cmds[] = {
        {"view", s_view},
        {"create", s_create},
        {"str_replace", s_str_replace},
        {"insert", s_insert},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(req->command, cmds[i].name) != 0)
            continue;
        char *full = s_resolve(ed, req->path);
        char *obs = cmds[i].fn(ed, req, full, failed);
        lisa_free(&full);
        return obs;
    }
    return s_err(failed,
                 "Unknown command `%s`; allowed: view, create, str_replace, "
                 "insert.",
                 req->command);
}
