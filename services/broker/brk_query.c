/*
 * brk_query: QueryReq and ExportReq (see brk_query.h).
 */
#include "brk_query.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <string.h>

struct brk_query_t {
    brk_env_t env;
};

static char s_empty[1];

/* A growing array of pointers, copied into the arena at the end. */
typedef struct {
    void **v;
    size_t n, cap;
} s_ptrs_t;

static void
s_ptrs_add(s_ptrs_t *l, void **v, size_t n)
{
    if (n == 0)
        return;
    if (l->n + n > l->cap) {
        while (l->n + n > l->cap)
            l->cap = l->cap ? l->cap * 2 : 64;
        l->v = lisa_realloc(l->v, l->cap * sizeof *l->v);
    }
    memcpy(l->v + l->n, v, n * sizeof *v);
    l->n += n;
}

/* Moves l's pointers into an arena array (*out, *n) and frees l. */
static void
s_ptrs_take(brk_arena_t *arena, s_ptrs_t *l, void ***out, size_t *n)
{
    if (l->n) {
        *out = brk_arena_alloc(arena, l->n * sizeof(void *));
        memcpy(*out, l->v, l->n * sizeof(void *));
        *n = l->n;
    }
    lisa_free(&l->v);
}

/* What to read of each rollout besides itself. */
typedef struct {
    bool attempts, spans, transitions;
    bool final_only; /* the current attempt only */
} s_with_t;

typedef struct {
    s_ptrs_t attempts, spans, transitions;
} s_found_t;

/* Reads what `w` asks for of the n rollouts into f. */
static void
s_collect(brk_query_t *self, Lisa__Rollout *const *rollouts, size_t n,
          const s_with_t *w, s_found_t *f)
{
    brk_store_t *st = self->env.store;
    brk_arena_t *arena = self->env.arena;
    for (size_t i = 0; i < n; i++) {
        const Lisa__Rollout *r = rollouts[i];
        uint32_t only = w->final_only ? r->attempts : 0;
        void **v = NULL;
        size_t k = 0;
        if (w->final_only && only == 0)
            continue; /* never claimed: no attempt, no spans */
        if (w->attempts &&
            brk_store_attempts_of(st, arena, r->rollout_id,
                                  (Lisa__Attempt ***) &v, &k) == LISA_OK)
            for (size_t j = 0; j < k; j++)
                if (!only || ((Lisa__Attempt *) v[j])->attempt == only)
                    s_ptrs_add(&f->attempts, &v[j], 1);
        if (w->spans && brk_store_spans_of(st, arena, r->rollout_id, only,
                                           (Lisa__Span ***) &v, &k) == LISA_OK)
            s_ptrs_add(&f->spans, v, k);
        if (w->transitions &&
            brk_store_transitions_of(st, arena, r->rollout_id,
                                     (Lisa__Transition ***) &v, &k) == LISA_OK)
            s_ptrs_add(&f->transitions, v, k);
    }
}

static lisa_rc_t
s_h_query(brk_query_t *self, const Lisa__Request *req, Lisa__Reply *rep,
          char *err)
{
    const Lisa__QueryReq *q = req->query;
    brk_arena_t *arena = self->env.arena;
    Lisa__QueryRep *out = brk_arena_alloc(arena, sizeof *out);
    lisa__query_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_QUERY;
    rep->query = out;
    out->next_after = s_empty;
    if (q->limit > BRK_MAX_PAGE)
        return brk_call_fail(err, LISA_INVALID, "limit exceeds %u",
                             BRK_MAX_PAGE);
    if (q->n_rollout_ids > BRK_MAX_PAGE)
        return brk_call_fail(err, LISA_TOOLARGE, "more than %u ids",
                             BRK_MAX_PAGE);
    if ((q->with_spans || q->with_transitions) && q->n_rollout_ids == 0)
        return brk_call_fail(err, LISA_INVALID,
                             "with_spans/with_transitions need rollout_ids");
    if (q->n_rollout_ids == 0) {
        size_t n = 0;
        char *next = NULL;
        if (brk_store_list(self->env.store, arena, q->run_id, q->by_step,
                           q->step, q->state, false, q->after,
                           q->limit ? q->limit : 100, &out->rollouts, &n,
                           &next) != LISA_OK)
            return brk_call_fail(err, LISA_ERR, "store read failed");
        out->n_rollouts = n;
        out->next_after = next;
    } else {
        out->rollouts =
            brk_arena_alloc(arena, q->n_rollout_ids * sizeof(void *));
        for (size_t i = 0; i < q->n_rollout_ids; i++) {
            Lisa__Rollout *r = NULL;
            if (!brk_call_id_ok(q->rollout_ids[i]) ||
                brk_store_rollout_get(self->env.store, arena, q->rollout_ids[i],
                                      &r) != LISA_OK)
                return brk_call_fail(err, LISA_NOTFOUND, "unknown rollout '%s'",
                                     q->rollout_ids[i]);
            out->rollouts[out->n_rollouts++] = r;
        }
    }
    s_with_t w = {q->with_attempts, q->with_spans, q->with_transitions,
                  q->final_attempt};
    s_found_t f = {0};
    s_collect(self, out->rollouts, out->n_rollouts, &w, &f);
    s_ptrs_take(arena, &f.attempts, (void ***) &out->attempts,
                &out->n_attempts);
    s_ptrs_take(arena, &f.spans, (void ***) &out->spans, &out->n_spans);
    s_ptrs_take(arena, &f.transitions, (void ***) &out->transitions,
                &out->n_transitions);
    return LISA_OK;
}

static lisa_rc_t
s_h_export(brk_query_t *self, const Lisa__Request *req, Lisa__Reply *rep,
           char *err)
{
    const Lisa__ExportReq *q = req->export;
    brk_arena_t *arena = self->env.arena;
    Lisa__ExportRep *out = brk_arena_alloc(arena, sizeof *out);
    lisa__export_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_EXPORT;
    rep->export = out;
    if (q->limit > BRK_MAX_PAGE)
        return brk_call_fail(err, LISA_INVALID, "limit exceeds %u",
                             BRK_MAX_PAGE);
    size_t n = 0;
    char *next = NULL;
    if (brk_store_list(self->env.store, arena, q->run_id, false, 0, 0, true,
                       q->after, q->limit ? q->limit : 100, &out->rollouts, &n,
                       &next) != LISA_OK)
        return brk_call_fail(err, LISA_ERR, "store read failed");
    out->n_rollouts = n;
    out->next_after = next;
    s_with_t w = {.attempts = true, .spans = true};
    s_found_t f = {0};
    s_collect(self, out->rollouts, n, &w, &f);
    s_ptrs_take(arena, &f.attempts, (void ***) &out->attempts,
                &out->n_attempts);
    s_ptrs_take(arena, &f.spans, (void ***) &out->spans, &out->n_spans);
    lisa_free(&f.transitions.v);
    if (!q->prune)
        return LISA_OK;
    for (size_t i = 0; i < n; i++)
        if (brk_store_prune(self->env.store, out->rollouts[i]->rollout_id) !=
            LISA_OK)
            return brk_call_fail(err, LISA_ERR, "store delete failed");
    if (n) {
        lisa_log_info("export: pruned %zu finished rollouts", n);
        /* this iteration's batch; its segments go once it is durable */
        brk_outbox_gc_after_commit(self->env.outbox);
    }
    return LISA_OK;
}

bool
brk_query_serves(Lisa__Request__BodyCase body)
{
    return body == LISA__REQUEST__BODY_QUERY ||
           body == LISA__REQUEST__BODY_EXPORT;
}

lisa_rc_t
brk_query_handle(brk_query_t *self, brk_call_t *call)
{
    switch (call->req->body_case) {
    case LISA__REQUEST__BODY_QUERY:
        return s_h_query(self, call->req, call->rep, call->err);
    case LISA__REQUEST__BODY_EXPORT:
        return s_h_export(self, call->req, call->rep, call->err);
    default:
        return brk_call_fail(call->err, LISA_UNSUPPORTED,
                             "not a query request");
    }
}

brk_query_t *
brk_query_new(const brk_env_t *env)
{
    brk_query_t *self = lisa_calloc(1, sizeof *self);
    self->env = *env;
    return self;
}

void
brk_query_destroy(brk_query_t **pself)
{
    if (pself)
        lisa_free(pself);
}
