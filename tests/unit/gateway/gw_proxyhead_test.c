/*
 * gw_proxyhead: the package proxy's request heads (CONNECT and absolute
 * GET/HEAD only, bounded, no userinfo, no body), the head sent upstream
 * (origin form, no proxy headers, Connection: close) and the allow list.
 */
#include "gw_proxyhead.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static lisa_rc_t
s_parse(const char *head, gw_proxyhead_t *h, int *status)
{
    char err[200];
    return gw_proxyhead_parse(head, strlen(head), h, status, err, sizeof err);
}

/* The usage example: parse a GET, check it against the allow list,
 * write what goes upstream. */
Test(gw_proxyhead, usage)
{
    const char *head = "GET http://Pypi.org/simple/numpy/ HTTP/1.1\r\n"
                       "Host: pypi.org\r\n"
                       "Proxy-Authorization: Bearer v1.abc.def\r\n"
                       "Proxy-Connection: keep-alive\r\n"
                       "Proxy-Other: x\r\n"
                       "Accept: text/html\r\n\r\n";
    gw_proxyhead_t h;
    int status;
    cr_assert_eq(s_parse(head, &h, &status), LISA_OK);
    cr_assert(!h.connect);
    cr_assert_str_eq(h.method, "GET");
    cr_assert_str_eq(h.host, "pypi.org");
    cr_assert_eq(h.port, 80);
    cr_assert_str_eq(h.auth, "Bearer v1.abc.def");
    cr_assert_eq(h.head_len, strlen(head));
    cr_assert(gw_proxyhead_allowed("pypi.org:80,files.pythonhosted.org", h.host,
                                   h.port));
    size_t n;
    char *up = gw_proxyhead_upstream(head, &h, &n);
    cr_assert_str_eq(up, "GET /simple/numpy/ HTTP/1.1\r\nHost: pypi.org\r\n"
                         "Accept: text/html\r\nConnection: close\r\n\r\n");
    cr_assert_eq(n, strlen(up));
    lisa_free(&up);
}

Test(gw_proxyhead, connect_and_ports)
{
    gw_proxyhead_t h;
    int status;
    cr_assert_eq(s_parse("CONNECT files.pythonhosted.org:443 HTTP/1.1\r\n"
                         "Host: files.pythonhosted.org:443\r\n\r\n",
                         &h, &status),
                 LISA_OK);
    cr_assert(h.connect);
    cr_assert_eq(h.port, 443);
    cr_assert_str_eq(h.auth, "");
    cr_assert_eq(
        s_parse("GET http://127.0.0.1:8080/x?y=1 HTTP/1.0\n\n", &h, &status),
        LISA_OK);
    cr_assert_eq(h.port, 8080);
    cr_assert_eq(h.path_len, strlen("/x?y=1"));
    cr_assert_eq(s_parse("HEAD http://[::1]:81/ HTTP/1.1\r\n\r\n", &h, &status),
                 LISA_OK);
    cr_assert_str_eq(h.host, "::1");
    cr_assert_eq(h.port, 81);
    size_t n;
    char *up =
        gw_proxyhead_upstream("HEAD http://[::1]:81/ HTTP/1.1\r\n\r\n", &h, &n);
    cr_assert(strstr(up, "Host: [::1]:81\r\n") != NULL, "%s", up);
    lisa_free(&up);
    /* a bare host gets "/" */
    cr_assert_eq(
        s_parse("GET http://deb.debian.org HTTP/1.1\r\n\r\n", &h, &status),
        LISA_OK);
    cr_assert_eq(h.path_len, 1);
}

Test(gw_proxyhead, incomplete_and_too_large)
{
    gw_proxyhead_t h;
    int status;
    cr_assert_eq(s_parse("GET http://a/ HTTP/1.1\r\nHost: a\r\n", &h, &status),
                 LISA_AGAIN);
    size_t len = GW_PROXYHEAD_MAX + 10;
    char *big = lisa_malloc(len);
    memset(big, 'a', len);
    memcpy(big, "GET http://a/ HTTP/1.1\r\nX: ", 27);
    char err[200];
    cr_assert_eq(gw_proxyhead_parse(big, len, &h, &status, err, sizeof err),
                 LISA_INVALID);
    cr_assert_eq(status, 431);
    lisa_free(&big);
}

Test(gw_proxyhead, refusals)
{
    static const struct {
        const char *head;
        int status;
    } bad[] = {
        {"POST http://a/ HTTP/1.1\r\n\r\n", 405},
        {"connect a:443 HTTP/1.1\r\n\r\n", 405},
        {"GET /x HTTP/1.1\r\n\r\n", 400},
        {"GET https://a/ HTTP/1.1\r\n\r\n", 400},
        {"GET http://user@a/ HTTP/1.1\r\n\r\n", 400},
        {"GET http://a b/ HTTP/1.1\r\n\r\n", 400},
        {"GET http://a_b/ HTTP/1.1\r\n\r\n", 400},
        {"GET http://a:0/ HTTP/1.1\r\n\r\n", 400},
        {"GET http://a:65536/ HTTP/1.1\r\n\r\n", 400},
        {"GET http://:80/ HTTP/1.1\r\n\r\n", 400},
        {"GET http://a?x HTTP/1.1\r\n\r\n", 400},
        {"CONNECT a HTTP/1.1\r\n\r\n", 400},
        {"GET http://a/ HTTP/2\r\n\r\n", 400},
        {"GET http://a/ HTTP/1.1\r\nno colon\r\n\r\n", 400},
        {"GET http://a/ HTTP/1.1\r\nProxy-Authorization : x\r\n\r\n", 400},
        {"GET http://a/ HTTP/1.1\r\nX(y): 1\r\n\r\n", 400},
        {"GET http://a/ HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", 400},
        {"GET http://a/ HTTP/1.1\r\nContent-Length: 5\r\n\r\n", 400},
        {"GET http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gw_proxyhead_t h;
        int status = 0;
        cr_assert_eq(s_parse(bad[i].head, &h, &status), LISA_INVALID, "%s",
                     bad[i].head);
        cr_assert_eq(status, bad[i].status, "%s: %d", bad[i].head, status);
    }
    /* a NUL inside the head */
    gw_proxyhead_t h;
    int status;
    char err[64];
    static const char nul[] = "GET http://a/ HTTP/1.1\r\nX: a\0b\r\n\r\n";
    cr_assert_eq(
        gw_proxyhead_parse(nul, sizeof nul - 1, &h, &status, err, sizeof err),
        LISA_INVALID);
    cr_assert_eq(status, 400);
    /* Content-Length: 0 is no body */
    cr_assert_eq(s_parse("GET http://a/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                         &h, &status),
                 LISA_OK);
}

Test(gw_proxyhead, allow_list)
{
    const char *allow = " PyPI.org, files.pythonhosted.org:443,"
                        "127.0.0.1:8080 ,[::1]:81";
    cr_assert(gw_proxyhead_allowed(allow, "pypi.org", 443));
    cr_assert(gw_proxyhead_allowed(allow, "pypi.org", 80));
    cr_assert(!gw_proxyhead_allowed(allow, "pypi.org", 8080));
    cr_assert(gw_proxyhead_allowed(allow, "files.pythonhosted.org", 443));
    cr_assert(!gw_proxyhead_allowed(allow, "files.pythonhosted.org", 80));
    cr_assert(gw_proxyhead_allowed(allow, "127.0.0.1", 8080));
    cr_assert(!gw_proxyhead_allowed(allow, "127.0.0.1", 80));
    cr_assert(gw_proxyhead_allowed(allow, "::1", 81));
    /* no suffix or prefix matches */
    cr_assert(!gw_proxyhead_allowed(allow, "evil.pypi.org", 443));
    cr_assert(!gw_proxyhead_allowed(allow, "pypi.org.evil", 443));
    cr_assert(!gw_proxyhead_allowed(allow, "pypi.or", 443));
    cr_assert(!gw_proxyhead_allowed("", "pypi.org", 443));
    cr_assert(!gw_proxyhead_allowed(NULL, "pypi.org", 443));
    cr_assert(!gw_proxyhead_allowed(allow, "", 443));
}
