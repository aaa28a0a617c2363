/*
 * bench/trainer: lisa's CUDA trainer at the Qwen3-4B shape on one GPU.
 * Prints, one "name value unit" line each (bench/trainer/run.sh pairs them
 * with the PyTorch + transformers peer measured in the same run):
 *   train_tok_s_4k / mfu_4k, train_tok_s_16k / mfu_16k  forward+backward of
 *       one sequence, optimizer excluded, activations kept when they fit
 *       (recompute_<tag> says which); train_tok_s_4k_ckpt with layer
 *       recomputation forced on;
 *   decode_tok_s_b1 / decode_tok_s_b64  sampled decoding after a 128-token
 *       prompt, 128 new tokens per sequence (decode_prefill_ms_* and
 *       decode_step_ms_* split that time into the prompt's step and the
 *       mean one-token step); with --batch B --prompt P --turn O also the
 *       steps that add an O-token observation to every sequence, or to
 *       every other one while the rest decode (turn_step_ms_*,
 *       turn_half_step_ms_*);
 *   with --no-graphs also decode_tok_s_*_nograph: the same with every
 *       kernel launched directly instead of replaying recorded graphs;
 *   step_tok_s_4k, step_tok_s_16k  full training steps of one sequence
 *       (forward, backward, AdamW with clipping at 1.0), median of three
 *       after a warm-up, the state resident; at 16k also with the
 *       optimizer state offloaded (trn_gpu_model_set_optim_offload) as
 *       step_tok_s_16k_offload; step_offload_<tag> and step_recompute_<tag>
 *       say how each ran.
 * With --long: the optimizer state offloaded (a 4B model's state and the
 * activations of 32k tokens do not fit beside each other otherwise),
 * forward+backward of one sequence of 16k, 32k and 64k tokens, printed as
 * train_tok_s_16k_offload, train_tok_s_32k / mfu_32k / recompute_32k (and
 * _64k; the names the PyTorch peer prints for the same lengths) with mem_
 * lines (what the device held), then one AdamW update streamed through
 * the device (adamw_offload_s) and, with the state brought back, the same
 * update resident (adamw_s).
 * MFU counts model FLOPs only: 6 N + 6 L H D T per token (causal
 * attention), N without the embedding, against 989 TFLOP/s dense bf16.
 * With --world W (W GPUs, one process each): data-parallel training
 * steps (forward + backward + ZeRO-1 AdamW with NCCL) at 4k tokens per
 * rank, against the same step on one GPU, printing dp_tok_s_wW and the
 * scaling efficiency (the gradient sum overlapping the backward pass), and
 * the same with one reduce-scatter after the backward (_no_overlap).
 * With --world W --cp T as well: then one T-token sequence trained
 * context-parallel over the W GPUs (each its share of the positions; the
 * attention's inputs all-gathered), a full step (forward, backward, ZeRO-1
 * AdamW), printing cp_tok_s_wW_<T/1024>k and the most device memory a
 * rank held (cp_mem_wW_<T/1024>k).
 *   trn_bench [--layers L] [--quick] [--decode-only] [--no-graphs]
 *             [--batch B [--prompt P] [--turn O] [--trace FILE]]
 *             [--world W [--cp T]] [--long]
 *             [--train T]
 * --train T prints the forward+backward figures of one T-token sequence
 * alone (train_tok_s_<T/1024>k, mfu_, recompute_).
 * --batch B prints the decode figures of batch B alone, after prompts of
 * P tokens (default 128: P sets the context the decode steps read).
 * --batch B --trace FILE also writes the timeline of the last three decode
 * steps' kernels, block by block, to FILE as CSV (a build with the
 * LISA_CUDA_TRACE option; bench/trainer/trace_report.py reads it).
 * With LISA_CUDA_PHASES=1 each forward+backward figure is followed by its
 * device time by kind of work (phase_ms_<tag>_<kind>, the mean of the
 * timed passes; the events that measure it slow the pass a little, and a
 * backward that recomputes layers counts their forward products as
 * products_fwd).
 */
#include "trn_cuda.h"
#include "trn_dist.h"
#include "trn_gpu_model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --trace FILE: where the decode steps' kernel timeline goes */
static const char *s_trace_path;

static double
s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static int
s_cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static trn_config_t
s_qwen3_4b(int layers)
{
    trn_config_t c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 2560;
    c.intermediate_size = 9728;
    c.num_hidden_layers = layers;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.vocab_size = 151936;
    c.max_position_embeddings = 262144;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 5e6;
    c.tie_word_embeddings = 1;
    return c;
}

/* One training sequence of T random tokens: the next token as target,
 * the loss the mean of -logp (d loss / d logp = -1/T). */
typedef struct {
    int32_t *tok, *tgt;
    float *lp, *dl;
    size_t offs[2];
    trn_batch_t b;
} s_seq_t;

static void
s_seq_init(s_seq_t *s, int T, unsigned seed)
{
    s->tok = malloc((size_t) T * 4), s->tgt = malloc((size_t) T * 4);
    s->lp = malloc((size_t) T * 4), s->dl = malloc((size_t) T * 4);
    if (!s->tok || !s->tgt || !s->lp || !s->dl) {
        printf("out of host memory\n");
        exit(1);
    }
    for (int t = 0; t < T; t++)
        s->tok[t] = (int32_t) (rand_r(&seed) % 150000u);
    for (int t = 0; t < T; t++) {
        s->tgt[t] = t + 1 < T ? s->tok[t + 1] : -1;
        s->dl[t] = -1.0f / (float) T;
    }
    s->offs[0] = 0, s->offs[1] = (size_t) T;
    s->b = (trn_batch_t){s->tok, s->tgt, (size_t) T, s->offs, 1, 1.0f, NULL};
}

static void
s_seq_free(s_seq_t *s)
{
    free(s->tok), free(s->tgt), free(s->lp), free(s->dl);
}

/* Model FLOPs of one sequence of T tokens, forward and backward: 6 N +
 * 6 L H D T per token, N without the embedding but with the (tied) LM
 * head. */
static double
s_flops(const trn_config_t *c, int T)
{
    double C = (double) c->hidden_size, I = (double) c->intermediate_size;
    double L = (double) c->num_hidden_layers,
           H = (double) c->num_attention_heads;
    double Hk = (double) c->num_key_value_heads, D = (double) c->head_dim;
    double V = (double) c->vocab_size;
    double n_layer = C * (H + 2 * Hk) * D + H * D * C + 3 * C * I;
    double N = L * n_layer + V * C; /* + LM head (tied) */
    return (6 * N + 6 * L * H * D * T) * T;
}

static const char *
s_recompute_name(const trn_gpu_model_t *g)
{
    return trn_gpu_model_keeps_lean(g)          ? "lean"
           : trn_gpu_model_keeps_activations(g) ? "off"
           : trn_gpu_model_keeps_attention(g)   ? "on-but-attention"
                                                : "on";
}

/* With LISA_CUDA_PHASES=1: the mean device time of a forward+backward
 * by kind of work (phase_ms_<tag>_<kind>), over the last `passes`. */
static void
s_print_phases(trn_gpu_model_t *g, const char *tag, int passes)
{
    double ms[TRN_GPU_PHASES] = {0};
    if (!trn_gpu_model_phases(g, ms))
        return;
    double sum = 0;
    for (int i = 0; i < TRN_GPU_PHASES; i++) {
        printf("phase_ms_%s_%s %.2f ms\n", tag, trn_gpu_model_phase_name(i),
               ms[i] / passes);
        sum += ms[i] / passes;
    }
    printf("phase_ms_%s_all %.2f ms\n", tag, sum);
}

static void
s_train(trn_gpu_model_t *g, const trn_config_t *c, int T, const char *tag,
        int reps)
{
    s_seq_t s;
    s_seq_init(&s, T, 1);
    trn_err_t err = {{0}};
    double times[8];
    for (int it = 0; it < reps + 1; it++) {
        double t0 = s_now();
        if (trn_gpu_model_forward(g, &s.b, s.lp, NULL, &err) != LISA_OK ||
            trn_gpu_model_backward(g, s.dl, NULL, &err) != LISA_OK) {
            printf("train %s failed: %s\n", tag, err.msg);
            exit(1);
        }
        if (it > 0)
            times[it - 1] = s_now() - t0;
        else /* the warm-up's phases are not counted */
            (void) trn_gpu_model_phases(g, (double[TRN_GPU_PHASES]){0});
    }
    qsort(times, (size_t) reps, 8, s_cmp);
    double t = times[reps / 2];
    printf("train_tok_s_%s %.0f tok/s\n", tag, T / t);
    printf("mfu_%s %.1f %%\n", tag, 100 * s_flops(c, T) / t / 989e12);
    printf("recompute_%s %s\n", tag, s_recompute_name(g));
    s_print_phases(g, tag, reps);
    s_seq_free(&s);
}

static void s_turns(trn_gpu_model_t *g, trn_gpu_kv_t *kv, int batch,
                    trn_gen_seq_t *seqs, trn_sample_t *sp, int32_t *out,
                    float *lp, int O, const char *tag);

enum { S_NEW = 128, S_TURNS = 3 };

static void
s_decode(trn_gpu_model_t *g, int batch, int PROMPT, const char *tag, int graphs,
         int turn)
{
    trn_err_t err = {{0}};
    enum { NEW = S_NEW, BS = 16 };
    /* each sequence's blocks one after the other, blocks of 16; room for
     * 2 S_TURNS turns of `turn` tokens after the decode steps */
    size_t mb = (PROMPT + NEW + 2 * S_TURNS * (size_t) turn + BS - 1) / BS;
    trn_kv_geom_t geom = {.block_size = BS,
                          .n_blocks = (size_t) batch * mb,
                          .max_seqs = (size_t) batch,
                          .max_blocks = mb,
                          .max_tokens =
                              (size_t) batch *
                              (size_t) (PROMPT > turn ? PROMPT : turn)};
    trn_gpu_kv_t *kv = trn_gpu_kv_new(g, &geom, &err);
    if (!kv) {
        printf("decode %s: %s\n", tag, err.msg);
        exit(1);
    }
    trn_gpu_kv_set_graphs(kv, graphs);
    trn_gen_seq_t *seqs = malloc((size_t) batch * sizeof *seqs);
    int32_t *tab = malloc((size_t) batch * mb * 4);
    int32_t *prompt = malloc((size_t) batch * PROMPT * 4);
    int32_t *out = malloc((size_t) batch * 4);
    float *lp = malloc((size_t) batch * 4);
    trn_sample_t *sp = malloc((size_t) batch * sizeof *sp);
    unsigned seed = 9;
    for (int i = 0; i < batch * PROMPT; i++)
        prompt[i] = (int32_t) (rand_r(&seed) % 150000u);
    for (size_t i = 0; i < (size_t) batch * mb; i++)
        tab[i] = (int32_t) i;
    double best = 1e9, best_prefill = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < batch; i++) {
            seqs[i] = (trn_gen_seq_t){.slot = (size_t) i,
                                      .blocks = tab + (size_t) i * mb,
                                      .n_blocks = mb,
                                      .start = 0,
                                      .tokens = prompt + (size_t) i * PROMPT,
                                      .n_new = PROMPT};
            sp[i].temperature = 1.0f;
            sp[i].top_p = 1.0f;
            sp[i].top_k = 0;
            sp[i].seed = (uint64_t) i;
        }
        double t0 = s_now(), t1 = t0;
        for (int st = 0; st < NEW; st++) {
            if (s_trace_path && rep == 2 && st == NEW - 3 &&
                trn_cuda_trace_start(1u << 19) != LISA_OK) {
                printf("trace: not in this build (LISA_CUDA_TRACE)\n");
                exit(1);
            }
            if (trn_gpu_model_step(g, kv, (size_t) batch, seqs, sp, out, lp,
                                   NULL, &err) != LISA_OK) {
                printf("decode %s failed: %s\n", tag, err.msg);
                exit(1);
            }
            if (st == 0)
                t1 = s_now();
            for (int i = 0; i < batch; i++) {
                seqs[i].start += seqs[i].n_new;
                seqs[i].n_new = 1;
                seqs[i].tokens = &out[i];
            }
        }
        double t = s_now() - t0;
        if (t < best) {
            best = t;
            best_prefill = t1 - t0;
        }
    }
    if (s_trace_path) {
        FILE *f = fopen(s_trace_path, "w");
        if (!f || trn_cuda_trace_dump(f) != LISA_OK) {
            printf("trace: cannot write %s\n", s_trace_path);
            exit(1);
        }
        fclose(f);
    }
    printf("decode_tok_s_%s %.0f tok/s\n", tag, batch * (double) NEW / best);
    /* the same run split: the prompt's step, then the 127 one-token steps */
    printf("decode_prefill_ms_%s %.2f ms\n", tag, 1e3 * best_prefill);
    printf("decode_step_ms_%s %.3f ms\n", tag,
           1e3 * (best - best_prefill) / (NEW - 1));
    if (turn > 0)
        s_turns(g, kv, batch, seqs, sp, out, lp, turn, tag);
    trn_gpu_kv_destroy(&kv);
    free(seqs), free(tab), free(prompt), free(out), free(lp);
    free(sp);
}

/* One step of the running sequences where those with i % every == 0 get
 * O new tokens (an observation) and the others one (a decode); seconds. */
static double
s_turn_step(trn_gpu_model_t *g, trn_gpu_kv_t *kv, int batch,
            trn_gen_seq_t *seqs, trn_sample_t *sp, int32_t *out, float *lp,
            const int32_t *obs, int O, int every)
{
    trn_err_t err = {{0}};
    for (int i = 0; i < batch; i++)
        if (i % every == 0) {
            seqs[i].tokens = obs + (size_t) i * (size_t) O;
            seqs[i].n_new = (size_t) O;
        }
    double t0 = s_now();
    if (trn_gpu_model_step(g, kv, (size_t) batch, seqs, sp, out, lp, NULL,
                           &err) != LISA_OK) {
        printf("turn step failed: %s\n", err.msg);
        exit(1);
    }
    double t = s_now() - t0;
    for (int i = 0; i < batch; i++) {
        seqs[i].start += seqs[i].n_new;
        seqs[i].n_new = 1;
        seqs[i].tokens = &out[i];
    }
    return t;
}

/* With --turn O, after the decode steps: S_TURNS steps in which every
 * sequence gets O new tokens (turn_step_ms_<tag>_o<O>, the median; what
 * the engine runs when a conversation's next turn arrives), then S_TURNS
 * in which every other one does while the rest decode
 * (turn_half_step_ms_...), and with LISA_CUDA_PHASES=1 each kind's
 * device time by kind of work (phase_ms_turn_<tag>_<kind>,
 * phase_ms_turn_half_<tag>_<kind>). */
static void
s_turns(trn_gpu_model_t *g, trn_gpu_kv_t *kv, int batch, trn_gen_seq_t *seqs,
        trn_sample_t *sp, int32_t *out, float *lp, int O, const char *tag)
{
    int32_t *obs = malloc((size_t) batch * (size_t) O * 4);
    unsigned seed = 11;
    for (size_t i = 0; i < (size_t) batch * (size_t) O; i++)
        obs[i] = (int32_t) (rand_r(&seed) % 150000u);
    double t[S_TURNS], th[S_TURNS];
    char ptag[64];
    (void) trn_gpu_model_phases(g, (double[TRN_GPU_PHASES]){0});
    for (int r = 0; r < S_TURNS; r++)
        t[r] = s_turn_step(g, kv, batch, seqs, sp, out, lp, obs, O, 1);
    snprintf(ptag, sizeof ptag, "turn_%s", tag);
    s_print_phases(g, ptag, S_TURNS);
    for (int r = 0; r < S_TURNS; r++)
        th[r] = s_turn_step(g, kv, batch, seqs, sp, out, lp, obs, O, 2);
    snprintf(ptag, sizeof ptag, "turn_half_%s", tag);
    s_print_phases(g, ptag, S_TURNS);
    qsort(t, S_TURNS, sizeof t[0], s_cmp);
    qsort(th, S_TURNS, sizeof th[0], s_cmp);
    printf("turn_step_ms_%s_o%d %.2f ms (%d new tokens)\n", tag, O,
           1e3 * t[S_TURNS / 2], batch * O);
    printf("turn_half_step_ms_%s_o%d %.2f ms (%d new tokens)\n", tag, O,
           1e3 * th[S_TURNS / 2], (batch + 1) / 2 * O + batch / 2);
    free(obs);
}

/* Median seconds of `reps` full training steps (forward, backward, AdamW)
 * of batch b on this rank, after a warm-up. `last`: each backward is
 * marked the step's last, so a data-parallel gradient sum overlaps it (not
 * in a context-parallel one: its own collectives come first); *peak (when
 * not NULL): the most device memory in use after a step. */
static double
s_steps_of(trn_gpu_model_t *g, const trn_batch_t *b, const float *dl, float *lp,
           int reps, int last, size_t *peak)
{
    trn_err_t err = {{0}};
    double times[8];
    if (peak)
        *peak = 0;
    for (int it = 0; it < reps + 1; it++) {
        double t0 = s_now();
        if (last)
            trn_gpu_model_last_backward(g); /* one micro-batch per step */
        if (trn_gpu_model_zero_grad(g) != LISA_OK ||
            trn_gpu_model_forward(g, b, lp, NULL, &err) != LISA_OK ||
            trn_gpu_model_backward(g, dl, NULL, &err) != LISA_OK ||
            trn_gpu_model_adamw(g, 1e-6f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f,
                                NULL) != LISA_OK ||
            trn_cuda_sync() != LISA_OK) {
            printf("step failed: %s\n", err.msg);
            exit(1);
        }
        if (it > 0)
            times[it - 1] = s_now() - t0;
        size_t free_b = 0, total_b = 0;
        if (peak && trn_cuda_mem_info(&free_b, &total_b) == LISA_OK &&
            total_b - free_b > *peak)
            *peak = total_b - free_b;
    }
    qsort(times, (size_t) reps, 8, s_cmp);
    return times[reps / 2];
}

/* The same of one T-token sequence on this rank. */
static double
s_steps(trn_gpu_model_t *g, int T, int reps)
{
    s_seq_t s;
    s_seq_init(&s, T, 3);
    double t = s_steps_of(g, &s.b, s.dl, s.lp, reps, 1, NULL);
    s_seq_free(&s);
    return t;
}

/* The same of one T-token sequence trained context-parallel over the
 * ranks (this rank's share of the positions); *peak as above. */
static double
s_cp_steps(trn_gpu_model_t *g, int rank, int world, int T, int reps,
           size_t *peak)
{
    s_seq_t s;
    s_seq_init(&s, T, 5);
    size_t *rows = malloc((size_t) T * sizeof *rows);
    int32_t *tok = malloc((size_t) T * 4), *tgt = malloc((size_t) T * 4);
    float *dl = malloc((size_t) T * 4);
    trn_cp_t cp = {0}; /* the gathers go over NCCL: no host sum */
    trn_batch_t b;
    size_t n = trn_cp_part(&s.b, rank, world, rows, tok, tgt, &cp, &b);
    for (size_t i = 0; i < n; i++)
        dl[i] = s.dl[rows[i]];
    double t = s_steps_of(g, &b, dl, s.lp, reps, 0, peak);
    free(rows), free(tok), free(tgt), free(dl);
    s_seq_free(&s);
    return t;
}

static int
s_dp_rank(int rank, int world, int layers, int cp_T, int fd_r, int fd_w,
          int fd_out)
{
    uint8_t id[TRN_DIST_ID_BYTES];
    if (trn_cuda_set_device(rank) != LISA_OK)
        return 1;
    if (rank == 0) {
        if (trn_dist_make_id(id) != LISA_OK)
            return 1;
        for (int r = 1; r < world; r++)
            if (write(fd_w, id, sizeof id) != (ssize_t) sizeof id)
                return 1;
    } else if (read(fd_r, id, sizeof id) != (ssize_t) sizeof id) {
        return 1;
    }
    trn_config_t c = s_qwen3_4b(layers);
    trn_err_t err = {{0}};
    trn_gpu_model_t *g = trn_gpu_model_new_random(&c, 1, 0.02f, &err);
    trn_dist_t *d = trn_dist_new(rank, world, id, 120000);
    if (!g || !d || trn_gpu_model_set_dist(g, d) != LISA_OK)
        return 1;
    /* the gradient sum after the backward pass, then overlapping it */
    trn_gpu_model_set_overlap(g, 0);
    double t_after = s_steps(g, 4096, 3);
    trn_gpu_model_set_overlap(g, 1);
    double t = s_steps(g, 4096, 3);
    double tcp = 0;
    size_t peak = 0;
    if (cp_T > 0) {
        trn_gpu_model_free_activations(g); /* sized for the long sequence */
        tcp = s_cp_steps(g, rank, world, cp_T, 2, &peak);
    }
    if (rank == 0) {
        char line[160];
        int n = snprintf(line, sizeof line, "%.6f %.6f %.6f %zu\n", t, t_after,
                         tcp, peak);
        if (write(fd_out, line, (size_t) n) != n)
            return 1;
    }
    trn_gpu_model_destroy(&g);
    trn_dist_destroy(&d);
    return 0;
}

/* Data parallel over `world` GPUs (fork before any CUDA call); with
 * cp_T > 0, context parallelism over them too. */
static int
s_dp(int world, int layers, int cp_T)
{
    int ids[2], outp[2];
    if (pipe(ids) != 0 || pipe(outp) != 0)
        return 1;
    pid_t pids[16];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(s_dp_rank(r, world, layers, cp_T, ids[0], ids[1], outp[1]));
    }
    int bad = 0;
    for (int r = 0; r < world; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    char buf[160] = {0};
    if (bad || read(outp[0], buf, sizeof buf - 1) <= 0) {
        printf("data-parallel run failed\n");
        return 1;
    }
    double tw = 0, tw_after = 0, tcp = 0;
    size_t peak = 0;
    if (sscanf(buf, "%lf %lf %lf %zu", &tw, &tw_after, &tcp, &peak) != 4) {
        printf("data-parallel run failed\n");
        return 1;
    }
    /* one GPU, same step, in a child too (the parent stays CUDA-free) */
    int one[2];
    if (pipe(one) != 0)
        return 1;
    pid_t p1 = fork();
    if (p1 == 0) {
        trn_config_t c = s_qwen3_4b(layers);
        trn_err_t err = {{0}};
        if (trn_cuda_set_device(0) != LISA_OK)
            _exit(1);
        trn_gpu_model_t *g = trn_gpu_model_new_random(&c, 1, 0.02f, &err);
        if (!g)
            _exit(1);
        char line[64];
        int n = snprintf(line, sizeof line, "%.6f\n", s_steps(g, 4096, 3));
        _exit(write(one[1], line, (size_t) n) == n ? 0 : 1);
    }
    int st = 0;
    waitpid(p1, &st, 0);
    memset(buf, 0, sizeof buf);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
        read(one[0], buf, sizeof buf - 1) <= 0) {
        printf("one-GPU run failed\n");
        return 1;
    }
    double t1 = atof(buf);
    printf("step_tok_s_1gpu %.0f tok/s\n", 4096 / t1);
    printf("dp_tok_s_w%d %.0f tok/s\n", world, world * 4096 / tw);
    printf("dp_scaling_w%d %.1f %%\n", world, 100.0 * t1 / tw);
    /* the same with one reduce-scatter after the backward pass */
    printf("dp_tok_s_w%d_no_overlap %.0f tok/s\n", world,
           world * 4096 / tw_after);
    printf("dp_scaling_w%d_no_overlap %.1f %%\n", world, 100.0 * t1 / tw_after);
    if (cp_T > 0) {
        printf("cp_tok_s_w%d_%dk %.0f tok/s\n", world, cp_T / 1024, cp_T / tcp);
        printf("cp_mem_w%d_%dk %.1f GiB (rank 0, after a step)\n", world,
               cp_T / 1024, (double) peak / (1u << 30));
    }
    return 0;
}

/* One AdamW update, timed (seconds; < 0 on failure). */
static double
s_adamw(trn_gpu_model_t *g)
{
    float gn = 0;
    double t0 = s_now();
    if (trn_gpu_model_adamw(g, 1e-6f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, &gn) !=
            LISA_OK ||
        trn_cuda_sync() != LISA_OK)
        return -1;
    return s_now() - t0;
}

/* What the device holds now (the model's state and activations). */
static void
s_mem(const char *tag)
{
    size_t fr = 0, tot = 0;
    if (trn_cuda_mem_info(&fr, &tot) == LISA_OK)
        printf("mem_%s %.1f GiB in use of %.1f\n", tag,
               (double) (tot - fr) / (1 << 30), (double) tot / (1 << 30));
}

/* Moves the optimizer state to host memory (on) or back (off); the
 * activations are freed first, so the next forward plans them anew for
 * the memory then free. */
static int
s_set_offload(trn_gpu_model_t *g, int on)
{
    trn_err_t err = {{0}};
    trn_gpu_model_free_activations(g);
    if (trn_gpu_model_set_optim_offload(g, on, &err) != LISA_OK) {
        printf("optimizer offload %s failed: %s\n", on ? "on" : "off", err.msg);
        return 1;
    }
    return 0;
}

/* Full training steps of one sequence of T tokens (forward, backward,
 * AdamW): step_tok_s_<tag>. With `offload` the optimizer state goes to
 * host memory for these steps and comes back after. */
static int
s_step(trn_gpu_model_t *g, int T, const char *tag, int offload)
{
    if (offload && s_set_offload(g, 1) != 0)
        return 1;
    double t = s_steps(g, T, 3);
    printf("step_tok_s_%s %.0f tok/s\n", tag, T / t);
    printf("step_recompute_%s %s\n", tag, s_recompute_name(g));
    printf("step_offload_%s %s\n", tag,
           trn_gpu_model_optim_offloaded(g) ? "on" : "off");
    return offload ? s_set_offload(g, 0) : 0;
}

/* --long: 16k, 32k and 64k tokens with the optimizer state offloaded
 * (32k and 64k under the names the peer prints for those lengths; 16k as
 * 16k_offload beside the default run's resident 16k), then one AdamW
 * update streamed through the device and, with the state back, the same
 * update resident. */
static int
s_long(trn_gpu_model_t *g, const trn_config_t *c)
{
    if (s_set_offload(g, 1) != 0)
        return 1;
    static const int lens[] = {16384, 32768, 65536};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "%dk%s", lens[i] / 1024,
                 lens[i] == 16384 ? "_offload" : "");
        s_train(g, c, lens[i], tag, 3);
        s_mem(tag);
    }
    double t = s_adamw(g);
    printf("adamw_offload_s %.3f s\n", t);
    if (s_set_offload(g, 0) != 0)
        return 1;
    printf("adamw_s %.3f s\n", s_adamw(g));
    return t < 0;
}

int
main(int argc, char **argv)
{
    int layers = 36, quick = 0, world = 0, decode_only = 0, no_graphs = 0;
    int batch = 0, prompt = 128, long_seqs = 0, train_len = 0, cp_T = 0;
    int turn = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
            layers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--decode-only") == 0)
            decode_only = 1;
        else if (strcmp(argv[i], "--no-graphs") == 0)
            no_graphs = 1;
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            batch = (int) strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--prompt") == 0 && i + 1 < argc)
            prompt = (int) strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--world") == 0 && i + 1 < argc)
            world = atoi(argv[++i]);
        else if (strcmp(argv[i], "--long") == 0)
            long_seqs = 1;
        else if (strcmp(argv[i], "--train") == 0 && i + 1 < argc)
            train_len = (int) strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--cp") == 0 && i + 1 < argc)
            cp_T = (int) strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--turn") == 0 && i + 1 < argc)
            turn = (int) strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--trace") == 0 && i + 1 < argc)
            s_trace_path = argv[++i];
    }
    if (world >= 1)
        return s_dp(world, layers, cp_T);
    if (trn_cuda_device_count() < 1 || trn_cuda_set_device(0) != LISA_OK) {
        printf("no CUDA device\n");
        return 1;
    }
    trn_config_t c = s_qwen3_4b(layers);
    trn_err_t err = {{0}};
    trn_gpu_model_t *g = trn_gpu_model_new_random(&c, 1, 0.02f, &err);
    if (!g) {
        printf("model: %s\n", err.msg);
        return 1;
    }
    printf("params %.3f B (Qwen3-4B shape, %d layers)\n",
           (double) trn_gpu_model_num_params(g) / 1e9, layers);
    if (batch > 0) { /* one decode figure only (for profilers) */
        char tag[32];
        snprintf(tag, sizeof tag, "b%d", batch);
        s_decode(g, batch, prompt, tag, !no_graphs, turn);
        trn_gpu_model_destroy(&g);
        return 0;
    }
    if (train_len > 0) { /* one forward+backward figure only */
        char tag[32];
        snprintf(tag, sizeof tag, "%dk", train_len / 1024);
        s_train(g, &c, train_len, tag, 3);
        trn_gpu_model_destroy(&g);
        return 0;
    }
    if (long_seqs) {
        int rc = s_long(g, &c);
        trn_gpu_model_destroy(&g);
        return rc;
    }
    if (!decode_only)
        s_train(g, &c, 4096, "4k", quick ? 1 : 3);
    if (!quick && !decode_only) {
        if (s_step(g, 4096, "4k", 0) != 0) {
            trn_gpu_model_destroy(&g);
            return 1;
        }
        /* the same with layer recomputation forced on (as a peer with
         * gradient checkpointing runs) */
        trn_gpu_model_set_recompute(g, TRN_RECOMPUTE_ON);
        s_train(g, &c, 4096, "4k_ckpt", 3);
        trn_gpu_model_set_recompute(g, TRN_RECOMPUTE_AUTO);
        s_train(g, &c, 16384, "16k", 3);
        /* resident (recomputing what does not fit), then with the
         * optimizer state offloaded (activations kept, a slower update) */
        if (s_step(g, 16384, "16k", 0) != 0 ||
            s_step(g, 16384, "16k_offload", 1) != 0) {
            trn_gpu_model_destroy(&g);
            return 1;
        }
    }
    s_decode(g, 1, 128, "b1", 1, 0);
    s_decode(g, 64, 128, "b64", 1, 0);
    if (no_graphs) { /* the same steps with every kernel launched directly */
        s_decode(g, 1, 128, "b1_nograph", 0, 0);
        s_decode(g, 64, 128, "b64_nograph", 0, 0);
    }
    trn_gpu_model_destroy(&g);
    return 0;
}
