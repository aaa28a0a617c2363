/*
 * gw_render: messages -> token ids, and sampled ids -> an OpenAI reply.
 *
 * The text is the Qwen3 chat template as lisa_chat renders it (the
 * renderer the oracle tests compare with transformers'
 * apply_chat_template, tool schemas through Python's tojson), tokenized
 * with the model's own tokenizer (special tokens recognised, as
 * `apply_chat_template(tokenize=True)` does). Two modes:
 *
 *  - full: the whole conversation, with the tools block in the system
 *    message, then the generation prompt "<|im_start|>assistant\n";
 *  - appended: only messages[first..], rendered as the template renders
 *    them after an assistant turn (lisa_chat_render_continuation). The
 *    previous sequence ended with the ids the engine sampled; if they did
 *    not end with <|im_end|> (length limit, stop string) the turn is
 *    closed with "<|im_end|>" first. The text always starts at a special
 *    token or right after one, so tokenizing it alone gives the same ids
 *    as tokenizing it in context.
 *
 * One liberty beyond the template: the "developer" role renders as
 * "system" (the template would drop it).
 *
 * The reply side decodes the sampled ids (trailing stop token dropped) and
 * parses them with lisa_toolcall: well-formed
 * <tool_call>{"name": ..., "arguments": ...}</tool_call> blocks become
 * OpenAI tool_calls whose arguments are the bytes the model wrote (never
 * re-serialised, so the agent sends back, and a later prompt renders,
 * exactly what was sampled); text outside them is the content, and a
 * malformed block stays in the content as text.
 */
#ifndef GW_RENDER_H
#define GW_RENDER_H

#include "gw_openai.h"
#include "lisa/lisa_ids.h"
#include "lisa/lisa_rc.h"
#include "lisa/lisa_tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gw_render_t gw_render_t;

/* New renderer over the tokenizer in `dir` (tokenizer.json). NULL (logged)
 * when it cannot be loaded. */
gw_render_t *gw_render_new(const char *dir);

/* Destroys it; safe on NULL, sets *self to NULL. */
void gw_render_destroy(gw_render_t **self);

/* The tokenizer (borrowed). */
lisa_tokenizer_t *gw_render_tokenizer(gw_render_t *self);

/* Renders messages[first..] (first == 0: the full conversation with tools)
 * plus the generation prompt and appends the ids to `out`. `prev_last` is
 * the last id of the stored sequence (ignored when first == 0).
 * LISA_TOOLARGE when out's bound is hit, LISA_INVALID on bad text. */
lisa_rc_t gw_render_prompt(gw_render_t *self, const json_t *messages,
                           size_t first, const json_t *tools, int32_t prev_last,
                           lisa_ids_t *out) LISA_NODISCARD;

/* The text gw_render_prompt would tokenize (caller frees); NULL when the
 * messages cannot be rendered (a shape the template refuses). */
char *gw_render_text(gw_render_t *self, const json_t *messages, size_t first,
                     const json_t *tools, int32_t prev_last);

/* Stop ids for engines: <|im_end|> and <|endoftext|> (borrowed). */
const int32_t *gw_render_stop_ids(const gw_render_t *self, size_t *n);

/* Builds the reply from sampled ids. `parse_tools` false keeps tool-call
 * text as content (tool_choice "none"). Call ids are "<id_prefix>_<i>".
 * `finish` is the engine's finish reason ("stop", "length"). */
lisa_rc_t gw_render_reply(gw_render_t *self, const uint32_t *ids, size_t n,
                          const char *finish, bool parse_tools,
                          const char *id_prefix,
                          gw_reply_t *out) LISA_NODISCARD;

#endif
