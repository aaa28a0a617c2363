/*
 * trn_dp: data-parallel training across the trainer's ranks (see trn_dp.h).
 */
#include "trn_dp.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_err.h"
#include "trn_rank_batch.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    trn_backend_t base;
    trn_backend_t *inner;
    trn_group_t *g;
    trn_engine_t *engine;
    trn_comm_t comm;
} s_dp_t;

/* ---- rank 0's backend --------------------------------------------------- */

/* After rank 0's part (local_rc): every other rank's answer. */
static lisa_rc_t
s_run(s_dp_t *d, lisa_rc_t local_rc, trn_err_t *err)
{
    trn_err_t ferr = {{0}};
    lisa_rc_t frc = trn_group_finish(d->g, &ferr);
    if (local_rc != LISA_OK)
        return local_rc;
    if (frc != LISA_OK) {
        if (err)
            snprintf(err->msg, sizeof err->msg, "%s", ferr.msg);
        return frc;
    }
    return LISA_OK;
}

static lisa_rc_t
s_gen_open(trn_backend_t *b, trn_kv_geom_t *geom, trn_err_t *err)
{
    trn_backend_t *in = ((s_dp_t *) b)->inner;
    return in->ops->gen_open(in, geom, err);
}

static void
s_gen_close(trn_backend_t *b)
{
    trn_backend_t *in = ((s_dp_t *) b)->inner;
    if (in->ops->gen_close)
        in->ops->gen_close(in);
}

static lisa_rc_t
s_gen_step(trn_backend_t *b, size_t n, const trn_gen_seq_t *seqs, float *logits,
           trn_err_t *err)
{
    trn_backend_t *in = ((s_dp_t *) b)->inner;
    return in->ops->gen_step(in, n, seqs, logits, err);
}

static lisa_rc_t
s_gen_sample(trn_backend_t *b, size_t n, const trn_gen_seq_t *seqs,
             const trn_sampling_t *samp, const uint64_t *seeds,
             int32_t *out_tok, float *out_lp, trn_err_t *err)
{
    trn_backend_t *in = ((s_dp_t *) b)->inner;
    if (!in->ops->gen_sample) /* the engine drives the inner backend */
        return trn_fail(err, LISA_UNSUPPORTED, "dp: no on-device sampling");
    return in->ops->gen_sample(in, n, seqs, samp, seeds, out_tok, out_lp, err);
}

static lisa_rc_t
s_train_state(trn_backend_t *b, int on_device, trn_err_t *err)
{
    trn_backend_t *in = ((s_dp_t *) b)->inner;
    if (!in->ops->train_state)
        return LISA_OK;
    return in->ops->train_state(in, on_device, err);
}

static void
s_mem_info(trn_backend_t *b, size_t *used, size_t *total)
{
    trn_backend_t *in = ((s_dp_t *) b)->inner;
    *used = *total = 0;
    if (in->ops->mem_info)
        in->ops->mem_info(in, used, total);
}

static lisa_rc_t
s_batch_command(s_dp_t *d, Lisa__RankOp op, const trn_step_cfg_t *cfg,
                const trn_rollouts_t *r, Lisa__RankCommand *cmd,
                trn_step_cfg_t *local, trn_err_t *err)
{
    Lisa__RankBatch *b = cmd->batch;
    uint64_t *off = NULL;
    uint32_t *tok = NULL;
    if (r->n_seqs == 0 || !r->seq_offsets)
        return trn_fail(err, LISA_INVALID, "dp: empty batch");
    trn_rank_batch_out(r, b, &off, &tok);
    cmd->op = op;
    cmd->lr = cfg->optim.lr;
    cmd->policy_version = trn_engine_policy_version(d->engine) + 1;
    lisa_rc_t rc = trn_group_command(d->g, cmd, err);
    lisa_free(&off);
    lisa_free(&tok);
    *local = *cfg;
    local->comm = &d->comm;
    return rc;
}

static lisa_rc_t
s_train_step(trn_backend_t *b, const trn_step_cfg_t *cfg,
             const trn_rollouts_t *r, trn_step_out_t *out, trn_err_t *err)
{
    s_dp_t *d = (s_dp_t *) b;
    Lisa__RankBatch batch = LISA__RANK_BATCH__INIT;
    Lisa__RankCommand cmd = LISA__RANK_COMMAND__INIT;
    cmd.batch = &batch;
    trn_step_cfg_t local;
    lisa_rc_t rc = s_batch_command(d, LISA__RANK_OP__RANK_OP_STEP, cfg, r, &cmd,
                                   &local, err);
    if (rc != LISA_OK)
        return rc;
    rc = d->inner->ops->train_step(d->inner, &local, r, out, err);
    return s_run(d, rc, err);
}

static lisa_rc_t
s_logprobs(trn_backend_t *b, const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
           float *logp, trn_err_t *err)
{
    s_dp_t *d = (s_dp_t *) b;
    if (!d->inner->ops->logprobs)
        return trn_fail(err, LISA_UNSUPPORTED, "dp: no logprobs");
    Lisa__RankBatch batch = LISA__RANK_BATCH__INIT;
    Lisa__RankCommand cmd = LISA__RANK_COMMAND__INIT;
    cmd.batch = &batch;
    trn_step_cfg_t local;
    lisa_rc_t rc = s_batch_command(d, LISA__RANK_OP__RANK_OP_LOGPROBS, cfg, r,
                                   &cmd, &local, err);
    if (rc != LISA_OK)
        return rc;
    rc = d->inner->ops->logprobs(d->inner, &local, r, logp, err);
    return s_run(d, rc, err);
}

static lisa_rc_t
s_save(trn_backend_t *b, const char *dir, trn_save_dtype_t dt, trn_err_t *err)
{
    s_dp_t *d = (s_dp_t *) b;
    Lisa__RankCommand cmd = LISA__RANK_COMMAND__INIT;
    cmd.op = LISA__RANK_OP__RANK_OP_SAVE;
    cmd.save_dtype = dt == TRN_SAVE_BF16 ? 1 : 0;
    lisa_rc_t rc = trn_group_command(d->g, &cmd, err);
    if (rc != LISA_OK)
        return rc;
    rc = d->inner->ops->save(d->inner, dir, dt, err);
    return s_run(d, rc, err);
}

static lisa_rc_t
s_save_optim(trn_backend_t *b, const char *path, trn_err_t *err)
{
    s_dp_t *d = (s_dp_t *) b;
    Lisa__RankCommand cmd = LISA__RANK_COMMAND__INIT;
    cmd.op = LISA__RANK_OP__RANK_OP_SAVE_OPTIM;
    lisa_rc_t rc = trn_group_command(d->g, &cmd, err);
    if (rc != LISA_OK)
        return rc;
    rc = d->inner->ops->save_optim(d->inner, path, err);
    return s_run(d, rc, err);
}

static lisa_rc_t
s_load_optim(trn_backend_t *b, const char *path, trn_err_t *err)
{
    /* every rank loads the file itself at start (trn_ckpt_load) */
    trn_backend_t *in = ((s_dp_t *) b)->inner;
    return in->ops->load_optim(in, path, err);
}

static const trn_config_t *
s_config(const trn_backend_t *b)
{
    const trn_backend_t *in = ((const s_dp_t *) b)->inner;
    return in->ops->config(in);
}

static void
s_destroy(trn_backend_t *b)
{
    s_dp_t *d = (s_dp_t *) b;
    trn_backend_destroy(&d->inner);
    lisa_free(&d);
}

static const trn_backend_ops_t s_dp_ops = {
    .name = "data-parallel",
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
};

trn_backend_t *
trn_dp_wrap(trn_backend_t *inner, trn_group_t *g, trn_engine_t *engine)
{
    s_dp_t *d = lisa_calloc(1, sizeof *d);
    d->base.ops = &s_dp_ops;
    d->inner = inner;
    d->g = g;
    d->engine = engine;
    d->comm = trn_group_comm(g);
    return &d->base;
}

/* ---- the other ranks ---------------------------------------------------- */

static lisa_rc_t
s_follow_one(trn_backend_t *b, const trn_step_cfg_t *cfg,
             const trn_comm_t *comm, Lisa__RankCommand *cmd, bool *stepped,
             trn_err_t *err)
{
    trn_step_cfg_t local = *cfg;
    local.comm = comm;
    size_t *off = NULL;
    int32_t *tok = NULL;
    trn_rollouts_t r;
    lisa_rc_t rc = LISA_OK;
    *stepped = false;
    switch (cmd->op) {
    case LISA__RANK_OP__RANK_OP_STEP: {
        rc = trn_rank_batch_in(cmd->batch, &r, &off, &tok, err);
        if (rc != LISA_OK)
            break;
        local.optim.lr = cmd->lr;
        trn_step_out_t out;
        rc = b->ops->train_step(b, &local, &r, &out, err);
        *stepped = rc == LISA_OK;
        break;
    }
    case LISA__RANK_OP__RANK_OP_LOGPROBS: {
        rc = trn_rank_batch_in(cmd->batch, &r, &off, &tok, err);
        if (rc != LISA_OK || !b->ops->logprobs) {
            if (rc == LISA_OK)
                rc = trn_fail(err, LISA_UNSUPPORTED, "dp: no logprobs");
            break;
        }
        size_t nt = r.seq_offsets[r.n_seqs];
        float *lp = lisa_malloc((nt ? nt : 1) * sizeof *lp);
        rc = b->ops->logprobs(b, &local, &r, lp, err);
        lisa_free(&lp);
        break;
    }
    case LISA__RANK_OP__RANK_OP_SAVE:
        rc = b->ops->save(b, NULL,
                          cmd->save_dtype ? TRN_SAVE_BF16 : TRN_SAVE_F32, err);
        break;
    case LISA__RANK_OP__RANK_OP_SAVE_OPTIM:
        rc = b->ops->save_optim(b, NULL, err);
        break;
    default:
        rc = trn_fail(err, LISA_INVALID, "dp: unknown command %d",
                      (int) cmd->op);
        break;
    }
    lisa_free(&off);
    lisa_free(&tok);
    return rc;
}

lisa_rc_t
trn_dp_follow(trn_backend_t *b, trn_group_t *g, trn_engine_t *engine,
              const trn_step_cfg_t *cfg, int pause_timeout_ms, trn_err_t *err)
{
    trn_comm_t comm = trn_group_comm(g);
    for (;;) {
        Lisa__RankCommand *cmd = NULL;
        lisa_rc_t rc = trn_group_next(g, &cmd, err);
        if (rc != LISA_OK)
            return rc;
        if (cmd->op == LISA__RANK_OP__RANK_OP_STOP) {
            bool ok = cmd->reason == 0;
            trn_group_free_command(&cmd);
            if (trn_group_reply(g, LISA_OK, NULL) != LISA_OK)
                lisa_log_warn("dp: cannot confirm the stop");
            if (ok)
                return LISA_OK;
            return trn_fail(err, LISA_ERR,
                            "dp: rank 0 stopped the run after "
                            "a failure");
        }
        uint64_t version = trn_engine_policy_version(engine);
        trn_err_t e = {{0}};
        rc = trn_engine_pause(engine, (uint64_t) pause_timeout_ms);
        bool stepped = false;
        if (rc != LISA_OK)
            rc = trn_fail(&e, LISA_TIMEOUT,
                          "dp: engine did not drain for the command");
        else
            rc = s_follow_one(b, cfg, &comm, cmd, &stepped, &e);
        trn_engine_resume(engine, stepped ? cmd->policy_version : version);
        trn_group_free_command(&cmd);
        if (trn_group_reply(g, rc, e.msg) != LISA_OK)
            return trn_fail(err, LISA_ERR, "dp: cannot answer rank 0");
        if (rc != LISA_OK)
            lisa_log_warn("dp: command failed here: %s", e.msg);
    }
}
