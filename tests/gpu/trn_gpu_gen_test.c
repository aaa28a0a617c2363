/*
 * GPU generation tests on the paged KV cache (shuffled block tables, so
 * no sequence's blocks are contiguous): prefill and decode logits against
 * the CPU reference model step by step, with the same tables; steps that
 * mix decodes with prompt chunks after cached prefixes of several lengths
 * (0, 1, block - 1, block, several blocks and a part) at block sizes 16,
 * 32 and 64; two sequences sharing prefix blocks; recorded decode steps
 * (graphs) against direct launches; a recomputed sequence draws the same
 * token; the cache sized from a byte budget; steps over the geometry
 * refused; sampled tokens' logprobs against a training forward at the
 * same temperature; greedy equals argmax; top-p never picks outside the
 * nucleus; sampled frequencies follow the distribution. Llama (no q/k
 * norms) and Qwen2 (q/k/v biases) models repeat the steps against the CPU
 * model: prefill and decode, mixed steps, shared prefixes, graphs. A
 * model timed by kind of work (LISA_CUDA_PHASES=1) times its mixed steps.
 * Steps of 2 to 8 token rows (decodes of 2 to 5 sequences, a third turn
 * of 6 tokens) run with the hidden norms folded into the products on
 * Hopper unless LISA_CUDA_NORM_FOLD=0; one sequence alone runs them
 * apart. Closes with "N passed, N failed".
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

/* ---- sequences on a paged cache ---------------------------------- */

#define S_MAXB 128 /* blocks a test sequence may have */

/* Blocks handed out in a shuffled order (never in id order). */
typedef struct {
    int32_t ids[4096];
    int n, next;
} s_pool_t;

static void
s_pool_init(s_pool_t *p, int n, unsigned seed)
{
    p->n = n;
    p->next = 0;
    for (int i = 0; i < n; i++)
        p->ids[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int) (rand_r(&seed) % (unsigned) (i + 1));
        int32_t t = p->ids[i];
        p->ids[i] = p->ids[j];
        p->ids[j] = t;
    }
}

static int32_t
s_pool_take(s_pool_t *p)
{
    if (p->next >= p->n) {
        printf("test block pool exhausted\n");
        exit(1);
    }
    return p->ids[p->next++];
}

/* A test sequence: its table row, blocks and length in the cache. */
typedef struct {
    size_t slot, len, nb;
    int32_t tab[S_MAXB];
} s_sq_t;

/* seqs[i] for n_new tokens of q, its table grown to cover them. */
static trn_gen_seq_t
s_seq(s_sq_t *q, s_pool_t *pool, size_t bs, const int32_t *tok, size_t n_new)
{
    size_t need = (q->len + n_new + bs - 1) / bs;
    while (q->nb < need)
        q->tab[q->nb++] = s_pool_take(pool);
    trn_gen_seq_t s = {.slot = q->slot,
                       .blocks = q->tab,
                       .n_blocks = q->nb,
                       .start = q->len,
                       .tokens = tok,
                       .n_new = n_new};
    return s;
}

static trn_kv_geom_t
s_geom(size_t bs, size_t n_blocks, size_t max_seqs, size_t max_len,
       size_t max_tokens)
{
    trn_kv_geom_t g = {.block_size = bs,
                       .n_blocks = n_blocks,
                       .max_seqs = max_seqs,
                       .max_blocks = (max_len + bs - 1) / bs,
                       .max_tokens = max_tokens};
    return g;
}

/* The same step on the CPU model and on the GPU; 0 when both ran. */
static int
s_both(trn_model_t *cpu, trn_kv_t *ckv, trn_gpu_model_t *gpu, trn_gpu_kv_t *gkv,
       size_t n, const trn_gen_seq_t *seqs, float *lc, float *lg,
       const char *what)
{
    trn_err_t err = {{0}};
    if (trn_model_step(cpu, ckv, n, seqs, lc, &err) != LISA_OK ||
        trn_gpu_model_step(gpu, gkv, n, seqs, NULL, NULL, NULL, lg, &err) !=
            LISA_OK) {
        printf("%s: %s\n", what, err.msg);
        return -1;
    }
    return 0;
}

static void
s_rand_tokens(int32_t *t, size_t n, int V, unsigned *seed)
{
    for (size_t i = 0; i < n; i++)
        t[i] = (int32_t) (rand_r(seed) % (unsigned) V);
}

/* Recorded decode steps (graphs) against direct launches and the CPU:
 * n sequences (at most 5) of a cache of `sl` sequences, prompts of
 * lens[i] tokens, then greedy one-token steps. With fewer sequences than
 * the cache's rows the step runs as a bucket with padding rows that must
 * leave the cache alone; one sequence alone takes the products that make
 * their input inside. Blocks of 16: the steps cross into new blocks, so
 * table rows change between replays of one graph. */
static int
s_graph_steps(trn_model_t *cpu, trn_gpu_model_t *gpu, int V, int n, int sl,
              const size_t *slots, const size_t *lens, const char *what)
{
    enum { STEPS = 20 };
    trn_kv_geom_t geom = s_geom(16, 64, (size_t) sl, 64, 64);
    trn_err_t err = {{0}};
    int32_t prompts[5][16];
    unsigned seed = 21;
    for (int i = 0; i < n; i++)
        s_rand_tokens(prompts[i], lens[i], V, &seed);
    trn_kv_t *ckv = trn_kv_new(cpu, &geom);
    trn_gpu_kv_t *ga = trn_gpu_kv_new(gpu, &geom, &err);
    trn_gpu_kv_t *gb = trn_gpu_kv_new(gpu, &geom, &err);
    if (!ckv || !ga || !gb) {
        printf("caches: %s\n", err.msg);
        return -1;
    }
    trn_gpu_kv_set_graphs(gb, 0);
    float *lc = malloc((size_t) n * V * 4), *la = malloc((size_t) n * V * 4);
    float *lb = malloc((size_t) n * V * 4);
    s_pool_t *pool = malloc(sizeof *pool);
    s_pool_init(pool, 64, 5);
    s_sq_t sq[5];
    memset(sq, 0, sizeof sq);
    trn_gen_seq_t seqs[5];
    for (int i = 0; i < n; i++) {
        sq[i].slot = slots[i];
        seqs[i] = s_seq(&sq[i], pool, 16, prompts[i], lens[i]);
    }
    double worst_ab = 0, worst_ac = 0;
    int32_t next[5];
    for (int st = 0; st <= STEPS; st++) {
        if (s_both(cpu, ckv, gpu, ga, (size_t) n, seqs, lc, la, what) ||
            trn_gpu_model_step(gpu, gb, (size_t) n, seqs, NULL, NULL, NULL, lb,
                               &err) != LISA_OK) {
            printf("graph steps: %s\n", err.msg);
            return -1;
        }
        worst_ab = fmax(worst_ab, s_rel(la, lb, (size_t) n * V));
        worst_ac = fmax(worst_ac, s_rel(la, lc, (size_t) n * V));
        for (int i = 0; i < n; i++) {
            sq[i].len += seqs[i].n_new;
            next[i] = (int32_t) s_argmax(lc + (size_t) i * V, V);
            seqs[i] = s_seq(&sq[i], pool, 16, &next[i], 1);
        }
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
    free(lc), free(la), free(lb), free(pool);
    return 0;
}

/* One step mixing decodes with prompts and prompt chunks after cached
 * prefixes of 0, 1, bs - 1, bs and 3 bs + 5 positions (a chunk of 150:
 * two query tiles), in an order that is not decodes-first, against the
 * CPU; then pure decode steps of all five. */
static int
s_mixed(trn_model_t *cpu, trn_gpu_model_t *gpu, int V, size_t bs)
{
    enum { N = 5 };
    trn_kv_geom_t geom = s_geom(bs, 1200 / bs + 24, 8, 400, 512);
    trn_err_t err = {{0}};
    trn_kv_t *ckv = trn_kv_new(cpu, &geom);
    trn_gpu_kv_t *gkv = trn_gpu_kv_new(gpu, &geom, &err);
    if (!ckv || !gkv) {
        printf("mixed caches: %s\n", err.msg);
        return -1;
    }
    s_pool_t *pool = malloc(sizeof *pool);
    s_pool_init(pool, (int) geom.n_blocks, 9 + (unsigned) bs);
    size_t pre[N] = {0, 1, bs - 1, bs, 3 * bs + 5};
    size_t now[N] = {40, 1, 20, 1, 150};
    size_t slot[N] = {4, 0, 7, 2, 5};
    static int32_t tok[N][400];
    unsigned seed = 31;
    s_sq_t sq[N];
    memset(sq, 0, sizeof sq);
    trn_gen_seq_t seqs[N];
    float *lc = malloc((size_t) N * V * 4), *lg = malloc((size_t) N * V * 4);
    size_t m = 0; /* the prefixes, in one step */
    for (int i = 0; i < N; i++) {
        sq[i].slot = slot[i];
        s_rand_tokens(tok[i], 400, V, &seed);
        if (pre[i])
            seqs[m++] = s_seq(&sq[i], pool, bs, tok[i], pre[i]);
    }
    if (s_both(cpu, ckv, gpu, gkv, m, seqs, lc, lg, "prefixes"))
        return -1;
    char msg[120];
    snprintf(msg, sizeof msg, "prefix prompts' logits vs CPU, bs=%zu", bs);
    s_check(msg, s_rel(lg, lc, m * (size_t) V), 2e-2);
    for (int i = 0; i < N; i++) {
        sq[i].len = pre[i];
        seqs[i] = s_seq(&sq[i], pool, bs, tok[i] + pre[i], now[i]);
    }
    if (s_both(cpu, ckv, gpu, gkv, N, seqs, lc, lg, "mixed step"))
        return -1;
    snprintf(msg, sizeof msg,
             "mixed step (2 decodes, 3 chunks after 0..%zu) vs CPU, bs=%zu",
             3 * bs + 5, bs);
    s_check(msg, s_rel(lg, lc, (size_t) N * V), 2e-2);
    double worst = 0;
    int32_t next[N];
    for (int st = 0; st < 4; st++) {
        for (int i = 0; i < N; i++) {
            sq[i].len += seqs[i].n_new;
            next[i] = (int32_t) s_argmax(lc + (size_t) i * V, V);
            seqs[i] = s_seq(&sq[i], pool, bs, &next[i], 1);
        }
        if (s_both(cpu, ckv, gpu, gkv, N, seqs, lc, lg, "decodes"))
            return -1;
        worst = fmax(worst, s_rel(lg, lc, (size_t) N * V));
    }
    snprintf(msg, sizeof msg, "decodes after the mixed step vs CPU, bs=%zu",
             bs);
    s_check(msg, worst, 3e-2);
    trn_kv_destroy(&ckv);
    trn_gpu_kv_destroy(&gkv);
    free(lc), free(lg), free(pool);
    return 0;
}

/* Two sequences sharing prefix blocks: A's prompt of 45 tokens fills
 * blocks a0 a1 and part of a2; B's table starts a0 a1 (the 32 positions
 * of A's first 32 tokens), and B runs only its own 20 tokens after
 * them. B's logits against the CPU doing the same and against B's whole
 * prompt run alone on a cache of its own; then both decode (A's shared
 * blocks must be as A left them) against the CPU. */
static int
s_shared(trn_model_t *cpu, trn_gpu_model_t *gpu, int V)
{
    enum { BS = 16 };
    trn_kv_geom_t geom = s_geom(BS, 40, 4, 256, 128);
    trn_err_t err = {{0}};
    trn_kv_t *ckv = trn_kv_new(cpu, &geom);
    trn_gpu_kv_t *gkv = trn_gpu_kv_new(gpu, &geom, &err);
    trn_gpu_kv_t *solo = trn_gpu_kv_new(gpu, &geom, &err);
    if (!ckv || !gkv || !solo) {
        printf("shared caches: %s\n", err.msg);
        return -1;
    }
    s_pool_t *pool = malloc(sizeof *pool);
    s_pool_init(pool, 40, 77);
    int32_t a[45], b[52];
    unsigned seed = 41;
    s_rand_tokens(a, 45, V, &seed);
    memcpy(b, a, 32 * 4);
    s_rand_tokens(b + 32, 20, V, &seed);
    float *lc = malloc((size_t) 2 * V * 4), *lg = malloc((size_t) 2 * V * 4);
    float *ls = malloc((size_t) V * 4);
    s_sq_t A = {.slot = 1}, B = {.slot = 3};
    trn_gen_seq_t seqs[2];
    seqs[0] = s_seq(&A, pool, BS, a, 45);
    if (s_both(cpu, ckv, gpu, gkv, 1, seqs, lc, lg, "A's prompt"))
        return -1;
    A.len = 45;
    B.tab[0] = A.tab[0];
    B.tab[1] = A.tab[1];
    B.nb = 2;
    B.len = 32;
    seqs[0] = s_seq(&B, pool, BS, b + 32, 20);
    if (s_both(cpu, ckv, gpu, gkv, 1, seqs, lc, lg, "B after the shared"))
        return -1;
    s_check("shared prefix: B's logits vs CPU", s_rel(lg, lc, (size_t) V),
            2e-2);
    s_sq_t Bs = {.slot = 0};
    s_pool_t *pool2 = malloc(sizeof *pool2);
    s_pool_init(pool2, 40, 78);
    trn_gen_seq_t one = s_seq(&Bs, pool2, BS, b, 52);
    if (trn_gpu_model_step(gpu, solo, 1, &one, NULL, NULL, NULL, ls, &err) !=
        LISA_OK) {
        printf("B alone: %s\n", err.msg);
        return -1;
    }
    s_check("shared prefix: B's logits vs B alone", s_rel(lg, ls, (size_t) V),
            1e-2);
    B.len = 52;
    double worst = 0;
    int32_t next[2];
    for (int st = 0; st < 6; st++) {
        next[0] = (int32_t) (rand_r(&seed) % (unsigned) V);
        next[1] = (int32_t) (rand_r(&seed) % (unsigned) V);
        seqs[0] = s_seq(&A, pool, BS, &next[0], 1);
        seqs[1] = s_seq(&B, pool, BS, &next[1], 1);
        if (s_both(cpu, ckv, gpu, gkv, 2, seqs, lc, lg, "shared decodes"))
            return -1;
        worst = fmax(worst, s_rel(lg, lc, (size_t) 2 * V));
        A.len++;
        B.len++;
    }
    s_check("shared prefix: A and B decoding vs CPU (worst of 6)", worst, 3e-2);
    trn_kv_destroy(&ckv);
    trn_gpu_kv_destroy(&gkv);
    trn_gpu_kv_destroy(&solo);
    free(lc), free(lg), free(ls), free(pool), free(pool2);
    return 0;
}

/* A preempted sequence recomputed: its prompt and the tokens it had drawn
 * run again from position 0 in one step, and the token drawn then equals
 * the one drawn at that position before (the seed is mixed with the
 * position, not the step). Also: the cache sized from a byte budget, and
 * steps over the geometry refused. */
static int
s_recompute(trn_gpu_model_t *gpu, int V)
{
    enum { BS = 16, P = 19, GEN = 12 };
    trn_kv_geom_t geom = s_geom(BS, 0, 2, 128, 64);
    geom.kv_bytes = 10 * trn_gpu_kv_block_bytes(gpu, BS) + 7;
    trn_err_t err = {{0}};
    trn_gpu_kv_t *kv = trn_gpu_kv_new(gpu, &geom, &err);
    if (!kv) {
        printf("recompute cache: %s\n", err.msg);
        return -1;
    }
    s_check("blocks made from kv_bytes (10 blocks and 7 bytes)",
            fabs((double) geom.n_blocks - 10.0), 0);
    s_pool_t *pool = malloc(sizeof *pool);
    s_pool_init(pool, 10, 3);
    int32_t toks[P + GEN], out = 0;
    float lp = 0;
    unsigned seed = 51;
    s_rand_tokens(toks, P, V, &seed);
    trn_sample_t sp = {.temperature = 1.0f, .top_p = 1.0f, .seed = 99};
    int32_t drawn[GEN];
    s_sq_t q = {.slot = 1};
    trn_gen_seq_t s = s_seq(&q, pool, BS, toks, P);
    for (int st = 0; st < GEN; st++) {
        if (trn_gpu_model_step(gpu, kv, 1, &s, &sp, &out, &lp, NULL, &err) !=
            LISA_OK) {
            printf("recompute: %s\n", err.msg);
            return -1;
        }
        drawn[st] = out;
        toks[P + st] = out;
        q.len += s.n_new;
        s = s_seq(&q, pool, BS, &toks[P + st], 1);
    }
    /* again from scratch on other blocks and another row: prompt + the
     * first GEN - 1 draws in one step draws the last one again */
    s_sq_t r = {.slot = 0};
    s = s_seq(&r, pool, BS, toks, P + GEN - 1);
    if (trn_gpu_model_step(gpu, kv, 1, &s, &sp, &out, &lp, NULL, &err) !=
        LISA_OK) {
        printf("recompute: %s\n", err.msg);
        return -1;
    }
    s_check("recomputed sequence draws the same token (differs: 1)",
            out != drawn[GEN - 1], 0);
    /* over the step's sizes: more tokens than max_tokens, a short table */
    static int32_t many[65];
    memset(many, 0, sizeof many);
    s_sq_t t = {.slot = 0, .nb = 5};
    memcpy(t.tab, r.tab, sizeof r.tab);
    trn_gen_seq_t big = {.slot = 0,
                         .blocks = t.tab,
                         .n_blocks = 5,
                         .start = 0,
                         .tokens = many,
                         .n_new = 65};
    lisa_rc_t rc1 =
        trn_gpu_model_step(gpu, kv, 1, &big, NULL, NULL, NULL, NULL, &err);
    trn_gen_seq_t shortt = {.slot = 0,
                            .blocks = t.tab,
                            .n_blocks = 1,
                            .start = 10,
                            .tokens = many,
                            .n_new = 7};
    lisa_rc_t rc2 =
        trn_gpu_model_step(gpu, kv, 1, &shortt, NULL, NULL, NULL, NULL, &err);
    s_check("a step over max_tokens or past its table: LISA_TOOLARGE",
            rc1 != LISA_TOOLARGE || rc2 != LISA_TOOLARGE, 0);
    trn_gpu_kv_destroy(&kv);
    free(pool);
    return 0;
}

/* A turn of more[i] random tokens (at most 9) for each of the three
 * sequences on top of their caches, run on both models, its logits
 * checked against the CPU's (`what`). */
static int
s_turn(trn_model_t *cpu, trn_kv_t *ckv, trn_gpu_model_t *gpu, trn_gpu_kv_t *gkv,
       s_sq_t *sq, trn_gen_seq_t *seqs, s_pool_t *pool, const size_t *more,
       int V, unsigned *seed, float *lc, float *lg, const char *what)
{
    enum { N = 3 };
    static int32_t turn[N][9]; /* the sequences point into it until the next */
    for (int i = 0; i < N; i++) {
        sq[i].len += seqs[i].n_new;
        s_rand_tokens(turn[i], more[i], V, seed);
        seqs[i] = s_seq(&sq[i], pool, 16, turn[i], more[i]);
    }
    if (s_both(cpu, ckv, gpu, gkv, N, seqs, lc, lg, "turn"))
        return -1;
    s_check(what, s_rel(lg, lc, (size_t) N * V), 3e-2);
    return 0;
}

/* Prefill three prompts, decode greedily on both backends, then a second
 * and a third turn on top of the cache (chunks after cached prefixes). */
static int
s_prefill_decode(trn_model_t *cpu, trn_gpu_model_t *gpu, int V)
{
    enum { N = 3 };
    size_t lens[N] = {20, 35, 7}, slots[N] = {2, 0, 1};
    int32_t prompts[N][35];
    unsigned seed = 3;
    for (int i = 0; i < N; i++)
        s_rand_tokens(prompts[i], lens[i], V, &seed);
    trn_kv_geom_t geom = s_geom(16, 30, N, 256, 256);
    trn_err_t err = {{0}};
    trn_kv_t *ckv = trn_kv_new(cpu, &geom);
    trn_gpu_kv_t *gkv = trn_gpu_kv_new(gpu, &geom, &err);
    if (!ckv || !gkv) {
        printf("caches: %s\n", err.msg);
        return -1;
    }
    s_pool_t *pool = malloc(sizeof *pool);
    s_pool_init(pool, 30, 13);
    float *lc = malloc((size_t) N * V * 4), *lg = malloc((size_t) N * V * 4);
    s_sq_t sq[N];
    memset(sq, 0, sizeof sq);
    trn_gen_seq_t seqs[N];
    for (int i = 0; i < N; i++) {
        sq[i].slot = slots[i];
        seqs[i] = s_seq(&sq[i], pool, 16, prompts[i], lens[i]);
    }
    if (s_both(cpu, ckv, gpu, gkv, N, seqs, lc, lg, "prefill"))
        return -1;
    s_check("prefill logits vs CPU (3 prompts, one call)",
            s_rel(lg, lc, (size_t) N * V), 2e-2);
    double worst = 0;
    int agree = 0;
    int32_t next[N];
    for (int st = 0; st < 15; st++) {
        for (int i = 0; i < N; i++) {
            sq[i].len += seqs[i].n_new;
            next[i] = (int32_t) s_argmax(lc + (size_t) i * V, V);
            agree += next[i] == s_argmax(lg + (size_t) i * V, V);
            seqs[i] = s_seq(&sq[i], pool, 16, &next[i], 1);
        }
        if (s_both(cpu, ckv, gpu, gkv, N, seqs, lc, lg, "decode"))
            return -1;
        worst = fmax(worst, s_rel(lg, lc, (size_t) N * V));
    }
    s_check("decode logits vs CPU, worst of 15 steps", worst, 3e-2);
    s_check("greedy choices that differ from CPU (of 45)",
            (double) (45 - agree), 3);
    /* a second turn on top of the cache: chunks not from position 0 */
    size_t more[N] = {6, 2, 9};
    if (s_turn(cpu, ckv, gpu, gkv, sq, seqs, pool, more, V, &seed, lc, lg,
               "second-turn logits vs CPU (17 tokens over the cache)"))
        return -1;
    /* a third turn of 6 tokens: a step with prompt rows small enough for
     * the norms folded into the products, the final norm apart before
     * the last rows are gathered */
    size_t few[N] = {1, 2, 3};
    if (s_turn(cpu, ckv, gpu, gkv, sq, seqs, pool, few, V, &seed, lc, lg,
               "third-turn logits vs CPU (6 tokens over the cache)"))
        return -1;
    trn_kv_destroy(&ckv);
    trn_gpu_kv_destroy(&gkv);
    free(lc), free(lg), free(pool);
    return 0;
}

/* Sampled tokens' logprobs against a training forward. */
static int
s_logprobs(trn_gpu_model_t *gpu, int V)
{
    enum { N = 4, GEN = 24 };
    float temp = 0.8f;
    size_t plen[N] = {10, 20, 30, 40};
    int32_t toks[N][40 + GEN];
    float lps[N][GEN];
    unsigned seed = 11;
    for (int i = 0; i < N; i++)
        s_rand_tokens(toks[i], plen[i], V, &seed);
    trn_kv_geom_t geom = s_geom(16, 40, N, 128, 128);
    trn_err_t err = {{0}};
    trn_gpu_kv_t *kv = trn_gpu_kv_new(gpu, &geom, &err);
    if (!kv) {
        printf("sampling cache: %s\n", err.msg);
        return -1;
    }
    s_pool_t *pool = malloc(sizeof *pool);
    s_pool_init(pool, 40, 17);
    trn_sample_t sp[N];
    s_sq_t sq[N];
    memset(sq, 0, sizeof sq);
    trn_gen_seq_t seqs[N];
    for (int i = 0; i < N; i++) {
        sp[i].temperature = temp;
        /* the threshold path and the temperature-only path */
        sp[i].top_p = i < 2 ? 0.9f : 1.0f;
        sp[i].top_k = 0;
        sp[i].seed = 1000u + (uint64_t) i;
        sq[i].slot = (size_t) i;
        seqs[i] = s_seq(&sq[i], pool, 16, toks[i], plen[i]);
    }
    int32_t out[N];
    float olp[N];
    for (int st = 0; st < GEN; st++) {
        if (trn_gpu_model_step(gpu, kv, N, seqs, sp, out, olp, NULL, &err) !=
            LISA_OK) {
            printf("sampling: %s\n", err.msg);
            return -1;
        }
        for (int i = 0; i < N; i++) {
            toks[i][plen[i] + (size_t) st] = out[i];
            lps[i][st] = olp[i];
            sq[i].len += seqs[i].n_new;
            seqs[i] =
                s_seq(&sq[i], pool, 16, &toks[i][plen[i] + (size_t) st], 1);
        }
    }
    double maxd = 0;
    for (int i = 0; i < N; i++) {
        size_t n = plen[i] + GEN;
        int32_t tg[40 + GEN];
        for (size_t j = 0; j < n; j++)
            tg[j] = j + 1 < n ? toks[i][j + 1] : -1;
        size_t offs[2] = {0, n};
        trn_batch_t b = {toks[i], tg, n, offs, 1, temp, NULL};
        float lp[40 + GEN];
        if (trn_gpu_model_forward(gpu, &b, lp, NULL, &err) != LISA_OK) {
            printf("forward: %s\n", err.msg);
            return -1;
        }
        for (int st = 0; st < GEN; st++)
            maxd = fmax(maxd, fabs(lp[plen[i] + (size_t) st - 1] - lps[i][st]));
    }
    s_check("sampled logprob vs training forward at T=0.8 (max abs)", maxd,
            5e-2);
    trn_gpu_kv_destroy(&kv);
    free(pool);
    return 0;
}

/* Prompts of 6 tokens into slots s0..s0+3 of kv, then one decode step of
 * the four; its logits into lg. */
static int
s_four(trn_gpu_model_t *gpu, trn_gpu_kv_t *kv, s_pool_t *pool, size_t s0,
       const int32_t (*prompt)[6], float *lg)
{
    trn_err_t err = {{0}};
    s_sq_t q[4] = {{0}};
    trn_gen_seq_t seqs[4];
    int32_t next[4];
    for (int i = 0; i < 4; i++) {
        q[i].slot = s0 + (size_t) i;
        seqs[i] = s_seq(&q[i], pool, 16, prompt[i], 6);
    }
    if (trn_gpu_model_step(gpu, kv, 4, seqs, NULL, NULL, NULL, NULL, &err) !=
        LISA_OK) {
        printf("prompts: %s\n", err.msg);
        return -1;
    }
    for (int i = 0; i < 4; i++) {
        q[i].len = 6;
        next[i] = prompt[i][5];
        seqs[i] = s_seq(&q[i], pool, 16, &next[i], 1);
    }
    if (trn_gpu_model_step(gpu, kv, 4, seqs, NULL, NULL, NULL, lg, &err) !=
        LISA_OK) {
        printf("decode: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* A cache opened before an optimizer step decodes after it with the new
 * weights (with LISA_CUDA_PACKED=1 its packed copy is made again): its
 * logits are those of a cache opened after the step, bit for bit, and
 * not those from before the step. */
static int
s_weights_change(trn_gpu_model_t *gpu, int V)
{
    trn_kv_geom_t geom = s_geom(16, 64, 8, 64, 64);
    trn_err_t err = {{0}};
    int32_t prompt[4][6];
    unsigned seed = 5;
    for (int i = 0; i < 4; i++)
        s_rand_tokens(prompt[i], 6, V, &seed);
    s_pool_t pa, pb;
    s_pool_init(&pa, 64, 3);
    s_pool_init(&pb, 64, 3);
    trn_gpu_kv_t *a = trn_gpu_kv_new(gpu, &geom, &err), *b = NULL;
    float *l0 = malloc((size_t) 4 * V * 4), *la = malloc((size_t) 4 * V * 4),
          *lb = malloc((size_t) 4 * V * 4);
    int rc = -1;
    if (!a || s_four(gpu, a, &pa, 0, prompt, l0))
        goto out;
    /* one update: the log-probability of the prompts' tokens raised */
    int32_t tg[24];
    float lp[24], dl[24], norm = 0;
    size_t offs[5] = {0, 6, 12, 18, 24};
    for (int j = 0; j < 24; j++) {
        tg[j] = j % 6 < 5 ? prompt[j / 6][j % 6 + 1] : -1;
        dl[j] = tg[j] < 0 ? 0.0f : -1.0f;
    }
    trn_batch_t bt = {&prompt[0][0], tg, 24, offs, 4, 1.0f, NULL};
    if (trn_gpu_model_zero_grad(gpu) != LISA_OK ||
        trn_gpu_model_forward(gpu, &bt, lp, NULL, &err) != LISA_OK ||
        trn_gpu_model_backward(gpu, dl, NULL, &err) != LISA_OK ||
        trn_gpu_model_adamw(gpu, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f,
                            &norm) != LISA_OK) {
        printf("update: %s\n", err.msg);
        goto out;
    }
    b = trn_gpu_kv_new(gpu, &geom, &err);
    if (!b || s_four(gpu, a, &pa, 4, prompt, la) ||
        s_four(gpu, b, &pb, 4, prompt, lb))
        goto out;
    double same = 0, moved = 0;
    for (size_t i = 0; i < (size_t) 4 * V; i++) {
        same = fmax(same, fabs((double) la[i] - lb[i]));
        moved = fmax(moved, fabs((double) la[i] - l0[i]));
    }
    s_check("after an update: a cache opened before = one opened after "
            "(max diff)",
            same, 0);
    s_check("after an update: the logits moved (0: yes)", moved > 1e-3 ? 0 : 1,
            0);
    rc = 0;
out:
    if (rc)
        printf("weights change: %s\n", err.msg);
    trn_gpu_kv_destroy(&a);
    trn_gpu_kv_destroy(&b);
    free(l0), free(la), free(lb);
    return rc;
}

/* Greedy, top-p nucleus and sampled frequencies at one context: 64
 * sequences of one token each, rerun from position 0 every round. */
static int
s_draws(trn_gpu_model_t *gpu, int V)
{
    enum { SL = 64 };
    trn_kv_geom_t geom = s_geom(16, SL, SL, 16, SL);
    trn_err_t err = {{0}};
    trn_gpu_kv_t *kv = trn_gpu_kv_new(gpu, &geom, &err);
    if (!kv) {
        printf("draws cache: %s\n", err.msg);
        return -1;
    }
    int32_t ctx = 5, out[SL], blk[SL];
    float olp[SL];
    float *lg = malloc((size_t) SL * V * 4);
    trn_sample_t sp[SL];
    trn_gen_seq_t seqs[SL];
    for (int i = 0; i < SL; i++) {
        blk[i] = (int32_t) ((i * 37) % SL); /* a permutation of the blocks */
        seqs[i] = (trn_gen_seq_t){.slot = (size_t) i,
                                  .blocks = &blk[i],
                                  .n_blocks = 1,
                                  .start = 0,
                                  .tokens = &ctx,
                                  .n_new = 1};
        sp[i].temperature = 1.0f;
        sp[i].top_p = 1.0f;
        sp[i].top_k = 1;
        sp[i].seed = (uint64_t) i;
    }
    if (trn_gpu_model_step(gpu, kv, SL, seqs, sp, out, olp, lg, &err) !=
        LISA_OK) {
        printf("greedy: %s\n", err.msg);
        return -1;
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
    int outside = 0, draws = 0;
    long *hist = calloc((size_t) V, sizeof(long));
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < SL; i++) {
            sp[i].top_k = 0;
            sp[i].top_p = round % 2 ? 0.5f : 1.0f;
            sp[i].seed = (uint64_t) (round * SL + i) * 7919u;
        }
        if (trn_gpu_model_step(gpu, kv, SL, seqs, sp, out, olp, NULL, &err) !=
            LISA_OK) {
            printf("sampling: %s\n", err.msg);
            return -1;
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
    s_check("sampled frequency of top-5 tokens (worst z-score)", worst_z, 4.5);
    free(p), free(order), free(in_nucleus), free(hist), free(lg);
    trn_gpu_kv_destroy(&kv);
    return 0;
}

/* LISA_CUDA_PHASES=1 at the model's creation: its steps with prompt rows
 * are timed by kind of work on the cache's stream (the mixed steps of
 * s_mixed, which still check the logits against the CPU): every kind a
 * forward runs (norms, q/k preparation, attention, products, SwiGLU, the
 * LM head as "logprob", the embedding as "other") gets time, the
 * backward's kinds none. */
static int
s_phases(trn_model_t *cpu, int V)
{
    trn_err_t err = {{0}};
    setenv("LISA_CUDA_PHASES", "1", 1);
    trn_gpu_model_t *gpu = trn_gpu_model_new(cpu, &err);
    unsetenv("LISA_CUDA_PHASES");
    double ms[TRN_GPU_PHASES] = {0};
    if (!gpu || s_mixed(cpu, gpu, V, 16) || !trn_gpu_model_phases(gpu, ms)) {
        printf("phases: %s\n", gpu ? "no report" : err.msg);
        trn_gpu_model_destroy(&gpu);
        return -1;
    }
    static const char *const ran[] = {
        "rmsnorm", "qk_norm_rope", "attention_fwd", "products_fwd",
        "swiglu",  "logprob",      "other"};
    for (int i = 0; i < TRN_GPU_PHASES; i++) {
        const char *name = trn_gpu_model_phase_name(i);
        int runs = 0;
        for (size_t k = 0; k < sizeof ran / sizeof ran[0]; k++)
            runs |= strcmp(name, ran[k]) == 0;
        char msg[120];
        snprintf(msg, sizeof msg, "timed mixed steps: %s %s (not: 1)", name,
                 runs ? "ms > 0" : "ms == 0");
        s_check(msg, runs ? !(ms[i] > 0) : ms[i] != 0, 0);
    }
    trn_gpu_model_destroy(&gpu);
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
    /* recorded decode steps against direct launches and the CPU: 5
     * sequences of a cache of 8 rows (3 padding rows), then one alone */
    size_t slots[5] = {6, 1, 3, 0, 4}, lens[5] = {9, 3, 14, 5, 11};
    if (s_prefill_decode(cpu, gpu, V) || s_mixed(cpu, gpu, V, 16) ||
        s_mixed(cpu, gpu, V, 32) || s_mixed(cpu, gpu, V, 64) ||
        s_shared(cpu, gpu, V) || s_recompute(gpu, V) || s_logprobs(gpu, V) ||
        s_draws(gpu, V) ||
        s_graph_steps(cpu, gpu, V, 5, 8, slots, lens, "5 of 8 rows") ||
        s_graph_steps(cpu, gpu, V, 1, 4, slots + 2, lens + 2, "one sequence") ||
        s_phases(cpu, V) || s_weights_change(gpu, V))
        s_fail++;
    trn_gpu_model_destroy(&gpu);
    trn_model_destroy(&cpu);
    const trn_family_t fams[] = {TRN_FAMILY_LLAMA, TRN_FAMILY_QWEN2};
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        cfg.family = fams[f];
        cpu = trn_model_new_random(&cfg, 78 + f, 0.08f, 4);
        gpu = cpu ? trn_gpu_model_new(cpu, &err) : NULL;
        printf("family %s\n", trn_family_model_type(cfg.family));
        if (!cpu || !gpu) {
            printf("setup (%s): %s\n", trn_family_model_type(cfg.family),
                   err.msg);
            s_fail++;
        } else if (s_prefill_decode(cpu, gpu, V) || s_mixed(cpu, gpu, V, 16) ||
                   s_shared(cpu, gpu, V) ||
                   s_graph_steps(cpu, gpu, V, 5, 8, slots, lens,
                                 "5 of 8 rows")) {
            s_fail++;
        }
        trn_gpu_model_destroy(&gpu);
        trn_model_destroy(&cpu);
    }
    printf("\n%d passed, %d failed\n", s_pass, s_fail);
    return s_fail ? 1 : 0;
}
