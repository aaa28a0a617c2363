/*
 * lisa_epset: an epoll set in a real zloop over real socketpairs and
 * pipes: readiness reaches on_event with the registered data, mod and del
 * change what is reported, one turn takes at most one bounded batch, and
 * destroy leaves the watched descriptors open. The first test is the usage
 * example.
 */
#include "lisa/lisa_epset.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_PAIRS 100 /* more than one batch */

typedef struct {
    int events;           /* on_event calls */
    int batches;          /* on_batch calls */
    int in_batch;         /* on_event calls since the last batch */
    int max_batch;        /* most on_event calls in one batch */
    void *last_ptr;       /* data.ptr of the last event */
    uint32_t last_events; /* its events */
    bool drain;           /* read what a readable socket holds */
    int want;             /* end the loop once events reaches this */
    int64_t until;        /* or at this zclock_mono time */
} s_seen_t;

static void
s_on_event(epoll_data_t data, uint32_t events, void *arg)
{
    s_seen_t *seen = arg;
    seen->events++;
    seen->in_batch++;
    seen->last_ptr = data.ptr;
    seen->last_events = events;
    if (seen->drain && (events & EPOLLIN)) {
        char buf[64];
        int *fd = data.ptr;
        while (read(*fd, buf, sizeof buf) > 0)
            ;
    }
}

static void
s_on_batch(void *arg)
{
    s_seen_t *seen = arg;
    seen->batches++;
    if (seen->in_batch > seen->max_batch)
        seen->max_batch = seen->in_batch;
    seen->in_batch = 0;
}

static int
s_tick(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_seen_t *seen = arg;
    bool enough = seen->want > 0 && seen->events >= seen->want;
    return enough || zclock_mono() >= seen->until ? -1 : 0;
}

/* Runs loop until seen->want events came (0: never), at most ms. */
static void
s_run(zloop_t *loop, s_seen_t *seen, int64_t ms)
{
    seen->until = zclock_mono() + ms;
    int tick = zloop_timer(loop, 5, 0, s_tick, seen);
    cr_assert_geq(tick, 0);
    zloop_start(loop);
    zloop_timer_end(loop, tick);
}

static void
s_nonblock(int fd)
{
    cr_assert_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
}

/* A loop, a set reporting into seen, and a pipe. */
typedef struct {
    zloop_t *loop;
    lisa_epset_t *set;
    s_seen_t seen;
    int p[2];
} s_fix_t;

static void
s_fix_open(s_fix_t *f, lisa_epset_batch_fn *on_batch)
{
    *f = (s_fix_t){.loop = zloop_new()};
    cr_assert_not_null(f->loop);
    f->set = lisa_epset_new(f->loop, s_on_event, on_batch, &f->seen);
    cr_assert_not_null(f->set);
    cr_assert_eq(pipe(f->p), 0);
}

static void
s_fix_close(s_fix_t *f)
{
    lisa_epset_destroy(&f->set);
    close(f->p[0]);
    close(f->p[1]);
    zloop_destroy(&f->loop);
}

/* The pipe's read end in the set, with a byte to read. */
static void
s_fix_readable(s_fix_t *f)
{
    epoll_data_t d = {.fd = f->p[0]};
    cr_assert_eq(lisa_epset_add(f->set, f->p[0], EPOLLIN, d), LISA_OK);
    cr_assert_eq(write(f->p[1], "x", 1), 1);
}

Test(lisa_epset, usage)
{
    zloop_t *loop = zloop_new();
    s_seen_t seen = {.drain = true, .want = 1};
    lisa_epset_t *set = lisa_epset_new(loop, s_on_event, s_on_batch, &seen);
    cr_assert_not_null(set);

    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    cr_assert_eq(
        lisa_epset_add(set, sv[0], EPOLLIN, (epoll_data_t){.ptr = &sv[0]}),
        LISA_OK);
    cr_assert_eq(write(sv[1], "ping", 4), 4);
    s_run(loop, &seen, 2000);

    cr_assert_eq(seen.events, 1);
    cr_assert_eq(seen.batches, 1);
    cr_assert_eq(seen.last_ptr, &sv[0]);
    cr_assert(seen.last_events & EPOLLIN);

    lisa_epset_del(set, sv[0]);
    lisa_epset_destroy(&set);
    cr_assert_null(set);
    close(sv[0]);
    close(sv[1]);
    zloop_destroy(&loop);
}

Test(lisa_epset, one_turn_takes_at_most_one_batch)
{
    zloop_t *loop = zloop_new();
    s_seen_t seen = {.drain = true, .want = S_PAIRS};
    lisa_epset_t *set = lisa_epset_new(loop, s_on_event, s_on_batch, &seen);
    cr_assert_not_null(set);
    int sv[S_PAIRS][2];
    for (int i = 0; i < S_PAIRS; i++) {
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]), 0);
        s_nonblock(sv[i][0]);
        cr_assert_eq(lisa_epset_add(set, sv[i][0], EPOLLIN,
                                    (epoll_data_t){.ptr = &sv[i][0]}),
                     LISA_OK);
        cr_assert_eq(write(sv[i][1], "x", 1), 1);
    }
    s_run(loop, &seen, 5000);

    /* each socket once (drained on its event), in more than one batch of
     * at most LISA_EPSET_BATCH */
    cr_assert_eq(seen.events, S_PAIRS);
    cr_assert_eq(seen.max_batch, LISA_EPSET_BATCH);
    cr_assert_geq(seen.batches, 2);
    lisa_epset_destroy(&set);
    for (int i = 0; i < S_PAIRS; i++) {
        close(sv[i][0]);
        close(sv[i][1]);
    }
    zloop_destroy(&loop);
}

Test(lisa_epset, mod_changes_the_events_and_the_data)
{
    s_fix_t f;
    s_fix_open(&f, NULL);
    f.seen.want = 1;
    int tag_a = 0, tag_b = 0;
    /* an empty pipe's write end is writable, never readable */
    cr_assert_eq(
        lisa_epset_add(f.set, f.p[1], EPOLLIN, (epoll_data_t){.ptr = &tag_a}),
        LISA_OK);
    s_run(f.loop, &f.seen, 100);
    cr_assert_eq(f.seen.events, 0);

    cr_assert_eq(
        lisa_epset_mod(f.set, f.p[1], EPOLLOUT, (epoll_data_t){.ptr = &tag_b}),
        LISA_OK);
    s_run(f.loop, &f.seen, 2000);
    cr_assert_geq(f.seen.events, 1);
    cr_assert_eq(f.seen.last_ptr, &tag_b);
    cr_assert(f.seen.last_events & EPOLLOUT);
    s_fix_close(&f);
}

Test(lisa_epset, a_deleted_descriptor_is_not_reported)
{
    s_fix_t f;
    s_fix_open(&f, s_on_batch);
    s_fix_readable(&f);
    lisa_epset_del(f.set, f.p[0]);
    s_run(f.loop, &f.seen, 100);
    cr_assert_eq(f.seen.events, 0);
    cr_assert_eq(f.seen.batches, 0);
    /* deleting again, or from no set, is harmless */
    lisa_epset_del(f.set, f.p[0]);
    lisa_epset_del(NULL, f.p[0]);
    s_fix_close(&f);
}

Test(lisa_epset, ctl_errors_keep_errno)
{
    s_fix_t f;
    s_fix_open(&f, NULL);
    epoll_data_t d = {.fd = f.p[0]};

    errno = 0;
    cr_assert_eq(lisa_epset_mod(f.set, f.p[0], EPOLLIN, d), LISA_ERR);
    cr_assert_eq(errno, ENOENT);
    cr_assert_eq(lisa_epset_add(f.set, f.p[0], EPOLLIN, d), LISA_OK);
    errno = 0;
    cr_assert_eq(lisa_epset_add(f.set, f.p[0], EPOLLIN, d), LISA_ERR);
    cr_assert_eq(errno, EEXIST);
    cr_assert_eq(lisa_epset_add(f.set, -1, EPOLLIN, d), LISA_INVALID);
    cr_assert_eq(lisa_epset_add(NULL, f.p[0], EPOLLIN, d), LISA_INVALID);
    cr_assert_eq(lisa_epset_mod(NULL, f.p[0], EPOLLIN, d), LISA_INVALID);
    s_fix_close(&f);
}

Test(lisa_epset, destroy_ends_the_poller_and_leaves_descriptors_open)
{
    s_fix_t f;
    s_fix_open(&f, s_on_batch);
    s_fix_readable(&f);
    lisa_epset_destroy(&f.set);
    cr_assert_null(f.set);
    lisa_epset_destroy(&f.set); /* twice: a no-op */
    lisa_epset_destroy(NULL);

    /* the loop no longer polls the set (a stale poller would read freed
     * memory or report the event) */
    s_run(f.loop, &f.seen, 100);
    cr_assert_eq(f.seen.events, 0);
    cr_assert_neq(fcntl(f.p[0], F_GETFD), -1);
    char c = 0;
    cr_assert_eq(read(f.p[0], &c, 1), 1);
    cr_assert_eq(c, 'x');
    s_fix_close(&f);
}

Test(lisa_epset, new_refuses_missing_arguments)
{
    zloop_t *loop = zloop_new();
    cr_assert_null(lisa_epset_new(NULL, s_on_event, NULL, NULL));
    cr_assert_null(lisa_epset_new(loop, NULL, s_on_batch, NULL));
    zloop_destroy(&loop);
}

/* Two "connections" of two pipes each: an event of one drains both its
 * pipes (as a close would end them) and skips the connection's other
 * event already in the batch. */
typedef struct {
    int fd[2]; /* read ends */
    int events;
} s_conn_t;

typedef struct {
    lisa_epset_t *set;
    int events;
} s_skip_seen_t;

static bool
s_same(epoll_data_t d, const void *key)
{
    return d.ptr == key;
}

static void
s_on_conn_event(epoll_data_t data, uint32_t events, void *arg)
{
    (void) events;
    s_skip_seen_t *seen = arg;
    s_conn_t *c = data.ptr;
    seen->events++;
    c->events++;
    char buf[8];
    for (int i = 0; i < 2; i++)
        while (read(c->fd[i], buf, sizeof buf) > 0)
            ;
    lisa_epset_skip(seen->set, s_same, c);
}

Test(lisa_epset, skip_drops_later_events_of_the_batch)
{
    zloop_t *loop = zloop_new();
    s_skip_seen_t seen = {0};
    seen.set = lisa_epset_new(loop, s_on_conn_event, NULL, &seen);
    cr_assert_not_null(seen.set);
    s_conn_t conn[2];
    int w[4];
    for (int k = 0; k < 2; k++) {
        conn[k].events = 0;
        for (int i = 0; i < 2; i++) {
            int p[2];
            cr_assert_eq(pipe(p), 0);
            s_nonblock(p[0]);
            conn[k].fd[i] = p[0];
            w[2 * k + i] = p[1];
            cr_assert_eq(write(p[1], "x", 1), 1);
            epoll_data_t d = {.ptr = &conn[k]};
            cr_assert_eq(lisa_epset_add(seen.set, p[0], EPOLLIN, d), LISA_OK);
        }
    }
    /* outside a batch it does nothing */
    lisa_epset_skip(seen.set, s_same, &conn[0]);
    lisa_epset_skip(NULL, s_same, &conn[0]);
    s_seen_t clock = {.want = 0};
    clock.until = 0;
    int tick = zloop_timer(loop, 100, 1, s_tick, &clock);
    cr_assert_geq(tick, 0);
    zloop_start(loop);
    /* all four were ready in one batch; one event a connection came */
    cr_assert_eq(seen.events, 2);
    cr_assert_eq(conn[0].events, 1);
    cr_assert_eq(conn[1].events, 1);
    lisa_epset_destroy(&seen.set);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 2; i++)
            close(conn[k].fd[i]);
    for (int i = 0; i < 4; i++)
        close(w[i]);
    zloop_destroy(&loop);
}
