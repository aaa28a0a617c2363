/*
 * trn_sft: render + mark conversations, and the NLL step over them.
 * See trn_sft.h.
 */
#include "trn_sft.h"

#include "lisa/lisa_chat.h"
#include "lisa/lisa_ids.h"
#include "lisa/lisa_mem.h"
#include "trn_err.h"
#include "trn_sampler.h"

#include <math.h>
#include <string.h>

trn_sft_cfg_t
trn_sft_defaults(void)
{
    trn_sft_cfg_t c = {.optim = trn_adamw_defaults(), .grad_clip = 1.0};
    c.optim.lr = 1e-3;
    c.optim.beta2 = 0.95;
    return c;
}

void
trn_sft_seq_clear(trn_sft_seq_t *s)
{
    lisa_free(&s->ids);
    lisa_free(&s->mask);
    s->n = 0;
    s->prompt_len = 0;
}

/* Renders messages[0..k) (with the generation prompt when gen) with the
 * template variant `tmpl`. */
static lisa_rc_t
s_render(json_t *msgs, json_t *tools, size_t k, bool gen,
         lisa_chat_template_t tmpl, char **out, size_t *len, trn_err_t *err)
{
    json_t *sub = json_array();
    for (size_t i = 0; i < k; i++)
        json_array_append(sub, json_array_get(msgs, i));
    lisa_chat_opts_t o = lisa_chat_opts_default();
    o.tmpl = tmpl;
    o.add_generation_prompt = gen;
    const char *why = NULL;
    lisa_rc_t rc = lisa_chat_render(sub, tools, &o, out, len, &why);
    json_decref(sub);
    if (rc != LISA_OK)
        return trn_fail(err, rc, "sft: chat template: %s", why ? why : "?");
    return LISA_OK;
}

/* Appends the tokens of text[a..b) with mask value `m`. */
static lisa_rc_t
s_piece(lisa_tokenizer_t *tok, lisa_ids_t *ids, uint8_t **mask, size_t *cap,
        const char *text, size_t a, size_t b, uint8_t m, trn_err_t *err)
{
    size_t before = lisa_ids_len(ids);
    if (b > a &&
        lisa_tokenizer_encode(tok, text + a, b - a, true, ids) != LISA_OK)
        return trn_fail(err, LISA_INVALID,
                        "sft: conversation does not "
                        "tokenize (or is too long)");
    size_t after = lisa_ids_len(ids);
    if (after > *cap) {
        size_t nc = *cap ? *cap : 1024;
        while (nc < after)
            nc *= 2;
        *mask = lisa_realloc(*mask, nc);
        *cap = nc;
    }
    memset(*mask + before, m, after - before);
    return LISA_OK;
}

lisa_rc_t
trn_sft_encode(lisa_tokenizer_t *tok, json_t *conv, trn_sft_seq_t *out,
               trn_err_t *err)
{
    memset(out, 0, sizeof *out);
    json_t *msgs = json_object_get(conv, "messages");
    json_t *tools = json_object_get(conv, "tools");
    if (!json_is_array(msgs))
        return trn_fail(err, LISA_INVALID, "sft: no messages array");
    if (tools && !json_is_array(tools))
        tools = NULL;
    /* The model's own template, as the gateway selects it (no template:
     * Qwen3's). */
    lisa_chat_template_t tmpl;
    const char *why = NULL;
    if (lisa_chat_template_detect(lisa_tokenizer_chat_template(tok), &tmpl,
                                  &why) == LISA_INVALID)
        return trn_fail(err, LISA_INVALID, "sft: %s", why);
    /* The whole conversation, followed by an empty user turn so that no
     * assistant turn is the template's last one (Qwen3's template adds an
     * empty think block to the last turn after the last query; a turn
     * that is history, as the gateway shows it, has none). */
    size_t nm = json_array_size(msgs);
    json_t *ext = json_array();
    for (size_t i = 0; i < nm; i++)
        json_array_append(ext, json_array_get(msgs, i));
    json_array_append_new(
        ext, json_pack("{s:s,s:s}", "role", "user", "content", ""));
    char *full = NULL;
    size_t fl = 0;
    lisa_rc_t rc = s_render(ext, tools, nm + 1, false, tmpl, &full, &fl, err);
    json_decref(ext);
    if (rc != LISA_OK)
        return rc;
    lisa_ids_t *ids = lisa_ids_new(TRN_SFT_MAX_TOKENS);
    uint8_t *mask = NULL;
    size_t cap = 0, done = 0; /* bytes of `full` emitted */
    bool any = false;
    static const char end[] = "<|im_end|>";
    for (size_t k = 0; k < nm && rc == LISA_OK; k++) {
        json_t *m = json_array_get(msgs, k);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "assistant") != 0)
            continue;
        char *a = NULL;
        size_t al = 0;
        rc = s_render(msgs, tools, k, true, tmpl, &a, &al, err);
        if (rc != LISA_OK)
            break;
        /* The prompt of turn k must be a prefix of the whole rendering. */
        const char *e = al <= fl && memcmp(a, full, al) == 0
                            ? strstr(full + al, end)
                            : NULL;
        lisa_free(&a);
        if (!e || al < done) {
            rc = trn_fail(err, LISA_INVALID,
                          "sft: the template's rendering is not "
                          "prefix-stable at message %zu",
                          k);
            break;
        }
        size_t el = (size_t) (e - full) + sizeof end - 1;
        rc = s_piece(tok, ids, &mask, &cap, full, done, al, 0, err);
        if (rc == LISA_OK && !any)
            out->prompt_len = lisa_ids_len(ids);
        if (rc == LISA_OK)
            rc = s_piece(tok, ids, &mask, &cap, full, al, el, 1, err);
        done = el;
        any = true;
    }
    if (rc == LISA_OK && !any)
        rc = trn_fail(err, LISA_INVALID, "sft: no assistant turn");
    if (rc == LISA_OK) {
        size_t n = lisa_ids_len(ids);
        out->ids = lisa_malloc(n * sizeof *out->ids);
        memcpy(out->ids, lisa_ids_data(ids), n * sizeof *out->ids);
        out->mask = mask;
        mask = NULL;
        out->n = n;
    }
    lisa_free(&full);
    lisa_free(&mask);
    lisa_ids_destroy(&ids);
    return rc;
}

/* The tokens of a batch of conversations: within TRN_MAX_BATCH_TOKENS,
 * and some. */
static lisa_rc_t
s_batch_tokens(const trn_sft_seq_t *seqs, size_t n, size_t *total,
               trn_err_t *err)
{
    *total = 0;
    for (size_t i = 0; i < n; i++) {
        if (seqs[i].n > TRN_MAX_BATCH_TOKENS - *total)
            return trn_fail(err, LISA_TOOLARGE, "sft: batch too large");
        *total += seqs[i].n;
    }
    if (*total == 0)
        return trn_fail(err, LISA_INVALID, "sft: empty batch");
    return LISA_OK;
}

lisa_rc_t
trn_sft_step(trn_model_t *m, trn_adamw_t *opt, const trn_sft_cfg_t *cfg,
             const trn_sft_seq_t *seqs, size_t n, trn_sft_out_t *out,
             trn_err_t *err)
{
    memset(out, 0, sizeof *out);
    size_t total = 0;
    lisa_rc_t brc = s_batch_tokens(seqs, n, &total, err);
    if (brc != LISA_OK)
        return brc;
    int32_t *tokens = lisa_malloc(total * sizeof *tokens);
    int32_t *targets = lisa_malloc(total * sizeof *targets);
    size_t *offs = lisa_malloc((n + 1) * sizeof *offs);
    float *logp = lisa_malloc(total * sizeof *logp);
    float *dlogp = lisa_calloc(total, sizeof *dlogp);
    size_t o = 0, marked = 0;
    for (size_t i = 0; i < n; i++) {
        offs[i] = o;
        const trn_sft_seq_t *s = &seqs[i];
        for (size_t t = 0; t < s->n; t++) {
            tokens[o + t] = s->ids[t];
            bool tgt = t + 1 < s->n && s->mask[t + 1];
            targets[o + t] = tgt ? s->ids[t + 1] : -1;
            marked += tgt;
        }
        o += s->n;
    }
    offs[n] = o;
    lisa_rc_t rc = LISA_OK;
    if (marked == 0) {
        rc = trn_fail(err, LISA_INVALID, "sft: no marked tokens");
        goto out;
    }
    trn_model_zero_grad(m);
    trn_batch_t b = {.tokens = tokens,
                     .targets = targets,
                     .n_tokens = total,
                     .seq_offsets = offs,
                     .n_seqs = n,
                     .temperature = 1.0f};
    rc = trn_model_forward(m, &b, logp, NULL, err);
    if (rc != LISA_OK)
        goto out;
    double nll = 0, hits = 0;
    for (size_t t = 0; t < total; t++) {
        if (targets[t] < 0)
            continue;
        nll -= (double) logp[t];
        hits += (double) (logp[t] > logf(0.5f));
        dlogp[t] = -1.0f / (float) marked;
    }
    rc = trn_model_backward(m, dlogp, NULL, err);
    if (rc != LISA_OK)
        goto out;
    size_t np = trn_model_num_params(m);
    double norm = 0;
    if (cfg->grad_clip > 0) {
        if (trn_grad_clip(trn_model_grads(m), np, cfg->grad_clip, &norm) !=
            LISA_OK) {
            rc = trn_fail(err, LISA_INVALID, "sft: non-finite gradient");
            goto out;
        }
    } else {
        norm = trn_grad_norm(trn_model_grads(m), np);
    }
    rc = trn_adamw_step(opt, &cfg->optim, trn_model_params(m),
                        trn_model_grads(m), np, err);
    out->loss = nll / (double) marked;
    out->tokens = (double) marked;
    out->accuracy = hits / (double) marked;
    out->grad_norm = norm;
out:
    lisa_free(&tokens);
    lisa_free(&targets);
    lisa_free(&offs);
    lisa_free(&logp);
    lisa_free(&dlogp);
    return rc;
}

void
trn_sft_batch_clear(trn_sft_batch_t *b)
{
    lisa_free(&b->offs);
    lisa_free(&b->tokens);
    lisa_free(&b->mask);
    lisa_free(&b->rollout_logp);
    lisa_free(&b->group);
    lisa_free(&b->score);
    memset(b, 0, sizeof *b);
}

lisa_rc_t
trn_sft_batch_make(const trn_sft_seq_t *seqs, size_t n, trn_sft_batch_t *out,
                   trn_err_t *err)
{
    memset(out, 0, sizeof *out);
    size_t total = 0;
    lisa_rc_t brc = s_batch_tokens(seqs, n, &total, err);
    if (brc != LISA_OK)
        return brc;
    out->offs = lisa_malloc((n + 1) * sizeof *out->offs);
    out->tokens = lisa_malloc(total * sizeof *out->tokens);
    out->mask = lisa_malloc(total);
    out->rollout_logp = lisa_calloc(total, sizeof *out->rollout_logp);
    out->group = lisa_malloc(n * sizeof *out->group);
    out->score = lisa_malloc(n * sizeof *out->score);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const trn_sft_seq_t *s = &seqs[i];
        out->offs[i] = o;
        memcpy(out->tokens + o, s->ids, s->n * sizeof *s->ids);
        memcpy(out->mask + o, s->mask, s->n);
        /* nothing predicts a sequence's first token (trn_sft_step skips
         * it too; trn_step refuses it marked) */
        if (s->n > 0)
            out->mask[o] = 0;
        for (size_t t = 0; t < s->n; t++)
            out->marked += out->mask[o + t];
        out->group[i] = (int64_t) i;
        out->score[i] = 1.0;
        o += s->n;
    }
    out->offs[n] = o;
    if (out->marked == 0) {
        trn_sft_batch_clear(out);
        return trn_fail(err, LISA_INVALID, "sft: no marked tokens");
    }
    out->r = (trn_rollouts_t){.n_seqs = n,
                              .seq_offsets = out->offs,
                              .tokens = out->tokens,
                              .mask = out->mask,
                              .rollout_logp = out->rollout_logp,
                              .old_logp = NULL,
                              .group = out->group,
                              .score = out->score};
    return LISA_OK;
}

trn_step_cfg_t
trn_sft_step_cfg(const trn_sft_cfg_t *c)
{
    trn_step_cfg_t s = trn_step_defaults();
    s.adv = trn_adv_defaults();
    s.adv.kind = TRN_ADV_GRPO;
    /* a group of one has mean 0 and std 1: with normalisation the
     * advantage would be 1 / (1 + eps), without it exactly 1 */
    s.adv.norm_by_std = false;
    s.loss = trn_loss_defaults();
    s.loss.agg = TRN_AGG_TOKEN_MEAN;
    s.loss.kl_coef = 0;
    s.loss.entropy_coef = 0;
    s.kl_reward_coef = 0;
    s.temperature = 1.0f;
    s.optim = c->optim;
    /* trn_sft_step's "no clipping" as a bound no norm reaches (the step
     * wants a positive one) */
    s.grad_clip = c->grad_clip > 0 ? c->grad_clip : 1e30;
    s.bypass = false;
    s.is_threshold = 0;
    s.rs_level = TRN_RS_OFF;
    s.mini_groups = 0;
    s.ppo_epochs = 1;
    return s;
}

void
trn_sft_batch_nll(const trn_sft_batch_t *b, const float *logp,
                  trn_sft_out_t *out)
{
    memset(out, 0, sizeof *out);
    size_t total = b->r.n_seqs ? b->offs[b->r.n_seqs] : 0;
    double nll = 0, hits = 0;
    for (size_t t = 0; t < total; t++) {
        if (!b->mask[t])
            continue;
        nll -= (double) logp[t];
        hits += (double) (logp[t] > logf(0.5f));
    }
    if (b->marked == 0)
        return;
    out->loss = nll / (double) b->marked;
    out->tokens = (double) b->marked;
    out->accuracy = hits / (double) b->marked;
}

lisa_rc_t
trn_sft_first_turn_match(trn_model_t *m, const trn_sft_seq_t *seq,
                         float temperature, uint64_t *rng, bool *match,
                         trn_err_t *err)
{
    *match = false;
    size_t p = seq->prompt_len, turn = 0;
    while (p + turn < seq->n && seq->mask[p + turn])
        turn++;
    if (p == 0 || turn == 0)
        return trn_fail(err, LISA_INVALID, "sft: no prompt or no turn");
    size_t V = (size_t) trn_model_config(m)->vocab_size;
    size_t bs = 16, nb = (p + turn + bs) / bs;
    trn_kv_geom_t g = {.block_size = bs,
                       .n_blocks = nb,
                       .max_seqs = 1,
                       .max_blocks = nb,
                       .max_tokens = p};
    trn_kv_t *kv = trn_kv_new(m, &g);
    if (!kv)
        return trn_fail(err, LISA_INVALID, "sft: cannot make a KV cache");
    float *logits = lisa_malloc(V * sizeof *logits);
    int32_t *blocks = lisa_malloc(nb * sizeof *blocks);
    size_t at = 0, nn = p;
    const int32_t *toks = seq->ids;
    lisa_rc_t rc = LISA_OK;
    bool ok = true;
    for (size_t t = 0; t < turn && ok; t++) {
        trn_gen_seq_t gs;
        trn_gen_seq_contiguous(&gs, blocks, &g, 0, at, toks, nn);
        rc = trn_model_step(m, kv, 1, &gs, logits, err);
        at += nn;
        if (rc != LISA_OK)
            break;
        trn_sampling_t smp = {.temperature = temperature, .top_p = 1.0f};
        uint64_t greedy_rng = 1;
        int32_t tok = -1;
        float lp;
        rc = trn_sample(logits, V, &smp, rng ? rng : &greedy_rng, &tok, &lp,
                        err);
        if (rc != LISA_OK)
            break;
        ok = tok == seq->ids[p + t];
        toks = &seq->ids[p + t];
        nn = 1;
    }
    *match = rc == LISA_OK && ok;
    lisa_free(&logits);
    lisa_free(&blocks);
    trn_kv_destroy(&kv);
    return rc;
}
