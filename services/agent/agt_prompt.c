/*
 * agt_prompt: prompt texts as tables: one row per domain with its role and
 * its answer-format rule, joined with the parts every domain shares.
 */
#include "agt_prompt.h"

#include "agt_text.h"
#include "agt_tools.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_toy.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define S_PROMPT_MAX (1024u * 1024u)

const char *const AGT_PROMPT_CONTINUE =
    "You forgot to use a function call in your response. YOU MUST USE A "
    "FUNCTION CALL IN EACH RESPONSE.\n\nIMPORTANT: YOU SHOULD NEVER ASK FOR "
    "HUMAN HELP.";

static const struct {
    const char *prefix;
    agt_domain_t domain;
} s_routes[] = {
    {"math_toy", AGT_DOMAIN_TOY}, /* before "math": first match wins */
    {"math", AGT_DOMAIN_MATH},
    {"physics", AGT_DOMAIN_MATH},
    {"chem", AGT_DOMAIN_CHOICE},
    {"biomed", AGT_DOMAIN_CHOICE},
    {"instruct_follow", AGT_DOMAIN_INSTRUCT},
    {"instruct_pretrain", AGT_DOMAIN_DOCUMENTS},
    {"long_context", AGT_DOMAIN_DOCUMENTS},
};

static const struct {
    const char *name;
    const char *role;
    const char *answer_rule; /* "{ANSWER}" stands for the answer file */
} s_domains[] = {
    [AGT_DOMAIN_GENERAL] =
        {"general",
         "You are an expert who solves complex problems by writing and "
         "running code.",
         "Write the final answer to {ANSWER} in plain text."},
    [AGT_DOMAIN_MATH] =
        {"math",
         "You are an expert in mathematics and physics who solves problems "
         "by writing and running code (python3 with sympy, numpy and scipy "
         "is installed).",
         "Write the final answer to {ANSWER} wrapped in \\boxed{}, e.g. "
         "\\boxed{42}. A shell `echo` can mangle backslashes (\\b): write "
         "the file with printf '%s' '...', a quoted heredoc, or the "
         "str_replace_editor `create` command."},
    [AGT_DOMAIN_CHOICE] =
        {"choice",
         "You are an expert in chemistry, biology and medicine who checks "
         "reasoning with code where it helps.",
         "This is a multiple-choice question. Write only the letter of the "
         "correct option (for example: B) to {ANSWER}."},
    [AGT_DOMAIN_INSTRUCT] =
        {"instruct",
         "You are an expert writer who follows every instruction exactly "
         "and checks the text with code (word counts, formats, keywords).",
         "Write your complete response, and nothing else, to {ANSWER}. Check "
         "it "
         "against every instruction before you submit."},
    [AGT_DOMAIN_DOCUMENTS] =
        {"documents",
         "You are an expert analyst who answers questions from documents by "
         "searching and reading them with code.",
         "Write the final answer to {ANSWER} in plain text: concise, complete, "
         "and grounded in the documents."},
    /* The toy model's byte tokenizer makes every byte a token: a compact
     * prompt keeps toy rollouts short (the warm start is trained on
     * exactly these texts, examples/toy/toy_gen.c). */
    [AGT_DOMAIN_TOY] = {"toy", LISA_TOY_SYSTEM, ""},
};

json_t *
agt_prompt_tools(const agt_prompt_in_t *in)
{
    if (agt_prompt_domain(in->data_source) == AGT_DOMAIN_TOY) {
        json_t *t = json_loads(LISA_TOY_TOOLS, 0, NULL);
        if (t)
            return t;
    }
    return agt_tools_schemas();
}

agt_domain_t
agt_prompt_domain(const char *data_source)
{
    if (!data_source)
        return AGT_DOMAIN_GENERAL;
    for (size_t i = 0; i < sizeof s_routes / sizeof s_routes[0]; i++) {
        size_t n = strlen(s_routes[i].prefix);
        if (strncasecmp(data_source, s_routes[i].prefix, n) == 0)
            return s_routes[i].domain;
    }
    return AGT_DOMAIN_GENERAL;
}

const char *
agt_prompt_domain_name(agt_domain_t d)
{
    if ((unsigned) d >= sizeof s_domains / sizeof s_domains[0])
        return "general";
    return s_domains[d].name;
}

static int
s_is_multiple_choice(const char *qa_type)
{
    return qa_type && strncasecmp(qa_type, "multiple", 8) == 0;
}

/* The network line of the notes: which mode the sandbox runs in. */
static const char *
s_network_note(const agt_prompt_in_t *in)
{
    return in->packages
               ? "The sandbox reaches only the package indexes the operator "
                 "allows, through a proxy (pip install and apt-get work; "
                 "nothing else on the network does)"
               : "The sandbox has no network access";
}

char *
agt_prompt_system(const agt_prompt_in_t *in)
{
    agt_domain_t d = agt_prompt_domain(in->data_source);
    const char *root = in->root ? in->root : "/testbed";
    if (d == AGT_DOMAIN_TOY)
        return lisa_strdup(s_domains[d].role);
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(S_PROMPT_MAX);
    lisa_buf_puts(&sb, s_domains[d].role);
    lisa_buf_printf(
        &sb,
        "\n\n<DIRECTORIES>\n"
        "- Working directory: %s\n"
        "- Input documents (if any): %s/documents/\n"
        "- Answer file: %s/answer.txt\n"
        "</DIRECTORIES>\n\n"
        "<WORKFLOW>\n"
        "1. Explore: list and read the inputs with execute_bash (ls, grep, "
        "head, sed -n) or str_replace_editor view.\n"
        "2. Compute: write code to a file and execute it; do not work out "
        "long calculations or searches in your head.\n"
        "3. Verify: check intermediate results and the final answer with "
        "code.\n"
        "4. Answer: write the final answer to %s/answer.txt, then call "
        "submit.\n"
        "</WORKFLOW>\n\n"
        "<IMPORTANT_NOTES>\n"
        "- Every execute_bash call starts a fresh shell: use absolute paths "
        "or `cd %s && ...` in the same command.\n"
        "- Use str_replace_editor to create and edit files, execute_bash to "
        "run commands and programs.\n"
        "- Long outputs are cut: print only what you need, or save it to a "
        "file and search it.\n"
        "- %s; python3 with numpy, sympy and scipy is available.\n"
        "- Call exactly one function in each response.\n"
        "</IMPORTANT_NOTES>\n\n"
        "<ANTI_HARDCODING>\n"
        "- Do not put your reasoning into code comments or print "
        "statements, and do not print a hard-coded answer: compute it.\n"
        "</ANTI_HARDCODING>\n",
        root, root, root, root, root, s_network_note(in));
    return lisa_buf_take(&sb);
}

/* Appends `rule` with "{ANSWER}" replaced by `answer`. */
static void
s_put_rule(lisa_buf_t *sb, const char *rule, const char *answer)
{
    static const char key[] = "{ANSWER}";
    const char *p;
    while ((p = strstr(rule, key)) != NULL) {
        lisa_buf_put(sb, rule, (size_t) (p - rule));
        lisa_buf_puts(sb, answer);
        rule = p + sizeof key - 1;
    }
    lisa_buf_puts(sb, rule);
}

char *
agt_prompt_user(const agt_prompt_in_t *in)
{
    agt_domain_t d = agt_prompt_domain(in->data_source);
    const char *root = in->root ? in->root : "/testbed";
    if (d == AGT_DOMAIN_TOY)
        return lisa_strdup(in->problem ? in->problem : "");
    size_t n = strlen(root) + 16;
    char *answer = lisa_malloc(n);
    snprintf(answer, n, "%s/answer.txt", root);
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(S_PROMPT_MAX);
    lisa_buf_puts(&sb, in->problem ? in->problem : "");
    lisa_buf_puts(&sb, "\n\n");
    if (in->n_files)
        lisa_buf_printf(&sb,
                        "The input documents (%zu file%s) are in "
                        "%s/documents/. They are not shown here: read and "
                        "search them with your tools.\n\n",
                        in->n_files, in->n_files == 1 ? "" : "s", root);
    if (d == AGT_DOMAIN_DOCUMENTS && s_is_multiple_choice(in->qa_type))
        lisa_buf_printf(&sb,
                        "This is a multiple-choice question. Write only the "
                        "letter of the correct option to %s; if several "
                        "options are correct, write their letters separated "
                        "by commas (for example: A,C).",
                        answer);
    else
        s_put_rule(&sb, s_domains[d].answer_rule, answer);
    lisa_buf_puts(&sb, "\nWhen the answer file is written, call submit.");
    lisa_free(&answer);
    return lisa_buf_take(&sb);
}
