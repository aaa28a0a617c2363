/*
 * lisa_toy: the toy task's system prompt and tool list. The agent sends
 * them (agt_prompt, domain "toy") and the toy model's warm start is
 * trained on them (examples/toy/toy_gen.c), so both take these bytes.
 *
 *     json_t *tools = json_loads(LISA_TOY_TOOLS, 0, NULL);
 */
#ifndef LISA_TOY_H
#define LISA_TOY_H

#define LISA_TOY_SYSTEM                                                        \
    "You solve tasks with tools. Write the answer to /testbed/answer.txt, "    \
    "then call submit."

#define LISA_TOY_TOOLS                                                         \
    "[{\"type\":\"function\",\"function\":{\"name\":\"execute_bash\","         \
    "\"description\":\"Run a bash command in /testbed.\","                     \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":"         \
    "{\"type\":\"string\",\"description\":\"The command.\"}},"                 \
    "\"required\":[\"command\"]}}},"                                           \
    "{\"type\":\"function\",\"function\":{\"name\":\"submit\","                \
    "\"description\":\"Finish the task.\",\"parameters\":{\"type\":"           \
    "\"object\",\"properties\":{},\"required\":[]}}}]"

#endif
