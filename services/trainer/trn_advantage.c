/*
 * trn_advantage: group statistics by sorting indices by group id, so a
 * batch of any size costs n log n and no hash table.
 */
#include "trn_advantage.h"

#include "lisa/lisa_mem.h"
#include "trn_err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    trn_adv_kind_t kind;
} s_names[] = {{"grpo", TRN_ADV_GRPO}, {"rloo", TRN_ADV_RLOO}};

trn_adv_cfg_t
trn_adv_defaults(void)
{
    trn_adv_cfg_t c = {.kind = TRN_ADV_GRPO, .norm_by_std = true, .eps = 1e-6};
    return c;
}

lisa_rc_t
trn_adv_kind_parse(const char *name, trn_adv_kind_t *out)
{
    for (size_t i = 0; i < sizeof s_names / sizeof s_names[0]; i++)
        if (strcmp(name, s_names[i].name) == 0) {
            *out = s_names[i].kind;
            return LISA_OK;
        }
    return trn_fail(NULL, LISA_INVALID, "unknown advantage estimator '%s'",
                    name);
}

typedef struct {
    int64_t group;
    size_t index;
} s_key_t;

static int
s_cmp(const void *a, const void *b)
{
    const s_key_t *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Indices ordered by (group, index). */
static void
s_order(const int64_t *group, size_t n, size_t *idx)
{
    s_key_t *k = lisa_malloc((n ? n : 1) * sizeof *k);
    for (size_t i = 0; i < n; i++)
        k[i] = (s_key_t){group[i], i};
    qsort(k, n, sizeof *k, s_cmp);
    for (size_t i = 0; i < n; i++)
        idx[i] = k[i].index;
    lisa_free(&k);
}

lisa_rc_t
trn_advantage(const trn_adv_cfg_t *cfg, const double *scores,
              const int64_t *group, size_t n, double *adv, trn_err_t *err)
{
    if (!(cfg->eps >= 0) ||
        (cfg->kind != TRN_ADV_GRPO && cfg->kind != TRN_ADV_RLOO))
        return trn_fail(err, LISA_INVALID, "advantage: bad configuration");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(scores[i]))
            return trn_fail(err, LISA_INVALID,
                            "advantage: score %zu is not finite", i);
    size_t *idx = lisa_malloc((n ? n : 1) * sizeof *idx);
    s_order(group, n, idx);
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b < n && group[idx[b]] == group[idx[a]])
            b++;
        size_t k = b - a;
        double mean = 0, var = 0;
        for (size_t i = a; i < b; i++)
            mean += scores[idx[i]];
        mean /= (double) k;
        for (size_t i = a; i < b; i++) {
            double d = scores[idx[i]] - mean;
            var += d * d;
        }
        double std = k > 1 ? sqrt(var / (double) (k - 1)) : 1.0;
        if (k == 1)
            mean = 0;
        for (size_t i = a; i < b; i++) {
            double s = scores[idx[i]];
            double *o = &adv[idx[i]];
            if (cfg->kind == TRN_ADV_RLOO)
                *o = k > 1 ? s * (double) k / (double) (k - 1) -
                                 mean * (double) k / (double) (k - 1)
                           : s;
            else if (cfg->norm_by_std)
                *o = (s - mean) / (std + cfg->eps);
            else
                *o = s - mean;
        }
        a = b;
    }
    lisa_free(&idx);
    return LISA_OK;
}

lisa_rc_t
trn_kl_ctrl_parse(const char *type, bool *adaptive)
{
    if (type && strcmp(type, "fixed") == 0)
        *adaptive = false;
    else if (type && strcmp(type, "adaptive") == 0)
        *adaptive = true;
    else
        return trn_fail(NULL, LISA_INVALID, "unknown kl_ctrl.type '%s'",
                        type ? type : "");
    return LISA_OK;
}

void
trn_kl_ctrl_update(trn_kl_ctrl_t *k, double current_kl, double n_steps)
{
    if (!k->adaptive || !(k->target > 0) || !(k->horizon > 0) ||
        !isfinite(current_kl))
        return;
    double e = current_kl / k->target - 1;
    e = e < -0.2 ? -0.2 : e > 0.2 ? 0.2 : e;
    k->value *= 1 + e * n_steps / k->horizon;
}
