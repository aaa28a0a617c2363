/*
 * trn_loss tests. Hand-computed values for PPO-clip with separate low/high
 * clips and the dual clip, every aggregation mode (local and global
 * normalisers), every KL estimator, the entropy bonus and truncated
 * importance weights; then the gradients of random configurations against
 * finite differences of the loss itself. The first test is the usage
 * example.
 */
#include "trn_loss.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

/* Six tokens in two sequences; the last is masked out (and garbage).
 *   t0 A=+1 r=1.5: pg1 -1.5, pg2 -1.28 -> -1.28 (clipped high), slope 0
 *   t1 A=+1 r=0.5: pg1 -0.5, pg2 -0.8  -> -0.5, slope -A r = -0.5
 *   t2 A=-1 r=0.5: pg1  0.5, pg2  0.8  ->  0.8 (clipped low), slope 0
 *   t3 A=-1 r=4.0: pg1  4.0, pg2 1.28 -> 4.0 -> dual clip min(4, 3) = 3
 *   t4 A=-2 r=1.1: pg1 = pg2 = 2.2 (inside), slope -A r = 2.2
 * sum of masked losses = -1.28 - 0.5 + 0.8 + 3 + 2.2 = 4.22 */
typedef struct {
    size_t off[3];
    uint8_t mask[6];
    float logp[6], old[6], adv[6];
    trn_loss_in_t in;
} case_t;

static void
case_init(case_t *c)
{
    const double r[5] = {1.5, 0.5, 0.5, 4.0, 1.1};
    const float A[6] = {1, 1, -1, -1, -2, 5};
    c->off[0] = 0;
    c->off[1] = 3;
    c->off[2] = 6;
    for (int t = 0; t < 6; t++) {
        c->mask[t] = t < 5;
        c->old[t] = -1.0f - 0.1f * (float) t;
        c->logp[t] = t < 5 ? (float) (c->old[t] + log(r[t])) : NAN;
        c->adv[t] = A[t];
    }
    c->in = (trn_loss_in_t){.n_tokens = 6,
                            .seq_offsets = c->off,
                            .n_seqs = 2,
                            .mask = c->mask,
                            .logp = c->logp,
                            .old_logp = c->old,
                            .adv = c->adv};
}

static trn_loss_cfg_t
dapo_cfg(void)
{
    trn_loss_cfg_t cfg = trn_loss_defaults();
    cfg.clip_high = 0.28; /* clip-higher */
    return cfg;
}

Test(trn_loss, usage)
{
    case_t c;
    case_init(&c);
    trn_loss_cfg_t cfg = dapo_cfg(); /* token-mean, clip_c 3 */
    float dlogp[6];
    trn_loss_out_t out;
    trn_err_t err;
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, dlogp, NULL, &out, &err),
                 LISA_OK, "%s", err.msg);
    cr_assert_float_eq(out.loss, 4.22 / 5, 1e-6);
    cr_assert_float_eq(out.pg_loss, 4.22 / 5, 1e-6);
    const float want[6] = {0, -0.5f / 5, 0, 0, 2.2f / 5, 0};
    for (int t = 0; t < 6; t++)
        cr_assert_float_eq(dlogp[t], want[t], 1e-6, "t%d: %g", t, dlogp[t]);
    cr_assert_float_eq(out.pg_clipfrac, 2.0 / 5, 1e-12);       /* t0, t2 */
    cr_assert_float_eq(out.pg_clipfrac_lower, 1.0 / 5, 1e-12); /* t3 */
    cr_assert_float_eq(out.ppo_kl, -0.10015505758249788, 1e-6);
    cr_assert_eq(out.tokens, 5);
}

Test(trn_loss, aggregation_modes)
{
    case_t c;
    case_init(&c);
    float d[6];
    trn_loss_out_t out;
    trn_loss_cfg_t cfg = dapo_cfg();
    /* seq-mean-token-sum: (-0.98 + 5.2) / 2 sequences */
    cr_assert_eq(trn_agg_parse("seq-mean-token-sum", &cfg.agg), LISA_OK);
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_float_eq(out.loss, 2.11, 1e-6);
    cr_assert_float_eq(d[1], -0.25, 1e-6);
    cr_assert_float_eq(d[4], 1.1, 1e-6);
    /* seq-mean-token-mean: (-0.98 / 3 + 5.2 / 2) / 2 */
    cr_assert_eq(trn_agg_parse("seq-mean-token-mean", &cfg.agg), LISA_OK);
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_float_eq(out.loss, 1.1366666666666667, 1e-6);
    cr_assert_float_eq(d[1], -0.5 / 3 / 2, 1e-6);
    cr_assert_float_eq(d[4], 2.2 / 2 / 2, 1e-6);
    /* seq-mean-token-sum-norm: / longest sequence (3), or the constant */
    cr_assert_eq(trn_agg_parse("seq-mean-token-sum-norm", &cfg.agg), LISA_OK);
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_float_eq(out.loss, 4.22 / 3, 1e-6);
    cfg.loss_scale_factor = 10;
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_float_eq(out.loss, 0.422, 1e-6);
    cr_assert_float_eq(d[4], 0.22, 1e-6);
    /* token-mean over a global batch: 20 tokens on 2 ranks */
    cfg = dapo_cfg();
    cfg.batch_num_tokens = 20;
    cfg.dp_size = 2;
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_float_eq(out.loss, 4.22 * 2 / 20, 1e-6);
    /* seq-mean over 8 global sequences, dp 2; and gradient accumulation */
    cr_assert_eq(trn_agg_parse("seq-mean-token-sum", &cfg.agg), LISA_OK);
    cfg.global_batch_size = 8;
    cfg.scale = 0.5;
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_float_eq(out.loss, 0.5 * 4.22 * 2 / 8, 1e-6);
    cr_assert_float_eq(d[4], 0.5 * 2.2 * 2 / 8, 1e-6);
    /* a fully masked sequence does not count in the local sequence count */
    cfg = dapo_cfg();
    cr_assert_eq(trn_agg_parse("seq-mean-token-sum", &cfg.agg), LISA_OK);
    memset(c.mask + 3, 0, 3);
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_float_eq(out.loss, -0.98, 1e-6);
    memset(c.mask, 0, 6); /* nothing to learn from: zero, not NaN */
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_eq(out.loss, 0.0);
    cr_assert_eq(d[1], 0.0f);
}

Test(trn_loss, kl_estimators)
{
    /* one token, ratio 1 so the policy term has slope -A = 0 (A = 0) */
    size_t off[2] = {0, 1};
    uint8_t mask[1] = {1};
    float logp[1] = {-1.0f}, old[1] = {-1.0f}, adv[1] = {0}, ref[1] = {-1.5f};
    trn_loss_in_t in = {1, off, 1, mask, logp, old, adv, ref, NULL, NULL};
    trn_loss_cfg_t cfg = trn_loss_defaults();
    cfg.kl_coef = 0.1;
    float d[1];
    trn_loss_out_t out;
    static const struct {
        const char *name;
        double kl, slope;
    } cases[] = {
        /* low_var_kl: x = ref - logp = -0.5: e^x - x - 1, slope 1 - e^x */
        {"low_var_kl", 0.10653065971263342, 0.3934693402873666},
        {"k3", 0.10653065971263342, 0.3934693402873666},
        {"kl", 0.5, 1.0},
        {"abs", 0.5, 1.0},
        {"mse", 0.125, 0.5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(trn_kl_parse(cases[i].name, &cfg.kl_type), LISA_OK);
        cr_assert_eq(trn_loss_compute(&cfg, &in, d, NULL, &out, NULL), LISA_OK);
        cr_assert_float_eq(out.kl_loss, cases[i].kl, 1e-6, "%s", cases[i].name);
        cr_assert_float_eq(out.loss, 0.1 * cases[i].kl, 1e-6);
        cr_assert_float_eq(d[0], 0.1 * cases[i].slope, 1e-6, "%s: %g",
                           cases[i].name, d[0]);
    }
    /* k3 saturates: ref - logp = 30 clamps to 20, the estimate to 10 */
    ref[0] = 29.0f;
    cr_assert_eq(trn_kl_parse("k3", &cfg.kl_type), LISA_OK);
    cr_assert_eq(trn_loss_compute(&cfg, &in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_float_eq(out.kl_loss, 10.0, 1e-9);
    cr_assert_eq(d[0], 0.0f);
    cr_assert_eq(trn_kl_parse("full", &cfg.kl_type), LISA_INVALID);
    /* KL asked for without reference log-probs */
    in.ref_logp = NULL;
    trn_err_t err;
    cr_assert_eq(trn_loss_compute(&cfg, &in, d, NULL, &out, &err),
                 LISA_INVALID);
    cr_assert(strstr(err.msg, "ref_logp"));
}

Test(trn_loss, entropy_bonus_and_is_weights)
{
    case_t c;
    case_init(&c);
    float ent[6] = {1, 2, 3, 4, 5, NAN}, w[6], d[6], de[6];
    c.in.entropy = ent;
    trn_loss_cfg_t cfg = dapo_cfg();
    cfg.entropy_coef = 0.01;
    trn_loss_out_t out;
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, de, &out, NULL), LISA_OK);
    cr_assert_float_eq(out.entropy_loss, 15.0 / 5, 1e-6);
    cr_assert_float_eq(out.loss, 4.22 / 5 - 0.01 * 3.0, 1e-6);
    cr_assert_float_eq(de[0], -0.01 / 5, 1e-9);
    cr_assert_eq(de[5], 0.0f);

    /* truncated IS weights: log ratios 0.1, 1.0, -0.5 (threshold 2) */
    float roll[6];
    for (int t = 0; t < 6; t++)
        roll[t] = c.old[t];
    roll[0] -= 0.1f;
    roll[1] -= 1.0f;
    roll[2] += 0.5f;
    cr_assert_eq(trn_is_weights(TRN_IS_TOKEN, 2.0, &c.in, roll, w, NULL),
                 LISA_OK);
    cr_assert_float_eq(w[0], 1.1051709180756477, 1e-6);
    cr_assert_float_eq(w[1], 2.0, 1e-9); /* e^1 truncated */
    cr_assert_float_eq(w[2], 0.6065306597126334, 1e-6);
    cr_assert_float_eq(w[3], 1.0, 1e-9);
    cr_assert_eq(w[5], 0.0f);
    /* sequence level: exp(0.1 + 1.0 - 0.5) for every token of sequence 0 */
    cr_assert_eq(trn_is_weights(TRN_IS_SEQUENCE, 2.0, &c.in, roll, w, NULL),
                 LISA_OK);
    for (int t = 0; t < 3; t++)
        cr_assert_float_eq(w[t], 1.8221188003905089, 1e-5);
    /* the weights multiply the policy term: t4 has weight 1, t1 has 1.82 */
    c.in.is_weights = w;
    cfg.entropy_coef = 0;
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, NULL), LISA_OK);
    cr_assert_float_eq(d[1], -0.5 / 5 * 1.8221188003905089, 1e-6);
    cr_assert_float_eq(d[4], 2.2 / 5, 1e-6);
}

Test(trn_loss, bad_configs_are_refused)
{
    case_t c;
    case_init(&c);
    float d[6];
    trn_loss_out_t out;
    trn_err_t err;
    trn_loss_cfg_t cfg = dapo_cfg();
    cfg.clip_c = 1.0;
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, &err),
                 LISA_INVALID);
    cr_assert(strstr(err.msg, "clip_ratio_c"));
    cfg = dapo_cfg();
    cfg.scale = 0;
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, &err),
                 LISA_INVALID);
    cfg = dapo_cfg();
    cfg.entropy_coef = 0.1;
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, &err),
                 LISA_INVALID);
    cfg = dapo_cfg();
    c.mask[5] = 1; /* now the NaN token counts */
    cr_assert_eq(trn_loss_compute(&cfg, &c.in, d, NULL, &out, &err),
                 LISA_INVALID);
    cr_assert(strstr(err.msg, "non-finite"));
    cr_assert_eq(trn_agg_parse("token-sum", &cfg.agg), LISA_INVALID);
}

/* Loss as a function of all logp and entropies (for finite differences). */
static double
loss_at(const trn_loss_cfg_t *cfg, trn_loss_in_t *in)
{
    float d[16], de[16];
    trn_loss_out_t out;
    cr_assert_eq(trn_loss_compute(cfg, in, d, de, &out, NULL), LISA_OK);
    return out.loss;
}

Test(trn_loss, gradients_match_finite_differences)
{
    enum { N = 16 };
    size_t off[4] = {0, 5, 11, 16};
    uint8_t mask[N];
    float logp[N], old[N], adv[N], ref[N], ent[N], isw[N];
    unsigned seed = 5;
    for (int t = 0; t < N; t++) {
        seed = seed * 1664525u + 1013904223u;
        double u = (double) (seed >> 8) / 16777216.0;
        mask[t] = (t % 5) != 0;
        old[t] = (float) (-0.5 - 2 * u);
        /* ratios spread over [0.5, 1.6]: some inside, some clipped */
        logp[t] = old[t] + (float) log(0.5 + 1.1 * u * u + 0.013 * t);
        adv[t] = (float) ((t % 3) - 1) * (0.5f + (float) u);
        ref[t] = old[t] + 0.3f * (float) (u - 0.5);
        ent[t] = 1.0f + (float) u;
        isw[t] = 0.5f + (float) u;
    }
    trn_loss_in_t in = {N, off, 3, mask, logp, old, adv, ref, isw, ent};
    for (int agg = 0; agg < 4; agg++)
        for (int kl = 0; kl < 4; kl++) {
            trn_loss_cfg_t cfg = dapo_cfg();
            cfg.agg = (trn_agg_t) agg;
            cfg.kl_type = (trn_kl_t) kl;
            cfg.kl_coef = 0.05;
            cfg.entropy_coef = 0.02;
            cfg.scale = 0.7;
            float d[N], de[N];
            trn_loss_out_t out;
            cr_assert_eq(trn_loss_compute(&cfg, &in, d, de, &out, NULL),
                         LISA_OK);
            for (int t = 0; t < N; t++) {
                float h = 1e-3f, save = logp[t];
                logp[t] = save + h;
                double lp = loss_at(&cfg, &in);
                logp[t] = save - h;
                double lm = loss_at(&cfg, &in);
                logp[t] = save;
                double fd = (lp - lm) / (2.0 * h);
                cr_assert(fabs(fd - d[t]) < 2e-3,
                          "agg %d kl %d t %d: fd %g vs %g", agg, kl, t, fd,
                          d[t]);
                save = ent[t];
                ent[t] = save + h;
                lp = loss_at(&cfg, &in);
                ent[t] = save - h;
                lm = loss_at(&cfg, &in);
                ent[t] = save;
                fd = (lp - lm) / (2.0 * h);
                cr_assert(fabs(fd - de[t]) < 1e-4, "entropy t %d", t);
            }
        }
}
