/*
 * trn_loop: the synchronous RL loop (see trn_loop.h).
 */
#include "trn_loop.h"

#include "lisa.pb-c.h"
#include "lisa/lisa_codec.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_rpc.h"
#include "trn_advantage.h"
#include "trn_ckpt.h"
#include "trn_err.h"
#include "trn_metrics.h"
#include "trn_progress.h"
#include "trn_tboard.h"
#include "trn_traj.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define S_WAIT_CHUNK_MS 5000u /* one WaitReq */
#define S_VAL_CHUNK     64u   /* validation prompts per enqueue */
#define S_SPAN_CHUNK    32u   /* rollouts whose spans one QueryReq fetches */

/* One rollout of a step. */
typedef struct {
    char *id;
    size_t task; /* index of its prompt in the batch (its group) */
    const char *ds;
    bool terminal, ok, kept;
    bool overlong;         /* ended at the turn or context limit */
    bool sampling_refused; /* a span was sampled otherwise than the run */
    double reward;
    uint32_t attempt;
    trn_traj_t traj;
} s_ro_t;

typedef struct {
    const trn_loop_args_t *a;
    const trn_run_cfg_t *c;
    lisa_rpc_t *rpc;
    FILE *mf;
    uint64_t version;
    trn_step_cfg_t scfg;
    uint64_t warmup; /* optimizer steps of linear lr warmup */
    trn_failed_t failed;
    bool drop_equal, bf16;
    bool mask_overlong;                    /* trainer.overlong_rollouts=mask */
    trn_kl_ctrl_t klc;                     /* the in-reward KL coefficient */
    size_t cap_prompt, cap_resp, cap_drop; /* trn_run_cfg_caps */
    char trunc;
    uint64_t total;          /* steps of the run */
    trn_tboard_t *tb;        /* trainer.logger tensorboard; may be NULL */
    trn_progress_t *pg;      /* progress.log / progress.now; may be NULL */
    trn_progress_state_t ps; /* the running step, for its live line */
    double pt0;              /* when that step began */
    uint64_t tok0;           /* the engine's sampled tokens then */
    trn_engine_stats_t es0;  /* the engine's counters then */
    size_t pbase, pfail;     /* rollouts ended (failed) in earlier waits */
    char *err;
    size_t errlen;
} s_loop_t;

static double
s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* The ratio a / b, 0 where b is 0. */
static double
s_ratio(double a, double b)
{
    return b > 0 ? a / b : 0;
}

static lisa_rc_t s_fail(s_loop_t *L, lisa_rc_t rc, const char *fmt, ...)
    LISA_PRINTF(3, 4);
static lisa_rc_t
s_fail(s_loop_t *L, lisa_rc_t rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lisa_verrf(L->err, L->errlen, fmt, ap);
    va_end(ap);
    lisa_log_error("loop: %s", L->err);
    return rc;
}

/* One broker call; a silent broker is LISA_UNAVAILABLE. */
static lisa_rc_t
s_call(s_loop_t *L, Lisa__Request *req, uint64_t timeout_ms, Lisa__Reply **rep,
       const char *what)
{
    req->version = LISA_PROTOCOL_VERSION;
    *rep = NULL;
    lisa_rc_t rc = lisa_rpc_call(L->rpc, req, (int) timeout_ms, rep);
    if (rc == LISA_AGAIN) /* the stop flag ended the wait */
        return s_fail(L, LISA_AGAIN, "stopped by signal (during %s)", what);
    if (rc != LISA_OK) {
        lisa_rpc_reply_free(rep);
        return s_fail(L, LISA_UNAVAILABLE,
                      "broker %s did not answer %s within %llu ms (%s)",
                      L->c->broker, what, (unsigned long long) timeout_ms,
                      lisa_rc_str(rc));
    }
    rc = lisa_rpc_reply_rc(*rep);
    if (rc != LISA_OK) {
        rc = s_fail(L, rc == LISA_INVALID ? LISA_INVALID : LISA_UNAVAILABLE,
                    "broker refused %s: %s", what, (*rep)->error);
        lisa_rpc_reply_free(rep);
    }
    return rc;
}

static lisa_rc_t
s_policy(s_loop_t *L, bool set, uint64_t v, uint64_t *out)
{
    Lisa__PolicyReq p = LISA__POLICY_REQ__INIT;
    Lisa__Request req = LISA__REQUEST__INIT;
    p.set = set;
    p.version = v;
    req.body_case = LISA__REQUEST__BODY_POLICY;
    req.policy = &p;
    Lisa__Reply *rep = NULL;
    lisa_rc_t rc = s_call(L, &req, L->c->rpc_timeout_ms, &rep, "PolicyReq");
    if (rc == LISA_OK && out)
        *out = rep->policy ? rep->policy->version : 0;
    lisa_rpc_reply_free(&rep);
    return rc;
}

static void
s_ros_free(s_ro_t *ros, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        lisa_free(&ros[i].id);
        trn_traj_free(&ros[i].traj);
    }
    lisa_free(&ros);
}

typedef struct {
    trn_tboard_t *tb;
    bool val;
} s_tb_t;

/* A validation shares its step with the step before it: only its own
 * keys (val/..., time/val_s) go in, so no tag gets two values at a step. */
static void
s_tb_add(const char *k, double v, void *ud)
{
    const s_tb_t *t = ud;
    if (strcmp(k, "step") == 0 ||
        (t->val && strncmp(k, "val/", 4) != 0 && strcmp(k, "time/val_s") != 0))
        return;
    if (trn_tboard_add(t->tb, k, v) != LISA_OK)
        lisa_log_debug("loop: tensorboard: %s left out", k);
}

/* A finished step's (or validation's) record: metrics.jsonl, the
 * tensorboard logger, the step line. */
static void
s_report(s_loop_t *L, const trn_metrics_t *m, uint64_t step)
{
    if (trn_metrics_write(m, L->mf) != LISA_OK)
        lisa_log_warn("loop: cannot write the metrics file");
    if (L->tb) {
        s_tb_t t = {.tb = L->tb,
                    .val = !isnan(trn_metrics_get(m, "val/rollouts"))};
        trn_metrics_each(m, s_tb_add, &t);
        if (trn_tboard_write(L->tb, (int64_t) step) != LISA_OK)
            lisa_log_warn("loop: cannot write %s", trn_tboard_path(L->tb));
    }
    trn_progress_step(L->pg, m);
}

/* Starts the live line of a phase of a step. */
static void
s_live_begin(s_loop_t *L, const char *phase, uint64_t step, size_t total)
{
    memset(&L->ps, 0, sizeof L->ps);
    L->ps.phase = phase;
    L->ps.step = step;
    L->ps.total = total;
    L->pbase = L->pfail = 0;
    L->pt0 = s_now();
    L->tok0 = trn_engine_stats(L->a->engine).tokens_generated;
}

/* Redraws the live line: ros[n] of the current wait. */
static void
s_live(s_loop_t *L, const s_ro_t *ros, size_t n)
{
    size_t done = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        done += ros[i].terminal;
        failed += ros[i].terminal && !ros[i].ok;
    }
    L->ps.done = L->pbase + done;
    L->ps.failed = L->pfail + failed;
    L->ps.elapsed_s = s_now() - L->pt0;
    uint64_t t = trn_engine_stats(L->a->engine).tokens_generated;
    L->ps.tokens = t > L->tok0 ? t - L->tok0 : 0;
    trn_progress_live(L->pg, &L->ps);
}

/* The run's sampling for training or validation rollouts: what the
 * gateway applies and the spans must record (top_k -1 is off: 0). */
static Lisa__Sampling
s_sampling(const trn_run_cfg_t *c, bool val)
{
    Lisa__Sampling s = LISA__SAMPLING__INIT;
    int64_t k = val ? c->val_top_k : c->top_k;
    s.temperature = (float) (val ? c->val_temperature : c->temperature);
    s.top_p = (float) (val ? c->val_top_p : c->top_p);
    s.top_k = k > 0 ? (int32_t) k : 0;
    return s;
}

/* Enqueues tasks idx[nt] of d with n rollouts each; *ros gets nt * n
 * records in order. With agent.prompts each task carries its rendered
 * prompts (a data source the set does not cover keeps the agent's). */
static lisa_rc_t
s_enqueue(s_loop_t *L, const trn_data_t *d, const size_t *idx, size_t nt,
          uint32_t n, bool val, uint64_t step, char *key, s_ro_t **ros_out)
{
    const trn_run_cfg_t *c = L->c;
    Lisa__TaskSpec *ts = lisa_calloc(nt, sizeof *ts);
    Lisa__TaskSpec **tp = lisa_calloc(nt, sizeof *tp);
    Lisa__Limits lim = LISA__LIMITS__INIT;
    lim.max_turns = (uint32_t) c->max_turns;
    lim.max_context_tokens = (uint32_t) c->max_context;
    lim.max_tokens_per_call = (uint32_t) c->max_tokens_per_call;
    lim.deadline_ms = c->trajectory_timeout_ms;
    lim.temperature = (float) (val ? c->val_temperature : c->temperature);
    lim.top_p = (float) (val ? c->val_top_p : c->top_p);
    Lisa__Sampling smp = s_sampling(c, val);
    lim.sampling = &smp;
    char **prompts = lisa_calloc(2 * nt + 1, sizeof *prompts);
    size_t nfiles = 0;
    for (size_t i = 0; i < nt; i++)
        nfiles += trn_data_get(d, idx[i])->n_docs;
    Lisa__File *files = lisa_calloc(nfiles + 1, sizeof *files);
    Lisa__File **fp = lisa_calloc(nfiles + 1, sizeof *fp);
    size_t fi = 0;
    for (size_t i = 0; i < nt; i++) {
        const trn_sample_t *s = trn_data_get(d, idx[i]);
        lisa__task_spec__init(&ts[i]);
        ts[i].task_id = s->id;
        ts[i].data_source = s->data_source;
        ts[i].problem_statement = s->problem;
        ts[i].ground_truth = s->ground_truth;
        ts[i].extra_info_json = s->extra_json;
        ts[i].n = n;
        ts[i].limits = &lim;
        ts[i].max_attempts = (uint32_t) c->max_attempts;
        if (L->a->prompts &&
            trn_prompts_render(L->a->prompts, s->data_source, s->problem,
                               &prompts[2 * i],
                               &prompts[2 * i + 1]) == LISA_OK) {
            ts[i].system_prompt = prompts[2 * i];
            ts[i].instance_prompt = prompts[2 * i + 1];
        }
        ts[i].files = &fp[fi];
        ts[i].n_files = s->n_docs;
        for (size_t k = 0; k < s->n_docs; k++, fi++) {
            lisa__file__init(&files[fi]);
            files[fi].path = s->docs[k].name;
            files[fi].content.data = (uint8_t *) s->docs[k].content;
            files[fi].content.len = s->docs[k].len;
            fp[fi] = &files[fi];
        }
        tp[i] = &ts[i];
    }
    Lisa__EnqueueReq eq = LISA__ENQUEUE_REQ__INIT;
    char run[160];
    snprintf(run, sizeof run, "%s", L->a->run_id);
    eq.run_id = run;
    eq.step = step;
    eq.policy_version = L->version;
    eq.mode = val ? LISA__MODE__MODE_VAL : LISA__MODE__MODE_TRAIN;
    eq.tasks = tp;
    eq.n_tasks = nt;
    eq.idempotency_key = key;
    Lisa__Request req = LISA__REQUEST__INIT;
    req.body_case = LISA__REQUEST__BODY_ENQUEUE;
    req.enqueue = &eq;
    Lisa__Reply *rep = NULL;
    lisa_rc_t rc = s_call(L, &req, L->c->rpc_timeout_ms, &rep, "EnqueueReq");
    if (rc == LISA_OK) {
        Lisa__EnqueueRep *er = rep->enqueue;
        if (!er || er->n_rollout_ids != nt * n) {
            rc = s_fail(L, LISA_UNAVAILABLE,
                        "broker returned %zu rollout ids for %zu",
                        er ? er->n_rollout_ids : 0, nt * n);
        } else {
            s_ro_t *ros = lisa_calloc(nt * n, sizeof *ros);
            for (size_t i = 0; i < nt * n; i++) {
                ros[i].id = lisa_strdup(er->rollout_ids[i]);
                ros[i].task = i / n;
                ros[i].ds = trn_data_get(d, idx[i / n])->data_source;
            }
            *ros_out = ros;
        }
    }
    lisa_rpc_reply_free(&rep);
    for (size_t i = 0; i < 2 * nt; i++)
        lisa_free(&prompts[i]);
    lisa_free(&prompts);
    lisa_free(&files);
    lisa_free(&fp);
    lisa_free(&ts);
    lisa_free(&tp);
    return rc;
}

static s_ro_t *
s_find(s_ro_t *ros, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ros[i].id, id) == 0)
            return &ros[i];
    return NULL;
}

/* Cancels the rollouts `ids`. When stopping on a signal the broker gets
 * at most S_STOP_CANCEL_MS to confirm (it may be stopping too). */
#define S_STOP_CANCEL_MS 1000u

static void
s_cancel(s_loop_t *L, char **ids, size_t n, bool stopping)
{
    Lisa__CancelReq cq = LISA__CANCEL_REQ__INIT;
    cq.rollout_ids = ids;
    cq.n_rollout_ids = n;
    static char deadline[] = "trainer step deadline";
    static char stopped[] = "trainer stopped";
    cq.reason = stopping ? stopped : deadline;
    Lisa__Request req = LISA__REQUEST__INIT;
    req.body_case = LISA__REQUEST__BODY_CANCEL;
    req.cancel = &cq;
    Lisa__Reply *rep = NULL;
    uint64_t tmo = L->c->rpc_timeout_ms;
    if (stopping) {
        lisa_rpc_set_interrupt(L->rpc, NULL);
        if (tmo > S_STOP_CANCEL_MS)
            tmo = S_STOP_CANCEL_MS;
    }
    req.version = LISA_PROTOCOL_VERSION;
    if (lisa_rpc_call(L->rpc, &req, (int) tmo, &rep) != LISA_OK ||
        lisa_rpc_reply_rc(rep) != LISA_OK)
        lisa_log_warn("loop: cancelling %zu rollouts: no confirmation from "
                      "broker %s",
                      n, L->c->broker);
    lisa_rpc_reply_free(&rep);
    if (stopping)
        lisa_rpc_set_interrupt(L->rpc, L->a->stop);
}

/* Waits until every rollout is terminal or the deadline passes (the rest
 * is cancelled and counted failed). */
static lisa_rc_t
s_wait(s_loop_t *L, s_ro_t *ros, size_t n, double deadline, size_t *timed_out)
{
    char **ids = lisa_calloc(n, sizeof *ids);
    lisa_rc_t rc = LISA_OK;
    *timed_out = 0;
    for (;;) {
        size_t np = 0;
        for (size_t i = 0; i < n; i++)
            if (!ros[i].terminal)
                ids[np++] = ros[i].id;
        s_live(L, ros, n);
        if (np == 0)
            break;
        if (L->a->stop && *L->a->stop) {
            s_cancel(L, ids, np, true);
            rc = s_fail(L, LISA_AGAIN, "stopped by signal");
            break;
        }
        double left = deadline - s_now();
        if (left <= 0) {
            lisa_log_warn("loop: %zu rollouts past the step deadline; "
                          "cancelling them",
                          np);
            s_cancel(L, ids, np, false);
            for (size_t i = 0; i < n; i++)
                if (!ros[i].terminal) {
                    ros[i].terminal = true;
                    (*timed_out)++;
                }
            break;
        }
        uint64_t chunk = (uint64_t) (left * 1000.0) + 1;
        if (chunk > S_WAIT_CHUNK_MS)
            chunk = S_WAIT_CHUNK_MS;
        Lisa__WaitReq wq = LISA__WAIT_REQ__INIT;
        wq.rollout_ids = ids;
        wq.n_rollout_ids = np;
        wq.timeout_ms = chunk;
        Lisa__Request req = LISA__REQUEST__INIT;
        req.body_case = LISA__REQUEST__BODY_WAIT;
        req.wait = &wq;
        Lisa__Reply *rep = NULL;
        req.version = LISA_PROTOCOL_VERSION;
        uint64_t tmo = chunk + L->c->rpc_timeout_ms;
        rc = lisa_rpc_call(L->rpc, &req, (int) tmo, &rep);
        if (rc == LISA_AGAIN) { /* the stop flag ended the wait */
            s_cancel(L, ids, np, true);
            rc = s_fail(L, LISA_AGAIN, "stopped by signal");
            break;
        }
        if (rc != LISA_OK) {
            lisa_rpc_reply_free(&rep);
            rc =
                s_fail(L, LISA_UNAVAILABLE,
                       "broker %s did not answer WaitReq within %llu ms (%s)",
                       L->c->broker, (unsigned long long) tmo, lisa_rc_str(rc));
            break;
        }
        /* a wait that ran out is answered CODE_TIMEOUT: nothing new yet */
        rc = lisa_rpc_reply_rc(rep);
        if (rc == LISA_TIMEOUT) {
            rc = LISA_OK;
        } else if (rc != LISA_OK) {
            rc = s_fail(L, LISA_UNAVAILABLE, "broker refused WaitReq: %s",
                        rep->error);
            lisa_rpc_reply_free(&rep);
            break;
        }
        Lisa__WaitRep *wr = rep->wait;
        for (size_t i = 0; wr && i < wr->n_rollouts; i++) {
            const Lisa__Rollout *r = wr->rollouts[i];
            s_ro_t *ro = s_find(ros, n, r->rollout_id);
            if (!ro || ro->terminal)
                continue;
            ro->terminal = true;
            ro->attempt = r->attempts;
            ro->ok = r->state == LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED &&
                     r->has_reward && r->reward && isfinite(r->reward->value);
            ro->reward = ro->ok ? r->reward->value : 0.0;
            if (!ro->ok)
                lisa_log_info("loop: rollout %s ended %s: %s", ro->id,
                              r->state == LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED
                                  ? "without a reward"
                                  : "failed",
                              r->reason);
        }
        lisa_rpc_reply_free(&rep);
    }
    lisa_free(&ids);
    return rc;
}

/* True when span sp was sampled with the settings `want` (the same
 * float values the trainer enqueued); why says how it differs. */
static bool
s_sampled_as(const Lisa__Span *sp, const Lisa__Sampling *want, char *why,
             size_t wl)
{
    const Lisa__Sampling *got = sp->sampling;
    if (!got) {
        snprintf(why, wl, "span %u records no sampling settings", sp->seq);
        return false;
    }
    if (got->temperature != want->temperature || got->top_p != want->top_p ||
        (got->top_k > 0 ? got->top_k : 0) != want->top_k) {
        snprintf(why, wl,
                 "span %u was sampled at temperature %g, top_p %g, top_k %d; "
                 "the run's are %g, %g, %d",
                 sp->seq, (double) got->temperature, (double) got->top_p,
                 (int) got->top_k, (double) want->temperature,
                 (double) want->top_p, (int) want->top_k);
        return false;
    }
    return true;
}

/* Builds the sequences of rollout ro from a query reply holding its
 * final attempt and spans (among others'). A rollout whose spans do not
 * build, or one of whose spans was sampled otherwise than `want`, is left
 * without sequences (logged). */
static void
s_build(s_ro_t *ro, const Lisa__QueryRep *qr, const Lisa__Sampling *want)
{
    size_t expected = 0, n = 0;
    for (size_t i = 0; i < qr->n_attempts; i++)
        if (qr->attempts[i]->attempt == ro->attempt &&
            strcmp(qr->attempts[i]->rollout_id, ro->id) == 0) {
            const Lisa__AttemptResult *res = qr->attempts[i]->result;
            expected = qr->attempts[i]->span_count;
            ro->overlong = res && (strcmp(res->end_reason, "turn_limit") == 0 ||
                                   strcmp(res->end_reason, "context") == 0);
        }
    Lisa__Span **sp = lisa_calloc(qr->n_spans + 1, sizeof *sp);
    for (size_t i = 0; i < qr->n_spans; i++)
        if (qr->spans[i]->attempt == ro->attempt &&
            strcmp(qr->spans[i]->rollout_id, ro->id) == 0)
            sp[n++] = qr->spans[i];
    char why[256];
    for (size_t i = 0; i < n && !ro->sampling_refused; i++)
        if (!s_sampled_as(sp[i], want, why, sizeof why)) {
            ro->sampling_refused = true;
            lisa_log_warn("loop: rollout %s attempt %u refused from "
                          "training: %s",
                          ro->id, ro->attempt, why);
        }
    if (n == 0) {
        lisa_log_warn("loop: rollout %s attempt %u has no spans", ro->id,
                      ro->attempt);
    } else if (ro->sampling_refused) {
        /* not trained on: no sequences */
    } else if (trn_traj_build(sp, n, expected, TRN_MAX_BATCH_TOKENS, &ro->traj,
                              why, sizeof why) != LISA_OK) {
        lisa_log_warn("loop: rollout %s attempt %u: %s", ro->id, ro->attempt,
                      why);
    }
    /* a sequence must start with an unsampled token (trn_step) */
    for (size_t i = 0; i < ro->traj.n; i++)
        if (ro->traj.seqs[i].len == 0 || ro->traj.seqs[i].mask[0]) {
            lisa_log_warn("loop: rollout %s: a sequence starts with a "
                          "sampled token; dropped",
                          ro->id);
            trn_traj_free(&ro->traj);
            break;
        }
    lisa_free(&sp);
}

/* Fetches the final attempts' spans of the batch's rollouts (those with
 * an attempt), S_SPAN_CHUNK rollouts per QueryReq (final_attempt: the
 * broker returns nothing of earlier attempts), and builds their
 * sequences. */
static lisa_rc_t
s_spans(s_loop_t *L, s_ro_t *ros, size_t nr)
{
    char **ids = lisa_calloc(S_SPAN_CHUNK, sizeof *ids);
    s_ro_t **of = lisa_calloc(S_SPAN_CHUNK, sizeof *of);
    lisa_rc_t rc = LISA_OK;
    Lisa__Sampling want = s_sampling(L->c, false);
    for (size_t i = 0; i < nr && rc == LISA_OK;) {
        size_t k = 0;
        for (; i < nr && k < S_SPAN_CHUNK; i++)
            if (ros[i].attempt > 0) {
                of[k] = &ros[i];
                ids[k++] = ros[i].id;
            }
        if (k == 0)
            break;
        Lisa__QueryReq q = LISA__QUERY_REQ__INIT;
        q.rollout_ids = ids;
        q.n_rollout_ids = k;
        q.with_spans = true;
        q.with_attempts = true;
        q.final_attempt = true;
        Lisa__Request req = LISA__REQUEST__INIT;
        req.body_case = LISA__REQUEST__BODY_QUERY;
        req.query = &q;
        Lisa__Reply *rep = NULL;
        rc = s_call(L, &req, L->c->rpc_timeout_ms, &rep, "QueryReq");
        if (rc != LISA_OK)
            break;
        for (size_t j = 0; j < k && rep->query; j++)
            s_build(of[j], rep->query, &want);
        lisa_rpc_reply_free(&rep);
    }
    lisa_free(&ids);
    lisa_free(&of);
    return rc;
}

/* Applies the failed / equal-reward policies: sets ->kept; returns the
 * number of groups dropped. */
static size_t
s_select(s_loop_t *L, s_ro_t *ros, size_t n, size_t ntask)
{
    size_t dropped = 0;
    for (size_t t = 0; t < ntask; t++) {
        bool any_failed = false;
        for (size_t i = 0; i < n; i++)
            if (ros[i].task == t && !(ros[i].ok && ros[i].traj.n))
                any_failed = true;
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            s_ro_t *r = &ros[i];
            if (r->task != t)
                continue;
            bool usable = r->traj.n > 0;
            switch (L->failed) {
            case TRN_FAILED_DROP_GROUP:
                r->kept = usable && r->ok && !any_failed;
                break;
            case TRN_FAILED_MASK:
                r->kept = usable && r->ok;
                break;
            case TRN_FAILED_ZERO:
                r->kept = usable;
                if (!r->ok)
                    r->reward = L->c->failed_score;
                break;
            }
            kept += r->kept;
        }
        bool equal = true;
        double first = NAN;
        for (size_t i = 0; i < n; i++)
            if (ros[i].task == t && ros[i].kept) {
                if (isnan(first))
                    first = ros[i].reward;
                else if (ros[i].reward != first)
                    equal = false;
            }
        if (kept && equal && L->drop_equal) {
            for (size_t i = 0; i < n; i++)
                if (ros[i].task == t)
                    ros[i].kept = false;
            kept = 0;
        }
        if (!kept)
            dropped++;
    }
    return dropped;
}

static void
s_val_metrics(s_loop_t *L, uint64_t step, s_ro_t *ros, size_t n, double secs)
{
    trn_metrics_t *m = trn_metrics_new();
    trn_metrics_set_str(m, "kind", "val");
    trn_metrics_set(m, "step", (double) step);
    trn_metrics_set(m, "policy_version", (double) L->version);
    const char **g = lisa_calloc(n ? n : 1, sizeof *g);
    double *x = lisa_calloc(n ? n : 1, sizeof *x);
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        g[i] = ros[i].ds;
        x[i] = ros[i].ok ? ros[i].reward : 0.0;
        failed += !ros[i].ok;
    }
    trn_metrics_by_group(m, "val/reward", g, x, n);
    trn_metrics_stats(m, "val/reward", x, n);
    trn_metrics_set(m, "val/rollouts", (double) n);
    trn_metrics_set(m, "val/failed", (double) failed);
    trn_metrics_set(m, "time/val_s", secs);
    s_report(L, m, step);
    lisa_free(&g);
    lisa_free(&x);
    trn_metrics_destroy(&m);
}

static lisa_rc_t
s_validate(s_loop_t *L, uint64_t step)
{
    const trn_data_t *d = L->a->val;
    size_t nv = trn_data_len(d);
    if (nv == 0)
        return LISA_OK;
    double t0 = s_now();
    uint32_t vn = (uint32_t) L->c->val_n;
    s_ro_t *all = lisa_calloc(nv * vn, sizeof *all);
    size_t nall = 0;
    lisa_rc_t rc = LISA_OK;
    size_t *idx = lisa_calloc(S_VAL_CHUNK, sizeof *idx);
    s_live_begin(L, "validation", step, nv * vn);
    for (size_t off = 0; off < nv && rc == LISA_OK; off += S_VAL_CHUNK) {
        size_t nt = nv - off < S_VAL_CHUNK ? nv - off : S_VAL_CHUNK;
        for (size_t i = 0; i < nt; i++)
            idx[i] = off + i;
        char key[256];
        snprintf(key, sizeof key, "%s:%llu:val:%zu", L->a->run_id,
                 (unsigned long long) step, off);
        s_ro_t *ros = NULL;
        rc = s_enqueue(L, d, idx, nt, vn, true, step, key, &ros);
        if (rc != LISA_OK)
            break;
        size_t to = 0;
        rc = s_wait(L, ros, nt * vn,
                    s_now() + (double) L->c->step_timeout_ms / 1000.0, &to);
        for (size_t i = 0; i < nt * vn; i++) {
            L->pbase += ros[i].terminal;
            L->pfail += ros[i].terminal && !ros[i].ok;
        }
        memcpy(all + nall, ros, nt * vn * sizeof *ros);
        nall += nt * vn;
        lisa_free(&ros);
    }
    if (rc == LISA_OK)
        s_val_metrics(L, step, all, nall, s_now() - t0);
    s_ros_free(all, nall);
    lisa_free(&idx);
    return rc;
}

static lisa_rc_t
s_checkpoint(s_loop_t *L, uint64_t step)
{
    trn_ckpt_state_t st = {0};
    st.global_step = step;
    st.policy_version = L->version;
    snprintf(st.run_id, sizeof st.run_id, "%s", L->a->run_id);
    st.data_seed = L->c->seed;
    st.batch_size = (uint64_t) L->c->batch_size;
    st.n_train = trn_data_len(L->a->train);
    trn_err_t err = {{0}};
    /* the save reads the training state: a time-sharing engine gives the
     * device back while it runs (no rollouts are out between steps) */
    lisa_rc_t rc = trn_engine_pause(L->a->engine, L->c->step_timeout_ms);
    if (rc != LISA_OK) {
        trn_engine_resume(L->a->engine, L->version);
        return s_fail(L, LISA_TIMEOUT,
                      "checkpoint of step %llu: the engine did not drain",
                      (unsigned long long) step);
    }
    rc = trn_ckpt_save(L->a->backend, L->c->out_dir, &st, L->bf16, NULL, 0,
                       &err);
    trn_engine_resume(L->a->engine, L->version);
    if (rc != LISA_OK)
        return s_fail(L, LISA_ERR, "checkpoint of step %llu: %s",
                      (unsigned long long) step, err.msg);
    return LISA_OK;
}

/* How far the engine's log-probs are from the trainer's recomputation
 * (same weights): mean and max |diff| over sampled tokens. A large value
 * means the engine and the trainer disagree (verl's rollout_probs_diff). */
static bool
s_logp_diff(s_loop_t *L, const trn_rollouts_t *r, size_t ntok, trn_metrics_t *m,
            float *lp)
{
    trn_backend_t *b = L->a->backend;
    if (!b->ops->logprobs)
        return false;
    trn_err_t err = {{0}};
    if (b->ops->logprobs(b, &L->scfg, r, lp, &err) != LISA_OK) {
        lisa_log_warn("loop: trainer log-probs: %s", err.msg);
        return false;
    }
    double sum = 0, mx = 0, n = 0;
    for (size_t t = 0; t < ntok; t++)
        if (r->mask[t]) {
            double d = fabs((double) lp[t] - (double) r->rollout_logp[t]);
            sum += d;
            mx = d > mx ? d : mx;
            n++;
        }
    trn_metrics_set(m, "rollout/logp_diff_mean", s_ratio(sum, (double) n));
    trn_metrics_set(m, "rollout/logp_diff_max", mx);
    return true;
}

/* Frees the sequences from k on. */
static void
s_traj_keep(trn_traj_t *t, size_t k)
{
    for (size_t i = k; i < t->n; i++) {
        lisa_free(&t->seqs[i].tokens);
        lisa_free(&t->seqs[i].mask);
        lisa_free(&t->seqs[i].logp);
    }
    t->n = k;
}

/* verl's length limits on the kept rollouts' sequences: cut in place,
 * or dropped (a rollout whose every sequence is dropped is not kept). */
static void
s_caps(s_loop_t *L, s_ro_t *ros, size_t n, size_t *cut, size_t *dropped)
{
    if (!L->cap_prompt && !L->cap_resp && !L->cap_drop)
        return;
    for (size_t i = 0; i < n; i++) {
        if (!ros[i].kept)
            continue;
        size_t k = 0;
        for (size_t j = 0; j < ros[i].traj.n; j++) {
            trn_seq_t *q = &ros[i].traj.seqs[j];
            int r =
                trn_step_cap(q->tokens, q->mask, q->logp, &q->len, L->cap_drop,
                             L->cap_prompt, L->trunc, L->cap_resp);
            if (r < 0) {
                (*dropped)++;
                continue;
            }
            *cut += r > 0;
            if (k != j) { /* keep the kept ones first */
                trn_seq_t t = ros[i].traj.seqs[k];
                ros[i].traj.seqs[k] = *q;
                *q = t;
            }
            k++;
        }
        if (k == 0)
            ros[i].kept = false;
        else
            s_traj_keep(&ros[i].traj, k);
    }
}

static lisa_rc_t
s_actor_step(void *self, const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
             trn_step_out_t *out, trn_err_t *err)
{
    trn_backend_t *b = self;
    return b->ops->train_step(b, cfg, r, out, err);
}

static lisa_rc_t
s_actor_logprobs(void *self, const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
                 float *logp, trn_err_t *err)
{
    trn_backend_t *b = self;
    if (!b->ops->logprobs)
        return trn_fail(err, LISA_UNSUPPORTED,
                        "the backend computes no log-probs (old log-probs)");
    return b->ops->logprobs(b, cfg, r, logp, err);
}

/* One training step. */
/* A step's rollouts packed for the update: sequences back to back with
 * their masks, sampling log-probs, groups and scores, and per rollout its
 * group and reward (the advantage statistics). */
typedef struct {
    size_t nseq, ntok, nrk;
    size_t *off;
    int32_t *tok;
    uint8_t *mask;
    float *lp;
    int64_t *grp, *rgrp;
    double *score, *rlen, *rsc, *adv;
    double resp_tokens;
} s_batch_t;

static void
s_batch_free(s_batch_t *b)
{
    lisa_free(&b->off);
    lisa_free(&b->tok);
    lisa_free(&b->mask);
    lisa_free(&b->lp);
    lisa_free(&b->grp);
    lisa_free(&b->score);
    lisa_free(&b->rlen);
    lisa_free(&b->rgrp);
    lisa_free(&b->rsc);
    lisa_free(&b->adv);
}

/* The mean, spread and per-source reward of the succeeded rollouts. */
static void
s_reward_metrics(trn_metrics_t *m, const s_ro_t *ros, size_t nr)
{
    const char **g = lisa_calloc(nr ? nr : 1, sizeof *g);
    double *x = lisa_calloc(nr ? nr : 1, sizeof *x);
    size_t k = 0;
    for (size_t i = 0; i < nr; i++)
        if (ros[i].ok) {
            g[k] = ros[i].ds;
            x[k++] = ros[i].reward;
        }
    trn_metrics_stats(m, "reward", x, k);
    trn_metrics_by_group(m, "reward", g, x, k);
    lisa_free(&g);
    lisa_free(&x);
}

/* Packs the kept rollouts of ros (nseq sequences, ntok tokens) into b;
 * overlong rollouts keep their reward in the group statistics and lose
 * their tokens from the loss when masked. */
static void
s_batch_build(s_loop_t *L, const s_ro_t *ros, size_t nr, size_t nseq,
              size_t ntok, trn_metrics_t *m, s_batch_t *b)
{
    memset(b, 0, sizeof *b);
    b->nseq = nseq;
    b->ntok = ntok;
    b->off = lisa_calloc(nseq + 1, sizeof *b->off);
    b->tok = lisa_malloc((ntok ? ntok : 1) * sizeof *b->tok);
    b->mask = lisa_malloc(ntok ? ntok : 1);
    b->lp = lisa_malloc((ntok ? ntok : 1) * sizeof *b->lp);
    b->grp = lisa_calloc(nseq ? nseq : 1, sizeof *b->grp);
    b->score = lisa_calloc(nseq ? nseq : 1, sizeof *b->score);
    b->rlen = lisa_calloc(nseq ? nseq : 1, sizeof *b->rlen);
    b->rgrp = lisa_calloc(nr ? nr : 1, sizeof *b->rgrp);
    b->rsc = lisa_calloc(nr ? nr : 1, sizeof *b->rsc);
    b->adv = lisa_calloc(nr ? nr : 1, sizeof *b->adv);
    size_t s = 0, t = 0, noverlong = 0;
    for (size_t i = 0; i < nr; i++) {
        if (!ros[i].kept)
            continue;
        b->rgrp[b->nrk] = (int64_t) ros[i].task;
        b->rsc[b->nrk++] = ros[i].reward;
        bool masked = L->mask_overlong && ros[i].overlong;
        noverlong += ros[i].overlong;
        for (size_t k = 0; k < ros[i].traj.n; k++) {
            const trn_seq_t *q = &ros[i].traj.seqs[k];
            memcpy(b->tok + t, q->tokens, q->len * sizeof *b->tok);
            if (masked)
                memset(b->mask + t, 0, q->len);
            else
                memcpy(b->mask + t, q->mask, q->len);
            memcpy(b->lp + t, q->logp, q->len * sizeof *b->lp);
            for (size_t u = 0; u < q->len; u++)
                b->rlen[s] += q->mask[u];
            b->resp_tokens += b->rlen[s];
            t += q->len;
            b->grp[s] = (int64_t) ros[i].task;
            b->score[s] = ros[i].reward;
            b->off[++s] = t;
        }
    }
    if (b->nrk) {
        trn_err_t ae;
        if (trn_advantage(&L->scfg.adv, b->rsc, b->rgrp, b->nrk, b->adv, &ae) ==
            LISA_OK)
            trn_metrics_stats(m, "advantage", b->adv, b->nrk);
    }
    trn_metrics_stats(m, "response_length", b->rlen, nseq);
    trn_metrics_set(m, "rollouts/overlong", (double) noverlong);
    trn_metrics_set(m, "batch/response_tokens", b->resp_tokens);
}

/* The update's figures. */
static void
s_update_metrics(s_loop_t *L, trn_metrics_t *m, const trn_step_out_t *so)
{
    trn_metrics_set(m, "update/skipped", so->skipped ? 1 : 0);
    trn_metrics_set(m, "loss/total", so->loss);
    trn_metrics_set(m, "loss/pg", so->pg_loss);
    trn_metrics_set(m, "loss/kl", so->kl_loss);
    trn_metrics_set(m, "actor/entropy", so->entropy);
    trn_metrics_set(m, "actor/pg_clipfrac", so->pg_clipfrac);
    trn_metrics_set(m, "actor/pg_clipfrac_lower", so->pg_clipfrac_lower);
    trn_metrics_set(m, "actor/ppo_kl", so->ppo_kl);
    trn_metrics_set(m, "actor/grad_norm", so->grad_norm);
    trn_metrics_set(m, "actor/tokens", so->tokens);
    trn_metrics_set(m, "actor/micro_batches", (double) so->micro_batches);
    if (L->scfg.cp_tokens > 0 || L->scfg.cp_auto)
        trn_metrics_set(m, "actor/cp_micro_batches",
                        (double) so->cp_micro_batches);
    trn_metrics_set(m, "actor/lr", L->scfg.optim.lr);
    trn_metrics_set(m, "actor/updates", (double) so->updates);
    trn_metrics_set(m, "actor/mini_batches", (double) so->mini_batches);
    if (L->scfg.rs_level != TRN_RS_OFF || L->scfg.rs_veto > 0)
        trn_metrics_set(m, "rollout_corr/rs_masked_tokens", so->rs_masked);
    if (L->c->kl_in_reward) {
        double kl = s_ratio(so->reward_kl, (double) so->reward_kl_n);
        trn_metrics_set(m, "actor/reward_kl_penalty", kl);
        trn_metrics_set(m, "actor/reward_kl_penalty_coeff", L->klc.value);
        trn_kl_ctrl_update(&L->klc, kl, so->reward_kl_n);
    }
}

/* The update of a step over batch b: the engine paused, the PPO passes,
 * the policy version published, the engine resumed at it. */
static lisa_rc_t
s_update(s_loop_t *L, uint64_t step, const s_batch_t *b, trn_metrics_t *m)
{
    lisa_rc_t rc = trn_engine_pause(L->a->engine, L->c->step_timeout_ms);
    if (rc != LISA_OK)
        return s_fail(L, LISA_TIMEOUT,
                      "engine did not drain for the weight update");
    trn_rollouts_t r = {.n_seqs = b->nseq,
                        .seq_offsets = b->off,
                        .tokens = b->tok,
                        .mask = b->mask,
                        .rollout_logp = b->lp,
                        .old_logp = NULL,
                        .group = b->grp,
                        .score = b->score};
    trn_step_out_t so;
    memset(&so, 0, sizeof so);
    trn_err_t err = {{0}};
    /* the trainer's log-probs before the update: a metric, and the old
     * log-probs of several mini-batches or epochs */
    float *tlp = lisa_calloc(b->ntok ? b->ntok : 1, sizeof *tlp);
    bool have_tlp = s_logp_diff(L, &r, b->ntok, m, tlp);
    /* linear warmup: update k (from 0) runs at lr * (k + 1) / warmup */
    L->scfg.optim.lr = L->c->lr;
    if (L->version < L->warmup)
        L->scfg.optim.lr *= (double) (L->version + 1) / (double) L->warmup;
    L->scfg.kl_reward_coef = L->c->kl_in_reward ? L->klc.value : 0;
    trn_step_actor_t actor = {.self = L->a->backend,
                              .train_step = s_actor_step,
                              .logprobs = s_actor_logprobs};
    rc = trn_step_ppo(&actor, &L->scfg, &r, have_tlp ? tlp : NULL, &so, &err);
    lisa_free(&tlp);
    if (rc != LISA_OK) {
        trn_engine_resume(L->a->engine, L->version);
        return s_fail(L, LISA_ERR, "optimizer step %llu: %s",
                      (unsigned long long) step, err.msg);
    }
    uint64_t nv = L->version + 1;
    rc = s_policy(L, true, nv, NULL);
    if (rc != LISA_OK) {
        trn_engine_resume(L->a->engine, L->version);
        return rc;
    }
    L->version = nv;
    trn_engine_resume(L->a->engine, nv);
    s_update_metrics(L, m, &so);
    return LISA_OK;
}

/* The engine over this step (since its rollouts began, L->es0): how much
 * of the prompts the prefix cache served, how its steps went. */
static void
s_engine_step_metrics(s_loop_t *L, trn_metrics_t *m,
                      const trn_engine_stats_t *es)
{
    const trn_engine_stats_t *p = &L->es0;
    double pt = (double) (es->prompt_tokens - p->prompt_tokens),
           ct = (double) (es->cached_tokens - p->cached_tokens);
    double ds = (double) (es->decode_steps - p->decode_steps),
           ms = (double) (es->mixed_steps - p->mixed_steps);
    trn_metrics_set(m, "engine/step/prompt_tokens", pt);
    trn_metrics_set(m, "engine/step/cached_tokens", ct);
    trn_metrics_set(m, "engine/step/prefix_hit_rate", s_ratio(ct, pt));
    trn_metrics_set(m, "engine/step/preemptions",
                    (double) (es->preemptions - p->preemptions));
    trn_metrics_set(m, "engine/step/decode_steps", ds);
    trn_metrics_set(m, "engine/step/decode_ms",
                    s_ratio(1e3 * (es->decode_s - p->decode_s), ds));
    trn_metrics_set(m, "engine/step/mixed_steps", ms);
    trn_metrics_set(m, "engine/step/mixed_ms",
                    s_ratio(1e3 * (es->mixed_s - p->mixed_s), ms));
    trn_metrics_set(m, "engine/step/holds", (double) (es->holds - p->holds));
}

/* The engine's counters and the two memory phases. */
static void
s_engine_metrics(s_loop_t *L, trn_metrics_t *m)
{
    trn_engine_stats_t es = trn_engine_stats(L->a->engine);
    s_engine_step_metrics(L, m, &es);
    trn_metrics_set(m, "engine/tokens_generated", (double) es.tokens_generated);
    trn_metrics_set(m, "engine/requests", (double) es.requests);
    trn_metrics_set(m, "engine/prompt_tokens", (double) es.prompt_tokens);
    trn_metrics_set(m, "engine/cached_tokens", (double) es.cached_tokens);
    trn_metrics_set(
        m, "engine/prefix_hit_rate",
        s_ratio((double) es.cached_tokens, (double) es.prompt_tokens));
    trn_metrics_set(m, "engine/preemptions", (double) es.preemptions);
    trn_metrics_set(m, "engine/kv_blocks", (double) es.kv_blocks);
    trn_metrics_set(m, "memory/serve_bytes", (double) es.mem_serve);
    trn_metrics_set(m, "memory/train_bytes", (double) es.mem_train);
}

static lisa_rc_t
s_step(s_loop_t *L, uint64_t step, const size_t *idx, size_t nt, uint64_t epoch)
{
    const trn_run_cfg_t *c = L->c;
    double t0 = s_now();
    uint32_t n = (uint32_t) c->n;
    char key[256];
    snprintf(key, sizeof key, "%s:%llu:train", L->a->run_id,
             (unsigned long long) step);
    s_ro_t *ros = NULL;
    lisa_rc_t rc =
        s_enqueue(L, L->a->train, idx, nt, n, false, step, key, &ros);
    if (rc != LISA_OK)
        return rc;
    size_t nr = nt * n, timed_out = 0;
    L->es0 = trn_engine_stats(L->a->engine);
    s_live_begin(L, "rollouts", step, nr);
    L->ps.total_steps = L->total;
    rc = s_wait(L, ros, nr, t0 + (double) c->step_timeout_ms / 1000.0,
                &timed_out);
    if (rc == LISA_OK)
        rc = s_spans(L, ros, nr);
    if (rc != LISA_OK) {
        s_ros_free(ros, nr);
        return rc;
    }
    double t_roll = s_now() - t0;
    size_t dropped_groups = s_select(L, ros, nr, nt);

    size_t ncut = 0, nlong = 0;
    s_caps(L, ros, nr, &ncut, &nlong);
    /* the batch */
    size_t nseq = 0, ntok = 0, nkept = 0, nok = 0, nrefused = 0;
    for (size_t i = 0; i < nr; i++) {
        nok += ros[i].ok;
        nrefused += ros[i].sampling_refused;
        if (!ros[i].kept)
            continue;
        nkept++;
        nseq += ros[i].traj.n;
        for (size_t k = 0; k < ros[i].traj.n; k++)
            ntok += ros[i].traj.seqs[k].len;
    }
    trn_metrics_t *m = trn_metrics_new();
    trn_metrics_set_str(m, "kind", "train");
    trn_metrics_set(m, "step", (double) step);
    trn_metrics_set(m, "epoch", (double) epoch);
    trn_metrics_set(m, "policy_version", (double) L->version);
    s_reward_metrics(m, ros, nr);
    trn_metrics_set(m, "rollouts/total", (double) nr);
    trn_metrics_set(m, "rollouts/succeeded", (double) nok);
    trn_metrics_set(m, "rollouts/failed", (double) (nr - nok));
    trn_metrics_set(m, "rollouts/timed_out", (double) timed_out);
    trn_metrics_set(m, "rollouts/kept", (double) nkept);
    trn_metrics_set(m, "rollouts/sampling_refused", (double) nrefused);
    trn_metrics_set(m, "groups/dropped", (double) dropped_groups);
    trn_metrics_set(m, "batch/sequences", (double) nseq);
    trn_metrics_set(m, "batch/truncated", (double) ncut);
    trn_metrics_set(m, "batch/dropped_long_prompt", (double) nlong);
    trn_metrics_set(m, "batch/tokens", (double) ntok);
    s_batch_t b;
    s_batch_build(L, ros, nr, nseq, ntok, m, &b);

    double t1 = s_now(), t_train = 0;
    if (nseq == 0) {
        lisa_log_warn("loop: step %llu has no usable rollouts; no update",
                      (unsigned long long) step);
        trn_metrics_set(m, "update/skipped", 1);
    } else {
        L->ps.phase = "training";
        L->ps.sequences = nseq;
        L->ps.elapsed_s = s_now() - t0;
        trn_progress_live(L->pg, &L->ps);
        rc = s_update(L, step, &b, m);
        t_train = s_now() - t1;
        if (rc != LISA_OK)
            goto out;
    }
    trn_metrics_set(m, "policy_version_after", (double) L->version);
    trn_metrics_set(m, "time/rollout_s", t_roll);
    trn_metrics_set(m, "time/train_s", t_train);
    trn_metrics_set(m, "time/step_s", s_now() - t0);
    trn_metrics_set(m, "throughput/train_tokens_per_s",
                    s_ratio((double) ntok, t_train));
    trn_metrics_set(m, "throughput/rollout_tokens_per_s",
                    s_ratio(b.resp_tokens, t_roll));
    s_engine_metrics(L, m);
    s_report(L, m, step);
    lisa_log_info("loop: step %llu done: %zu/%zu rollouts ok, %zu sequences, "
                  "%zu tokens, policy %llu (rollout %.1fs, train %.1fs)",
                  (unsigned long long) step, nok, nr, nseq, ntok,
                  (unsigned long long) L->version, t_roll, t_train);
out:
    trn_metrics_destroy(&m);
    s_batch_free(&b);
    s_ros_free(ros, nr);
    return rc;
}

/* trainer.val_only: one validation of the model as loaded (a checkpoint
 * under trainer.resume) on the validation sets, then done. */
static lisa_rc_t
s_val_only(s_loop_t *L)
{
    const trn_loop_args_t *a = L->a;
    if (!a->val || trn_data_len(a->val) == 0)
        return s_fail(L, LISA_INVALID, "trainer.val_only needs --val-data");
    char path[4096];
    mkdir(L->c->out_dir, 0755);
    snprintf(path, sizeof path, "%s/metrics.jsonl", L->c->out_dir);
    L->mf = fopen(path, "a");
    if (!L->mf)
        return s_fail(L, LISA_ERR, "cannot open %s", path);
    lisa_rc_t rc = LISA_OK;
    unsigned loggers = 0;
    if (trn_run_cfg_loggers(L->c->logger, &loggers, L->err, L->errlen) !=
        LISA_OK)
        loggers = TRN_LOGGER_CONSOLE;
    L->pg =
        trn_progress_new(L->c->out_dir, 1, (loggers & TRN_LOGGER_CONSOLE) != 0);
    L->rpc = lisa_rpc_new(L->c->broker, "lisa-trainer");
    if (!L->rpc) {
        rc = s_fail(L, LISA_INVALID, "bad broker endpoint %s", L->c->broker);
        goto out;
    }
    lisa_rpc_set_tries(L->rpc, 1);
    lisa_rpc_set_interrupt(L->rpc, a->stop);
    uint64_t bv = 0;
    if ((rc = s_policy(L, false, 0, &bv)) != LISA_OK)
        goto out;
    L->version = a->policy_version > bv ? a->policy_version : bv;
    if (L->version > bv &&
        (rc = s_policy(L, true, L->version, NULL)) != LISA_OK)
        goto out;
    trn_engine_resume(a->engine, L->version);
    lisa_log_info("loop: val_only: validating policy %llu (after step %llu) "
                  "on %zu prompts",
                  (unsigned long long) L->version,
                  (unsigned long long) a->start_step, trn_data_len(a->val));
    rc = s_validate(L, a->start_step);
out:
    lisa_rpc_destroy(&L->rpc);
    trn_progress_destroy(&L->pg);
    fclose(L->mf);
    L->mf = NULL;
    return rc;
}

lisa_rc_t
trn_loop_run(const trn_loop_args_t *a, char *err, size_t errlen)
{
    s_loop_t L = {.a = a, .c = a->cfg, .err = err, .errlen = errlen};
    const trn_run_cfg_t *c = a->cfg;
    L.mask_overlong = c->overlong && strcmp(c->overlong, "mask") == 0;
    lisa_rc_t rc = trn_run_cfg_resolve(c, &L.scfg, &L.failed, &L.drop_equal,
                                       &L.bf16, err, errlen);
    size_t *perm = NULL;
    if (rc != LISA_OK)
        return rc;
    trn_run_cfg_caps(c, &L.cap_prompt, &L.cap_resp, &L.cap_drop, &L.trunc);
    L.klc.value = c->kl_ctrl_coef;
    L.klc.target = c->kl_ctrl_target;
    L.klc.horizon = (double) c->kl_ctrl_horizon;
    if (trn_kl_ctrl_parse(c->kl_ctrl_type, &L.klc.adaptive) != LISA_OK)
        return s_fail(&L, LISA_INVALID, "bad algorithm.kl_ctrl.type");
    size_t ntrain = a->train ? trn_data_len(a->train) : 0;
    size_t bs = (size_t) c->batch_size;
    if (c->val_only)
        return s_val_only(&L);
    if (ntrain < bs)
        return s_fail(&L, LISA_INVALID,
                      "train set has %zu records, fewer than "
                      "data.train_batch_size %zu",
                      ntrain, bs);
    size_t spe = ntrain / bs;
    uint64_t total = c->total_steps > 0 ? (uint64_t) c->total_steps
                                        : (uint64_t) c->total_epochs * spe;
    L.total = total;
    L.warmup = c->lr_warmup_steps >= 0
                   ? (uint64_t) c->lr_warmup_steps
                   : (uint64_t) ceil(c->lr_warmup_ratio * (double) total);
    char path[4096];
    mkdir(c->out_dir, 0755);
    snprintf(path, sizeof path, "%s/metrics.jsonl", c->out_dir);
    L.mf = fopen(path, "a");
    if (!L.mf)
        return s_fail(&L, LISA_ERR, "cannot open %s", path);
    unsigned loggers = 0;
    rc = trn_run_cfg_loggers(c->logger, &loggers, err, errlen);
    if (rc != LISA_OK)
        goto out;
    if (loggers & TRN_LOGGER_TENSORBOARD) {
        char *tbd = trn_run_cfg_tensorboard_dir(c);
        char why[512];
        L.tb = trn_tboard_new(tbd, why, sizeof why);
        lisa_free(&tbd);
        if (!L.tb) {
            rc = s_fail(&L, LISA_ERR, "tensorboard logger: %s", why);
            goto out;
        }
        lisa_log_info("loop: tensorboard events in %s", trn_tboard_path(L.tb));
    }
    L.pg = trn_progress_new(c->out_dir, total,
                            (loggers & TRN_LOGGER_CONSOLE) != 0);
    L.rpc = lisa_rpc_new(c->broker, "lisa-trainer");
    if (!L.rpc) {
        rc = s_fail(&L, LISA_INVALID, "bad broker endpoint %s", c->broker);
        goto out;
    }
    lisa_rpc_set_tries(L.rpc, 1);
    lisa_rpc_set_interrupt(L.rpc, a->stop);
    uint64_t bv = 0;
    rc = s_policy(&L, false, 0, &bv);
    if (rc != LISA_OK)
        goto out;
    L.version = a->policy_version > bv ? a->policy_version : bv;
    if (L.version > bv && (rc = s_policy(&L, true, L.version, NULL)) != LISA_OK)
        goto out;
    trn_engine_resume(a->engine, L.version);
    lisa_log_info("loop: run %s, %zu prompts, %zu steps per epoch, %llu "
                  "steps, starting after step %llu at policy %llu",
                  a->run_id, ntrain, spe, (unsigned long long) total,
                  (unsigned long long) a->start_step,
                  (unsigned long long) L.version);
    if (c->val_before_train && a->val && a->start_step == 0 &&
        (rc = s_validate(&L, 0)) != LISA_OK)
        goto out;
    perm = lisa_calloc(ntrain, sizeof *perm);
    uint64_t perm_epoch = UINT64_MAX;
    for (uint64_t step = a->start_step + 1; step <= total; step++) {
        uint64_t epoch = (step - 1) / spe, b = (step - 1) % spe;
        if (epoch != perm_epoch) {
            trn_data_order(ntrain, c->shuffle, c->seed, epoch, perm);
            perm_epoch = epoch;
        }
        rc = s_step(&L, step, perm + b * bs, bs, epoch);
        if (rc != LISA_OK)
            goto out;
        /* validation every test_freq steps and after the last one */
        bool val_now = c->test_freq > 0 && step % (uint64_t) c->test_freq == 0;
        if (a->val && (val_now || step == total) &&
            (rc = s_validate(&L, step)) != LISA_OK)
            goto out;
        if ((c->save_freq > 0 && step % (uint64_t) c->save_freq == 0) ||
            step == total) {
            if ((rc = s_checkpoint(&L, step)) != LISA_OK)
                goto out;
        }
    }
out:
    lisa_free(&perm);
    lisa_rpc_destroy(&L.rpc);
    trn_progress_destroy(&L.pg);
    trn_tboard_destroy(&L.tb);
    if (L.mf)
        fclose(L.mf);
    return rc;
}
