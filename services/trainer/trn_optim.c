/*
 * trn_optim: AdamW and gradient clipping (see trn_optim.h). Arithmetic is
 * in fp32 like PyTorch's single-tensor path, with the bias corrections and
 * step size formed in double as Python floats are.
 */
#include "trn_optim.h"

#include "lisa/lisa_mem.h"
#include "trn_err.h"

#include <math.h>

struct trn_adamw {
    size_t n;
    uint64_t step;
    float *m, *v;
};

trn_adamw_cfg_t
trn_adamw_defaults(void)
{
    trn_adamw_cfg_t c = {.lr = 1e-6,
                         .beta1 = 0.9,
                         .beta2 = 0.999,
                         .eps = 1e-8,
                         .weight_decay = 0.01};
    return c;
}

trn_adamw_t *
trn_adamw_new(size_t n)
{
    trn_adamw_t *o = lisa_calloc(1, sizeof *o);
    o->n = n;
    o->m = lisa_calloc(n ? n : 1, sizeof(float));
    o->v = lisa_calloc(n ? n : 1, sizeof(float));
    return o;
}

void
trn_adamw_destroy(trn_adamw_t **po)
{
    if (!po || !*po)
        return;
    lisa_free(&(*po)->m);
    lisa_free(&(*po)->v);
    lisa_free(po);
}

uint64_t
trn_adamw_steps(const trn_adamw_t *o)
{
    return o->step;
}

lisa_rc_t
trn_adamw_step(trn_adamw_t *o, const trn_adamw_cfg_t *c, float *p,
               const float *g, size_t n, trn_err_t *err)
{
    if (n != o->n || !(c->lr >= 0) || !(c->beta1 >= 0 && c->beta1 < 1) ||
        !(c->beta2 >= 0 && c->beta2 < 1) || !(c->eps > 0) ||
        !(c->weight_decay >= 0))
        return trn_fail(err, LISA_INVALID,
                        "adamw: bad configuration or %zu parameters for an "
                        "optimizer of %zu",
                        n, o->n);
    o->step++;
    double bc1 = 1.0 - pow(c->beta1, (double) o->step);
    double bc2 = 1.0 - pow(c->beta2, (double) o->step);
    float step_size = (float) (c->lr / bc1);
    float bc2_sqrt = (float) sqrt(bc2);
    float decay = (float) (1.0 - c->lr * c->weight_decay);
    float b1 = (float) c->beta1, b2 = (float) c->beta2;
    float eps = (float) c->eps;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        p[i] *= decay;
        o->m[i] += (gi - o->m[i]) * (1.0f - b1); /* lerp, as torch */
        o->v[i] = o->v[i] * b2 + gi * gi * (1.0f - b2);
        float denom = sqrtf(o->v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * (o->m[i] / denom);
    }
    return LISA_OK;
}

double
trn_grad_norm(const float *g, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double) g[i] * (double) g[i];
    return sqrt(s);
}

lisa_rc_t
trn_grad_clip(float *g, size_t n, double max_norm, double *norm)
{
    double total = trn_grad_norm(g, n);
    if (norm)
        *norm = total;
    if (!isfinite(total) || !(max_norm > 0))
        return trn_fail(NULL, LISA_INVALID,
                        "grad clip: norm %g (max %g) is not usable", total,
                        max_norm);
    double coef = max_norm / (total + 1e-6);
    if (coef < 1.0) {
        float f = (float) coef;
        for (size_t i = 0; i < n; i++)
            g[i] *= f;
    }
    return LISA_OK;
}

float *
trn_adamw_m(trn_adamw_t *opt)
{
    return opt->m;
}
float *
trn_adamw_v(trn_adamw_t *opt)
{
    return opt->v;
}
size_t
trn_adamw_len(const trn_adamw_t *opt)
{
    return opt->n;
}
void
trn_adamw_set_steps(trn_adamw_t *opt, uint64_t steps)
{
    opt->step = steps;
}
