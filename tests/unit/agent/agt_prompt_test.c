/*
 * agt_prompt tests: per-domain answer rules. The first test is the usage
 * example.
 */
#include "agt_prompt.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <string.h>

Test(agt_prompt, usage)
{
    agt_prompt_in_t in = {.data_source = "math_mini",
                          .problem = "Find x such that x + 1 = 3.",
                          .root = "/testbed"};
    char *sys = agt_prompt_system(&in);
    char *user = agt_prompt_user(&in);
    cr_assert(strstr(sys, "/testbed/answer.txt"));
    cr_assert(strstr(user, "Find x such that x + 1 = 3."));
    cr_assert(strstr(user, "\\boxed{}"));
    cr_assert(strstr(user, "/testbed/answer.txt"));
    cr_assert(strstr(user, "submit"));
    lisa_free(&sys);
    lisa_free(&user);
}

Test(agt_prompt, domain_routing)
{
    static const struct {
        const char *ds;
        agt_domain_t d;
    } cases[] = {
        {"math_mini", AGT_DOMAIN_MATH},
        {"math_toy", AGT_DOMAIN_TOY},
        {"math_toy_v2", AGT_DOMAIN_TOY},
        {"physics", AGT_DOMAIN_MATH},
        {"chem_mini", AGT_DOMAIN_CHOICE},
        {"biomed_mini", AGT_DOMAIN_CHOICE},
        {"instruct_follow_mini", AGT_DOMAIN_INSTRUCT},
        {"instruct_pretrain", AGT_DOMAIN_DOCUMENTS},
        {"long_context_mini", AGT_DOMAIN_DOCUMENTS},
        {"something_else", AGT_DOMAIN_GENERAL},
        {NULL, AGT_DOMAIN_GENERAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(agt_prompt_domain(cases[i].ds), cases[i].d, "%s",
                     cases[i].ds ? cases[i].ds : "(null)");
}

Test(agt_prompt, answer_rules_per_domain)
{
    agt_prompt_in_t in = {
        .data_source = "biomed_mini", .problem = "Q", .root = "/tb"};
    char *u = agt_prompt_user(&in);
    cr_assert(strstr(u, "only the letter"));
    cr_assert(strstr(u, "/tb/answer.txt"));
    cr_assert_null(strstr(u, "{ANSWER}"));
    lisa_free(&u);
    in.data_source = "instruct_pretrain";
    in.qa_type = "multiple choice";
    in.n_files = 3;
    u = agt_prompt_user(&in);
    cr_assert(strstr(u, "separated by commas"));
    cr_assert(strstr(u, "3 files"));
    cr_assert(strstr(u, "/tb/documents/"));
    lisa_free(&u);
    in.qa_type = "free-form";
    u = agt_prompt_user(&in);
    cr_assert(strstr(u, "grounded in the documents"));
    lisa_free(&u);
    in.data_source = "instruct_follow_mini";
    u = agt_prompt_user(&in);
    cr_assert(strstr(u, "complete response"));
    lisa_free(&u);
    /* The printf advice keeps its literal %s. */
    in.data_source = "physics_mini";
    u = agt_prompt_user(&in);
    cr_assert(strstr(u, "printf '%s'"));
    lisa_free(&u);
}

Test(agt_prompt, continue_message)
{
    cr_assert(strstr(AGT_PROMPT_CONTINUE, "MUST USE A FUNCTION CALL"));
    cr_assert(strstr(AGT_PROMPT_CONTINUE, "NEVER ASK FOR HUMAN HELP"));
}

Test(agt_prompt, toy_domain_is_compact)
{
    /* The texts the toy model is warm-started on (examples/toy/toy_gen.c;
     * tests/e2e/test_toy.py holds the generator to the same texts). */
    agt_prompt_in_t in = {.data_source = "math_toy",
                          .problem = "Compute 3*4.",
                          .root = "/testbed",
                          .n_files = 1};
    char *sys = agt_prompt_system(&in);
    char *u = agt_prompt_user(&in);
    cr_assert_str_eq(sys, "You solve tasks with tools. Write the answer to "
                          "/testbed/answer.txt, then call submit.");
    cr_assert_str_eq(u, "Compute 3*4.");
    json_t *t = agt_prompt_tools(&in);
    cr_assert_eq(json_array_size(t), 2);
    cr_assert_str_eq(
        json_string_value(json_object_get(
            json_object_get(json_array_get(t, 0), "function"), "name")),
        "execute_bash");
    cr_assert_str_eq(
        json_string_value(json_object_get(
            json_object_get(json_array_get(t, 1), "function"), "name")),
        "submit");
    json_decref(t);
    /* Other domains keep the full schemas. */
    in.data_source = "math_mini";
    t = agt_prompt_tools(&in);
    cr_assert_eq(json_array_size(t), 3);
    json_decref(t);
    lisa_free(&sys);
    lisa_free(&u);
}

Test(agt_prompt, network_mode_is_said)
{
    agt_prompt_in_t in = {.data_source = "math", .problem = "p"};
    char *none = agt_prompt_system(&in);
    in.packages = true;
    char *pk = agt_prompt_system(&in);
    cr_assert(strstr(none, "no network access"));
    cr_assert_null(strstr(none, "package indexes"));
    cr_assert(strstr(pk, "reaches only the package indexes"));
    cr_assert(strstr(pk, "pip install"));
    cr_assert_null(strstr(pk, "no network access"));
    lisa_free(&none);
    lisa_free(&pk);
}
