/*
 * Data-parallel tests over NCCL, one process per GPU:
 *  - W ranks, each with a slice of the batch's sequences, sum their
 *    gradients (all-reduce) to exactly the one-rank gradient of the whole
 *    batch (losses are normalised by whole-batch counts);
 *  - a ZeRO-1 AdamW step (reduce-scatter, sharded update, all-gather)
 *    gives the same weights as the one-rank step;
 *  - context parallelism: each rank its share of every sequence's
 *    positions (the balanced split), the attention's inputs gathered over
 *    NCCL, gives one rank's log-probs and, all-reduced, its gradient;
 *  - a collective whose peer has gone ends in an error within its
 *    deadline instead of hanging.
 *   trn_dist_test [WORLD]      (default 2; needs WORLD GPUs)
 */
#include "trn_cuda.h"
#include "trn_dist.h"
#include "trn_gpu_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int s_fail;

static void
s_check(int rank, const char *what, double err, double tol)
{
    int ok = err <= tol && !isnan(err);
    printf("rank %d: %-46s %.3e (tol %.0e) %s\n", rank, what, err, tol,
           ok ? "ok" : "FAIL");
    fflush(stdout);
    if (!ok)
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

enum { NSEQ = 8 };
static const int s_lens[NSEQ] = {60, 50, 40, 70, 33, 81, 20, 45};

/* Builds the batch of the sequences s with s % world == rank (world 1:
 * all) and the per-token gradient -1/valid_total. */
static void
s_batch(int rank, int world, int vocab, trn_batch_t *b, int32_t **tok,
        int32_t **tgt, size_t **offs, float **dl, size_t *valid_total)
{
    unsigned seed = 99;
    int32_t all[512];
    size_t n = 0, total_valid = 0;
    for (int s = 0; s < NSEQ; s++) {
        total_valid += (size_t) s_lens[s] - 1;
        for (int i = 0; i < s_lens[s]; i++)
            all[n++] = (int32_t) (rand_r(&seed) % (unsigned) vocab);
    }
    *tok = malloc(n * 4);
    *tgt = malloc(n * 4);
    *offs = malloc((NSEQ + 1) * sizeof(size_t));
    *dl = malloc(n * 4);
    size_t t = 0, at = 0, ns = 0;
    (*offs)[0] = 0;
    for (int s = 0; s < NSEQ; s++) {
        int mine = s % world == rank;
        for (int i = 0; i < s_lens[s]; i++, at++) {
            if (!mine)
                continue;
            (*tok)[t] = all[at];
            (*tgt)[t] = i + 1 < s_lens[s] ? all[at + 1] : -1;
            (*dl)[t] = (*tgt)[t] >= 0 ? -1.0f / (float) total_valid : 0.0f;
            t++;
        }
        if (mine)
            (*offs)[++ns] = t;
    }
    b->tokens = *tok;
    b->targets = *tgt;
    b->n_tokens = t;
    b->seq_offsets = *offs;
    b->n_seqs = ns;
    b->temperature = 1.0f;
    b->cp = NULL;
    *valid_total = total_valid;
}

static trn_config_t
s_cfg(void)
{
    trn_config_t c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 256;
    c.intermediate_size = 512;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 64;
    c.vocab_size = 1000;
    c.max_position_embeddings = 4096;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1e6;
    c.tie_word_embeddings = 1;
    return c;
}

static double
s_loss(const float *lp, const int32_t *tgt, size_t n, size_t valid)
{
    double l = 0;
    for (size_t t = 0; t < n; t++)
        if (tgt[t] >= 0)
            l -= lp[t];
    return l / (double) valid;
}

/* One rank's reference of a data-parallel step's gradient: the `world`
 * slices one after another into the zeroed gradient of `one`. */
static lisa_rc_t
s_slices(trn_gpu_model_t *one, int world, int vocab)
{
    trn_err_t err = {{0}};
    lisa_rc_t rc = trn_gpu_model_zero_grad(one);
    for (int r = 0; r < world && rc == LISA_OK; r++) {
        trn_batch_t sb;
        int32_t *st, *sg;
        size_t *so, sv;
        float *sd;
        s_batch(r, world, vocab, &sb, &st, &sg, &so, &sd, &sv);
        float *slp = malloc(sb.n_tokens * 4);
        rc = trn_gpu_model_forward(one, &sb, slp, NULL, &err);
        if (rc == LISA_OK)
            rc = trn_gpu_model_backward(one, sd, NULL, &err);
        free(st), free(sg), free(so), free(sd), free(slp);
    }
    return rc;
}

/* Context parallelism over NCCL on g: this rank's rows of the whole batch
 * fb against one rank's log-probs flp and gradient whole_grad (the batch
 * has no host sum: a gather not over NCCL fails). */
static int
s_cp_check(int rank, int world, trn_gpu_model_t *g, trn_dist_t *d,
           const trn_batch_t *fb, const float *fd, const float *flp,
           const float *whole_grad, trn_model_t *tmp, size_t P)
{
    trn_err_t err = {{0}};
    size_t T = fb->n_tokens;
    size_t *rows = malloc(T * sizeof *rows);
    int32_t *tok = malloc(T * 4), *tgt = malloc(T * 4);
    float *dl = malloc(T * 4), *lp = malloc(T * 4);
    trn_cp_t cp = {0}; /* no host sum: the gathers must go over NCCL */
    trn_batch_t cb;
    size_t n = trn_cp_part(fb, rank, world, rows, tok, tgt, &cp, &cb);
    for (size_t i = 0; i < n; i++)
        dl[i] = fd[rows[i]];
    int rc = 1;
    size_t gn = 0;
    float *copy = NULL;
    if (trn_gpu_model_zero_grad(g) != LISA_OK ||
        trn_gpu_model_forward(g, &cb, lp, NULL, &err) != LISA_OK ||
        trn_gpu_model_backward(g, dl, NULL, &err) != LISA_OK) {
        printf("rank %d: context parallelism: %s\n", rank, err.msg);
        goto out;
    }
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double) lp[i] - flp[rows[i]]) /
                                (fabs((double) flp[rows[i]]) + 1.0));
    s_check(rank, "context parallel log-probs vs one rank", worst, 2e-2);
    float *gbuf = trn_gpu_model_grad_buffer(g, &gn);
    copy = trn_cuda_malloc(gn * 4);
    if (!copy || trn_cuda_copy(copy, gbuf, gn * 4, NULL) != LISA_OK ||
        trn_dist_allreduce_sum(d, copy, gn) != LISA_OK ||
        trn_cuda_download(trn_model_grads(tmp), copy, P * 4) != LISA_OK)
        goto out;
    s_check(rank, "context parallel gradient vs one rank",
            s_rel(trn_model_grads(tmp), whole_grad, P), 3e-2);
    rc = 0;
out:
    trn_cuda_free(&copy);
    free(rows), free(tok), free(tgt), free(dl), free(lp);
    return rc;
}

static int
s_rank_main(int rank, int world, int idfd_r, int idfd_w)
{
    uint8_t id[TRN_DIST_ID_BYTES];
    trn_err_t err = {{0}};
    if (trn_cuda_device_count() < world) {
        printf("rank %d: need %d GPUs, have %d\n", rank, world,
               trn_cuda_device_count());
        return 1;
    }
    if (trn_cuda_set_device(rank) != LISA_OK)
        return 1;
    if (rank == 0) {
        if (trn_dist_make_id(id) != LISA_OK)
            return 1;
        for (int r = 1; r < world; r++)
            if (write(idfd_w, id, sizeof id) != (ssize_t) sizeof id)
                return 1;
    } else if (read(idfd_r, id, sizeof id) != (ssize_t) sizeof id) {
        return 1;
    }
    trn_config_t cfg = s_cfg();
    trn_model_t *cpu = trn_model_new_random(&cfg, 4321, 0.05f, 4);
    trn_model_t *ref = trn_model_new_random(&cfg, 4321, 0.05f, 4);
    size_t P = trn_model_num_params(cpu);

    /* The one-rank references on this GPU:
     *  (a) the whole batch at once (same math, other bf16 rounding: the
     *      products run at other shapes), and
     *  (b) the W slices one after another into the same gradient (the
     *      exact work of the W ranks), then one AdamW step. */
    trn_batch_t fb;
    int32_t *ft, *fg;
    size_t *fo, valid;
    float *fd;
    s_batch(0, 1, (int) cfg.vocab_size, &fb, &ft, &fg, &fo, &fd, &valid);
    float *flp = malloc(fb.n_tokens * 4);
    trn_gpu_model_t *one = trn_gpu_model_new(cpu, &err);
    if (!one || trn_gpu_model_forward(one, &fb, flp, NULL, &err) != LISA_OK ||
        trn_gpu_model_backward(one, fd, NULL, &err) != LISA_OK ||
        trn_gpu_model_download_grads(one, ref) != LISA_OK)
        return 1;
    float *whole_grad = malloc(P * 4);
    memcpy(whole_grad, trn_model_grads(ref), P * 4);
    double ref_loss = s_loss(flp, fg, fb.n_tokens, valid);
    if (s_slices(one, world, (int) cfg.vocab_size) != LISA_OK ||
        trn_gpu_model_download_grads(one, ref) != LISA_OK)
        return 1;
    float *ref_grad = malloc(P * 4);
    memcpy(ref_grad, trn_model_grads(ref), P * 4);
    s_check(rank, "slices summed vs whole batch (bf16 rounding)",
            s_rel(ref_grad, whole_grad, P), 3e-2);
    if (trn_gpu_model_adamw(one, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f,
                            NULL) != LISA_OK ||
        trn_gpu_model_download_weights(one, ref) != LISA_OK)
        return 1;

    /* W ranks, each on its slice. */
    trn_dist_t *d = trn_dist_new(rank, world, id, 60000);
    if (!d) {
        printf("rank %d: could not join the communicator\n", rank);
        return 1;
    }
    trn_batch_t b;
    int32_t *tk, *tg;
    size_t *of;
    float *dl;
    s_batch(rank, world, (int) cfg.vocab_size, &b, &tk, &tg, &of, &dl, &valid);
    float *lp = malloc(b.n_tokens * 4);
    trn_gpu_model_t *g = trn_gpu_model_new(cpu, &err);
    if (!g || trn_gpu_model_set_dist(g, d) != LISA_OK)
        return 1;
    /* first, on the untrained weights: context parallelism against the
     * whole batch on one rank */
    if (s_cp_check(rank, world, g, d, &fb, fd, flp, whole_grad, cpu, P) ||
        trn_gpu_model_zero_grad(g) != LISA_OK ||
        trn_gpu_model_forward(g, &b, lp, NULL, &err) != LISA_OK ||
        trn_gpu_model_backward(g, dl, NULL, &err) != LISA_OK)
        return 1;
    /* the loss: sum of per-rank parts */
    float part = (float) s_loss(lp, tg, b.n_tokens, valid);
    float *dpart = trn_cuda_malloc(4);
    if (trn_cuda_upload(dpart, &part, 4) != LISA_OK ||
        trn_dist_allreduce_sum(d, dpart, 1) != LISA_OK ||
        trn_cuda_download(&part, dpart, 4) != LISA_OK)
        return 1;
    s_check(rank, "loss summed over ranks vs one rank",
            fabs(part - ref_loss) / ref_loss, 5e-5);
    /* gradients: an all-reduced copy against the one-rank gradient */
    size_t gn = 0;
    float *gbuf = trn_gpu_model_grad_buffer(g, &gn);
    float *copy = trn_cuda_malloc(gn * 4);
    if (trn_cuda_copy(copy, gbuf, gn * 4, NULL) != LISA_OK ||
        trn_dist_allreduce_sum(d, copy, gn) != LISA_OK ||
        trn_cuda_download(trn_model_grads(cpu), copy, P * 4) != LISA_OK)
        return 1;
    s_check(rank, "all-reduced gradient vs one rank, same slices",
            s_rel(trn_model_grads(cpu), ref_grad, P), 1e-5);
    trn_cuda_free(&copy);
    /* ZeRO-1 step */
    if (trn_gpu_model_adamw(g, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, NULL) !=
            LISA_OK ||
        trn_gpu_model_download_weights(g, cpu) != LISA_OK)
        return 1;
    s_check(rank, "ZeRO-1 AdamW weights vs one rank",
            s_rel(trn_model_params(cpu), trn_model_params(ref), P), 1e-6);
    /* Three more steps: the sum overlapping the backward pass with every
     * rank marking its backward as the step's last, then with only rank 0
     * marking it (the others start the same buckets in AdamW, as a rank
     * without a micro-batch would), then one reduce-scatter after the
     * backward. AdamW's eps is 1 here, so the update is nearly linear in
     * the gradient and rounding noise is not amplified; the gradient norm
     * is compared too. (The overlapped sums caught a real bug: NCCL's
     * reduce writes the receive buffer of ranks other than the root, so
     * those pass their send buffer, in place.) */
    static const char *what[] = {"overlapped sum", "overlapped on rank 0 only",
                                 "reduce-scatter after the backward"};
    for (int k = 0; k < 3; k++) {
        float n_one = 0, n_dp = 0;
        trn_gpu_model_set_overlap(g, k < 2);
        if (s_slices(one, world, (int) cfg.vocab_size) != LISA_OK ||
            trn_gpu_model_adamw(one, 1e-3f, 0.9f, 0.999f, 1.0f, 0.01f, 1e9f,
                                &n_one) != LISA_OK ||
            trn_gpu_model_download_weights(one, ref) != LISA_OK ||
            trn_gpu_model_zero_grad(g) != LISA_OK ||
            trn_gpu_model_forward(g, &b, lp, NULL, &err) != LISA_OK)
            return 1;
        if (k == 0 || rank == 0)
            trn_gpu_model_last_backward(g);
        if (trn_gpu_model_backward(g, dl, NULL, &err) != LISA_OK ||
            trn_gpu_model_adamw(g, 1e-3f, 0.9f, 0.999f, 1.0f, 0.01f, 1e9f,
                                &n_dp) != LISA_OK ||
            trn_gpu_model_download_weights(g, cpu) != LISA_OK)
            return 1;
        char line[96];
        snprintf(line, sizeof line, "%s: gradient norm", what[k]);
        /* a bucket summed late or not at all moves it by far more than the
         * bf16 rounding of weights that already differ in their last bits */
        s_check(rank, line, fabs(n_dp - n_one) / n_one, 1e-3);
        snprintf(line, sizeof line, "%s: weights", what[k]);
        s_check(rank, line,
                s_rel(trn_model_params(cpu), trn_model_params(ref), P), 1e-6);
    }
    trn_gpu_model_destroy(&one);
    /* Bus bandwidth of the gradient reduction: a 1 GiB fp32 all-reduce. */
    {
        size_t nb = (size_t) 1 << 28;
        float *big = trn_cuda_malloc(nb * 4);
        if (big && trn_cuda_memset(big, 0, nb * 4, NULL) == LISA_OK) {
            double best = 1e9;
            for (int it = 0; it < 6; it++) {
                struct timespec a, z;
                clock_gettime(CLOCK_MONOTONIC, &a);
                if (trn_dist_allreduce_sum(d, big, nb) != LISA_OK)
                    break;
                clock_gettime(CLOCK_MONOTONIC, &z);
                double t = (double) (z.tv_sec - a.tv_sec) +
                           (double) (z.tv_nsec - a.tv_nsec) / 1e9;
                if (it > 0 && t < best)
                    best = t;
            }
            if (rank == 0)
                printf("rank 0: all-reduce 1 GiB fp32: %.2f ms, bus "
                       "bandwidth %.1f GB/s\n",
                       best * 1e3,
                       2.0 * (world - 1) / world * (double) nb * 4 / best /
                           1e9);
        }
        trn_cuda_free(&big);
    }

    /* A peer that leaves: rank 1 exits, rank 0's collective must end. */
    if (world > 1) {
        if (rank == 1) {
            _exit(s_fail ? 1 : 0);
        }
        if (rank == 0) {
            trn_dist_set_timeout(d, 3000);
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            lisa_rc_t rc = trn_dist_allreduce_sum(d, dpart, 1);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double secs = (double) (t1.tv_sec - t0.tv_sec) +
                          (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;
            printf("rank 0: collective with a departed peer -> %s after "
                   "%.1f s\n",
                   lisa_rc_str(rc), secs);
            s_check(rank, "departed peer: error, not a hang (seconds)",
                    rc != LISA_OK ? secs : 1e9, 10.0);
        }
    }
    trn_cuda_free(&dpart);
    trn_gpu_model_destroy(&g);
    trn_dist_destroy(&d);
    trn_model_destroy(&cpu);
    trn_model_destroy(&ref);
    return s_fail ? 1 : 0;
}

int
main(int argc, char **argv)
{
    int world = argc > 1 ? atoi(argv[1]) : 2;
    /* No CUDA call before fork: a CUDA context does not survive it. */
    if (world < 1 || world > 16) {
        printf("world must be 1..16\n0 passed, 1 failed\n");
        return 1;
    }
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    pid_t pids[16];
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            _exit(s_rank_main(r, world, fds[0], fds[1]));
    }
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    printf("\n%d passed, %d failed\n", world - failed, failed);
    return failed ? 1 : 0;
}
