/*
 * Fuzz target: the tokenizer on untrusted text and untrusted ids, with the
 * real Qwen3 tokenizer (loaded once). The first byte picks the mode:
 *   0: encode (special tokens allowed or not by bit 1), then decode the
 *      ids back: must equal the NFC of valid input;
 *   1: decode the bytes as little-endian int32 ids (any values);
 *   2: load the bytes as a tokenizer.json (must refuse or load cleanly).
 * Never a crash, a leak or an out-of-bounds access.
 */
#include "lisa/lisa_ids.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_tokenizer.h"
#include "lisa/lisa_unicode.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* fuzz.sh runs from the repository root */
#ifndef LISA_SOURCE_DIR
#define LISA_SOURCE_DIR "."
#endif

static lisa_tokenizer_t *s_tok;

static void
s_free_tok(void)
{
    lisa_tokenizer_destroy(&s_tok);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!s_tok) {
        lisa_log_set_level(LISA_LOG_ERROR);
        const char *dir = getenv("LISA_FUZZ_TOKENIZER");
        s_tok = lisa_tokenizer_new_from_dir(
            dir ? dir : LISA_SOURCE_DIR "/tests/fixtures/qwen3-tokenizer");
        if (!s_tok)
            abort();
        atexit(s_free_tok);
    }
    if (size < 1)
        return 0;
    const char *text = (const char *) data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        lisa_ids_t *ids = lisa_ids_new(1u << 20);
        lisa_rc_t rc =
            lisa_tokenizer_encode(s_tok, text, n, (data[0] & 2) != 0, ids);
        if (rc == LISA_OK) {
            char *back = NULL;
            size_t blen = 0;
            if (lisa_tokenizer_decode(s_tok, lisa_ids_data(ids),
                                      lisa_ids_len(ids), LISA_DECODE_STRICT,
                                      &back, &blen) != LISA_OK)
                abort();
            char *nfc = NULL;
            size_t nlen = 0;
            if (lisa_utf8_nfc(text, n, &nfc, &nlen) != LISA_OK)
                abort();
            const char *want = nfc ? nfc : text;
            size_t wlen = nfc ? nlen : n;
            if (blen != wlen || memcmp(back, want, wlen) != 0)
                abort(); /* encode/decode must round-trip */
            lisa_free(&nfc);
            lisa_free(&back);
        } else if (rc != LISA_INVALID) {
            abort();
        }
        lisa_ids_destroy(&ids);
        break;
    }
    case 1: {
        size_t k = n / 4;
        int32_t *ids = lisa_malloc(k * sizeof *ids + 1);
        memcpy(ids, text, k * 4);
        char *out = NULL;
        if (lisa_tokenizer_decode(s_tok, ids, k, data[0] & 4 ? 1u : 0u, &out,
                                  NULL) != LISA_OK)
            abort();
        lisa_free(&out);
        lisa_free(&ids);
        break;
    }
    default: {
        lisa_tokenizer_t *t = lisa_tokenizer_new_from_json(text, n);
        if (t) {
            lisa_ids_t *ids = lisa_ids_new(4096);
            (void) lisa_tokenizer_encode(t, "hello <|im_end|> world", 22, true,
                                         ids);
            lisa_ids_destroy(&ids);
        }
        lisa_tokenizer_destroy(&t);
    }
    }
    return 0;
}
