/*
 * agt_relay tests: a client on 127.0.0.1 reaches a stand-in for the
 * gateway's proxy (a unix socket or a TCP port) through the relay, with
 * the attempt token added after the request line, and gets the answer
 * back byte for byte. The first test is the usage example.
 */
#define _GNU_SOURCE
#include "agt_relay.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char s_req[] = "GET http://example.test/x HTTP/1.1\r\n"
                            "Host: example.test\r\n\r\n";
static const char s_want[] = "GET http://example.test/x HTTP/1.1\r\n"
                             "Proxy-Authorization: Bearer tok-1\r\n"
                             "Host: example.test\r\n\r\n";
static const char s_reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                              "Connection: close\r\n\r\nok";

static int
s_listen_unix(char *path, size_t cap)
{
    snprintf(path, cap, "/tmp/agt-relay-%d.sock", (int) getpid());
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    cr_assert_eq(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    cr_assert_eq(listen(fd, 4), 0);
    return fd;
}

static int
s_listen_tcp(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    cr_assert_eq(listen(fd, 4), 0);
    socklen_t sl = sizeof sa;
    cr_assert_eq(getsockname(fd, (struct sockaddr *) &sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static int
s_client(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    return fd;
}

/* Reads until the peer closes or `stop` is seen; bytes read. */
static size_t
s_read(int fd, char *buf, size_t cap, const char *stop)
{
    size_t n = 0;
    while (n + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        cr_assert_gt(poll(&p, 1, 5000), 0, "timed out");
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t) r;
        buf[n] = '\0';
        if (stop && strstr(buf, stop))
            break;
    }
    buf[n] = '\0';
    return n;
}

/* The stand-in gateway: accepts one connection, checks what came, answers. */
static void
s_serve_one(int lfd)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    cr_assert_gt(poll(&p, 1, 5000), 0, "the relay never connected");
    int g = accept(lfd, NULL, NULL);
    char buf[1024];
    s_read(g, buf, sizeof buf, "\r\n\r\n");
    cr_assert_str_eq(buf, s_want);
    cr_assert_eq(send(g, s_reply, sizeof s_reply - 1, 0),
                 (ssize_t) sizeof s_reply - 1);
    close(g);
}

Test(agt_relay, usage)
{
    char path[108];
    int lfd = s_listen_unix(path, sizeof path);
    agt_relay_cfg_t cfg = {.socket = path, .token = "tok-1", .port = 0};
    agt_relay_t *r = agt_relay_start(&cfg);
    cr_assert_not_null(r);
    uint16_t port = agt_relay_port(r); /* the kernel's pick */
    cr_assert_neq(port, 0);
    int c = s_client(port);
    cr_assert_eq(send(c, s_req, sizeof s_req - 1, 0),
                 (ssize_t) sizeof s_req - 1);
    s_serve_one(lfd);
    char buf[1024];
    s_read(c, buf, sizeof buf, NULL);
    cr_assert_str_eq(buf, s_reply);
    close(c);
    agt_relay_stop(&r);
    cr_assert_null(r);
    agt_relay_stop(&r); /* safe twice */
    close(lfd);
    unlink(path);
}

Test(agt_relay, gateway_by_url)
{
    uint16_t gport;
    int lfd = s_listen_tcp(&gport);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u", (unsigned) gport);
    agt_relay_cfg_t cfg = {.url = url, .token = "tok-1", .port = 0};
    agt_relay_t *r = agt_relay_start(&cfg);
    cr_assert_not_null(r);
    uint16_t port = agt_relay_port(r);
    int c = s_client(port);
    /* the head in two pieces: the token still goes after the first line */
    cr_assert_eq(send(c, s_req, 10, 0), 10);
    usleep(50000);
    cr_assert_eq(send(c, s_req + 10, sizeof s_req - 11, 0),
                 (ssize_t) sizeof s_req - 11);
    s_serve_one(lfd);
    char buf[1024];
    s_read(c, buf, sizeof buf, NULL);
    cr_assert_str_eq(buf, s_reply);
    close(c);
    agt_relay_stop(&r);
    close(lfd);
}

Test(agt_relay, gateway_down_is_502)
{
    agt_relay_cfg_t cfg = {
        .socket = "/nonexistent/proxy.sock", .token = "t", .port = 0};
    agt_relay_t *r = agt_relay_start(&cfg);
    cr_assert_not_null(r);
    uint16_t port = agt_relay_port(r);
    int c = s_client(port);
    cr_assert_eq(send(c, s_req, sizeof s_req - 1, 0),
                 (ssize_t) sizeof s_req - 1);
    char buf[512];
    s_read(c, buf, sizeof buf, NULL);
    cr_assert(strncmp(buf, "HTTP/1.1 502 ", 13) == 0, "%s", buf);
    close(c);
    agt_relay_stop(&r);
}

Test(agt_relay, bad_config_and_environment)
{
    agt_relay_cfg_t none = {.socket = "/x", .token = "", .port = 3128};
    cr_assert_null(agt_relay_start(&none));
    agt_relay_cfg_t url = {.url = "https://gw:1", .token = "t", .port = 3128};
    cr_assert_null(agt_relay_start(&url));
    setenv("NO_PROXY", "127.0.0.1", 1);
    agt_relay_env(4321);
    cr_assert_str_eq(getenv("http_proxy"), "http://127.0.0.1:4321");
    cr_assert_str_eq(getenv("HTTPS_PROXY"), "http://127.0.0.1:4321");
    cr_assert_null(getenv("NO_PROXY"));
    cr_assert_eq(agt_relay_port(NULL), 0);
}
