/*
 * ctl_logcap: one thread, one epoll set of non-blocking pipes, a mutex
 * over the stream table. Streams are named in the epoll set by a number,
 * never by pointer, so a stream the loop's thread closes while an event
 * for it is pending is simply not found. The tail ring is allocated only
 * once a stream outgrows its head.
 */
#include "ctl_logcap.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define S_MIN_CAP    4096u
#define S_MAX_TAIL   (64u * 1024u)
#define S_READ_BUF   (64u * 1024u)
#define S_FAIR_READS 16 /* reads per wake-up before other pipes get a turn */

typedef struct {
    uint64_t id;
    char *name;
    int rfd, logfd;
    uint64_t written; /* head bytes in the file */
    char *ring;       /* last bytes past the head */
    size_t ring_len, ring_pos;
    uint64_t total;
} s_stream_t;

struct ctl_logcap {
    uint64_t head_max;
    size_t tail_max;
    int epfd, stopfd;
    pthread_t thread;
    pthread_mutex_t mu;
    s_stream_t **streams;
    size_t n, cap;
    uint64_t next_id;
    char buf[S_READ_BUF]; /* used under mu */
};

static void
s_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t) w;
    }
}

static void
s_feed(ctl_logcap_t *c, s_stream_t *s, const char *p, size_t n)
{
    s->total += n;
    if (s->written < c->head_max) {
        uint64_t room = c->head_max - s->written;
        size_t take = n < room ? n : (size_t) room;
        s_write_all(s->logfd, p, take);
        s->written += take;
        p += take;
        n -= take;
    }
    if (n == 0)
        return;
    if (!s->ring)
        s->ring = lisa_malloc(c->tail_max);
    for (size_t i = 0; i < n; i++) {
        s->ring[s->ring_pos] = p[i];
        s->ring_pos = (s->ring_pos + 1) % c->tail_max;
        if (s->ring_len < c->tail_max)
            s->ring_len++;
    }
}

/* Reads what is there, at most max_reads times; true at end of input. */
static bool
s_drain(ctl_logcap_t *c, s_stream_t *s, int max_reads)
{
    for (int i = 0; i < max_reads; i++) {
        ssize_t r = read(s->rfd, c->buf, sizeof c->buf);
        if (r > 0) {
            s_feed(c, s, c->buf, (size_t) r);
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        return !(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
    return false;
}

/* Writes the note and the tail, closes, frees; the slot is reused. */
static void
s_close(ctl_logcap_t *c, size_t idx)
{
    s_stream_t *s = c->streams[idx];
    uint64_t dropped = s->total - s->written - s->ring_len;
    if (dropped) {
        char note[192];
        int m = snprintf(note, sizeof note,
                         "\n[lisa-controller: %" PRIu64
                         " bytes of this sandbox's output dropped: the host "
                         "keeps %" PRIu64 " bytes and the last %zu]\n",
                         dropped, s->written, s->ring_len);
        if (m > 0)
            s_write_all(s->logfd, note, (size_t) m);
        lisa_log_warn("local: %s printed %" PRIu64 " bytes; %" PRIu64
                      " dropped (controller.log_bytes)",
                      s->name, s->total, dropped);
    }
    if (s->ring_len) {
        size_t start = (s->ring_pos + c->tail_max - s->ring_len) % c->tail_max;
        size_t first = c->tail_max - start;
        if (first > s->ring_len)
            first = s->ring_len;
        s_write_all(s->logfd, s->ring + start, first);
        s_write_all(s->logfd, s->ring, s->ring_len - first);
    }
    /* Out of the epoll set before the close: a sandbox being started
     * holds a copy of every descriptor from its clone until its exec, and
     * a registration lives as long as any copy of the pipe does, so a
     * closed stream's hang-up would wake this thread over and over (its
     * id no longer found, nothing read) until that exec. */
    (void) epoll_ctl(c->epfd, EPOLL_CTL_DEL, s->rfd, NULL);
    close(s->rfd);
    close(s->logfd);
    lisa_free(&s->ring);
    lisa_free(&s->name);
    lisa_free(&c->streams[idx]);
    c->streams[idx] = c->streams[--c->n];
}

static ssize_t
s_find_id(const ctl_logcap_t *c, uint64_t id)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->streams[i]->id == id)
            return (ssize_t) i;
    return -1;
}

static ssize_t
s_find_name(const ctl_logcap_t *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->streams[i]->name, name) == 0)
            return (ssize_t) i;
    return -1;
}

static void *
s_thread(void *arg)
{
    ctl_logcap_t *c = arg;
    struct epoll_event ev[32];
    for (;;) {
        int n = epoll_wait(c->epfd, ev, 32, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            lisa_log_error("local: log pump: epoll_wait: %s", strerror(errno));
            return NULL;
        }
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u64 == 0) {
                pthread_mutex_unlock(&c->mu);
                return NULL;
            }
            ssize_t k = s_find_id(c, ev[i].data.u64);
            if (k >= 0 && s_drain(c, c->streams[k], S_FAIR_READS))
                s_close(c, (size_t) k);
        }
        pthread_mutex_unlock(&c->mu);
    }
}

ctl_logcap_t *
ctl_logcap_new(uint64_t cap_bytes)
{
    if (cap_bytes < S_MIN_CAP)
        cap_bytes = S_MIN_CAP;
    ctl_logcap_t *c = lisa_calloc(1, sizeof *c);
    c->tail_max =
        (size_t) (cap_bytes / 4 < S_MAX_TAIL ? cap_bytes / 4 : S_MAX_TAIL);
    c->head_max = cap_bytes - c->tail_max;
    c->next_id = 1;
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    c->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&c->mu, NULL);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (c->epfd < 0 || c->stopfd < 0 ||
        epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->stopfd, &ev) != 0 ||
        pthread_create(&c->thread, NULL, s_thread, c) != 0) {
        lisa_log_error("local: cannot start the log pump: %s", strerror(errno));
        if (c->epfd >= 0)
            close(c->epfd);
        if (c->stopfd >= 0)
            close(c->stopfd);
        pthread_mutex_destroy(&c->mu);
        lisa_free(&c);
        return NULL;
    }
    return c;
}

void
ctl_logcap_destroy(ctl_logcap_t **cp)
{
    if (!cp || !*cp)
        return;
    ctl_logcap_t *c = *cp;
    uint64_t one = 1;
    if (write(c->stopfd, &one, sizeof one) == (ssize_t) sizeof one)
        (void) pthread_join(c->thread, NULL);
    else
        (void) pthread_cancel(c->thread);
    while (c->n > 0) {
        (void) s_drain(c, c->streams[c->n - 1], S_FAIR_READS);
        s_close(c, c->n - 1);
    }
    lisa_free(&c->streams);
    close(c->epfd);
    close(c->stopfd);
    pthread_mutex_destroy(&c->mu);
    lisa_free(cp);
}

lisa_rc_t
ctl_logcap_add(ctl_logcap_t *c, const char *name, int rfd, int logfd)
{
    lisa_rc_t rc = LISA_ERR;
    pthread_mutex_lock(&c->mu);
    if (s_find_name(c, name) >= 0) {
        rc = LISA_CONFLICT;
        goto out;
    }
    int fl = fcntl(rfd, F_GETFL);
    if (fl < 0 || fcntl(rfd, F_SETFL, fl | O_NONBLOCK) != 0)
        goto out;
    s_stream_t *s = lisa_calloc(1, sizeof *s);
    s->id = ++c->next_id;
    s->name = lisa_strdup(name);
    s->rfd = rfd;
    s->logfd = logfd;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = s->id};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, rfd, &ev) != 0) {
        lisa_free(&s->name);
        lisa_free(&s);
        goto out;
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 16;
        c->streams = lisa_realloc(c->streams, c->cap * sizeof *c->streams);
    }
    c->streams[c->n++] = s;
    rc = LISA_OK;
out:
    pthread_mutex_unlock(&c->mu);
    if (rc != LISA_OK) {
        close(rfd);
        close(logfd);
    }
    return rc;
}

void
ctl_logcap_finish(ctl_logcap_t *c, const char *name, bool force)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    ssize_t k = s_find_name(c, name);
    if (k >= 0) {
        /* Bounded: a sandbox still writing cannot hold the loop here. */
        bool eof = s_drain(c, c->streams[k], force ? 64 : 256);
        if (eof || force)
            s_close(c, (size_t) k);
    }
    pthread_mutex_unlock(&c->mu);
}

uint64_t
ctl_logcap_dropped(ctl_logcap_t *c, const char *name)
{
    uint64_t d = 0;
    pthread_mutex_lock(&c->mu);
    ssize_t k = s_find_name(c, name);
    if (k >= 0) {
        const s_stream_t *s = c->streams[k];
        d = s->total - s->written - s->ring_len;
    }
    pthread_mutex_unlock(&c->mu);
    return d;
}
