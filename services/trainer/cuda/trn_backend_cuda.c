/*
 * trn_backend_cuda: the trainer service's backend on one CUDA device.
 *
 * Generation and training share the same device weights (trn_gpu_model):
 * after an optimizer step the next generation request already uses them.
 * The GRPO step itself is trn_step's, run through trn_step_model_t on the
 * GPU model. A host copy of the model is kept for checkpoints (weights are
 * downloaded into it when saving). The device is LISA_CUDA_DEVICE (default
 * 0).
 *
 * Phases: gen_open frees the training activations (of the model and of
 * the KL reference; the next training forward makes them again) before
 * the KV cache is sized from the free memory, and train_state(0) moves the
 * fp32 master weights, gradients and optimizer moments to page-locked
 * host memory, so rollouts hold only the bf16 weights, the cache and its
 * step buffers (a train step ends by zeroing its spent gradient, which
 * then is neither copied nor kept). Whatever needs the training state
 * (a train step, checkpoints of weights or optimizer state, joining data
 * parallelism) brings it back first when the engine has not
 * (train_state(1)); that fails with LISA_TOOLARGE while a cache holds the
 * memory it needs.
 */
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_backend.h"
#include "trn_cuda.h"
#include "trn_dist.h"
#include "trn_gpu_model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    trn_backend_t base;
    trn_model_t *host; /* config, tokenizer files, and the save path */
    trn_gpu_model_t *g;
    trn_gpu_model_t *ref; /* frozen reference for a KL term, or NULL */
    trn_gpu_kv_t *kv;
    trn_dist_t *dist; /* data parallel, or NULL */
    int dev;          /* the device: current in whichever thread calls */
} s_cuda_t;

/* The device is per thread in CUDA, and the engine's thread and the
 * loop's both drive the backend: every entry point makes it current. */
static s_cuda_t *
s_on(trn_backend_t *b)
{
    s_cuda_t *c = (s_cuda_t *) b;
    if (trn_cuda_set_device(c->dev) != LISA_OK)
        lisa_log_error("cuda backend: cannot select device %d", c->dev);
    return c;
}

static void
s_fail(trn_err_t *err, const char *msg)
{
    if (err)
        snprintf(err->msg, sizeof err->msg, "cuda backend: %s", msg);
    lisa_log_error("cuda backend: %s", msg);
}

/* ---- the GPU model as a trn_step_model_t ------------------------------ */

static lisa_rc_t
s_fwd(void *self, const trn_batch_t *b, float *logp, float *ent, trn_err_t *err)
{
    return trn_gpu_model_forward(self, b, logp, ent, err);
}

static lisa_rc_t
s_bwd(void *self, const float *dlogp, const float *dent, trn_err_t *err)
{
    return trn_gpu_model_backward(self, dlogp, dent, err);
}

static void
s_zero(void *self)
{
    if (trn_gpu_model_zero_grad(self) != LISA_OK)
        lisa_log_error("cuda backend: zeroing gradients failed");
}

static void
s_last(void *self)
{
    trn_gpu_model_last_backward(self);
}

static lisa_rc_t
s_update(void *self, const trn_step_cfg_t *c, double *grad_norm, bool *skipped,
         trn_err_t *err)
{
    float norm = 0;
    lisa_rc_t rc = trn_gpu_model_adamw(
        self, (float) c->optim.lr, (float) c->optim.beta1,
        (float) c->optim.beta2, (float) c->optim.eps,
        (float) c->optim.weight_decay, (float) c->grad_clip, &norm);
    *grad_norm = norm;
    *skipped = rc == LISA_AGAIN;
    if (rc == LISA_AGAIN)
        return LISA_OK;
    if (rc != LISA_OK)
        s_fail(err, "optimizer step failed");
    return rc;
}

static size_t
s_max_tokens(void *self)
{
    return trn_gpu_model_max_tokens(self);
}

static trn_step_model_t
s_ops(trn_gpu_model_t *g)
{
    trn_step_model_t o = {.self = g,
                          .forward = s_fwd,
                          .backward = s_bwd,
                          .zero_grad = s_zero,
                          .last_backward = s_last,
                          .update = s_update,
                          .max_tokens = s_max_tokens};
    return o;
}

/* ---- the backend ------------------------------------------------------- */

static lisa_rc_t
s_gen_open(trn_backend_t *b, trn_kv_geom_t *geom, trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    lisa_rc_t rc = trn_gpu_kv_geom_check(c->g, geom, err);
    if (rc != LISA_OK)
        return rc;
    trn_gpu_kv_destroy(&c->kv); /* its memory counts as free for the new */
    trn_gpu_model_free_activations(c->g);
    trn_gpu_model_free_activations(c->ref);
    c->kv = trn_gpu_kv_new(c->g, geom, err);
    return c->kv ? LISA_OK : LISA_TOOLARGE;
}

static void
s_gen_close(trn_backend_t *b)
{
    trn_gpu_kv_destroy(&s_on(b)->kv);
}

static lisa_rc_t
s_no_cache(trn_err_t *err)
{
    s_fail(err, "no KV cache open (gen_open first)");
    return LISA_INVALID;
}

static lisa_rc_t
s_gen_step(trn_backend_t *b, size_t n, const trn_gen_seq_t *seqs, float *logits,
           trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    if (!c->kv)
        return s_no_cache(err);
    return trn_gpu_model_step(c->g, c->kv, n, seqs, NULL, NULL, NULL, logits,
                              err);
}

static lisa_rc_t
s_gen_sample(trn_backend_t *b, size_t n, const trn_gen_seq_t *seqs,
             const trn_sampling_t *samp, const uint64_t *seeds,
             int32_t *out_tok, float *out_lp, trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    if (!c->kv)
        return s_no_cache(err);
    if (n == 0 || n > TRN_MAX_KV_SLOTS || !samp || !seeds) {
        s_fail(err, "gen_sample: bad arguments");
        return n > TRN_MAX_KV_SLOTS ? LISA_TOOLARGE : LISA_INVALID;
    }
    trn_sample_t *sp = lisa_calloc(n, sizeof *sp);
    for (size_t i = 0; i < n; i++) {
        sp[i].temperature = samp[i].temperature;
        sp[i].top_p = samp[i].top_p;
        sp[i].top_k = samp[i].top_k > 0 ? samp[i].top_k : 0;
        sp[i].seed = seeds[i];
    }
    lisa_rc_t rc = trn_gpu_model_step(c->g, c->kv, n, seqs, sp, out_tok, out_lp,
                                      NULL, err);
    lisa_free(&sp);
    return rc;
}

static lisa_rc_t
s_train_state(trn_backend_t *b, int on_device, trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    return trn_gpu_model_set_train_state(c->g, on_device, err);
}

/* The training state on the device for an operation that needs it. */
static lisa_rc_t
s_state_on(s_cuda_t *c, trn_err_t *err)
{
    return trn_gpu_model_set_train_state(c->g, 1, err);
}

static void
s_mem_info(trn_backend_t *b, size_t *used, size_t *total)
{
    (void) s_on(b);
    size_t fr = 0, tot = 0;
    if (trn_cuda_mem_info(&fr, &tot) != LISA_OK)
        fr = tot = 0;
    if (used)
        *used = tot - fr;
    if (total)
        *total = tot;
}

static lisa_rc_t
s_train_step(trn_backend_t *b, const trn_step_cfg_t *cfg,
             const trn_rollouts_t *r, trn_step_out_t *out, trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    lisa_rc_t rc = s_state_on(c, err);
    if (rc != LISA_OK)
        return rc;
    /* data parallel shards the moments across ranks instead */
    if (!c->dist && (rc = trn_gpu_model_set_optim_offload(
                         c->g, cfg->optim_offload, err)) != LISA_OK)
        return rc;
    trn_gpu_model_set_recompute(c->g, cfg->recompute);
    trn_step_model_t m = s_ops(c->g), ref = s_ops(c->ref);
    rc = trn_step_run_with(&m, c->ref ? &ref : NULL, cfg, r, out, err);
    /* the gradient is dead until the next step zeroes it: zero it now, so
     * a rollout phase's train_state(0) neither copies nor keeps it */
    if (rc == LISA_OK && trn_gpu_model_zero_grad(c->g) != LISA_OK)
        lisa_log_warn("cuda backend: zeroing the spent gradient failed");
    return rc;
}

static lisa_rc_t
s_logprobs(trn_backend_t *b, const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
           float *logp, trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    trn_step_model_t m = s_ops(c->g);
    return trn_step_logprobs_with(&m, cfg, r, logp, err);
}

static lisa_rc_t
s_save(trn_backend_t *b, const char *dir, trn_save_dtype_t dt, trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    lisa_rc_t rc = s_state_on(c, err);
    if (rc != LISA_OK)
        return rc;
    /* data parallel: a collective (the fp32 master is sharded) */
    if (trn_gpu_model_download_weights(c->g, c->host) != LISA_OK) {
        s_fail(err, "downloading weights for the checkpoint failed");
        return LISA_ERR;
    }
    if (!dir) /* another rank's part */
        return LISA_OK;
    return trn_model_save(c->host, dir, dt, err);
}

static lisa_rc_t
s_save_optim(trn_backend_t *b, const char *path, trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    lisa_rc_t rc = s_state_on(c, err);
    if (rc != LISA_OK)
        return rc;
    size_t n = trn_gpu_model_num_params(c->g);
    /* data parallel: a collective; only the rank that writes downloads */
    float *m = path ? lisa_malloc(n * 4) : NULL;
    float *v = path ? lisa_malloc(n * 4) : NULL;
    uint64_t step = 0;
    rc = trn_gpu_model_get_optim(c->g, &step, m, v);
    if (rc != LISA_OK)
        s_fail(err, "reading the optimizer state failed");
    else if (path)
        rc = trn_optim_state_save(path, step, m, v, n, err);
    lisa_free(&m);
    lisa_free(&v);
    return rc;
}

static lisa_rc_t
s_load_optim(trn_backend_t *b, const char *path, trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    lisa_rc_t rc = s_state_on(c, err);
    if (rc != LISA_OK)
        return rc;
    size_t n = trn_gpu_model_num_params(c->g);
    float *m = lisa_malloc(n * 4), *v = lisa_malloc(n * 4);
    uint64_t step = 0;
    rc = trn_optim_state_load(path, &step, m, v, n, err);
    if (rc == LISA_OK && trn_gpu_model_set_optim(c->g, step, m, v) != LISA_OK) {
        s_fail(err, "restoring the optimizer state failed");
        rc = LISA_ERR;
    }
    lisa_free(&m);
    lisa_free(&v);
    return rc;
}

static const trn_config_t *
s_config(const trn_backend_t *b)
{
    return trn_gpu_model_config(((const s_cuda_t *) b)->g);
}

static lisa_rc_t
s_dist_id(trn_backend_t *b, uint8_t *id, trn_err_t *err)
{
    (void) s_on(b);
    if (trn_dist_make_id(id) != LISA_OK) {
        s_fail(err, "cannot make an NCCL unique id");
        return LISA_ERR;
    }
    return LISA_OK;
}

static lisa_rc_t
s_dist_join(trn_backend_t *b, const uint8_t *id, int rank, int world,
            int timeout_ms, int (*peers_ok)(void *), void *ctx, trn_err_t *err)
{
    s_cuda_t *c = s_on(b);
    if (c->dist) {
        s_fail(err, "already data parallel");
        return LISA_CONFLICT;
    }
    lisa_rc_t rc = s_state_on(c, err);
    if (rc != LISA_OK)
        return rc;
    trn_dist_set_peer_check(peers_ok, ctx);
    c->dist = trn_dist_new(rank, world, id, timeout_ms);
    if (!c->dist) {
        s_fail(err, "joining the NCCL communicator failed (see the log)");
        return LISA_UNAVAILABLE;
    }
    trn_dist_set_timeout(c->dist, timeout_ms);
    if (trn_gpu_model_set_dist(c->g, c->dist) != LISA_OK) {
        trn_dist_destroy(&c->dist);
        s_fail(err, "cannot shard the optimizer state over the ranks");
        return LISA_ERR;
    }
    if (c->ref) /* its context-parallel gathers go over NCCL too */
        trn_gpu_model_set_cp_dist(c->ref, c->dist);
    return LISA_OK;
}

static void
s_destroy(trn_backend_t *b)
{
    s_cuda_t *c = s_on(b);
    trn_gpu_kv_destroy(&c->kv);
    trn_gpu_model_destroy(&c->ref);
    trn_gpu_model_destroy(&c->g);
    trn_model_destroy(&c->host);
    trn_dist_destroy(&c->dist);
    trn_dist_set_peer_check(NULL, NULL);
    lisa_free(&c);
}

static const trn_backend_ops_t s_cuda_ops = {
    .name = "cuda",
    .gen_open = s_gen_open,
    .gen_close = s_gen_close,
    .gen_step = s_gen_step,
    .gen_sample = s_gen_sample,
    .train_state = s_train_state,
    .mem_info = s_mem_info,
    .train_step = s_train_step,
    .logprobs = s_logprobs,
    .save = s_save,
    .save_optim = s_save_optim,
    .load_optim = s_load_optim,
    .config = s_config,
    .destroy = s_destroy,
    .dist_id = s_dist_id,
    .dist_join = s_dist_join,
};

trn_backend_t *
trn_backend_cuda_new(const char *model_dir, int threads, bool kl,
                     trn_err_t *err)
{
    const char *dev = getenv("LISA_CUDA_DEVICE");
    int d = dev && *dev ? (int) strtol(dev, NULL, 10) : 0;
    if (trn_cuda_set_device(d) != LISA_OK) {
        s_fail(err, "no usable CUDA device");
        return NULL;
    }
    s_cuda_t *c = lisa_calloc(1, sizeof *c);
    c->base.ops = &s_cuda_ops;
    c->dev = d;
    if (trn_model_load(model_dir, threads, &c->host, err) != LISA_OK)
        goto fail;
    c->g = trn_gpu_model_new(c->host, err);
    if (!c->g)
        goto fail;
    if (kl) {
        c->ref = trn_gpu_model_new(c->host, err);
        if (!c->ref)
            goto fail;
    }
    return &c->base;
fail:
    s_destroy(&c->base);
    return NULL;
}
