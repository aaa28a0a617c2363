/*
 * lisa_ids: a bounded int32 vector. Capacity doubles up to the bound.
 */
#include "lisa/lisa_ids.h"

#include "lisa/lisa_mem.h"

#include <string.h>

struct lisa_ids_t {
    int32_t *data;
    size_t len;
    size_t cap;
    size_t max;
};

lisa_ids_t *
lisa_ids_new(size_t max)
{
    if (max == 0)
        return NULL;
    lisa_ids_t *self = lisa_calloc(1, sizeof *self);
    self->max = max;
    self->cap = max < 64 ? max : 64;
    self->data = lisa_malloc(self->cap * sizeof *self->data);
    return self;
}

void
lisa_ids_destroy(lisa_ids_t **p)
{
    if (!p || !*p)
        return;
    lisa_free(&(*p)->data);
    lisa_free(p);
}

static lisa_rc_t
s_reserve(lisa_ids_t *self, size_t n)
{
    if (n > self->max - self->len)
        return LISA_TOOLARGE;
    size_t need = self->len + n;
    if (need <= self->cap)
        return LISA_OK;
    size_t cap = self->cap;
    while (cap < need)
        cap = cap > self->max / 2 ? self->max : cap * 2;
    self->data = lisa_realloc(self->data, cap * sizeof *self->data);
    self->cap = cap;
    return LISA_OK;
}

lisa_rc_t
lisa_ids_push(lisa_ids_t *self, int32_t id)
{
    lisa_rc_t rc = s_reserve(self, 1);
    if (rc != LISA_OK)
        return rc;
    self->data[self->len++] = id;
    return LISA_OK;
}

lisa_rc_t
lisa_ids_append(lisa_ids_t *self, const int32_t *ids, size_t n)
{
    if (n == 0)
        return LISA_OK;
    lisa_rc_t rc = s_reserve(self, n);
    if (rc != LISA_OK)
        return rc;
    memcpy(self->data + self->len, ids, n * sizeof *ids);
    self->len += n;
    return LISA_OK;
}

const int32_t *
lisa_ids_data(const lisa_ids_t *self)
{
    return self->data;
}

size_t
lisa_ids_len(const lisa_ids_t *self)
{
    return self->len;
}

size_t
lisa_ids_max(const lisa_ids_t *self)
{
    return self->max;
}

void
lisa_ids_truncate(lisa_ids_t *self, size_t len)
{
    if (len < self->len)
        self->len = len;
}

void
lisa_ids_clear(lisa_ids_t *self)
{
    self->len = 0;
}
