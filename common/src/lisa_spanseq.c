/*
 * lisa_spanseq: span chains -> token sequences (see lisa_spanseq.h).
 */
#include "lisa/lisa_spanseq.h"

#include "lisa/lisa_mem.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the first pass learns of span i (sorted, so seq == i). */
typedef struct {
    size_t len;        /* its full sequence's length */
    size_t prompt_len; /* its chain root's appended ids */
    bool parent;       /* some later span chains on it */
} s_node_t;

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
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static bool
s_ids_ok(const uint32_t *ids, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (ids[k] > INT32_MAX)
            return false;
    return true;
}

/* Checks sorted span i against the spans before it and fills node[i]. */
static lisa_rc_t
s_link(Lisa__Span *const *sorted, s_node_t *node, size_t i, size_t max_len,
       char *err, size_t errlen)
{
    const Lisa__Span *s = sorted[i];
    if (s->seq != i)
        return s->seq < i ? s_fail(LISA_INVALID, err, errlen,
                                   "duplicate span %u", s->seq)
                          : s_fail(LISA_INVALID, err, errlen,
                                   "missing span %zu (next is %u)", i, s->seq);
    if (s->n_response_logprobs != s->n_response_ids)
        return s_fail(LISA_INVALID, err, errlen,
                      "span %u: %zu logprobs for %zu response ids", s->seq,
                      s->n_response_logprobs, s->n_response_ids);
    size_t base = 0;
    node[i].prompt_len = s->n_appended_ids;
    if (s->prev_seq >= 0) {
        if ((size_t) s->prev_seq >= i)
            return s_fail(LISA_INVALID, err, errlen,
                          "span %u: prev_seq %d is not an earlier span", s->seq,
                          s->prev_seq);
        const Lisa__Span *p = sorted[s->prev_seq];
        if (p->segment != s->segment)
            return s_fail(LISA_INVALID, err, errlen,
                          "span %u (segment %u) chains on span %u of "
                          "segment %u",
                          s->seq, s->segment, p->seq, p->segment);
        base = node[s->prev_seq].len;
        node[i].prompt_len = node[s->prev_seq].prompt_len;
        node[s->prev_seq].parent = true;
    } else if (s->prev_seq != -1) {
        return s_fail(LISA_INVALID, err, errlen, "span %u: prev_seq %d", s->seq,
                      s->prev_seq);
    }
    if (s->prompt_len && s->prompt_len != base + s->n_appended_ids)
        return s_fail(LISA_INVALID, err, errlen,
                      "span %u: prompt_len %u but the chain gives %zu", s->seq,
                      s->prompt_len, base + s->n_appended_ids);
    if (!s_ids_ok(s->appended_ids, s->n_appended_ids) ||
        !s_ids_ok(s->response_ids, s->n_response_ids))
        return s_fail(LISA_INVALID, err, errlen, "span %u: bad token id",
                      s->seq);
    node[i].len = base + s->n_appended_ids + s->n_response_ids;
    if (node[i].len > max_len)
        return s_fail(LISA_TOOLARGE, err, errlen,
                      "span %u: sequence of %zu tokens (max %zu)", s->seq,
                      node[i].len, max_len);
    if (i == 0 && s->prev_seq != -1)
        return s_fail(LISA_INVALID, err, errlen, "span 0 must start a segment");
    return LISA_OK;
}

/* Writes leaf i's sequence: walks to the root, writing each span's tokens
 * at its offset. */
static void
s_fill(Lisa__Span *const *sorted, const s_node_t *node, size_t i,
       lisa_spanseq_t *q)
{
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
lisa_spanseq_build(Lisa__Span *const *spans, size_t n, size_t expected,
                   size_t max_len, lisa_spanseqs_t *out, char *err,
                   size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (n == 0)
        return s_fail(LISA_INVALID, err, errlen, "no spans");
    if (n > LISA_SPANSEQ_MAX_SPANS)
        return s_fail(LISA_TOOLARGE, err, errlen, "%zu spans (max %u)", n,
                      LISA_SPANSEQ_MAX_SPANS);
    if (expected && n < expected)
        return s_fail(LISA_INVALID, err, errlen,
                      "missing spans: %zu of %zu expected", n, expected);
    Lisa__Span **sorted = lisa_malloc(n * sizeof *sorted);
    memcpy(sorted, spans, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, s_cmp_seq);
    s_node_t *node = lisa_calloc(n, sizeof *node);
    lisa_rc_t rc = LISA_OK;
    for (size_t i = 0; i < n && rc == LISA_OK; i++)
        rc = s_link(sorted, node, i, max_len, err, errlen);
    if (rc == LISA_OK) {
        size_t leaves = 0;
        for (size_t i = 0; i < n; i++)
            leaves += !node[i].parent;
        out->seqs = lisa_calloc(leaves, sizeof *out->seqs);
        for (size_t i = 0; i < n; i++) {
            if (node[i].parent)
                continue;
            lisa_spanseq_t *q = &out->seqs[out->n++];
            size_t cap = node[i].len ? node[i].len : 1;
            q->len = node[i].len;
            q->prompt_len = node[i].prompt_len;
            q->tokens = lisa_malloc(cap * sizeof *q->tokens);
            q->mask = lisa_malloc(cap);
            q->logp = lisa_malloc(cap * sizeof *q->logp);
            q->last_seq = sorted[i]->seq;
            q->segment = sorted[i]->segment;
            q->min_version = UINT64_MAX;
            s_fill(sorted, node, i, q);
            if (q->min_version == UINT64_MAX)
                q->min_version = 0;
        }
    }
    lisa_free(&sorted);
    lisa_free(&node);
    return rc;
}

void
lisa_spanseq_free(lisa_spanseqs_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        lisa_free(&s->seqs[i].tokens);
        lisa_free(&s->seqs[i].mask);
        lisa_free(&s->seqs[i].logp);
    }
    lisa_free(&s->seqs);
    s->n = 0;
}
