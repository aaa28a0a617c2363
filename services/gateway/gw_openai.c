/*
 * gw_openai: OpenAI request validation and response shaping (see the
 * header). Validation follows what api.openai.com answers for the same
 * mistakes: 400 invalid_request_error naming the offending `param`, and
 * unknown top-level arguments refused ("Unrecognized request argument").
 */
#include "gw_openai.h"

#include "gw_json.h"
#include "lisa/lisa_buf.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#include <ctype.h>
#include <czmq.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

lisa_rc_t
gw_err_set(gw_err_t *err, lisa_rc_t rc, int status, const char *type,
           const char *code, const char *param, const char *fmt, ...)
{
    if (!err)
        return rc;
    err->status = status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    (void) lisa_utf8_fix(err->message, sizeof err->message); /* quotes input */
    return rc;
}

char *
gw_err_body(const gw_err_t *err)
{
    json_t *o = json_pack(
        "{s:{s:s,s:s,s:o,s:o}}", "error", "message", err->message, "type",
        err->type ? err->type : "invalid_request_error", "param",
        err->param[0] ? json_string(err->param) : json_null(), "code",
        err->code ? json_string(err->code) : json_null());
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

#define S_BAD(param, ...)                                                      \
    gw_err_set(err, LISA_INVALID, 400, "invalid_request_error", NULL, param,   \
               __VA_ARGS__)

/* Top-level arguments the gateway accepts. Sampling knobs it cannot honour
 * token-exactly (penalties, seed, logit_bias) are accepted and ignored, as
 * vLLM does for unsupported extras; anything else is refused. */
static const char *const s_known[] = {
    "messages",
    "model",
    "tools",
    "tool_choice",
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "n",
    "stream",
    "stream_options",
    "user",
    "seed",
    "frequency_penalty",
    "presence_penalty",
    "parallel_tool_calls",
    "logprobs",
    "top_logprobs",
    "metadata",
    "store",
    "response_format",
    "logit_bias",
    "service_tier",
};

static bool
s_known_arg(const char *k)
{
    for (size_t i = 0; i < sizeof s_known / sizeof s_known[0]; i++)
        if (strcmp(k, s_known[i]) == 0)
            return true;
    return false;
}

static bool
s_is_role(const char *r)
{
    return strcmp(r, "system") == 0 || strcmp(r, "user") == 0 ||
           strcmp(r, "assistant") == 0 || strcmp(r, "tool") == 0 ||
           strcmp(r, "developer") == 0;
}

static lisa_rc_t
s_check_content(const json_t *c, bool nullable, gw_err_t *err)
{
    if (!c || json_is_null(c))
        return nullable ? LISA_OK
                        : S_BAD("messages", "message content must not be null");
    if (json_is_string(c))
        return LISA_OK;
    if (!json_is_array(c))
        return S_BAD("messages", "message content must be a string or an "
                                 "array of text parts");
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p)
    {
        const char *t = json_string_value(json_object_get(p, "type"));
        if (!t || strcmp(t, "text") != 0 ||
            !json_is_string(json_object_get(p, "text")))
            return S_BAD("messages",
                         "only text content parts are supported "
                         "(part %zu)",
                         i);
    }
    return LISA_OK;
}

static lisa_rc_t
s_check_tool_calls(const json_t *tc, gw_err_t *err)
{
    if (!tc || json_is_null(tc))
        return LISA_OK;
    if (!json_is_array(tc) || json_array_size(tc) > GW_MAX_TOOL_CALLS)
        return S_BAD("messages",
                     "tool_calls must be an array of at most %u "
                     "calls",
                     GW_MAX_TOOL_CALLS);
    size_t i;
    json_t *c;
    json_array_foreach(tc, i, c)
    {
        json_t *f = json_object_get(c, "function");
        if (!json_is_object(c) || !json_is_string(json_object_get(c, "id")) ||
            !json_is_object(f) || !json_is_string(json_object_get(f, "name")) ||
            !json_is_string(json_object_get(f, "arguments")))
            return S_BAD("messages",
                         "tool call %zu needs id and "
                         "function.{name,arguments} strings",
                         i);
    }
    return LISA_OK;
}

static lisa_rc_t
s_check_message(const json_t *m, size_t i, gw_err_t *err)
{
    if (!json_is_object(m))
        return S_BAD("messages", "messages[%zu] must be an object", i);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || !s_is_role(role))
        return S_BAD("messages",
                     "messages[%zu].role must be one of "
                     "system, developer, user, assistant, tool",
                     i);
    bool asst = strcmp(role, "assistant") == 0;
    json_t *tc = json_object_get(m, "tool_calls");
    if (!asst && tc && !json_is_null(tc))
        return S_BAD("messages",
                     "messages[%zu]: only assistant messages "
                     "carry tool_calls",
                     i);
    if (s_check_content(json_object_get(m, "content"), asst, err) != LISA_OK)
        return LISA_INVALID;
    if (s_check_tool_calls(tc, err) != LISA_OK)
        return LISA_INVALID;
    if (strcmp(role, "tool") == 0 &&
        !json_is_string(json_object_get(m, "tool_call_id")))
        return S_BAD("messages",
                     "messages[%zu]: a tool message needs "
                     "tool_call_id",
                     i);
    return LISA_OK;
}

static lisa_rc_t
s_check_tools(const json_t *tools, gw_err_t *err)
{
    if (!tools || json_is_null(tools))
        return LISA_OK;
    if (!json_is_array(tools) || json_array_size(tools) > GW_MAX_TOOLS)
        return S_BAD("tools", "'tools' must be an array of at most %u tools",
                     GW_MAX_TOOLS);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *type = json_string_value(json_object_get(t, "type"));
        json_t *f = json_object_get(t, "function");
        if (!type || strcmp(type, "function") != 0 || !json_is_object(f) ||
            !json_is_string(json_object_get(f, "name")))
            return S_BAD("tools",
                         "tools[%zu] must be {\"type\": \"function\", "
                         "\"function\": {\"name\": ...}}",
                         i);
        json_t *p = json_object_get(f, "parameters");
        if (p && !json_is_object(p))
            return S_BAD("tools",
                         "tools[%zu].function.parameters must be an "
                         "object",
                         i);
    }
    return LISA_OK;
}

static lisa_rc_t
s_number(const json_t *root, const char *key, double lo, double hi, double *out,
         gw_err_t *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return LISA_OK;
    if (!json_is_number(v))
        return S_BAD(key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return S_BAD(key, "'%s' must be between %g and %g", key, lo, hi);
    *out = d;
    return LISA_OK;
}

static lisa_rc_t
s_parse_fields(gw_chat_req_t *req, gw_err_t *err)
{
    json_t *root = req->root;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        if (!s_known_arg(k))
            return S_BAD(k, "Unrecognized request argument supplied: %.64s", k);
    }
    if (!req->tools_raw) {
        req->tools = json_object_get(root, "tools");
        if (s_check_tools(req->tools, err) != LISA_OK)
            return LISA_INVALID;
        if (json_is_null(req->tools) || json_array_size(req->tools) == 0)
            req->tools = NULL;
        req->has_tools = req->tools != NULL;
        gw_tools_digest(req->tools, req->tools_digest);
    }
    v = json_object_get(root, "model");
    if (v && !json_is_null(v) && !json_is_string(v))
        return S_BAD("model", "'model' must be a string");
    req->model = json_string_value(v);
    v = json_object_get(root, "tool_choice");
    if (json_is_string(v)) {
        req->tool_choice = json_string_value(v);
        if (strcmp(req->tool_choice, "auto") != 0 &&
            strcmp(req->tool_choice, "none") != 0 &&
            strcmp(req->tool_choice, "required") != 0)
            return S_BAD("tool_choice", "'tool_choice' must be auto, none, "
                                        "required or a function");
    } else if (json_is_object(v)) {
        req->tool_choice = json_string_value(
            json_object_get(json_object_get(v, "function"), "name"));
        if (!req->tool_choice)
            return S_BAD("tool_choice", "'tool_choice' object needs "
                                        "function.name");
        req->tool_choice_named = true;
    } else if (v && !json_is_null(v))
        return S_BAD("tool_choice", "'tool_choice' must be a string or an "
                                    "object");
    if (req->tool_choice && strcmp(req->tool_choice, "none") != 0 &&
        !req->has_tools)
        return S_BAD("tool_choice", "'tool_choice' is only allowed when "
                                    "'tools' are specified");
    if (s_number(root, "temperature", 0.0, 2.0, &req->temperature, err) !=
            LISA_OK ||
        s_number(root, "top_p", 0.0, 1.0, &req->top_p, err) != LISA_OK)
        return LISA_INVALID;
    if (req->top_p == 0.0)
        return S_BAD("top_p", "'top_p' must be greater than 0");
    v = json_object_get(root, "top_k"); /* vLLM's: -1 or 0 is off */
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < -1 ||
            json_integer_value(v) > (1 << 24))
            return S_BAD("top_k", "'top_k' must be an integer, -1 for none");
        req->top_k = json_integer_value(v) > 0 ? json_integer_value(v) : 0;
    }
    for (int i = 0; i < 2; i++) {
        const char *key = i ? "max_completion_tokens" : "max_tokens";
        v = json_object_get(root, key);
        if (!v || json_is_null(v))
            continue;
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > (1 << 24))
            return S_BAD(key, "'%s' must be a positive integer", key);
        req->max_tokens = json_integer_value(v);
    }
    v = json_object_get(root, "n");
    if (v && !json_is_null(v) &&
        (!json_is_integer(v) || json_integer_value(v) != 1))
        return S_BAD("n", "only n=1 is supported");
    v = json_object_get(root, "stop");
    if (json_is_string(v)) {
        req->stop[req->n_stop++] = json_string_value(v);
    } else if (json_is_array(v)) {
        if (json_array_size(v) > GW_MAX_STOP)
            return S_BAD("stop", "at most %u stop sequences", GW_MAX_STOP);
        size_t i;
        json_t *s;
        json_array_foreach(v, i, s)
        {
            if (!json_is_string(s) || json_string_length(s) == 0)
                return S_BAD("stop", "stop sequences must be non-empty "
                                     "strings");
            req->stop[req->n_stop++] = json_string_value(s);
        }
    } else if (v && !json_is_null(v))
        return S_BAD("stop", "'stop' must be a string or an array");
    v = json_object_get(root, "stream");
    if (v && !json_is_null(v) && !json_is_boolean(v))
        return S_BAD("stream", "'stream' must be a boolean");
    req->stream = json_is_true(v);
    v = json_object_get(root, "stream_options");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v))
            return S_BAD("stream_options", "'stream_options' must be an "
                                           "object");
        req->include_usage = json_is_true(json_object_get(v, "include_usage"));
    }
    return LISA_OK;
}

/* ---- scanning ----------------------------------------------------------- */

static const char *
s_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

static const char *
s_skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        p = gw_json_scan_plain(p, end, NULL);
        if (p >= end)
            break;
        unsigned char ch = (unsigned char) *p;
        if (ch > '\\' || (ch >= 0x20 && ch != '"' && ch != '\\'))
            continue;
        if (ch == '\\')
            p++;
        else if (ch == '"')
            return p + 1;
        else
            return NULL;
    }
    return NULL;
}

/* Skips one JSON value; NULL when it is not well formed at this level. */
static const char *
s_skip_value(const char *p, const char *end, unsigned depth)
{
    p = s_ws(p, end);
    if (p >= end || depth > GW_MAX_DEPTH)
        return NULL;
    if (*p == '"')
        return s_skip_string(p, end);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        bool obj = *p == '{';
        p = s_ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (obj) {
                p = s_ws(p, end);
                if (p >= end || *p != '"' || !(p = s_skip_string(p, end)))
                    return NULL;
                p = s_ws(p, end);
                if (p >= end || *p != ':')
                    return NULL;
                p++;
            }
            if (!(p = s_skip_value(p, end, depth + 1)))
                return NULL;
            p = s_ws(p, end);
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            return p < end && *p == close ? p + 1 : NULL;
        }
    }
    const char *q = p;
    while (q < end &&
           (isalnum((unsigned char) *q) || *q == '-' || *q == '+' || *q == '.'))
        q++;
    return q > p ? q : NULL;
}

static uint64_t
s_mix(uint64_t h)
{
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

/* A fast 128-bit fingerprint of a message's bytes: two multiply-xorshift
 * lanes over 8-byte words (each word enters both lanes differently), the
 * length, and a final mix of each lane with the other. */
static void
s_raw_hash(const char *p, size_t n, uint8_t out[GW_DIGEST_LEN])
{
    uint64_t a = 0xcbf29ce484222325ull ^ n, b = 0x84222325cbf29ce4ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        a = (a ^ v) * 0x9e3779b97f4a7c15ull;
        a ^= a >> 32;
        b = (b ^ ((v << 23) | (v >> 41))) * 0xc2b2ae3d27d4eb4full;
        b ^= b >> 29;
    }
    if (i < n) {
        uint64_t v = 0;
        memcpy(&v, p + i, n - i);
        v ^= (uint64_t) (n - i) << 59;
        a = (a ^ v) * 0x9e3779b97f4a7c15ull;
        b = (b ^ ((v << 23) | (v >> 41))) * 0xc2b2ae3d27d4eb4full;
    }
    uint64_t x = s_mix(a ^ (b >> 17)), y = s_mix(b ^ (a << 13) ^ n);
    memcpy(out, &x, 8);
    memcpy(out + 8, &y, 8);
}

/* Start and end of each message's bytes, in pairs. */
typedef struct {
    const char **v;
    size_t n, cap;
} s_spans_t;

/* Scans the messages array's elements from q: right after its '[' when
 * `after` is false, else right after an element. Each element's bytes go
 * to spans; returns the position after the closing ']' or NULL. */
static const char *
s_scan_elems(const char *q, const char *end, bool after, s_spans_t *spans)
{
    if (!after) {
        q = s_ws(q, end);
        if (q < end && *q == ']')
            return q + 1;
    }
    for (;;) {
        if (!after) {
            const char *e = s_skip_value(q, end, 2);
            if (!e)
                return NULL;
            if (spans->n == spans->cap) {
                spans->cap = spans->cap ? spans->cap * 2 : 64;
                spans->v =
                    lisa_realloc(spans->v, spans->cap * sizeof *spans->v);
            }
            spans->v[spans->n++] = q;
            spans->v[spans->n++] = e;
            if (spans->n > 2 * GW_MAX_MESSAGES)
                return NULL; /* the whole parse refuses it */
            q = e;
        }
        after = false;
        q = s_ws(q, end);
        if (q < end && *q == ',') {
            q = s_ws(q + 1, end);
            continue;
        }
        if (q < end && *q == ']')
            return q + 1;
        return NULL;
    }
}

/* Finds the top-level "messages" array and each element's bytes. False
 * when the body is not a simple object with one such array (the caller
 * then parses it whole, which also yields the right error message).
 * With `known`, the body's first known->len bytes are those of a body
 * scanned before (spans already filled): the scan resumes after them,
 * inside the messages array right after its last known element. */
static bool
s_scan(const char *body, size_t len, const gw_chat_prefix_t *known,
       const char **mb, const char **me, const char **tb, const char **te,
       s_spans_t *spans)
{
    *tb = *te = NULL;
    const char *p = s_ws(body, body + len), *end = body + len;
    *mb = *me = NULL;
    bool resume = known != NULL;
    if (resume) {
        *mb = body + known->msgs_off;
        if (known->tools_len) {
            *tb = body + known->tools_off;
            *te = *tb + known->tools_len;
        }
        p = body + known->len;
    } else {
        if (p >= end || *p != '{')
            return false;
        p = s_ws(p + 1, end);
        if (p < end && *p == '}')
            return false;
    }
    for (;;) {
        if (resume) {
            resume = false;
            if (!(p = s_scan_elems(p, end, true, spans)))
                return false;
            *me = p;
        } else {
            const char *k = p;
            if (p >= end || *p != '"' || !(p = s_skip_string(p, end)))
                return false;
            bool is_msgs =
                (size_t) (p - k) == 10 && memcmp(k, "\"messages\"", 10) == 0;
            bool is_tools =
                (size_t) (p - k) == 7 && memcmp(k, "\"tools\"", 7) == 0;
            p = s_ws(p, end);
            if (p >= end || *p != ':')
                return false;
            p = s_ws(p + 1, end);
            const char *v = p;
            if (is_msgs) {
                /* one pass over the array: each element's bytes */
                if (*mb || p >= end || *v != '[')
                    return false;
                if (!(p = s_scan_elems(v + 1, end, false, spans)))
                    return false;
                *mb = v;
                *me = p;
            } else if (!(p = s_skip_value(p, end, 1)))
                return false;
            if (is_tools) {
                if (*tb)
                    return false;
                *tb = v;
                *te = p;
            }
        }
        p = s_ws(p, end);
        if (p < end && *p == ',') {
            p = s_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}' && s_ws(p + 1, end) == end)
            return *mb != NULL;
        return false;
    }
}

static lisa_rc_t
s_parse_root(gw_chat_req_t *req, const char *body, size_t len, gw_err_t *err)
{
    json_error_t jerr;
    req->root = gw_json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!req->root)
        return S_BAD(NULL,
                     "We could not parse the JSON body of your request "
                     "(%s at line %d column %d)",
                     jerr.text, jerr.line, jerr.column);
    if (!json_is_object(req->root))
        return S_BAD(NULL, "the request body must be a JSON object");
    return LISA_OK;
}

static lisa_rc_t
s_alloc_msgs(gw_chat_req_t *req, size_t n, gw_err_t *err)
{
    if (n == 0)
        return S_BAD("messages", "'messages' must be a non-empty array");
    if (n > GW_MAX_MESSAGES)
        return S_BAD("messages", "too many messages (at most %u)",
                     GW_MAX_MESSAGES);
    req->n_msgs = n;
    req->raw = lisa_calloc(n, sizeof *req->raw);
    req->raw_off = lisa_calloc(n, sizeof *req->raw_off);
    req->raw_len = lisa_calloc(n, sizeof *req->raw_len);
    req->raw_hash = lisa_calloc(n, GW_DIGEST_LEN);
    return LISA_OK;
}

lisa_rc_t
gw_chat_req_parse_lazy(const char *body, size_t len, gw_chat_req_t *req,
                       gw_err_t *err)
{
    return gw_chat_req_parse_after(body, len, NULL, req, err);
}

/* True when `known` describes the beginning of this body. */
static bool
s_known_fits(const char *body, size_t len, const gw_chat_prefix_t *k)
{
    return k && k->n && k->len < len && k->n <= GW_MAX_MESSAGES &&
           k->msgs_off < k->span[0][0] &&
           k->span[k->n - 1][0] + k->span[k->n - 1][1] == k->len &&
           (!k->tools_len || k->tools_off + k->tools_len <= k->msgs_off) &&
           memcmp(body, k->bytes, k->len) == 0;
}

lisa_rc_t
gw_chat_req_parse_after(const char *body, size_t len,
                        const gw_chat_prefix_t *known, gw_chat_req_t *req,
                        gw_err_t *err)
{
    memset(req, 0, sizeof *req);
    req->temperature = -1;
    req->top_p = -1;
    req->top_k = -1;
    lisa_rc_t rc = LISA_INVALID;
    s_spans_t spans = {NULL, 0, 0};
    const char *mb, *me, *tb, *te;
    if (!s_known_fits(body, len, known))
        known = NULL;
    if (known) {
        spans.cap = 2 * known->n + 64;
        spans.v = lisa_malloc(spans.cap * sizeof *spans.v);
        for (size_t i = 0; i < known->n; i++) {
            spans.v[spans.n++] = body + known->span[i][0];
            spans.v[spans.n++] = body + known->span[i][0] + known->span[i][1];
        }
    }
    bool scanned = s_scan(body, len, known, &mb, &me, &tb, &te, &spans);
    if (!scanned && known) {
        /* what follows the known part is not as simple: scan it all, so
         * the outcome is exactly that of a body seen the first time */
        known = NULL;
        spans.n = 0;
        scanned = s_scan(body, len, NULL, &mb, &me, &tb, &te, &spans);
    }
    req->body = body;
    if (scanned) {
        /* the body without its messages and tools: their values become
         * [] and null; both are kept as raw bytes */
        char *rest = lisa_malloc(len + 8);
        size_t rn = 0;
        const char *cut[2][2] = {{mb, me}, {tb, te}};
        const char *put[2] = {"[]", "null"};
        int order[2] = {0, 1};
        if (tb && tb < mb) {
            order[0] = 1;
            order[1] = 0;
        }
        const char *at = body;
        for (int k = 0; k < 2; k++) {
            int w = order[k];
            if (!cut[w][0])
                continue;
            memcpy(rest + rn, at, (size_t) (cut[w][0] - at));
            rn += (size_t) (cut[w][0] - at);
            memcpy(rest + rn, put[w], strlen(put[w]));
            rn += strlen(put[w]);
            at = cut[w][1];
        }
        memcpy(rest + rn, at, (size_t) (body + len - at));
        rn += (size_t) (body + len - at);
        req->msgs_off = (size_t) (mb - body);
        req->known_len = known ? known->len : 0;
        req->known_gen = known ? known->gen : 0;
        if (tb) {
            req->tools_off = (size_t) (tb - body);
            req->tools_len = (size_t) (te - tb);
            const char *q = s_ws(tb + 1, te);
            req->has_tools = *tb != 'n' && !(*tb == '[' && *q == ']');
            if (req->has_tools) {
                req->tools_raw = tb;
                req->tools_raw_len = (size_t) (te - tb);
                s_raw_hash(tb, req->tools_raw_len, req->tools_digest);
            }
        }
        if (!req->has_tools)
            gw_tools_digest(NULL, req->tools_digest);
        rc = s_parse_root(req, rest, rn, err);
        lisa_free(&rest);
        if (rc == LISA_OK)
            rc = s_alloc_msgs(req, spans.n / 2, err);
        if (rc == LISA_OK) {
            req->messages = json_array();
            size_t i = 0;
            for (; i < req->n_msgs; i++) {
                const char *b = spans.v[2 * i], *e = spans.v[2 * i + 1];
                req->raw[i] = b;
                req->raw_off[i] = (size_t) (b - body);
                req->raw_len[i] = (size_t) (e - b);
                /* a known message's bytes are the ones hashed before */
                if (known && i < known->n)
                    memcpy(req->raw_hash[i], known->hash[i], GW_DIGEST_LEN);
                else
                    s_raw_hash(b, req->raw_len[i], req->raw_hash[i]);
                json_array_append_new(req->messages, json_null());
            }
            json_object_set(req->root, "messages", req->messages);
        }
    } else {
        rc = s_parse_root(req, body, len, err);
        json_t *m = json_object_get(req->root, "messages");
        if (rc == LISA_OK && !json_is_array(m))
            rc = S_BAD("messages", "'messages' must be a non-empty array");
        if (rc == LISA_OK)
            rc = s_alloc_msgs(req, json_array_size(m), err);
        if (rc == LISA_OK) {
            req->messages = json_incref(m);
            /* no raw bytes: hashes stay zero and never match a history */
        }
    }
    lisa_free(&spans.v);
    if (rc == LISA_OK)
        rc = s_parse_fields(req, err);
    if (rc != LISA_OK)
        gw_chat_req_clear(req);
    return rc;
}

json_t *
gw_chat_req_msg(gw_chat_req_t *req, size_t i, gw_err_t *err)
{
    if (i >= req->n_msgs)
        return NULL;
    json_t *m;
    if (req->raw[i]) {
        json_error_t jerr;
        m = gw_json_loadb(req->raw[i], req->raw_len[i], JSON_REJECT_DUPLICATES,
                          &jerr);
        req->raw[i] = NULL; /* parsed (or refused) once */
        if (!m) {
            S_BAD("messages", "messages[%zu] is not valid JSON (%s)", i,
                  jerr.text);
            return NULL;
        }
        json_array_set_new(req->messages, i, m);
        if (s_check_message(m, i, err) != LISA_OK) {
            json_array_set_new(req->messages, i, json_null());
            return NULL;
        }
        return m;
    }
    m = json_array_get(req->messages, i);
    if (!json_is_object(m)) {
        S_BAD("messages", "messages[%zu] must be an object", i);
        return NULL;
    }
    /* a body parsed whole was not validated per message yet */
    if (!req->raw_len[i] && s_check_message(m, i, err) != LISA_OK)
        return NULL;
    return m;
}

json_t *
gw_chat_req_tools(gw_chat_req_t *req, gw_err_t *err)
{
    err->status = 0;
    if (req->tools_raw) {
        json_error_t jerr;
        json_t *t = gw_json_loadb(req->tools_raw, req->tools_raw_len,
                                  JSON_REJECT_DUPLICATES, &jerr);
        req->tools_raw = NULL;
        if (!t || s_check_tools(t, err) != LISA_OK) {
            if (!t)
                S_BAD("tools", "'tools' is not valid JSON (%s)", jerr.text);
            json_decref(t);
            req->has_tools = false;
            return NULL;
        }
        json_object_set_new(req->root, "tools", t);
        req->tools = t;
    }
    return req->tools;
}

lisa_rc_t
gw_chat_req_parse(const char *body, size_t len, gw_chat_req_t *req,
                  gw_err_t *err)
{
    lisa_rc_t rc = gw_chat_req_parse_lazy(body, len, req, err);
    if (rc != LISA_OK)
        return rc;
    if (req->has_tools && !gw_chat_req_tools(req, err)) {
        gw_chat_req_clear(req);
        return LISA_INVALID;
    }
    for (size_t i = 0; i < req->n_msgs; i++)
        if (!gw_chat_req_msg(req, i, err)) {
            gw_chat_req_clear(req);
            return LISA_INVALID;
        }
    return LISA_OK;
}

void
gw_chat_req_clear(gw_chat_req_t *req)
{
    if (!req)
        return;
    json_decref(req->root);
    json_decref(req->messages);
    lisa_free(&req->raw);
    lisa_free(&req->raw_off);
    lisa_free(&req->raw_len);
    lisa_free(&req->raw_hash);
    memset(req, 0, sizeof *req);
}

void
gw_reply_clear(gw_reply_t *r)
{
    if (!r)
        return;
    lisa_free(&r->content);
    for (size_t i = 0; i < r->n_calls; i++) {
        lisa_free(&r->calls[i].id);
        lisa_free(&r->calls[i].name);
        lisa_free(&r->calls[i].arguments);
        lisa_free(&r->calls[i].canonical);
    }
    lisa_free(&r->calls);
    r->n_calls = 0;
}

static json_t *
s_calls_json(const gw_reply_t *r, bool with_index)
{
    json_t *a = json_array();
    for (size_t i = 0; i < r->n_calls; i++) {
        json_t *c =
            json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", r->calls[i].id, "type",
                      "function", "function", "name", r->calls[i].name,
                      "arguments", r->calls[i].arguments);
        if (with_index)
            json_object_set_new(c, "index", json_integer((json_int_t) i));
        json_array_append_new(a, c);
    }
    return a;
}

static json_t *
s_usage_json(const gw_usage_t *u)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens",
                     (json_int_t) u->prompt_tokens, "completion_tokens",
                     (json_int_t) u->completion_tokens, "total_tokens",
                     (json_int_t) (u->prompt_tokens + u->completion_tokens),
                     "prompt_tokens_details", "cached_tokens",
                     (json_int_t) u->cached_tokens);
}

/* Appends s as a JSON string, escaped as jansson's compact dump does. */
static void
s_jstr(lisa_buf_t *b, const char *s)
{
    gw_json_put_str(b, s, strlen(s));
}

static void
s_jint(lisa_buf_t *b, long long v)
{
    /* "%lld" without printf (a few per call) */
    char tmp[24];
    size_t k = sizeof tmp;
    unsigned long long u =
        v < 0 ? 0ull - (unsigned long long) v : (unsigned long long) v;
    do {
        tmp[--k] = (char) ('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[--k] = '-';
    lisa_buf_put(b, tmp + k, sizeof tmp - k);
}

static bool
s_utf8_ok(const char *s)
{
    return !s || lisa_utf8_valid(s, strlen(s));
}

/* The reference writer (a jansson tree); gw_chat_response writes the same
 * bytes directly. */
char *
gw_chat_response_json(const char *id, int64_t created, const char *model,
                      const gw_reply_t *r, const gw_usage_t *u)
{
    json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                            r->content ? json_string(r->content) : json_null());
    if (r->n_calls)
        json_object_set_new(msg, "tool_calls", s_calls_json(r, false));
    json_t *o = json_pack(
        "{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:s,s:n}],s:o}", "id", id, "object",
        "chat.completion", "created", (json_int_t) created, "model", model,
        "choices", "index", 0, "message", msg, "finish_reason",
        r->finish_reason, "logprobs", "usage", s_usage_json(u));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *
gw_chat_response(const char *id, int64_t created, const char *model,
                 const gw_reply_t *r, const gw_usage_t *u)
{
    /* strings jansson would refuse (not UTF-8) keep the reference path */
    bool ok = s_utf8_ok(id) && s_utf8_ok(model) && s_utf8_ok(r->content) &&
              s_utf8_ok(r->finish_reason);
    for (size_t i = 0; ok && i < r->n_calls; i++)
        ok = s_utf8_ok(r->calls[i].id) && s_utf8_ok(r->calls[i].name) &&
             s_utf8_ok(r->calls[i].arguments);
    if (!ok || !id || !model || !r->finish_reason)
        return gw_chat_response_json(id, created, model, r, u);
    lisa_buf_t b = LISA_BUF(SIZE_MAX);
    lisa_buf_puts(&b, "{\"id\":");
    s_jstr(&b, id);
    lisa_buf_puts(&b, ",\"object\":\"chat.completion\",\"created\":");
    s_jint(&b, (long long) created);
    lisa_buf_puts(&b, ",\"model\":");
    s_jstr(&b, model);
    lisa_buf_puts(&b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                      "\"assistant\",\"content\":");
    if (r->content)
        s_jstr(&b, r->content);
    else
        lisa_buf_puts(&b, "null");
    if (r->n_calls) {
        lisa_buf_puts(&b, ",\"tool_calls\":[");
        for (size_t i = 0; i < r->n_calls; i++) {
            lisa_buf_puts(&b, i ? ",{\"id\":" : "{\"id\":");
            s_jstr(&b, r->calls[i].id ? r->calls[i].id : "");
            lisa_buf_puts(&b, ",\"type\":\"function\",\"function\":{\"name\":");
            s_jstr(&b, r->calls[i].name ? r->calls[i].name : "");
            lisa_buf_puts(&b, ",\"arguments\":");
            s_jstr(&b, r->calls[i].arguments ? r->calls[i].arguments : "");
            lisa_buf_puts(&b, "}}");
        }
        lisa_buf_puts(&b, "]");
    }
    lisa_buf_puts(&b, "},\"finish_reason\":");
    s_jstr(&b, r->finish_reason);
    lisa_buf_puts(&b, ",\"logprobs\":null}],\"usage\":{\"prompt_tokens\":");
    s_jint(&b, (long long) u->prompt_tokens);
    lisa_buf_puts(&b, ",\"completion_tokens\":");
    s_jint(&b, (long long) u->completion_tokens);
    lisa_buf_puts(&b, ",\"total_tokens\":");
    s_jint(&b, (long long) (u->prompt_tokens + u->completion_tokens));
    lisa_buf_puts(&b, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    s_jint(&b, (long long) u->cached_tokens);
    lisa_buf_puts(&b, "}}}");
    return b.p;
}

/* Appends one SSE event carrying a chunk with `delta` (stolen). */
static void
s_chunk(char **buf, size_t *len, size_t *cap, const char *id, int64_t created,
        const char *model, json_t *delta, const char *finish, json_t *usage)
{
    json_t *o = json_pack(
        "{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:n}]}", "id", id, "object",
        "chat.completion.chunk", "created", (json_int_t) created, "model",
        model, "choices", "index", 0, "delta", delta, "finish_reason",
        finish ? json_string(finish) : json_null(), "logprobs");
    if (usage) {
        json_array_clear(json_object_get(o, "choices"));
        json_object_set_new(o, "usage", usage);
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    size_t n = strlen(s);
    if (*len + n + 9 > *cap) {
        *cap = (*len + n + 9) * 2;
        *buf = lisa_realloc(*buf, *cap);
    }
    memcpy(*buf + *len, "data: ", 6);
    memcpy(*buf + *len + 6, s, n);
    memcpy(*buf + *len + 6 + n, "\n\n", 2);
    *len += n + 8;
    (*buf)[*len] = '\0';
    free(s);
}

char *
gw_chat_stream(const char *id, int64_t created, const char *model,
               const gw_reply_t *r, const gw_usage_t *u, bool include_usage,
               size_t *len)
{
    size_t cap = 1024, n = 0;
    char *buf = lisa_malloc(cap);
    buf[0] = '\0';
    s_chunk(&buf, &n, &cap, id, created, model,
            json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL,
            NULL);
    if (r->content && r->content[0])
        s_chunk(&buf, &n, &cap, id, created, model,
                json_pack("{s:s}", "content", r->content), NULL, NULL);
    for (size_t i = 0; i < r->n_calls; i++) {
        json_t *c =
            json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", (int) i, "id",
                      r->calls[i].id, "type", "function", "function", "name",
                      r->calls[i].name, "arguments", r->calls[i].arguments);
        s_chunk(&buf, &n, &cap, id, created, model,
                json_pack("{s:[o]}", "tool_calls", c), NULL, NULL);
    }
    s_chunk(&buf, &n, &cap, id, created, model, json_object(), r->finish_reason,
            NULL);
    if (include_usage)
        s_chunk(&buf, &n, &cap, id, created, model, json_object(), NULL,
                s_usage_json(u));
    static const char done[] = "data: [DONE]\n\n";
    if (n + sizeof done > cap)
        buf = lisa_realloc(buf, n + sizeof done);
    memcpy(buf + n, done, sizeof done);
    n += sizeof done - 1;
    *len = n;
    return buf;
}

/* ---- digests ------------------------------------------------------------ */

static void
s_feed(EVP_MD_CTX *ctx, const char *s)
{
    if (s)
        EVP_DigestUpdate(ctx, s, strlen(s));
    EVP_DigestUpdate(ctx, "\x1f", 1);
}

/* Arguments compare as JSON values: compact, keys sorted. */
static void
s_feed_args(EVP_MD_CTX *ctx, const char *args)
{
    json_t *v =
        args ? gw_json_loadb(args, strlen(args), JSON_DECODE_ANY, NULL) : NULL;
    char *s =
        v ? gw_json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
          : NULL;
    s_feed(ctx, s ? s : args);
    free(s);
    json_decref(v);
}

static void
s_final(EVP_MD_CTX *ctx, uint8_t out[GW_DIGEST_LEN])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx, md, &n);
    memcpy(out, md, GW_DIGEST_LEN);
    EVP_MD_CTX_free(ctx);
}

/* SHA-256 fetched once: an implicit fetch on every digest costs more
 * than hashing a message. */
static EVP_MD *s_sha256;
static pthread_once_t s_sha256_once = PTHREAD_ONCE_INIT;

static void
s_sha256_fetch(void)
{
    s_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

static EVP_MD_CTX *
s_start(void)
{
    pthread_once(&s_sha256_once, s_sha256_fetch);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, s_sha256 ? s_sha256 : EVP_sha256(), NULL);
    return ctx;
}

char *
gw_msg_text(const json_t *msg)
{
    const json_t *c = json_object_get(msg, "content");
    if (!c || json_is_null(c))
        return lisa_strdup("");
    if (json_is_string(c))
        return lisa_strndup(json_string_value(c), json_string_length(c));
    if (!json_is_array(c))
        return NULL;
    /* the text parts joined by "\n", as the renderer (lisa_chat) joins
     * them, so equal digests mean equal rendered text */
    size_t total = 0, i;
    json_t *p;
    json_array_foreach(c, i, p) total +=
        json_string_length(json_object_get(p, "text")) + 1;
    char *s = lisa_malloc(total + 1);
    size_t off = 0;
    bool first = true;
    json_array_foreach(c, i, p)
    {
        json_t *t = json_object_get(p, "text");
        if (!json_is_string(t))
            continue;
        if (!first)
            s[off++] = '\n';
        first = false;
        memcpy(s + off, json_string_value(t), json_string_length(t));
        off += json_string_length(t);
    }
    s[off] = '\0';
    return s;
}

void
gw_msg_digest(const json_t *msg, uint8_t out[GW_DIGEST_LEN])
{
    EVP_MD_CTX *ctx = s_start();
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (role && strcmp(role, "developer") == 0)
        role = "system";
    s_feed(ctx, role);
    char *text = gw_msg_text(msg);
    s_feed(ctx, text);
    lisa_free(&text);
    json_t *tc = json_object_get(msg, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(tc, i, c)
    {
        json_t *f = json_object_get(c, "function");
        s_feed(ctx, json_string_value(json_object_get(c, "id")));
        s_feed(ctx, json_string_value(json_object_get(f, "name")));
        s_feed_args(ctx, json_string_value(json_object_get(f, "arguments")));
    }
    EVP_DigestUpdate(ctx, "\x1e", 1);
    s_feed(ctx, json_string_value(json_object_get(msg, "tool_call_id")));
    s_final(ctx, out);
}

void
gw_reply_digest(const gw_reply_t *r, uint8_t out[GW_DIGEST_LEN])
{
    EVP_MD_CTX *ctx = s_start();
    s_feed(ctx, "assistant");
    s_feed(ctx, r->content ? r->content : "");
    for (size_t i = 0; i < r->n_calls; i++) {
        s_feed(ctx, r->calls[i].id);
        s_feed(ctx, r->calls[i].name);
        if (r->calls[i].canonical)
            s_feed(ctx, r->calls[i].canonical);
        else
            s_feed_args(ctx, r->calls[i].arguments);
    }
    EVP_DigestUpdate(ctx, "\x1e", 1);
    s_feed(ctx, NULL);
    s_final(ctx, out);
}

void
gw_tools_digest(const json_t *tools, uint8_t out[GW_DIGEST_LEN])
{
    EVP_MD_CTX *ctx = s_start();
    if (tools && json_array_size(tools) > 0) {
        char *s = gw_json_dumps(tools, JSON_COMPACT | JSON_SORT_KEYS);
        s_feed(ctx, s);
        free(s);
    }
    s_final(ctx, out);
}
