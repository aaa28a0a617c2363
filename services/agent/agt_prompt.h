/*
 * agt_prompt: the system and first user message of an episode.
 *
 * Like the recipe, the prompt depends on the task's domain, read from the
 * data_source prefix (the "_mini" suffix of validation sets is ignored):
 * math and physics answers go in \boxed{}; chem and biomed are multiple
 * choice (the letter only); instruct_follow answers are the response text
 * itself; instruct_pretrain and long_context are questions over documents
 * in <root>/documents/, where a qa_type of "multiple choice" asks for
 * letters. Every domain writes its final answer to <root>/answer.txt, the
 * file the agent posts as its result. The documents are never pasted into
 * the prompt: the model must read them with its tools.
 */
#ifndef AGT_PROMPT_H
#define AGT_PROMPT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    AGT_DOMAIN_GENERAL = 0,   /* unknown data source */
    AGT_DOMAIN_MATH = 1,      /* math*, physics*: \boxed{} */
    AGT_DOMAIN_CHOICE = 2,    /* chem*, biomed*: one letter */
    AGT_DOMAIN_INSTRUCT = 3,  /* instruct_follow*: the response itself */
    AGT_DOMAIN_DOCUMENTS = 4, /* instruct_pretrain*, long_context* */
    AGT_DOMAIN_TOY = 5        /* math_toy*: the compact toy prompt
                                 (docs/local-run.md) */
} agt_domain_t;

typedef struct {
    const char *data_source; /* routes the domain (may be NULL) */
    const char *qa_type;     /* extra_info.qa_type (may be NULL) */
    const char *problem;     /* problem_statement */
    const char *root;        /* working directory, normally /testbed */
    size_t n_files;          /* input files written to <root>/documents */
    bool packages;           /* sandbox.network=packages: pip and apt reach the
                                package indexes through a proxy (agt_relay) */
} agt_prompt_in_t;

/* Domain of a data source. */
agt_domain_t agt_prompt_domain(const char *data_source);
/* Short name of a domain ("math", ...). */
const char *agt_prompt_domain_name(agt_domain_t d);
/* The system message (caller frees). */
char *agt_prompt_system(const agt_prompt_in_t *in);
/* The first user message (caller frees). */
char *agt_prompt_user(const agt_prompt_in_t *in);
/* The tool schemas to send (caller decrefs): execute_bash and submit
 * with short descriptions for the toy domain, else agt_tools_schemas(). */
json_t *agt_prompt_tools(const agt_prompt_in_t *in);
/* The reminder sent as a user message when a reply has no tool call. */
extern const char *const AGT_PROMPT_CONTINUE;

#endif
