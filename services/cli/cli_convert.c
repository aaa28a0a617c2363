/*
 * cli_convert: `lisa convert FILE.gguf DIR`, a GGUF model (llama.cpp's
 * single file) as a Hugging Face directory that transformers and
 * lisa-trainer load: config.json and model.safetensors (the tensors
 * dequantized to F32 or BF16, Llama's q/k rows back in Hugging Face's
 * order), tokenizer.json and tokenizer_config.json with the file's chat
 * template.
 */
#include "cli.h"
#include "lisa/lisa_rc.h"
#include "trn_gguf.h"
#include "trn_model.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void
s_usage(void)
{
    printf("usage: lisa convert FILE.gguf DIR [--dtype f32|bf16]\n"
           "  writes DIR/config.json, model.safetensors, tokenizer.json and\n"
           "  tokenizer_config.json (DIR is made when missing; default "
           "dtype bf16)\n");
}

int
cli_convert(int argc, char **argv)
{
    const char *in = NULL, *dir = NULL;
    trn_save_dtype_t dt = TRN_SAVE_BF16;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            s_usage();
            return 0;
        }
        if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "f32") == 0) {
                dt = TRN_SAVE_F32;
            } else if (strcmp(d, "bf16") == 0) {
                dt = TRN_SAVE_BF16;
            } else {
                fprintf(stderr, "lisa convert: --dtype is f32 or bf16\n");
                return 2;
            }
        } else if (!in) {
            in = argv[i];
        } else if (!dir) {
            dir = argv[i];
        } else {
            s_usage();
            return 2;
        }
    }
    if (!in || !dir) {
        s_usage();
        return 2;
    }
    struct stat sb;
    if (stat(in, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fprintf(stderr, "lisa convert: %s is not a file\n", in);
        return 1;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "lisa convert: cannot make %s: %s\n", dir,
                strerror(errno));
        return 1;
    }
    trn_err_t err = {{0}};
    trn_model_t *m = NULL;
    trn_gguf_t *g = NULL;
    int status = 1;
    if (trn_model_load(in, 1, &m, &err) != LISA_OK ||
        trn_model_save(m, dir, dt, &err) != LISA_OK ||
        trn_gguf_open(in, &g, &err) != LISA_OK ||
        trn_gguf_write_tokenizer(g, dir, &err) != LISA_OK) {
        fprintf(stderr, "lisa convert: %s\n", err.msg);
        goto out;
    }
    const trn_config_t *c = trn_model_config(m);
    printf("%s: %s, %lld layers, hidden %lld, vocab %lld, %zu parameters -> "
           "%s\n",
           in, trn_family_model_type(c->family),
           (long long) c->num_hidden_layers, (long long) c->hidden_size,
           (long long) c->vocab_size, trn_model_num_params(m), dir);
    status = 0;
out:
    trn_gguf_destroy(&g);
    trn_model_destroy(&m);
    return status;
}
