/*
 * trn_loss: GRPO-family loss terms and their gradients (see trn_loss.h).
 *
 * Every aggregation mode is a weighted sum sum_t a_t x_t with per-token
 * weights a_t that do not depend on x, so the loss of each term and its
 * gradient come from the same a_t: computed once, used three times (policy,
 * KL, entropy).
 */
#include "trn_loss.h"

#include "lisa/lisa_mem.h"
#include "trn_err.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    trn_agg_t agg;
} s_aggs[] = {
    {"token-mean", TRN_AGG_TOKEN_MEAN},
    {"seq-mean-token-sum", TRN_AGG_SEQ_MEAN_TOKEN_SUM},
    {"seq-mean-token-mean", TRN_AGG_SEQ_MEAN_TOKEN_MEAN},
    {"seq-mean-token-sum-norm", TRN_AGG_SEQ_MEAN_TOKEN_SUM_NORM},
};

static const struct {
    const char *name;
    trn_kl_t kl;
} s_kls[] = {
    {"kl", TRN_KL_K1},  {"k1", TRN_KL_K1}, {"abs", TRN_KL_ABS},
    {"mse", TRN_KL_K2}, {"k2", TRN_KL_K2}, {"low_var_kl", TRN_KL_K3},
    {"k3", TRN_KL_K3},
};

trn_loss_cfg_t
trn_loss_defaults(void)
{
    trn_loss_cfg_t c = {.clip_low = 0.2,
                        .clip_high = 0.2,
                        .clip_c = 3.0,
                        .agg = TRN_AGG_TOKEN_MEAN,
                        .kl_coef = 0,
                        .kl_type = TRN_KL_K3,
                        .entropy_coef = 0,
                        .dp_size = 1,
                        .scale = 1};
    return c;
}

lisa_rc_t
trn_agg_parse(const char *name, trn_agg_t *out)
{
    for (size_t i = 0; i < sizeof s_aggs / sizeof s_aggs[0]; i++)
        if (strcmp(name, s_aggs[i].name) == 0) {
            *out = s_aggs[i].agg;
            return LISA_OK;
        }
    return trn_fail(NULL, LISA_INVALID, "unknown loss_agg_mode '%s'", name);
}

lisa_rc_t
trn_kl_parse(const char *name, trn_kl_t *out)
{
    for (size_t i = 0; i < sizeof s_kls / sizeof s_kls[0]; i++)
        if (strcmp(name, s_kls[i].name) == 0) {
            *out = s_kls[i].kl;
            return LISA_OK;
        }
    return trn_fail(NULL, LISA_INVALID, "unknown kl_loss_type '%s'", name);
}

static lisa_rc_t
s_check(const trn_loss_cfg_t *c, const trn_loss_in_t *in, trn_err_t *err)
{
    if (!(c->clip_low >= 0 && c->clip_low < 1) || !(c->clip_high >= 0) ||
        !(c->clip_c > 1.0))
        return trn_fail(err, LISA_INVALID,
                        "loss: clip ratios must be in [0, 1) / >= 0 and "
                        "clip_ratio_c > 1 (got %g, %g, %g)",
                        c->clip_low, c->clip_high, c->clip_c);
    if ((unsigned) c->agg > TRN_AGG_SEQ_MEAN_TOKEN_SUM_NORM ||
        (unsigned) c->kl_type > TRN_KL_K3 || !(c->kl_coef >= 0) ||
        !(c->entropy_coef >= 0) || !(c->dp_size >= 1) ||
        !(c->batch_num_tokens >= 0) || !(c->global_batch_size >= 0) ||
        !(c->loss_scale_factor >= 0) || !(c->scale > 0))
        return trn_fail(err, LISA_INVALID, "loss: bad configuration");
    if (!in->seq_offsets || in->n_seqs == 0 || !in->mask || !in->logp ||
        !in->old_logp || !in->adv || in->seq_offsets[0] != 0 ||
        in->seq_offsets[in->n_seqs] != in->n_tokens)
        return trn_fail(err, LISA_INVALID, "loss: missing or bad inputs");
    for (size_t s = 0; s < in->n_seqs; s++)
        if (in->seq_offsets[s + 1] < in->seq_offsets[s])
            return trn_fail(err, LISA_INVALID, "loss: unordered offsets");
    if (c->kl_coef > 0 && !in->ref_logp)
        return trn_fail(err, LISA_INVALID, "loss: KL needs ref_logp");
    if (c->entropy_coef > 0 && !in->entropy)
        return trn_fail(err, LISA_INVALID,
                        "loss: entropy bonus needs "
                        "entropy");
    for (size_t t = 0; t < in->n_tokens; t++) {
        if (!in->mask[t])
            continue;
        bool ok = isfinite(in->logp[t]) && isfinite(in->old_logp[t]) &&
                  isfinite(in->adv[t]) &&
                  (!in->ref_logp || isfinite(in->ref_logp[t])) &&
                  (!in->is_weights || isfinite(in->is_weights[t])) &&
                  (!in->entropy || isfinite(in->entropy[t]));
        if (!ok)
            return trn_fail(err, LISA_INVALID,
                            "loss: non-finite input at token %zu", t);
    }
    return LISA_OK;
}

/* a_t for the aggregation mode (0 for masked-out tokens). */
static void
s_agg_weights(const trn_loss_cfg_t *c, const trn_loss_in_t *in, double *a)
{
    double ntok = 0, nseq = 0, maxlen = 0;
    for (size_t s = 0; s < in->n_seqs; s++) {
        double n = 0;
        for (size_t t = in->seq_offsets[s]; t < in->seq_offsets[s + 1]; t++)
            n += in->mask[t] ? 1 : 0;
        ntok += n;
        nseq += n > 0 ? 1 : 0;
        double len = (double) (in->seq_offsets[s + 1] - in->seq_offsets[s]);
        maxlen = len > maxlen ? len : maxlen;
    }
    double T = c->batch_num_tokens > 0 ? c->batch_num_tokens : ntok;
    double S = c->global_batch_size > 0 ? c->global_batch_size : nseq;
    double L = c->loss_scale_factor > 0 ? c->loss_scale_factor : maxlen;
    for (size_t s = 0; s < in->n_seqs; s++) {
        double n = 0;
        for (size_t t = in->seq_offsets[s]; t < in->seq_offsets[s + 1]; t++)
            n += in->mask[t] ? 1 : 0;
        for (size_t t = in->seq_offsets[s]; t < in->seq_offsets[s + 1]; t++) {
            double w = 0;
            if (in->mask[t]) {
                switch (c->agg) {
                case TRN_AGG_TOKEN_MEAN:
                    w = T > 0 ? c->dp_size / T : 0;
                    break;
                case TRN_AGG_SEQ_MEAN_TOKEN_SUM:
                    w = S > 0 ? c->dp_size / S : 0;
                    break;
                case TRN_AGG_SEQ_MEAN_TOKEN_MEAN:
                    w = S > 0 ? c->dp_size / S / (n + 1e-8) : 0;
                    break;
                case TRN_AGG_SEQ_MEAN_TOKEN_SUM_NORM:
                    w = L > 0 ? 1.0 / L : 0;
                    break;
                }
            }
            a[t] = w;
        }
    }
}

/* d(clamp(x, lo, hi))/dx as PyTorch defines it: 1 inside, ends included. */
static double
s_pass(double x, double lo, double hi)
{
    return x >= lo && x <= hi ? 1.0 : 0.0;
}

/* Slope of max(a, b) (or min) towards a, b: ties split evenly. */
static double
s_pick(double a, double b, double ga, double gb, bool want_max)
{
    if (a == b)
        return 0.5 * (ga + gb);
    bool a_wins = want_max ? a > b : a < b;
    return a_wins ? ga : gb;
}

/* One token's policy loss and its slope d/dlogp. */
static void
s_pg(const trn_loss_cfg_t *c, double logp, double old, double A, double *pg,
     double *g, bool *clip_hi, bool *clip_lo)
{
    double nk = logp - old;
    double nkc = nk < -20 ? -20 : nk > 20 ? 20 : nk;
    double r = exp(nkc);
    double dr = r * s_pass(nk, -20, 20);
    double lo = 1 - c->clip_low, hi = 1 + c->clip_high;
    double rc = r < lo ? lo : r > hi ? hi : r;
    double drc = dr * s_pass(r, lo, hi);
    double pg1 = -A * r, g1 = -A * dr;
    double pg2 = -A * rc, g2 = -A * drc;
    double pgc = pg1 > pg2 ? pg1 : pg2;
    double gc = s_pick(pg1, pg2, g1, g2, true);
    *clip_hi = pg2 > pg1;
    *clip_lo = false;
    if (A < 0) {
        double pg3 = -A * c->clip_c;
        *clip_lo = pgc > pg3;
        *pg = pgc < pg3 ? pgc : pg3;
        *g = s_pick(pgc, pg3, gc, 0.0, false);
    } else {
        *pg = pgc;
        *g = gc;
    }
}

/* One token's KL estimate and its slope d/dlogp. */
static void
s_kl(trn_kl_t type, double logp, double ref, double *kl, double *g)
{
    double d = logp - ref;
    switch (type) {
    case TRN_KL_K1:
        *kl = d;
        *g = 1;
        return;
    case TRN_KL_ABS:
        *kl = fabs(d);
        *g = d > 0 ? 1 : d < 0 ? -1 : 0;
        return;
    case TRN_KL_K2:
        *kl = 0.5 * d * d;
        *g = d;
        return;
    case TRN_KL_K3: {
        double x = ref - logp;
        double xc = x < -20 ? -20 : x > 20 ? 20 : x;
        double e = exp(xc);
        double k = e - xc - 1;
        double kc = k < -10 ? -10 : k > 10 ? 10 : k;
        *kl = kc;
        *g = s_pass(k, -10, 10) * (e - 1) * s_pass(x, -20, 20) * -1.0;
        return;
    }
    }
    *kl = 0;
    *g = 0;
}

lisa_rc_t
trn_loss_compute(const trn_loss_cfg_t *c, const trn_loss_in_t *in, float *dlogp,
                 float *dentropy, trn_loss_out_t *out, trn_err_t *err)
{
    lisa_rc_t rc = s_check(c, in, err);
    if (rc != LISA_OK)
        return rc;
    memset(out, 0, sizeof *out);
    size_t n = in->n_tokens;
    double *a = lisa_malloc((n ? n : 1) * sizeof *a);
    s_agg_weights(c, in, a);
    double nmask = 0, clip_hi = 0, clip_lo = 0, ppo_kl = 0;
    for (size_t t = 0; t < n; t++) {
        dlogp[t] = 0;
        if (dentropy)
            dentropy[t] = 0;
        if (!in->mask[t])
            continue;
        double pg, g;
        bool chi, clo;
        s_pg(c, (double) in->logp[t], (double) in->old_logp[t],
             (double) in->adv[t], &pg, &g, &chi, &clo);
        double w = in->is_weights ? (double) in->is_weights[t] : 1.0;
        double d = a[t] * w * g;
        out->pg_loss += a[t] * w * pg;
        if (c->kl_coef > 0) {
            double kl, gk;
            s_kl(c->kl_type, (double) in->logp[t], (double) in->ref_logp[t],
                 &kl, &gk);
            out->kl_loss += a[t] * kl;
            d += c->kl_coef * a[t] * gk;
        }
        if (c->entropy_coef > 0) {
            out->entropy_loss += a[t] * (double) in->entropy[t];
            if (dentropy)
                dentropy[t] = (float) (-c->scale * c->entropy_coef * a[t]);
        }
        dlogp[t] = (float) (c->scale * d);
        double nk = (double) in->logp[t] - (double) in->old_logp[t];
        ppo_kl += -(nk < -20 ? -20 : nk > 20 ? 20 : nk);
        clip_hi += chi ? 1 : 0;
        clip_lo += clo ? 1 : 0;
        nmask += 1;
    }
    out->loss = c->scale * (out->pg_loss - c->entropy_coef * out->entropy_loss +
                            c->kl_coef * out->kl_loss);
    if (nmask > 0) {
        out->pg_clipfrac = clip_hi / nmask;
        out->pg_clipfrac_lower = clip_lo / nmask;
        out->ppo_kl = ppo_kl / nmask;
    }
    out->tokens = nmask;
    lisa_free(&a);
    return LISA_OK;
}

lisa_rc_t
trn_is_weights(trn_is_level_t level, double threshold, const trn_loss_in_t *in,
               const float *rollout_logp, float *w, trn_err_t *err)
{
    if (!(threshold > 0) || !rollout_logp || !in->old_logp || !in->mask ||
        !in->seq_offsets || (level != TRN_IS_TOKEN && level != TRN_IS_SEQUENCE))
        return trn_fail(err, LISA_INVALID,
                        "is weights: bad threshold, level or inputs");
    for (size_t s = 0; s < in->n_seqs; s++) {
        size_t b = in->seq_offsets[s], e = in->seq_offsets[s + 1];
        double sum = 0;
        for (size_t t = b; t < e; t++)
            if (in->mask[t])
                sum += (double) in->old_logp[t] - (double) rollout_logp[t];
        for (size_t t = b; t < e; t++) {
            double lr = level == TRN_IS_SEQUENCE ? sum
                                                 : (double) in->old_logp[t] -
                                                       (double) rollout_logp[t];
            lr = lr < -20 ? -20 : lr > 20 ? 20 : lr;
            double v = in->mask[t] ? exp(lr) : 0.0;
            w[t] = (float) (v > threshold ? threshold : v);
        }
    }
    return LISA_OK;
}
