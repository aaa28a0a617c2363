/*
 * bench_tokenizer: encode throughput of lisa's tokenizer and of Hugging
 * Face tokenizers on the same corpus, in the same run.
 *
 *   bench_tokenizer [--tokenizer DIR] [--python PY] [--seconds S]
 *
 * The corpus (real agent trajectories from the seed samples plus the
 * generated mixed-script corpus of the oracle tests) is written by
 * bench_hf.py; lisa encodes it text by text on one thread; HF is measured
 * by bench_hf.py with `encode` per text and with `encode_batch` (all
 * cores). Prints MB/s of each and the ratios.
 */
#include "lisa/lisa_ids.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double
s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
    const char *dir = LISA_SOURCE_DIR "/tests/fixtures/qwen3-tokenizer";
    const char *py = LISA_DEFAULT_PYTHON[0] ? LISA_DEFAULT_PYTHON : "python3";
    double seconds = 2.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--tokenizer") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--python") == 0)
            py = argv[i + 1];
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
    }
    char corpus[] = "/tmp/lisa-bench-corpus-XXXXXX";
    int fd = mkstemp(corpus);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    close(fd);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "'%s' '%s/bench/tokenizer/bench_hf.py' --write-corpus '%s'", py,
             LISA_SOURCE_DIR, corpus);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench: cannot write the corpus with %s\n", py);
        return 1;
    }
    json_error_t err;
    json_t *texts = json_load_file(corpus, 0, &err);
    if (!json_is_array(texts)) {
        fprintf(stderr, "bench: bad corpus: %s\n", err.text);
        return 1;
    }
    size_t nbytes = 0;
    for (size_t i = 0; i < json_array_size(texts); i++)
        nbytes += json_string_length(json_array_get(texts, i));

    double t0 = s_now();
    lisa_tokenizer_t *tok = lisa_tokenizer_new_from_dir(dir);
    double load = s_now() - t0;
    if (!tok)
        return 1;
    lisa_ids_t *ids = lisa_ids_new(64u << 20);
    size_t rounds = 0, ntok = 0;
    size_t ntok_round = 0;
    /* one warm-up round fills the word cache, as HF's */
    for (int warm = 1; warm >= 0; warm--) {
        t0 = s_now();
        do {
            for (size_t i = 0; i < json_array_size(texts); i++) {
                json_t *s = json_array_get(texts, i);
                lisa_ids_clear(ids);
                if (lisa_tokenizer_encode(tok, json_string_value(s),
                                          json_string_length(s), true,
                                          ids) != LISA_OK) {
                    fprintf(stderr, "bench: encode failed\n");
                    return 1;
                }
                ntok += lisa_ids_len(ids);
            }
            if (!warm)
                rounds++;
        } while (!warm && s_now() - t0 < seconds);
    }
    double dt = s_now() - t0;
    ntok_round = rounds ? ntok / (rounds + 1) : 0; /* + the warm-up */
    double lisa_mbps = (double) nbytes * (double) rounds / dt / 1e6;

    snprintf(cmd, sizeof cmd,
             "'%s' '%s/bench/tokenizer/bench_hf.py' --tokenizer '%s' "
             "--corpus '%s' --seconds %g",
             py, LISA_SOURCE_DIR, dir, corpus, seconds);
    FILE *p = popen(cmd, "r");
    double hf = 0, hf_batch = 0;
    char line[256];
    while (p && fgets(line, sizeof line, p)) {
        double v;
        if (sscanf(line, "encode %lf", &v) == 1)
            hf = v;
        else if (sscanf(line, "encode_batch %lf", &v) == 1)
            hf_batch = v;
    }
    if (p)
        pclose(p);
    unlink(corpus);

    printf("corpus: %zu texts, %.2f MB\n", json_array_size(texts),
           (double) nbytes / 1e6);
    printf("lisa load tokenizer.json:        %8.3f s\n", load);
    printf("lisa encode (1 thread):          %8.2f MB/s (%.2f M tokens/s, "
           "%.2f bytes/token)\n",
           lisa_mbps, (double) ntok_round * (double) rounds / dt / 1e6,
           ntok_round ? (double) nbytes / (double) ntok_round : 0.0);
    printf("HF tokenizers encode (python):   %8.2f MB/s\n", hf);
    printf("HF tokenizers encode_batch:      %8.2f MB/s (%ld cores)\n",
           hf_batch, sysconf(_SC_NPROCESSORS_ONLN));
    if (hf > 0)
        printf("ratio lisa / HF encode:          %8.2f\n", lisa_mbps / hf);
    if (hf_batch > 0)
        printf("ratio lisa / HF encode_batch:    %8.2f\n",
               lisa_mbps / hf_batch);
    lisa_ids_destroy(&ids);
    lisa_tokenizer_destroy(&tok);
    json_decref(texts);
    return hf > 0 ? 0 : 1;
}
