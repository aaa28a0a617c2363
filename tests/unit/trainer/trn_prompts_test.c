/*
 * trn_prompts tests: a folder in llm-in-sandbox's benchmark layout
 * (<source>/config.yaml) renders each data source's prompts as upstream
 * does (directories replaced, then Python's str.format: {{ }} are braces,
 * {problem_statement} the statement); the longest matching folder wins,
 * the folder's own config.yaml is the default; one file serves every data
 * source; bad templates and files are refused at load with the file
 * named. The first test is the usage example.
 */
#include "lisa/lisa_mem.h"
#include "trn_prompts.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_dir[256];

static void
s_write(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", s_dir, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    mkdir(path, 0755);
    *slash = '/';
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/trn_prompts_XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void
s_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

static const char s_math[] =
    "# Math\n"
    "dataset: \"some/dataset\"\n"
    "split: \"test\"\n"
    "system_prompt: |-\n"
    "  You solve math.\n"
    "\n"
    "  Work in {working_dir}; write {output_dir}/answer.txt.{command_docs}\n"
    "instance_prompt: |-\n"
    "  <problem>\n"
    "  {problem_statement}\n"
    "  </problem>\n"
    "  Answer within \\\\boxed{{}} in {output_dir}/answer.txt; files in "
    "{input_dir}.\n"
    "output_dir: \"/out\"\n"
    "working_dir: \"/testbed\"\n";

Test(trn_prompts, usage, .init = s_setup, .fini = s_teardown)
{
    s_write("math/config.yaml", s_math);
    char err[256] = "";
    trn_prompts_t *p = trn_prompts_load(s_dir, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    cr_assert_eq(trn_prompts_count(p), 1);
    char *sys = NULL, *user = NULL;
    cr_assert_eq(
        trn_prompts_render(p, "math_mini", "What is {x}?", &sys, &user),
        LISA_OK);
    cr_assert_str_eq(sys, "You solve math.\n\nWork in /testbed; write "
                          "/out/answer.txt.");
    /* a block scalar keeps the two backslashes; {{}} is {}; the statement's
     * braces are not formatted again; input_dir takes its default */
    cr_assert_str_eq(user, "<problem>\nWhat is {x}?\n</problem>\nAnswer "
                           "within \\\\boxed{} in /out/answer.txt; files in "
                           "/testbed/documents.");
    lisa_free(&sys);
    lisa_free(&user);
    /* no folder covers chem and there is no default: the agent's own */
    cr_assert_eq(trn_prompts_render(p, "chem", "q", &sys, &user),
                 LISA_NOTFOUND);
    cr_assert_null(sys);
    trn_prompts_destroy(&p);
    trn_prompts_destroy(&p);
}

Test(trn_prompts, longest_folder_then_default, .init = s_setup,
     .fini = s_teardown)
{
    s_write("math/config.yaml", "system_prompt: M\ninstance_prompt: m\n");
    s_write("math_toy/config.yaml", "system_prompt: T\n");
    s_write("config.yaml", "system_prompt: D\ninstance_prompt: 'd: "
                           "{problem_statement}'\n");
    char err[256] = "";
    trn_prompts_t *p = trn_prompts_load(s_dir, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    cr_assert_eq(trn_prompts_count(p), 3);
    const char *cases[][3] = {{"MATH_toy_val", "T", "q"},
                              {"math", "M", "m"},
                              {"biomed", "D", "d: q"}};
    for (size_t i = 0; i < 3; i++) {
        char *sys = NULL, *user = NULL;
        cr_assert_eq(trn_prompts_render(p, cases[i][0], "q", &sys, &user),
                     LISA_OK);
        cr_assert_str_eq(sys, cases[i][1], "%s", cases[i][0]);
        /* no instance prompt: the statement itself */
        cr_assert_str_eq(user, cases[i][2], "%s", cases[i][0]);
        lisa_free(&sys);
        lisa_free(&user);
    }
    trn_prompts_destroy(&p);
}

Test(trn_prompts, one_file_for_every_source, .init = s_setup,
     .fini = s_teardown)
{
    s_write("mine.yaml", s_math);
    char path[512], err[256] = "";
    snprintf(path, sizeof path, "%s/mine.yaml", s_dir);
    trn_prompts_t *p = trn_prompts_load(path, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    char *sys = NULL, *user = NULL;
    cr_assert_eq(trn_prompts_render(p, "anything", "Q", &sys, &user), LISA_OK);
    cr_assert(strstr(user, "<problem>\nQ\n</problem>") != NULL, "%s", user);
    lisa_free(&sys);
    lisa_free(&user);
    trn_prompts_destroy(&p);
}

Test(trn_prompts, bad_sets_are_refused, .init = s_setup, .fini = s_teardown)
{
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"system_prompt: 'a {unknown}'\n", "{unknown}"},
        {"system_prompt: ok\ninstance_prompt: '{problem_statement!r}'\n",
         "{problem_statement!r}"},
        {"system_prompt: 'a } b'\n", "single '}'"},
        {"system_prompt: 'a { b'\n", "'{' without"},
        {"system_prompt: '{}'\n", "{}"},
        {"instance_prompt: x\n", "no system_prompt"},
        {"system_prompt: [1, 2]\n", "not text"},
        {"- a list\n", "not a mapping"},
        {"system_prompt: \"unclosed\n", "not YAML"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s_write("config.yaml", bad[i].text);
        char err[256] = "";
        trn_prompts_t *p = trn_prompts_load(s_dir, err, sizeof err);
        cr_assert_null(p, "%zu", i);
        cr_assert(strstr(err, bad[i].why) != NULL, "%zu: %s", i, err);
        cr_assert(strstr(err, "config.yaml") != NULL, "%zu: %s", i, err);
    }
    char err[256] = "";
    cr_assert_null(trn_prompts_load("no-such-prompt-set", err, sizeof err));
    cr_assert(strstr(err, "no-such-prompt-set") != NULL, "%s", err);
    /* a folder without any config.yaml */
    char path[512];
    snprintf(path, sizeof path, "%s/config.yaml", s_dir);
    cr_assert_eq(unlink(path), 0);
    cr_assert_null(trn_prompts_load(s_dir, err, sizeof err));
    cr_assert(strstr(err, "no config.yaml") != NULL, "%s", err);
}
