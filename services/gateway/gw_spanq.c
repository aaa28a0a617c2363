/*
 * gw_spanq: the unacknowledged-span queue (see the header). A plain array
 * in arrival order; spans are few per second per attempt and the queue is
 * bounded, so linear scans are fine and keep the order of a retry.
 */
#include "gw_spanq.h"

#include "gw_trace.h"
#include "lisa/lisa_mem.h"

#include <string.h>

typedef struct {
    Lisa__Span *span;
    uint64_t batch;    /* 0 when not in flight */
    uint64_t retry_ms; /* not before */
    uint32_t fails;
    bool solo; /* send alone (its batch was refused) */
} s_item_t;

struct gw_spanq_t {
    s_item_t *items;
    size_t n, max;
    uint64_t next_batch;
    uint64_t acked;
};

gw_spanq_t *
gw_spanq_new(size_t max_spans)
{
    gw_spanq_t *self = lisa_calloc(1, sizeof *self);
    self->max = max_spans ? max_spans : 1;
    self->items = lisa_calloc(self->max, sizeof *self->items);
    self->next_batch = 1;
    return self;
}

void
gw_spanq_destroy(gw_spanq_t **self)
{
    if (!self || !*self)
        return;
    for (size_t i = 0; i < (*self)->n; i++)
        gw_span_free(&(*self)->items[i].span);
    lisa_free(&(*self)->items);
    lisa_free(self);
}

int
gw_spanq_has_room(const gw_spanq_t *self, size_t n)
{
    return self->n + n <= self->max;
}

lisa_rc_t
gw_spanq_push(gw_spanq_t *self, Lisa__Span **span)
{
    if (self->n >= self->max) {
        gw_span_free(span);
        return LISA_TOOLARGE;
    }
    self->items[self->n++] = (s_item_t){*span, 0, 0, 0, false};
    *span = NULL;
    return LISA_OK;
}

size_t
gw_spanq_take(gw_spanq_t *self, uint64_t now_ms, size_t max, Lisa__Span **out,
              uint64_t *batch)
{
    size_t k = 0;
    uint64_t b = self->next_batch;
    for (size_t i = 0; i < self->n && k < max; i++) {
        s_item_t *it = &self->items[i];
        if (it->batch || it->retry_ms > now_ms || (it->solo && k > 0))
            continue;
        it->batch = b;
        out[k++] = it->span;
        if (it->solo)
            break;
    }
    if (k)
        self->next_batch++;
    *batch = k ? b : 0;
    return k;
}

void
gw_spanq_acked(gw_spanq_t *self, uint64_t batch)
{
    size_t j = 0;
    for (size_t i = 0; i < self->n; i++) {
        if (batch && self->items[i].batch == batch) {
            gw_span_free(&self->items[i].span);
            self->acked++;
            continue;
        }
        self->items[j++] = self->items[i];
    }
    self->n = j;
}

void
gw_spanq_failed(gw_spanq_t *self, uint64_t batch, uint64_t now_ms)
{
    for (size_t i = 0; i < self->n; i++) {
        s_item_t *it = &self->items[i];
        if (!batch || it->batch != batch)
            continue;
        it->batch = 0;
        it->fails++;
        uint64_t backoff = 100u << (it->fails < 6 ? it->fails - 1 : 5);
        if (backoff > 5000)
            backoff = 5000;
        it->retry_ms = now_ms + backoff;
    }
}

size_t
gw_spanq_refused(gw_spanq_t *self, uint64_t batch)
{
    size_t members = 0;
    for (size_t i = 0; i < self->n; i++)
        members += batch && self->items[i].batch == batch;
    if (members == 1) {
        size_t j = 0, dropped = 0;
        for (size_t i = 0; i < self->n; i++) {
            if (self->items[i].batch == batch) {
                gw_span_free(&self->items[i].span);
                dropped++;
                continue;
            }
            self->items[j++] = self->items[i];
        }
        self->n = j;
        return dropped;
    }
    for (size_t i = 0; i < self->n; i++)
        if (batch && self->items[i].batch == batch) {
            self->items[i].batch = 0;
            self->items[i].solo = true;
        }
    return 0;
}

size_t
gw_spanq_size(const gw_spanq_t *self)
{
    return self->n;
}

size_t
gw_spanq_pending_for(const gw_spanq_t *self, const char *rollout,
                     uint32_t attempt)
{
    size_t k = 0;
    for (size_t i = 0; i < self->n; i++)
        if (self->items[i].span->attempt == attempt &&
            strcmp(self->items[i].span->rollout_id, rollout) == 0)
            k++;
    return k;
}

uint64_t
gw_spanq_acked_total(const gw_spanq_t *self)
{
    return self->acked;
}
