/*
 * trn_sampler tests: greedy, reproducibility from a seed, sampled
 * frequencies against the softmax (every token within 4 standard errors),
 * top-k and top-p truncation, the reported log-probability and refusals.
 * The first test is the usage example.
 */
#include "trn_sampler.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

static const float LOGITS[6] = {1.0f, 2.0f, 0.5f, -1.0f, 2.0f, 0.0f};

static double
softmax_at(const float *z, size_t V, float T, size_t i)
{
    double s = 0;
    for (size_t j = 0; j < V; j++)
        s += exp((double) (z[j] / T));
    return exp((double) (z[i] / T)) / s;
}

Test(trn_sampler, usage)
{
    uint64_t rng = trn_rng_seed(42);
    trn_sampling_t s = {.temperature = 0.7f, .top_k = 0, .top_p = 1.0f};
    int32_t tok;
    float lp;
    cr_assert_eq(trn_sample(LOGITS, 6, &s, &rng, &tok, &lp, NULL), LISA_OK);
    cr_assert(tok >= 0 && tok < 6);
    /* the reported log-prob is log softmax(logits / T) of that token */
    cr_assert_float_eq(lp, log(softmax_at(LOGITS, 6, 0.7f, (size_t) tok)),
                       1e-6);
    /* greedy: the first of the largest logits, at T = 1 */
    s.temperature = 0;
    cr_assert_eq(trn_sample(LOGITS, 6, &s, &rng, &tok, &lp, NULL), LISA_OK);
    cr_assert_eq(tok, 1);
    cr_assert_float_eq(lp, log(softmax_at(LOGITS, 6, 1.0f, 1)), 1e-6);
}

Test(trn_sampler, same_seed_same_tokens)
{
    trn_sampling_t s = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f};
    uint64_t a = trn_rng_seed(7), b = trn_rng_seed(7), c = trn_rng_seed(8);
    int diff = 0;
    for (int i = 0; i < 200; i++) {
        int32_t ta, tb, tc;
        float lp;
        lisa_rc_t r1 = trn_sample(LOGITS, 6, &s, &a, &ta, &lp, NULL);
        lisa_rc_t r2 = trn_sample(LOGITS, 6, &s, &b, &tb, &lp, NULL);
        lisa_rc_t r3 = trn_sample(LOGITS, 6, &s, &c, &tc, &lp, NULL);
        if (r1 || r2 || r3 || ta != tb)
            cr_assert_fail("draw %d: %d %d %d, %d vs %d", i, r1, r2, r3, ta,
                           tb);
        diff += ta != tc;
    }
    cr_assert_gt(diff, 20);
}

/* Frequencies of n draws against the probabilities `p`. */
static void
check_freq(const trn_sampling_t *s, const double *p, int n)
{
    uint64_t rng = trn_rng_seed(1234);
    int count[6] = {0};
    for (int i = 0; i < n; i++) {
        int32_t t;
        float lp;
        if (trn_sample(LOGITS, 6, s, &rng, &t, &lp, NULL) != LISA_OK)
            cr_assert_fail("draw %d refused", i);
        count[t]++;
    }
    for (int j = 0; j < 6; j++) {
        double f = (double) count[j] / n;
        double se = sqrt(p[j] * (1 - p[j]) / n) + 1e-12;
        if (p[j] == 0)
            cr_assert_eq(count[j], 0, "token %d should never be drawn", j);
        else
            cr_assert(fabs(f - p[j]) < 4 * se, "token %d: %g vs %g", j, f,
                      p[j]);
    }
}

Test(trn_sampler, frequencies_follow_the_distribution)
{
    double p[6];
    trn_sampling_t s = {.temperature = 1.3f, .top_k = 0, .top_p = 1.0f};
    for (size_t j = 0; j < 6; j++)
        p[j] = softmax_at(LOGITS, 6, 1.3f, j);
    check_freq(&s, p, 40000);
    /* top-k 3 keeps logits 2, 2, 1 (tokens 1, 4, 0), renormalised */
    s.top_k = 3;
    double z = exp(2 / 1.3) * 2 + exp(1 / 1.3);
    double pk[6] = {
        exp(1 / 1.3) / z, exp(2 / 1.3) / z, 0, 0, exp(2 / 1.3) / z, 0};
    check_freq(&s, pk, 40000);
    /* top-p: at T = 1 tokens 1 and 4 hold 2 * e^2 / Z = 0.58 of the mass,
     * so top_p 0.5 keeps exactly those two */
    s.temperature = 1.0f;
    s.top_k = 0;
    s.top_p = 0.5f;
    double pp[6] = {0, 0.5, 0, 0, 0.5, 0};
    check_freq(&s, pp, 20000);
    /* top-k and top-p together: k = 4 then p = 0.9 of that */
    s.top_k = 4;
    s.top_p = 0.9f;
    double z4 = 2 * exp(2.0) + exp(1.0) + exp(0.5);
    double cum2 = 2 * exp(2.0) / z4, cum3 = cum2 + exp(1.0) / z4;
    cr_assert(cum2 < 0.9 && cum3 >= 0.9); /* three tokens survive */
    double z3 = 2 * exp(2.0) + exp(1.0);
    double pkp[6] = {exp(1.0) / z3, exp(2.0) / z3, 0, 0, exp(2.0) / z3, 0};
    check_freq(&s, pkp, 40000);
}

Test(trn_sampler, bad_settings_are_refused)
{
    uint64_t rng = trn_rng_seed(1);
    int32_t t;
    float lp;
    trn_err_t err;
    trn_sampling_t s = {.temperature = -1.0f, .top_k = 0, .top_p = 1.0f};
    cr_assert_eq(trn_sample(LOGITS, 6, &s, &rng, &t, &lp, &err), LISA_INVALID);
    s.temperature = 1.0f;
    s.top_p = 0;
    cr_assert_eq(trn_sample(LOGITS, 6, &s, &rng, &t, &lp, &err), LISA_INVALID);
    s.top_p = 1.0f;
    float bad[3] = {-INFINITY, NAN, -INFINITY};
    cr_assert_eq(trn_sample(bad, 3, &s, &rng, &t, &lp, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "no finite logit"));
    /* -inf and NaN logits are never drawn */
    float masked[3] = {-INFINITY, 0.0f, NAN};
    for (int i = 0; i < 50; i++) {
        cr_assert_eq(trn_sample(masked, 3, &s, &rng, &t, &lp, NULL), LISA_OK);
        cr_assert_eq(t, 1);
        cr_assert_float_eq(lp, 0.0f, 1e-7);
    }
}
