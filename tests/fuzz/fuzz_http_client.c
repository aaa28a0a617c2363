/*
 * Fuzz target: lisa_http_client's response handling. A loopback peer
 * answers each request with the fuzzer's bytes as the raw HTTP response
 * (status line, headers, body, chunked encoding, garbage) and closes. The
 * first input byte picks blocking or streaming mode. The client must never
 * crash, leak or keep more than its bounds (64 KiB of headers, max_response
 * of body).
 */
#include "lisa/lisa_http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int s_listen_fd = -1;
static uint16_t s_port;
static pthread_mutex_t s_mtx = PTHREAD_MUTEX_INITIALIZER;
static const uint8_t *s_data;
static size_t s_size;

/* Serves one connection per request: reads the request head, writes the
 * current input, closes. */
static void *
s_peer(void *arg)
{
    (void) arg;
    for (;;) {
        int c = accept(s_listen_fd, NULL, NULL);
        if (c < 0)
            continue;
        char buf[4096];
        size_t got = 0;
        struct pollfd p = {.fd = c, .events = POLLIN};
        while (got < sizeof(buf) - 1 && poll(&p, 1, 200) > 0) {
            ssize_t n = recv(c, buf + got, sizeof(buf) - 1 - got, 0);
            if (n <= 0)
                break;
            got += (size_t) n;
            buf[got] = '\0';
            if (strstr(buf, "\r\n\r\n"))
                break;
        }
        pthread_mutex_lock(&s_mtx);
        size_t off = 0;
        while (off < s_size) {
            ssize_t n = send(c, s_data + off, s_size - off, MSG_NOSIGNAL);
            if (n <= 0)
                break;
            off += (size_t) n;
        }
        pthread_mutex_unlock(&s_mtx);
        close(c);
    }
    return NULL;
}

static void
s_start(void)
{
    if (s_listen_fd >= 0)
        return;
    s_listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    if (bind(s_listen_fd, (struct sockaddr *) &sa, sizeof(sa)) != 0 ||
        listen(s_listen_fd, 16) != 0 ||
        getsockname(s_listen_fd, (struct sockaddr *) &sa, &sl) != 0)
        __builtin_trap();
    s_port = ntohs(sa.sin_port);
    pthread_t th;
    pthread_create(&th, NULL, s_peer, NULL);
    pthread_detach(th);
}

static bool
s_chunk(const char *data, size_t len, long status, void *arg)
{
    (void) status;
    size_t *total = arg;
    *total += len;
    (void) data;
    return *total < 100000;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    s_start();
    pthread_mutex_lock(&s_mtx);
    s_data = data + 1;
    s_size = size - 1;
    pthread_mutex_unlock(&s_mtx);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/v1/completions", s_port);
    size_t total = 0;
    lisa_http_request_t rq = {.url = url,
                              .timeout_ms = 1000,
                              .max_response = 4096,
                              .on_chunk = (data[0] & 1) ? s_chunk : NULL,
                              .chunk_arg = &total};
    lisa_http_response_t *resp = NULL;
    (void) lisa_http_request_sync(&rq, &resp);
    size_t len = 0;
    const char *body = lisa_http_response_body(resp, &len);
    if (len > 4096 || strlen(body) > len)
        __builtin_trap();
    (void) lisa_http_response_header(resp, "content-type");
    (void) lisa_http_response_status(resp);
    lisa_http_response_destroy(&resp);
    /* the peer must be done with this input before the next one */
    pthread_mutex_lock(&s_mtx);
    s_data = NULL;
    s_size = 0;
    pthread_mutex_unlock(&s_mtx);
    return 0;
}
