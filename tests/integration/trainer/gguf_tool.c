/*
 * gguf_tool: what the GGUF oracle test asks of the trainer's model.
 *
 *   gguf_tool logits MODEL < ids.json   the logits of every position of one
 *                                       sequence (MODEL: a .gguf file or a
 *                                       Hugging Face directory), as JSON
 *   gguf_tool tensor FILE.gguf HF_NAME  one tensor as the model reads it
 *                                       (JSON array of floats)
 */
#include "trn_gguf.h"
#include "trn_model.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
s_logits(const char *model)
{
    json_error_t jerr;
    json_t *ids = json_loadf(stdin, 0, &jerr);
    size_t n = json_array_size(ids);
    if (!n) {
        fprintf(stderr, "gguf_tool: stdin wants a JSON array of ids\n");
        return 1;
    }
    trn_model_t *m = NULL;
    trn_err_t err;
    if (trn_model_load(model, 2, &m, &err) != LISA_OK) {
        fprintf(stderr, "gguf_tool: %s\n", err.msg);
        return 1;
    }
    size_t V = (size_t) trn_model_config(m)->vocab_size;
    int32_t *tok = malloc(n * sizeof *tok);
    float *lg = malloc(n * V * sizeof *lg);
    for (size_t i = 0; i < n; i++)
        tok[i] = (int32_t) json_integer_value(json_array_get(ids, i));
    int status = 1;
    if (trn_model_logits(m, tok, n, lg, &err) != LISA_OK) {
        fprintf(stderr, "gguf_tool: %s\n", err.msg);
    } else {
        printf("[");
        for (size_t i = 0; i < n * V; i++)
            printf("%s%.9g", i ? "," : "", (double) lg[i]);
        printf("]\n");
        status = 0;
    }
    free(tok);
    free(lg);
    json_decref(ids);
    trn_model_destroy(&m);
    return status;
}

static int
s_tensor(const char *path, const char *name)
{
    trn_gguf_t *g = NULL;
    trn_err_t err;
    trn_config_t cfg;
    if (trn_gguf_open(path, &g, &err) != LISA_OK ||
        trn_gguf_config(g, &cfg, &err) != LISA_OK) {
        fprintf(stderr, "gguf_tool: %s\n", err.msg);
        trn_gguf_destroy(&g);
        return 1;
    }
    trn_model_t *m = trn_model_new_random(&cfg, 1, 0.0f, 1);
    long i = trn_model_tensor_find(m, name);
    int status = 1;
    if (i < 0) {
        fprintf(stderr, "gguf_tool: no tensor %s\n", name);
    } else {
        size_t n = trn_model_tensor_numel(m, (size_t) i);
        float *out = malloc(n * sizeof *out);
        if (trn_gguf_read_hf(g, &cfg, name, out, n, &err) != LISA_OK) {
            fprintf(stderr, "gguf_tool: %s\n", err.msg);
        } else {
            printf("[");
            for (size_t k = 0; k < n; k++)
                printf("%s%.9g", k ? "," : "", (double) out[k]);
            printf("]\n");
            status = 0;
        }
        free(out);
    }
    trn_model_destroy(&m);
    trn_gguf_destroy(&g);
    return status;
}

int
main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "logits") == 0)
        return s_logits(argv[2]);
    if (argc == 4 && strcmp(argv[1], "tensor") == 0)
        return s_tensor(argv[2], argv[3]);
    fprintf(stderr, "usage: gguf_tool logits MODEL < ids.json | "
                    "gguf_tool tensor FILE.gguf HF_NAME\n");
    return 2;
}
