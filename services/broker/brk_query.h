/*
 * brk_query: reading the store for clients, and exporting what finished.
 *
 * QueryReq lists rollouts by ids or by run / step / state (paged by id),
 * optionally with their attempts, spans and transition log; with
 * final_attempt only the current attempt of each rollout and its spans
 * come back, which is what a trainer reads for a whole batch in one call.
 * ExportReq pages through terminal rollouts with all attempts and spans
 * and, with prune, deletes what it returned (the span log segments this
 * frees are deleted once the prune is durable, by the outbox).
 */
#ifndef BRK_QUERY_H
#define BRK_QUERY_H

#include "brk_call.h"

typedef struct brk_query_t brk_query_t;

brk_query_t *brk_query_new(const brk_env_t *env);
void brk_query_destroy(brk_query_t **self);

/* Whether this module answers requests with this body (query, export). */
bool brk_query_serves(Lisa__Request__BodyCase body);
lisa_rc_t brk_query_handle(brk_query_t *self, brk_call_t *call) LISA_NODISCARD;

#endif
