/*
 * GPU model tests: the CUDA model (trn_gpu_model: Qwen3, and the Llama
 * and Qwen2 families: no q/k norms, q/k/v biases) against the CPU
 * reference model (which itself matches transformers to ~1e-6): chosen-
 * token log-probabilities, every parameter's gradient, and a short AdamW
 * training trajectory, on random models including the Qwen3-4B layer shape;
 * the training state moved off the device and back; context parallelism
 * (two and three models on the one device, each with its rows of a batch,
 * meeting through a sum on the host) against one model over the batch.
 * Closes with "N passed, N failed"; exit status 1 on any failure.
 */
#include "trn_cuda.h"
#include "trn_gpu_model.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int s_pass, s_fail;

static void
s_check(const char *what, double err, double tol)
{
    int ok = err <= tol && !isnan(err);
    printf("%-58s %.3e (tol %.0e) %s\n", what, err, tol, ok ? "ok" : "FAIL");
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

typedef struct {
    int32_t *tokens, *targets;
    size_t *offs;
    trn_batch_t b;
} s_batch_t;

static void
s_make_batch(s_batch_t *sb, const int *lens, size_t nseq, int vocab,
             unsigned seed)
{
    size_t T = 0;
    for (size_t s = 0; s < nseq; s++)
        T += (size_t) lens[s];
    sb->tokens = malloc(T * 4);
    sb->targets = malloc(T * 4);
    sb->offs = malloc((nseq + 1) * sizeof(size_t));
    size_t t = 0;
    sb->offs[0] = 0;
    for (size_t s = 0; s < nseq; s++) {
        for (int i = 0; i < lens[s]; i++, t++)
            sb->tokens[t] = (int32_t) (rand_r(&seed) % (unsigned) vocab);
        sb->offs[s + 1] = t;
    }
    for (size_t s = 0; s < nseq; s++)
        for (size_t u = sb->offs[s]; u < sb->offs[s + 1]; u++)
            sb->targets[u] = u + 1 < sb->offs[s + 1] ? sb->tokens[u + 1] : -1;
    sb->b.tokens = sb->tokens;
    sb->b.targets = sb->targets;
    sb->b.n_tokens = T;
    sb->b.seq_offsets = sb->offs;
    sb->b.n_seqs = nseq;
    sb->b.temperature = 1.0f;
    sb->b.cp = NULL;
}

static void
s_free_batch(s_batch_t *sb)
{
    free(sb->tokens), free(sb->targets), free(sb->offs);
}

/* LM-head rows per chunk for the next test_model (0: the model's own) */
static size_t s_head_chunk;

static void
test_model(const char *name, trn_config_t cfg, const int *lens, size_t nseq,
           int steps, double abs_tol, int recompute)
{
    char what[160];
    trn_err_t err = {{0}};
    trn_model_t *cpu = trn_model_new_random(&cfg, 1234, 0.05f, 16);
    if (!cpu) {
        printf("%s: bad config\n", name);
        s_fail++;
        return;
    }
    trn_gpu_model_t *gpu = trn_gpu_model_new(cpu, &err);
    if (!gpu) {
        printf("%s: %s\n", name, err.msg);
        s_fail++;
        trn_model_destroy(&cpu);
        return;
    }
    trn_gpu_model_set_recompute(gpu, recompute);
    trn_gpu_model_set_head_chunk(gpu, s_head_chunk);
    s_batch_t sb;
    s_make_batch(&sb, lens, nseq, (int) cfg.vocab_size, 77);
    size_t T = sb.b.n_tokens, P = trn_model_num_params(cpu);
    float *lp_c = malloc(T * 4), *lp_g = malloc(T * 4), *dl = malloc(T * 4);
    float *en_c = malloc(T * 4), *en_g = malloc(T * 4), *de = malloc(T * 4);
    unsigned seed = 5;
    for (size_t t = 0; t < T; t++) {
        dl[t] = (float) (rand_r(&seed) % 2000) / 1000.0f - 1.0f;
        de[t] = (float) (rand_r(&seed) % 2000) / 10000.0f - 0.1f;
    }

    trn_model_zero_grad(cpu);
    if (trn_model_forward(cpu, &sb.b, lp_c, en_c, &err) != LISA_OK ||
        trn_model_backward(cpu, dl, de, &err) != LISA_OK) {
        printf("%s: cpu: %s\n", name, err.msg);
        s_fail++;
        goto out;
    }
    float *g_cpu = malloc(P * 4);
    memcpy(g_cpu, trn_model_grads(cpu), P * 4);
    if (trn_gpu_model_zero_grad(gpu) != LISA_OK ||
        trn_gpu_model_forward(gpu, &sb.b, lp_g, en_g, &err) != LISA_OK ||
        trn_gpu_model_backward(gpu, dl, de, &err) != LISA_OK ||
        trn_gpu_model_download_grads(gpu, cpu) != LISA_OK) {
        printf("%s: gpu: %s\n", name, err.msg);
        s_fail++;
        free(g_cpu);
        goto out;
    }
    if (recompute != TRN_RECOMPUTE_AUTO) { /* the path asked for ran */
        int ok = recompute == TRN_RECOMPUTE_ON
                     ? !trn_gpu_model_keeps_activations(gpu) &&
                           !trn_gpu_model_keeps_attention(gpu)
                 : recompute == TRN_RECOMPUTE_LEAN
                     ? trn_gpu_model_keeps_activations(gpu) &&
                           trn_gpu_model_keeps_lean(gpu)
                     : !trn_gpu_model_keeps_activations(gpu) &&
                           trn_gpu_model_keeps_attention(gpu);
        snprintf(what, sizeof what, "%s: recomputation mode in effect", name);
        s_check(what, ok ? 0 : 1, 0.5);
    }
    double maxabs = 0;
    for (size_t t = 0; t < T; t++)
        maxabs = fmax(maxabs, fabs((double) lp_g[t] - lp_c[t]));
    snprintf(what, sizeof what, "%s: logprob max abs diff (T=%zu)", name, T);
    s_check(what, maxabs, abs_tol);
    snprintf(what, sizeof what, "%s: logprob rel err", name);
    s_check(what, s_rel(lp_g, lp_c, T), 1e-2);
    snprintf(what, sizeof what, "%s: entropy rel err", name);
    s_check(what, s_rel(en_g, en_c, T), 1e-2);
    double worst = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < trn_model_num_tensors(cpu); i++) {
        size_t n = trn_model_tensor_numel(cpu, i);
        size_t off =
            (size_t) (trn_model_tensor_grad(cpu, i) - trn_model_grads(cpu));
        double e = s_rel(trn_model_tensor_grad(cpu, i), g_cpu + off, n);
        if (e > worst) {
            worst = e;
            worst_name = trn_model_tensor_name(cpu, i);
        }
    }
    snprintf(what, sizeof what, "%s: all grads rel err", name);
    s_check(what, s_rel(trn_model_grads(cpu), g_cpu, P), 3e-2);
    snprintf(what, sizeof what, "%s: worst tensor (%.40s)", name, worst_name);
    s_check(what, worst, 8e-2);
    free(g_cpu);

    /* A short training trajectory: loss = -mean logp, AdamW on both. */
    if (steps > 0) {
        float lr = 1e-3f;
        double *m = calloc(P, 8), *v = calloc(P, 8);
        float *w_c = trn_model_params(cpu);
        size_t valid = 0;
        for (size_t t = 0; t < T; t++)
            valid += sb.targets[t] >= 0;
        for (size_t t = 0; t < T; t++)
            dl[t] = sb.targets[t] >= 0 ? -1.0f / (float) valid : 0.0f;
        double worst_loss = 0;
        for (int st = 1; st <= steps; st++) {
            double lc = 0, lg = 0;
            trn_model_zero_grad(cpu);
            if (trn_model_forward(cpu, &sb.b, lp_c, NULL, &err) != LISA_OK ||
                trn_model_backward(cpu, dl, NULL, &err) != LISA_OK)
                break;
            if (trn_gpu_model_zero_grad(gpu) != LISA_OK ||
                trn_gpu_model_forward(gpu, &sb.b, lp_g, NULL, &err) !=
                    LISA_OK ||
                trn_gpu_model_backward(gpu, dl, NULL, &err) != LISA_OK ||
                trn_gpu_model_adamw(gpu, lr, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f,
                                    NULL) != LISA_OK)
                break;
            for (size_t t = 0; t < T; t++) {
                lc -= sb.targets[t] >= 0 ? lp_c[t] : 0;
                lg -= sb.targets[t] >= 0 ? lp_g[t] : 0;
            }
            lc /= (double) valid;
            lg /= (double) valid;
            printf("  step %d loss cpu %.5f gpu %.5f\n", st, lc, lg);
            worst_loss = fmax(worst_loss, fabs(lc - lg) / lc);
            /* CPU AdamW in double with the same clipping rule */
            float *gc = trn_model_grads(cpu);
            double ss = 0;
            for (size_t i = 0; i < P; i++)
                ss += (double) gc[i] * gc[i];
            double sc = sqrt(ss) > 1.0 ? 1.0 / (sqrt(ss) + 1e-6) : 1.0;
            for (size_t i = 0; i < P; i++) {
                double g = gc[i] * sc;
                m[i] = 0.9 * m[i] + 0.1 * g;
                v[i] = 0.999 * v[i] + 0.001 * g * g;
                double mh = m[i] / (1 - pow(0.9, st));
                double vh = v[i] / (1 - pow(0.999, st));
                w_c[i] = (float) (w_c[i] - lr * mh / (sqrt(vh) + 1e-8));
            }
        }
        snprintf(what, sizeof what, "%s: %d-step loss trajectory rel diff",
                 name, steps);
        s_check(what, worst_loss, 1e-2);
        free(m), free(v);
    }
out:
    free(lp_c), free(lp_g), free(dl), free(en_c), free(en_g), free(de);
    s_free_batch(&sb);
    trn_gpu_model_destroy(&gpu);
    trn_model_destroy(&cpu);
}

static trn_config_t
s_cfg(int C, int I, int L, int H, int Hk, int D, int V, int tied, double theta)
{
    trn_config_t c;
    memset(&c, 0, sizeof c);
    c.hidden_size = C;
    c.intermediate_size = I;
    c.num_hidden_layers = L;
    c.num_attention_heads = H;
    c.num_key_value_heads = Hk;
    c.head_dim = D;
    c.vocab_size = V;
    c.max_position_embeddings = 40960;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = theta;
    c.tie_word_embeddings = tied;
    return c;
}

/* The same numbers as another family's model. */
static trn_config_t
s_fam(trn_config_t c, trn_family_t f)
{
    c.family = f;
    return c;
}

/* One training step: zero_grad, forward, backward of dl, AdamW without
 * clipping (so the update does not depend on the order of the norm's
 * sum). */
static lisa_rc_t
s_train_once(trn_gpu_model_t *g, const trn_batch_t *b, float *lp,
             const float *dl, trn_err_t *err)
{
    lisa_rc_t rc = trn_gpu_model_zero_grad(g);
    if (rc == LISA_OK)
        rc = trn_gpu_model_forward(g, b, lp, NULL, err);
    if (rc == LISA_OK)
        rc = trn_gpu_model_backward(g, dl, NULL, err);
    if (rc == LISA_OK)
        rc = trn_gpu_model_adamw(g, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.0f,
                                 NULL);
    return rc;
}

/* Weights, gradients, moments and step of g into h (weights and grads)
 * and m, v. */
static lisa_rc_t
s_state_get(trn_gpu_model_t *g, trn_model_t *h, float *m, float *v,
            uint64_t *step)
{
    lisa_rc_t rc = trn_gpu_model_download_weights(g, h);
    if (rc == LISA_OK)
        rc = trn_gpu_model_download_grads(g, h);
    if (rc == LISA_OK)
        rc = trn_gpu_model_get_optim(g, step, m, v);
    return rc;
}

/* Number of values that differ bit for bit. */
static double
s_bits_differ(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], 4) != 0;
    return (double) d;
}

/* The training state off the device and back (trn_gpu_model_set_train_
 * state): the device memory it held is freed; training calls are refused
 * meanwhile while a forward still runs on the bf16 weights (bit for bit
 * the same log-probabilities); back on the device the weights,
 * gradients, moments and step are bit for bit what they were, both ways
 * are idempotent, and the next training step matches a model that never
 * moved its state (up to the backward's atomic sums). A zero gradient
 * comes back zero. */
static void
test_train_state(void)
{
    trn_err_t err = {{0}};
    trn_config_t cfg = s_cfg(512, 1536, 2, 8, 4, 64, 8192, 0, 1e6);
    trn_model_t *cpu = trn_model_new_random(&cfg, 4321, 0.05f, 8);
    trn_model_t *h1 = trn_model_new_random(&cfg, 1, 0.05f, 8);
    trn_model_t *h2 = trn_model_new_random(&cfg, 2, 0.05f, 8);
    trn_gpu_model_t *a = cpu ? trn_gpu_model_new(cpu, &err) : NULL;
    trn_gpu_model_t *b = cpu ? trn_gpu_model_new(cpu, &err) : NULL;
    if (!cpu || !h1 || !h2 || !a || !b) {
        printf("train state: setup: %s\n", err.msg);
        s_fail++;
        return;
    }
    int lens[] = {90, 40};
    s_batch_t sb;
    s_make_batch(&sb, lens, 2, (int) cfg.vocab_size, 9);
    size_t T = sb.b.n_tokens, P = trn_model_num_params(cpu);
    float *lp = malloc(T * 4), *lp0 = malloc(T * 4), *dl = malloc(T * 4);
    float *m1 = malloc(P * 4), *v1 = malloc(P * 4), *m2 = malloc(P * 4),
          *v2 = malloc(P * 4);
    for (size_t t = 0; t < T; t++)
        dl[t] = -1.0f / (float) T;
    uint64_t st1 = 0, st2 = 0;
    size_t f0 = 0, f1 = 0, tot = 0;
    if (s_train_once(a, &sb.b, lp, dl, &err) != LISA_OK ||
        s_train_once(b, &sb.b, lp, dl, &err) != LISA_OK ||
        trn_gpu_model_forward(a, &sb.b, lp0, NULL, &err) != LISA_OK ||
        trn_gpu_model_backward(a, dl, NULL, &err) != LISA_OK || /* grads */
        s_state_get(a, h1, m1, v1, &st1) != LISA_OK ||
        trn_cuda_mem_info(&f0, &tot) != LISA_OK ||
        trn_gpu_model_set_train_state(a, 0, &err) != LISA_OK ||
        trn_cuda_mem_info(&f1, &tot) != LISA_OK ||
        trn_gpu_model_set_train_state(a, 0, &err) != LISA_OK) {
        printf("train state: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    s_check("train state off: device bytes freed short of 4 x P fp32",
            (double) f1 - (double) f0 >= 0.95 * 16.0 * (double) P ? 0.0 : 1.0,
            0);
    s_check("train state off: reported off the device",
            trn_gpu_model_train_state_on_device(a), 0);
    {
        float n = 0;
        int refused =
            trn_gpu_model_zero_grad(a) == LISA_CONFLICT &&
            trn_gpu_model_adamw(a, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.0f,
                                &n) == LISA_CONFLICT &&
            trn_gpu_model_get_optim(a, &st2, m2, v2) == LISA_CONFLICT &&
            trn_gpu_model_download_weights(a, h2) == LISA_CONFLICT &&
            trn_gpu_model_grad_buffer(a, NULL) == NULL;
        s_check("train state off: training calls refused (not: 1)", !refused,
                0);
    }
    if (trn_gpu_model_forward(a, &sb.b, lp, NULL, &err) != LISA_OK) {
        printf("train state: forward while off: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    s_check("train state off: forward logp bits that differ",
            s_bits_differ(lp, lp0, T), 0);
    if (trn_gpu_model_set_train_state(a, 1, &err) != LISA_OK ||
        trn_gpu_model_set_train_state(a, 1, &err) != LISA_OK ||
        s_state_get(a, h2, m2, v2, &st2) != LISA_OK) {
        printf("train state back: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    s_check("train state round trip: weight bits that differ",
            s_bits_differ(trn_model_params(h2), trn_model_params(h1), P), 0);
    s_check("train state round trip: gradient bits that differ",
            s_bits_differ(trn_model_grads(h2), trn_model_grads(h1), P), 0);
    s_check("train state round trip: AdamW m, v bits that differ",
            s_bits_differ(m2, m1, P) + s_bits_differ(v2, v1, P), 0);
    s_check("train state round trip: step", (double) (st2 != st1), 0);
    /* the next step against the model that never moved its state */
    if (s_train_once(a, &sb.b, lp, dl, &err) != LISA_OK ||
        s_train_once(b, &sb.b, lp0, dl, &err) != LISA_OK ||
        s_state_get(a, h1, m1, v1, &st1) != LISA_OK ||
        s_state_get(b, h2, m2, v2, &st2) != LISA_OK) {
        printf("train state: next step: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    s_check("step after the round trip vs never moved: weights",
            s_rel(trn_model_params(h1), trn_model_params(h2), P), 1e-5);
    s_check("step after the round trip vs never moved: m", s_rel(m1, m2, P),
            1e-4);
    s_check("step after the round trip vs never moved: logp", s_rel(lp, lp0, T),
            1e-5);
    /* a zero gradient is not copied, and comes back zero */
    if (trn_gpu_model_zero_grad(a) != LISA_OK ||
        trn_gpu_model_set_train_state(a, 0, &err) != LISA_OK ||
        trn_gpu_model_set_train_state(a, 1, &err) != LISA_OK ||
        trn_gpu_model_download_grads(a, h1) != LISA_OK) {
        printf("train state: zero gradient: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    {
        double nz = 0;
        const float *gr = trn_model_grads(h1);
        for (size_t i = 0; i < P; i++)
            nz += gr[i] != 0.0f;
        s_check("train state round trip of a zero gradient: nonzeros", nz, 0);
    }
out:
    s_free_batch(&sb);
    free(lp), free(lp0), free(dl), free(m1), free(v1), free(m2), free(v2);
    trn_gpu_model_destroy(&a);
    trn_gpu_model_destroy(&b);
    trn_model_destroy(&cpu);
    trn_model_destroy(&h1);
    trn_model_destroy(&h2);
}

/* LISA_CUDA_PHASES=1 at creation: the passes' device time by kind of
 * work, each kind the passes run timed (more than zero), their sum no
 * more than the passes' wall time, and the gradients of an untimed model
 * (to the atomics' rounding); an untimed model reports nothing. */
static void
test_phases(void)
{
    trn_err_t err = {{0}};
    trn_config_t cfg = s_cfg(512, 1536, 2, 8, 4, 64, 8192, 0, 1e6);
    trn_model_t *cpu = trn_model_new_random(&cfg, 99, 0.05f, 8);
    trn_model_t *ga = trn_model_new_random(&cfg, 1, 0.05f, 8);
    trn_model_t *gb = trn_model_new_random(&cfg, 2, 0.05f, 8);
    setenv("LISA_CUDA_PHASES", "1", 1);
    trn_gpu_model_t *a = cpu ? trn_gpu_model_new(cpu, &err) : NULL;
    unsetenv("LISA_CUDA_PHASES");
    trn_gpu_model_t *b = cpu ? trn_gpu_model_new(cpu, &err) : NULL;
    int lens[] = {300, 80};
    s_batch_t sb;
    s_make_batch(&sb, lens, 2, (int) cfg.vocab_size, 5);
    size_t T = sb.b.n_tokens, P = cpu ? trn_model_num_params(cpu) : 0;
    float *lp = malloc(T * 4), *dl = malloc(T * 4);
    for (size_t t = 0; t < T; t++)
        dl[t] = -1.0f / (float) T;
    double ms[TRN_GPU_PHASES] = {0}, none[TRN_GPU_PHASES] = {0}, sum = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!a || !b || !ga || !gb ||
        trn_gpu_model_forward(a, &sb.b, lp, NULL, &err) != LISA_OK ||
        trn_gpu_model_backward(a, dl, NULL, &err) != LISA_OK ||
        trn_cuda_sync() != LISA_OK) {
        printf("phases: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (double) (t1.tv_sec - t0.tv_sec) * 1e3 +
                  (double) (t1.tv_nsec - t0.tv_nsec) / 1e6;
    s_check("phases: a timed model reports (not: 1)",
            !trn_gpu_model_phases(a, ms), 0);
    for (int i = 0; i < TRN_GPU_PHASES; i++) {
        char what[96]; /* every kind runs in these passes */
        snprintf(what, sizeof what, "phases: %s ms > 0 (not: 1)",
                 trn_gpu_model_phase_name(i));
        s_check(what, !(ms[i] > 0), 0);
        sum += ms[i];
    }
    s_check("phases: sum over wall time, past 1", sum / wall > 1.0, 0);
    s_check("phases: an untimed model reports (not: 0)",
            trn_gpu_model_phases(b, none), 0);
    if (trn_gpu_model_forward(b, &sb.b, lp, NULL, &err) != LISA_OK ||
        trn_gpu_model_backward(b, dl, NULL, &err) != LISA_OK ||
        trn_gpu_model_download_grads(a, ga) != LISA_OK ||
        trn_gpu_model_download_grads(b, gb) != LISA_OK) {
        printf("phases: untimed passes: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    /* not bit for bit: the attention backward adds dQ with atomics, whose
     * order differs from run to run */
    s_check("phases: gradients vs an untimed model's (rel)",
            s_rel(trn_model_grads(ga), trn_model_grads(gb), P), 1e-4);
out:
    free(lp), free(dl);
    s_free_batch(&sb);
    trn_gpu_model_destroy(&a);
    trn_gpu_model_destroy(&b);
    trn_model_destroy(&cpu);
    trn_model_destroy(&ga);
    trn_model_destroy(&gb);
}

/* Optimizer offload (trn_gpu_model_set_optim_offload): two models with
 * the same weights get the same gradients (written into their gradient
 * buffers); one keeps its state on the device, the other streams it from
 * host memory in chunks of 100,003 floats (a short last one). No clipping:
 * the norm's atomic sum may differ in its last bit. After each
 * update the weights, moments and step agree bit for bit, and so do the
 * forward's log-probs; the state survives the rollout phase's move off
 * the device, set_optim while offloaded, and coming back. */
static void
test_optim_offload(void)
{
    trn_err_t err = {{0}};
    setenv("LISA_CUDA_OFFLOAD_CHUNK", "100003", 1);
    trn_config_t cfg = s_cfg(256, 512, 2, 4, 2, 64, 1000, 0, 1e4);
    trn_model_t *cpu = trn_model_new_random(&cfg, 77, 0.05f, 8);
    trn_model_t *h1 = trn_model_new_random(&cfg, 1, 0.05f, 8);
    trn_model_t *h2 = trn_model_new_random(&cfg, 2, 0.05f, 8);
    trn_gpu_model_t *a = cpu ? trn_gpu_model_new(cpu, &err) : NULL;
    trn_gpu_model_t *b = cpu ? trn_gpu_model_new(cpu, &err) : NULL;
    size_t P = cpu ? trn_model_num_params(cpu) : 0;
    float *gr = malloc(P * 4), *m1 = malloc(P * 4), *v1 = malloc(P * 4),
          *m2 = malloc(P * 4), *v2 = malloc(P * 4);
    int lens[] = {60, 33};
    s_batch_t sb;
    s_make_batch(&sb, lens, 2, (int) cfg.vocab_size, 5);
    size_t T = sb.b.n_tokens;
    float *lp1 = malloc(T * 4), *lp2 = malloc(T * 4);
    uint64_t st1 = 0, st2 = 0;
    if (!cpu || !h1 || !h2 || !a || !b ||
        trn_gpu_model_set_optim_offload(a, 1, &err) != LISA_OK ||
        trn_gpu_model_set_optim_offload(a, 1, &err) != LISA_OK) {
        printf("optim offload: setup: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    s_check("optim offload: reported", !trn_gpu_model_optim_offloaded(a), 0);
    uint32_t seed = 12345;
    for (int step = 0; step < 4; step++) {
        for (size_t i = 0; i < P; i++) {
            seed = seed * 1664525u + 1013904223u;
            gr[i] = ((float) (seed >> 8) / 16777216.0f - 0.5f) * 1e-2f;
        }
        float na = 0, nb = 0;
        size_t n = 0;
        float *ga = trn_gpu_model_grad_buffer(a, &n);
        float *gb = trn_gpu_model_grad_buffer(b, NULL);
        if (step == 2 && /* the rollout phase's move and back */
            (trn_gpu_model_set_train_state(a, 0, &err) != LISA_OK ||
             trn_gpu_model_set_train_state(a, 1, &err) != LISA_OK ||
             !(ga = trn_gpu_model_grad_buffer(a, &n)))) {
            printf("optim offload: train state: %s\n", err.msg);
            s_fail++;
            goto out;
        }
        if (!ga || !gb || n != P || trn_cuda_upload(ga, gr, P * 4) != LISA_OK ||
            trn_cuda_upload(gb, gr, P * 4) != LISA_OK ||
            trn_gpu_model_adamw(a, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.0f,
                                &na) != LISA_OK ||
            trn_gpu_model_adamw(b, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.0f,
                                &nb) != LISA_OK) {
            printf("optim offload: update %d failed\n", step);
            s_fail++;
            goto out;
        }
        /* the norm is a sum with atomics: equal up to its order */
        s_check("optim offload: gradient norms (rel diff)",
                fabs((double) na - nb) / fmax(1e-30, nb), 1e-5);
    }
    if (s_state_get(a, h1, m1, v1, &st1) != LISA_OK ||
        s_state_get(b, h2, m2, v2, &st2) != LISA_OK ||
        trn_gpu_model_forward(a, &sb.b, lp1, NULL, &err) != LISA_OK ||
        trn_gpu_model_forward(b, &sb.b, lp2, NULL, &err) != LISA_OK) {
        printf("optim offload: state: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    s_check("optim offload vs resident: weight bits that differ",
            s_bits_differ(trn_model_params(h1), trn_model_params(h2), P), 0);
    s_check("optim offload vs resident: m bits that differ",
            s_bits_differ(m1, m2, P), 0);
    s_check("optim offload vs resident: v bits that differ",
            s_bits_differ(v1, v2, P), 0);
    s_check("optim offload vs resident: step", (double) (st1 != st2), 0);
    s_check("optim offload vs resident: logp bits that differ",
            s_bits_differ(lp1, lp2, T), 0);
    /* set_optim while offloaded, then back on the device */
    if (trn_gpu_model_set_optim(a, st2, m2, v2) != LISA_OK ||
        trn_gpu_model_set_optim_offload(a, 0, &err) != LISA_OK ||
        s_state_get(a, h1, m1, v1, &st1) != LISA_OK) {
        printf("optim offload: back: %s\n", err.msg);
        s_fail++;
        goto out;
    }
    s_check("optim offload back on the device: weight bits that differ",
            s_bits_differ(trn_model_params(h1), trn_model_params(h2), P), 0);
    s_check("optim offload back on the device: m, v bits that differ",
            s_bits_differ(m1, m2, P) + s_bits_differ(v1, v2, P), 0);
out:
    unsetenv("LISA_CUDA_OFFLOAD_CHUNK");
    s_free_batch(&sb);
    free(gr), free(m1), free(v1), free(m2), free(v2), free(lp1), free(lp2);
    trn_gpu_model_destroy(&a);
    trn_gpu_model_destroy(&b);
    trn_model_destroy(&cpu);
    trn_model_destroy(&h1);
    trn_model_destroy(&h2);
}

/* --long: a 64k-token trajectory (the recipe's longest). First the 4B
 * shape itself, 36 layers, with the optimizer state offloaded, through
 * forward, backward and AdamW: the update runs, moves the
 * log-probabilities, and every figure stays finite. Then one reduced layer
 * with the 4B shape's head_dim and two query heads a KV head against the
 * CPU reference (the attention kernels' long-range tiles, the LM head in
 * chunks; the slow part, minutes on the CPU). */
static void
test_long(void)
{
    int lens64[] = {65536};
    trn_config_t c = s_cfg(2560, 9728, 36, 32, 8, 128, 151936, 1, 5e6);
    c.max_position_embeddings = 65536;
    trn_err_t err = {{0}};
    trn_gpu_model_t *g = trn_gpu_model_new_random(&c, 7, 0.02f, &err);
    if (!g || trn_gpu_model_set_optim_offload(g, 1, &err) != LISA_OK) {
        printf("64k 4B: setup: %s\n", err.msg);
        s_fail++;
        trn_gpu_model_destroy(&g);
        return;
    }
    s_batch_t sb;
    s_make_batch(&sb, lens64, 1, (int) c.vocab_size, 11);
    size_t T = sb.b.n_tokens, valid = 0;
    float *lp1 = malloc(T * 4), *lp2 = malloc(T * 4), *dl = malloc(T * 4);
    for (size_t t = 0; t < T; t++)
        valid += sb.targets[t] >= 0;
    for (size_t t = 0; t < T; t++)
        dl[t] = sb.targets[t] >= 0 ? -1.0f / (float) valid : 0.0f;
    float gn = NAN;
    trn_gpu_model_last_backward(g);
    lisa_rc_t rc = trn_gpu_model_zero_grad(g);
    if (rc == LISA_OK)
        rc = trn_gpu_model_forward(g, &sb.b, lp1, NULL, &err);
    if (rc == LISA_OK)
        rc = trn_gpu_model_backward(g, dl, NULL, &err);
    if (rc == LISA_OK)
        rc =
            trn_gpu_model_adamw(g, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, &gn);
    if (rc == LISA_OK)
        rc = trn_gpu_model_forward(g, &sb.b, lp2, NULL, &err);
    s_check("64k 4B offloaded: forward, backward, AdamW, forward rc",
            rc == LISA_OK ? 0 : 1, 0.5);
    double l1 = 0, l2 = 0;
    for (size_t t = 0; t < T; t++)
        if (sb.targets[t] >= 0) {
            l1 -= lp1[t];
            l2 -= lp2[t];
        }
    l1 /= (double) valid;
    l2 /= (double) valid;
    printf("  64k 4B: loss %.5f -> %.5f after one update, grad norm %.4g\n", l1,
           l2, (double) gn);
    s_check("64k 4B: loss and grad norm finite",
            isfinite(l1) && isfinite(l2) && isfinite(gn) && gn > 0 ? 0 : 1,
            0.5);
    s_check("64k 4B: the update lowered the loss", l2 < l1 ? 0 : 1, 0.5);
    free(lp1), free(lp2), free(dl);
    s_free_batch(&sb);
    trn_gpu_model_destroy(&g);

    trn_config_t c1 = s_cfg(256, 512, 1, 2, 1, 128, 512, 1, 5e6);
    c1.max_position_embeddings = 65536;
    test_model("64k tokens, 1 layer D=128 G=2", c1, lens64, 1, 0, 5e-2,
               TRN_RECOMPUTE_AUTO);
}

/* trn_gpu_model_max_tokens: a batch of that many tokens trains with every
 * layer recomputed, the figure stays put with the buffers held, and
 * twice as many is refused with an error, not a crash. A model wide
 * enough that the device, not the batch cap, sets the figure. */
static void
test_max_tokens(void)
{
    trn_err_t err = {{0}};
    trn_config_t cfg = s_cfg(2048, 2048, 2, 16, 4, 128, 1000, 1, 1e6);
    trn_model_t *cpu = trn_model_new_random(&cfg, 5, 0.02f, 8);
    trn_gpu_model_t *g = cpu ? trn_gpu_model_new(cpu, &err) : NULL;
    if (!g) {
        printf("max tokens: setup: %s\n", err.msg);
        s_fail++;
        trn_model_destroy(&cpu);
        return;
    }
    trn_gpu_model_set_recompute(g, TRN_RECOMPUTE_ON);
    size_t m = trn_gpu_model_max_tokens(g);
    printf("max tokens: %zu\n", m);
    s_check("max tokens: set by the device, not the cap (not: 1)",
            m < 4096 || m >= TRN_MAX_BATCH_TOKENS, 0);
    size_t nseq = m / 2048;
    int *lens = malloc((nseq + 1) * sizeof *lens);
    for (size_t i = 0; i < nseq; i++)
        lens[i] = 2048;
    if (m % 2048)
        lens[nseq++] = (int) (m % 2048);
    s_batch_t sb;
    s_make_batch(&sb, lens, nseq, (int) cfg.vocab_size, 3);
    float *lp = malloc(m * 4), *dl = malloc(m * 4);
    for (size_t t = 0; t < m; t++)
        dl[t] = (t % 7) ? 0.01f : -0.02f;
    lisa_rc_t rc = trn_gpu_model_zero_grad(g);
    if (rc == LISA_OK)
        rc = trn_gpu_model_forward(g, &sb.b, lp, NULL, &err);
    if (rc == LISA_OK)
        rc = trn_gpu_model_backward(g, dl, NULL, &err);
    if (rc != LISA_OK)
        printf("max tokens: %zu tokens: %s\n", m, err.msg);
    s_check("max tokens: that many train, recomputed (not: 1)", rc != LISA_OK,
            0);
    size_t m2 = trn_gpu_model_max_tokens(g);
    s_check("max tokens: the same with the buffers held (rel)",
            fabs((double) m2 - (double) m) / (double) m, 0.05);
    s_free_batch(&sb);
    free(lp), free(dl);
    /* twice as many: refused */
    for (size_t i = 0; i < nseq; i++)
        lens[i] = 4096;
    s_make_batch(&sb, lens, nseq, (int) cfg.vocab_size, 4);
    lp = malloc(sb.b.n_tokens * 4);
    err = (trn_err_t){{0}};
    rc = trn_gpu_model_forward(g, &sb.b, lp, NULL, &err);
    printf("max tokens: %zu tokens: %s\n", sb.b.n_tokens, err.msg);
    s_check("max tokens: twice as many refused with a reason (not: 1)",
            rc == LISA_OK || !err.msg[0], 0);
    s_free_batch(&sb);
    free(lp), free(lens);
    trn_gpu_model_destroy(&g);
    trn_model_destroy(&cpu);
}

/* ---- context parallelism ------------------------------------------------
 * Ranks are threads, each with its own GPU model of the same weights on
 * the one device; their trn_cp_t sum adds the ranks' buffers on the host
 * (every rank posts its buffer, all add them in rank order, each takes
 * the total). */

#define S_CP_MAXW 3

typedef struct {
    pthread_barrier_t bar;
    int world;
    float *slot[S_CP_MAXW];
} s_cp_group_t;

typedef struct {
    s_cp_group_t *grp;
    int rank;
    trn_gpu_model_t *g;
    const s_batch_t *whole;
    const float *dl, *de;
    size_t *rows, n;
    float *lp, *en;
    lisa_rc_t rc;
    trn_err_t err;
} s_cp_rank_t;

static lisa_rc_t
s_cp_sum(void *self, float *v, size_t n, trn_err_t *err)
{
    s_cp_rank_t *r = self;
    s_cp_group_t *g = r->grp;
    (void) err;
    float *tot = calloc(n ? n : 1, sizeof *tot);
    g->slot[r->rank] = v;
    pthread_barrier_wait(&g->bar);
    for (int k = 0; k < g->world; k++)
        for (size_t i = 0; i < n; i++)
            tot[i] += g->slot[k][i];
    pthread_barrier_wait(&g->bar);
    memcpy(v, tot, n * sizeof *v);
    free(tot);
    return LISA_OK;
}

static void *
s_cp_rank_main(void *arg)
{
    s_cp_rank_t *r = arg;
    const trn_batch_t *w = &r->whole->b;
    size_t T = w->n_tokens;
    r->rows = malloc(T * sizeof *r->rows);
    int32_t *tok = malloc(T * 4), *tgt = malloc(T * 4);
    float *dl = malloc(T * 4), *de = malloc(T * 4);
    trn_cp_t cp = {.self = r, .sum = s_cp_sum};
    trn_batch_t b;
    r->n = trn_cp_part(w, r->rank, r->grp->world, r->rows, tok, tgt, &cp, &b);
    for (size_t i = 0; i < r->n; i++) {
        dl[i] = r->dl[r->rows[i]];
        de[i] = r->de[r->rows[i]];
    }
    r->lp = malloc(r->n * 4);
    r->en = malloc(r->n * 4);
    r->rc = trn_cuda_set_device(0);
    if (r->rc == LISA_OK)
        r->rc = trn_gpu_model_zero_grad(r->g);
    if (r->rc == LISA_OK)
        r->rc = trn_gpu_model_forward(r->g, &b, r->lp, r->en, &r->err);
    if (r->rc == LISA_OK)
        r->rc = trn_gpu_model_backward(r->g, dl, de, &r->err);
    free(tok), free(tgt), free(dl), free(de);
    return NULL;
}

/* `world` models, each with its rows of the batch, against one model over
 * all of it: log-probs, entropies and the ranks' summed gradients. */
static void
test_cp(const char *name, trn_config_t cfg, const int *lens, size_t nseq,
        int world, int recompute)
{
    char what[160];
    trn_err_t err = {{0}};
    trn_model_t *cpu = trn_model_new_random(&cfg, 4321, 0.05f, 16);
    trn_model_t *acc = trn_model_new_random(&cfg, 1, 0.05f, 16);
    trn_gpu_model_t *one = cpu ? trn_gpu_model_new(cpu, &err) : NULL;
    if (!one || !acc) {
        printf("%s: %s\n", name, err.msg);
        s_fail++;
        return;
    }
    trn_gpu_model_set_recompute(one, recompute);
    s_batch_t sb;
    s_make_batch(&sb, lens, nseq, (int) cfg.vocab_size, 91);
    size_t T = sb.b.n_tokens, P = trn_model_num_params(cpu);
    float *lp = malloc(T * 4), *en = malloc(T * 4), *dl = malloc(T * 4);
    float *de = malloc(T * 4), *gref = malloc(P * 4), *gsum = calloc(P, 4);
    float *lp_cp = calloc(T, 4), *en_cp = calloc(T, 4);
    unsigned seed = 11;
    for (size_t t = 0; t < T; t++) {
        dl[t] = (float) (rand_r(&seed) % 2000) / 1000.0f - 1.0f;
        de[t] = (float) (rand_r(&seed) % 2000) / 10000.0f - 0.1f;
    }
    lisa_rc_t rc = trn_gpu_model_zero_grad(one);
    if (rc == LISA_OK)
        rc = trn_gpu_model_forward(one, &sb.b, lp, en, &err);
    if (rc == LISA_OK)
        rc = trn_gpu_model_backward(one, dl, de, &err);
    if (rc == LISA_OK)
        rc = trn_gpu_model_download_grads(one, acc);
    if (rc == LISA_OK)
        memcpy(gref, trn_model_grads(acc), P * 4);
    s_cp_group_t grp = {.world = world};
    s_cp_rank_t ranks[S_CP_MAXW];
    pthread_t th[S_CP_MAXW];
    pthread_barrier_init(&grp.bar, NULL, (unsigned) world);
    for (int k = 0; k < world; k++) {
        ranks[k] = (s_cp_rank_t){.grp = &grp,
                                 .rank = k,
                                 .g = trn_gpu_model_new(cpu, &err),
                                 .whole = &sb,
                                 .dl = dl,
                                 .de = de};
        if (ranks[k].g)
            trn_gpu_model_set_recompute(ranks[k].g, recompute);
    }
    for (int k = 0; k < world; k++)
        if (ranks[k].g)
            pthread_create(&th[k], NULL, s_cp_rank_main, &ranks[k]);
    int bad = rc != LISA_OK;
    for (int k = 0; k < world; k++) {
        s_cp_rank_t *r = &ranks[k];
        if (!r->g) {
            bad = 1;
            continue;
        }
        pthread_join(th[k], NULL);
        if (r->rc != LISA_OK) {
            printf("%s rank %d: %s\n", name, k, r->err.msg);
            bad = 1;
        } else if (trn_gpu_model_download_grads(r->g, acc) == LISA_OK) {
            const float *gk = trn_model_grads(acc);
            for (size_t i = 0; i < P; i++)
                gsum[i] += gk[i];
        } else {
            bad = 1;
        }
        for (size_t i = 0; i < r->n; i++) {
            lp_cp[r->rows[i]] = r->lp[i];
            en_cp[r->rows[i]] = r->en[i];
        }
        free(r->rows), free(r->lp), free(r->en);
        trn_gpu_model_destroy(&r->g);
    }
    pthread_barrier_destroy(&grp.bar);
    snprintf(what, sizeof what, "%s: every rank ran (not: 1)", name);
    s_check(what, bad, 0);
    snprintf(what, sizeof what, "%s: logp vs one model (rel)", name);
    s_check(what, s_rel(lp_cp, lp, T), 1e-3);
    snprintf(what, sizeof what, "%s: entropy vs one model (rel)", name);
    s_check(what, s_rel(en_cp, en, T), 1e-3);
    snprintf(what, sizeof what, "%s: summed grads vs one model (rel)", name);
    s_check(what, s_rel(gsum, gref, P), 2e-2);
    free(lp), free(en), free(dl), free(de), free(gref), free(gsum);
    free(lp_cp), free(en_cp);
    s_free_batch(&sb);
    trn_gpu_model_destroy(&one);
    trn_model_destroy(&acc);
    trn_model_destroy(&cpu);
}

int
main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines survive a killed run */
    if (trn_cuda_device_count() < 1 || trn_cuda_set_device(0) != LISA_OK) {
        printf("no CUDA device\n0 passed, 1 failed\n");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "--long") == 0) {
        test_long();
        printf("\n%d passed, %d failed\n", s_pass, s_fail);
        return s_fail ? 1 : 0;
    }
    int lens1[] = {70, 50, 30};
    test_model("tiny tied D=32", s_cfg(128, 256, 2, 4, 2, 32, 512, 1, 1e6),
               lens1, 3, 5, 5e-2, TRN_RECOMPUTE_AUTO);
    /* the backward's recomputed forward, whole and without the attention */
    test_model("tiny tied D=32, recomputed",
               s_cfg(128, 256, 2, 4, 2, 32, 512, 1, 1e6), lens1, 3, 5, 5e-2,
               TRN_RECOMPUTE_ON);
    test_model("tiny tied D=32, attention kept",
               s_cfg(128, 256, 2, 4, 2, 32, 512, 1, 1e6), lens1, 3, 5, 5e-2,
               TRN_RECOMPUTE_KEEP_ATTN);
    /* kept leanly: the normed inputs, rotated q|k|v and SwiGLU output
     * remade in the backward pass */
    test_model("tiny tied D=32, kept leanly",
               s_cfg(128, 256, 2, 4, 2, 32, 512, 1, 1e6), lens1, 3, 5, 5e-2,
               TRN_RECOMPUTE_LEAN);
    /* the LM head in chunks of 64 rows: logits recomputed in backward */
    s_head_chunk = 64;
    test_model("tiny tied D=32, head in chunks",
               s_cfg(128, 256, 2, 4, 2, 32, 512, 1, 1e6), lens1, 3, 5, 5e-2,
               TRN_RECOMPUTE_AUTO);
    s_head_chunk = 0;
    int lens2[] = {200, 57};
    test_model("small untied D=64 Hk=1",
               s_cfg(256, 512, 3, 4, 1, 64, 1000, 0, 1e4), lens2, 2, 5, 5e-2,
               TRN_RECOMPUTE_AUTO);
    /* Llama (SmolLM2's shape of layer: tied, no q/k norms) and Qwen2 (q/k/v
     * biases: their gradients are checked with every other parameter) */
    test_model(
        "tiny Llama tied D=32",
        s_fam(s_cfg(128, 256, 2, 4, 2, 32, 512, 1, 1e5), TRN_FAMILY_LLAMA),
        lens1, 3, 5, 5e-2, TRN_RECOMPUTE_AUTO);
    test_model(
        "small Llama D=64, recomputed",
        s_fam(s_cfg(256, 512, 3, 4, 1, 64, 1000, 1, 1e4), TRN_FAMILY_LLAMA),
        lens2, 2, 5, 5e-2, TRN_RECOMPUTE_ON);
    test_model(
        "tiny Qwen2 untied D=32",
        s_fam(s_cfg(128, 256, 2, 4, 2, 32, 512, 0, 1e6), TRN_FAMILY_QWEN2),
        lens1, 3, 5, 5e-2, TRN_RECOMPUTE_AUTO);
    test_model(
        "small Qwen2 D=64 Hk=1, attention kept",
        s_fam(s_cfg(256, 512, 3, 4, 1, 64, 1000, 0, 1e4), TRN_FAMILY_QWEN2),
        lens2, 2, 5, 5e-2, TRN_RECOMPUTE_KEEP_ATTN);
    test_model(
        "small Qwen2 D=64 Hk=1, kept leanly",
        s_fam(s_cfg(256, 512, 3, 4, 1, 64, 1000, 0, 1e4), TRN_FAMILY_QWEN2),
        lens2, 2, 5, 5e-2, TRN_RECOMPUTE_LEAN);
    int lens3[] = {40, 24};
    test_model("Qwen3-4B layer shape, 2 layers",
               s_cfg(2560, 9728, 2, 32, 8, 128, 151936, 1, 5e6), lens3, 2, 0,
               /* logp near -12 over a 152k vocabulary: bf16 products */
               2e-1, TRN_RECOMPUTE_AUTO);
    test_train_state();
    test_phases();
    test_optim_offload();
    test_max_tokens();
    int lens4[] = {150, 90};
    test_cp("cp 2 ranks, tiny D=32", s_cfg(128, 256, 2, 4, 2, 32, 512, 1, 1e6),
            lens4, 2, 2, TRN_RECOMPUTE_AUTO);
    test_cp("cp 3 ranks, recomputed, D=64 Hk=1",
            s_cfg(256, 512, 3, 4, 1, 64, 1000, 0, 1e4), lens4, 2, 3,
            TRN_RECOMPUTE_ON);
    /* the heads dealt out unevenly: one, one and two KV heads */
    test_cp("cp 3 ranks, H=8 Hk=4", s_cfg(128, 256, 2, 8, 4, 32, 512, 1, 1e6),
            lens4, 2, 3, TRN_RECOMPUTE_AUTO);
    printf("\n%d passed, %d failed\n", s_pass, s_fail);
    return s_fail ? 1 : 0;
}
