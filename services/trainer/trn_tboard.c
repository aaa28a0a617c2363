/*
 * trn_tboard: TensorBoard event files (see trn_tboard.h).
 *
 * Scalars are queued as (tag, value) pairs and packed into one Event per
 * write: TensorBoard reads any number of values from one Summary, and one
 * frame per step keeps the file small (a step of ~60 metrics is ~2 KB).
 * The CRC is the bitwise form: a few KB a step does not need a table.
 */
#include "trn_tboard.h"

#include "lisa/lisa_mem.h"
#include "tensorboard.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

struct trn_tboard {
    FILE *f;
    char *path;
    char **tags;
    float *vals;
    size_t n;
};

uint32_t
trn_tboard_crc32c(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= b[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    }
    return ~c;
}

uint32_t
trn_tboard_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static double
s_wall(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double) tv.tv_sec + (double) tv.tv_usec * 1e-6;
}

static void
s_le(unsigned char *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char) (v >> (8 * i));
}

/* One TFRecord frame around the packed event. */
static lisa_rc_t
s_frame(trn_tboard_t *tb, const Lisa__Tboard__Event *ev)
{
    size_t n = lisa__tboard__event__get_packed_size(ev);
    unsigned char *buf = lisa_malloc(n + 16);
    s_le(buf, n, 8);
    s_le(buf + 8, trn_tboard_mask(trn_tboard_crc32c(buf, 8)), 4);
    lisa__tboard__event__pack(ev, buf + 12);
    s_le(buf + 12 + n, trn_tboard_mask(trn_tboard_crc32c(buf + 12, n)), 4);
    int ok = fwrite(buf, 1, n + 16, tb->f) == n + 16 && fflush(tb->f) == 0;
    lisa_free(&buf);
    return ok ? LISA_OK : LISA_ERR;
}

/* mkdir -p */
static int
s_mkdirs(const char *dir)
{
    char p[4096];
    int len = snprintf(p, sizeof p, "%s", dir);
    if (len <= 0 || (size_t) len >= sizeof p)
        return -1;
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* The host name with anything but [A-Za-z0-9._-] replaced. */
static void
s_host(char *h, size_t hl)
{
    if (gethostname(h, hl) != 0)
        snprintf(h, hl, "localhost");
    h[hl - 1] = '\0';
    for (char *s = h; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '.' || *s == '-' || *s == '_'))
            *s = '_';
}

/* Opens a file of that name that did not exist before. */
static FILE *
s_create(const char *dir, char *path, size_t pl)
{
    char host[128];
    s_host(host, sizeof host);
    long long t = (long long) s_wall();
    for (int k = 0; k < 100; k++) {
        int len =
            k ? snprintf(path, pl, "%s/events.out.tfevents.%lld.%s.%ld.%d", dir,
                         t, host, (long) getpid(), k)
              : snprintf(path, pl, "%s/events.out.tfevents.%lld.%s.%ld", dir, t,
                         host, (long) getpid());
        if (len < 0 || (size_t) len >= pl)
            return NULL;
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            FILE *f = fdopen(fd, "wb");
            if (!f)
                close(fd);
            return f;
        }
        if (errno != EEXIST)
            return NULL;
    }
    return NULL;
}

trn_tboard_t *
trn_tboard_new(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    if (!dir || !*dir || s_mkdirs(dir) != 0) {
        snprintf(err, errlen, "cannot create the folder %s: %s",
                 dir ? dir : "(none)", strerror(errno));
        return NULL;
    }
    FILE *f = s_create(dir, path, sizeof path);
    if (!f) {
        snprintf(err, errlen, "cannot create an events file in %s: %s", dir,
                 strerror(errno));
        return NULL;
    }
    trn_tboard_t *tb = lisa_calloc(1, sizeof *tb);
    tb->f = f;
    tb->path = lisa_strdup(path);
    tb->tags = lisa_calloc(TRN_TBOARD_MAX_VALUES, sizeof *tb->tags);
    tb->vals = lisa_calloc(TRN_TBOARD_MAX_VALUES, sizeof *tb->vals);
    Lisa__Tboard__Event ev = LISA__TBOARD__EVENT__INIT;
    static char version[] = "brain.Event:2";
    ev.wall_time = s_wall();
    ev.what_case = LISA__TBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = version;
    if (s_frame(tb, &ev) != LISA_OK) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        trn_tboard_destroy(&tb);
    }
    return tb;
}

static void
s_clear(trn_tboard_t *tb)
{
    for (size_t i = 0; i < tb->n; i++)
        lisa_free(&tb->tags[i]);
    tb->n = 0;
}

void
trn_tboard_destroy(trn_tboard_t **tb)
{
    if (!tb || !*tb)
        return;
    trn_tboard_t *t = *tb;
    s_clear(t);
    if (t->f)
        fclose(t->f);
    lisa_free(&t->tags);
    lisa_free(&t->vals);
    lisa_free(&t->path);
    lisa_free(tb);
}

const char *
trn_tboard_path(const trn_tboard_t *tb)
{
    return tb->path;
}

lisa_rc_t
trn_tboard_add(trn_tboard_t *tb, const char *tag, double v)
{
    size_t len = tag ? strnlen(tag, TRN_TBOARD_MAX_TAG + 1) : 0;
    if (len == 0 || len > TRN_TBOARD_MAX_TAG || !isfinite(v))
        return LISA_INVALID;
    if (tb->n == TRN_TBOARD_MAX_VALUES)
        return LISA_TOOLARGE;
    tb->tags[tb->n] = lisa_strdup(tag);
    tb->vals[tb->n++] = (float) v;
    return LISA_OK;
}

lisa_rc_t
trn_tboard_write(trn_tboard_t *tb, int64_t step)
{
    if (tb->n == 0)
        return LISA_OK;
    Lisa__Tboard__Summary__Value *v = lisa_calloc(tb->n, sizeof *v);
    Lisa__Tboard__Summary__Value **vp = lisa_calloc(tb->n, sizeof *vp);
    for (size_t i = 0; i < tb->n; i++) {
        lisa__tboard__summary__value__init(&v[i]);
        v[i].tag = tb->tags[i];
        v[i].value_case = LISA__TBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        v[i].simple_value = tb->vals[i];
        vp[i] = &v[i];
    }
    Lisa__Tboard__Summary sum = LISA__TBOARD__SUMMARY__INIT;
    sum.value = vp;
    sum.n_value = tb->n;
    Lisa__Tboard__Event ev = LISA__TBOARD__EVENT__INIT;
    ev.wall_time = s_wall();
    ev.step = step;
    ev.what_case = LISA__TBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    lisa_rc_t rc = s_frame(tb, &ev);
    lisa_free(&v);
    lisa_free(&vp);
    s_clear(tb);
    return rc;
}
