/*
 * trn_backend: the CPU reference backend behind the vtable, and the
 * optimizer state file (see trn_backend.h).
 */
#include "trn_backend.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    trn_backend_t base;
    trn_model_t *m;
    trn_model_t *ref;
    trn_kv_t *kv;
    trn_adamw_t *opt;
} s_cpu_t;

static void s_seterr(trn_err_t *err, const char *fmt, ...) LISA_PRINTF(2, 3);
static void
s_seterr(trn_err_t *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err)
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
}

static lisa_rc_t
s_gen_open(trn_backend_t *b, trn_kv_geom_t *geom, trn_err_t *err)
{
    s_cpu_t *c = (s_cpu_t *) b;
    trn_kv_destroy(&c->kv);
    c->kv = trn_kv_new(c->m, geom);
    if (!c->kv) {
        s_seterr(err, "bad KV cache geometry");
        return LISA_INVALID;
    }
    return LISA_OK;
}

static void
s_gen_close(trn_backend_t *b)
{
    trn_kv_destroy(&((s_cpu_t *) b)->kv);
}

static lisa_rc_t
s_gen_step(trn_backend_t *b, size_t n, const trn_gen_seq_t *seqs, float *logits,
           trn_err_t *err)
{
    s_cpu_t *c = (s_cpu_t *) b;
    if (!c->kv) {
        s_seterr(err, "no KV cache is open");
        return LISA_INVALID;
    }
    return trn_model_step(c->m, c->kv, n, seqs, logits, err);
}

static lisa_rc_t
s_train_step(trn_backend_t *b, const trn_step_cfg_t *cfg,
             const trn_rollouts_t *r, trn_step_out_t *out, trn_err_t *err)
{
    s_cpu_t *c = (s_cpu_t *) b;
    return trn_step_run(c->m, c->ref, c->opt, cfg, r, out, err);
}

static lisa_rc_t
s_logprobs(trn_backend_t *b, const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
           float *logp, trn_err_t *err)
{
    s_cpu_t *c = (s_cpu_t *) b;
    return trn_step_logprobs(c->m, cfg, r, logp, err);
}

static lisa_rc_t
s_save(trn_backend_t *b, const char *dir, trn_save_dtype_t dt, trn_err_t *err)
{
    s_cpu_t *c = (s_cpu_t *) b;
    if (!dir) /* another rank's part: the weights are whole everywhere */
        return LISA_OK;
    return trn_model_save(c->m, dir, dt, err);
}

static lisa_rc_t
s_save_optim(trn_backend_t *b, const char *path, trn_err_t *err)
{
    s_cpu_t *c = (s_cpu_t *) b;
    if (!path)
        return LISA_OK;
    return trn_optim_state_save(path, trn_adamw_steps(c->opt),
                                trn_adamw_m(c->opt), trn_adamw_v(c->opt),
                                trn_adamw_len(c->opt), err);
}

static lisa_rc_t
s_load_optim(trn_backend_t *b, const char *path, trn_err_t *err)
{
    s_cpu_t *c = (s_cpu_t *) b;
    uint64_t step = 0;
    lisa_rc_t rc =
        trn_optim_state_load(path, &step, trn_adamw_m(c->opt),
                             trn_adamw_v(c->opt), trn_adamw_len(c->opt), err);
    if (rc == LISA_OK)
        trn_adamw_set_steps(c->opt, step);
    return rc;
}

static const trn_config_t *
s_config(const trn_backend_t *b)
{
    const s_cpu_t *c = (const s_cpu_t *) b;
    return trn_model_config(c->m);
}

static void
s_destroy(trn_backend_t *b)
{
    s_cpu_t *c = (s_cpu_t *) b;
    trn_kv_destroy(&c->kv);
    trn_adamw_destroy(&c->opt);
    trn_model_destroy(&c->ref);
    trn_model_destroy(&c->m);
    lisa_free(&c);
}

static const trn_backend_ops_t s_cpu_ops = {
    .name = "cpu",
    .gen_open = s_gen_open,
    .gen_close = s_gen_close,
    .gen_step = s_gen_step,
    .train_step = s_train_step,
    .logprobs = s_logprobs,
    .save = s_save,
    .save_optim = s_save_optim,
    .load_optim = s_load_optim,
    .config = s_config,
    .destroy = s_destroy,
};

trn_backend_t *
trn_backend_cpu_new(const char *model_dir, int threads, bool kl, trn_err_t *err)
{
    s_cpu_t *c = lisa_calloc(1, sizeof *c);
    c->base.ops = &s_cpu_ops;
    if (trn_model_load(model_dir, threads, &c->m, err) != LISA_OK)
        goto fail;
    if (kl && trn_model_load(model_dir, threads, &c->ref, err) != LISA_OK)
        goto fail;
    c->opt = trn_adamw_new(trn_model_num_params(c->m));
    return &c->base;
fail:
    s_destroy(&c->base);
    return NULL;
}

trn_backend_t *
trn_backend_new(const char *name, const char *model_dir, int threads, bool kl,
                trn_err_t *err)
{
    if (name && strcmp(name, "cpu") == 0)
        return trn_backend_cpu_new(model_dir, threads, kl, err);
#ifdef LISA_HAVE_CUDA
    if (name && strcmp(name, "cuda") == 0)
        return trn_backend_cuda_new(model_dir, threads, kl, err);
#endif
    s_seterr(err, "backend %s is not built into this binary",
             name ? name : "(null)");
    lisa_log_error("backend: %s", err ? err->msg : "unknown backend");
    return NULL;
}

void
trn_backend_destroy(trn_backend_t **b)
{
    if (!b || !*b)
        return;
    (*b)->ops->destroy(*b);
    *b = NULL;
}

static const char s_magic[8] = {'L', 'I', 'S', 'A', 'O', 'P', 'T', '1'};

lisa_rc_t
trn_optim_state_save(const char *path, uint64_t step, const float *m,
                     const float *v, size_t n, trn_err_t *err)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        s_seterr(err, "cannot write %s", path);
        return LISA_ERR;
    }
    uint64_t nn = n;
    bool ok = fwrite(s_magic, 1, 8, f) == 8 && fwrite(&step, 8, 1, f) == 1 &&
              fwrite(&nn, 8, 1, f) == 1 && fwrite(m, sizeof *m, n, f) == n &&
              fwrite(v, sizeof *v, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        s_seterr(err, "short write to %s", path);
        return LISA_ERR;
    }
    return LISA_OK;
}

lisa_rc_t
trn_optim_state_load(const char *path, uint64_t *step, float *m, float *v,
                     size_t n, trn_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        s_seterr(err, "cannot read %s", path);
        return errno == ENOENT ? LISA_NOTFOUND : LISA_ERR;
    }
    char magic[8];
    uint64_t nn = 0;
    lisa_rc_t rc = LISA_OK;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, s_magic, 8) != 0 ||
        fread(step, 8, 1, f) != 1 || fread(&nn, 8, 1, f) != 1) {
        s_seterr(err, "%s: not an optimizer state file", path);
        rc = LISA_INVALID;
    } else if (nn != n) {
        s_seterr(err, "%s: parameter count does not match the model", path);
        rc = LISA_INVALID;
    } else if (fread(m, sizeof *m, n, f) != n ||
               fread(v, sizeof *v, n, f) != n) {
        s_seterr(err, "%s: truncated", path);
        rc = LISA_INVALID;
    }
    fclose(f);
    return rc;
}
