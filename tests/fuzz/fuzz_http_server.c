/*
 * Fuzz target: lisa_http_server fed arbitrary bytes over a real loopback
 * connection. Every input is one client connection that sends the bytes,
 * half-closes and reads whatever comes back. The handler answers at once,
 * streams, or keeps the request and answers it on a later input, so the
 * request lifecycle (including answers racing a vanished client) is
 * exercised with whatever request lines, headers and bodies the fuzzer
 * makes up. The server must never crash, leak or read out of bounds.
 */
#include "lisa/lisa_http_server.h"
#include "lisa/lisa_log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static lisa_http_server_t *s_server;
static lisa_http_req_t *s_kept; /* answered on the next input */

static void
s_handler(lisa_http_req_t *req, void *arg)
{
    (void) arg;
    const char *path = lisa_http_req_path(req);
    size_t len = 0;
    const char *body = lisa_http_req_body(req, &len);
    if (strncmp(path, "/keep", 5) == 0) {
        if (s_kept)
            (void) lisa_http_req_respond(s_kept, 200, "text/plain", "late", 4);
        s_kept = req;
        return;
    }
    if (strncmp(path, "/stream", 7) == 0) {
        if (lisa_http_req_stream_open(req, 200, "text/event-stream") != LISA_OK)
            return;
        (void) lisa_http_req_stream_push(req, body, len);
        (void) lisa_http_req_stream_push(req, "data: [DONE]\n\n", 14);
        lisa_http_req_stream_close(req);
        return;
    }
    const char *h = lisa_http_req_header(req, "x-echo");
    const char *q = lisa_http_req_query(req, "q");
    if (h && q)
        lisa_http_req_add_header(req, "X-Echo", h);
    (void) lisa_http_req_respond_error(req, 400, "invalid_request_error", q,
                                       "%s %s %zu", lisa_http_req_method(req),
                                       path, len);
}

static uint16_t
s_port(void)
{
    if (!s_server) {
        lisa_log_set_level(LISA_LOG_ERROR);
        lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                         .handler = s_handler,
                                         .max_body = 4096,
                                         .max_header_bytes = 8192,
                                         .request_timeout_ms = 30,
                                         .stream_queue_max = 2048};
        s_server = lisa_http_server_new(&cfg);
        if (!s_server)
            __builtin_trap();
    }
    return lisa_http_server_port(s_server);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint16_t port = s_port();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0)
        __builtin_trap(); /* the server died */
    size_t off = 0;
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        off += (size_t) n;
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (int i = 0; i < 40 && poll(&p, 1, 5) >= 0; i++) {
        if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
    }
    close(fd);
    return 0;
}
