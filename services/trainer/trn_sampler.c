/*
 * trn_sampler: temperature / top-k / top-p sampling (see trn_sampler.h).
 *
 * With neither top-k nor top-p the draw is one linear pass over the
 * vocabulary. Top-k keeps the k largest logits in a small sorted array
 * (one pass; cheap for the usual k of 20-50); top-p without top-k sorts
 * the finite logits once.
 */
#include "trn_sampler.h"

#include "lisa/lisa_mem.h"
#include "trn_err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t
trn_rng_seed(uint64_t seed)
{
    return seed ^ 0x853c49e6748fea9bull;
}

double
trn_rng_uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double) (z >> 11) / 9007199254740992.0;
}

typedef struct {
    float v;
    int32_t i;
} s_cand_t;

static int
s_desc(const void *a, const void *b)
{
    const s_cand_t *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

lisa_rc_t
trn_sample(const float *logits, size_t V, const trn_sampling_t *s,
           uint64_t *rng, int32_t *token, float *logprob, trn_err_t *err)
{
    if (V == 0 || V > TRN_MAX_VOCAB || !(s->temperature >= 0) ||
        !isfinite(s->temperature) || !(s->top_p > 0 && s->top_p <= 1))
        return trn_fail(err, LISA_INVALID,
                        "sample: bad settings (temperature %g, top_p %g)",
                        (double) s->temperature, (double) s->top_p);
    float mx = -INFINITY;
    size_t arg = 0;
    for (size_t j = 0; j < V; j++)
        if (logits[j] > mx) {
            mx = logits[j];
            arg = j;
        }
    if (!isfinite(mx))
        return trn_fail(err, LISA_INVALID, "sample: no finite logit");
    float T = s->temperature > 0 ? s->temperature : 1.0f;
    double z = 0; /* NaN logits count as -inf throughout */
    for (size_t j = 0; j < V; j++)
        if (!isnan(logits[j]))
            z += exp((double) ((logits[j] - mx) / T));
    double lse = (double) (mx / T) + log(z);
    if (s->temperature == 0) {
        *token = (int32_t) arg;
        *logprob = (float) ((double) logits[arg] - lse);
        return LISA_OK;
    }
    if (s->top_k <= 0 && s->top_p >= 1) {
        double u = trn_rng_uniform(rng) * z, acc = 0;
        size_t pick = arg;
        for (size_t j = 0; j < V; j++) {
            if (isnan(logits[j]))
                continue;
            acc += exp((double) ((logits[j] - mx) / T));
            if (u < acc) {
                pick = j;
                break;
            }
        }
        *token = (int32_t) pick;
        *logprob = (float) ((double) (logits[pick] / T) - lse);
        return LISA_OK;
    }
    /* candidates in descending order: the top k, or every finite logit */
    size_t cap = s->top_k > 0 && (size_t) s->top_k < V ? (size_t) s->top_k : V;
    s_cand_t *c = lisa_malloc(cap * sizeof *c);
    size_t n = 0;
    if (cap < V) {
        for (size_t j = 0; j < V; j++) {
            float v = logits[j];
            if (isnan(v) || v == -INFINITY || (n == cap && v <= c[n - 1].v))
                continue;
            size_t at = n < cap ? n++ : cap - 1;
            while (at > 0 && c[at - 1].v < v) {
                c[at] = c[at - 1];
                at--;
            }
            c[at] = (s_cand_t){v, (int32_t) j};
        }
    } else {
        for (size_t j = 0; j < V; j++)
            if (!isnan(logits[j]) && logits[j] > -INFINITY)
                c[n++] = (s_cand_t){logits[j], (int32_t) j};
        qsort(c, n, sizeof *c, s_desc);
    }
    size_t k = n;
    /* probabilities of the k candidates, renormalised over them */
    double zk = 0;
    for (size_t i = 0; i < k; i++)
        zk += exp((double) ((c[i].v - mx) / T));
    /* top-p: the smallest head whose mass reaches top_p (at least one) */
    size_t keep = k;
    if (s->top_p < 1) {
        double cum = 0;
        for (size_t i = 0; i < k; i++) {
            cum += exp((double) ((c[i].v - mx) / T)) / zk;
            if (cum >= (double) s->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double zp = 0;
    for (size_t i = 0; i < keep; i++)
        zp += exp((double) ((c[i].v - mx) / T));
    double u = trn_rng_uniform(rng) * zp, acc = 0;
    size_t pick = keep - 1;
    for (size_t i = 0; i < keep; i++) {
        acc += exp((double) ((c[i].v - mx) / T));
        if (u < acc) {
            pick = i;
            break;
        }
    }
    *token = c[pick].i;
    *logprob = (float) ((double) (c[pick].v / T) - lse);
    lisa_free(&c);
    return LISA_OK;
}
