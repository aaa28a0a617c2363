/*
 * agt_tools tests: the three tool schemas, dispatch, argument errors and
 * the execute_bash observation format. The first test is the usage example.
 */
#include "agt_tools.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char s_dir[64];
static agt_tools_t *s_t;
static agt_tools_cfg_t s_cfg;

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/agt_tools_XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
    agt_tools_cfg_t c = {.root = s_dir,
                         .cmd_timeout_ms = 120000,
                         .capture_bytes = 1 << 20,
                         .obs_max_bytes = 16384,
                         .head_lines = 40,
                         .tail_lines = 40,
                         .grace_ms = 200};
    s_cfg = c;
    s_t = agt_tools_new(&s_cfg);
    cr_assert_not_null(s_t);
}

static void
s_teardown(void)
{
    agt_tools_destroy(&s_t);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(agt_tools, .init = s_setup, .fini = s_teardown);

Test(agt_tools, usage)
{
    agt_tool_status_t st;
    char *obs = agt_tools_call(
        s_t, "execute_bash",
        "{\"command\":\"printf '\\\\\\\\boxed{4}' > answer.txt; cat "
        "answer.txt\"}",
        &st);
    cr_assert_eq(st, AGT_TOOL_OK);
    cr_assert_str_eq(obs, "Exit code: 0\nExecution output of "
                          "[execute_bash]:\n[STDOUT]\n\\boxed{4}\n");
    lisa_free(&obs);
    obs = agt_tools_call(s_t, "submit", "{}", &st);
    cr_assert_eq(st, AGT_TOOL_SUBMIT);
    cr_assert_str_eq(obs, "<<< Finished >>>");
    lisa_free(&obs);
}

Test(agt_tools, schemas_are_the_recipe_tools)
{
    json_t *s = agt_tools_schemas();
    cr_assert_eq(json_array_size(s), 3);
    const char *want[] = {"str_replace_editor", "execute_bash", "submit"};
    for (size_t i = 0; i < 3; i++) {
        json_t *fn = json_object_get(json_array_get(s, i), "function");
        cr_assert_str_eq(json_string_value(json_object_get(fn, "name")),
                         want[i]);
        cr_assert(json_is_object(json_object_get(fn, "parameters")));
    }
    json_t *ed = json_object_get(json_array_get(s, 0), "function");
    json_t *cmd = json_object_get(
        json_object_get(json_object_get(ed, "parameters"), "properties"),
        "command");
    cr_assert_eq(json_array_size(json_object_get(cmd, "enum")), 4);
    json_decref(s);
}

Test(agt_tools, stderr_section_only_when_present)
{
    agt_tool_status_t st;
    char *obs =
        agt_tools_call(s_t, "execute_bash",
                       "{\"command\":\"echo o; echo e >&2; exit 2\"}", &st);
    cr_assert_str_eq(obs, "Exit code: 2\nExecution output of "
                          "[execute_bash]:\n[STDOUT]\no\n[STDERR]\ne\n");
    lisa_free(&obs);
}

Test(agt_tools, long_output_is_cut_by_lines_and_bytes)
{
    agt_tool_status_t st;
    char *obs = agt_tools_call(s_t, "execute_bash",
                               "{\"command\":\"seq 1 1000\"}", &st);
    cr_assert(strstr(obs, "\n40\n<Observation truncated"));
    cr_assert(strstr(obs, "920 lines left out>\n961\n"));
    cr_assert_null(strstr(obs, "\n41\n"));
    lisa_free(&obs);
    /* One 3 MB line: the recipe would pass it whole; we cap it. */
    obs = agt_tools_call(
        s_t, "execute_bash",
        "{\"command\":\"head -c 3000000 /dev/zero | tr '\\\\0' x\"}", &st);
    cr_assert_lt(strlen(obs), 16384 + 512);
    cr_assert(strstr(obs, "bytes left out"));
    lisa_free(&obs);
}

Test(agt_tools, timeout_observation)
{
    agt_tools_cfg_t c = s_cfg;
    c.cmd_timeout_ms = 300;
    agt_tools_t *t = agt_tools_new(&c);
    agt_tool_status_t st;
    char *obs =
        agt_tools_call(t, "execute_bash", "{\"command\":\"sleep 20\"}", &st);
    cr_assert(strstr(obs, "took too long to execute (>1s)"), "%s", obs);
    cr_assert(strstr(obs, "Exit code: 124"));
    lisa_free(&obs);
    /* The deadline caps the per-command limit too. */
    agt_tools_set_time_left(s_t, 200);
    obs =
        agt_tools_call(s_t, "execute_bash", "{\"command\":\"sleep 20\"}", &st);
    cr_assert(strstr(obs, "Exit code: 124"));
    lisa_free(&obs);
    agt_tools_destroy(&t);
}

Test(agt_tools, bad_calls_are_observations)
{
    static const struct {
        const char *name, *args, *needle;
    } cases[] = {
        {"rm_rf", "{}", "unknown function"},
        {NULL, "{}", "no function name"},
        {"execute_bash", "{\"command\":", "not a valid JSON"},
        {"execute_bash", "[1,2]", "must be a JSON object"},
        {"execute_bash", "{}", "non-empty string"},
        {"execute_bash", "{\"command\":7}", "non-empty string"},
        {"str_replace_editor", "{\"command\":\"view\"}", "`path`"},
        {"str_replace_editor",
         "{\"command\":\"insert\",\"path\":\"x\",\"insert_line\":\"a\"}",
         "insert_line"},
        {"str_replace_editor",
         "{\"command\":\"view\",\"path\":\"x\",\"view_range\":[1]}",
         "view_range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        agt_tool_status_t st = AGT_TOOL_OK;
        char *obs = agt_tools_call(s_t, cases[i].name, cases[i].args, &st);
        cr_assert_eq(st, AGT_TOOL_FAILED, "case %zu", i);
        cr_assert(strstr(obs, cases[i].needle), "case %zu: %s", i, obs);
        lisa_free(&obs);
    }
}

Test(agt_tools, editor_through_json_with_quoted_numbers)
{
    agt_tool_status_t st;
    char *obs = agt_tools_call(s_t, "str_replace_editor",
                               "{\"command\":\"create\",\"path\":\"n.txt\","
                               "\"file_text\":\"a\\nb\\nc\\n\"}",
                               &st);
    cr_assert_eq(st, AGT_TOOL_OK);
    lisa_free(&obs);
    obs = agt_tools_call(s_t, "str_replace_editor",
                         "{\"command\":\"view\",\"path\":\"n.txt\","
                         "\"view_range\":[\"2\",2]}",
                         &st);
    cr_assert_eq(st, AGT_TOOL_OK, "%s", obs);
    cr_assert(strstr(obs, "     2\tb\n"));
    cr_assert_null(strstr(obs, "     3\t"));
    lisa_free(&obs);
}
