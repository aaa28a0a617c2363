/*
 * Fuzz target: the JSON Lines reader and the typed path getters. The input
 * is read as a JSONL stream with a small line bound; every value that
 * parses is probed with dotted paths and dumped under a bound. Nothing may
 * crash, leak, or loop: each call consumes at least one line.
 */
#include "lisa/lisa_json.h"
#include "lisa/lisa_mem.h"

#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
s_probe(const json_t *v)
{
    static const char *const paths[] = {"a", "a.b", "0", "0.0", "a.0.b", ""};
    char err[128];
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        const char *s;
        int64_t n;
        double d;
        json_t *o;
        (void) !lisa_json_get_string(v, paths[i], NULL, &s, err, sizeof err);
        (void) !lisa_json_get_int(v, paths[i], 0, &n, err, sizeof err);
        (void) !lisa_json_get_double(v, paths[i], 0, &d, err, sizeof err);
        (void) !lisa_json_get_object(v, paths[i], &o, err, sizeof err);
    }
    char *text = NULL;
    if (lisa_json_dump(v, JSON_COMPACT, 4096, &text) == LISA_OK && !text)
        abort();
    lisa_free(&text);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    FILE *f = fmemopen((void *) data, size, "r");
    if (!f)
        return 0;
    lisa_jsonl_t *r = lisa_jsonl_from_stream(f, "fuzz", 256);
    char err[256];
    for (size_t guard = 0; guard <= size; guard++) {
        json_t *v = NULL;
        lisa_rc_t rc = lisa_jsonl_next(r, &v, err, sizeof err);
        if (rc == LISA_NOTFOUND || rc == LISA_ERR)
            break;
        if (rc == LISA_OK)
            s_probe(v);
        json_decref(v);
    }
    if (lisa_jsonl_good(r) + lisa_jsonl_bad(r) > lisa_jsonl_line(r))
        abort();
    lisa_jsonl_destroy(&r);
    fclose(f);
    return 0;
}
