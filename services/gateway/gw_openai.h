/*
 * gw_openai: the OpenAI-shaped surface of the gateway, in jansson.
 *
 * Parses and validates `POST /v1/chat/completions` bodies (messages, tools,
 * tool_choice, sampling parameters; n must be 1), shapes the answers (one
 * JSON object, or the same content as a series of SSE chunks), and writes
 * OpenAI error bodies ({"error": {"message", "type", "param", "code"}}).
 *
 * It also reduces a message to a canonical digest so the trace can tell
 * whether the agent's conversation is a pure extension of the previous call
 * (content null and "" are equal, text parts are joined, tool-call
 * arguments compare as JSON values). Nothing here touches the network.
 */
#ifndef GW_OPENAI_H
#define GW_OPENAI_H

#include "lisa/lisa_rc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on one request. */
#define GW_MAX_MESSAGES   4096u
#define GW_MAX_TOOLS      128u
#define GW_MAX_STOP       4u
#define GW_MAX_TOOL_CALLS 64u
#define GW_DIGEST_LEN     16u
#define GW_MAX_DEPTH      64u

/* An error as the agent sees it: HTTP status and the OpenAI error object. */
typedef struct {
    int status;       /* 400, 401, 403, 404, 409, 413, 429, 502, 503 ... */
    const char *type; /* "invalid_request_error", "authentication_error" ... */
    const char *code; /* NULL or "context_length_exceeded", ... */
    char param[64];   /* "" or the offending field (copied: the request
                       * it names may be gone when the error is sent) */
    char message[256];
} gw_err_t;

/* Fills *err (returns `rc` for chaining). */
lisa_rc_t gw_err_set(gw_err_t *err, lisa_rc_t rc, int status, const char *type,
                     const char *code, const char *param, const char *fmt, ...)
    LISA_PRINTF(7, 8);

/* The error body JSON text of *err (caller frees). */
char *gw_err_body(const gw_err_t *err);

/* A validated chat request. Pointers borrow from `root`.
 *
 * Messages are parsed lazily: the body is scanned once to find each
 * message's bytes (no allocation), and a message is parsed and validated
 * only when gw_chat_req_msg asks for it. Until then its slot in `messages`
 * holds JSON null. The gateway asks only for messages whose raw hash does
 * not match the attempt's history, so a long conversation costs a hash of
 * its bytes per call, not a parse. */
typedef struct {
    json_t *root;     /* the parsed body without its messages (owned) */
    json_t *messages; /* array of n_msgs: parsed messages or null slots */
    size_t n_msgs;
    const char *body;   /* the body parsed (borrowed) */
    const char **raw;   /* raw bytes of each message (borrow the body) */
    size_t *raw_off;    /* where each message starts in the body */
    size_t *raw_len;    /* NULL entries when the body was parsed whole */
    size_t msgs_off;    /* where the messages array starts ('[') */
    size_t tools_off;   /* where the "tools" value starts, and its length */
    size_t tools_len;   /* (0: no "tools" key found by the scan) */
    size_t known_len;   /* bytes taken as known by gw_chat_req_parse_after */
    uint64_t known_gen; /* and the gen of the prefix they came from */
    uint8_t (*raw_hash)[GW_DIGEST_LEN]; /* hash of each message's bytes */
    json_t *tools;  /* array or NULL; lazily parsed (gw_chat_req_tools) */
    bool has_tools; /* a non-empty tools array was sent */
    const char *tools_raw; /* its bytes while not parsed (borrowed) */
    size_t tools_raw_len;
    uint8_t tools_digest[GW_DIGEST_LEN]; /* of its bytes, or canonical */
    const char *model;
    const char *tool_choice; /* "auto", "none", "required", a name, or NULL */
    bool tool_choice_named;  /* tool_choice names one function */
    double temperature;      /* -1 when absent */
    double top_p;            /* -1 when absent */
    int64_t top_k;           /* -1 when absent, 0 off */
    int64_t max_tokens;      /* 0 when absent */
    const char *stop[GW_MAX_STOP];
    size_t n_stop;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
} gw_chat_req_t;

/* Parses `len` bytes of `body` into *req (gw_chat_req_clear frees).
 * LISA_INVALID with *err filled for any malformed or unsupported input. */
lisa_rc_t gw_chat_req_parse(const char *body, size_t len, gw_chat_req_t *req,
                            gw_err_t *err) LISA_NODISCARD;

/* Same, lazily (see gw_chat_req_t): only the top-level fields and the
 * message boundaries are checked. `body` must outlive the request. */
lisa_rc_t gw_chat_req_parse_lazy(const char *body, size_t len,
                                 gw_chat_req_t *req,
                                 gw_err_t *err) LISA_NODISCARD;

/* What is known of a body's beginning from the same attempt's previous
 * request: its first `len` bytes run through the end of message n-1 (no
 * further); each of those messages' offset and length in it, and the
 * hash of its bytes (as gw_chat_req_t.raw_hash); where the messages
 * array starts; the tools array's span when it came before the messages
 * (tools_len 0 otherwise). */
typedef struct {
    const char *bytes;
    size_t len;
    size_t n;
    const size_t (*span)[2]; /* offset, length */
    const uint8_t (*hash)[GW_DIGEST_LEN];
    size_t msgs_off;
    size_t tools_off, tools_len;
    uint64_t gen; /* which remembered prefix this is (copied to the request) */
} gw_chat_prefix_t;

/* gw_chat_req_parse_lazy, for a body that may begin with `known` (NULL:
 * nothing known): when its first known->len bytes are those bytes, they
 * are neither scanned nor hashed again. The outcome is the same as
 * gw_chat_req_parse_lazy's in every case. */
lisa_rc_t gw_chat_req_parse_after(const char *body, size_t len,
                                  const gw_chat_prefix_t *known,
                                  gw_chat_req_t *req,
                                  gw_err_t *err) LISA_NODISCARD;

/* Message i, parsed and validated on first use (borrowed); NULL with *err
 * filled when it is malformed. */
json_t *gw_chat_req_msg(gw_chat_req_t *req, size_t i, gw_err_t *err);

/* The tools array, parsed and validated on first use (borrowed); NULL
 * when there are none, or with *err filled (err->status != 0) when it is
 * malformed. */
json_t *gw_chat_req_tools(gw_chat_req_t *req, gw_err_t *err);

/* Releases what gw_chat_req_parse holds; safe twice. */
void gw_chat_req_clear(gw_chat_req_t *req);

/* One tool call of an assistant reply. */
typedef struct {
    char *id;
    char *name;
    char *arguments; /* JSON text */
    char *canonical; /* arguments as digests compare them (compact, keys
                      * sorted), or NULL: computed from `arguments` */
} gw_tool_call_t;

/* The assistant reply the gateway returns. */
typedef struct {
    char *content; /* NULL when the reply is only tool calls */
    gw_tool_call_t *calls;
    size_t n_calls;
    const char *finish_reason; /* "stop", "length", "tool_calls" (static) */
} gw_reply_t;

/* Frees the strings and calls of *r; safe twice. */
void gw_reply_clear(gw_reply_t *r);

/* Usage numbers of one call. */
typedef struct {
    uint64_t prompt_tokens;
    uint64_t completion_tokens;
    uint64_t cached_tokens; /* prompt ids the engine had cached (reported
                             * as usage.prompt_tokens_details) */
} gw_usage_t;

/* The non-streaming response body (caller frees with free()). Written
 * directly, byte for byte what gw_chat_response_json writes. */
char *gw_chat_response(const char *id, int64_t created, const char *model,
                       const gw_reply_t *r, const gw_usage_t *u);

/* The same body built as a jansson tree (the reference). */
char *gw_chat_response_json(const char *id, int64_t created, const char *model,
                            const gw_reply_t *r, const gw_usage_t *u);

/* The streaming response: every SSE event ("data: ...\n\n") through
 * "data: [DONE]\n\n", as one string (caller frees); *len gets its length.
 * Content and tool calls are the same as in gw_chat_response. */
char *gw_chat_stream(const char *id, int64_t created, const char *model,
                     const gw_reply_t *r, const gw_usage_t *u,
                     bool include_usage, size_t *len);

/* Digest of one request message (see the file comment). */
void gw_msg_digest(const json_t *msg, uint8_t out[GW_DIGEST_LEN]);

/* Digest of the assistant message a reply becomes in the agent's history. */
void gw_reply_digest(const gw_reply_t *r, uint8_t out[GW_DIGEST_LEN]);

/* Digest of the tools array (NULL and [] are equal). */
void gw_tools_digest(const json_t *tools, uint8_t out[GW_DIGEST_LEN]);

/* Text of a message's content: a string, or the text parts joined by "\n"
 * (as they are rendered); "" for null. Returns a new string (caller frees) or
 * NULL if it is malformed. */
char *gw_msg_text(const json_t *msg);

#endif
