/*
 * agt_task tests: TaskView checks, path safety, file placement, answer
 * read-back. The first test is the usage example.
 */
#include "agt_task.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char s_dir[64];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/agt_task_XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void
s_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    cr_assert_eq(system(cmd), 0);
}

static char *
s_slurp(const char *rel)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", s_dir, rel);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s missing", path);
    char *buf = lisa_calloc(1, 4096);
    size_t n = fread(buf, 1, 4095, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

TestSuite(agt_task, .init = s_setup, .fini = s_teardown);

Test(agt_task, usage)
{
    json_error_t jerr;
    json_t *view = json_loads(
        "{\"rollout_id\":\"r-1\",\"attempt\":2,\"data_source\":"
        "\"instruct_pretrain\",\"problem_statement\":\"Who?\",\"files\":["
        "{\"path\":\"a.txt\",\"content\":\"alpha\"},"
        "{\"path\":\"sub/b.txt\",\"content\":\"YmV0YQ==\",\"encoding\":"
        "\"base64\"}],\"extra_info\":{\"qa_type\":\"multiple choice\"},"
        "\"limits\":{\"max_turns\":30,\"max_context_tokens\":60000,"
        "\"max_tokens_per_call\":20000,\"deadline_ms\":1900000000000,"
        "\"time_left_ms\":5000,\"temperature\":1.0,\"top_p\":0.9}}",
        0, &jerr);
    cr_assert_not_null(view);
    agt_task_t t;
    char err[256];
    cr_assert_eq(agt_task_parse(view, &t, err, sizeof err), LISA_OK, "%s", err);
    json_decref(view);
    cr_assert_str_eq(t.rollout_id, "r-1");
    cr_assert_eq(t.attempt, 2);
    cr_assert_str_eq(t.qa_type, "multiple choice");
    cr_assert_eq(t.max_turns, 30);
    cr_assert_eq(t.max_context_tokens, 60000);
    cr_assert_eq(t.max_tokens_per_call, 20000);
    cr_assert_eq(t.deadline_ms, 1900000000000ull);
    cr_assert_eq(t.time_left_ms, 5000);
    cr_assert_float_eq(t.top_p, 0.9, 1e-9);
    cr_assert_eq(t.n_files, 2);
    cr_assert_eq(agt_task_write_files(&t, s_dir, err, sizeof err), LISA_OK,
                 "%s", err);
    char *a = s_slurp("documents/a.txt");
    char *b = s_slurp("documents/sub/b.txt");
    cr_assert_str_eq(a, "alpha");
    cr_assert_str_eq(b, "beta");
    lisa_free(&a);
    lisa_free(&b);
    agt_task_clear(&t);
}

Test(agt_task, path_safety)
{
    static const struct {
        const char *path;
        bool ok;
    } cases[] = {
        {"a.txt", true}, {"dir/a.txt", true},  {"a..b.txt", true},
        {"..a", true},   {"", false},          {"/etc/passwd", false},
        {"../x", false}, {"a/../../x", false}, {"a/..", false},
        {"..", false},   {"./a", false},       {"a//b", false},
        {"a/", false},   {"a\nb", false},      {"a\x7f", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(agt_task_path_ok(cases[i].path), cases[i].ok, "path '%s'",
                     cases[i].path);
    char longp[300];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    cr_assert_not(agt_task_path_ok(longp));
    cr_assert_not(agt_task_path_ok(NULL));
}

Test(agt_task, unsafe_or_malformed_tasks_are_refused)
{
    static const char *bad[] = {
        "[]",
        "{\"problem_statement\":\"q\"}",
        "{\"rollout_id\":\"r\"}",
        "{\"rollout_id\":7,\"problem_statement\":\"q\"}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"files\":[{"
        "\"path\":\"../../etc/x\",\"content\":\"\"}]}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"files\":[{"
        "\"path\":\"/abs\",\"content\":\"\"}]}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"files\":[{"
        "\"path\":\"a\"}]}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"files\":[{"
        "\"path\":\"a\",\"content\":\"x\",\"encoding\":\"rot13\"}]}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"files\":{}}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"limits\":{"
        "\"max_turns\":-1}}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"limits\":{"
        "\"top_p\":2}}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"limits\":7}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"prompt\":\"s\"}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"prompt\":{"
        "\"system\":\"s\"}}",
        "{\"rollout_id\":\"r\",\"problem_statement\":\"q\",\"prompt\":{"
        "\"system\":1,\"user\":\"u\"}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_error_t jerr;
        json_t *v = json_loads(bad[i], 0, &jerr);
        cr_assert_not_null(v, "%s", bad[i]);
        agt_task_t t;
        char err[256] = "";
        cr_assert_eq(agt_task_parse(v, &t, err, sizeof err), LISA_INVALID,
                     "accepted %s", bad[i]);
        cr_assert_neq(err[0], '\0');
        json_decref(v);
    }
}

Test(agt_task, minimal_task_has_defaults)
{
    json_t *v =
        json_pack("{s:s,s:s}", "rollout_id", "r", "problem_statement", "q");
    agt_task_t t;
    char err[256];
    cr_assert_eq(agt_task_parse(v, &t, err, sizeof err), LISA_OK);
    cr_assert_eq(t.n_files, 0);
    cr_assert_eq(t.max_turns, 0);
    cr_assert_eq(t.time_left_ms, -1);
    cr_assert_lt(t.temperature, 0);
    cr_assert_null(t.qa_type);
    cr_assert_null(t.system_prompt);
    cr_assert_null(t.user_prompt);
    cr_assert_eq(agt_task_write_files(&t, s_dir, err, sizeof err), LISA_OK);
    agt_task_clear(&t);
    json_decref(v);
}

Test(agt_task, the_runs_prompts)
{
    /* agent.prompts: the trainer's rendering travels in the task */
    json_t *v = json_pack("{s:s,s:s,s:{s:s,s:s}}", "rollout_id", "r",
                          "problem_statement", "q", "prompt", "system",
                          "You solve {x}.", "user", "<problem>\nq\n</problem>");
    agt_task_t t;
    char err[256];
    cr_assert_eq(agt_task_parse(v, &t, err, sizeof err), LISA_OK, "%s", err);
    cr_assert_str_eq(t.system_prompt, "You solve {x}.");
    cr_assert_str_eq(t.user_prompt, "<problem>\nq\n</problem>");
    agt_task_clear(&t);
    cr_assert_null(t.system_prompt);
    json_decref(v);
}

Test(agt_task, read_answer_bounded_and_missing)
{
    char *ans = NULL;
    bool trunc = true, found = true;
    cr_assert_eq(agt_task_read_answer(s_dir, 100, &ans, &trunc, &found),
                 LISA_OK);
    cr_assert_str_eq(ans, "");
    cr_assert_not(found);
    lisa_free(&ans);
    char path[128];
    snprintf(path, sizeof path, "%s/answer.txt", s_dir);
    FILE *f = fopen(path, "w");
    fputs("\\boxed{7}\n\xff", f);
    fclose(f);
    cr_assert_eq(agt_task_read_answer(s_dir, 100, &ans, &trunc, &found),
                 LISA_OK);
    cr_assert(found);
    cr_assert_not(trunc);
    cr_assert_str_eq(ans, "\\boxed{7}\n?");
    lisa_free(&ans);
    cr_assert_eq(agt_task_read_answer(s_dir, 4, &ans, &trunc, &found), LISA_OK);
    cr_assert(trunc);
    cr_assert_str_eq(ans, "\\box");
    lisa_free(&ans);
    /* A FIFO must not hang the agent. */
    cr_assert_eq(remove(path), 0);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "mkfifo %s", path);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(agt_task_read_answer(s_dir, 4, &ans, &trunc, &found),
                 LISA_ERR);
    cr_assert_str_eq(ans, "");
    lisa_free(&ans);
}
