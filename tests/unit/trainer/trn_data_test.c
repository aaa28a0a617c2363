/*
 * trn_data tests: verl records from JSON arrays, JSON Lines and
 * directories (the real record excerpt in tests/fixtures/seed-samples
 * included); input_files as a JSON string map; errors that name the file
 * and the record; the seeded per-epoch order. The first test is the usage
 * example.
 */
#include "trn_data.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_dir[256];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/trn_data_test.XXXXXX");
    cr_assert(mkdtemp(s_dir));
}

static void
s_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

static const char *
s_write(const char *name, const char *text)
{
    static char p[4][512];
    static int k;
    char *path = p[k++ % 4];
    snprintf(path, 512, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
    return path;
}

#define REC(id, ds)                                                            \
    "{\"prompt\":[{\"role\":\"user\",\"content\":\"p\"}],\"data_source\":"     \
    "\"" ds "\",\"reward_model\":{\"ground_truth\":\"42\"},\"extra_info\":{"   \
    "\"id\":\"" id "\",\"problem_statement\":\"Q " id                          \
    "\",\"ground_truth\":\"42\","                                              \
    "\"qa_type\":\"open\",\"input_files\":\"{\\\"a.txt\\\": "                  \
    "\\\"alpha\\\"}\"}}"

TestSuite(trn_data, .init = s_setup, .fini = s_teardown);

Test(trn_data, usage)
{
    const char *f = s_write("train.jsonl",
                            REC("x1", "math_a") "\n\n" REC("x2", "bio_b") "\n");
    trn_data_t *d = NULL;
    char err[512];
    cr_assert_eq(trn_data_load(f, &d, err, sizeof err), LISA_OK, "%s", err);
    cr_assert_eq(trn_data_len(d), 2);
    const trn_sample_t *s = trn_data_get(d, 1);
    cr_assert_str_eq(s->id, "x2");
    cr_assert_str_eq(s->data_source, "bio_b");
    cr_assert_str_eq(s->problem, "Q x2");
    cr_assert_str_eq(s->ground_truth, "42");
    cr_assert_eq(s->n_docs, 1);
    cr_assert_str_eq(s->docs[0].name, "a.txt");
    cr_assert_str_eq(s->docs[0].content, "alpha");
    /* extra_info travels without ground truth or the files */
    json_t *ex = json_loads(s->extra_json, 0, NULL);
    cr_assert(ex);
    cr_assert_null(json_object_get(ex, "ground_truth"));
    cr_assert_null(json_object_get(ex, "input_files"));
    cr_assert_str_eq(json_string_value(json_object_get(ex, "qa_type")), "open");
    json_decref(ex);
    cr_assert_null(trn_data_get(d, 2));
    trn_data_destroy(&d);
    trn_data_destroy(&d);
}

Test(trn_data, arrays_directories_and_lists)
{
    char sub[300];
    snprintf(sub, sizeof sub, "%s/val", s_dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    s_write("val/b.json", "[" REC("b1", "s") "," REC("b2", "s") "]");
    s_write("val/a.jsonl", REC("a1", "s") "\n");
    s_write("val/ignored.txt", "not data");
    const char *one = s_write("one.json", "[" REC("o1", "t") "]");
    char list[1024];
    snprintf(list, sizeof list, "%s, %s", sub, one);
    trn_data_t *d = NULL;
    char err[512];
    cr_assert_eq(trn_data_load(list, &d, err, sizeof err), LISA_OK, "%s", err);
    cr_assert_eq(trn_data_len(d), 4);
    /* directory files in name order, then the next list entry */
    cr_assert_str_eq(trn_data_get(d, 0)->id, "a1");
    cr_assert_str_eq(trn_data_get(d, 1)->id, "b1");
    cr_assert_str_eq(trn_data_get(d, 2)->id, "b2");
    cr_assert_str_eq(trn_data_get(d, 3)->id, "o1");
    trn_data_destroy(&d);
}

Test(trn_data, the_real_record_excerpt_loads)
{
    char p[1024];
    snprintf(p, sizeof p,
             "%s/tests/fixtures/seed-samples/verl_records_excerpt.json",
             LISA_SOURCE_DIR);
    trn_data_t *d = NULL;
    char err[512];
    cr_assert_eq(trn_data_load(p, &d, err, sizeof err), LISA_OK, "%s", err);
    cr_assert_eq(trn_data_len(d), 5);
    cr_assert_str_eq(trn_data_get(d, 0)->id, "aime25_0_00");
    cr_assert_str_eq(trn_data_get(d, 0)->data_source, "math_mini");
    cr_assert_str_eq(trn_data_get(d, 0)->ground_truth, "70");
    trn_data_destroy(&d);
}

Test(trn_data, errors_name_file_and_record)
{
    trn_data_t *d = NULL;
    char err[512];
    const char *f = s_write(
        "bad.jsonl", REC("x", "m") "\n"
                                   "{\"data_source\":\"m\",\"extra_info\":"
                                   "{\"problem_statement\":\"q\"}}\n");
    cr_assert_eq(trn_data_load(f, &d, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "bad.jsonl") && strstr(err, "record 1") &&
                  strstr(err, "line 2") &&
                  strstr(err, "reward_model.ground_truth"),
              "%s", err);
    cr_assert_null(d);

    f = s_write("nods.json", "[" REC("x", "m") ", {\"reward_model\":"
                                               "{\"ground_truth\":\"1\"}}]");
    cr_assert_eq(trn_data_load(f, &d, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "nods.json: record 1: data_source"), "%s", err);

    f = s_write("noq.json", "[{\"data_source\":\"m\",\"reward_model\":"
                            "{\"ground_truth\":\"1\"},\"prompt\":[]}]");
    cr_assert_eq(trn_data_load(f, &d, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "record 0: extra_info.problem_statement"), "%s", err);

    f = s_write("files.json",
                "[{\"data_source\":\"m\",\"reward_model\":{\"ground_truth\":"
                "\"1\"},\"extra_info\":{\"problem_statement\":\"q\","
                "\"input_files\":\"{not json\"}}]");
    cr_assert_eq(trn_data_load(f, &d, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "files.json: record 0: extra_info.input_files"), "%s",
              err);

    f = s_write("syntax.json", "[{\"data_source\": ]");
    cr_assert_eq(trn_data_load(f, &d, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "syntax.json"), "%s", err);

    f = s_write("empty.jsonl", "\n\n");
    cr_assert_eq(trn_data_load(f, &d, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "empty.jsonl: no records"), "%s", err);

    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope.json", s_dir);
    cr_assert_eq(trn_data_load(missing, &d, err, sizeof err), LISA_NOTFOUND);
    cr_assert(strstr(err, "nope.json"), "%s", err);
    cr_assert_eq(trn_data_load("", &d, err, sizeof err), LISA_INVALID);
    cr_assert_eq(trn_data_load(" , ", &d, err, sizeof err), LISA_INVALID);
}

Test(trn_data, ids_and_ground_truths_of_other_types)
{
    const char *f = s_write(
        "types.json",
        "[{\"data_source\":\"m\",\"reward_model\":{\"ground_truth\":[\"A\","
        "\"B\"]},\"extra_info\":{\"id\":17,\"problem_statement\":\"q\"}},"
        "{\"data_source\":\"m\",\"reward_model\":{\"ground_truth\":3.5},"
        "\"prompt\":[{\"role\":\"user\",\"content\":\"from prompt\"}]}]");
    trn_data_t *d = NULL;
    char err[512];
    cr_assert_eq(trn_data_load(f, &d, err, sizeof err), LISA_OK, "%s", err);
    cr_assert_str_eq(trn_data_get(d, 0)->id, "17");
    cr_assert_str_eq(trn_data_get(d, 0)->ground_truth, "[\"A\",\"B\"]");
    cr_assert_str_eq(trn_data_get(d, 1)->id, "types.json#1");
    cr_assert_str_eq(trn_data_get(d, 1)->ground_truth, "3.5");
    cr_assert_str_eq(trn_data_get(d, 1)->problem, "from prompt");
    cr_assert_str_eq(trn_data_get(d, 1)->extra_json, "{}");
    trn_data_destroy(&d);
}

Test(trn_data, order_is_a_seeded_permutation_per_epoch)
{
    size_t a[50], b[50], c[50], id[5];
    trn_data_order(50, true, 7, 0, a);
    trn_data_order(50, true, 7, 0, b);
    trn_data_order(50, true, 7, 1, c);
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    cr_assert_neq(memcmp(a, c, sizeof a), 0);
    int seen[50] = {0};
    for (size_t i = 0; i < 50; i++)
        seen[a[i]]++;
    for (size_t i = 0; i < 50; i++)
        cr_assert_eq(seen[i], 1);
    trn_data_order(5, false, 7, 3, id);
    for (size_t i = 0; i < 5; i++)
        cr_assert_eq(id[i], i);
}
