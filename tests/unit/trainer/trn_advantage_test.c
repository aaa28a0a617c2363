/*
 * trn_advantage tests: hand-computed GRPO (with and without std
 * normalisation) and RLOO advantages, following verl's definitions:
 * unbiased std, eps 1e-6 added to the std, a group of one has mean 0 and
 * std 1 (RLOO leaves it alone). The first test is the usage example.
 */
#include "trn_advantage.h"

#include <criterion/criterion.h>
#include <math.h>

/* Groups: 7 = {1, 0, 0, 1} interleaved with 3 = {2} and 5 = {0.5, 0.5}. */
static const double SCORES[7] = {1, 2, 0, 0.5, 0, 0.5, 1};
static const int64_t GROUPS[7] = {7, 3, 7, 5, 7, 5, 7};

Test(trn_advantage, usage)
{
    trn_adv_cfg_t cfg = trn_adv_defaults(); /* grpo, std, eps 1e-6 */
    double adv[7];
    cr_assert_eq(trn_advantage(&cfg, SCORES, GROUPS, 7, adv, NULL), LISA_OK);
    /* group 7: mean 0.5, unbiased std sqrt(1/3); (+-0.5) / (std + 1e-6) */
    const double a = 0.8660239037870368;
    cr_assert_float_eq(adv[0], a, 1e-12);
    cr_assert_float_eq(adv[2], -a, 1e-12);
    cr_assert_float_eq(adv[4], -a, 1e-12);
    cr_assert_float_eq(adv[6], a, 1e-12);
    /* group 3 alone: (2 - 0) / (1 + 1e-6) */
    cr_assert_float_eq(adv[1], 1.9999980000020001, 1e-12);
    /* group 5: identical scores, std 0: 0 / (0 + eps) = 0 */
    cr_assert_eq(adv[3], 0.0);
    cr_assert_eq(adv[5], 0.0);
}

Test(trn_advantage, dr_grpo_without_std)
{
    trn_adv_cfg_t cfg = trn_adv_defaults();
    cfg.norm_by_std = false;
    double adv[7];
    cr_assert_eq(trn_advantage(&cfg, SCORES, GROUPS, 7, adv, NULL), LISA_OK);
    const double want[7] = {0.5, 2.0, -0.5, 0, -0.5, 0, 0.5};
    for (int i = 0; i < 7; i++)
        cr_assert_float_eq(adv[i], want[i], 1e-12, "%d", i);
}

Test(trn_advantage, rloo_is_leave_one_out)
{
    trn_adv_cfg_t cfg = trn_adv_defaults();
    cr_assert_eq(trn_adv_kind_parse("rloo", &cfg.kind), LISA_OK);
    double adv[7];
    cr_assert_eq(trn_advantage(&cfg, SCORES, GROUPS, 7, adv, NULL), LISA_OK);
    /* score minus the mean of the others: 1 - 1/3, 0 - 2/3 */
    const double want[7] = {2.0 / 3, 2.0, -2.0 / 3, 0, -2.0 / 3, 0, 2.0 / 3};
    for (int i = 0; i < 7; i++)
        cr_assert_float_eq(adv[i], want[i], 1e-12, "%d", i);
}

Test(trn_advantage, bad_input_is_refused)
{
    trn_adv_cfg_t cfg = trn_adv_defaults();
    double s[2] = {1, NAN}, adv[2];
    int64_t g[2] = {0, 0};
    trn_err_t err;
    cr_assert_eq(trn_advantage(&cfg, s, g, 2, adv, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "not finite"));
    trn_adv_kind_t k;
    cr_assert_eq(trn_adv_kind_parse("gae", &k), LISA_INVALID);
    cr_assert_eq(trn_adv_kind_parse("grpo", &k), LISA_OK);
    cr_assert_eq(k, TRN_ADV_GRPO);
    cr_assert_eq(trn_advantage(&cfg, s, g, 0, adv, &err), LISA_OK);
}

Test(trn_advantage, kl_controllers_as_verl)
{
    bool ad = true;
    cr_assert_eq(trn_kl_ctrl_parse("fixed", &ad), LISA_OK);
    cr_assert_not(ad);
    cr_assert_eq(trn_kl_ctrl_parse("adaptive", &ad), LISA_OK);
    cr_assert(ad);
    cr_assert_eq(trn_kl_ctrl_parse("pid", &ad), LISA_INVALID);
    trn_kl_ctrl_t f = {
        .adaptive = false, .value = 0.001, .target = 0.1, .horizon = 10000};
    trn_kl_ctrl_update(&f, 5.0, 64);
    cr_assert_eq(f.value, 0.001);
    /* KL above target: the error is clipped to 0.2; 64 trajectories */
    trn_kl_ctrl_t a = {
        .adaptive = true, .value = 0.001, .target = 0.1, .horizon = 10000};
    trn_kl_ctrl_update(&a, 5.0, 64);
    cr_assert_float_eq(a.value, 0.001 * (1 + 0.2 * 64 / 10000.0), 1e-15);
    /* below target: 0.05 / 0.1 - 1 = -0.5, clipped to -0.2 */
    double v = a.value;
    trn_kl_ctrl_update(&a, 0.05, 100);
    cr_assert_float_eq(a.value, v * (1 - 0.2 * 100 / 10000.0), 1e-15);
    /* inside the band: the error itself */
    v = a.value;
    trn_kl_ctrl_update(&a, 0.11, 10);
    cr_assert_float_eq(a.value, v * (1 + 0.1 * 10 / 10000.0), 1e-15);
}
