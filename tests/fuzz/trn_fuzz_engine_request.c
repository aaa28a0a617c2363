/*
 * Fuzz target: the generation engine's reading of a /v1/completions body
 * (trn_engine.c's s_parse, compiled into the target) and its stop-string
 * matcher. The input is the body. A body is either refused with a reason
 * or becomes a job within the engine's limits: a prompt of 1 .. context-1
 * token ids below the vocabulary, 1 .. room sampled tokens, at most 64
 * stop ids, at most 16 stop strings of 1 .. 256 bytes, 1 .. 64 choices.
 * An accepted job's prompt is then fed to the stop-string matcher as if
 * it had been sampled, and where the matcher stops must be where a naive
 * search of the whole decoded output first finds a stop string.
 *
 * The engine is a bare struct over a stand-in backend that only answers
 * the model's shape (no model, no HTTP server, no thread); the tokenizer
 * is the Qwen3 fixture when the target runs from the source tree (as
 * scripts/fuzz.sh runs it), else none (stop strings are then refused).
 */
#include "../../services/trainer/trn_engine.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define S_VOCAB 151936
#define S_CTX   2048

static trn_config_t s_cfg = {.vocab_size = S_VOCAB};

static const trn_config_t *
s_config(const trn_backend_t *b)
{
    (void) b;
    return &s_cfg;
}

static const trn_backend_ops_t s_ops = {.name = "fuzz", .config = s_config};
static trn_backend_t s_backend = {.ops = &s_ops};

static trn_engine_t *
s_engine(void)
{
    static trn_engine_t e;
    static bool ready;
    if (!ready) {
        pthread_mutex_init(&e.mu, NULL);
        e.b = &s_backend;
        e.cap_tokens = S_CTX;
        e.geom.block_size = 32;
        e.cfg.seed = 1;
        e.tok = lisa_tokenizer_new_from_dir("tests/fixtures/qwen3-tokenizer");
        ready = true;
    }
    return &e;
}

/* The output index at which the first stop string ends, searched naively
 * over the decoded bytes of toks[0..n) (n: none). *long_tok: some token
 * decodes to more bytes than the matcher's window is sure to hold. */
static size_t
s_naive_stop(const trn_engine_t *e, const s_job_t *j, const int32_t *toks,
             size_t n, bool *long_tok)
{
    size_t cap = 1024, len = 0;
    uint8_t *out = malloc(cap);
    *long_tok = false;
    for (size_t i = 0; i < n; i++) {
        size_t tl = 0;
        const uint8_t *b = lisa_tokenizer_token_bytes(e->tok, toks[i], &tl);
        if (!b)
            tl = 0;
        if (tl > S_TAIL - S_STOP_STR_LEN)
            *long_tok = true;
        if (len + tl > cap) {
            cap = 2 * (len + tl);
            out = realloc(out, cap);
        }
        if (tl)
            memcpy(out + len, b, tl);
        size_t from = len;
        len += tl;
        for (size_t s = 0; s < j->n_stop_str; s++) {
            size_t sl = strlen(j->stop_str[s]);
            /* a match that ends inside this token's bytes */
            for (size_t end = from + 1; end <= len; end++)
                if (end >= sl &&
                    memcmp(out + end - sl, j->stop_str[s], sl) == 0) {
                    free(out);
                    return i;
                }
        }
    }
    free(out);
    return n;
}

static void
s_check_job(trn_engine_t *e, s_job_t *j)
{
    if (j->n_prompt < 1 || j->n_prompt >= S_CTX || j->max_tokens < 1 ||
        j->n_prompt + j->max_tokens > S_CTX)
        abort();
    for (size_t i = 0; i < j->n_prompt; i++)
        if (j->tok[i] < 0 || j->tok[i] >= S_VOCAB)
            abort();
    if (j->n_stop > S_MAX_STOP || j->n_stop_str > S_MAX_STOP_STR)
        abort();
    for (size_t i = 0; i < j->n_stop; i++)
        if (j->stop[i] < 0 || j->stop[i] >= S_VOCAB)
            abort();
    for (size_t i = 0; i < j->n_stop_str; i++) {
        size_t sl = strlen(j->stop_str[i]);
        if (sl < 1 || sl > S_STOP_STR_LEN)
            abort();
    }
    if (!j->rq || j->rq->n < 1 || j->rq->n > S_MAX_N ||
        json_array_size(j->rq->choices) != j->rq->n)
        abort();
    if (j->n_stop_str == 0 || !e->tok)
        return;
    bool long_tok;
    size_t want = s_naive_stop(e, j, j->tok, j->n_prompt, &long_tok);
    size_t got = j->n_prompt;
    for (size_t i = 0; i < j->n_prompt; i++)
        if (s_hits_stop_string(e, j, j->tok[i])) {
            got = i;
            break;
        }
    if (!long_tok && got != want)
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    trn_engine_t *e = s_engine();
    char why[300] = "";
    s_job_t *j = s_parse(e, (const char *) data, size, why, sizeof why);
    if (!j) {
        if (!why[0]) /* a refusal always says why */
            abort();
        return 0;
    }
    s_check_job(e, j);
    s_req_free(&j->rq);
    s_job_free(&j);
    return 0;
}
