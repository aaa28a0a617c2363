/*
 * agt_loop: the episode, as the recipe runs it.
 *
 * History starts as [system, user]. Before each chat completion the last
 * message gets "\nSteps Remaining: N" (on the last allowed turn: a notice
 * to submit now). The model's message is appended unchanged; the FIRST
 * tool call is executed and its observation goes back as a role "tool"
 * message with the call's id; a reply without a tool call gets the
 * reminder as a user message. The episode ends on submit, the turn limit,
 * the context budget (usage counts from the gateway, else characters / 4),
 * the deadline, a cancellation, or an error the retries did not cure.
 * A context_length_exceeded refusal first retries the same turn with a
 * smaller max_tokens (halved, floor 8,192 or the room left), as the
 * recipe does; only when it cannot shrink does the episode end.
 */
#ifndef AGT_LOOP_H
#define AGT_LOOP_H

#include "agt_gateway.h"
#include "agt_heartbeat.h"
#include "agt_tools.h"
#include "lisa/lisa_rc.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    unsigned max_turns;
    unsigned max_context_tokens;
    unsigned max_tokens_per_call;
    double temperature;   /* < 0: not sent */
    double top_p;         /* <= 0: not sent */
    long deadline_ms;     /* monotonic ms by which to stop; 0: none */
    long http_timeout_ms; /* one chat completion */
    unsigned retries;     /* attempts per chat completion */
    const char *model;
    const atomic_bool *cancel; /* set by the heartbeat */
    json_t *tools; /* schemas sent (borrowed); NULL: agt_tools_schemas() */
} agt_loop_cfg_t;

typedef struct {
    const char *end_reason; /* "submit", "turn_limit", "context",
                               "deadline", "cancelled", "error" (static) */
    unsigned turns;         /* chat completions answered */
    char detail[512];       /* for humans */
    lisa_rc_t rc;           /* LISA_OK unless the end was an error:
                               LISA_UNAUTHORIZED, LISA_UNAVAILABLE, ... */
} agt_loop_out_t;

/* Runs one episode with `system` and `user` as the first messages. `hb`
 * (may be NULL) receives progress notes. Always fills *out; returns
 * out->rc. */
lisa_rc_t agt_loop_run(const agt_loop_cfg_t *cfg, agt_gateway_t *gw,
                       agt_tools_t *tools, agt_heartbeat_t *hb,
                       const char *system, const char *user,
                       agt_loop_out_t *out);

/* Smallest max_tokens a context-overflow retry goes down to, and how many
 * such retries one turn gets. */
#define AGT_OVERFLOW_FLOOR   8192u
#define AGT_OVERFLOW_RETRIES 8u

/* The max_tokens to retry with after the gateway refused a call of
 * `max_tokens` with context_length_exceeded: half of it, but not below
 * 8,192 or `context_left` (the estimated room), whichever is smaller.
 * Returns max_tokens itself when it cannot shrink (the episode ends). */
size_t agt_loop_shrink_max_tokens(size_t max_tokens, size_t context_left);

/* The steps-remaining text appended before a call with `left` turns left
 * (this one included). Static. Exposed for tests. */
const char *agt_loop_steps_text(unsigned left, char *buf, size_t len);

#endif
