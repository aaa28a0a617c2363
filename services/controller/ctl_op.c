/*
 * ctl_op: a backend's operations in flight (see the header).
 */
#include "ctl_op.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
ctl_op_list_init(ctl_op_t *list)
{
    list->next = list->prev = list;
    list->free_fn = NULL;
}

void
ctl_op_link(ctl_op_t *list, ctl_op_t *op, ctl_op_free_fn *free_fn)
{
    op->free_fn = free_fn;
    op->next = list->next;
    op->prev = list;
    list->next->prev = op;
    list->next = op;
}

void
ctl_op_end(ctl_op_t *op)
{
    op->prev->next = op->next;
    op->next->prev = op->prev;
    op->free_fn(op);
}

void
ctl_op_end_all(ctl_op_t *list)
{
    while (list->next != list)
        ctl_op_end(list->next);
}

void
ctl_op_free_plain(ctl_op_t *op)
{
    lisa_free(&op);
}

lisa_rc_t
ctl_op_send_json(lisa_http_client_t *http, const lisa_http_request_t *base,
                 const char *who, const char *method, const char *url,
                 const char *path, const char *body, lisa_http_done_fn *done,
                 void *arg)
{
    static const char *const with_body[] = {"Content-Type: application/json",
                                            "Accept: application/json", NULL};
    static const char *const without[] = {"Accept: application/json", NULL};
    lisa_http_request_t req = *base;
    req.method = method;
    req.url = url;
    req.headers = body ? with_body : without;
    req.body = body;
    req.body_len = body ? strlen(body) : 0;
    lisa_rc_t rc = lisa_http_client_send(http, &req, done, arg, NULL);
    if (rc != LISA_OK)
        lisa_log_warn("%s: %s %s not sent: %s", who, method, path,
                      lisa_rc_str(rc));
    return rc;
}

/* ---- one outcome ----------------------------------------------------------
 */

ctl_op_rc_t *
ctl_op_rc_new(ctl_op_t *list, void *impl, ctl_rc_fn *done, void *arg)
{
    ctl_op_rc_t *o = lisa_calloc(1, sizeof *o);
    o->impl = impl;
    o->done = done;
    o->arg = arg;
    ctl_op_link(list, &o->op, ctl_op_free_plain);
    return o;
}

void
ctl_op_rc_end(ctl_op_rc_t *o, lisa_rc_t rc)
{
    ctl_rc_fn *done = o->done;
    void *arg = o->arg;
    ctl_op_end(&o->op);
    done(arg, rc);
}

/* ---- starts -------------------------------------------------------------- */

static void
s_start_free(ctl_op_t *op)
{
    ctl_op_start_t *o = (ctl_op_start_t *) op;
    for (size_t i = 0; i < o->n; i++)
        free(o->items[i].body);
    lisa_free(&o->items);
    lisa_free(&o->rcs);
    lisa_free(&o);
}

ctl_op_start_t *
ctl_op_start_new(ctl_op_t *list, void *impl, const ctl_spec_t *specs, size_t n,
                 ctl_rcs_fn *done, void *arg)
{
    ctl_op_start_t *o = lisa_calloc(1, sizeof *o);
    o->impl = impl;
    o->n = n;
    o->left = n + 1;
    o->items = lisa_calloc(n ? n : 1, sizeof *o->items);
    o->rcs = lisa_calloc(n ? n : 1, sizeof *o->rcs);
    o->done = done;
    o->arg = arg;
    for (size_t i = 0; i < n; i++) {
        ctl_op_start_item_t *it = &o->items[i];
        it->op = o;
        snprintf(it->name, sizeof it->name, "%s", specs[i].name);
        snprintf(it->rollout_id, sizeof it->rollout_id, "%s",
                 specs[i].rollout_id);
        it->attempt = specs[i].attempt;
    }
    ctl_op_link(list, &o->op, s_start_free);
    return o;
}

void
ctl_op_start_release(ctl_op_start_t *o)
{
    if (--o->left > 0)
        return;
    ctl_rcs_fn *done = o->done;
    void *arg = o->arg;
    lisa_rc_t *rcs = o->rcs;
    size_t n = o->n;
    o->rcs = NULL;
    ctl_op_end(&o->op);
    done(arg, rcs, n);
    lisa_free(&rcs);
}

void
ctl_op_start_item_end(ctl_op_start_item_t *it, lisa_rc_t rc)
{
    ctl_op_start_t *o = it->op;
    o->rcs[it - o->items] = rc;
    ctl_op_start_release(o);
}

/* ---- removals ------------------------------------------------------------ */

static void
s_remove_free(ctl_op_t *op)
{
    ctl_op_remove_t *o = (ctl_op_remove_t *) op;
    lisa_free(&o->items);
    lisa_free(&o);
}

ctl_op_remove_t *
ctl_op_remove_new(ctl_op_t *list, void *impl, const char *const *names,
                  size_t n, ctl_rc_fn *done, void *arg)
{
    ctl_op_remove_t *o = lisa_calloc(1, sizeof *o);
    o->base = (ctl_op_rc_t){.impl = impl, .done = done, .arg = arg};
    o->n = n;
    o->left = n + 1;
    o->items = lisa_calloc(n ? n : 1, sizeof *o->items);
    for (size_t i = 0; i < n; i++) {
        o->items[i].op = o;
        snprintf(o->items[i].name, sizeof o->items[i].name, "%s", names[i]);
    }
    o->rc = LISA_OK;
    ctl_op_link(list, &o->base.op, s_remove_free);
    return o;
}

void
ctl_op_remove_item_end(ctl_op_remove_t *o, lisa_rc_t rc)
{
    if (rc != LISA_OK)
        o->rc = rc;
    if (--o->left == 0)
        ctl_op_rc_end(&o->base, o->rc);
}

/* ---- log tails ------------------------------------------------------------
 */

ctl_op_tail_t *
ctl_op_tail_new(ctl_op_t *list, void *impl, const char *name, ctl_text_fn *done,
                void *arg)
{
    ctl_op_tail_t *o = lisa_calloc(1, sizeof *o);
    o->impl = impl;
    snprintf(o->name, sizeof o->name, "%s", name);
    o->done = done;
    o->arg = arg;
    ctl_op_link(list, &o->op, ctl_op_free_plain);
    return o;
}

void
ctl_op_tail_end(ctl_op_tail_t *o, const char *text)
{
    ctl_text_fn *done = o->done;
    void *arg = o->arg;
    ctl_op_end(&o->op);
    done(arg, text);
}
