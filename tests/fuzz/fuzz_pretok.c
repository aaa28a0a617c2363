/*
 * Fuzz target: the tokenizer's ASCII split for the Qwen pre-tokenizer
 * pattern (s_ascii_match), differentially against pcre2 running the same
 * pattern as the tokenizer compiles it. Input bytes are folded to ASCII;
 * at every position the two must give the same match. The module is
 * compiled into the target.
 */
#include "../../common/src/lisa_tokenizer.c"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static lisa_tokenizer_t s_t;
static bool s_ready;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!s_ready) {
        if (s_add_regex(&s_t, S_QWEN_SPLIT) != LISA_OK || !s_t.ascii[0])
            abort();
        s_ready = true;
    }
    if (size == 0 || size > 4096)
        return 0;
    unsigned char *s = malloc(size);
    /* fold to ASCII, favouring the classes the pattern tells apart */
    static const char pick[] = " \t\n\r\v\f'sStTrReEvVmMlLdDaZ09!.,-_\"";
    for (size_t i = 0; i < size; i++)
        s[i] = data[i] & 0x80
                   ? (unsigned char) pick[data[i] % (sizeof pick - 1)]
                   : data[i];
    pcre2_match_data *md =
        pcre2_match_data_create_from_pattern(s_t.re[0], NULL);
    for (size_t pos = 0; pos < size; pos++) {
        int r = pcre2_match(s_t.re[0], (PCRE2_SPTR) s, size, pos, 0, md, NULL);
        if (r < 0)
            abort(); /* some alternative always matches ASCII */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[0] != pos || ov[1] != s_ascii_match(s, size, pos))
            abort();
    }
    pcre2_match_data_free(md);
    free(s);
    return 0;
}
