/*
 * Fuzz target: the gateway's decoders of untrusted bytes -- chat request
 * bodies (the lazy scanner, the per-message parse, the whole-body parse,
 * digests) and engine responses. The modules are compiled into the target
 * (they depend only on liblisa's libraries).
 */
#include "../../services/gateway/gw_json.c"
#include "../../services/gateway/gw_openai.c"
#include "../../services/gateway/gw_upstream.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *) data;
    gw_chat_req_t req;
    gw_err_t err;
    if (gw_chat_req_parse_lazy(body, size, &req, &err) == LISA_OK) {
        for (size_t i = 0; i < req.n_msgs; i++) {
            json_t *m = gw_chat_req_msg(&req, i, &err);
            if (m) {
                uint8_t d[GW_DIGEST_LEN];
                gw_msg_digest(m, d);
                char *t = gw_msg_text(m);
                free(t);
            }
        }
        (void) gw_chat_req_tools(&req, &err);
        gw_chat_req_clear(&req);
    }
    if (gw_chat_req_parse(body, size, &req, &err) == LISA_OK)
        gw_chat_req_clear(&req);
    else {
        char *e = gw_err_body(&err);
        free(e);
    }
    gw_completion_t c;
    char why[128];
    if (gw_upstream_parse(body, size, 4096, &c, why, sizeof why) == LISA_OK)
        gw_completion_clear(&c);
    return 0;
}
