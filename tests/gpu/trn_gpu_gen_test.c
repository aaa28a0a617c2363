/*
 * GPU generation tests: KV-cache prefill and decode logits against the CPU
 * reference model step by step; sampled tokens' logprobs against a training
 * forward at the same temperature; greedy equals argmax; top-p never picks
 * outside the nucleus; sampled frequencies follow the distribution.
 * Closes with "N passed, N failed".
 */
#include "trn_cuda.h"
#include "trn_gpu_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int s_pass, s_fail;

static void
s_check(const char *what, double v, double tol)
{
    int ok = v <= tol && !isnan(v);
    printf("%-60s %.3e (tol %.0e) %s\n", what, v, tol, ok ? "ok" : "FAIL");
    if (ok)
        s_pass++;
    else
        s_fail++;
}

static double
s_rel(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
        den += (double) b[i] * b[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

static int
s_argmax(const float *x, int n)
{
    int a = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[a])
            a = i;
    return a;
}

static trn_config_t
s_cfg(void)
{
    trn_config_t c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 128;
    c.intermediate_size = 256;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 32;
    c.vocab_size = 512;
    c.max_position_embeddings = 4096;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1e6;
    c.tie_word_embeddings = 1;
    return c;
}

/* Recorded decode steps (graphs) against direct launches and the CPU:
 * n sequences (at most 5) in `sl` slots, prompts of lens[i] tokens, then
 * greedy one-token steps. With fewer sequences than slots the step runs
 * as a bucket with padding rows that must leave the cache alone; one
 * sequence alone takes the products that make their input inside. */
static int
s_graph_steps(trn_model_t *cpu, trn_gpu_model_t *gpu, int V, int n, int sl,
              const size_t *slots, size_t *lens, const char *what)
{
    enum { STEPS = 6 };
    trn_err_t err = {{0}};
    int32_t prompts[5][16];
    unsigned seed = 21;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < lens[i]; j++)
            prompts[i][j] = (int32_t) (rand_r(&seed) % (unsigned) V);
    trn_kv_t *ckv = trn_kv_new(cpu, (size_t) sl, 64);
    trn_gpu_kv_t *ga = trn_gpu_kv_new(gpu, (size_t) sl, 64, &err);
    trn_gpu_kv_t *gb = trn_gpu_kv_new(gpu, (size_t) sl, 64, &err);
    if (!ckv || !ga || !gb) {
        printf("caches: %s\n", err.msg);
        return -1;
    }
    trn_gpu_kv_set_graphs(gb, 0);
    float *lc = malloc((size_t) n * V * 4), *la = malloc((size_t) n * V * 4);
    float *lb = malloc((size_t) n * V * 4);
    const int32_t *tk[5];
    for (int i = 0; i < n; i++)
        tk[i] = prompts[i];
    double worst_ab = 0, worst_ac = 0;
    size_t *nn = lens;
    size_t one[5] = {1, 1, 1, 1, 1};
    int32_t next[5];
    for (int st = 0; st <= STEPS; st++) {
        if (trn_model_step(cpu, ckv, (size_t) n, slots, tk, nn, lc, &err) !=
                LISA_OK ||
            trn_gpu_model_step(gpu, ga, (size_t) n, slots, tk, nn, NULL, NULL,
                               NULL, la, &err) != LISA_OK ||
            trn_gpu_model_step(gpu, gb, (size_t) n, slots, tk, nn, NULL, NULL,
                               NULL, lb, &err) != LISA_OK) {
            printf("graph steps: %s\n", err.msg);
            return -1;
        }
        worst_ab = fmax(worst_ab, s_rel(la, lb, (size_t) n * V));
        worst_ac = fmax(worst_ac, s_rel(la, lc, (size_t) n * V));
        for (int i = 0; i < n; i++) {
            next[i] = (int32_t) s_argmax(lc + (size_t) i * V, V);
            tk[i] = &next[i];
        }
        nn = one;
    }
    char msg[120];
    snprintf(msg, sizeof msg, "recorded vs direct decode logits, %s (max rel)",
             what);
    s_check(msg, worst_ab, 1e-5);
    snprintf(msg, sizeof msg, "recorded decode logits vs CPU, %s (max rel)",
             what);
    s_check(msg, worst_ac, 3e-2);
    trn_kv_destroy(&ckv);
    trn_gpu_kv_destroy(&ga);
    trn_gpu_kv_destroy(&gb);
    free(lc), free(la), free(lb);
    return 0;
}

int
main(void)
{
    if (trn_cuda_device_count() < 1 || trn_cuda_set_device(0) != LISA_OK) {
        printf("no CUDA device\n0 passed, 1 failed\n");
        return 1;
    }
    trn_err_t err = {{0}};
    trn_config_t cfg = s_cfg();
    int V = (int) cfg.vocab_size;
    trn_model_t *cpu = trn_model_new_random(&cfg, 77, 0.08f, 4);
    trn_gpu_model_t *gpu = trn_gpu_model_new(cpu, &err);
    if (!cpu || !gpu) {
        printf("setup: %s\n0 passed, 1 failed\n", err.msg);
        return 1;
    }

    /* 1. prefill three prompts, then decode greedily on both backends. */
    {
        enum { N = 3 };
        size_t lens[N] = {20, 35, 7}, slots[N] = {2, 0, 1};
        int32_t *prompts[N];
        unsigned seed = 3;
        for (int i = 0; i < N; i++) {
            prompts[i] = malloc(lens[i] * 4);
            for (size_t j = 0; j < lens[i]; j++)
                prompts[i][j] = (int32_t) (rand_r(&seed) % (unsigned) V);
        }
        trn_kv_t *ckv = trn_kv_new(cpu, N, 256);
        trn_gpu_kv_t *gkv = trn_gpu_kv_new(gpu, N, 256, &err);
        float *lc = malloc((size_t) N * V * 4),
              *lg = malloc((size_t) N * V * 4);
        const int32_t *tk[N] = {prompts[0], prompts[1], prompts[2]};
        if (trn_model_step(cpu, ckv, N, slots, tk, lens, lc, &err) != LISA_OK ||
            trn_gpu_model_step(gpu, gkv, N, slots, tk, lens, NULL, NULL, NULL,
                               lg, &err) != LISA_OK) {
            printf("prefill: %s\n", err.msg);
            return 1;
        }
        s_check("prefill logits vs CPU (3 prompts, one call)",
                s_rel(lg, lc, (size_t) N * V), 2e-2);
        double worst = 0;
        int agree = 0;
        for (int st = 0; st < 15; st++) {
            int32_t next[N];
            size_t one[N] = {1, 1, 1};
            const int32_t *nt[N];
            for (int i = 0; i < N; i++) {
                next[i] = (int32_t) s_argmax(lc + (size_t) i * V, V);
                agree += next[i] == s_argmax(lg + (size_t) i * V, V);
                nt[i] = &next[i];
            }
            if (trn_model_step(cpu, ckv, N, slots, nt, one, lc, &err) !=
                    LISA_OK ||
                trn_gpu_model_step(gpu, gkv, N, slots, nt, one, NULL, NULL,
                                   NULL, lg, &err) != LISA_OK) {
                printf("decode: %s\n", err.msg);
                return 1;
            }
            worst = fmax(worst, s_rel(lg, lc, (size_t) N * V));
        }
        s_check("decode logits vs CPU, worst of 15 steps", worst, 3e-2);
        s_check("greedy choices that differ from CPU (of 45)",
                (double) (45 - agree), 3);
        s_check("cache length after prefill + 15 steps (slot 0)",
                fabs((double) trn_gpu_kv_len(gkv, 0) - 50.0), 0);
        /* a second turn on top of the cache: more tokens than slots, not
         * from position 0 (attention through the cache) */
        {
            size_t more[N] = {6, 2, 9};
            int32_t turn[N][9];
            const int32_t *mt[N];
            for (int i = 0; i < N; i++) {
                for (size_t j = 0; j < more[i]; j++)
                    turn[i][j] = (int32_t) (rand_r(&seed) % (unsigned) V);
                mt[i] = turn[i];
            }
            if (trn_model_step(cpu, ckv, N, slots, mt, more, lc, &err) !=
                    LISA_OK ||
                trn_gpu_model_step(gpu, gkv, N, slots, mt, more, NULL, NULL,
                                   NULL, lg, &err) != LISA_OK) {
                printf("second turn: %s\n", err.msg);
                return 1;
            }
            s_check("second-turn logits vs CPU (17 tokens over the cache)",
                    s_rel(lg, lc, (size_t) N * V), 3e-2);
        }
        trn_kv_destroy(&ckv);
        trn_gpu_kv_destroy(&gkv);
        free(lc), free(lg);
        for (int i = 0; i < N; i++)
            free(prompts[i]);
    }

    /* 2. sampled tokens' logprobs against a training forward. */
    {
        enum { N = 4, GEN = 24 };
        float temp = 0.8f;
        size_t plen[N] = {10, 20, 30, 40};
        int32_t seqs[N][40 + GEN];
        float lps[N][GEN];
        size_t slots[N] = {0, 1, 2, 3};
        unsigned seed = 11;
        for (int i = 0; i < N; i++)
            for (size_t j = 0; j < plen[i]; j++)
                seqs[i][j] = (int32_t) (rand_r(&seed) % (unsigned) V);
        trn_gpu_kv_t *kv = trn_gpu_kv_new(gpu, N, 128, &err);
        trn_sample_t sp[N];
        for (int i = 0; i < N; i++) {
            sp[i].temperature = temp;
            /* the threshold path and the temperature-only path */
            sp[i].top_p = i < 2 ? 0.9f : 1.0f;
            sp[i].top_k = 0;
            sp[i].seed = 1000u + (uint64_t) i;
        }
        size_t n_new[N];
        const int32_t *tk[N];
        int32_t out[N];
        float olp[N];
        for (int i = 0; i < N; i++) {
            n_new[i] = plen[i];
            tk[i] = seqs[i];
        }
        int ok = 1;
        for (int st = 0; st < GEN && ok; st++) {
            if (trn_gpu_model_step(gpu, kv, N, slots, tk, n_new, sp, out, olp,
                                   NULL, &err) != LISA_OK) {
                ok = 0;
                break;
            }
            for (int i = 0; i < N; i++) {
                seqs[i][plen[i] + (size_t) st] = out[i];
                lps[i][st] = olp[i];
                tk[i] = &seqs[i][plen[i] + (size_t) st];
                n_new[i] = 1;
            }
        }
        if (!ok) {
            printf("sampling: %s\n", err.msg);
            return 1;
        }
        double maxd = 0;
        for (int i = 0; i < N; i++) {
            size_t n = plen[i] + GEN;
            int32_t tg[40 + GEN];
            for (size_t j = 0; j < n; j++)
                tg[j] = j + 1 < n ? seqs[i][j + 1] : -1;
            size_t offs[2] = {0, n};
            trn_batch_t b = {seqs[i], tg, n, offs, 1, temp};
            float lp[40 + GEN];
            if (trn_gpu_model_forward(gpu, &b, lp, NULL, &err) != LISA_OK) {
                printf("forward: %s\n", err.msg);
                return 1;
            }
            for (int st = 0; st < GEN; st++)
                maxd = fmax(maxd,
                            fabs(lp[plen[i] + (size_t) st - 1] - lps[i][st]));
        }
        s_check("sampled logprob vs training forward at T=0.8 (max abs)", maxd,
                5e-2);
        trn_gpu_kv_destroy(&kv);
    }

    /* 3. greedy, top-p nucleus and sampled frequencies at one context. */
    {
        enum { SL = 64 };
        trn_gpu_kv_t *kv = trn_gpu_kv_new(gpu, SL, 8, &err);
        size_t slots[SL], one[SL];
        const int32_t *tk[SL];
        int32_t ctx = 5, out[SL];
        float olp[SL];
        float *lg = malloc((size_t) SL * V * 4);
        trn_sample_t sp[SL];
        for (int i = 0; i < SL; i++) {
            slots[i] = (size_t) i;
            one[i] = 1;
            tk[i] = &ctx;
            sp[i].temperature = 1.0f;
            sp[i].top_p = 1.0f;
            sp[i].top_k = 1;
            sp[i].seed = (uint64_t) i;
        }
        if (trn_gpu_model_step(gpu, kv, SL, slots, tk, one, sp, out, olp, lg,
                               &err) != LISA_OK) {
            printf("greedy: %s\n", err.msg);
            return 1;
        }
        int bad = 0;
        for (int i = 0; i < SL; i++)
            bad += out[i] != s_argmax(lg + (size_t) i * V, V);
        s_check("greedy (top_k=1) picks that are not the argmax", bad, 0);
        /* the distribution at this context */
        double *p = malloc((size_t) V * 8), mx = -1e30, z = 0;
        for (int j = 0; j < V; j++)
            mx = fmax(mx, lg[j]);
        for (int j = 0; j < V; j++)
            z += (p[j] = exp(lg[j] - mx));
        for (int j = 0; j < V; j++)
            p[j] /= z;
        /* nucleus of mass 0.5 */
        int *order = malloc((size_t) V * sizeof(int));
        for (int j = 0; j < V; j++)
            order[j] = j;
        for (int a = 0; a < V; a++)
            for (int b2 = a + 1; b2 < V; b2++)
                if (p[order[b2]] > p[order[a]]) {
                    int tmp = order[a];
                    order[a] = order[b2];
                    order[b2] = tmp;
                }
        char *in_nucleus = calloc((size_t) V, 1);
        double cum = 0;
        for (int a = 0; a < V && cum < 0.5; a++) {
            in_nucleus[order[a]] = 1;
            cum += p[order[a]];
        }
        int outside = 0;
        long *hist = calloc((size_t) V, sizeof(long));
        int draws = 0;
        for (int round = 0; round < 40; round++) {
            for (int i = 0; i < SL; i++) {
                trn_gpu_kv_reset(kv, (size_t) i);
                sp[i].top_k = 0;
                sp[i].top_p = round % 2 ? 0.5f : 1.0f;
                sp[i].seed = (uint64_t) (round * SL + i) * 7919u;
            }
            if (trn_gpu_model_step(gpu, kv, SL, slots, tk, one, sp, out, olp,
                                   NULL, &err) != LISA_OK) {
                printf("sampling: %s\n", err.msg);
                return 1;
            }
            for (int i = 0; i < SL; i++) {
                if (round % 2)
                    outside += !in_nucleus[out[i]];
                else {
                    hist[out[i]]++;
                    draws++;
                }
            }
        }
        s_check("top_p=0.5 draws outside the nucleus (of 1280)", outside, 0);
        double worst_z = 0;
        for (int a = 0; a < 5; a++) {
            int j = order[a];
            double e = p[j] * draws, sd = sqrt(draws * p[j] * (1 - p[j]));
            worst_z = fmax(worst_z, fabs(hist[j] - e) / (sd + 1e-9));
        }
        s_check("sampled frequency of top-5 tokens (worst z-score)", worst_z,
                4.5);
        free(p), free(order), free(in_nucleus), free(hist), free(lg);
        trn_gpu_kv_destroy(&kv);
    }
    /* 4. recorded decode steps against direct launches and the CPU: 5
     * sequences in 8 slots (3 padding rows), then one sequence alone */
    {
        size_t slots[5] = {6, 1, 3, 0, 4}, lens[5] = {9, 3, 14, 5, 11};
        if (s_graph_steps(cpu, gpu, V, 5, 8, slots, lens, "5 of 8 rows") ||
            s_graph_steps(cpu, gpu, V, 1, 4, slots + 2, lens + 2,
                          "one sequence"))
            return 1;
    }
    trn_gpu_model_destroy(&gpu);
    trn_model_destroy(&cpu);
    printf("\n%d passed, %d failed\n", s_pass, s_fail);
    return s_fail ? 1 : 0;
}
