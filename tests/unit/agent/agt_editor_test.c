/*
 * agt_editor tests: the recipe's str_replace_editor semantics, and viewing
 * every text file. The first test is the usage example.
 */
#include "agt_editor.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char s_dir[64];
static agt_editor_t *s_ed;

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/agt_editor_XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
    s_ed = agt_editor_new(s_dir, 0, 0);
}

static void
s_teardown(void)
{
    agt_editor_destroy(&s_ed);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    cr_assert_eq(system(cmd), 0);
}

static char *
s_run(const agt_editor_req_t *req, bool expect_fail)
{
    bool failed = !expect_fail;
    char *o = agt_editor_exec(s_ed, req, &failed);
    cr_assert_eq(failed, expect_fail, "unexpected outcome: %s", o);
    return o;
}

static char *
s_slurp(const char *rel)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, rel);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s missing", path);
    char *buf = lisa_calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

TestSuite(agt_editor, .init = s_setup, .fini = s_teardown);

Test(agt_editor, usage)
{
    agt_editor_req_t c = {.command = "create",
                          .path = "answer.txt",
                          .file_text = "\\boxed{42}\n"};
    char *o = s_run(&c, false);
    cr_assert(strstr(o, "File created successfully at: answer.txt"));
    cr_assert(strstr(o, "     1\t\\boxed{42}"));
    lisa_free(&o);
    char *data = s_slurp("answer.txt");
    cr_assert_str_eq(data, "\\boxed{42}\n");
    lisa_free(&data);
    /* Viewing a .txt file works (the recipe's v0.2 refused it). */
    agt_editor_req_t v = {.command = "view", .path = "answer.txt"};
    o = s_run(&v, false);
    cr_assert(strstr(o, "cat -n"));
    cr_assert(strstr(o, "     1\t\\boxed{42}\n"));
    lisa_free(&o);
}

Test(agt_editor, absolute_paths_and_parent_creation)
{
    char path[256];
    snprintf(path, sizeof path, "%s/sub/dir/notes.md", s_dir);
    agt_editor_req_t c = {
        .command = "create", .path = path, .file_text = "a\nb\n"};
    char *o = s_run(&c, false);
    lisa_free(&o);
    char *data = s_slurp("sub/dir/notes.md");
    cr_assert_str_eq(data, "a\nb\n");
    lisa_free(&data);
}

Test(agt_editor, view_range)
{
    agt_editor_req_t c = {
        .command = "create", .path = "f.txt", .file_text = "1\n2\n3\n4\n5\n"};
    {
        char *o = s_run(&c, false);
        lisa_free(&o);
    }
    agt_editor_req_t v = {.command = "view",
                          .path = "f.txt",
                          .has_view_range = true,
                          .view_start = 2,
                          .view_end = 3};
    char *o = s_run(&v, false);
    cr_assert(strstr(o, "     2\t2\n     3\t3\n"));
    cr_assert_null(strstr(o, "     4\t"));
    cr_assert_null(strstr(o, "     1\t"));
    lisa_free(&o);
    v.view_start = 4;
    v.view_end = -1;
    o = s_run(&v, false);
    cr_assert(strstr(o, "     4\t4\n     5\t5\n"));
    lisa_free(&o);
    v.view_start = 4;
    v.view_end = 9;
    o = s_run(&v, true);
    cr_assert(strstr(o, "Invalid view_range"));
    lisa_free(&o);
}

Test(agt_editor, str_replace_unique_missing_multiple)
{
    agt_editor_req_t c = {.command = "create",
                          .path = "s.py",
                          .file_text = "a = 1\nb = 2\nc = 1\n"};
    char *o = s_run(&c, false);
    lisa_free(&o);
    agt_editor_req_t r = {.command = "str_replace",
                          .path = "s.py",
                          .old_str = "b = 2",
                          .new_str = "b = 3\nd = 4"};
    o = s_run(&r, false);
    cr_assert(strstr(o, "has been edited"));
    cr_assert(strstr(o, "     2\tb = 3\n     3\td = 4\n"));
    lisa_free(&o);
    char *data = s_slurp("s.py");
    cr_assert_str_eq(data, "a = 1\nb = 3\nd = 4\nc = 1\n");
    lisa_free(&data);
    /* Not found. */
    r.old_str = "zzz";
    o = s_run(&r, true);
    cr_assert(strstr(o, "did not appear verbatim"));
    lisa_free(&o);
    /* Twice: refused, with the lines named, file untouched. */
    r.old_str = " = 1";
    o = s_run(&r, true);
    cr_assert(strstr(o, "lines [1, 4]"), "%s", o);
    lisa_free(&o);
    data = s_slurp("s.py");
    cr_assert_str_eq(data, "a = 1\nb = 3\nd = 4\nc = 1\n");
    lisa_free(&data);
    /* new_str absent deletes. */
    r.old_str = "d = 4\n";
    r.new_str = NULL;
    o = s_run(&r, false);
    lisa_free(&o);
    data = s_slurp("s.py");
    cr_assert_str_eq(data, "a = 1\nb = 3\nc = 1\n");
    lisa_free(&data);
}

Test(agt_editor, insert)
{
    agt_editor_req_t c = {
        .command = "create", .path = "i.txt", .file_text = "one\ntwo"};
    char *o = s_run(&c, false);
    lisa_free(&o);
    agt_editor_req_t ins = {.command = "insert",
                            .path = "i.txt",
                            .has_insert_line = true,
                            .insert_line = 0,
                            .new_str = "zero"};
    o = s_run(&ins, false);
    lisa_free(&o);
    ins.insert_line = 3; /* after the last line, which has no newline */
    ins.new_str = "three\n";
    o = s_run(&ins, false);
    cr_assert(strstr(o, "     4\tthree"), "%s", o);
    lisa_free(&o);
    char *data = s_slurp("i.txt");
    cr_assert_str_eq(data, "zero\none\ntwo\nthree\n");
    lisa_free(&data);
    ins.insert_line = 9;
    o = s_run(&ins, true);
    cr_assert(strstr(o, "Invalid insert_line"));
    lisa_free(&o);
    ins.has_insert_line = false;
    o = s_run(&ins, true);
    cr_assert(strstr(o, "insert_line"));
    lisa_free(&o);
}

Test(agt_editor, view_directory_lists_txt_files)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/documents/deep/deeper && touch %s/documents/a.txt "
             "%s/documents/deep/b.txt %s/documents/deep/deeper/c.txt "
             "%s/.hidden",
             s_dir, s_dir, s_dir, s_dir, s_dir);
    cr_assert_eq(system(cmd), 0);
    agt_editor_req_t v = {.command = "view", .path = s_dir};
    char *o = s_run(&v, false);
    cr_assert(strstr(o, "/documents/a.txt"), "%s", o);
    cr_assert(strstr(o, "/documents/deep\n"));
    cr_assert_null(strstr(o, "b.txt"), "deeper than 2 levels: %s", o);
    cr_assert_null(strstr(o, ".hidden"));
    lisa_free(&o);
}

Test(agt_editor, binary_big_missing_and_bad_requests)
{
    char path[256];
    snprintf(path, sizeof path, "%s/bin.dat", s_dir);
    FILE *f = fopen(path, "wb");
    fwrite("a\0b", 1, 3, f);
    fclose(f);
    agt_editor_req_t v = {.command = "view", .path = "bin.dat"};
    char *o = s_run(&v, true);
    cr_assert(strstr(o, "binary"));
    lisa_free(&o);
    v.path = "missing.txt";
    o = s_run(&v, true);
    cr_assert(strstr(o, "does not exist"));
    lisa_free(&o);
    agt_editor_req_t bad = {.command = "delete", .path = "x"};
    o = s_run(&bad, true);
    cr_assert(strstr(o, "Unknown command"));
    lisa_free(&o);
    agt_editor_req_t nopath = {.command = "view"};
    o = s_run(&nopath, true);
    lisa_free(&o);
    agt_editor_req_t nocontent = {.command = "create", .path = "n.txt"};
    o = s_run(&nocontent, true);
    cr_assert(strstr(o, "file_text"));
    lisa_free(&o);
    /* A small editor bound refuses big files. */
    agt_editor_t *small = agt_editor_new(s_dir, 0, 8);
    agt_editor_req_t c = {
        .command = "create", .path = "big.txt", .file_text = "0123456789"};
    bool failed = false;
    o = agt_editor_exec(small, &c, &failed);
    cr_assert(failed);
    lisa_free(&o);
    agt_editor_destroy(&small);
    agt_editor_destroy(&small);
}

Test(agt_editor, view_is_clipped_at_10000_chars)
{
    agt_editor_req_t c = {.command = "create", .path = "long.txt"};
    char *text = lisa_malloc(60001);
    for (int i = 0; i < 60000; i++)
        text[i] = (i % 60 == 59) ? '\n' : 'x';
    text[60000] = '\0';
    c.file_text = text;
    char *o = s_run(&c, false);
    cr_assert(strstr(o, "<response clipped>"));
    lisa_free(&o);
    agt_editor_req_t v = {.command = "view", .path = "long.txt"};
    o = s_run(&v, false);
    cr_assert(strstr(o, "<response clipped>"));
    cr_assert_lt(strlen(o), 10000 + 600);
    lisa_free(&o);
    lisa_free(&text);
}
