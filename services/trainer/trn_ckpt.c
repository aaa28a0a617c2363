/*
 * trn_ckpt: checkpoint directories (see trn_ckpt.h).
 */
#include "trn_ckpt.h"

#include "lisa/lisa_json.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static lisa_rc_t
s_rmtree_files(const char *dir)
{
    /* the .tmp directory holds only files we wrote */
    static const char *const names[] = {"config.json",
                                        "model.safetensors",
                                        "optimizer.bin",
                                        "trainer_state.json",
                                        "tokenizer.json",
                                        "tokenizer_config.json",
                                        "generation_config.json",
                                        "special_tokens_map.json",
                                        "vocab.json",
                                        "merges.txt",
                                        "added_tokens.json",
                                        "chat_template.jinja"};
    char p[4096];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        (void) unlink(p);
    }
    return rmdir(dir) == 0 || errno == ENOENT ? LISA_OK : LISA_ERR;
}

lisa_rc_t
trn_ckpt_save(trn_backend_t *b, const char *out, const trn_ckpt_state_t *st,
              bool bf16, char *dir_out, size_t dir_len, trn_err_t *err)
{
    char dir[4096], tmp[4200], p[4300];
    snprintf(dir, sizeof dir, "%s/global_step_%llu", out,
             (unsigned long long) st->global_step);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    (void) s_rmtree_files(tmp);
    if (mkdir(tmp, 0755) != 0) {
        snprintf(err->msg, sizeof err->msg, "mkdir %.180s: %s", tmp,
                 strerror(errno));
        return LISA_ERR;
    }
    lisa_rc_t rc =
        b->ops->save(b, tmp, bf16 ? TRN_SAVE_BF16 : TRN_SAVE_F32, err);
    if (rc != LISA_OK)
        return rc;
    snprintf(p, sizeof p, "%s/optimizer.bin", tmp);
    rc = b->ops->save_optim(b, p, err);
    if (rc != LISA_OK)
        return rc;
    json_t *j = json_pack("{s:I,s:I,s:s,s:I,s:I,s:I}", "global_step",
                          (json_int_t) st->global_step, "policy_version",
                          (json_int_t) st->policy_version, "run_id", st->run_id,
                          "data_seed", (json_int_t) st->data_seed,
                          "train_batch_size", (json_int_t) st->batch_size,
                          "n_train", (json_int_t) st->n_train);
    snprintf(p, sizeof p, "%s/trainer_state.json", tmp);
    int w = json_dump_file(j, p, JSON_INDENT(2));
    json_decref(j);
    if (w != 0) {
        snprintf(err->msg, sizeof err->msg, "cannot write %.200s", p);
        return LISA_ERR;
    }
    if (access(dir, F_OK) == 0 && s_rmtree_files(dir) != LISA_OK) {
        snprintf(err->msg, sizeof err->msg, "cannot replace %.200s", dir);
        return LISA_ERR;
    }
    if (rename(tmp, dir) != 0) {
        snprintf(err->msg, sizeof err->msg, "rename %.180s: %s", tmp,
                 strerror(errno));
        return LISA_ERR;
    }
    snprintf(p, sizeof p, "%s/latest_checkpointed_iteration.txt", out);
    FILE *f = fopen(p, "w");
    if (f) {
        fprintf(f, "%llu\n", (unsigned long long) st->global_step);
        fclose(f);
    }
    if (dir_out)
        snprintf(dir_out, dir_len, "%s", dir);
    lisa_log_info("ckpt: saved %s", dir);
    return LISA_OK;
}

lisa_rc_t
trn_ckpt_load(trn_backend_t *b, const char *dir, trn_ckpt_state_t *st,
              trn_err_t *err)
{
    char p[4300], e[256];
    memset(st, 0, sizeof *st);
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    json_t *j = NULL;
    lisa_rc_t rc = lisa_json_load_file(p, 1u << 20, &j, e, sizeof e);
    if (rc != LISA_OK) {
        snprintf(err->msg, sizeof err->msg, "%s", e);
        return rc;
    }
    const char *run = "";
    if (lisa_json_get_uint(j, "global_step", 0, &st->global_step, e,
                           sizeof e) ||
        lisa_json_get_uint(j, "policy_version", 0, &st->policy_version, e,
                           sizeof e) ||
        lisa_json_get_uint(j, "data_seed", 0, &st->data_seed, e, sizeof e) ||
        lisa_json_get_uint(j, "train_batch_size", 0, &st->batch_size, e,
                           sizeof e) ||
        lisa_json_get_uint(j, "n_train", 0, &st->n_train, e, sizeof e) ||
        lisa_json_get_string(j, "run_id", "", &run, e, sizeof e)) {
        snprintf(err->msg, sizeof err->msg, "%.100s: %.140s", p, e);
        json_decref(j);
        return LISA_INVALID;
    }
    snprintf(st->run_id, sizeof st->run_id, "%s", run);
    json_decref(j);
    snprintf(p, sizeof p, "%s/optimizer.bin", dir);
    return b->ops->load_optim(b, p, err);
}
