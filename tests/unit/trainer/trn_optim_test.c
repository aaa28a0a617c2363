/*
 * trn_optim tests: two AdamW steps computed by hand with PyTorch's formula
 * (decoupled decay, bias correction), and clip_grad_norm_'s scaling. The
 * first test is the usage example.
 */
#include "trn_optim.h"

#include <criterion/criterion.h>
#include <math.h>

Test(trn_optim, usage)
{
    /* one parameter 1.0; gradients 0.5 then -0.25; lr 0.1, wd 0.01 */
    float p = 1.0f, g = 0.5f;
    trn_adamw_cfg_t cfg = trn_adamw_defaults();
    cfg.lr = 0.1;
    trn_adamw_t *opt = trn_adamw_new(1);
    cr_assert_eq(trn_adamw_step(opt, &cfg, &p, &g, 1, NULL), LISA_OK);
    /* p = 0.999 - 1.0 * 0.05 / (0.5 + 1e-8) */
    cr_assert_float_eq(p, 0.899000002f, 1e-6);
    g = -0.25f;
    cr_assert_eq(trn_adamw_step(opt, &cfg, &p, &g, 1, NULL), LISA_OK);
    /* m = 0.02, v = 3.1225e-4, bc1 = 0.19, bc2 = 0.001999 */
    cr_assert_float_eq(p, 0.8714672987058463f, 1e-6);
    cr_assert_eq(trn_adamw_steps(opt), 2);
    trn_adamw_destroy(&opt);
    cr_assert_null(opt);
    trn_adamw_destroy(&opt);
}

Test(trn_optim, defaults_and_bad_config)
{
    trn_adamw_cfg_t c = trn_adamw_defaults();
    cr_assert_float_eq(c.lr, 1e-6, 1e-15);
    cr_assert_float_eq(c.weight_decay, 0.01, 1e-15);
    cr_assert_float_eq(c.beta2, 0.999, 1e-15);
    trn_adamw_t *opt = trn_adamw_new(2);
    float p[2] = {1, 2}, g[2] = {1, 1};
    trn_err_t err;
    cr_assert_eq(trn_adamw_step(opt, &c, p, g, 3, &err), LISA_INVALID);
    c.beta1 = 1.0;
    cr_assert_eq(trn_adamw_step(opt, &c, p, g, 2, &err), LISA_INVALID);
    cr_assert_eq(p[0], 1.0f);
    cr_assert_eq(trn_adamw_steps(opt), 0);
    trn_adamw_destroy(&opt);
}

Test(trn_optim, grad_clip_like_torch)
{
    float g[2] = {3, 4};
    double n;
    cr_assert_eq(trn_grad_clip(g, 2, 1.0, &n), LISA_OK);
    cr_assert_float_eq(n, 5.0, 1e-12);
    cr_assert_float_eq(g[0], 0.599999880000024f, 1e-7);
    cr_assert_float_eq(g[1], 0.799999840000032f, 1e-7);
    float h[2] = {3, 4};
    cr_assert_eq(trn_grad_clip(h, 2, 10.0, &n), LISA_OK);
    cr_assert_eq(h[0], 3.0f); /* under the bound: untouched */
    float bad[2] = {INFINITY, 1};
    cr_assert_eq(trn_grad_clip(bad, 2, 1.0, &n), LISA_INVALID);
    cr_assert(isinf(n));
    cr_assert_eq(bad[1], 1.0f);
}
