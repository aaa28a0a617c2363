/*
 * ctl_op: the asynchronous operations a backend has in flight (the docker
 * and k8s backends). Each operation's struct starts with a ctl_op_t; the
 * backend keeps them on a list (a sentinel ctl_op_t), so destroying the
 * backend frees the operations whose answers never came. The shapes both
 * backends use are here too: one outcome (a ping), a batch of starts
 * (one outcome per sandbox, one answer after the last), a removal (one
 * request per name, one answer after the last) and a log tail (one name,
 * one text answer), and the JSON request they all send.
 *
 *     ctl_op_t ops;
 *     ctl_op_list_init(&ops);
 *     ctl_op_remove_t *o = ctl_op_remove_new(&ops, impl, names, n, done,
 *                                            arg);
 *     for (size_t i = 0; i < n; i++)  // + 1 held until the loop is over
 *         if (send(o->items[i].name, on_removed, &o->items[i]) != LISA_OK)
 *             ctl_op_remove_item_end(o, LISA_UNAVAILABLE);
 *     ctl_op_remove_item_end(o, LISA_OK); // the loop's hold
 *     ...
 *     ctl_op_end_all(&ops); // on destroy: no callback runs
 */
#ifndef CTL_OP_H
#define CTL_OP_H

#include "ctl_backend.h"
#include "lisa/lisa_http_client.h"

#include <stddef.h>

typedef struct ctl_op ctl_op_t;
typedef void(ctl_op_free_fn)(ctl_op_t *op);

/* The head of every operation's struct. */
struct ctl_op {
    ctl_op_t *prev, *next;
    ctl_op_free_fn *free_fn;
};

/* An empty list: `list` is its sentinel. */
void ctl_op_list_init(ctl_op_t *list);
/* Puts op on the list; ctl_op_end frees it with free_fn. */
void ctl_op_link(ctl_op_t *list, ctl_op_t *op, ctl_op_free_fn *free_fn);
/* Unlinks and frees an operation. */
void ctl_op_end(ctl_op_t *op);
/* Ends every operation on the list (no callback runs). */
void ctl_op_end_all(ctl_op_t *list);
/* A free_fn for operations that own nothing but their struct. */
void ctl_op_free_plain(ctl_op_t *op);

/* Sends a request to a JSON API: `base` holds the transport (socket, CA,
 * token) and the limits; method, url, the headers and body (a JSON text,
 * or NULL) are set here. LISA_OK, or why it was not sent (logged as
 * "<who>: <method> <path> not sent"; done will not run). */
lisa_rc_t ctl_op_send_json(lisa_http_client_t *http,
                           const lisa_http_request_t *base, const char *who,
                           const char *method, const char *url,
                           const char *path, const char *body,
                           lisa_http_done_fn *done, void *arg);

/* ---- one outcome (a ping) ------------------------------------------------ */

typedef struct {
    ctl_op_t op;
    void *impl; /* the backend */
    ctl_rc_fn *done;
    void *arg;
} ctl_op_rc_t;

ctl_op_rc_t *ctl_op_rc_new(ctl_op_t *list, void *impl, ctl_rc_fn *done,
                           void *arg);
/* Ends the operation and calls done(arg, rc). */
void ctl_op_rc_end(ctl_op_rc_t *o, lisa_rc_t rc);

/* ---- starts: one outcome per sandbox ---------------------------------- */

typedef struct ctl_op_start ctl_op_start_t;

typedef struct {
    ctl_op_start_t *op;
    char name[CTL_NAME_MAX];
    char rollout_id[CTL_ID_MAX];
    unsigned attempt;
    char *body; /* the backend's request, or NULL; free()d with the batch */
} ctl_op_start_item_t;

struct ctl_op_start {
    ctl_op_t op;
    void *impl; /* the backend */
    ctl_op_start_item_t *items;
    lisa_rc_t *rcs; /* one per item */
    size_t n, left;
    ctl_rcs_fn *done;
    void *arg;
};

/* A batch of starts of specs[0..n) on the list (names, rollouts and
 * attempts copied), waiting for n + 1 ends: one per item and
 * ctl_op_start_release for the loop that sends them. */
ctl_op_start_t *ctl_op_start_new(ctl_op_t *list, void *impl,
                                 const ctl_spec_t *specs, size_t n,
                                 ctl_rcs_fn *done, void *arg);
/* Item it is over with rc; the batch may end here (done(arg, rcs, n)). */
void ctl_op_start_item_end(ctl_op_start_item_t *it, lisa_rc_t rc);
/* The sending loop's end; the batch may end here. */
void ctl_op_start_release(ctl_op_start_t *o);

/* ---- removals: one request per name ----------------------------------- */

typedef struct ctl_op_remove ctl_op_remove_t;

typedef struct {
    ctl_op_remove_t *op;
    char name[CTL_NAME_MAX];
} ctl_op_item_t;

struct ctl_op_remove {
    ctl_op_rc_t base; /* impl, done and arg; ended as one outcome */
    ctl_op_item_t *items;
    size_t n, left;
    lisa_rc_t rc; /* the last item's failure, else LISA_OK */
};

/* A removal of names[0..n) on the list, waiting for n + 1 ends: one per
 * item and one for the loop that sends them. */
ctl_op_remove_t *ctl_op_remove_new(ctl_op_t *list, void *impl,
                                   const char *const *names, size_t n,
                                   ctl_rc_fn *done, void *arg);
/* One of the ends (rc: that item's outcome); the last ends the removal and
 * calls done(arg, rc) with the last failure seen (LISA_OK when none). */
void ctl_op_remove_item_end(ctl_op_remove_t *o, lisa_rc_t rc);

/* ---- log tails ----------------------------------------------------------- */

typedef struct {
    ctl_op_t op;
    void *impl; /* the backend */
    char name[CTL_NAME_MAX];
    ctl_text_fn *done;
    void *arg;
} ctl_op_tail_t;

ctl_op_tail_t *ctl_op_tail_new(ctl_op_t *list, void *impl, const char *name,
                               ctl_text_fn *done, void *arg);
/* Ends the tail and calls done(arg, text). */
void ctl_op_tail_end(ctl_op_tail_t *o, const char *text);

#endif
