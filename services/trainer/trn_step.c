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
                        .is_threshold = 0};
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
    if (c->loss.kl_coef > 0 && !have_ref)
        return trn_fail(err, LISA_INVALID, "step: KL needs a reference model");
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

/* The micro-batches of a batch: trajectories [start[k], start[k + 1]),
 * each at most micro_tokens long unless one trajectory is longer, and the
 * rank that runs each one (comm: to the least loaded rank so far, in
 * order; else rank 0). Returns the number of micro-batches. */
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
        while (s1 < r->n_seqs &&
               r->seq_offsets[s1 + 1] - r->seq_offsets[s0] <= c->micro_tokens)
            s1++;
        int best = 0;
        for (int k = 1; k < world; k++)
            if (load[k] < load[best])
                best = k;
        load[best] += (double) (r->seq_offsets[s1] - r->seq_offsets[s0]);
        (*owner)[n] = best;
        (*start)[n++] = s0;
        s0 = s1;
    }
    (*start)[n] = r->n_seqs;
    lisa_free(&load);
    return n;
}

/* Runs trajectories [s0, s1) as one micro-batch. */
static lisa_rc_t
s_micro(const trn_step_model_t *m, const trn_step_model_t *ref,
        const trn_step_cfg_t *c, const trn_loss_cfg_t *lc,
        const trn_rollouts_t *r, const double *adv, size_t s0, size_t s1,
        s_scratch_t *x, trn_step_out_t *out, trn_err_t *err)
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
    if (ref) {
        rc = ref->forward(ref->self, &b, x->ref, NULL, err);
        if (rc != LISA_OK)
            return rc;
    }
    rc = m->forward(m->self, &b, x->logp, x->ent, err);
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
                        .ref_logp = ref ? x->ref : NULL,
                        .is_weights = NULL,
                        .entropy = x->ent};
    if (c->is_threshold > 0) {
        rc = trn_is_weights(TRN_IS_TOKEN, c->is_threshold, &in, x->roll, x->isw,
                            err);
        if (rc != LISA_OK)
            return rc;
        in.is_weights = x->isw;
    }
    trn_loss_out_t lo;
    rc = trn_loss_compute(lc, &in, x->dlogp, x->dent, &lo, err);
    if (rc != LISA_OK)
        return rc;
    rc = m->backward(m->self, x->dlogp, need_ent ? x->dent : NULL, err);
    if (rc != LISA_OK)
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
    return LISA_OK;
}

lisa_rc_t
trn_step_logprobs_with(const trn_step_model_t *m, const trn_step_cfg_t *c,
                       const trn_rollouts_t *r, float *logp, trn_err_t *err)
{
    lisa_rc_t rc = s_check(c, r, true, err);
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
    for (size_t k = 0; k < nmb && rc == LISA_OK; k++) {
        if (owner[k] != s_rank(c))
            continue;
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
        rc = m->forward(m->self, &b, x.logp, NULL, err);
        if (rc == LISA_OK)
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
    return rc;
}

lisa_rc_t
trn_step_run_with(const trn_step_model_t *m, const trn_step_model_t *ref,
                  const trn_step_cfg_t *c, const trn_rollouts_t *r,
                  trn_step_out_t *out, trn_err_t *err)
{
    memset(out, 0, sizeof *out);
    lisa_rc_t rc = s_check(c, r, ref != NULL, err);
    if (rc != LISA_OK)
        return rc;
    double *adv = lisa_malloc(r->n_seqs * sizeof *adv);
    s_scratch_t x = {0};
    rc = trn_advantage(&c->adv, r->score, r->group, r->n_seqs, adv, err);
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
    m->zero_grad(m->self);
    {
        size_t *start = NULL;
        int *owner = NULL;
        size_t nmb = s_plan(c, r, &start, &owner);
        size_t last = nmb; /* this rank's last micro-batch */
        for (size_t k = 0; k < nmb; k++)
            if (owner[k] == s_rank(c))
                last = k;
        for (size_t k = 0; k < nmb && rc == LISA_OK; k++) {
            if (owner[k] != s_rank(c))
                continue;
            if (k == last && m->last_backward)
                m->last_backward(m->self);
            rc = s_micro(m, ref, c, &lc, r, adv, start[k], start[k + 1], &x,
                         out, err);
        }
        lisa_free(&start);
        lisa_free(&owner);
    }
    if (s_world(c) > 1) {
        /* every rank reaches the sum, failed or not, so none waits on a
         * rank that gave up; then all stop before the update */
        double v[] = {
            out->loss,    out->pg_loss,     out->kl_loss,
            out->entropy, out->pg_clipfrac, out->pg_clipfrac_lower,
            out->ppo_kl,  out->tokens,      (double) out->micro_batches,
            rc != LISA_OK};
        lisa_rc_t src = c->comm->sum(c->comm->self, v, 10, err);
        if (src != LISA_OK) {
            rc = src;
            goto out;
        }
        if (rc != LISA_OK)
            goto out;
        if (v[9] > 0) {
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
    lisa_free(&adv);
    return rc;
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
