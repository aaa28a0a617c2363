/*
 * lisa_tokenizer tests, on the real Qwen3 tokenizer.json and the byte-level
 * toy tokenizer. The first test is the usage example. Ids were checked
 * against Hugging Face tokenizers (the oracle tests compare whole corpora).
 */
#include "lisa/lisa_ids.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_tokenizer.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#define QWEN LISA_SOURCE_DIR "/tests/fixtures/qwen3-tokenizer"
#define BYTE LISA_SOURCE_DIR "/tests/fixtures/byte-tokenizer"

static lisa_tokenizer_t *s_qwen;

static void
s_setup(void)
{
    s_qwen = lisa_tokenizer_new_from_dir(QWEN);
    cr_assert_not_null(s_qwen);
}

static void
s_teardown(void)
{
    lisa_tokenizer_destroy(&s_qwen);
}

static void
s_expect(const char *text, bool special, const int32_t *want, size_t n)
{
    lisa_ids_t *ids = lisa_ids_new(4096);
    cr_assert_eq(
        lisa_tokenizer_encode(s_qwen, text, strlen(text), special, ids),
        LISA_OK);
    cr_assert_eq(lisa_ids_len(ids), n, "'%s': %zu ids, want %zu", text,
                 lisa_ids_len(ids), n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(lisa_ids_data(ids)[i], want[i], "'%s' id %zu: %d != %d",
                     text, i, lisa_ids_data(ids)[i], want[i]);
    lisa_ids_destroy(&ids);
}

Test(lisa_tokenizer, usage, .init = s_setup, .fini = s_teardown)
{
    /* Load once (a directory with tokenizer.json), encode, decode. */
    const char *text = "<|im_start|>user\nhi<|im_end|>\n";
    lisa_ids_t *ids = lisa_ids_new(1024);
    lisa_rc_t rc = lisa_tokenizer_encode(s_qwen, text, strlen(text), true, ids);
    cr_assert_eq(rc, LISA_OK);
    const int32_t want[] = {151644, 872, 198, 6023, 151645, 198};
    cr_assert_eq(lisa_ids_len(ids), 6);
    cr_assert_arr_eq(lisa_ids_data(ids), want, sizeof want);

    char *back = NULL;
    size_t len = 0;
    rc = lisa_tokenizer_decode(s_qwen, lisa_ids_data(ids), lisa_ids_len(ids), 0,
                               &back, &len);
    cr_assert_eq(rc, LISA_OK);
    cr_assert_str_eq(back, text);
    lisa_free(&back);
    rc = lisa_tokenizer_decode(s_qwen, lisa_ids_data(ids), lisa_ids_len(ids),
                               LISA_DECODE_SKIP_SPECIAL, &back, &len);
    cr_assert_eq(rc, LISA_OK);
    cr_assert_str_eq(back, "user\nhi\n");
    lisa_free(&back);
    lisa_ids_destroy(&ids);

    cr_assert_eq(lisa_tokenizer_vocab_size(s_qwen), 151669);
    cr_assert_eq(lisa_tokenizer_eos_id(s_qwen), 151645);
    cr_assert_eq(lisa_tokenizer_im_start_id(s_qwen), 151644);
    cr_assert_eq(lisa_tokenizer_endoftext_id(s_qwen), 151643);
    cr_assert_eq(lisa_tokenizer_token_to_id(s_qwen, "<tool_call>"), 151657);
    cr_assert_str_eq(lisa_tokenizer_id_to_token(s_qwen, 9707), "Hello");
    cr_assert_str_eq(lisa_tokenizer_id_to_token(s_qwen, 1879), "Ġworld");
}

Test(lisa_tokenizer, known_ids, .init = s_setup, .fini = s_teardown)
{
    s_expect("Hello world", true, (const int32_t[]){9707, 1879}, 2);
    /* \p{N} is one digit per piece */
    s_expect(" 12345", true, (const int32_t[]){220, 16, 17, 18, 19, 20}, 6);
    /* NFC: e + combining acute is é */
    s_expect("caf\xc3\xa9", true, (const int32_t[]){924, 58858}, 2);
    s_expect("cafe\xcc\x81", true, (const int32_t[]){924, 58858}, 2);
    /* special tokens as text when not allowed; <tool_call> stays one */
    s_expect("<|im_end|>", true, (const int32_t[]){151645}, 1);
    s_expect("<tool_call>", false, (const int32_t[]){151657}, 1);
    s_expect("", true, NULL, 0);
}

/* The directory's chat template is kept (lisa_chat picks its renderer);
 * a tokenizer.json alone has none. */
Test(lisa_tokenizer, chat_template, .init = s_setup, .fini = s_teardown)
{
    const char *t = lisa_tokenizer_chat_template(s_qwen);
    cr_assert_not_null(t);
    cr_assert_not_null(strstr(t, "<tool_call>"));
    cr_assert_eq(strncmp(t, "{%- if tools %}", 15), 0);
    lisa_tokenizer_t *f = lisa_tokenizer_new_from_file(QWEN "/tokenizer.json");
    cr_assert_not_null(f);
    cr_assert_null(lisa_tokenizer_chat_template(f));
    lisa_tokenizer_destroy(&f);
}

Test(lisa_tokenizer, special_as_text, .init = s_setup, .fini = s_teardown)
{
    lisa_ids_t *ids = lisa_ids_new(64);
    cr_assert_eq(lisa_tokenizer_encode(s_qwen, "<|im_end|>", 10, false, ids),
                 LISA_OK);
    cr_assert_gt(lisa_ids_len(ids), 1);
    for (size_t i = 0; i < lisa_ids_len(ids); i++)
        cr_assert_lt(lisa_ids_data(ids)[i], 151643);
    char *back = NULL;
    cr_assert_eq(lisa_tokenizer_decode(s_qwen, lisa_ids_data(ids),
                                       lisa_ids_len(ids), 0, &back, NULL),
                 LISA_OK);
    cr_assert_str_eq(back, "<|im_end|>");
    lisa_free(&back);
    lisa_ids_destroy(&ids);
}

Test(lisa_tokenizer, bad_input, .init = s_setup, .fini = s_teardown)
{
    lisa_ids_t *ids = lisa_ids_new(4);
    lisa_ids_t *keep = ids;
    cr_assert_eq(lisa_ids_push(ids, 7), LISA_OK);
    /* invalid UTF-8 (lone continuation, overlong, surrogate) */
    cr_assert_eq(lisa_tokenizer_encode(s_qwen, "a\x80", 2, true, ids),
                 LISA_INVALID);
    cr_assert_eq(lisa_tokenizer_encode(s_qwen, "\xc0\xaf", 2, true, ids),
                 LISA_INVALID);
    cr_assert_eq(lisa_tokenizer_encode(s_qwen, "\xed\xa0\x80", 3, true, ids),
                 LISA_INVALID);
    /* too many ids for the bound: refused, array left as it was */
    const char *long_text = "one two three four five six";
    cr_assert_eq(
        lisa_tokenizer_encode(s_qwen, long_text, strlen(long_text), true, ids),
        LISA_TOOLARGE);
    cr_assert_eq(lisa_ids_len(ids), 1);
    cr_assert_eq(lisa_ids_data(ids)[0], 7);
    cr_assert_eq(ids, keep);
    lisa_ids_destroy(&ids);

    /* unknown ids: skipped like HF, or refused when strict */
    const int32_t bad[] = {9707, 999999, -1, 1879};
    char *t = NULL;
    cr_assert_eq(lisa_tokenizer_decode(s_qwen, bad, 4, 0, &t, NULL), LISA_OK);
    cr_assert_str_eq(t, "Hello world");
    lisa_free(&t);
    cr_assert_eq(
        lisa_tokenizer_decode(s_qwen, bad, 4, LISA_DECODE_STRICT, &t, NULL),
        LISA_INVALID);
    cr_assert_null(t);
    cr_assert_null(lisa_tokenizer_id_to_token(s_qwen, 151700));
    cr_assert_eq(lisa_tokenizer_token_to_id(s_qwen, "no such token!!"), -1);
}

Test(lisa_tokenizer, decode_split_character, .init = s_setup,
     .fini = s_teardown)
{
    /* U+1D11E is two tokens [124596, 252]; the first alone decodes to
     * U+FFFD as HF does */
    lisa_ids_t *ids = lisa_ids_new(16);
    cr_assert_eq(
        lisa_tokenizer_encode(s_qwen, "\xf0\x9d\x84\x9e", 4, true, ids),
        LISA_OK);
    cr_assert_eq(lisa_ids_len(ids), 2);
    cr_assert_eq(lisa_ids_data(ids)[0], 124596);
    cr_assert_eq(lisa_ids_data(ids)[1], 252);
    char *t = NULL;
    cr_assert_eq(
        lisa_tokenizer_decode(s_qwen, lisa_ids_data(ids), 1, 0, &t, NULL),
        LISA_OK);
    cr_assert_str_eq(t, "\xef\xbf\xbd");
    lisa_free(&t);
    size_t n = 0;
    const uint8_t *b =
        lisa_tokenizer_token_bytes(s_qwen, lisa_ids_data(ids)[1], &n);
    cr_assert_not_null(b);
    cr_assert_eq(n, 1);
    cr_assert_eq(b[0], 0x9e);
    lisa_ids_destroy(&ids);
}

Test(lisa_tokenizer, long_runs)
{
    lisa_tokenizer_t *t = lisa_tokenizer_new_from_dir(QWEN);
    size_t n = 200000;
    char *s = lisa_malloc(n);
    memset(s, ' ', n);
    lisa_ids_t *ids = lisa_ids_new(n);
    cr_assert_eq(lisa_tokenizer_encode(t, s, n, true, ids), LISA_OK);
    cr_assert_gt(lisa_ids_len(ids), 0);
    cr_assert_lt(lisa_ids_len(ids), n / 8);
    char *back = NULL;
    size_t blen = 0;
    cr_assert_eq(lisa_tokenizer_decode(t, lisa_ids_data(ids), lisa_ids_len(ids),
                                       0, &back, &blen),
                 LISA_OK);
    cr_assert_eq(blen, n);
    cr_assert(memcmp(back, s, n) == 0);
    lisa_free(&back);
    lisa_free(&s);
    lisa_ids_destroy(&ids);
    lisa_tokenizer_destroy(&t);
}

Test(lisa_tokenizer, byte_tokenizer)
{
    lisa_tokenizer_t *t = lisa_tokenizer_new_from_dir(BYTE);
    cr_assert_not_null(t);
    cr_assert_eq(lisa_tokenizer_vocab_size(t), 265);
    cr_assert_eq(lisa_tokenizer_eos_id(t), 258);
    const char *text = "<|im_start|>A\xc3\xa9";
    lisa_ids_t *ids = lisa_ids_new(16);
    cr_assert_eq(lisa_tokenizer_encode(t, text, strlen(text), true, ids),
                 LISA_OK);
    const int32_t want[] = {257, 'A', 0xc3, 0xa9};
    cr_assert_eq(lisa_ids_len(ids), 4);
    cr_assert_arr_eq(lisa_ids_data(ids), want, sizeof want);
    lisa_ids_destroy(&ids);
    lisa_tokenizer_destroy(&t);
    lisa_tokenizer_destroy(&t);
}

Test(lisa_tokenizer, bad_files)
{
    cr_assert_null(lisa_tokenizer_new_from_dir("/nonexistent"));
    cr_assert_null(lisa_tokenizer_new_from_json("{", 1));
    cr_assert_null(lisa_tokenizer_new_from_json("[]", 2));
    const char *wordpiece = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": "
                            "{\"a\": 0}}}";
    cr_assert_null(lisa_tokenizer_new_from_json(wordpiece, strlen(wordpiece)));
    const char *bad_merge =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": "
        "[[\"a\", \"b\"]]}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, "
        "\"decoder\": {\"type\": \"ByteLevel\"}}";
    cr_assert_null(lisa_tokenizer_new_from_json(bad_merge, strlen(bad_merge)));
    const char *tiny =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, "
        "\"ab\": 2}, \"merges\": [\"a b\"]}, \"pre_tokenizer\": {\"type\": "
        "\"ByteLevel\", \"use_regex\": false}, \"decoder\": {\"type\": "
        "\"ByteLevel\"}}";
    lisa_tokenizer_t *t = lisa_tokenizer_new_from_json(tiny, strlen(tiny));
    cr_assert_not_null(t);
    lisa_ids_t *ids = lisa_ids_new(8);
    /* 'c' is not in the vocabulary and there is no unk: dropped, as HF */
    cr_assert_eq(lisa_tokenizer_encode(t, "abca", 4, true, ids), LISA_OK);
    const int32_t want[] = {2, 0};
    cr_assert_eq(lisa_ids_len(ids), 2);
    cr_assert_arr_eq(lisa_ids_data(ids), want, sizeof want);
    lisa_ids_destroy(&ids);
    lisa_tokenizer_destroy(&t);
}

typedef struct {
    lisa_tokenizer_t *tok;
    const char *text;
    lisa_ids_t *ids;
} s_job_t;

static void *
s_worker(void *arg)
{
    s_job_t *job = arg;
    for (int round = 0; round < 20; round++) {
        lisa_ids_clear(job->ids);
        if (lisa_tokenizer_encode(job->tok, job->text, strlen(job->text), true,
                                  job->ids) != LISA_OK)
            return NULL;
    }
    return job;
}

Test(lisa_tokenizer, shared_between_threads, .init = s_setup,
     .fini = s_teardown)
{
    /* one tokenizer, four threads: same ids as a single-threaded encode */
    const char *text = "The quick brown fox; les caf\xc3\xa9s; 12345 "
                       "<|im_end|> \xe6\x97\xa5\xe6\x9c\xac \n\n  x";
    lisa_ids_t *want = lisa_ids_new(1024);
    cr_assert_eq(lisa_tokenizer_encode(s_qwen, text, strlen(text), true, want),
                 LISA_OK);
    pthread_t th[4];
    s_job_t jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (s_job_t){s_qwen, text, lisa_ids_new(1024)};
        cr_assert_eq(pthread_create(&th[i], NULL, s_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        cr_assert_not_null(r);
        cr_assert_eq(lisa_ids_len(jobs[i].ids), lisa_ids_len(want));
        cr_assert_arr_eq(lisa_ids_data(jobs[i].ids), lisa_ids_data(want),
                         lisa_ids_len(want) * sizeof(int32_t));
        lisa_ids_destroy(&jobs[i].ids);
    }
    lisa_ids_destroy(&want);
}
