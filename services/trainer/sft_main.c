/*
 * lisa-sft: supervised fine-tuning of a model on chat conversations
 * (JSONL of {"messages": [...], "tools": [...]}), the warm start of the
 * toy model (examples/toy/build_model.sh). Trains on the tokens the model
 * would sample (trn_sft), reports loss per step and, on held-out
 * conversations, how often greedy decoding reproduces the first assistant
 * turn exactly; saves a Hugging Face directory with the tokenizer files.
 * With --backend cpu|cuda it trains through the trainer's backend vtable
 * instead (trn_backend: the same code on the CPU and the GPU), each batch
 * as on-policy rollouts of score 1 whose PPO gradient is the mean NLL's
 * (trn_sft_batch_make, trn_sft_step_cfg), and evaluates the held-out
 * conversations by their mean NLL.
 */
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_tokenizer.h"
#include "trn_backend.h"
#include "trn_sampler.h"
#include "trn_sft.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_MAX_CONVS 100000
#define S_LINE_MAX  (1u << 20)

typedef struct {
    const char *data, *out, *model, *config, *tokenizer, *backend;
    long steps, batch, seed, threads, eval, eval_every, hold, window,
        full_every, stop;
    double lr, minutes, std, eval_temp;
} s_opts_t;

static double
s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static int
s_usage(void)
{
    fprintf(stderr,
            "usage: lisa-sft --data FILE.jsonl --out DIR\n"
            "                (--model DIR | --config CONFIG.json "
            "--tokenizer DIR)\n"
            "                [--steps N] [--batch B] [--lr X] [--seed S]\n"
            "                [--threads T] [--minutes M] [--hold N]\n"
            "                [--eval N] [--eval-every N] [--init-std X]\n"
            "                [--window W] [--full-every N] [--stop N]\n"
            "                [--eval-temp T] [--backend cpu|cuda]\n"
            "  --backend B: train through the trainer's backend B (cuda:\n"
            "  the GPU, when built in); held-out evaluation is then the\n"
            "  mean NLL of the held-out conversations. Without it: the\n"
            "  CPU model, evaluated by the first-turn match rate\n"
            "  --eval-temp T: sample at temperature T in evaluation (0: "
            "greedy)\n"
            "  --stop N: stop after step N (the schedule still spans "
            "--steps)\n"
            "  --window W: train on each conversation from W tokens before\n"
            "  its first assistant turn (the prompt's fixed head is cut;\n"
            "  attention is relative, and evaluation uses whole prompts);\n"
            "  --full-every N keeps every Nth conversation whole\n"
            "  --hold N: the last N conversations are held out for the\n"
            "  first-turn match rate (--eval of them, every --eval-every "
            "steps)\n");
    return 2;
}

static int
s_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static int
s_parse(int argc, char **argv, s_opts_t *o)
{
    *o = (s_opts_t){.steps = 300,
                    .batch = 8,
                    .seed = 1,
                    .threads = 2,
                    .eval = 32,
                    .eval_every = 100,
                    .hold = 64,
                    .lr = 3e-3,
                    .std = 0.02};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return -1;
        double x = 0;
        bool num = s_num(v, &x) == 0;
        if (!strcmp(a, "--data"))
            o->data = v;
        else if (!strcmp(a, "--out"))
            o->out = v;
        else if (!strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--config"))
            o->config = v;
        else if (!strcmp(a, "--tokenizer"))
            o->tokenizer = v;
        else if (!strcmp(a, "--backend"))
            o->backend = v;
        else if (!num)
            return -1;
        else if (!strcmp(a, "--steps"))
            o->steps = (long) x;
        else if (!strcmp(a, "--batch"))
            o->batch = (long) x;
        else if (!strcmp(a, "--seed"))
            o->seed = (long) x;
        else if (!strcmp(a, "--threads"))
            o->threads = (long) x;
        else if (!strcmp(a, "--eval"))
            o->eval = (long) x;
        else if (!strcmp(a, "--eval-every"))
            o->eval_every = (long) x;
        else if (!strcmp(a, "--stop"))
            o->stop = (long) x;
        else if (!strcmp(a, "--full-every"))
            o->full_every = (long) x;
        else if (!strcmp(a, "--window"))
            o->window = (long) x;
        else if (!strcmp(a, "--hold"))
            o->hold = (long) x;
        else if (!strcmp(a, "--lr"))
            o->lr = x;
        else if (!strcmp(a, "--minutes"))
            o->minutes = x;
        else if (!strcmp(a, "--eval-temp"))
            o->eval_temp = x;
        else if (!strcmp(a, "--init-std"))
            o->std = x;
        else
            return -1;
    }
    if (!o->data || !o->out || (!o->model && !(o->config && o->tokenizer)))
        return -1;
    if (o->backend && strcmp(o->backend, "cpu") != 0 &&
        strcmp(o->backend, "cuda") != 0) {
        fprintf(stderr, "lisa-sft: unknown backend '%s' (cpu or cuda)\n",
                o->backend);
        return -1;
    }
    if (o->steps < 1 || o->batch < 1 || o->batch > 4096 || o->threads < 1 ||
        o->threads > 256 || o->hold < 0 || o->window < 0 || o->full_every < 0 ||
        o->stop < 0 || o->eval < 0 || o->eval_every < 1 || o->lr <= 0 ||
        o->eval_temp < 0)
        return -1;
    return 0;
}

/* Reads and encodes every line of the JSONL file. */
static int
s_load(const char *path, lisa_tokenizer_t *tok, trn_sft_seq_t **out, size_t *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        lisa_log_error("lisa-sft: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    char *line = lisa_malloc(S_LINE_MAX);
    size_t cap = 256, k = 0;
    trn_sft_seq_t *seqs = lisa_calloc(cap, sizeof *seqs);
    int rc = 0, lineno = 0;
    while (fgets(line, (int) S_LINE_MAX, f)) {
        lineno++;
        if (line[0] == '\n' || line[0] == 0)
            continue;
        if (k == S_MAX_CONVS) {
            lisa_log_error("lisa-sft: more than %d conversations", S_MAX_CONVS);
            rc = -1;
            break;
        }
        json_error_t je;
        json_t *c = json_loads(line, 0, &je);
        if (!c) {
            lisa_log_error("lisa-sft: %s:%d: %s", path, lineno, je.text);
            rc = -1;
            break;
        }
        if (k == cap) {
            cap *= 2;
            seqs = lisa_realloc(seqs, cap * sizeof *seqs);
        }
        trn_err_t err;
        lisa_rc_t r = trn_sft_encode(tok, c, &seqs[k], &err);
        json_decref(c);
        if (r != LISA_OK) {
            lisa_log_error("lisa-sft: %s:%d: %s", path, lineno, err.msg);
            rc = -1;
            break;
        }
        k++;
    }
    fclose(f);
    lisa_free(&line);
    *out = seqs;
    *n = k;
    return rc;
}

/* Share of seqs[0..n) whose first turn greedy decoding reproduces; with
 * window > 0, from only the last `window` tokens of each prompt. */
static double
s_eval(trn_model_t *m, const trn_sft_seq_t *seqs, size_t n, long window,
       double temp)
{
    uint64_t rng = trn_rng_seed(12345);
    size_t hit = 0;
    for (size_t i = 0; i < n; i++) {
        bool ok = false;
        trn_err_t err;
        trn_sft_seq_t v = seqs[i];
        if (window > 0 && v.prompt_len > (size_t) window) {
            size_t cut = v.prompt_len - (size_t) window;
            v.ids += cut;
            v.mask += cut;
            v.n -= cut;
            v.prompt_len -= cut;
        }
        if (trn_sft_first_turn_match(m, &v, (float) temp, &rng, &ok, &err) ==
                LISA_OK &&
            ok)
            hit++;
    }
    return n ? (double) hit / (double) n : 0.0;
}

static int
s_copy(const char *from_dir, const char *name, const char *to_dir)
{
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    FILE *in = fopen(a, "rb");
    if (!in)
        return -1;
    FILE *out = fopen(b, "wb");
    if (!out) {
        fclose(in);
        return -1;
    }
    char buf[65536];
    size_t r;
    int rc = 0;
    while ((r = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, r, out) != r)
            rc = -1;
    fclose(in);
    if (fclose(out) != 0)
        rc = -1;
    return rc;
}

/* Training views: the tail of each conversation from `window` tokens
 * before its first assistant turn (borrowed arrays). */
static trn_sft_seq_t *
s_views(const s_opts_t *o, const trn_sft_seq_t *seqs, size_t ntrain)
{
    trn_sft_seq_t *views = lisa_calloc(ntrain, sizeof *views);
    double vtok = 0;
    for (size_t i = 0; i < ntrain; i++) {
        size_t cut = 0;
        bool whole = o->full_every > 0 && i % (size_t) o->full_every == 0;
        if (!whole && o->window > 0 && seqs[i].prompt_len > (size_t) o->window)
            cut = seqs[i].prompt_len - (size_t) o->window;
        views[i] = (trn_sft_seq_t){.ids = seqs[i].ids + cut,
                                   .mask = seqs[i].mask + cut,
                                   .n = seqs[i].n - cut,
                                   .prompt_len = seqs[i].prompt_len - cut};
        vtok += (double) views[i].n;
    }
    printf("sft: training sequences of %.0f tokens on average\n",
           vtok / (double) ntrain);
    return views;
}

/* A new order of the n training views (Fisher-Yates, xorshift). */
static void
s_shuffle(size_t *order, size_t n, uint64_t *rs)
{
    for (size_t i = n; i > 1; i--) {
        *rs ^= *rs << 13;
        *rs ^= *rs >> 7;
        *rs ^= *rs << 17;
        size_t r = (size_t) (*rs % i), t = order[i - 1];
        order[i - 1] = order[r];
        order[r] = t;
    }
}

/* The next batch of views, in shuffled passes over the training set. */
static void
s_fill(trn_sft_seq_t *batch, size_t nb, const trn_sft_seq_t *views,
       size_t *order, size_t ntrain, size_t *pos, uint64_t *rs)
{
    for (size_t j = 0; j < nb; j++) {
        if (*pos == ntrain) {
            s_shuffle(order, ntrain, rs);
            *pos = 0;
        }
        batch[j] = views[order[(*pos)++]];
    }
}

/* The learning rate of `step` (from 1): linear warmup over 20 steps,
 * cosine decay to 10% at --steps. */
static double
s_lr(const s_opts_t *o, long step)
{
    double frac = (double) (step - 1) / (double) o->steps;
    double warm = step < 20 ? (double) step / 20.0 : 1.0;
    return o->lr * warm *
           (0.1 + 0.45 * (1.0 + cos(3.14159265358979323846 * frac)));
}

/* Copies the tokenizer files from tokdir into the output directory where
 * they are missing. */
static int
s_tokenizer_files(const char *tokdir, const char *out)
{
    static const char *const files[] = {"tokenizer.json",
                                        "tokenizer_config.json"};
    for (size_t i = 0; i < 2; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        FILE *f = fopen(p, "rb");
        if (f) {
            fclose(f);
            continue;
        }
        if (s_copy(tokdir, files[i], out) != 0) {
            lisa_log_error("lisa-sft: cannot copy %s", files[i]);
            return -1;
        }
    }
    return 0;
}

/* Mean NLL and token accuracy of seqs[0..n) under the backend (forward
 * only), in batches of `bs`; the out's loss is per marked token. */
static int
s_nll(trn_backend_t *b, const trn_step_cfg_t *scfg, const trn_sft_seq_t *seqs,
      size_t n, size_t bs, trn_sft_out_t *out, trn_err_t *err)
{
    double nll = 0, hits = 0, toks = 0;
    for (size_t a = 0; a < n; a += bs) {
        size_t k = n - a < bs ? n - a : bs;
        trn_sft_batch_t sb;
        if (trn_sft_batch_make(seqs + a, k, &sb, err) != LISA_OK)
            return -1;
        float *logp = lisa_calloc(sb.offs[k], sizeof *logp);
        lisa_rc_t rc = b->ops->logprobs(b, scfg, &sb.r, logp, err);
        trn_sft_out_t o;
        if (rc == LISA_OK) {
            trn_sft_batch_nll(&sb, logp, &o);
            nll += o.loss * o.tokens;
            hits += o.accuracy * o.tokens;
            toks += o.tokens;
        }
        lisa_free(&logp);
        trn_sft_batch_clear(&sb);
        if (rc != LISA_OK)
            return -1;
    }
    *out = (trn_sft_out_t){.loss = toks > 0 ? nll / toks : 0,
                           .tokens = toks,
                           .accuracy = toks > 0 ? hits / toks : 0};
    return 0;
}

/* Opens the backend: on --model, or on a random model of --config written
 * to the output directory first (the backends load a directory). */
static trn_backend_t *
s_backend_open(const s_opts_t *o, const char *tokdir, trn_err_t *err)
{
    if (o->model)
        return trn_backend_new(o->backend, o->model, (int) o->threads, false,
                               err);
    trn_config_t cfg;
    if (trn_config_load(o->config, &cfg, err) != LISA_OK)
        return NULL;
    trn_model_t *m = trn_model_new_random(&cfg, (uint64_t) o->seed,
                                          (float) o->std, (int) o->threads);
    if (!m) {
        snprintf(err->msg, sizeof err->msg, "invalid model configuration");
        return NULL;
    }
    lisa_rc_t rc = trn_model_save(m, o->out, TRN_SAVE_F32, err);
    trn_model_destroy(&m);
    if (rc != LISA_OK || s_tokenizer_files(tokdir, o->out) != 0)
        return NULL;
    return trn_backend_new(o->backend, o->out, (int) o->threads, false, err);
}

/* lisa-sft --backend: the same data, batches and schedule as the default
 * path, each step a backend train_step over the batch as rollouts. */
static int
s_backend_main(const s_opts_t *o, lisa_tokenizer_t *tok, const char *tokdir)
{
    trn_err_t err = {0};
    trn_sft_seq_t *seqs = NULL, *batch = NULL, *views = NULL;
    size_t n = 0, *order = NULL;
    int rc = 1;
    trn_backend_t *b = NULL;
    if (s_load(o->data, tok, &seqs, &n) != 0)
        goto out;
    b = s_backend_open(o, tokdir, &err);
    if (!b) {
        lisa_log_error("lisa-sft: %s", err.msg);
        goto out;
    }
    const trn_config_t *mc = b->ops->config(b);
    if ((size_t) mc->vocab_size < lisa_tokenizer_vocab_size(tok)) {
        lisa_log_error("lisa-sft: model vocabulary smaller than the "
                       "tokenizer's");
        goto out;
    }
    size_t hold = (size_t) o->hold < n ? (size_t) o->hold : 0;
    size_t ntrain = n - hold;
    if (ntrain == 0) {
        lisa_log_error("lisa-sft: no training conversations");
        goto out;
    }
    size_t neval = (size_t) o->eval < hold ? (size_t) o->eval : hold;
    size_t tokens = 0;
    for (size_t i = 0; i < n; i++)
        tokens += seqs[i].n;
    printf("sft: %zu conversations (%zu held out), %.0f tokens each on "
           "average, %zu parameters, backend %s\n",
           n, hold, (double) tokens / (double) n, trn_config_num_params(mc),
           b->ops->name);
    fflush(stdout);
    trn_sft_cfg_t sc = trn_sft_defaults();
    trn_step_cfg_t scfg = trn_sft_step_cfg(&sc);
    order = lisa_malloc(ntrain * sizeof *order);
    for (size_t i = 0; i < ntrain; i++)
        order[i] = i;
    uint64_t rs = (uint64_t) o->seed * 0x9e3779b97f4a7c15ull + 1;
    size_t pos = ntrain;
    batch = lisa_calloc((size_t) o->batch, sizeof *batch);
    views = s_views(o, seqs, ntrain);
    double t0 = s_now();
    trn_sft_out_t ev = {0}; /* the last held-out evaluation */
    long step;
    for (step = 1; step <= o->steps; step++) {
        if ((o->minutes > 0 && s_now() - t0 > o->minutes * 60.0) ||
            (o->stop > 0 && step > o->stop))
            break;
        s_fill(batch, (size_t) o->batch, views, order, ntrain, &pos, &rs);
        scfg.optim.lr = s_lr(o, step);
        trn_sft_batch_t sb;
        if (trn_sft_batch_make(batch, (size_t) o->batch, &sb, &err) !=
            LISA_OK) {
            lisa_log_error("lisa-sft: step %ld: %s", step, err.msg);
            goto out;
        }
        bool print = step % 10 == 0 || step == 1;
        trn_sft_out_t so = {0};
        lisa_rc_t r = LISA_OK;
        if (print) { /* the batch's NLL before the step */
            float *logp = lisa_calloc(sb.offs[sb.r.n_seqs], sizeof *logp);
            r = b->ops->logprobs(b, &scfg, &sb.r, logp, &err);
            if (r == LISA_OK)
                trn_sft_batch_nll(&sb, logp, &so);
            lisa_free(&logp);
        }
        trn_step_out_t st;
        if (r == LISA_OK)
            r = b->ops->train_step(b, &scfg, &sb.r, &st, &err);
        trn_sft_batch_clear(&sb);
        if (r != LISA_OK) {
            lisa_log_error("lisa-sft: step %ld: %s", step, err.msg);
            goto out;
        }
        if (st.skipped)
            lisa_log_warn("lisa-sft: step %ld: non-finite gradient, no "
                          "update",
                          step);
        if (print)
            printf("step %ld loss %.4f token_acc %.3f grad_norm %.3f lr "
                   "%.2e  %.0fs\n",
                   step, so.loss, so.accuracy, st.grad_norm, scfg.optim.lr,
                   s_now() - t0);
        if (neval && step % o->eval_every == 0) {
            if (s_nll(b, &scfg, seqs + ntrain, neval, (size_t) o->batch, &ev,
                      &err) != 0) {
                lisa_log_error("lisa-sft: evaluation: %s", err.msg);
                goto out;
            }
            printf("step %ld held-out NLL on %zu: %.4f token_acc %.3f\n", step,
                   neval, ev.loss, ev.accuracy);
        }
        fflush(stdout);
    }
    if (neval) {
        /* the evaluation after the last step, unless it just ran */
        if ((step == 1 || (step - 1) % o->eval_every != 0) &&
            s_nll(b, &scfg, seqs + ntrain, neval, (size_t) o->batch, &ev,
                  &err) != 0) {
            lisa_log_error("lisa-sft: evaluation: %s", err.msg);
            goto out;
        }
        printf("final held-out NLL on %zu: %.4f token_acc %.3f\n", neval,
               ev.loss, ev.accuracy);
    }
    if (b->ops->save(b, o->out, TRN_SAVE_F32, &err) != LISA_OK) {
        lisa_log_error("lisa-sft: save: %s", err.msg);
        goto out;
    }
    if (s_tokenizer_files(tokdir, o->out) != 0)
        goto out;
    printf("saved %s after %ld steps (%.0fs)\n", o->out, step - 1,
           s_now() - t0);
    rc = 0;
out:
    lisa_free(&order);
    lisa_free(&batch);
    lisa_free(&views);
    for (size_t i = 0; i < n; i++)
        trn_sft_seq_clear(&seqs[i]);
    lisa_free(&seqs);
    trn_backend_destroy(&b);
    return rc;
}

int
main(int argc, char **argv)
{
    s_opts_t o;
    if (s_parse(argc, argv, &o) != 0)
        return s_usage();
    const char *tokdir = o.tokenizer ? o.tokenizer : o.model;
    lisa_tokenizer_t *tok = lisa_tokenizer_new_from_dir(tokdir);
    if (!tok) {
        lisa_log_error("lisa-sft: no tokenizer in %s", tokdir);
        return 1;
    }
    if (o.backend) {
        int brc = s_backend_main(&o, tok, tokdir);
        lisa_tokenizer_destroy(&tok);
        return brc;
    }
    trn_model_t *m = NULL;
    trn_err_t err;
    int rc = 1;
    trn_sft_seq_t *seqs = NULL;
    size_t n = 0;
    trn_adamw_t *opt = NULL;
    if (o.model) {
        if (trn_model_load(o.model, (int) o.threads, &m, &err) != LISA_OK)
            goto out;
    } else {
        trn_config_t cfg;
        if (trn_config_load(o.config, &cfg, &err) != LISA_OK)
            goto out;
        m = trn_model_new_random(&cfg, (uint64_t) o.seed, (float) o.std,
                                 (int) o.threads);
        if (!m)
            goto out;
    }
    if ((size_t) trn_model_config(m)->vocab_size <
        lisa_tokenizer_vocab_size(tok)) {
        lisa_log_error("lisa-sft: model vocabulary smaller than the "
                       "tokenizer's");
        goto out;
    }
    if (s_load(o.data, tok, &seqs, &n) != 0)
        goto out;
    size_t hold = (size_t) o.hold < n ? (size_t) o.hold : 0;
    size_t ntrain = n - hold;
    if (ntrain == 0) {
        lisa_log_error("lisa-sft: no training conversations");
        goto out;
    }
    size_t neval = (size_t) o.eval < hold ? (size_t) o.eval : hold;
    size_t tokens = 0;
    for (size_t i = 0; i < n; i++)
        tokens += seqs[i].n;
    printf("sft: %zu conversations (%zu held out), %.0f tokens each on "
           "average, %zu parameters\n",
           n, hold, (double) tokens / (double) n, trn_model_num_params(m));
    fflush(stdout);
    opt = trn_adamw_new(trn_model_num_params(m));
    trn_sft_cfg_t cfg = trn_sft_defaults();
    size_t *order = lisa_malloc(ntrain * sizeof *order);
    for (size_t i = 0; i < ntrain; i++)
        order[i] = i;
    uint64_t rs = (uint64_t) o.seed * 0x9e3779b97f4a7c15ull + 1;
    size_t pos = ntrain;
    trn_sft_seq_t *batch = lisa_calloc((size_t) o.batch, sizeof *batch);
    trn_sft_seq_t *views = s_views(&o, seqs, ntrain);
    double t0 = s_now(), ema = -1;
    long step;
    for (step = 1; step <= o.steps; step++) {
        if ((o.minutes > 0 && s_now() - t0 > o.minutes * 60.0) ||
            (o.stop > 0 && step > o.stop))
            break;
        s_fill(batch, (size_t) o.batch, views, order, ntrain, &pos, &rs);
        cfg.optim.lr = s_lr(&o, step);
        trn_sft_out_t so;
        if (trn_sft_step(m, opt, &cfg, batch, (size_t) o.batch, &so, &err) !=
            LISA_OK) {
            lisa_log_error("lisa-sft: step %ld: %s", step, err.msg);
            goto out_loop;
        }
        ema = ema < 0 ? so.loss : 0.9 * ema + 0.1 * so.loss;
        if (step % 10 == 0 || step == 1)
            printf("step %ld loss %.4f (ema %.4f) token_acc %.3f grad_norm "
                   "%.3f lr %.2e  %.0fs\n",
                   step, so.loss, ema, so.accuracy, so.grad_norm, cfg.optim.lr,
                   s_now() - t0);
        if (neval && step % o.eval_every == 0) {
            printf("step %ld first-turn match on %zu held out: %.3f\n", step,
                   neval, s_eval(m, seqs + ntrain, neval, 0, o.eval_temp));
            if (o.window > 0)
                printf("step %ld first-turn match from the last %ld prompt "
                       "tokens: %.3f\n",
                       step, o.window,
                       s_eval(m, seqs + ntrain, neval, o.window, o.eval_temp));
        }
        fflush(stdout);
    }
    if (neval)
        printf("final first-turn match on %zu held out: %.3f\n", neval,
               s_eval(m, seqs + ntrain, neval, 0, o.eval_temp));
    if (trn_model_save(m, o.out, TRN_SAVE_F32, &err) != LISA_OK)
        goto out_loop;
    if (!o.model) {
        static const char *const files[] = {"tokenizer.json",
                                            "tokenizer_config.json"};
        for (size_t i = 0; i < 2; i++)
            if (s_copy(tokdir, files[i], o.out) != 0) {
                lisa_log_error("lisa-sft: cannot copy %s", files[i]);
                goto out_loop;
            }
    }
    printf("saved %s after %ld steps (%.0fs)\n", o.out, step - 1, s_now() - t0);
    rc = 0;
out_loop:
    lisa_free(&order);
    lisa_free(&batch);
    lisa_free(&views);
out:
    if (rc && m == NULL)
        lisa_log_error("lisa-sft: %s", err.msg);
    for (size_t i = 0; i < n; i++)
        trn_sft_seq_clear(&seqs[i]);
    lisa_free(&seqs);
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
    lisa_tokenizer_destroy(&tok);
    return rc;
}
