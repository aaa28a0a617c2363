/*
 * trn_traj: span chains -> training sequences (see trn_traj.h).
 */
#include "trn_traj.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
s_cmp_seq(const void *a, const void *b)
{
    const Lisa__Span *x = *(Lisa__Span *const *) a;
    const Lisa__Span *y = *(Lisa__Span *const *) b;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static lisa_rc_t s_fail(lisa_rc_t rc, char *err, size_t errlen, const char *fmt,
                        ...) LISA_PRINTF(4, 5);
static lisa_rc_t
s_fail(lisa_rc_t rc, char *err, size_t errlen, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (err && errlen)
        snprintf(err, errlen, "%s", buf);
    lisa_log_warn("traj: %s", buf);
    return rc;
}

/* Full length of span i's sequence (parents resolved before i). */
typedef struct {
    size_t len;
    bool parent; /* some later span chains on it */
} s_node_t;

static void
s_fill(Lisa__Span *const *sorted, const s_node_t *node, size_t i, trn_seq_t *q)
{
    /* Walk to the root, then write each span's tokens at its offset. */
    size_t j = i;
    for (;;) {
        const Lisa__Span *s = sorted[j];
        size_t end = node[j].len;
        size_t start = end - s->n_appended_ids - s->n_response_ids;
        for (size_t k = 0; k < s->n_appended_ids; k++) {
            q->tokens[start + k] = (int32_t) s->appended_ids[k];
            q->mask[start + k] = 0;
            q->logp[start + k] = 0.0f;
        }
        size_t r = start + s->n_appended_ids;
        for (size_t k = 0; k < s->n_response_ids; k++) {
            q->tokens[r + k] = (int32_t) s->response_ids[k];
            q->mask[r + k] = 1;
            q->logp[r + k] = s->response_logprobs[k];
        }
        if (s->n_response_ids) {
            if (s->policy_version < q->min_version)
                q->min_version = s->policy_version;
            if (s->policy_version > q->max_version)
                q->max_version = s->policy_version;
        }
        if (s->prev_seq < 0)
            break;
        j = (size_t) s->prev_seq; /* seqs are 0..n-1, so seq == index */
    }
}

lisa_rc_t
trn_traj_build(Lisa__Span *const *spans, size_t n, size_t expected,
               size_t max_len, trn_traj_t *out, char *err, size_t errlen)
{
    lisa_rc_t rc = LISA_OK;
    Lisa__Span **sorted = NULL;
    s_node_t *node = NULL;
    memset(out, 0, sizeof *out);
    if (n == 0)
        return s_fail(LISA_INVALID, err, errlen, "no spans");
    if (n > TRN_TRAJ_MAX_SPANS)
        return s_fail(LISA_TOOLARGE, err, errlen, "%zu spans (max %u)", n,
                      TRN_TRAJ_MAX_SPANS);
    if (expected && n < expected)
        return s_fail(LISA_INVALID, err, errlen,
                      "missing spans: %zu of %zu expected", n, expected);
    sorted = lisa_malloc(n * sizeof *sorted);
    memcpy(sorted, spans, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, s_cmp_seq);
    node = lisa_calloc(n, sizeof *node);
    for (size_t i = 0; i < n; i++) {
        const Lisa__Span *s = sorted[i];
        if (s->seq != i) {
            rc = (s->seq < i)
                     ? s_fail(LISA_INVALID, err, errlen, "duplicate span %u",
                              s->seq)
                     : s_fail(LISA_INVALID, err, errlen,
                              "missing span %zu (next is %u)", i, s->seq);
            goto out;
        }
        if (s->n_response_logprobs != s->n_response_ids) {
            rc = s_fail(LISA_INVALID, err, errlen,
                        "span %u: %zu logprobs for %zu response ids", s->seq,
                        s->n_response_logprobs, s->n_response_ids);
            goto out;
        }
        size_t base = 0;
        if (s->prev_seq >= 0) {
            if ((size_t) s->prev_seq >= i) {
                rc = s_fail(LISA_INVALID, err, errlen,
                            "span %u: prev_seq %d is not an earlier span",
                            s->seq, s->prev_seq);
                goto out;
            }
            const Lisa__Span *p = sorted[s->prev_seq];
            if (p->segment != s->segment) {
                rc = s_fail(LISA_INVALID, err, errlen,
                            "span %u (segment %u) chains on span %u of "
                            "segment %u",
                            s->seq, s->segment, p->seq, p->segment);
                goto out;
            }
            base = node[s->prev_seq].len;
            node[s->prev_seq].parent = true;
        } else if (s->prev_seq != -1) {
            rc = s_fail(LISA_INVALID, err, errlen, "span %u: prev_seq %d",
                        s->seq, s->prev_seq);
            goto out;
        }
        if (s->prompt_len && s->prompt_len != base + s->n_appended_ids) {
            rc = s_fail(LISA_INVALID, err, errlen,
                        "span %u: prompt_len %u but the chain gives %zu",
                        s->seq, s->prompt_len, base + s->n_appended_ids);
            goto out;
        }
        for (size_t k = 0; k < s->n_appended_ids; k++)
            if (s->appended_ids[k] > INT32_MAX) {
                rc = s_fail(LISA_INVALID, err, errlen, "span %u: bad token id",
                            s->seq);
                goto out;
            }
        for (size_t k = 0; k < s->n_response_ids; k++)
            if (s->response_ids[k] > INT32_MAX) {
                rc = s_fail(LISA_INVALID, err, errlen, "span %u: bad token id",
                            s->seq);
                goto out;
            }
        node[i].len = base + s->n_appended_ids + s->n_response_ids;
        if (node[i].len > max_len) {
            rc = s_fail(LISA_TOOLARGE, err, errlen,
                        "span %u: sequence of %zu tokens (max %zu)", s->seq,
                        node[i].len, max_len);
            goto out;
        }
        if (i == 0 && s->prev_seq != -1) {
            rc = s_fail(LISA_INVALID, err, errlen,
                        "span 0 must start a segment");
            goto out;
        }
    }
    size_t leaves = 0;
    for (size_t i = 0; i < n; i++)
        leaves += !node[i].parent;
    out->seqs = lisa_calloc(leaves, sizeof *out->seqs);
    for (size_t i = 0; i < n; i++) {
        if (node[i].parent)
            continue;
        trn_seq_t *q = &out->seqs[out->n++];
        q->len = node[i].len;
        q->tokens = lisa_malloc((q->len ? q->len : 1) * sizeof *q->tokens);
        q->mask = lisa_malloc(q->len ? q->len : 1);
        q->logp = lisa_malloc((q->len ? q->len : 1) * sizeof *q->logp);
        q->last_seq = sorted[i]->seq;
        q->segment = sorted[i]->segment;
        q->min_version = UINT64_MAX;
        q->max_version = 0;
        s_fill(sorted, node, i, q);
        if (q->min_version == UINT64_MAX)
            q->min_version = 0;
    }
out:
    lisa_free(&sorted);
    lisa_free(&node);
    if (rc != LISA_OK)
        trn_traj_free(out);
    return rc;
}

void
trn_traj_free(trn_traj_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        lisa_free(&t->seqs[i].tokens);
        lisa_free(&t->seqs[i].mask);
        lisa_free(&t->seqs[i].logp);
    }
    lisa_free(&t->seqs);
    t->n = 0;
}
