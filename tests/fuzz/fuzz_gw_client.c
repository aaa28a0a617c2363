/*
 * Fuzz target: the engine client's answer parser (gw_client_parse). The
 * same bytes are parsed whole and fed in pieces (the first byte picks the
 * piece size), with and without the end of the connection after them;
 * both ways must agree on the outcome and the body, and a body must lie
 * inside the buffer. The module is compiled into the target (it depends
 * only on liblisa's libraries).
 */
#include "../../services/gateway/gw_client.c"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
s_run(const uint8_t *data, size_t size, size_t step, bool eof, char **body,
      size_t *blen)
{
    char *buf = malloc(size + 1);
    gw_client_parse_t p = {0};
    int r = 0;
    size_t off = 0, have = 0;
    *blen = 0;
    while (have < size || have == 0) {
        size_t next = have + step < size ? have + step : size;
        memcpy(buf + have, data + have, next - have);
        have = next;
        r = gw_client_parse(&p, buf, have, eof && have == size, 4096, &off,
                            blen);
        if (r != 0 || have == size)
            break;
    }
    *body = NULL;
    if (r == 1) {
        if (off > have || *blen > have - off)
            abort();
        buf[off + *blen] = '\0';
        *body = malloc(*blen + 1);
        memcpy(*body, buf + off, *blen + 1);
    }
    free(buf);
    return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t) data[0] % 13 + 1;
    data++;
    size--;
    for (int eof = 0; eof < 2; eof++) {
        char *a, *b;
        size_t al, bl;
        int ra = s_run(data, size, size ? size : 1, eof, &a, &al);
        int rb = s_run(data, size, step, eof, &b, &bl);
        /* a piecewise parse may finish early on a complete answer that a
         * whole parse sees followed by more bytes: only a finished answer
         * can differ, and then only in keep-alive, not in the body */
        if (ra != rb || (ra == 1 && (al != bl || memcmp(a, b, al) != 0)))
            abort();
        free(a);
        free(b);
    }
    return 0;
}
