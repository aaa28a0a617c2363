/*
 * lisa_toolcall: tool calls out of generated text (Hermes style).
 *
 * Qwen3 emits each call as
 *     <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
 * after optional content. The parser returns the content (the text
 * outside the blocks) and, per block, the name, the arguments as JSON
 * text, an id, or an error. A malformed block (bad JSON, no name,
 * arguments not an object, no closing tag) is reported as an error on
 * that call, never as a failure of the whole parse, so the gateway can
 * answer with what did parse and count what did not.
 *
 * The arguments text is the exact substring the model wrote when it wrote
 * an object (so that rendering the call back through the chat template,
 * where a string is copied as is, reproduces the model's bytes); for
 * arguments written as a JSON string holding an object, it is that
 * string's value.
 *
 * Content rule: the text before the first block, with trailing
 * whitespace removed, then any non-blank text between or after blocks
 * (trimmed), joined by "\n". Text without any block is returned as is.
 * With LISA_TOOLCALL_KEEP_MALFORMED (what the gateway answers agents
 * with) a malformed block is text: it stays in the content where the
 * model wrote it, the rule counts only well-formed blocks as blocks, and
 * text without a well-formed block is returned as is.
 *
 * Each well-formed call also carries its arguments parsed (a jansson
 * object, borrowed), so a caller that needs the value does not parse the
 * text a second time.
 */
#ifndef LISA_TOOLCALL_H
#define LISA_TOOLCALL_H

#include "lisa/lisa_rc.h"

#include <jansson.h>
#include <stddef.h>

#define LISA_TOOLCALL_MAX_CALLS  64
#define LISA_TOOLCALL_MAX_TEXT   (8u * 1024u * 1024u)
#define LISA_TOOLCALL_MAX_PREFIX 96u /* bytes of id_prefix kept */

/* lisa_toolcalls_parse_opts flags. */
#define LISA_TOOLCALL_KEEP_MALFORMED 1u /* malformed blocks are content */

typedef struct lisa_toolcalls_t lisa_toolcalls_t;

/* One parsed block. Strings are borrowed from the lisa_toolcalls_t. */
typedef struct {
    const char *id;        /* id_prefix + index, e.g. "call_0" */
    const char *name;      /* NULL when error */
    const char *arguments; /* JSON object text; NULL when error */
    const char *raw;       /* the text between the tags (or to the end) */
    const char *error;     /* NULL when well formed; a static reason */
    const json_t *value;   /* the arguments parsed; NULL when error */
    size_t start, end;     /* the block in the text: "<tool_call>" through
                            * "</tool_call>" (or the end of the text) */
} lisa_toolcall_t;

/* A call id without printf (once per call of every reply): the first
 * LISA_TOOLCALL_MAX_PREFIX bytes of prefix, then sep (NULL: none), then i
 * in decimal. "call_" + 3 gives "call_3". Caller frees. */
char *lisa_toolcall_id(const char *prefix, const char *sep, size_t i);

/* Parses text[0..len). id_prefix (NULL: "call_") starts every id. NULL
 * only when len exceeds LISA_TOOLCALL_MAX_TEXT. Blocks past
 * LISA_TOOLCALL_MAX_CALLS are one last call with an error. */
lisa_toolcalls_t *lisa_toolcalls_parse(const char *text, size_t len,
                                       const char *id_prefix);

/* A JSON reader with json_loadb's contract (same values, same refusals),
 * e.g. a faster one the caller trusts to agree with jansson. */
typedef json_t *(lisa_toolcall_load_fn) (const char *p, size_t len,
                                         size_t flags, json_error_t *err);

/* Same with flags (LISA_TOOLCALL_KEEP_MALFORMED) and the reader of each
 * block's JSON (NULL: json_loadb). */
lisa_toolcalls_t *lisa_toolcalls_parse_opts(const char *text, size_t len,
                                            const char *id_prefix,
                                            unsigned flags,
                                            lisa_toolcall_load_fn *load);

/* Frees the result and sets *p to NULL; safe on NULL and twice. */
void lisa_toolcalls_destroy(lisa_toolcalls_t **p);

/* The content (never NULL; "" when there is none). */
const char *lisa_toolcalls_content(const lisa_toolcalls_t *self);

/* Number of blocks found (well formed or not). */
size_t lisa_toolcalls_count(const lisa_toolcalls_t *self);

/* Number of blocks with an error. */
size_t lisa_toolcalls_errors(const lisa_toolcalls_t *self);

/* Block i (< count), borrowed. */
const lisa_toolcall_t *lisa_toolcalls_get(const lisa_toolcalls_t *self,
                                          size_t i);

/* The OpenAI assistant message for the parse: {"role": "assistant",
 * "content": CONTENT or null (when empty and there are calls),
 * "tool_calls": [{"id", "type": "function", "function": {"name",
 * "arguments"}}] (well-formed calls only; the key is absent when there are
 * none)}. A new reference, owned by the caller. */
json_t *lisa_toolcalls_message(const lisa_toolcalls_t *self);

#endif
