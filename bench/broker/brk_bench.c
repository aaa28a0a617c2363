/*
 * brk_bench: what the broker costs, next to a well-known peer.
 *
 * Starts a real lisa-broker (sync=full: every group commit is fsynced) on
 * loopback and measures
 *   1. durable-acknowledged span ingest: SpanPut requests of one realistic
 *      span each (500 appended prompt ids, 500 sampled ids with logprobs),
 *      many in flight; a span counts when its reply (sent after COMMIT)
 *      arrives;
 *   2. rollout transitions per second (enqueue, claim, start, fail), each
 *      one a durable row in the transitions table plus an event;
 *   3. RPC latency percentiles for a write (heartbeat) and a read (stats)
 *      with one request in flight.
 * Then it starts redis-server on loopback with appendonly yes and
 * appendfsync always (an entry is acknowledged after the fsync of the
 * append-only file that holds it: the broker's promise) and measures
 * pipelined XADD of the same span bytes, from the same number of
 * producers with the same number in flight, in rounds alternating with
 * the broker's, and prints the medians and the ratio broker / redis.
 *
 *   brk_bench [--seconds S] [--rounds R] [--producers P] [--window W]
 *             [--broker PATH] [--redis PATH] [--sync full|normal]
 *             [--redis-fsync always|everysec]
 */
#include "lisa/lisa_codec.h"
#include "lisa/lisa_mem.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* protobuf-c and exec take `char *`; literals are const. */
#define S_TXT(s) ((char *) (uintptr_t) (s))

#define S_APPEND        500
#define S_RESP          500
#define S_MAX_PRODUCERS 64

static double s_seconds = 3.0;
/* requests (or XADDs) each producer keeps in flight */
static uint64_t s_window = 512;

static double
s_now(void)
{
    return (double) zclock_usecs() / 1e6;
}

static pid_t
s_spawn(char *const argv[])
{
    pid_t pid = 0;
    if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0) {
        fprintf(stderr, "bench: cannot start %s\n", argv[0]);
        return -1;
    }
    return pid;
}

static void
s_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
}

/* CPU seconds (user + system) a process has used so far. */
static double
s_cpu(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    unsigned long ut = 0, st = 0;
    /* after ") " come fields 3..: state ppid pgrp session tty tpgid flags
     * minflt cminflt majflt cmajflt utime stime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
               &ut, &st) != 2)
        return 0;
    return (double) (ut + st) / (double) sysconf(_SC_CLK_TCK);
}

/* ------------------------------------------------------------------ */
/* broker side                                                        */

typedef struct {
    zsock_t *sock;
    uint64_t next_id;
} s_client_t;

static Lisa__Reply *
s_recv(s_client_t *c, int timeout_ms)
{
    zmq_pollitem_t it = {zsock_resolve(c->sock), 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return NULL;
    zmsg_t *m = zmsg_recv(c->sock);
    if (!m)
        return NULL;
    zframe_t *f = zmsg_last(m);
    Lisa__Reply *r = lisa__reply__unpack(NULL, zframe_size(f), zframe_data(f));
    zmsg_destroy(&m);
    return r;
}

static void
s_send(s_client_t *c, Lisa__Request *req)
{
    req->request_id = c->next_id++;
    zmsg_t *m = zmsg_new();
    zmsg_addmem(m, NULL, 0);
    lisa_codec_append(m, &req->base);
    zmsg_send(&m, c->sock);
}

/* Sends a request frame built by hand (see s_make_span). */
static void
s_send_raw(s_client_t *c, const uint8_t *data, size_t len)
{
    zmsg_t *m = zmsg_new();
    zmsg_addmem(m, NULL, 0);
    zmsg_addmem(m, data, len);
    zmsg_send(&m, c->sock);
}

static Lisa__Reply *
s_call(s_client_t *c, Lisa__Request *req)
{
    s_send(c, req);
    for (;;) {
        Lisa__Reply *r = s_recv(c, 30000);
        if (!r) {
            fprintf(stderr, "bench: broker did not answer\n");
            exit(1);
        }
        if (r->request_id == req->request_id) {
            if (r->code != LISA__CODE__CODE_OK) {
                fprintf(stderr, "bench: broker error: %s\n", r->error);
                exit(1);
            }
            return r;
        }
        lisa__reply__free_unpacked(r, NULL);
    }
}

/* Enqueues one task as n rollouts and returns their ids (caller frees). */
static char **
s_enqueue(s_client_t *c, uint32_t n, const char *run)
{
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__EnqueueReq q = LISA__ENQUEUE_REQ__INIT;
    Lisa__TaskSpec t = LISA__TASK_SPEC__INIT;
    Lisa__TaskSpec *tp = &t;
    t.problem_statement = S_TXT("What is 2 + 3?");
    t.ground_truth = S_TXT("5");
    t.data_source = S_TXT("math_bench");
    t.n = n;
    q.run_id = (char *) (uintptr_t) run;
    q.n_tasks = 1;
    q.tasks = &tp;
    req.body_case = LISA__REQUEST__BODY_ENQUEUE;
    req.enqueue = &q;
    Lisa__Reply *r = s_call(c, &req);
    char **ids = lisa_calloc(n + 1, sizeof *ids);
    for (size_t i = 0; i < r->enqueue->n_rollout_ids && i < n; i++)
        ids[i] = lisa_strdup(r->enqueue->rollout_ids[i]);
    lisa__reply__free_unpacked(r, NULL);
    return ids;
}

static size_t
s_claim(s_client_t *c, uint32_t cap, const char *run)
{
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__ClaimReq q = LISA__CLAIM_REQ__INIT;
    q.controller_id = S_TXT("bench");
    q.capacity = cap;
    q.run_id = (char *) (uintptr_t) run;
    req.body_case = LISA__REQUEST__BODY_CLAIM;
    req.claim = &q;
    Lisa__Reply *r = s_call(c, &req);
    size_t n = r->claim->n_attempts;
    lisa__reply__free_unpacked(r, NULL);
    return n;
}

static uint32_t s_append[S_APPEND], s_resp[S_RESP];
static float s_lp[S_RESP];

static void
s_fill_span(Lisa__Span *s, char *rid, uint32_t seq)
{
    lisa__span__init(s);
    s->rollout_id = rid;
    s->attempt = 1;
    s->seq = seq;
    s->prev_seq = (int32_t) seq - 1;
    s->n_appended_ids = S_APPEND;
    s->appended_ids = s_append;
    s->n_response_ids = S_RESP;
    s->response_ids = s_resp;
    s->n_response_logprobs = S_RESP;
    s->response_logprobs = s_lp;
    s->finish_reason = S_TXT("tool_calls");
    s->policy_version = 3;
    s->engine_id = S_TXT("rank0");
    s->gateway_id = S_TXT("gw-1");
    s->start_ms = 1700000000000ull;
    s->end_ms = 1700000001234ull;
    s->prompt_len = seq * 1000u + S_APPEND;
}

/* Pipelined requests produced by `make` for s_seconds; returns the
 * number of OK replies and the elapsed seconds in *secs. */
typedef void(s_make_fn)(void *arg, uint64_t i, s_client_t *c);

static uint64_t
s_pipeline(s_client_t *cs, size_t nc, s_make_fn *make, void *arg,
           uint64_t limit, double *secs)
{
    uint64_t sent = 0, ok = 0, got = 0;
    uint64_t inflight[S_MAX_PRODUCERS] = {0};
    zmq_pollitem_t items[S_MAX_PRODUCERS];
    for (size_t k = 0; k < nc; k++)
        items[k] =
            (zmq_pollitem_t){zsock_resolve(cs[k].sock), 0, ZMQ_POLLIN, 0};
    double t0 = s_now(), stop = t0 + s_seconds;
    while (got < sent || (s_now() < stop && sent < limit)) {
        for (size_t k = 0; k < nc; k++)
            while (inflight[k] < s_window && sent < limit && s_now() < stop) {
                make(arg, sent, &cs[k]);
                sent++;
                inflight[k]++;
            }
        int n = zmq_poll(items, (int) nc, sent > got ? 30000 : 1);
        if (n <= 0) {
            if (sent > got) {
                fprintf(stderr, "bench: replies stopped coming\n");
                exit(1);
            }
            continue;
        }
        for (size_t k = 0; k < nc; k++) {
            if (!(items[k].revents & ZMQ_POLLIN))
                continue;
            Lisa__Reply *r;
            while (inflight[k] && (r = s_recv(&cs[k], 0))) {
                got++;
                inflight[k]--;
                if (r->code == LISA__CODE__CODE_OK)
                    ok++;
                lisa__reply__free_unpacked(r, NULL);
            }
        }
    }
    *secs = s_now() - t0;
    return ok;
}

/* The span load generator, like the redis one, sends bytes encoded ahead
 * of time: the id and logprob arrays (the bulk of a span) are packed once
 * (s_bulk), and each request only packs the few per-span fields and
 * frames them. Protobuf merges repeated encodings of a message, so the
 * frame is a valid Request with one span of the full content. */
static uint8_t *s_bulk;
static size_t s_bulk_len;

static void
s_bulk_init(void)
{
    Lisa__Span b = LISA__SPAN__INIT;
    b.n_appended_ids = S_APPEND;
    b.appended_ids = s_append;
    b.n_response_ids = S_RESP;
    b.response_ids = s_resp;
    b.n_response_logprobs = S_RESP;
    b.response_logprobs = s_lp;
    s_bulk_len = lisa__span__get_packed_size(&b);
    s_bulk = lisa_malloc(s_bulk_len);
    lisa__span__pack(&b, s_bulk);
}

static size_t
s_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t) (v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t) v;
    return n;
}

/* The packed span (small fields + s_bulk) into out (capacity cap). */
static size_t
s_pack_span(Lisa__Span *small, uint8_t *out, size_t cap)
{
    small->n_appended_ids = 0;
    small->n_response_ids = 0;
    small->n_response_logprobs = 0;
    size_t n = lisa__span__get_packed_size(small);
    if (n + s_bulk_len > cap)
        abort();
    lisa__span__pack(small, out);
    memcpy(out + n, s_bulk, s_bulk_len);
    return n + s_bulk_len;
}

typedef struct {
    char **ids;
    size_t n;
    uint32_t *seq;
    uint8_t *buf, *span;
    size_t cap;
} s_spans_t;

static void
s_make_span(void *arg, uint64_t i, s_client_t *c)
{
    s_spans_t *s = arg;
    size_t k = (size_t) (i % s->n);
    Lisa__Span span;
    s_fill_span(&span, s->ids[k], s->seq[k]++);
    size_t sn = s_pack_span(&span, s->span, s->cap);
    /* Request{version, request_id} then body span_put (field 122):
     * SpanPutReq{spans (field 1): the span} */
    Lisa__Request hdr = LISA__REQUEST__INIT;
    hdr.version = 1;
    hdr.request_id = c->next_id++;
    size_t n = lisa__request__pack(&hdr, s->buf);
    uint8_t inner[16];
    size_t in = 0;
    inner[in++] = (1 << 3) | 2;
    in += s_varint(inner + in, sn);
    n += s_varint(s->buf + n, (122u << 3) | 2);
    n += s_varint(s->buf + n, in + sn);
    memcpy(s->buf + n, inner, in);
    n += in;
    memcpy(s->buf + n, s->span, sn);
    n += sn;
    s_send_raw(c, s->buf, n);
}

typedef struct {
    char **ids;
    size_t n;
    int kind; /* 0 start, 1 fail */
    Lisa__AttemptStartReq start;
    Lisa__AttemptFailReq fail;
} s_trans_t;

static void
s_make_trans(void *arg, uint64_t i, s_client_t *c)
{
    Lisa__Request r = LISA__REQUEST__INIT, *req = &r;
    s_trans_t *t = arg;
    char *id = t->ids[i % t->n];
    if (t->kind == 0) {
        lisa__attempt_start_req__init(&t->start);
        t->start.rollout_id = id;
        t->start.attempt = 1;
        t->start.sandbox_id = S_TXT("sbx");
        req->body_case = LISA__REQUEST__BODY_ATTEMPT_START;
        req->attempt_start = &t->start;
    } else {
        lisa__attempt_fail_req__init(&t->fail);
        t->fail.rollout_id = id;
        t->fail.attempt = 1;
        t->fail.kind = LISA__FAILURE_KIND__FAILURE_AGENT;
        t->fail.reason = S_TXT("bench");
        req->body_case = LISA__REQUEST__BODY_ATTEMPT_FAIL;
        req->attempt_fail = &t->fail;
    }
    s_send(c, req);
}

/* The broker's group commits so far (StatsReq). */
static uint64_t
s_commits(s_client_t *c)
{
    Lisa__Request st = LISA__REQUEST__INIT;
    Lisa__StatsReq sq = LISA__STATS_REQ__INIT;
    st.body_case = LISA__REQUEST__BODY_STATS;
    st.stats = &sq;
    Lisa__Reply *r = s_call(c, &st);
    uint64_t n =
        r->stats && r->stats->stats ? r->stats->stats->group_commits : 0;
    lisa__reply__free_unpacked(r, NULL);
    return n;
}

static int
s_cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static void
s_latency(s_client_t *c, const char *name, Lisa__Request *req, int n)
{
    double *lat = lisa_calloc((size_t) n, sizeof *lat);
    for (int i = 0; i < n; i++) {
        double t0 = s_now();
        Lisa__Reply *r = s_call(c, req);
        lat[i] = (s_now() - t0) * 1e3;
        lisa__reply__free_unpacked(r, NULL);
    }
    qsort(lat, (size_t) n, sizeof *lat, s_cmp);
    printf("  rpc latency %-22s p50 %7.3f ms  p99 %7.3f ms  (n=%d, one in "
           "flight)\n",
           name, lat[n / 2], lat[(n * 99) / 100], n);
    lisa_free(&lat);
}

/* ------------------------------------------------------------------ */
/* redis side: RESP over a plain TCP socket                           */

static int
s_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *) &a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *) &a, &len) != 0) {
        close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int
s_connect_tcp(int port)
{
    for (int tries = 0; tries < 200; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t) port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *) &a, sizeof a) == 0)
            return fd;
        close(fd);
        zclock_sleep(25);
    }
    return -1;
}

static void
s_write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            fprintf(stderr, "bench: redis write failed\n");
            exit(1);
        }
        p += w;
        n -= (size_t) w;
    }
}

/* Reads until `want` complete replies were consumed; returns errors seen. */
typedef struct {
    char *buf;
    size_t len, cap;
} s_rbuf_t;

static uint64_t
s_read_replies(int fd, s_rbuf_t *rb, uint64_t want, uint64_t *errors)
{
    uint64_t done = 0;
    while (done < want) {
        /* parse complete replies in the buffer */
        size_t off = 0;
        for (;;) {
            char *nl = memchr(rb->buf + off, '\n', rb->len - off);
            if (!nl)
                break;
            char type = rb->buf[off];
            size_t line_end = (size_t) (nl - rb->buf) + 1;
            if (type == '$') {
                long n = strtol(rb->buf + off + 1, NULL, 10);
                size_t need = line_end + (n > 0 ? (size_t) n + 2 : 0);
                if (need > rb->len)
                    break;
                off = need;
            } else {
                if (type == '-')
                    (*errors)++;
                off = line_end;
            }
            done++;
            if (done == want)
                break;
        }
        memmove(rb->buf, rb->buf + off, rb->len - off);
        rb->len -= off;
        if (done == want)
            break;
        if (rb->cap - rb->len < 65536) {
            rb->cap = rb->cap * 2 + 65536;
            rb->buf = lisa_realloc(rb->buf, rb->cap);
        }
        ssize_t r = read(fd, rb->buf + rb->len, rb->cap - rb->len);
        if (r <= 0) {
            fprintf(stderr, "bench: redis read failed\n");
            exit(1);
        }
        rb->len += (size_t) r;
    }
    return done;
}

typedef struct {
    pid_t pid;
    size_t n; /* connections, one per producer */
    int fd[S_MAX_PRODUCERS];
    s_rbuf_t rb[S_MAX_PRODUCERS];
    char *cmd;
    size_t cmd_len;
} s_redis_t;

/* Starts redis-server (appendonly, appendfsync `fsync`) and opens n
 * connections; false when it cannot. `payload` is the entry every XADD
 * carries. */
static bool
s_redis_start(s_redis_t *r, const char *redis_bin, const char *dir,
              const char *fsync, size_t n, const uint8_t *payload, size_t plen)
{
    int port = s_free_port();
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    char *argv[] = {(char *) (uintptr_t) redis_bin,
                    S_TXT("--port"),
                    portstr,
                    S_TXT("--bind"),
                    S_TXT("127.0.0.1"),
                    S_TXT("--appendonly"),
                    S_TXT("yes"),
                    S_TXT("--appendfsync"),
                    (char *) (uintptr_t) fsync,
                    S_TXT("--save"),
                    S_TXT(""),
                    S_TXT("--dir"),
                    (char *) (uintptr_t) dir,
                    S_TXT("--daemonize"),
                    S_TXT("no"),
                    S_TXT("--loglevel"),
                    S_TXT("warning"),
                    S_TXT("--logfile"),
                    S_TXT("redis.log"),
                    NULL};
    r->pid = s_spawn(argv);
    if (r->pid <= 0)
        return false;
    for (r->n = 0; r->n < n; r->n++) {
        r->fd[r->n] = s_connect_tcp(port);
        if (r->fd[r->n] < 0) {
            fprintf(stderr, "bench: redis did not come up\n");
            s_stop(r->pid);
            return false;
        }
        r->rb[r->n] = (s_rbuf_t){lisa_malloc(1 << 20), 0, 1 << 20};
    }
    char head[128];
    int hn =
        snprintf(head, sizeof head,
                 "*5\r\n$4\r\nXADD\r\n$5\r\nspans\r\n$1\r\n*\r\n$1\r\nd\r\n"
                 "$%zu\r\n",
                 plen);
    r->cmd_len = (size_t) hn + plen + 2;
    r->cmd = lisa_malloc(r->cmd_len);
    memcpy(r->cmd, head, (size_t) hn);
    memcpy(r->cmd + hn, payload, plen);
    memcpy(r->cmd + (size_t) hn + plen, "\r\n", 2);
    return true;
}

/* One round of pipelined XADD for s_seconds: entries/s, *cpu = redis
 * CPU seconds used, *n = entries acknowledged. */
static double
s_redis_round(s_redis_t *r, double *cpu, uint64_t *n)
{
    uint64_t got = 0, errors = 0;
    uint64_t inflight[S_MAX_PRODUCERS] = {0};
    /* each connection writes batches of up to 64 and keeps s_window in
     * flight: at the window it waits for the oldest batch's replies */
    const uint64_t batch = s_window < 64 ? s_window : 64;
    double cpu0 = s_cpu(r->pid);
    double t0 = s_now(), stop = t0 + s_seconds;
    while (s_now() < stop) {
        for (size_t k = 0; k < r->n; k++) {
            for (uint64_t i = 0; i < batch; i++)
                s_write_all(r->fd[k], r->cmd, r->cmd_len);
            inflight[k] += batch;
            if (inflight[k] + batch > s_window) {
                uint64_t want = inflight[k] + batch - s_window;
                got += s_read_replies(r->fd[k], &r->rb[k], want, &errors);
                inflight[k] -= want;
            }
        }
    }
    for (size_t k = 0; k < r->n; k++)
        got += s_read_replies(r->fd[k], &r->rb[k], inflight[k], &errors);
    double secs = s_now() - t0;
    *cpu = s_cpu(r->pid) - cpu0;
    if (errors)
        fprintf(stderr, "bench: redis answered %" PRIu64 " errors\n", errors);
    *n = got - errors;
    return (double) *n / secs;
}

static void
s_redis_stop(s_redis_t *r)
{
    for (size_t k = 0; k < r->n; k++) {
        close(r->fd[k]);
        lisa_free(&r->rb[k].buf);
    }
    s_stop(r->pid);
    lisa_free(&r->cmd);
}

static double
s_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, s_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ------------------------------------------------------------------ */

int
main(int argc, char **argv)
{
    const char *broker_bin = LISA_BROKER_BIN,
               *redis_bin = "/usr/bin/redis-server";
    const char *sync = "full", *redis_fsync = "always";
    int rounds = 3;
    long producers = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            s_seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--broker") == 0)
            broker_bin = argv[i + 1];
        else if (strcmp(argv[i], "--redis") == 0)
            redis_bin = argv[i + 1];
        else if (strcmp(argv[i], "--sync") == 0)
            sync = argv[i + 1];
        else if (strcmp(argv[i], "--rounds") == 0)
            rounds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--producers") == 0)
            producers = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--window") == 0)
            s_window = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--redis-fsync") == 0)
            redis_fsync = argv[i + 1];
        else {
            fprintf(stderr, "bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (rounds < 1 || rounds > 99 || producers < 1 ||
        producers > S_MAX_PRODUCERS || s_window < 1 || s_window > 100000) {
        fprintf(stderr,
                "bench: --rounds must be 1..99, --producers 1..%d, "
                "--window 1..100000\n",
                S_MAX_PRODUCERS);
        return 2;
    }
    size_t np = (size_t) producers;
    zsys_init();
    zsys_set_logstream(NULL);
    for (uint32_t i = 0; i < S_APPEND; i++)
        s_append[i] = (i * 7919u) % 151643u;
    for (uint32_t i = 0; i < S_RESP; i++) {
        s_resp[i] = (i * 104729u) % 151643u;
        s_lp[i] = -0.001f * (float) (i % 1000);
    }
    s_bulk_init();
    char dir[] = "/tmp/lisa-bench-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char data[512], ports[512], rdir[512];
    snprintf(data, sizeof data, "%s/broker", dir);
    snprintf(ports, sizeof ports, "%s/ports", dir);
    snprintf(rdir, sizeof rdir, "%s/redis", dir);
    mkdir(rdir, 0700);
    char *bargv[] = {(char *) (uintptr_t) broker_bin, S_TXT("--data"), data,
                     S_TXT("--ports-file"), ports, S_TXT("--rpc"),
                     S_TXT("tcp://127.0.0.1:*"), S_TXT("--spans"),
                     S_TXT("tcp://127.0.0.1:*"), S_TXT("--events"),
                     S_TXT("tcp://127.0.0.1:*"), S_TXT("--workers"),
                     S_TXT("tcp://127.0.0.1:*"), S_TXT("--sync"),
                     (char *) (uintptr_t) sync, S_TXT("--log-level"),
                     S_TXT("warn"),
                     /* plain sockets: the figures compare the stores */
                     S_TXT("--curve"), S_TXT("off"), S_TXT("--lease-ms"),
                     S_TXT("600000"), NULL};
    pid_t bpid = s_spawn(bargv);
    fprintf(stderr, "bench: broker pid %d\n", (int) bpid);
    char rpc_ep[320] = "";
    for (int t = 0; t < 500 && !rpc_ep[0]; t++) {
        FILE *f = fopen(ports, "r");
        if (f) {
            char line[300];
            while (fgets(line, sizeof line, f))
                if (strncmp(line, "rpc=", 4) == 0) {
                    line[strcspn(line, "\n")] = '\0';
                    snprintf(rpc_ep, sizeof rpc_ep, "%s", line + 4);
                }
            fclose(f);
        }
        if (!rpc_ep[0])
            zclock_sleep(10);
    }
    if (!rpc_ep[0]) {
        fprintf(stderr, "bench: broker did not start\n");
        s_stop(bpid);
        return 1;
    }
    /* one DEALER (one connection) per producer; cs[0] also runs the
     * one-at-a-time calls */
    s_client_t cs[S_MAX_PRODUCERS];
    for (size_t k = 0; k < np; k++) {
        cs[k] = (s_client_t){zsock_new(ZMQ_DEALER), 1};
        zsock_set_sndhwm(cs[k].sock, 0);
        zsock_set_rcvhwm(cs[k].sock, 0);
        zsock_connect(cs[k].sock, "%s", rpc_ep);
    }
    s_client_t *c = &cs[0];

    /* payload size, for both sides */
    Lisa__Span sp;
    s_fill_span(&sp, S_TXT("r-01a2b3c4d5e6-0123456789"), 7);
    size_t pcap = s_bulk_len + 4096;
    uint8_t *payload = lisa_malloc(pcap);
    size_t plen = s_pack_span(&sp, payload, pcap);
    double load = 0;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load) != 1)
            load = 0;
        fclose(lf);
    }
    printf("lisa broker bench: %ld online cores (load average %.2f), broker "
           "sync=%s, redis appendfsync %s, %zu producers x %" PRIu64
           " in flight each, %.1f s per figure\n",
           sysconf(_SC_NPROCESSORS_ONLN), load, sync, redis_fsync, np, s_window,
           s_seconds);
    printf("  span: %u prompt ids + %u sampled ids with logprobs = %zu bytes "
           "packed\n",
           S_APPEND, S_RESP, plen);

    /* 1. spans, in rounds alternating with redis XADD of the same bytes,
     * so both see the same machine */
    s_redis_t rd = {.pid = -1};
    bool have_redis =
        s_redis_start(&rd, redis_bin, rdir, redis_fsync, np, payload, plen);
    const size_t holders = 64;
    s_spans_t sp_arg = {0};
    sp_arg.ids = s_enqueue(c, (uint32_t) holders, "spans");
    sp_arg.n = holders;
    sp_arg.seq = lisa_calloc(holders, sizeof *sp_arg.seq);
    sp_arg.cap = s_bulk_len + 4096;
    sp_arg.buf = lisa_malloc(sp_arg.cap + 64);
    sp_arg.span = lisa_malloc(sp_arg.cap);
    s_claim(c, (uint32_t) holders, "spans");
    double b_rate[99], b_eff[99], r_rate[99], r_eff[99], ratio[99];
    for (int r = 0; r < rounds; r++) {
        double secs = 0;
        uint64_t gc0 = s_commits(c);
        double cpu0 = s_cpu(bpid);
        uint64_t ok =
            s_pipeline(cs, np, s_make_span, &sp_arg, UINT64_MAX, &secs);
        double bcpu = s_cpu(bpid) - cpu0;
        uint64_t gcs = s_commits(c) - gc0;
        b_rate[r] = (double) ok / secs;
        b_eff[r] = bcpu > 0 ? (double) ok / bcpu : 0.0;
        printf("  round %d broker span ingest (SpanPut, acknowledged after "
               "fsync): %8.0f spans/s  (%.1f MB/s, %" PRIu64 " in %.2f s, "
               "%.0f per group commit; broker cpu %.2f s = %.0f spans per "
               "cpu-second)\n",
               r + 1, b_rate[r], b_rate[r] * (double) plen / 1e6, ok, secs,
               gcs ? (double) ok / (double) gcs : 0.0, bcpu, b_eff[r]);
        if (!have_redis)
            continue;
        double rcpu = 0;
        uint64_t rn = 0;
        r_rate[r] = s_redis_round(&rd, &rcpu, &rn);
        r_eff[r] = rcpu > 0 ? (double) rn / rcpu : 0.0;
        ratio[r] = r_rate[r] > 0 ? b_rate[r] / r_rate[r] : 0.0;
        printf("  round %d redis XADD (appendonly yes, appendfsync %s, "
               "pipelined): %8.0f entries/s  (%.1f MB/s, %" PRIu64
               " in %.2f s; redis cpu %.2f s = %.0f entries per "
               "cpu-second)  ratio %.2f\n",
               r + 1, redis_fsync, r_rate[r], r_rate[r] * (double) plen / 1e6,
               rn, s_seconds, rcpu, r_eff[r], ratio[r]);
    }
    double span_rate = s_median(b_rate, (size_t) rounds);
    printf("  broker span ingest, median of %d rounds: %.0f spans/s, %.0f "
           "spans per cpu-second\n",
           rounds, span_rate, s_median(b_eff, (size_t) rounds));
    if (have_redis) {
        printf("  redis XADD, median of %d rounds: %.0f entries/s, %.0f "
               "entries per cpu-second\n",
               rounds, s_median(r_rate, (size_t) rounds),
               s_median(r_eff, (size_t) rounds));
        s_redis_stop(&rd);
    }

    /* 2. transitions: enqueue, claim, start, fail for N rollouts */
    const uint32_t nt = 4000;
    double t0 = s_now();
    s_trans_t tr = {0};
    tr.ids = lisa_calloc(nt + 1, sizeof *tr.ids);
    for (uint32_t k = 0; k < nt; k += 1000) {
        char **ids = s_enqueue(c, 1000, "trans");
        for (uint32_t j = 0; j < 1000; j++)
            tr.ids[k + j] = ids[j];
        lisa_free(&ids);
    }
    size_t claimed = 0;
    while (claimed < nt)
        claimed += s_claim(c, 1000, "trans");
    tr.n = nt;
    double saved = s_seconds, dummy;
    s_seconds = 1e9; /* run to the limit */
    tr.kind = 0;
    uint64_t t_ok = s_pipeline(cs, np, s_make_trans, &tr, nt, &dummy);
    tr.kind = 1;
    t_ok += s_pipeline(cs, np, s_make_trans, &tr, nt, &dummy);
    s_seconds = saved;
    double tsecs = s_now() - t0;
    uint64_t transitions = (uint64_t) nt * 2 + t_ok;
    printf("  broker rollout transitions (enqueue, claim, start, fail; each "
           "recorded): %10.0f transitions/s  (%" PRIu64 " in %.2f s)\n",
           (double) transitions / tsecs, transitions, tsecs);

    /* 3. latency */
    Lisa__Request hb = LISA__REQUEST__INIT;
    Lisa__HeartbeatReq hq = LISA__HEARTBEAT_REQ__INIT;
    hq.rollout_id = sp_arg.ids[0];
    hq.attempt = 1;
    hb.body_case = LISA__REQUEST__BODY_HEARTBEAT;
    hb.heartbeat = &hq;
    s_latency(c, "heartbeat (durable)", &hb, 1000);
    Lisa__Request st = LISA__REQUEST__INIT;
    Lisa__StatsReq sq = LISA__STATS_REQ__INIT;
    sq.run_id = S_TXT("trans");
    st.body_case = LISA__REQUEST__BODY_STATS;
    st.stats = &sq;
    s_latency(c, "stats (read)", &st, 1000);
    Lisa__Reply *sr = s_call(c, &st);
    printf("  broker group commits so far: %" PRIu64 "\n",
           sr->stats->stats->group_commits);
    lisa__reply__free_unpacked(sr, NULL);
    for (size_t k = 0; k < np; k++)
        zsock_destroy(&cs[k].sock);
    s_stop(bpid);

    if (have_redis)
        printf("  ratio broker durable spans/s : redis XADD/s (appendfsync "
               "%s) = %.2f (median of the %d paired rounds)\n",
               redis_fsync, s_median(ratio, (size_t) rounds), rounds);
    lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load) == 1)
            printf("  load average at the end: %.2f\n", load);
        fclose(lf);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench: could not remove %s\n", dir);
    for (size_t i = 0; i < holders; i++)
        lisa_free(&sp_arg.ids[i]);
    lisa_free(&sp_arg.ids);
    lisa_free(&sp_arg.seq);
    lisa_free(&sp_arg.buf);
    lisa_free(&sp_arg.span);
    lisa_free(&s_bulk);
    for (uint32_t i = 0; i < nt; i++)
        lisa_free(&tr.ids[i]);
    lisa_free(&tr.ids);
    lisa_free(&payload);
    return 0;
}
