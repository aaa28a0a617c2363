/*
 * gw_bench: what the gateway costs on realistic agent traffic.
 *
 * One process runs a fast scripted engine on loopback (libmicrohttpd, a
 * canned tool-call reply for /v1/completions and /v1/chat/completions),
 * starts lisa-gateway (no broker) and Debian's nginx (proxy_pass to the
 * same engine), and drives both with the same multi-turn tool-calling
 * conversations: a system prompt, a task, then 30 turns of assistant tool
 * call + tool output, the whole history re-sent every turn as an OpenAI
 * client does.
 *
 *  - added latency: one connection per proxy, each request timed through
 *    the proxy and then replayed directly to the engine (the exact body
 *    the proxy forwarded); added = proxied - direct; p50 and p99 over
 *    every turn. Conversations alternate between the two proxies (and
 *    which goes first), so both see the same load.
 *  - requests/s: `agents` connections running conversations for
 *    `seconds`, through each proxy, back to back, the order alternating
 *    between rounds; with the CPU time each proxy process (nginx: its
 *    worker) spent per call, from /proc.
 *  - tokenizer MB/s on agent-like text.
 *
 * Each of `rounds` rounds runs both measurements; it prints each round,
 * the medians and the gateway/nginx ratios (the median of the rounds'
 * ratios). On a shared machine single rounds vary a lot: read the
 * medians, the CPU per call and the load average printed with them.
 * Usage:
 *   gw_bench [turns=30] [conversations=20] [agents=8] [seconds=5]
 *            [rounds=3]
 */
#include "lisa/lisa_ids.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_token.h"
#include "lisa/lisa_tokenizer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Where the tokenizer and lisa-gateway are; GW_BENCH_SOURCE_DIR and
 * GW_BENCH_BINARY_DIR override the build tree's paths (a copied tree). */
static char s_tokdir[1024], s_gwbin[1024];

static void
s_paths(void)
{
    const char *src = getenv("GW_BENCH_SOURCE_DIR");
    const char *bin = getenv("GW_BENCH_BINARY_DIR");
    snprintf(s_tokdir, sizeof s_tokdir, "%s/tests/fixtures/qwen3-tokenizer",
             src ? src : LISA_SOURCE_DIR);
    snprintf(s_gwbin, sizeof s_gwbin, "%s/bin/lisa-gateway",
             bin ? bin : LISA_BINARY_DIR);
}

#define S_TOKDIR s_tokdir

static double
s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* ---- the scripted engine ------------------------------------------------ */

static char *s_completion_reply; /* canned /v1/completions body */
static char *s_chat_reply;       /* canned /v1/chat/completions body */
static pthread_mutex_t s_last_mu = PTHREAD_MUTEX_INITIALIZER;
static char *s_last_body; /* last body the engine received */
static size_t s_last_len;
static char s_last_path[64];

typedef struct {
    char *buf;
    size_t n, cap;
} s_upload_t;

static enum MHD_Result
s_engine(void *cls, struct MHD_Connection *conn, const char *url,
         const char *method, const char *version, const char *upload,
         size_t *upload_size, void **con_cls)
{
    (void) cls;
    (void) version;
    (void) method;
    s_upload_t *u = *con_cls;
    if (!u) {
        u = lisa_calloc(1, sizeof *u);
        *con_cls = u;
        return MHD_YES;
    }
    if (*upload_size) {
        if (u->n + *upload_size + 1 > u->cap) {
            u->cap = (u->n + *upload_size + 1) * 2;
            u->buf = lisa_realloc(u->buf, u->cap);
        }
        memcpy(u->buf + u->n, upload, *upload_size);
        u->n += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    const char *reply = "{\"ok\":true}";
    if (strcmp(url, "/v1/completions") == 0)
        reply = s_completion_reply;
    else if (strcmp(url, "/v1/chat/completions") == 0)
        reply = s_chat_reply;
    pthread_mutex_lock(&s_last_mu);
    lisa_free(&s_last_body);
    s_last_body = lisa_memdup(u->buf ? u->buf : "", u->n);
    s_last_len = u->n;
    snprintf(s_last_path, sizeof s_last_path, "%s", url);
    pthread_mutex_unlock(&s_last_mu);
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(reply), (void *) (uintptr_t) reply, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static void
s_engine_done(void *cls, struct MHD_Connection *conn, void **con_cls,
              enum MHD_RequestTerminationCode toe)
{
    (void) cls;
    (void) conn;
    (void) toe;
    s_upload_t *u = *con_cls;
    if (u) {
        lisa_free(&u->buf);
        lisa_free(&u);
    }
    *con_cls = NULL;
}

static const char s_call_text[] =
    "I will look at the files first.\n<tool_call>\n{\"name\": "
    "\"execute_bash\", \"arguments\": {\"command\": \"ls -la /testbed && cat "
    "/testbed/documents/README.md | head -50\"}}\n</tool_call>";

static void
s_make_replies(lisa_tokenizer_t *tok)
{
    lisa_ids_t *ids = lisa_ids_new(4096);
    if (lisa_tokenizer_encode(tok, s_call_text, strlen(s_call_text), false,
                              ids) != LISA_OK ||
        lisa_ids_push(ids, lisa_tokenizer_im_end_id(tok)) != LISA_OK)
        abort();
    json_t *tids = json_array(), *lps = json_array();
    for (size_t i = 0; i < lisa_ids_len(ids); i++) {
        json_array_append_new(tids, json_integer(lisa_ids_data(ids)[i]));
        json_array_append_new(lps, json_real(-0.05 * (double) (i % 7)));
    }
    json_t *o = json_pack("{s:s,s:[{s:i,s:s,s:o,s:{s:o},s:s}],s:i}", "object",
                          "text_completion", "choices", "index", 0, "text", "",
                          "token_ids", tids, "logprobs", "token_logprobs", lps,
                          "finish_reason", "stop", "policy_version", 3);
    s_completion_reply = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    o = json_pack(
        "{s:s,s:s,s:i,s:s,s:[{s:i,s:{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]},"
        "s:s}],s:{s:i,s:i,s:i}}",
        "id", "chatcmpl-up", "object", "chat.completion", "created", 0, "model",
        "lisa", "choices", "index", 0, "message", "role", "assistant",
        "content", "I will look at the files first.", "tool_calls", "id",
        "call_up_0", "type", "function", "function", "name", "execute_bash",
        "arguments",
        "{\"command\": \"ls -la /testbed && cat /testbed/documents/README.md "
        "| head -50\"}",
        "finish_reason", "tool_calls", "usage", "prompt_tokens", 100,
        "completion_tokens", 40, "total_tokens", 140);
    s_chat_reply = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    lisa_ids_destroy(&ids);
}

/* ---- a minimal keep-alive HTTP/1.1 client ------------------------------- */

typedef struct {
    int fd;
    uint16_t port;
    char *buf;
    size_t cap;
} s_conn_t;

static int
s_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *) &a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static bool
s_write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t) w;
    }
    return true;
}

/* Case-insensitive search for `needle` (lower case) in `hay`. */
static char *
s_find_header(char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (char *p = hay; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && (p[i] | 0x20) == (needle[i] | 0x20))
            i++;
        if (i == n)
            return p;
    }
    return NULL;
}

/* Sends one request, reads one Content-Length response into c->buf.
 * Returns the status (or -1) and the body offset in *body. */
static int s_request_m(s_conn_t *c, const char *method, const char *path,
                       const char *auth, const char *body, size_t len,
                       const char **out);

static int
s_request(s_conn_t *c, const char *path, const char *auth, const char *body,
          size_t len, const char **out)
{
    return s_request_m(c, "POST", path, auth, body, len, out);
}

static int
s_request_m(s_conn_t *c, const char *method, const char *path, const char *auth,
            const char *body, size_t len, const char **out)
{
    if (c->fd < 0)
        c->fd = s_connect(c->port);
    if (c->fd < 0)
        return -1;
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/json\r\n%s%s%s"
                      "Content-Length: %zu\r\n\r\n",
                      method, path, auth ? "Authorization: Bearer " : "",
                      auth ? auth : "", auth ? "\r\n" : "", len);
    if (!s_write_all(c->fd, head, (size_t) hn) ||
        !s_write_all(c->fd, body, len))
        return -1;
    size_t got = 0;
    long clen = -1;
    char *hend = NULL;
    for (;;) {
        if (got + 65536 > c->cap) {
            c->cap = (got + 65536) * 2;
            c->buf = lisa_realloc(c->buf, c->cap);
        }
        ssize_t r = read(c->fd, c->buf + got, c->cap - got - 1);
        if (r <= 0)
            return -1;
        got += (size_t) r;
        c->buf[got] = '\0';
        if (!hend) {
            hend = strstr(c->buf, "\r\n\r\n");
            if (hend) {
                char *cl = s_find_header(c->buf, "\r\ncontent-length:");
                if (!cl || cl > hend)
                    return -1;
                clen = strtol(cl + 17, NULL, 10);
            }
        }
        if (hend && got >= (size_t) (hend + 4 - c->buf) + (size_t) clen)
            break;
    }
    *out = hend + 4;
    return atoi(c->buf + 9);
}

/* ---- conversations ------------------------------------------------------ */

static json_t *s_tools;

static void
s_make_tools(void)
{
    s_tools = json_loads(
        "[{\"type\":\"function\",\"function\":{\"name\":\"execute_bash\","
        "\"description\":\"Execute a bash command in the sandbox and return "
        "its output.\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"command\":{\"type\":\"string\",\"description\":\"The command.\"}},"
        "\"required\":[\"command\"]}}},{\"type\":\"function\",\"function\":{"
        "\"name\":\"str_replace_editor\",\"description\":\"View, create and "
        "edit files.\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"command\":{\"type\":\"string\"},\"path\":{\"type\":\"string\"},"
        "\"old_str\":{\"type\":\"string\"},\"new_str\":{\"type\":\"string\"}},"
        "\"required\":[\"command\",\"path\"]}}},{\"type\":\"function\","
        "\"function\":{\"name\":\"submit\",\"description\":\"Finish the "
        "task.\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]",
        0, NULL);
}

static json_t *
s_conv_new(void)
{
    return json_pack(
        "[{s:s,s:s},{s:s,s:s}]", "role", "system", "content",
        "You are an autonomous agent working inside a Linux sandbox. Use the "
        "tools to inspect /testbed, write your final answer to "
        "/testbed/answer.txt and call submit when done.",
        "role", "user", "content",
        "Read the documents in /testbed/documents and answer: which of the "
        "listed compounds has the highest melting point? Give the letter.");
}

static char *
s_conv_body(json_t *msgs)
{
    json_t *o =
        json_pack("{s:s,s:O,s:O,s:f,s:i}", "model", "lisa", "messages", msgs,
                  "tools", s_tools, "temperature", 1.0, "max_tokens", 1024);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* Appends the reply and a tool output for turn k. */
static bool
s_conv_step(json_t *msgs, const char *resp, int k)
{
    json_t *o = json_loads(resp, 0, NULL);
    json_t *m = json_object_get(
        json_array_get(json_object_get(o, "choices"), 0), "message");
    const char *id = json_string_value(json_object_get(
        json_array_get(json_object_get(m, "tool_calls"), 0), "id"));
    if (!m || !id) {
        json_decref(o);
        return false;
    }
    json_array_append(msgs, m);
    char out[640];
    snprintf(out, sizeof out,
             "total %d\ndrwxr-xr-x 3 agent agent 4096 Nov 30 10:%02d .\n"
             "-rw-r--r-- 1 agent agent 1834 Nov 30 10:%02d README.md\n"
             "Compound A: 134 C, compound B: 212 C, compound C: %d C. "
             "Measured at 1 atm; see table 2 for the uncertainty of each "
             "value and the method used for compound %c.",
             12 + k, k % 60, k % 60, 150 + 3 * k, 'A' + k % 3);
    json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool",
                                          "tool_call_id", id, "content", out));
    json_decref(o);
    return true;
}

/* ---- processes ---------------------------------------------------------- */

static uint16_t
s_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *) &a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *) &a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

/* Waits up to 60 s for a listener (a gateway under valgrind takes a
 * while to load its tokenizer). */
static bool
s_wait_port(uint16_t port)
{
    for (int i = 0; i < 6000; i++) {
        int fd = s_connect(port);
        if (fd >= 0) {
            close(fd);
            return true;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* argv strings must be mutable; these copies live until exec */
#define S_DUP(s) lisa_strdup(s)

static pid_t
s_spawn(char *const argv[])
{
    pid_t p = fork();
    if (p == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    return p;
}

static pid_t
s_start_gateway(uint16_t up, uint16_t port, const char *keyhex)
{
    char engines[64], portb[16], key[200];
    snprintf(engines, sizeof engines, "http://127.0.0.1:%u", up);
    snprintf(portb, sizeof portb, "%u", port);
    snprintf(key, sizeof key, "%s", keyhex);
    char *argv[] = {S_DUP(s_gwbin),
                    S_DUP("--port"),
                    portb,
                    S_DUP("--broker"),
                    S_DUP(""),
                    S_DUP("--engines"),
                    engines,
                    S_DUP("--tokenizer"),
                    S_DUP(S_TOKDIR),
                    S_DUP("--token-key"),
                    key,
                    S_DUP("--health-interval"),
                    S_DUP("0"),
                    S_DUP("--max-attempts"),
                    S_DUP("100000"),
                    NULL};
    setenv("LISA_LOG_LEVEL", "warn", 1);
    return s_spawn(argv);
}

static const char *
s_nginx_path(void)
{
    static const char *const c[] = {"/usr/sbin/nginx", "/usr/bin/nginx",
                                    "/usr/local/sbin/nginx"};
    for (size_t i = 0; i < 3; i++)
        if (access(c[i], X_OK) == 0)
            return c[i];
    return NULL;
}

static pid_t
s_start_nginx(const char *bin, uint16_t up, uint16_t port, char *dir)
{
    char conf[600];
    snprintf(conf, sizeof conf, "%s/nginx.conf", dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        return -1;
    fprintf(f,
            "worker_processes 1;\ndaemon off;\npid %s/nginx.pid;\n"
            "error_log %s/error.log warn;\n"
            "events { worker_connections 4096; }\n"
            "http {\n access_log off;\n"
            " keepalive_requests 10000000; keepalive_timeout 300s;\n"
            " client_body_temp_path %s/b; proxy_temp_path %s/p;\n"
            " fastcgi_temp_path %s/f; uwsgi_temp_path %s/u; "
            "scgi_temp_path %s/s;\n"
            " client_max_body_size 64m; client_body_buffer_size 1m;\n"
            " upstream engine { server 127.0.0.1:%u; keepalive 64;\n"
            "  keepalive_requests 10000000; }\n"
            " server {\n  listen 127.0.0.1:%u;\n  location / {\n"
            "   proxy_pass http://engine;\n   proxy_http_version 1.1;\n"
            "   proxy_set_header Connection \"\";\n  }\n }\n}\n",
            dir, dir, dir, dir, dir, dir, dir, up, port);
    fclose(f);
    char *argv[] = {S_DUP(bin), S_DUP("-p"), dir, S_DUP("-c"), conf, NULL};
    return s_spawn(argv);
}

/* ---- measurements ------------------------------------------------------- */

static int
s_cmp_d(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static double
s_pct(double *v, size_t n, double p)
{
    qsort(v, n, sizeof *v, s_cmp_d);
    size_t i = (size_t) (p * (double) (n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* Median of n values (sorts them); the mean of the two middle ones when
 * n is even. */
static double
s_median(double *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, s_cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct {
    uint16_t port;
    bool gateway;
    const uint8_t *key;
    size_t keylen;
    int turns;
    double until;
    uint64_t done;
    uint64_t failed;
    int idx;
} s_load_t;

static char *
s_token(const uint8_t *key, size_t keylen, int a, int b)
{
    char rid[64];
    snprintf(rid, sizeof rid, "bench-%d-%d", a, b);
    return lisa_token_issue(key, keylen, rid, 1, lisa_token_now_ms() + 3600000);
}

/* Latency mode: one conversation on one connection, each turn sent
 * through the proxy and then replayed directly to the engine; appends the
 * differences to added[*n]. */
static void
s_latency_conv(s_conn_t *pc, s_conn_t *dc, bool gateway, const uint8_t *key,
               size_t keylen, int turns, int conv, double *added, size_t *n)
{
    json_t *msgs = s_conv_new();
    char *tok = s_token(key, keylen, gateway ? 1000 : 2000, conv);
    for (int k = 0; k < turns; k++) {
        char *body = s_conv_body(msgs);
        const char *resp;
        double t0 = s_now();
        int st = s_request(pc, "/v1/chat/completions", tok, body, strlen(body),
                           &resp);
        double t1 = s_now();
        if (st != 200 || !s_conv_step(msgs, resp, k)) {
            fprintf(stderr, "latency run: status %d\n", st);
            free(body);
            if (pc->fd >= 0)
                close(pc->fd);
            pc->fd = -1;
            break;
        }
        pthread_mutex_lock(&s_last_mu);
        char *last = lisa_memdup(s_last_body, s_last_len);
        size_t last_len = s_last_len;
        char path[64];
        snprintf(path, sizeof path, "%s", s_last_path);
        pthread_mutex_unlock(&s_last_mu);
        double t2 = s_now();
        st = s_request(dc, path, NULL, last, last_len, &resp);
        double t3 = s_now();
        lisa_free(&last);
        free(body);
        if (st == 200)
            added[(*n)++] = (t1 - t0) - (t3 - t2);
    }
    lisa_free(&tok);
    json_decref(msgs);
}

static void
s_conn_close(s_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    lisa_free(&c->buf);
}

/* The HTTP layer's floor: a route answered without an engine call, minus
 * the same request answered directly by the engine. */
static double
s_floor(uint16_t proxy, uint16_t engine, int n)
{
    s_conn_t pc = {.fd = -1, .port = proxy}, dc = {.fd = -1, .port = engine};
    double *v = lisa_calloc((size_t) n, sizeof *v);
    const char *resp;
    for (int i = 0; i < n; i++) {
        double t0 = s_now();
        (void) s_request(&pc, "/healthz", NULL, "", 0, &resp);
        double t1 = s_now();
        (void) s_request(&dc, "/healthz", NULL, "", 0, &resp);
        v[i] = (t1 - t0) - (s_now() - t1);
    }
    double p50 = s_pct(v, (size_t) n, 0.5);
    lisa_free(&v);
    lisa_free(&pc.buf);
    lisa_free(&dc.buf);
    if (pc.fd >= 0)
        close(pc.fd);
    if (dc.fd >= 0)
        close(dc.fd);
    return p50;
}

static void *
s_load_thread(void *arg)
{
    s_load_t *l = arg;
    s_conn_t c = {.fd = -1, .port = l->port};
    for (int conv = 0; s_now() < l->until; conv++) {
        json_t *msgs = s_conv_new();
        char *tok = s_token(l->key, l->keylen, l->idx, conv);
        for (int k = 0; k < l->turns && s_now() < l->until; k++) {
            char *body = s_conv_body(msgs);
            const char *resp;
            int st = s_request(&c, "/v1/chat/completions", tok, body,
                               strlen(body), &resp);
            free(body);
            if (st != 200 || !s_conv_step(msgs, resp, k)) {
                l->failed++;
                if (c.fd >= 0)
                    close(c.fd);
                c.fd = -1;
                break;
            }
            l->done++;
        }
        lisa_free(&tok);
        json_decref(msgs);
    }
    if (c.fd >= 0)
        close(c.fd);
    lisa_free(&c.buf);
    return NULL;
}

/* CPU seconds (user + system) of process `pid` and of its children (the
 * nginx master's worker), from /proc. */
static double
s_proc_cpu1(long pid, long *ppid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p)
        return 0;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime */
    char state;
    long pp;
    unsigned long skip, ut, st;
    if (sscanf(p + 2, "%c %ld %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu",
               &state, &pp, &skip, &skip, &skip, &skip, &skip, &skip, &skip,
               &skip, &skip, &ut, &st) != 13)
        return 0;
    if (ppid)
        *ppid = pp;
    return (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
}

/* The 1-minute load average, from /proc/loadavg. */
static double
s_loadavg(void)
{
    double l = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = 0;
        fclose(f);
    }
    return l;
}

static double
s_proc_cpu(pid_t pid)
{
    double t = s_proc_cpu1(pid, NULL);
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end;
        long child = strtol(e->d_name, &end, 10);
        long pp = 0;
        if (*end || child <= 0 || child == pid)
            continue;
        double c = s_proc_cpu1(child, &pp);
        if (pp == pid)
            t += c;
    }
    if (d)
        closedir(d);
    return t;
}

static double
s_throughput(uint16_t port, bool gateway, const uint8_t *key, size_t keylen,
             int turns, int agents, double seconds, uint64_t *failed)
{
    s_load_t *l = lisa_calloc((size_t) agents, sizeof *l);
    pthread_t *t = lisa_calloc((size_t) agents, sizeof *t);
    double t0 = s_now();
    for (int i = 0; i < agents; i++) {
        l[i] = (s_load_t){port,   gateway, key,
                          keylen, turns,   t0 + seconds,
                          0,      0,       (gateway ? 10000 : 20000) + i};
        pthread_create(&t[i], NULL, s_load_thread, &l[i]);
    }
    uint64_t done = 0;
    *failed = 0;
    for (int i = 0; i < agents; i++) {
        pthread_join(t[i], NULL);
        done += l[i].done;
        *failed += l[i].failed;
    }
    double rps = (double) done / (s_now() - t0);
    lisa_free(&l);
    lisa_free(&t);
    return rps;
}

static double
s_tokenizer_mbs(lisa_tokenizer_t *tok)
{
    size_t cap = 4u << 20, n = 0;
    char *text = lisa_malloc(cap);
    for (int k = 0; n + 1024 < cap; k++)
        n += (size_t) snprintf(
            text + n, cap - n,
            "Turn %d: the agent ran `grep -rn \"melting point\" /testbed/"
            "documents` and found %d matches; compound %c melts at %d.%d C "
            "(±0.5), see table_%d.csv. def f_%d(x): return x ** 2 + %d\n",
            k, k % 17, 'A' + k % 5, 100 + k % 300, k % 10, k % 9, k, k);
    lisa_ids_t *ids = lisa_ids_new(n);
    double t0 = s_now();
    if (lisa_tokenizer_encode(tok, text, n, false, ids) != LISA_OK)
        return 0;
    double dt = s_now() - t0;
    lisa_ids_destroy(&ids);
    lisa_free(&text);
    return (double) n / dt / 1e6;
}

static int
s_arg(int argc, char **argv, int i, int def)
{
    return argc > i ? atoi(argv[i]) : def;
}

int
main(int argc, char **argv)
{
    int turns = s_arg(argc, argv, 1, 30);
    int convs = s_arg(argc, argv, 2, 20);
    int agents = s_arg(argc, argv, 3, 8);
    int seconds = s_arg(argc, argv, 4, 5);
    int rounds = s_arg(argc, argv, 5, 3);
    if (turns < 1 || convs < 1 || agents < 1 || seconds < 1 || rounds < 1) {
        fprintf(stderr, "gw_bench: arguments must be positive\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    s_paths();
    lisa_tokenizer_t *tok = lisa_tokenizer_new_from_dir(S_TOKDIR);
    if (!tok) {
        fprintf(stderr, "gw_bench: cannot load %s\n", S_TOKDIR);
        return 1;
    }
    s_make_replies(tok);
    s_make_tools();
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY, 0, NULL,
        NULL, s_engine, NULL, MHD_OPTION_NOTIFY_COMPLETED, s_engine_done, NULL,
        MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_LISTENING_ADDRESS_REUSE,
        1u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "gw_bench: engine did not start\n");
        return 1;
    }
    uint16_t up = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
    lisa_token_key_t key;
    if (lisa_token_key_random(&key, 32) != LISA_OK)
        return 1;
    char *keyhex = lisa_token_key_hex(&key);
    uint16_t gport = s_free_port();
    pid_t gw_pid = s_start_gateway(up, gport, keyhex);
    if (!s_wait_port(gport)) {
        fprintf(stderr, "gw_bench: gateway did not start\n");
        return 1;
    }
    const char *ngx = s_nginx_path();
    char dir[] = "/tmp/gw_bench_nginx_XXXXXX";
    uint16_t nport = 0;
    pid_t ng = -1;
    if (ngx && mkdtemp(dir)) {
        chmod(dir, 0777);
        nport = s_free_port();
        ng = s_start_nginx(ngx, up, nport, dir);
        if (!s_wait_port(nport)) {
            fprintf(stderr, "gw_bench: nginx did not start\n");
            ng = -1;
        }
    }
    printf("gw_bench: %d-turn tool-calling conversations, full history "
           "re-sent each turn\n",
           turns);
    bool peer = ng > 0;
    size_t cap = (size_t) (turns * convs * rounds) + 1;
    double *ag = lisa_calloc(cap, sizeof *ag),
           *an = lisa_calloc(cap, sizeof *an);
    double *rg50 = lisa_calloc((size_t) rounds, sizeof *rg50),
           *rn50 = lisa_calloc((size_t) rounds, sizeof *rn50),
           *rgr = lisa_calloc((size_t) rounds, sizeof *rgr),
           *rnr = lisa_calloc((size_t) rounds, sizeof *rnr),
           *rratio = lisa_calloc((size_t) rounds, sizeof *rratio),
           *rgcpu = lisa_calloc((size_t) rounds, sizeof *rgcpu),
           *rncpu = lisa_calloc((size_t) rounds, sizeof *rncpu);
    size_t gn = 0, ng_n = 0;
    uint64_t gf = 0, nf = 0;
    s_conn_t gc = {.fd = -1, .port = gport}, nc = {.fd = -1, .port = nport},
             dgc = {.fd = -1, .port = up}, dnc = {.fd = -1, .port = up};
    /* warm-up: one conversation through each */
    {
        double *w = lisa_calloc((size_t) turns + 1, sizeof *w);
        size_t wn = 0;
        s_latency_conv(&gc, &dgc, true, key.bytes, key.len, turns, -1, w, &wn);
        wn = 0;
        if (peer)
            s_latency_conv(&nc, &dnc, false, key.bytes, key.len, turns, -1, w,
                           &wn);
        lisa_free(&w);
    }
    for (int r = 0; r < rounds; r++) {
        /* latency: conversations alternate between the two proxies (and
         * which goes first), so both see the same load */
        size_t g0 = gn, n0 = ng_n;
        for (int c = 0; c < convs; c++) {
            int conv = r * convs + c;
            bool gw_first = (conv % 2) == 0 || !peer;
            for (int k = 0; k < (peer ? 2 : 1); k++) {
                if ((k == 0) == gw_first)
                    s_latency_conv(&gc, &dgc, true, key.bytes, key.len, turns,
                                   conv, ag, &gn);
                else
                    s_latency_conv(&nc, &dnc, false, key.bytes, key.len, turns,
                                   conv, an, &ng_n);
            }
        }
        double *tmp = lisa_calloc(cap, sizeof *tmp);
        memcpy(tmp, ag + g0, (gn - g0) * sizeof *tmp);
        rg50[r] = gn > g0 ? s_pct(tmp, gn - g0, 0.5) * 1e3 : 0;
        memcpy(tmp, an + n0, (ng_n - n0) * sizeof *tmp);
        rn50[r] = ng_n > n0 ? s_pct(tmp, ng_n - n0, 0.5) * 1e3 : 0;
        lisa_free(&tmp);
        /* requests/s: the two runs back to back, the order alternating */
        for (int k = 0; k < (peer ? 2 : 1); k++) {
            bool gw = (k == 0) == (r % 2 == 0 || !peer);
            uint64_t f = 0;
            pid_t who = gw ? gw_pid : ng;
            double c0 = s_proc_cpu(who);
            double rps = s_throughput(gw ? gport : nport, gw, key.bytes,
                                      key.len, turns, agents, seconds, &f);
            double cpu = s_proc_cpu(who) - c0;
            double per = rps > 0 ? cpu / (rps * seconds) * 1e6 : 0;
            if (gw) {
                rgr[r] = rps;
                rgcpu[r] = per;
                gf += f;
            } else {
                rnr[r] = rps;
                rncpu[r] = per;
                nf += f;
            }
        }
        rratio[r] = rnr[r] > 0 ? rgr[r] / rnr[r] : 0;
        double la[1] = {s_loadavg()};
        printf("round %d: p50 added gateway %.3f ms, nginx %.3f ms; req/s "
               "gateway %.0f, nginx %.0f, ratio %.2f; load %.1f\n",
               r + 1, rg50[r], rn50[r], rgr[r], rnr[r], rratio[r], la[0]);
    }
    s_conn_close(&gc);
    s_conn_close(&nc);
    s_conn_close(&dgc);
    s_conn_close(&dnc);
    double g50 = gn ? s_pct(ag, gn, 0.5) * 1e3 : 0;
    double g99 = gn ? s_pct(ag, gn, 0.99) * 1e3 : 0;
    double grps = s_median(rgr, (size_t) rounds);
    printf("gateway: added latency p50 %.3f ms, p99 %.3f ms over %zu calls "
           "(median of round p50s %.3f ms); %.0f req/s with %d agents (median "
           "of %d rounds, %llu failed); CPU %.0f us per call\n",
           g50, g99, gn, s_median(rg50, (size_t) rounds), grps, agents, rounds,
           (unsigned long long) gf, s_median(rgcpu, (size_t) rounds));
    if (peer) {
        double n50 = s_pct(an, ng_n, 0.5) * 1e3,
               n99 = s_pct(an, ng_n, 0.99) * 1e3;
        printf("nginx:   added latency p50 %.3f ms, p99 %.3f ms over %zu "
               "calls (median of round p50s %.3f ms); %.0f req/s with %d "
               "agents (median of %d rounds, %llu failed); CPU %.0f us per "
               "call\n",
               n50, n99, ng_n, s_median(rn50, (size_t) rounds),
               s_median(rnr, (size_t) rounds), agents, rounds,
               (unsigned long long) nf, s_median(rncpu, (size_t) rounds));
        printf("ratio gateway/nginx: req/s %.2f (median of the rounds' "
               "ratios; aim >= 0.5), p50 added %.2fx\n",
               s_median(rratio, (size_t) rounds), n50 > 0 ? g50 / n50 : 0);
    } else
        printf("nginx:   not found; install Debian's nginx for the peer "
               "figures\n");
    printf("aim p50 added < 0.3 ms: %s\n", g50 < 0.3 ? "met" : "NOT met");
    printf("gateway HTTP layer alone (a route without engine call, vs the "
           "engine answering it): p50 %.3f ms\n",
           s_floor(gport, up, 500) * 1e3);
    {
        s_conn_t mc = {.fd = -1, .port = gport};
        const char *m;
        if (s_request_m(&mc, "GET", "/metrics", NULL, "", 0, &m) == 200) {
            static const char *const st[] = {"prepare", "finish", "respond"};
            for (int k = 0; k < 3; k++) {
                char mk[96];
                snprintf(mk, sizeof mk,
                         "lisa_gateway_stage_seconds_sum{stage=\"%s\"} ",
                         st[k]);
                const char *p = strstr(m, mk);
                snprintf(mk, sizeof mk,
                         "lisa_gateway_stage_seconds_count{stage=\"%s\"} ",
                         st[k]);
                const char *q = strstr(m, mk);
                if (p && q)
                    printf("gateway stage %s (outside the engine call): "
                           "mean %.3f ms\n",
                           st[k],
                           atof(strchr(p, '}') + 2) / atof(strchr(q, '}') + 2) *
                               1e3);
            }
        }
        if (mc.fd >= 0)
            close(mc.fd);
        lisa_free(&mc.buf);
    }
    printf("tokenizer: %.1f MB/s (lisa_tokenizer_encode, agent-like text)\n",
           s_tokenizer_mbs(tok));
    kill(gw_pid, SIGTERM);
    waitpid(gw_pid, NULL, 0);
    if (ng > 0) {
        kill(ng, SIGTERM);
        waitpid(ng, NULL, 0);
    }
    MHD_stop_daemon(d);
    lisa_free(&ag);
    lisa_free(&an);
    lisa_free(&rg50);
    lisa_free(&rn50);
    lisa_free(&rgr);
    lisa_free(&rnr);
    lisa_free(&rratio);
    lisa_free(&rgcpu);
    lisa_free(&rncpu);
    lisa_free(&keyhex);
    lisa_tokenizer_destroy(&tok);
    return 0;
}
