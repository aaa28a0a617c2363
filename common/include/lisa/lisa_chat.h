/*
 * lisa_chat: the Qwen3 and SmolLM2 chat templates, rendered in C.
 *
 * The gateway turns OpenAI-format messages into the exact string the
 * model's chat template (tokenizer_config.json `chat_template`, rendered
 * by transformers' apply_chat_template) produces, without a Jinja engine.
 * This module implements that one template, byte for byte:
 *
 *   - with tools: a system turn "<|im_start|>system\n" + [first system
 *     message + "\n\n"] + the "# Tools" preamble, each tool as "\n" +
 *     tojson(tool) inside <tools></tools>, the <tool_call> instructions,
 *     "<|im_end|>\n"; without tools the first system message alone;
 *   - user turns and later system turns
 * "<|im_start|>ROLE\nCONTENT<|im_end|>\n";
 *   - assistant turns "<|im_start|>assistant\n" + content, each tool call
 *     as [\n]<tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>
 *     (ARGS a string is copied as is, an object goes through tojson),
 *     "<|im_end|>\n"; reasoning ("reasoning_content", or "thinking" /
 *     "reasoning" as transformers aliases them, or a "<think>...</think>"
 *     prefix of the content) is kept as a <think> block only for
 *     assistant turns after the last real user query, as the template
 *     does;
 *   - consecutive tool messages merged into one user turn of
 *     "\n<tool_response>\nCONTENT\n</tool_response>" blocks;
 *   - the generation prompt "<|im_start|>assistant\n" (plus an empty
 *     think block when enable_thinking is false).
 *
 * Two liberties where transformers would raise an error: a null or
 * missing content renders as "", and a content given as an array of
 * parts renders as its "text" parts joined with "\n". A third on
 * request (developer_as_system, the gateway's choice): OpenAI's
 * "developer" role renders as "system", where the template would drop
 * the message.
 *
 * Incremental rendering. The template's output is a header followed by
 * one piece per message; lisa_chat_render_from returns the pieces of
 * messages[start..] (computed with the whole conversation in view) and
 * the generation prompt. The gateway keeps the exact token ids of a
 * conversation (prompt + sampled response) and extends them:
 *
 *   When the model's response ended with <|im_end|> (the stop token is
 *   part of the sampled ids), the template's rendering of that assistant
 *   turn continues with a single "\n"; so the text to append, for the
 *   messages appended after that assistant turn (starting at index k), is
 *
 *       "\n" + lisa_chat_render_from(messages, tools, k, gen_prompt)
 *
 *   which lisa_chat_render_continuation builds (ended_with_im_end=true;
 *   with false it starts "<|im_end|>\n" instead, closing a turn cut short
 *   by a length limit). Encode it with special tokens allowed: it starts
 *   right after a special token, so its ids are exactly the ids the full
 *   rendering has at that place.
 *
 * Template variants. The model's chat_template (tokenizer_config.json,
 * or a GGUF file's tokenizer.chat_template, which `lisa convert` copies
 * there) selects the variant, lisa_chat_template_detect:
 *
 *   LISA_CHAT_QWEN3    the template above (Qwen3's, with its <think>
 *                      handling and hermes-style tools);
 *   LISA_CHAT_SMOLLM2  SmolLM2's ChatML: every message as
 *                      "<|im_start|>ROLE\nCONTENT<|im_end|>\n", the
 *                      content verbatim (no <think> handling), preceded by
 *                      the default system turn "You are a helpful AI
 *                      assistant named SmolLM, trained by Hugging Face"
 *                      when the first message is not a system message; the
 *                      generation prompt "<|im_start|>assistant\n". The
 *                      template knows no tools; lisa renders them as
 *                      Qwen's template does (the hermes rule): with tools
 *                      the system turn is the system text (the first
 *                      system message, else the default one) + "\n\n" +
 *                      the "# Tools" block, assistant tool calls as
 *                      <tool_call> blocks after the content, tool messages
 *                      merged into a user turn of <tool_response> blocks;
 *                      so the agent's tool calls parse as with Qwen3.
 *
 * All sizes are bounded (LISA_CHAT_MAX_*); bad shapes are LISA_INVALID
 * with a static reason.
 */
#ifndef LISA_CHAT_H
#define LISA_CHAT_H

#include "lisa/lisa_rc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define LISA_CHAT_MAX_MESSAGES 4096
#define LISA_CHAT_MAX_OUTPUT   (32u * 1024u * 1024u)

typedef enum {
    LISA_CHAT_QWEN3 = 0, /* Qwen3's template (the default) */
    LISA_CHAT_SMOLLM2,   /* SmolLM2's ChatML + hermes tools */
} lisa_chat_template_t;

typedef struct {
    lisa_chat_template_t tmpl;  /* the variant rendered */
    bool add_generation_prompt; /* end with "<|im_start|>assistant\n" */
    int enable_thinking;        /* -1 undefined (default), 0 false, 1 true */
    bool developer_as_system;   /* render role "developer" as "system" */
} lisa_chat_opts_t;

/* Default options: generation prompt on, enable_thinking undefined,
 * developer messages as the template treats them (dropped). */
lisa_chat_opts_t lisa_chat_opts_default(void);

/* The variant that renders a chat template given as its Jinja source:
 * LISA_OK with *out set for a known one (recognised by the markers each
 * template has: Qwen3's <|im_start|>, <tool_call>, <tool_response> and
 * <think>; SmolLM2's ChatML with its default system message and no
 * tools); LISA_NOTFOUND with *out = LISA_CHAT_QWEN3 when jinja is NULL
 * (no template: Qwen3's is assumed, the caller says so in its log);
 * LISA_INVALID with *why for any other template, which lisa cannot
 * render faithfully. */
lisa_rc_t lisa_chat_template_detect(const char *jinja,
                                    lisa_chat_template_t *out,
                                    const char **why) LISA_NODISCARD;

/* "qwen3" or "smollm2". */
const char *lisa_chat_template_name(lisa_chat_template_t t);

/* Renders the whole conversation. `messages` is a JSON array of OpenAI
 * messages, `tools` a JSON array of tool schemas or NULL. On success *out
 * is a new NUL-terminated string (*len its length, may be NULL), owned by
 * the caller. On failure *why (may be NULL) names the reason. */
lisa_rc_t lisa_chat_render(const json_t *messages, const json_t *tools,
                           const lisa_chat_opts_t *opts, char **out,
                           size_t *len, const char **why) LISA_NODISCARD;

/* Renders only the pieces of messages[start..] (the header too when
 * start is 0), plus the generation prompt per opts. start may equal the
 * number of messages (then only the generation prompt). */
lisa_rc_t lisa_chat_render_from(const json_t *messages, const json_t *tools,
                                size_t start, const lisa_chat_opts_t *opts,
                                char **out, size_t *len,
                                const char **why) LISA_NODISCARD;

/* The text to append after a generated assistant turn, for the messages
 * from index `start` on: "\n" (ended_with_im_end) or "<|im_end|>\n"
 * followed by lisa_chat_render_from(start). See the header comment. */
lisa_rc_t lisa_chat_render_continuation(const json_t *messages,
                                        const json_t *tools, size_t start,
                                        bool ended_with_im_end,
                                        const lisa_chat_opts_t *opts,
                                        char **out, size_t *len,
                                        const char **why) LISA_NODISCARD;

#endif
