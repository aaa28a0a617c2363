/*
 * trn_step: one optimizer step over finished rollouts (see trn_step.h).
 *
 * Position-level arrays (targets, mask, advantage, log-probs) are built per
 * micro-batch from the token-level input by shifting the mask one to the
 * left: the sampled token t is scored at position t - 1. The loss
 * normalisers are fixed from the whole batch before the first micro-batch,
 * which is what makes micro-batching invisible in the gradient.
 */
#include "trn_step.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_err.h"

#include <math.h>
#include <string.h>

trn_step_cfg_t
trn_step_defaults(void)
{
    trn_step_cfg_t c = {.adv = trn_adv_defaults(),
                        .loss = trn_loss_defaults(),
                        .optim = trn_adamw_defaults(),
                        .grad_clip = 1.0,
                        .temperature = 1.0f,
                        .micro_tokens = 4096,
                        .bypass = false,
                        .is_threshold = 0,
                        .is_level = TRN_IS_TOKEN,
                        .rs_level = TRN_RS_OFF,
                        .kl_reward_type = TRN_KL_K1,
                        .mini_groups = 0,
                        .ppo_epochs = 1};
    return c;
}

static lisa_rc_t
s_check(const trn_step_cfg_t *c, const trn_rollouts_t *r, bool have_ref,
        trn_err_t *err)
{
    if (r->n_seqs == 0 || !r->seq_offsets || !r->tokens || !r->mask ||
        !r->group || !r->score || r->seq_offsets[0] != 0)
        return trn_fail(err, LISA_INVALID, "step: empty or missing rollouts");
    if ((c->bypass || c->is_threshold > 0) && !r->rollout_logp)
        return trn_fail(err, LISA_INVALID,
                        "step: bypass and IS weights need rollout log-probs");
    if ((c->loss.kl_coef > 0 || c->kl_reward_coef > 0) && !have_ref)
        return trn_fail(err, LISA_INVALID, "step: KL needs a reference model");
    if (!(c->kl_reward_coef >= 0))
        return trn_fail(err, LISA_INVALID,
                        "step: bad in-reward KL coefficient");
    if (c->micro_tokens == 0 || !(c->grad_clip > 0) || !(c->temperature > 0) ||
        !(c->is_threshold >= 0))
        return trn_fail(err, LISA_INVALID, "step: bad configuration");
    for (size_t s = 0; s < r->n_seqs; s++) {
        size_t b = r->seq_offsets[s], e = r->seq_offsets[s + 1];
        if (e <= b)
            return trn_fail(err, LISA_INVALID,
                            "step: trajectory %zu is empty or unordered", s);
        if (r->mask[b])
            return trn_fail(err, LISA_INVALID,
                            "step: trajectory %zu starts with a sampled token "
                            "(nothing predicts it)",
                            s);
    }
    return LISA_OK;
}

/* Scratch for one micro-batch of up to `cap` tokens. */
typedef struct {
    size_t cap;
    int32_t *targets;
    uint8_t *mask;
    float *adv, *logp, *old, *roll, *ref, *ent, *isw, *dlogp, *dent;
    size_t *off;
} s_scratch_t;

static void
s_scratch_init(s_scratch_t *s, size_t cap, size_t max_seqs)
{
    s->cap = cap;
    s->targets = lisa_calloc(cap, sizeof(int32_t));
    s->mask = lisa_calloc(cap, 1);
    float **f[] = {&s->adv, &s->logp, &s->old,   &s->roll, &s->ref,
                   &s->ent, &s->isw,  &s->dlogp, &s->dent};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        *f[i] = lisa_calloc(cap, sizeof(float));
    s->off = lisa_calloc(max_seqs + 1, sizeof(size_t));
}

static void
s_scratch_free(s_scratch_t *s)
{
    lisa_free(&s->targets);
    lisa_free(&s->mask);
    float **f[] = {&s->adv, &s->logp, &s->old,   &s->roll, &s->ref,
                   &s->ent, &s->isw,  &s->dlogp, &s->dent};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        lisa_free(f[i]);
    lisa_free(&s->off);
}

/* Ranks of the step (1 without a comm) and this one's index. */
static int
s_world(const trn_step_cfg_t *c)
{
    return c->comm && c->comm->world > 1 ? c->comm->world : 1;
}

static int
s_rank(const trn_step_cfg_t *c)
{
    return s_world(c) > 1 ? c->comm->rank : 0;
}

/* The owner of a micro-batch that every rank runs, context-parallel. */
#define S_ALL_RANKS (-1)

/* Whether trajectory s runs context-parallel over every rank (long
 * enough for every rank to get rows: 2 x world chunks of at least one). */
static bool
s_cp_traj(const trn_step_cfg_t *c, const trn_rollouts_t *r, size_t s)
{
    size_t len = r->seq_offsets[s + 1] - r->seq_offsets[s];
    return s_world(c) > 1 && c->cp_tokens > 0 && len > c->cp_tokens &&
           len >= 2 * (size_t) s_world(c);
}

/* c with cp_tokens resolved into *out: with cp_auto, no more than the
 * least over the ranks of their models' max_tokens (each rank posts its
 * own in its slot of a zeroed vector, the sum gives every rank all). */
static lisa_rc_t
s_cp_resolve(const trn_step_model_t *m, const trn_step_cfg_t *c,
             trn_step_cfg_t *out, trn_err_t *err)
{
    *out = *c;
    int W = s_world(c);
    if (!c->cp_auto || W < 2)
        return LISA_OK;
    double *v = lisa_calloc((size_t) W, sizeof *v);
    v[s_rank(c)] = m->max_tokens ? (double) m->max_tokens(m->self) : 0.0;
    lisa_rc_t rc = c->comm->sum(c->comm->self, v, (size_t) W, err);
    for (int r = 0; rc == LISA_OK && r < W; r++) {
        size_t lim = v[r] > 0 ? (size_t) v[r] : 0; /* 0: no limit */
        if (lim > 0 && (out->cp_tokens == 0 || lim < out->cp_tokens))
            out->cp_tokens = lim;
    }
    lisa_free(&v);
    return rc;
}

/* Whether this rank runs a micro-batch of that owner. */
static bool
s_mine(const trn_step_cfg_t *c, int owner)
{
    return owner == S_ALL_RANKS || owner == s_rank(c);
}

/* The micro-batches of a batch: trajectories [start[k], start[k + 1]),
 * each at most micro_tokens long unless one trajectory is longer, and the
 * rank that runs each one (comm: to the least loaded rank so far, in
 * order; else rank 0; a trajectory over cp_tokens alone, on every rank:
 * S_ALL_RANKS). Returns the number of micro-batches. */
static size_t
s_plan(const trn_step_cfg_t *c, const trn_rollouts_t *r, size_t **start,
       int **owner)
{
    size_t n = 0;
    *start = lisa_malloc((r->n_seqs + 1) * sizeof **start);
    *owner = lisa_calloc(r->n_seqs ? r->n_seqs : 1, sizeof **owner);
    int world = s_world(c);
    double *load = lisa_calloc((size_t) world, sizeof *load);
    for (size_t s0 = 0; s0 < r->n_seqs;) {
        size_t s1 = s0 + 1;
        bool cp = s_cp_traj(c, r, s0);
        while (!cp && s1 < r->n_seqs && !s_cp_traj(c, r, s1) &&
               r->seq_offsets[s1 + 1] - r->seq_offsets[s0] <= c->micro_tokens)
            s1++;
        double len = (double) (r->seq_offsets[s1] - r->seq_offsets[s0]);
        int best = 0;
        for (int k = 1; k < world; k++)
            if (load[k] < load[best])
                best = k;
        if (cp)
            for (int k = 0; k < world; k++)
                load[k] += len / world;
        else
            load[best] += len;
        (*owner)[n] = cp ? S_ALL_RANKS : best;
        (*start)[n++] = s0;
        s0 = s1;
    }
    (*start)[n] = r->n_seqs;
    lisa_free(&load);
    return n;
}

/* ---- context parallelism --------------------------------------------- */

/* A micro-batch that every rank runs: this rank's rows of it, their
 * tokens, targets and per-row values, and the group's sum in floats over
 * the step's comm (which sums doubles). */
typedef struct {
    const trn_comm_t *comm;
    size_t n; /* this rank's rows of the micro-batch */
    size_t *rows;
    int32_t *tok, *tgt;
    float *v, *v2, *g; /* per row (twice), gathering (twice the rows) */
    double *d;
    size_t dcap;
    trn_cp_t cp;
    trn_batch_t b;
} s_cpx_t;

/* Room for micro-batches of up to cap positions, where the step may run
 * any context-parallel (else x stays empty). */
static void
s_cpx_init(s_cpx_t *x, const trn_step_cfg_t *c, size_t cap)
{
    *x = (s_cpx_t){.comm = c->comm};
    if (s_world(c) < 2 || c->cp_tokens == 0)
        return;
    x->rows = lisa_calloc(cap, sizeof *x->rows);
    x->tok = lisa_calloc(cap, sizeof *x->tok);
    x->tgt = lisa_calloc(cap, sizeof *x->tgt);
    x->v = lisa_calloc(cap, sizeof *x->v);
    x->v2 = lisa_calloc(cap, sizeof *x->v2);
    x->g = lisa_calloc(2 * cap, sizeof *x->g);
}

static void
s_cpx_free(s_cpx_t *x)
{
    lisa_free(&x->rows);
    lisa_free(&x->tok);
    lisa_free(&x->tgt);
    lisa_free(&x->v);
    lisa_free(&x->v2);
    lisa_free(&x->g);
    lisa_free(&x->d);
}

/* trn_cp_t's sum over the step's comm. */
static lisa_rc_t
s_cp_sum(void *self, float *v, size_t n, trn_err_t *err)
{
    s_cpx_t *x = self;
    if (x->dcap < n) {
        lisa_free(&x->d);
        x->d = lisa_malloc(n * sizeof *x->d);
        x->dcap = n;
    }
    for (size_t i = 0; i < n; i++)
        x->d[i] = v[i];
    lisa_rc_t rc = x->comm->sum(x->comm->self, x->d, n, err);
    for (size_t i = 0; rc == LISA_OK && i < n; i++)
        v[i] = (float) x->d[i];
    return rc;
}

/* Forward of micro-batch b on this rank alone (x NULL), or on every rank
 * at once, each computing its rows; then logp (and ent) of every position
 * are gathered, so every rank sees the whole micro-batch's. */
static lisa_rc_t
s_fwd(const trn_step_model_t *m, const trn_batch_t *b, s_cpx_t *x, float *logp,
      float *ent, trn_err_t *err)
{
    if (!x)
        return m->forward(m->self, b, logp, ent, err);
    size_t T = b->n_tokens;
    x->cp = (trn_cp_t){.self = x, .sum = s_cp_sum};
    x->n = trn_cp_part(b, x->comm->rank, x->comm->world, x->rows, x->tok,
                       x->tgt, &x->cp, &x->b);
    lisa_rc_t rc = m->forward(m->self, &x->b, x->v, ent ? x->v2 : NULL, err);
    if (rc != LISA_OK)
        return rc;
    memset(x->g, 0, 2 * T * sizeof *x->g);
    for (size_t i = 0; i < x->n; i++) {
        x->g[x->rows[i]] = x->v[i];
        x->g[T + x->rows[i]] = ent ? x->v2[i] : 0.0f;
    }
    rc = s_cp_sum(x, x->g, ent ? 2 * T : T, err);
    if (rc != LISA_OK)
        return rc;
    memcpy(logp, x->g, T * sizeof *logp);
    if (ent)
        memcpy(ent, x->g + T, T * sizeof *ent);
    return LISA_OK;
}

/* Backward of the last s_fwd with the gradients of every position; a
 * context-parallel rank passes on its rows'. */
static lisa_rc_t
s_bwd(const trn_step_model_t *m, s_cpx_t *x, const float *dlogp,
      const float *dent, trn_err_t *err)
{
    if (!x)
        return m->backward(m->self, dlogp, dent, err);
    for (size_t i = 0; i < x->n; i++) {
        x->v[i] = dlogp[x->rows[i]];
        x->v2[i] = dent ? dent[x->rows[i]] : 0.0f;
    }
    return m->backward(m->self, x->v, dent ? x->v2 : NULL, err);
}

/* ---- micro-batches ------------------------------------------------------ */

/* Runs trajectories [s0, s1) as one micro-batch, on this rank or (cpx)
 * context-parallel over every rank; the whole micro-batch's figures are
 * counted once, by rank 0. */
static lisa_rc_t
s_micro(const trn_step_model_t *m, const trn_step_model_t *ref,
        const trn_step_cfg_t *c, const trn_loss_cfg_t *lc,
        const trn_rollouts_t *r, const double *adv, size_t s0, size_t s1,
        s_scratch_t *x, s_cpx_t *cpx, trn_step_out_t *out, trn_err_t *err)
{
    size_t base = r->seq_offsets[s0];
    size_t n = r->seq_offsets[s1] - base;
    for (size_t s = s0; s <= s1; s++)
        x->off[s - s0] = r->seq_offsets[s] - base;
    for (size_t s = s0; s < s1; s++) {
        for (size_t t = r->seq_offsets[s]; t < r->seq_offsets[s + 1]; t++) {
            size_t p = t - base; /* position predicting token t + 1 */
            bool last = t + 1 == r->seq_offsets[s + 1];
            bool on = !last && r->mask[t + 1];
            x->mask[p] = on;
            x->targets[p] = on ? r->tokens[t + 1] : -1;
            x->adv[p] = on ? (float) adv[s] : 0.0f;
            x->roll[p] = on && r->rollout_logp ? r->rollout_logp[t + 1] : 0;
            x->old[p] = on && r->old_logp ? r->old_logp[t + 1] : 0;
        }
    }
    trn_batch_t b = {.tokens = r->tokens + base,
                     .targets = x->targets,
                     .n_tokens = n,
                     .seq_offsets = x->off,
                     .n_seqs = s1 - s0,
                     .temperature = c->temperature};
    lisa_rc_t rc;
    bool need_ent = lc->entropy_coef > 0;
    bool use_ref = ref && lc->kl_coef > 0;
    if (use_ref) {
        rc = s_fwd(ref, &b, cpx, x->ref, NULL, err);
        if (rc != LISA_OK)
            return rc;
    }
    rc = s_fwd(m, &b, cpx, x->logp, x->ent, err);
    if (rc != LISA_OK)
        return rc;
    if (c->bypass)
        memcpy(x->old, x->roll, n * sizeof(float));
    else if (!r->old_logp)
        memcpy(x->old, x->logp, n * sizeof(float));
    trn_loss_in_t in = {.n_tokens = n,
                        .seq_offsets = x->off,
                        .n_seqs = s1 - s0,
                        .mask = x->mask,
                        .logp = x->logp,
                        .old_logp = x->old,
                        .adv = x->adv,
                        .ref_logp = use_ref ? x->ref : NULL,
                        .is_weights = NULL,
                        .entropy = x->ent};
    if (c->is_threshold > 0) {
        rc = trn_is_weights(c->is_level, c->is_threshold, &in, x->roll, x->isw,
                            err);
        if (rc != LISA_OK)
            return rc;
        in.is_weights = x->isw;
    }
    trn_loss_out_t lo;
    rc = trn_loss_compute(lc, &in, x->dlogp, x->dent, &lo, err);
    if (rc != LISA_OK)
        return rc;
    rc = s_bwd(m, cpx, x->dlogp, need_ent ? x->dent : NULL, err);
    if (rc != LISA_OK || (cpx && s_rank(c) != 0))
        return rc;
    out->loss += lo.loss;
    out->pg_loss += lo.pg_loss;
    out->kl_loss += lo.kl_loss;
    double ent_sum = 0;
    for (size_t p = 0; p < n; p++)
        ent_sum += x->mask[p] ? (double) x->ent[p] : 0.0;
    out->entropy += ent_sum;
    out->pg_clipfrac += lo.pg_clipfrac * lo.tokens;
    out->pg_clipfrac_lower += lo.pg_clipfrac_lower * lo.tokens;
    out->ppo_kl += lo.ppo_kl * lo.tokens;
    out->tokens += lo.tokens;
    out->micro_batches++;
    out->cp_micro_batches += cpx != NULL;
    return LISA_OK;
}

/* verl's kl_penalty of one token (logp - ref as k1, abs, k2, k3). */
static double
s_kl_token(trn_kl_t type, double logp, double ref)
{
    double d = logp - ref;
    switch (type) {
    case TRN_KL_ABS:
        return fabs(d);
    case TRN_KL_K2:
        return 0.5 * d * d;
    case TRN_KL_K3: {
        double k = ref - logp;
        k = k < -20 ? -20 : k > 20 ? 20 : k;
        double v = exp(k) - k - 1;
        return v < -10 ? -10 : v > 10 ? 10 : v;
    }
    case TRN_KL_K1:
    default:
        return d;
    }
}

/* KL in the reward: score[s] -= coef * (sum of the KL of s's sampled
 * tokens between the old policy, r->old_logp or the model now, and the
 * reference); the per-trajectory mean KL goes to out. Forward only, over
 * this rank's micro-batches; the sums cross ranks. */
static lisa_rc_t
s_reward_kl(const trn_step_model_t *m, const trn_step_model_t *ref,
            const trn_step_cfg_t *c, const trn_rollouts_t *r, size_t cap,
            double *score, trn_step_out_t *out, trn_err_t *err)
{
    size_t n = r->n_seqs;
    double *v = lisa_calloc(2 * n + 1, sizeof *v); /* sums, counts, failed */
    s_scratch_t x = {0};
    s_scratch_init(&x, cap, n);
    size_t *start = NULL;
    int *owner = NULL;
    size_t nmb = s_plan(c, r, &start, &owner);
    lisa_rc_t rc = LISA_OK;
    s_cpx_t cpx;
    s_cpx_init(&cpx, c, cap);
    for (size_t k = 0; k < nmb && rc == LISA_OK; k++) {
        if (!s_mine(c, owner[k]))
            continue;
        s_cpx_t *cx = owner[k] == S_ALL_RANKS ? &cpx : NULL;
        size_t s0 = start[k], s1 = start[k + 1];
        size_t base = r->seq_offsets[s0], len = r->seq_offsets[s1] - base;
        for (size_t s = s0; s <= s1; s++)
            x.off[s - s0] = r->seq_offsets[s] - base;
        for (size_t s = s0; s < s1; s++)
            for (size_t t = r->seq_offsets[s]; t < r->seq_offsets[s + 1]; t++) {
                bool on = t + 1 < r->seq_offsets[s + 1] && r->mask[t + 1];
                x.targets[t - base] = on ? r->tokens[t + 1] : -1;
            }
        trn_batch_t b = {.tokens = r->tokens + base,
                         .targets = x.targets,
                         .n_tokens = len,
                         .seq_offsets = x.off,
                         .n_seqs = s1 - s0,
                         .temperature = c->temperature};
        rc = s_fwd(ref, &b, cx, x.ref, NULL, err);
        if (rc == LISA_OK && !r->old_logp)
            rc = s_fwd(m, &b, cx, x.logp, NULL, err);
        /* a micro-batch of every rank is counted once */
        bool count = !cx || s_rank(c) == 0;
        for (size_t s = s0; s < s1 && rc == LISA_OK && count; s++)
            for (size_t t = r->seq_offsets[s]; t + 1 < r->seq_offsets[s + 1];
                 t++) {
                if (!r->mask[t + 1])
                    continue;
                double lp = r->old_logp ? (double) r->old_logp[t + 1]
                                        : (double) x.logp[t - base];
                v[s] +=
                    s_kl_token(c->kl_reward_type, lp, (double) x.ref[t - base]);
                v[n + s] += 1;
            }
    }
    v[2 * n] = rc != LISA_OK;
    if (s_world(c) > 1) {
        lisa_rc_t src = c->comm->sum(c->comm->self, v, 2 * n + 1, err);
        if (src != LISA_OK)
            rc = src;
        else if (rc == LISA_OK && v[2 * n] > 0)
            rc = trn_fail(err, LISA_ERR, "step: another rank failed");
    }
    for (size_t s = 0; s < n && rc == LISA_OK; s++) {
        score[s] -= c->kl_reward_coef * v[s];
        if (v[n + s] > 0) {
            out->reward_kl += v[s] / v[n + s];
            out->reward_kl_n += 1;
        }
    }
    lisa_free(&start);
    lisa_free(&owner);
    s_scratch_free(&x);
    s_cpx_free(&cpx);
    lisa_free(&v);
    return rc;
}

lisa_rc_t
trn_step_logprobs_with(const trn_step_model_t *m, const trn_step_cfg_t *cfg,
                       const trn_rollouts_t *r, float *logp, trn_err_t *err)
{
    trn_step_cfg_t cc;
    const trn_step_cfg_t *c = &cc;
    lisa_rc_t rc = s_check(cfg, r, true, err);
    if (rc == LISA_OK)
        rc = s_cp_resolve(m, cfg, &cc, err);
    if (rc != LISA_OK)
        return rc;
    size_t cap = c->micro_tokens;
    for (size_t s = 0; s < r->n_seqs; s++) {
        size_t len = r->seq_offsets[s + 1] - r->seq_offsets[s];
        cap = len > cap ? len : cap;
    }
    s_scratch_t x = {0};
    s_scratch_init(&x, cap, r->n_seqs);
    size_t *start = NULL, ntok = r->seq_offsets[r->n_seqs];
    int *owner = NULL;
    size_t nmb = s_plan(c, r, &start, &owner);
    bool dp = s_world(c) > 1;
    if (dp)
        memset(logp, 0, ntok * sizeof *logp);
    s_cpx_t cpx;
    s_cpx_init(&cpx, c, cap);
    for (size_t k = 0; k < nmb && rc == LISA_OK; k++) {
        if (!s_mine(c, owner[k]))
            continue;
        s_cpx_t *cx = owner[k] == S_ALL_RANKS ? &cpx : NULL;
        size_t s0 = start[k], s1 = start[k + 1];
        size_t base = r->seq_offsets[s0], n = r->seq_offsets[s1] - base;
        for (size_t s = s0; s <= s1; s++)
            x.off[s - s0] = r->seq_offsets[s] - base;
        for (size_t t = base; t < base + n; t++) {
            bool last = false;
            for (size_t s = s0; s < s1; s++)
                last = last || t + 1 == r->seq_offsets[s + 1];
            x.targets[t - base] =
                !last && r->mask[t + 1] ? r->tokens[t + 1] : -1;
        }
        trn_batch_t b = {.tokens = r->tokens + base,
                         .targets = x.targets,
                         .n_tokens = n,
                         .seq_offsets = x.off,
                         .n_seqs = s1 - s0,
                         .temperature = c->temperature};
        rc = s_fwd(m, &b, cx, x.logp, NULL, err);
        /* a micro-batch of every rank is written once (the sum adds) */
        if (rc == LISA_OK && (!cx || s_rank(c) == 0))
            for (size_t t = base; t < base + n; t++) {
                logp[t] = 0;
                if (t > base && x.targets[t - 1 - base] >= 0)
                    logp[t] = x.logp[t - 1 - base];
            }
    }
    if (dp) { /* every rank reaches the sum, failed or not */
        double *v = lisa_malloc((ntok + 1) * sizeof *v);
        for (size_t t = 0; t < ntok; t++)
            v[t] = logp[t];
        v[ntok] = rc != LISA_OK;
        lisa_rc_t src = c->comm->sum(c->comm->self, v, ntok + 1, err);
        if (src != LISA_OK)
            rc = src;
        else if (rc == LISA_OK && v[ntok] > 0)
            rc = trn_fail(err, LISA_ERR, "step: another rank failed");
        for (size_t t = 0; t < ntok; t++)
            logp[t] = (float) v[t];
        lisa_free(&v);
    }
    lisa_free(&start);
    lisa_free(&owner);
    s_scratch_free(&x);
    s_cpx_free(&cpx);
    return rc;
}

lisa_rc_t
trn_step_run_with(const trn_step_model_t *m, const trn_step_model_t *ref,
                  const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
                  trn_step_out_t *out, trn_err_t *err)
{
    memset(out, 0, sizeof *out);
    trn_step_cfg_t cc;
    const trn_step_cfg_t *c = &cc;
    lisa_rc_t rc = s_check(cfg, r, ref != NULL, err);
    if (rc == LISA_OK)
        rc = s_cp_resolve(m, cfg, &cc, err);
    if (rc != LISA_OK)
        return rc;
    double *adv = lisa_malloc(r->n_seqs * sizeof *adv);
    double *score = lisa_malloc(r->n_seqs * sizeof *score);
    memcpy(score, r->score, r->n_seqs * sizeof *score);
    s_scratch_t x = {0};
    s_cpx_t cpx = {0};
    if (c->kl_reward_coef > 0) {
        size_t kcap = c->micro_tokens;
        for (size_t s = 0; s < r->n_seqs; s++) {
            size_t len = r->seq_offsets[s + 1] - r->seq_offsets[s];
            kcap = len > kcap ? len : kcap;
        }
        rc = s_reward_kl(m, ref, c, r, kcap, score, out, err);
        if (rc != LISA_OK)
            goto out;
    }
    rc = trn_advantage(&c->adv, score, r->group, r->n_seqs, adv, err);
    if (rc != LISA_OK)
        goto out;
    /* whole-batch normalisers */
    trn_loss_cfg_t lc = c->loss;
    double ntok = 0, nseq = 0, maxlen = 0;
    size_t cap = 0;
    /* a learning signal: a trained token with a non-zero advantage, or a
     * KL or entropy term (the same answer on every rank: whole batch) */
    bool signal = c->loss.kl_coef > 0 || c->loss.entropy_coef > 0;
    for (size_t s = 0; s < r->n_seqs; s++) {
        size_t b = r->seq_offsets[s], e = r->seq_offsets[s + 1];
        double k = 0;
        for (size_t t = b; t < e; t++)
            k += r->mask[t] ? 1 : 0;
        ntok += k;
        nseq += k > 0 ? 1 : 0;
        signal = signal || (k > 0 && adv[s] != 0.0);
        maxlen = (double) (e - b) > maxlen ? (double) (e - b) : maxlen;
        cap = e - b > cap ? e - b : cap;
    }
    if (lc.batch_num_tokens == 0)
        lc.batch_num_tokens = ntok;
    if (lc.global_batch_size == 0)
        lc.global_batch_size = nseq;
    if (lc.loss_scale_factor == 0)
        lc.loss_scale_factor = maxlen;
    cap = cap > c->micro_tokens ? cap : c->micro_tokens;
    s_scratch_init(&x, cap, r->n_seqs);
    s_cpx_init(&cpx, c, cap);
    m->zero_grad(m->self);
    {
        size_t *start = NULL;
        int *owner = NULL;
        size_t nmb = s_plan(c, r, &start, &owner);
        size_t last = nmb; /* this rank's last micro-batch */
        for (size_t k = 0; k < nmb; k++)
            if (s_mine(c, owner[k]))
                last = k;
        for (size_t k = 0; k < nmb && rc == LISA_OK; k++) {
            if (!s_mine(c, owner[k]))
                continue;
            /* a backend may sum gradients across ranks while the last
             * backward runs; not in a context-parallel one, whose own
             * collectives every rank issues in the same order */
            if (k == last && m->last_backward && owner[k] != S_ALL_RANKS)
                m->last_backward(m->self);
            rc = s_micro(m, ref, c, &lc, r, adv, start[k], start[k + 1], &x,
                         owner[k] == S_ALL_RANKS ? &cpx : NULL, out, err);
        }
        lisa_free(&start);
        lisa_free(&owner);
    }
    if (s_world(c) > 1) {
        /* every rank reaches the sum, failed or not, so none waits on a
         * rank that gave up; then all stop before the update */
        double v[] = {out->loss,
                      out->pg_loss,
                      out->kl_loss,
                      out->entropy,
                      out->pg_clipfrac,
                      out->pg_clipfrac_lower,
                      out->ppo_kl,
                      out->tokens,
                      (double) out->micro_batches,
                      (double) out->cp_micro_batches,
                      rc != LISA_OK};
        lisa_rc_t src = c->comm->sum(c->comm->self, v, 11, err);
        if (src != LISA_OK) {
            rc = src;
            goto out;
        }
        if (rc != LISA_OK)
            goto out;
        if (v[10] > 0) {
            rc = trn_fail(err, LISA_ERR, "step: another rank failed");
            goto out;
        }
        out->loss = v[0];
        out->pg_loss = v[1];
        out->kl_loss = v[2];
        out->entropy = v[3];
        out->pg_clipfrac = v[4];
        out->pg_clipfrac_lower = v[5];
        out->ppo_kl = v[6];
        out->tokens = v[7];
        out->micro_batches = (size_t) v[8];
        out->cp_micro_batches = (size_t) v[9];
    }
    if (rc != LISA_OK)
        goto out;
    if (out->tokens > 0) {
        out->pg_clipfrac /= out->tokens;
        out->pg_clipfrac_lower /= out->tokens;
        out->ppo_kl /= out->tokens;
        out->entropy /= out->tokens;
    }
    if (!signal || ntok == 0) {
        /* the gradient is exactly zero: AdamW would still move every
         * weight (momentum, decay), with nothing learnt to justify it */
        out->skipped = true;
        lisa_log_info("trainer: no trained token carries a learning signal "
                      "(all advantages 0); update skipped");
        goto out;
    }
    rc = m->update(m->self, c, &out->grad_norm, &out->skipped, err);
    if (rc == LISA_OK && out->skipped)
        lisa_log_warn("trainer: gradient norm %g is not finite; step skipped",
                      out->grad_norm);
out:
    s_scratch_free(&x);
    s_cpx_free(&cpx);
    lisa_free(&adv);
    lisa_free(&score);
    return rc;
}

/* ---- the PPO update over mini-batches and epochs ---------------------- */

size_t
trn_step_reject(const trn_step_cfg_t *c, size_t n_seqs,
                const size_t *seq_offsets, const float *old_logp,
                const float *rollout_logp, uint8_t *mask)
{
    bool rs = c->rs_level != TRN_RS_OFF, veto = c->rs_veto > 0;
    if ((!rs && !veto) || !old_logp || !rollout_logp)
        return 0;
    double hi = c->rs_upper > 0 ? c->rs_upper : HUGE_VAL;
    double lo = c->rs_lower > 0 ? c->rs_lower : (hi < HUGE_VAL ? 1 / hi : 0);
    size_t cleared = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        size_t b = seq_offsets[s], e = seq_offsets[s + 1];
        double sum = 0, k = 0;
        bool vetoed = false;
        for (size_t t = b; t < e; t++) {
            if (!mask[t])
                continue;
            double d = (double) old_logp[t] - (double) rollout_logp[t];
            sum += d;
            k += 1;
            vetoed = vetoed || (veto && exp(d) < c->rs_veto);
        }
        double agg = c->rs_level == TRN_RS_GEOMETRIC && k > 0 ? sum / k : sum;
        agg = agg < -20 ? -20 : agg > 20 ? 20 : agg;
        bool whole = vetoed || ((c->rs_level == TRN_RS_SEQUENCE ||
                                 c->rs_level == TRN_RS_GEOMETRIC) &&
                                (exp(agg) > hi || exp(agg) < lo));
        for (size_t t = b; t < e; t++) {
            if (!mask[t])
                continue;
            double d = (double) old_logp[t] - (double) rollout_logp[t];
            d = d < -20 ? -20 : d > 20 ? 20 : d;
            bool off = whole || (c->rs_level == TRN_RS_TOKEN &&
                                 (exp(d) > hi || exp(d) < lo));
            if (off) {
                mask[t] = 0;
                cleared++;
            }
        }
    }
    return cleared;
}

/* The mini-batch of each sequence: its group's ordinal (first
 * appearance) / groups per mini-batch. Returns the number of them. */
static size_t
s_mini_of(const trn_step_cfg_t *c, const trn_rollouts_t *r, size_t *mb)
{
    int64_t *seen = lisa_malloc(r->n_seqs * sizeof *seen);
    size_t ng = 0, per = c->mini_groups, nmb = 0;
    for (size_t s = 0; s < r->n_seqs; s++) {
        size_t g = 0;
        while (g < ng && seen[g] != r->group[s])
            g++;
        if (g == ng)
            seen[ng++] = r->group[s];
        mb[s] = per > 0 ? g / per : 0;
        nmb = mb[s] + 1 > nmb ? mb[s] + 1 : nmb;
    }
    lisa_free(&seen);
    return nmb;
}

/* The sequences of mini-batch k as rollouts of their own (arrays in
 * *buf, one allocation). */
typedef struct {
    size_t *off;
    int32_t *tok;
    uint8_t *mask;
    float *roll, *old;
    int64_t *group;
    double *score;
} s_sub_t;

static void
s_sub_make(const trn_rollouts_t *r, const uint8_t *mask, const float *old,
           const size_t *mb, size_t k, s_sub_t *b, trn_rollouts_t *o)
{
    size_t ns = 0, nt = 0;
    for (size_t s = 0; s < r->n_seqs; s++)
        if (mb[s] == k) {
            ns++;
            nt += r->seq_offsets[s + 1] - r->seq_offsets[s];
        }
    b->off = lisa_calloc(ns + 1, sizeof *b->off);
    b->tok = lisa_malloc((nt ? nt : 1) * sizeof *b->tok);
    b->mask = lisa_malloc(nt ? nt : 1);
    b->roll = lisa_calloc(nt ? nt : 1, sizeof *b->roll);
    b->old = lisa_calloc(nt ? nt : 1, sizeof *b->old);
    b->group = lisa_calloc(ns ? ns : 1, sizeof *b->group);
    b->score = lisa_calloc(ns ? ns : 1, sizeof *b->score);
    size_t i = 0, t = 0;
    for (size_t s = 0; s < r->n_seqs; s++) {
        if (mb[s] != k)
            continue;
        size_t a = r->seq_offsets[s], len = r->seq_offsets[s + 1] - a;
        memcpy(b->tok + t, r->tokens + a, len * sizeof *b->tok);
        memcpy(b->mask + t, mask + a, len);
        if (r->rollout_logp)
            memcpy(b->roll + t, r->rollout_logp + a, len * sizeof *b->roll);
        if (old)
            memcpy(b->old + t, old + a, len * sizeof *b->old);
        b->group[i] = r->group[s];
        b->score[i] = r->score[s];
        t += len;
        b->off[++i] = t;
    }
    *o = (trn_rollouts_t){.n_seqs = ns,
                          .seq_offsets = b->off,
                          .tokens = b->tok,
                          .mask = b->mask,
                          .rollout_logp = r->rollout_logp ? b->roll : NULL,
                          .old_logp = old ? b->old : NULL,
                          .group = b->group,
                          .score = b->score};
}

static void
s_sub_free(s_sub_t *b)
{
    lisa_free(&b->off);
    lisa_free(&b->tok);
    lisa_free(&b->mask);
    lisa_free(&b->roll);
    lisa_free(&b->old);
    lisa_free(&b->group);
    lisa_free(&b->score);
}

/* Adds one update's out to the running totals (first: of the first
 * pass, whose tokens and in-reward KL count once). */
static void
s_acc(trn_step_out_t *o, const trn_step_out_t *u, bool first)
{
    o->loss += u->loss;
    o->pg_loss += u->pg_loss;
    o->kl_loss += u->kl_loss;
    o->entropy += u->entropy * u->tokens;
    o->pg_clipfrac += u->pg_clipfrac * u->tokens;
    o->pg_clipfrac_lower += u->pg_clipfrac_lower * u->tokens;
    o->ppo_kl += u->ppo_kl * u->tokens;
    o->grad_norm += u->grad_norm;
    o->micro_batches += u->micro_batches;
    o->cp_micro_batches += u->cp_micro_batches;
    o->updates += u->skipped ? 0 : 1;
    if (first) {
        o->tokens += u->tokens;
        o->reward_kl += u->reward_kl;
        o->reward_kl_n += u->reward_kl_n;
    }
}

lisa_rc_t
trn_step_ppo(const trn_step_actor_t *a, const trn_step_cfg_t *c,
             const trn_rollouts_t *r, const float *old, trn_step_out_t *out,
             trn_err_t *err)
{
    memset(out, 0, sizeof *out);
    if (r->n_seqs == 0 || !r->seq_offsets || !r->group || !r->score ||
        c->ppo_epochs == 0)
        return trn_fail(err, LISA_INVALID, "ppo: empty batch or no epochs");
    size_t *mb = lisa_malloc(r->n_seqs * sizeof *mb);
    size_t nmb = s_mini_of(c, r, mb);
    bool rs = (c->rs_level != TRN_RS_OFF || c->rs_veto > 0) && !c->bypass;
    bool need_old = !c->bypass && (nmb > 1 || c->ppo_epochs > 1 || rs ||
                                   c->kl_reward_coef > 0);
    out->mini_batches = nmb;
    if (!need_old) { /* today's single on-policy step */
        lisa_free(&mb);
        lisa_rc_t rc = a->train_step(a->self, c, r, out, err);
        out->mini_batches = 1;
        out->updates = out->skipped ? 0 : 1;
        return rc;
    }
    size_t ntok = r->seq_offsets[r->n_seqs];
    float *own = NULL;
    uint8_t *mask = lisa_malloc(ntok ? ntok : 1);
    memcpy(mask, r->mask, ntok);
    lisa_rc_t rc = LISA_OK;
    if (!old) {
        own = lisa_calloc(ntok ? ntok : 1, sizeof *own);
        rc = a->logprobs(a->self, c, r, own, err);
        old = own;
    }
    if (rc == LISA_OK && rs) {
        if (!r->rollout_logp)
            rc = trn_fail(err, LISA_INVALID,
                          "ppo: rejection sampling needs rollout log-probs");
        else
            out->rs_masked = (double) trn_step_reject(
                c, r->n_seqs, r->seq_offsets, old, r->rollout_logp, mask);
    }
    bool all_skipped = true;
    for (size_t e = 0; e < c->ppo_epochs && rc == LISA_OK; e++)
        for (size_t k = 0; k < nmb && rc == LISA_OK; k++) {
            s_sub_t b = {0};
            trn_rollouts_t sub;
            s_sub_make(r, mask, old, mb, k, &b, &sub);
            if (sub.n_seqs > 0) {
                trn_step_out_t u;
                memset(&u, 0, sizeof u);
                rc = a->train_step(a->self, c, &sub, &u, err);
                if (rc == LISA_OK) {
                    s_acc(out, &u, e == 0);
                    all_skipped = all_skipped && u.skipped;
                }
            }
            s_sub_free(&b);
        }
    size_t calls = c->ppo_epochs * nmb;
    if (rc == LISA_OK && calls > 0) {
        out->loss /= (double) calls;
        out->pg_loss /= (double) calls;
        out->kl_loss /= (double) calls;
        out->grad_norm /= (double) calls;
        double wt = out->tokens * (double) c->ppo_epochs;
        if (wt > 0) {
            out->entropy /= wt;
            out->pg_clipfrac /= wt;
            out->pg_clipfrac_lower /= wt;
            out->ppo_kl /= wt;
        }
        out->skipped = all_skipped;
    }
    lisa_free(&own);
    lisa_free(&mask);
    lisa_free(&mb);
    return rc;
}

/* Removes [a, b) of the three arrays of length *len. */
static void
s_cut(int32_t *tok, uint8_t *mask, float *logp, size_t *len, size_t a, size_t b)
{
    size_t n = *len - b;
    memmove(tok + a, tok + b, n * sizeof *tok);
    memmove(mask + a, mask + b, n);
    memmove(logp + a, logp + b, n * sizeof *logp);
    *len -= b - a;
}

int
trn_step_cap(int32_t *tok, uint8_t *mask, float *logp, size_t *len,
             size_t drop_over, size_t max_prompt, char trunc,
             size_t max_response)
{
    size_t plen = 0;
    while (plen < *len && !mask[plen])
        plen++;
    if (drop_over > 0 && plen > drop_over)
        return -1;
    int cut = 0;
    if (max_prompt > 0 && plen > max_prompt) {
        size_t extra = plen - max_prompt;
        if (trunc == 'r') /* keep the start */
            s_cut(tok, mask, logp, len, max_prompt, plen);
        else if (trunc == 'm') /* keep both ends */
            s_cut(tok, mask, logp, len, max_prompt / 2, max_prompt / 2 + extra);
        else /* 'l': keep the end */
            s_cut(tok, mask, logp, len, 0, extra);
        plen = max_prompt;
        cut = 1;
    }
    if (max_response > 0 && *len - plen > max_response) {
        *len = plen + max_response;
        cut = 1;
    }
    return cut;
}

/* ---- the CPU model as a trn_step_model_t ------------------------------ */

typedef struct {
    trn_model_t *m;
    trn_adamw_t *opt;
} s_cpu_t;

static lisa_rc_t
s_cpu_forward(void *self, const trn_batch_t *b, float *logp, float *ent,
              trn_err_t *err)
{
    return trn_model_forward(((s_cpu_t *) self)->m, b, logp, ent, err);
}

static lisa_rc_t
s_cpu_backward(void *self, const float *dlogp, const float *dent,
               trn_err_t *err)
{
    return trn_model_backward(((s_cpu_t *) self)->m, dlogp, dent, err);
}

static void
s_cpu_zero_grad(void *self)
{
    trn_model_zero_grad(((s_cpu_t *) self)->m);
}

static lisa_rc_t
s_cpu_update(void *self, const trn_step_cfg_t *c, double *grad_norm,
             bool *skipped, trn_err_t *err)
{
    s_cpu_t *x = self;
    float *g = trn_model_grads(x->m);
    size_t np = trn_model_num_params(x->m);
    *skipped = false;
    if (s_world(c) > 1) { /* sum the ranks' gradients */
        double *v = lisa_malloc(np * sizeof *v);
        for (size_t i = 0; i < np; i++)
            v[i] = g[i];
        lisa_rc_t rc = c->comm->sum(c->comm->self, v, np, err);
        for (size_t i = 0; i < np; i++)
            g[i] = (float) v[i];
        lisa_free(&v);
        if (rc != LISA_OK)
            return rc;
    }
    if (trn_grad_clip(g, np, c->grad_clip, grad_norm) != LISA_OK) {
        *skipped = true;
        trn_model_zero_grad(x->m);
        return LISA_OK;
    }
    return trn_adamw_step(x->opt, &c->optim, trn_model_params(x->m), g, np,
                          err);
}

static trn_step_model_t
s_cpu_ops(s_cpu_t *x)
{
    trn_step_model_t o = {.self = x,
                          .forward = s_cpu_forward,
                          .backward = s_cpu_backward,
                          .zero_grad = s_cpu_zero_grad,
                          .update = s_cpu_update};
    return o;
}

lisa_rc_t
trn_step_logprobs(trn_model_t *m, const trn_step_cfg_t *c,
                  const trn_rollouts_t *r, float *logp, trn_err_t *err)
{
    s_cpu_t x = {m, NULL};
    trn_step_model_t o = s_cpu_ops(&x);
    return trn_step_logprobs_with(&o, c, r, logp, err);
}

lisa_rc_t
trn_step_run(trn_model_t *m, trn_model_t *ref, trn_adamw_t *opt,
             const trn_step_cfg_t *c, const trn_rollouts_t *r,
             trn_step_out_t *out, trn_err_t *err)
{
    s_cpu_t x = {m, opt}, xr = {ref, NULL};
    trn_step_model_t o = s_cpu_ops(&x), orf = s_cpu_ops(&xr);
    return trn_step_run_with(&o, ref ? &orf : NULL, c, r, out, err);
}
