/*
 * Fuzz target: the checkpoint decoders of the trainer. The first byte
 * picks safetensors (even) or config.json (odd); the rest is the file.
 * Decoding must never crash, leak or read out of bounds; whatever a
 * safetensors buffer is accepted with, every tensor must lie inside it.
 */
#include "trn_model.h"
#include "trn_safetensors.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (data[0] % 2 == 1) {
        trn_config_t c;
        if (trn_config_parse((const char *) p, n, &c, NULL) == LISA_OK &&
            trn_config_validate(&c, NULL) != LISA_OK)
            abort();
        return 0;
    }
    /* a private copy, so reads past it are caught */
    uint8_t *buf = malloc(n ? n : 1);
    memcpy(buf, p, n);
    trn_st_t *st = NULL;
    if (trn_st_parse(buf, n, &st, NULL) == LISA_OK) {
        for (size_t i = 0; i < trn_st_count(st); i++) {
            const trn_st_tensor_t *t = trn_st_at(st, i);
            const uint8_t *d = t->data;
            if (d < buf || d + t->nbytes > buf + n ||
                t->nbytes != t->numel * trn_dtype_size(t->dtype))
                abort();
            if (t->numel <= 4096 && t->dtype <= TRN_DT_F16) {
                float *f = malloc(t->numel * sizeof *f + 1);
                if (trn_st_to_f32(t, f) != LISA_OK)
                    abort();
                free(f);
            }
        }
    }
    trn_st_destroy(&st);
    free(buf);
    return 0;
}
