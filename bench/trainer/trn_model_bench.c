/*
 * trn_model_bench: throughput of the CPU reference backend.
 *
 * Prints, for one process: the blocked, threaded projection kernel
 * (y = x W^T) against a plain triple loop measured in the same run (the
 * ratio is the point), then forward+backward training tokens per second
 * and decode steps per second of a Qwen3-shaped model with fewer layers
 * and a smaller vocabulary, so that it finishes in seconds.
 *
 * Usage: trn_model_bench [threads]
 */
#include "trn_model.h"
#include "trn_ops.h"
#include "trn_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

static void
naive_nt(float *y, const float *x, const float *w, size_t T, size_t in,
         size_t out)
{
    for (size_t t = 0; t < T; t++)
        for (size_t o = 0; o < out; o++) {
            float s = 0;
            for (size_t i = 0; i < in; i++)
                s += x[t * in + i] * w[o * in + i];
            y[t * out + o] = s;
        }
}

int
main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    size_t T = 64, in = 1024, out = 1024;
    float *x = malloc(T * in * sizeof *x), *w = malloc(out * in * sizeof *w);
    float *y = malloc(T * out * sizeof *y);
    for (size_t i = 0; i < T * in; i++)
        x[i] = (float) (i % 7) * 0.1f;
    for (size_t i = 0; i < out * in; i++)
        w[i] = (float) (i % 5) * 0.1f;
    double flop = 2.0 * (double) (T * in * out);
    double t0 = now();
    naive_nt(y, x, w, T, in, out);
    double naive = now() - t0;
    trn_pool_t *pool = trn_pool_new(threads);
    trn_mm_nt(pool, y, x, w, T, in, out); /* warm */
    t0 = now();
    int reps = 5;
    for (int r = 0; r < reps; r++)
        trn_mm_nt(pool, y, x, w, T, in, out);
    double blocked = (now() - t0) / reps;
    printf("matmul %zux%zux%zu: naive %.2f GFLOP/s, blocked x%d threads "
           "%.2f GFLOP/s, ratio %.1f\n",
           T, in, out, flop / naive * 1e-9, threads, flop / blocked * 1e-9,
           naive / blocked);
    trn_pool_destroy(&pool);
    free(x);
    free(w);
    free(y);

    /* Qwen3-0.6B layer shapes, 2 layers, 8192-token vocabulary */
    trn_config_t c = {.hidden_size = 1024,
                      .intermediate_size = 3072,
                      .num_hidden_layers = 2,
                      .num_attention_heads = 16,
                      .num_key_value_heads = 8,
                      .head_dim = 128,
                      .vocab_size = 8192,
                      .max_position_embeddings = 4096,
                      .rms_norm_eps = 1e-6,
                      .rope_theta = 1e6,
                      .tie_word_embeddings = true};
    trn_model_t *m = trn_model_new_random(&c, 1, 0.02f, threads);
    size_t n = 256;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    float *lp = malloc(n * sizeof *lp), *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) {
        tok[i] = (int32_t) ((i * 7919) % 8192);
        tgt[i] = i + 1 < n ? tok[i + 1] : -1;
        d[i] = -1.0f / (float) n;
    }
    size_t off[2] = {0, n};
    trn_batch_t b = {tok, tgt, n, off, 1, 1.0f, NULL};
    t0 = now();
    if (trn_model_forward(m, &b, lp, NULL, NULL) != LISA_OK ||
        trn_model_backward(m, d, NULL, NULL) != LISA_OK)
        return 1;
    double fb = now() - t0;
    double params = (double) trn_model_num_params(m);
    printf("train %zu tokens (2 layers, %.0fM params): %.2f s, %.0f "
           "tokens/s, %.2f GFLOP/s (6N per token)\n",
           n, params / 1e6, fb, (double) n / fb,
           6.0 * params * (double) n / fb * 1e-9);
    trn_kv_geom_t g = {.block_size = 64,
                       .n_blocks = 4 * 8,
                       .max_seqs = 4,
                       .max_blocks = 8,
                       .max_tokens = 256};
    trn_kv_t *kv = trn_kv_new(m, &g);
    int32_t blocks[4][8];
    trn_gen_seq_t sq[4];
    for (size_t i = 0; i < 4; i++)
        trn_gen_seq_contiguous(&sq[i], blocks[i], &g, i, 0, tok + 64 * i, 64);
    float *logits = malloc(4 * 8192 * sizeof *logits);
    if (!kv || trn_model_step(m, kv, 4, sq, logits, NULL) != LISA_OK)
        return 1;
    int steps = 16;
    t0 = now();
    for (int s = 0; s < steps; s++) {
        for (size_t i = 0; i < 4; i++)
            trn_gen_seq_contiguous(&sq[i], blocks[i], &g, i, 64 + (size_t) s,
                                   tok + s + (int) i, 1);
        if (trn_model_step(m, kv, 4, sq, logits, NULL) != LISA_OK)
            return 1;
    }
    double dec = now() - t0;
    printf("decode: 4 sequences x %d steps: %.1f tokens/s\n", steps,
           4.0 * steps / dec);
    trn_kv_destroy(&kv);
    trn_model_destroy(&m);
    free(tok);
    free(tgt);
    free(lp);
    free(d);
    free(logits);
    return 0;
}
