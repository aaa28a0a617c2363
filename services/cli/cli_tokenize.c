/*
 * cli_tokenize: `lisa tokenize` and `lisa detokenize`, the tokenizer on
 * the command line (for operators, and for the oracle tests that compare
 * lisa with Hugging Face on large corpora in one process call).
 *
 *   lisa tokenize --tokenizer DIR [--no-special]
 *       stdin: UTF-8 text, read whole (special tokens recognised unless
 *       --no-special); stdout: one JSON array of ids
 *   lisa tokenize --tokenizer DIR --json
 *       stdin: a JSON array of strings; stdout: a JSON array of id arrays
 *   lisa detokenize --tokenizer DIR [--skip-special] [--json]
 *       stdin: a JSON array of ids; stdout: the text (no newline added);
 *       with --json, stdin is an array of id arrays and stdout a JSON
 *       array of strings
 *
 * Bad input (invalid UTF-8, malformed JSON, unknown ids) is a message on
 * stderr and exit status 1.
 */
#include "cli.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define S_MAX_INPUT (256u * 1024u * 1024u)
#define S_MAX_IDS   (64u * 1024u * 1024u)

typedef struct {
    const char *dir;
    bool no_special;
    bool skip_special;
    bool json;
} s_opts_t;

static int
s_parse(int argc, char **argv, s_opts_t *o, bool decode)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) {
            o->dir = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) {
            o->json = true;
        } else if (!decode && strcmp(argv[i], "--no-special") == 0) {
            o->no_special = true;
        } else if (decode && strcmp(argv[i], "--skip-special") == 0) {
            o->skip_special = true;
        } else if (strcmp(argv[i], "--help") == 0 ||
                   strcmp(argv[i], "-h") == 0) {
            return 2;
        } else {
            fprintf(stderr, "lisa %s: unknown argument '%s'\n", argv[0],
                    argv[i]);
            return 1;
        }
    }
    if (!o->dir) {
        fprintf(stderr, "lisa %s: --tokenizer DIR is required\n", argv[0]);
        return 1;
    }
    return 0;
}

static char *
s_read_stdin(size_t *len)
{
    size_t cap = 1u << 16, n = 0;
    char *buf = lisa_malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (cap >= S_MAX_INPUT) {
                lisa_free(&buf);
                return NULL;
            }
            cap *= 2;
            buf = lisa_realloc(buf, cap + 1);
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        if (r == 0)
            break;
        n += r;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void
s_print_ids(const lisa_ids_t *ids)
{
    const int32_t *d = lisa_ids_data(ids);
    putchar('[');
    for (size_t i = 0; i < lisa_ids_len(ids); i++)
        printf(i ? ", %d" : "%d", (int) d[i]);
    putchar(']');
}

static int
s_encode_one(lisa_tokenizer_t *tok, const char *s, size_t n, bool special,
             lisa_ids_t *ids)
{
    lisa_ids_clear(ids);
    lisa_rc_t rc = lisa_tokenizer_encode(tok, s, n, special, ids);
    if (rc == LISA_INVALID) {
        fprintf(stderr, "lisa tokenize: input is not valid UTF-8\n");
        return 1;
    }
    if (rc != LISA_OK) {
        fprintf(stderr, "lisa tokenize: %s\n", lisa_rc_str(rc));
        return 1;
    }
    return 0;
}

int
cli_tokenize(int argc, char **argv)
{
    s_opts_t o = {0};
    int r = s_parse(argc, argv, &o, false);
    if (r == 2) {
        printf("usage: lisa tokenize --tokenizer DIR [--no-special] "
               "[--json]\n  stdin: text (or, with --json, a JSON array of "
               "strings)\n  stdout: a JSON array of ids (or of id arrays)\n");
        return 0;
    }
    if (r)
        return r;
    int status = 1;
    size_t len = 0;
    char *in = s_read_stdin(&len);
    json_t *arr = NULL;
    lisa_ids_t *ids = lisa_ids_new(S_MAX_IDS);
    lisa_tokenizer_t *tok = NULL;
    if (!in) {
        fprintf(stderr, "lisa tokenize: input over %u bytes\n", S_MAX_INPUT);
        goto out;
    }
    tok = lisa_tokenizer_new_from_dir(o.dir);
    if (!tok) {
        fprintf(stderr, "lisa tokenize: cannot load a tokenizer from %s\n",
                o.dir);
        goto out;
    }
    if (!o.json) {
        if (s_encode_one(tok, in, len, !o.no_special, ids))
            goto out;
        s_print_ids(ids);
        putchar('\n');
        status = 0;
        goto out;
    }
    json_error_t jerr;
    arr = json_loadb(in, len, JSON_ALLOW_NUL, &jerr);
    if (!json_is_array(arr)) {
        fprintf(stderr, "lisa tokenize: --json wants an array of strings\n");
        goto out;
    }
    putchar('[');
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *s = json_array_get(arr, i);
        if (!json_is_string(s)) {
            fprintf(stderr, "lisa tokenize: item %zu is not a string\n", i);
            goto out;
        }
        if (s_encode_one(tok, json_string_value(s), json_string_length(s),
                         !o.no_special, ids))
            goto out;
        if (i)
            fputs(", ", stdout);
        s_print_ids(ids);
    }
    puts("]");
    status = 0;
out:
    json_decref(arr);
    lisa_tokenizer_destroy(&tok);
    lisa_ids_destroy(&ids);
    lisa_free(&in);
    return status;
}

/* Reads a JSON array of ids into ids; 0 on success. */
static int
s_ids_from_json(json_t *a, lisa_ids_t *ids)
{
    lisa_ids_clear(ids);
    if (!json_is_array(a)) {
        fprintf(stderr, "lisa detokenize: expected a JSON array of ids\n");
        return 1;
    }
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > INT32_MAX) {
            fprintf(stderr, "lisa detokenize: item %zu is not a token id\n", i);
            return 1;
        }
        if (lisa_ids_push(ids, (int32_t) json_integer_value(v)) != LISA_OK) {
            fprintf(stderr, "lisa detokenize: too many ids\n");
            return 1;
        }
    }
    return 0;
}

static int
s_decode_one(lisa_tokenizer_t *tok, const lisa_ids_t *ids, unsigned flags,
             char **text, size_t *tlen)
{
    lisa_rc_t rc = lisa_tokenizer_decode(tok, lisa_ids_data(ids),
                                         lisa_ids_len(ids), flags, text, tlen);
    if (rc != LISA_OK) {
        fprintf(stderr,
                "lisa detokenize: unknown token id (vocabulary has "
                "%zu ids)\n",
                lisa_tokenizer_vocab_size(tok));
        return 1;
    }
    return 0;
}

int
cli_detokenize(int argc, char **argv)
{
    s_opts_t o = {0};
    int r = s_parse(argc, argv, &o, true);
    if (r == 2) {
        printf("usage: lisa detokenize --tokenizer DIR [--skip-special] "
               "[--json]\n  stdin: a JSON array of ids (or, with --json, of "
               "id arrays)\n  stdout: the text (or a JSON array of "
               "strings)\n");
        return 0;
    }
    if (r)
        return r;
    int status = 1;
    size_t len = 0;
    char *in = s_read_stdin(&len);
    json_t *arr = NULL, *outs = NULL;
    char *text = NULL;
    lisa_ids_t *ids = lisa_ids_new(S_MAX_IDS);
    lisa_tokenizer_t *tok = NULL;
    unsigned flags =
        LISA_DECODE_STRICT | (o.skip_special ? LISA_DECODE_SKIP_SPECIAL : 0u);
    if (!in) {
        fprintf(stderr, "lisa detokenize: input over %u bytes\n", S_MAX_INPUT);
        goto out;
    }
    json_error_t jerr;
    arr = json_loadb(in, len, 0, &jerr);
    if (!arr) {
        fprintf(stderr, "lisa detokenize: malformed JSON: %s\n", jerr.text);
        goto out;
    }
    tok = lisa_tokenizer_new_from_dir(o.dir);
    if (!tok) {
        fprintf(stderr, "lisa detokenize: cannot load a tokenizer from %s\n",
                o.dir);
        goto out;
    }
    size_t tlen = 0;
    if (!o.json) {
        if (s_ids_from_json(arr, ids) ||
            s_decode_one(tok, ids, flags, &text, &tlen))
            goto out;
        fwrite(text, 1, tlen, stdout);
        status = 0;
        goto out;
    }
    if (!json_is_array(arr)) {
        fprintf(stderr, "lisa detokenize: --json wants an array of arrays\n");
        goto out;
    }
    outs = json_array();
    for (size_t i = 0; i < json_array_size(arr); i++) {
        if (s_ids_from_json(json_array_get(arr, i), ids) ||
            s_decode_one(tok, ids, flags, &text, &tlen))
            goto out;
        json_array_append_new(outs, json_stringn(text, tlen));
        lisa_free(&text);
    }
    char *dump = json_dumps(outs, JSON_COMPACT);
    puts(dump);
    free(dump);
    status = 0;
out:
    lisa_free(&text);
    json_decref(arr);
    json_decref(outs);
    lisa_tokenizer_destroy(&tok);
    lisa_ids_destroy(&ids);
    lisa_free(&in);
    return status;
}
