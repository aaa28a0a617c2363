/*
 * lisa_json tests: bounded loads with file:line:column errors, typed
 * dotted-path getters on the real verl-format seed records, JSON Lines with
 * bad and over-long lines, and the bounded dump.
 */
#include "lisa/lisa_json.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_FIXTURE LISA_SOURCE_DIR "/tests/fixtures/seed-samples/"

Test(lisa_json, usage_example)
{
    const char *text = "{\"reward_model\": {\"ground_truth\": \"70\"},"
                       " \"n\": 3, \"prompt\": [{\"role\": \"user\"}]}";
    json_t *root = NULL;
    char err[256];
    cr_assert_eq(lisa_json_load_buf(text, strlen(text), 4096, "row", &root, err,
                                    sizeof err),
                 LISA_OK, "%s", err);
    const char *gt, *role;
    int64_t n, missing;
    cr_assert_eq(lisa_json_get_string(root, "reward_model.ground_truth", "",
                                      &gt, err, sizeof err),
                 LISA_OK);
    cr_assert_eq(lisa_json_get_int(root, "n", 0, &n, err, sizeof err), LISA_OK);
    cr_assert_eq(lisa_json_get_string(root, "prompt.0.role", NULL, &role, err,
                                      sizeof err),
                 LISA_OK);
    cr_assert_eq(
        lisa_json_get_int(root, "epochs", 1, &missing, err, sizeof err),
        LISA_OK);
    cr_assert_str_eq(gt, "70");
    cr_assert_eq(n, 3);
    cr_assert_str_eq(role, "user");
    cr_assert_eq(missing, 1);
    json_decref(root);
}

Test(lisa_json, real_verl_records)
{
    json_t *root = NULL;
    char err[512];
    cr_assert_eq(lisa_json_load_file(S_FIXTURE "verl_records_excerpt.json",
                                     1u << 20, &root, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert(json_is_array(root));
    cr_assert_gt(json_array_size(root), 0);
    size_t i;
    json_t *row;
    json_array_foreach(root, i, row)
    {
        const char *gt, *src, *role, *gt2;
        json_t *prompt, *extra;
        cr_assert_eq(lisa_json_get_string(row, "reward_model.ground_truth",
                                          NULL, &gt, err, sizeof err),
                     LISA_OK, "%s", err);
        cr_assert_not_null(gt);
        cr_assert_eq(lisa_json_get_string(row, "extra_info.ground_truth", NULL,
                                          &gt2, err, sizeof err),
                     LISA_OK);
        cr_assert_str_eq(gt, gt2);
        cr_assert_eq(lisa_json_get_string(row, "data_source", NULL, &src, err,
                                          sizeof err),
                     LISA_OK);
        cr_assert_not_null(src);
        cr_assert_eq(
            lisa_json_get_array(row, "prompt", &prompt, err, sizeof err),
            LISA_OK);
        cr_assert_not_null(prompt);
        cr_assert_eq(lisa_json_get_string(row, "prompt.0.role", NULL, &role,
                                          err, sizeof err),
                     LISA_OK);
        cr_assert_str_eq(role, "user");
        cr_assert_eq(
            lisa_json_get_object(row, "extra_info", &extra, err, sizeof err),
            LISA_OK);
        cr_assert(json_is_object(extra));
        cr_assert_eq(lisa_json_require(row, "extra_info.id", err, sizeof err),
                     LISA_OK);
    }
    const char *first;
    cr_assert_eq(lisa_json_get_string(root, "0.reward_model.ground_truth", NULL,
                                      &first, err, sizeof err),
                 LISA_OK);
    cr_assert_str_eq(first, "70");
    json_decref(root);
}

Test(lisa_json, parse_errors_have_name_line_column)
{
    json_t *root = (json_t *) 1;
    char err[256];
    const char *bad = "{\n  \"a\": 1,\n  \"b\": tru\n}";
    cr_assert_eq(lisa_json_load_buf(bad, strlen(bad), 4096, "cfg.json", &root,
                                    err, sizeof err),
                 LISA_INVALID);
    cr_assert_null(root);
    cr_assert(strncmp(err, "cfg.json:3:", 11) == 0, "%s", err);

    cr_assert_eq(
        lisa_json_load_buf("{} x", 4, 4096, NULL, &root, err, sizeof err),
        LISA_INVALID);
    cr_assert(strncmp(err, "<buffer>:1:", 9) == 0, "%s", err);
    cr_assert_eq(lisa_json_load_buf("", 0, 4096, NULL, &root, err, sizeof err),
                 LISA_INVALID);
    /* Scalars at the top level are values too. */
    cr_assert_eq(
        lisa_json_load_buf("42", 2, 4096, NULL, &root, err, sizeof err),
        LISA_OK);
    cr_assert_eq(json_integer_value(root), 42);
    json_decref(root);
    /* Deep nesting is refused, not a stack overflow. */
    size_t depth = 100000;
    char *deep = lisa_malloc(depth);
    memset(deep, '[', depth);
    cr_assert_eq(
        lisa_json_load_buf(deep, depth, depth, NULL, &root, err, sizeof err),
        LISA_INVALID);
    lisa_free(&deep);
}

Test(lisa_json, size_bounds_and_missing_files)
{
    json_t *root;
    char err[256];
    cr_assert_eq(
        lisa_json_load_buf("[1,2,3]", 7, 6, "x", &root, err, sizeof err),
        LISA_TOOLARGE);
    cr_assert(strstr(err, "limit 6"), "%s", err);
    cr_assert_eq(
        lisa_json_load_buf("[1,2,3]", 7, 7, "x", &root, err, sizeof err),
        LISA_OK);
    json_decref(root);
    cr_assert_eq(lisa_json_load_file(S_FIXTURE "verl_records_excerpt.json", 100,
                                     &root, err, sizeof err),
                 LISA_TOOLARGE);
    cr_assert_null(root);
    cr_assert_eq(lisa_json_load_file(S_FIXTURE "no-such.json", 100, &root, err,
                                     sizeof err),
                 LISA_NOTFOUND);
    cr_assert(strstr(err, "no-such.json"), "%s", err);
    cr_assert_eq(lisa_json_load_file(S_FIXTURE, 100, &root, err, sizeof err),
                 LISA_ERR, "a directory: %s", err);
}

Test(lisa_json, typed_getters_report_type_errors)
{
    const char *text = "{\"s\": \"x\", \"i\": -5, \"r\": 2.5, \"b\": true,"
                       " \"n\": null, \"o\": {\"k\": [10, 20]}, \"a\": []}";
    json_t *root;
    char err[256];
    cr_assert_eq(lisa_json_load_buf(text, strlen(text), 4096, NULL, &root, err,
                                    sizeof err),
                 LISA_OK);
    const char *s;
    int64_t i;
    uint64_t u;
    double d;
    bool b;
    json_t *o;
    cr_assert_eq(lisa_json_get_string(root, "i", "d", &s, err, sizeof err),
                 LISA_INVALID);
    cr_assert_str_eq(err, "i: expected string, got integer");
    cr_assert_eq(lisa_json_get_int(root, "r", 0, &i, err, sizeof err),
                 LISA_INVALID);
    cr_assert_str_eq(err, "r: expected integer, got real");
    cr_assert_eq(lisa_json_get_uint(root, "i", 0, &u, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "i: expected non-negative integer, got -5"), "%s",
              err);
    cr_assert_eq(lisa_json_get_double(root, "s", 0, &d, err, sizeof err),
                 LISA_INVALID);
    cr_assert_eq(lisa_json_get_bool(root, "i", false, &b, err, sizeof err),
                 LISA_INVALID);
    cr_assert_str_eq(err, "i: expected boolean, got integer");
    cr_assert_eq(lisa_json_get_object(root, "a", &o, err, sizeof err),
                 LISA_INVALID);
    cr_assert_eq(lisa_json_get_array(root, "o", &o, err, sizeof err),
                 LISA_INVALID);
    cr_assert_str_eq(err, "o: expected array, got object");

    /* Good reads; double accepts integers; null means absent. */
    cr_assert_eq(lisa_json_get_double(root, "i", 0, &d, err, sizeof err),
                 LISA_OK);
    cr_assert_float_eq(d, -5.0, 0);
    cr_assert_eq(lisa_json_get_double(root, "r", 0, &d, err, sizeof err),
                 LISA_OK);
    cr_assert_float_eq(d, 2.5, 0);
    cr_assert_eq(lisa_json_get_bool(root, "b", false, &b, err, sizeof err),
                 LISA_OK);
    cr_assert(b);
    cr_assert_eq(lisa_json_get_string(root, "n", "dflt", &s, err, sizeof err),
                 LISA_OK);
    cr_assert_str_eq(s, "dflt");
    cr_assert_eq(lisa_json_require(root, "n", err, sizeof err), LISA_NOTFOUND);
    cr_assert_str_eq(err, "n: required");
    cr_assert_eq(lisa_json_get_uint(root, "o.k.1", 0, &u, err, sizeof err),
                 LISA_OK);
    cr_assert_eq(u, 20);
    cr_assert_eq(lisa_json_get_array(root, "a", &o, err, sizeof err), LISA_OK);
    cr_assert(json_is_array(o));
    cr_assert_eq(lisa_json_get_object(root, "zz", &o, err, sizeof err),
                 LISA_OK);
    cr_assert_null(o);
    json_decref(root);
}

Test(lisa_json, dotted_paths)
{
    const char *text = "{\"a\": {\"b\": [{\"c\": 1}, {\"c\": 2}]}, \"\": 7}";
    json_t *root;
    char err[256];
    cr_assert_eq(lisa_json_load_buf(text, strlen(text), 4096, NULL, &root, err,
                                    sizeof err),
                 LISA_OK);
    cr_assert_eq(json_integer_value(lisa_json_path(root, "a.b.1.c")), 2);
    cr_assert_eq(json_integer_value(lisa_json_path(root, "a.b.0.c")), 1);
    cr_assert_null(lisa_json_path(root, "a.b.2.c"));
    cr_assert_null(lisa_json_path(root, "a.b.x"));
    cr_assert_null(lisa_json_path(root, "a.b.-1"));
    cr_assert_null(lisa_json_path(root, "a.b.0.c.d"));
    cr_assert_null(lisa_json_path(root, "a..b"));
    cr_assert_null(lisa_json_path(root, "a.b.99999999999999999999"));
    cr_assert_null(lisa_json_path(NULL, "a"));
    cr_assert_null(lisa_json_path(root, NULL));
    cr_assert_eq(lisa_json_path(root, "a"), json_object_get(root, "a"));
    cr_assert_eq(json_integer_value(lisa_json_path(root, "")), 7);
    char *longp = lisa_malloc(LISA_JSON_MAX_PATH + 2);
    memset(longp, 'a', LISA_JSON_MAX_PATH + 1);
    longp[LISA_JSON_MAX_PATH + 1] = 0;
    cr_assert_null(lisa_json_path(root, longp));
    lisa_free(&longp);
    cr_assert_str_eq(lisa_json_type_str(NULL), "absent");
    json_decref(root);
}

Test(lisa_json, bounded_dump)
{
    json_t *root;
    char err[256];
    cr_assert_eq(lisa_json_load_file(S_FIXTURE "verl_records_excerpt.json",
                                     1u << 20, &root, err, sizeof err),
                 LISA_OK);
    char *text = NULL;
    cr_assert_eq(lisa_json_dump(root, JSON_COMPACT, 1u << 20, &text), LISA_OK);
    size_t len = strlen(text);
    json_t *back;
    cr_assert_eq(
        lisa_json_load_buf(text, len, len, NULL, &back, err, sizeof err),
        LISA_OK);
    cr_assert(json_equal(root, back));
    json_decref(back);
    char *exact = NULL;
    cr_assert_eq(lisa_json_dump(root, JSON_COMPACT, len, &exact), LISA_OK);
    cr_assert_str_eq(exact, text);
    char *cut = (char *) 1;
    cr_assert_eq(lisa_json_dump(root, JSON_COMPACT, len - 1, &cut),
                 LISA_TOOLARGE);
    cr_assert_null(cut);
    cr_assert_eq(lisa_json_dump(NULL, 0, 100, &cut), LISA_INVALID);
    json_t *s = json_string("a\nb");
    cr_assert_eq(lisa_json_dump(s, 0, 100, &cut), LISA_OK);
    cr_assert_str_eq(cut, "\"a\\nb\"");
    lisa_free(&cut);
    json_decref(s);
    lisa_free(&text);
    lisa_free(&exact);
    json_decref(root);
}

static void
s_write_tmp(char *path, size_t len, const char *text, size_t n)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/lisa_jsonl_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, n), (ssize_t) n);
    close(fd);
}

Test(lisa_json, jsonl_keeps_going_after_bad_lines)
{
    char longline[200];
    memset(longline, ' ', sizeof longline);
    memcpy(longline, "{\"x\":", 5);
    longline[sizeof longline - 2] = '}';
    longline[sizeof longline - 1] = 0;
    char text[1024];
    snprintf(text, sizeof text,
             "{\"i\": 1}\n"   /* 1 ok */
             "\n"             /* 2 blank */
             "{\"i\": 2,}\n"  /* 3 bad */
             "{\"i\": 3}\r\n" /* 4 ok, CRLF */
             "%s\n"           /* 5 too long (199 > 64) */
             "   \t \n"       /* 6 blank */
             "[1, 2] 3\n"     /* 7 bad: trailing */
             "\"str\"\n"      /* 8 ok scalar */
             "{\"i\": 4}",    /* 9 ok, no final newline */
             longline);
    char path[256], err[256];
    s_write_tmp(path, sizeof path, text, strlen(text));
    lisa_jsonl_t *r;
    cr_assert_eq(lisa_jsonl_open(path, 64, &r, err, sizeof err), LISA_OK);
    static const struct {
        lisa_rc_t rc;
        uint64_t line;
    } want[] = {{LISA_OK, 1},       {LISA_INVALID, 3},  {LISA_OK, 4},
                {LISA_TOOLARGE, 5}, {LISA_INVALID, 7},  {LISA_OK, 8},
                {LISA_OK, 9},       {LISA_NOTFOUND, 9}, {LISA_NOTFOUND, 9}};
    int64_t ids[4] = {0};
    size_t nid = 0;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        json_t *v = NULL;
        err[0] = 0;
        lisa_rc_t rc = lisa_jsonl_next(r, &v, err, sizeof err);
        cr_assert_eq(rc, want[k].rc, "step %zu: %s", k, err);
        cr_assert_eq(lisa_jsonl_line(r), want[k].line, "step %zu", k);
        if (rc == LISA_OK) {
            cr_assert_not_null(v);
            if (json_is_object(v))
                ids[nid++] = json_integer_value(json_object_get(v, "i"));
        } else {
            cr_assert_null(v);
        }
        if (rc == LISA_INVALID || rc == LISA_TOOLARGE) {
            char prefix[300];
            snprintf(prefix, sizeof prefix, "%s:%llu:", path,
                     (unsigned long long) want[k].line);
            cr_assert(strncmp(err, prefix, strlen(prefix)) == 0, "%s", err);
        }
        json_decref(v);
    }
    cr_assert_eq(nid, 3);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 3);
    cr_assert_eq(ids[2], 4);
    cr_assert_eq(lisa_jsonl_good(r), 4);
    cr_assert_eq(lisa_jsonl_bad(r), 3);
    lisa_jsonl_destroy(&r);
    cr_assert_null(r);
    lisa_jsonl_destroy(&r);
    unlink(path);
    cr_assert_eq(lisa_jsonl_open(path, 64, &r, err, sizeof err), LISA_NOTFOUND);
    cr_assert_null(r);
}

Test(lisa_json, jsonl_from_stream_with_nul_and_exact_bound)
{
    /* A line of exactly max_line bytes is fine; a NUL byte is an error. */
    const char text[] = "[1,2,3,4]\n[1,\0]\n[5]\n";
    FILE *f = fmemopen((void *) text, sizeof text - 1, "r");
    cr_assert_not_null(f);
    lisa_jsonl_t *r = lisa_jsonl_from_stream(f, "mem", 9);
    json_t *v;
    char err[256];
    cr_assert_eq(lisa_jsonl_next(r, &v, err, sizeof err), LISA_OK);
    cr_assert_eq(json_array_size(v), 4);
    json_decref(v);
    cr_assert_eq(lisa_jsonl_next(r, &v, err, sizeof err), LISA_INVALID);
    cr_assert(strncmp(err, "mem:2:", 6) == 0, "%s", err);
    cr_assert_eq(lisa_jsonl_next(r, &v, err, sizeof err), LISA_OK);
    cr_assert_eq(json_integer_value(json_array_get(v, 0)), 5);
    json_decref(v);
    cr_assert_eq(lisa_jsonl_next(r, &v, err, sizeof err), LISA_NOTFOUND);
    lisa_jsonl_destroy(&r);
    fclose(f); /* the stream stays the caller's */
}
