/*
 * Fuzz target: the gateway's quick JSON reader, differentially. Whenever
 * gw_json_load answers, jansson must accept the same bytes with the same
 * flags and an equal value, with the keys in the same order (compared as
 * jansson's dumps of both); whenever gw_json_dump answers, it writes
 * jansson's bytes. The first byte picks the reader's flags. The module is
 * compiled into the target (it depends only on liblisa's libraries).
 */
#include "../../services/gateway/gw_json.c"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const size_t fl[] = {0, JSON_REJECT_DUPLICATES, JSON_DECODE_ANY,
                                JSON_REJECT_DUPLICATES | JSON_DECODE_ANY};
    size_t flags = fl[data[0] % 4];
    const char *p = (const char *) data + 1;
    size--;
    json_t *f = gw_json_load(p, size, flags);
    if (!f)
        return 0;
    json_error_t e;
    json_t *j = json_loadb(p, size, flags, &e);
    if (!j || !json_equal(f, j))
        abort();
    size_t df = JSON_PRESERVE_ORDER | JSON_ENCODE_ANY | JSON_COMPACT;
    char *a = json_dumps(f, df), *b = json_dumps(j, df);
    if (!a || !b || strcmp(a, b) != 0)
        abort();
    free(a);
    free(b);
    /* the writer: jansson's bytes whenever it answers */
    static const size_t wf[] = {JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY,
                                JSON_PRESERVE_ORDER | JSON_ENCODE_ANY,
                                JSON_PRESERVE_ORDER, JSON_COMPACT};
    for (size_t i = 0; i < sizeof wf / sizeof wf[0]; i++) {
        char *w = gw_json_dump(j, wf[i]), *r = json_dumps(j, wf[i]);
        if (w && (!r || strcmp(w, r) != 0))
            abort();
        free(w);
        free(r);
    }
    json_decref(f);
    json_decref(j);
    return 0;
}
