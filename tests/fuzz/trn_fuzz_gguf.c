/*
 * Fuzz target: the GGUF reader of the trainer (trn_gguf). The input is a
 * file. Parsing must never crash, leak or read out of bounds; whatever is
 * accepted, every tensor lies inside the buffer and dequantizes, and the
 * config and tokenizer built from it are either refused or valid.
 */
#include "trn_gguf.h"
#include "trn_model.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a private copy, so reads past it are caught */
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    trn_gguf_t *g = NULL;
    if (trn_gguf_parse(buf, size, &g, NULL) == LISA_OK) {
        for (size_t i = 0; i < trn_gguf_count(g); i++) {
            const trn_gguf_tensor_t *t = trn_gguf_tensor(g, i);
            if (t->data < buf || t->data + t->nbytes > buf + size)
                abort();
            if (t->numel <= 4096) {
                float *f = malloc(t->numel * sizeof *f + 1);
                if (trn_gguf_to_f32(t, f, NULL) != LISA_OK)
                    abort();
                free(f);
            }
        }
        trn_config_t c;
        if (trn_gguf_config(g, &c, NULL) == LISA_OK &&
            trn_config_validate(&c, NULL) != LISA_OK)
            abort();
        free(trn_gguf_tokenizer_json(g, NULL));
    }
    trn_gguf_destroy(&g);
    free(buf);
    return 0;
}
