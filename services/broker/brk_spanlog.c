/*
 * brk_spanlog: segmented append-only span log (see brk_spanlog.h).
 *
 * One writer thread (the broker loop) appends records to a buffer and
 * writes the kept ones to the file with one pwrite per flush (once per
 * group commit, before COMMIT); the syncer thread calls brk_spanlog_sync.
 * With deferred writes a flush only hands the buffer over (`pend`, by
 * swapping buffers when the last one was taken already) and the syncer
 * writes it before its fdatasync, so the writer's thread never copies
 * span bytes into the page cache. The mutex guards the current segment's
 * descriptor (swapped when a segment is sealed), `pend` and the `syncing`
 * flag: while a sync runs outside the mutex the descriptor stays open, and
 * the writer waits for it before it seals a segment or reads a record not
 * written yet. Reads use their own descriptor, cached for the last segment
 * read.
 */
#include "brk_spanlog.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_MAGIC 0x4c53504eu /* "LSPN" */
/* Buffered bytes past which a write flushes first (one flush per group
 * commit otherwise). */
#define S_WBUF_MAX (8u << 20)
/* Handed-over bytes past which the writer stops handing over and writes
 * them itself (a syncer that falls behind bounds the memory). */
#define S_PEND_MAX (64u << 20)

struct brk_spanlog_t {
    char *dir; /* <data_dir>/spans */
    uint64_t segment_max;
    bool durable;
    pthread_mutex_t mu; /* guards fd and segment against the syncer */
    int fd;             /* current segment, O_RDWR */
    uint32_t segment;
    uint64_t end; /* kept bytes, flushed or not */
    uint64_t truncated;
    /* records not yet written to the file: wbuf[0] is at file offset
     * wbase (== the flushed end); kept ones run to `end`, an unkept one
     * may follow */
    uint8_t *wbuf;
    size_t wcap;
    uint64_t wbase;
    int rd_fd; /* cached read descriptor */
    uint32_t rd_segment;
    /* deferred writes: flushed records the syncer has yet to write, at
     * file offset pend_base of the current segment; `spare` is the buffer
     * handed back by the last sync; on_file is the current segment's end
     * in the file */
    bool deferred;
    pthread_cond_t cv; /* signalled when a sync ends */
    bool syncing;
    bool broken; /* a deferred write failed: every later sync fails */
    uint8_t *pend, *spare;
    size_t pend_len, pend_cap, spare_cap;
    uint64_t pend_base;
    uint64_t on_file;
};

/* ---------------------------------------------------------------- */
/* CRC32C                                                           */

static uint32_t s_crc_table[8][256];
static pthread_once_t s_crc_once = PTHREAD_ONCE_INIT;
static bool s_crc_hw;

static void
s_crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        s_crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            s_crc_table[t][i] = (s_crc_table[t - 1][i] >> 8) ^
                                s_crc_table[0][s_crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    s_crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* Slice-by-8 table CRC, for CPUs without the instruction. */
static uint32_t
s_crc_sw(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t) p[0] | (uint32_t) p[1] << 8 |
                             (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24);
        uint32_t hi = (uint32_t) p[4] | (uint32_t) p[5] << 8 |
                      (uint32_t) p[6] << 16 | (uint32_t) p[7] << 24;
        crc = s_crc_table[7][lo & 0xff] ^ s_crc_table[6][(lo >> 8) & 0xff] ^
              s_crc_table[5][(lo >> 16) & 0xff] ^ s_crc_table[4][lo >> 24] ^
              s_crc_table[3][hi & 0xff] ^ s_crc_table[2][(hi >> 8) & 0xff] ^
              s_crc_table[1][(hi >> 16) & 0xff] ^ s_crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = s_crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The SSE4.2 crc32 instruction computes exactly CRC32C. */
__attribute__((target("sse4.2"))) static uint32_t
s_crc_hw_run(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t) c;
    while (n--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

uint32_t
brk_spanlog_crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&s_crc_once, s_crc_init);
    crc = ~crc;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (s_crc_hw)
        return ~s_crc_hw_run(crc, buf, len);
#endif
    return ~s_crc_sw(crc, buf, len);
}

/* ---------------------------------------------------------------- */
/* internals                                                        */

static void
s_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t) v;
    p[1] = (uint8_t) (v >> 8);
    p[2] = (uint8_t) (v >> 16);
    p[3] = (uint8_t) (v >> 24);
}

static uint32_t
s_get32(const uint8_t *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 |
           (uint32_t) p[3] << 24;
}

/* Checksum of a record: its length field, then its payload. */
static uint32_t
s_record_crc(const uint8_t *len4, const uint8_t *data, size_t len)
{
    return brk_spanlog_crc32c(brk_spanlog_crc32c(0, len4, 4), data, len);
}

static void
s_path(const brk_spanlog_t *self, uint32_t segment, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%08" PRIx32 ".log", self->dir, segment);
}

/* Parses "<8 hex>.log"; false for anything else. */
static bool
s_parse_name(const char *name, uint32_t *segment)
{
    if (strlen(name) != 12 || strcmp(name + 8, ".log") != 0)
        return false;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = name[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t) (c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t) (c - 'a' + 10);
        else
            return false;
        v = v << 4 | d;
    }
    *segment = v;
    return true;
}

static lisa_rc_t
s_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return LISA_ERR;
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? LISA_OK : LISA_ERR;
}

static lisa_rc_t
s_pread_all(int fd, uint8_t *buf, size_t n, uint64_t off)
{
    while (n) {
        ssize_t k = pread(fd, buf, n, (off_t) off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return LISA_ERR;
        buf += k;
        n -= (size_t) k;
        off += (uint64_t) k;
    }
    return LISA_OK;
}

static lisa_rc_t
s_pwrite_all(int fd, const uint8_t *buf, size_t n, uint64_t off)
{
    while (n) {
        ssize_t k = pwrite(fd, buf, n, (off_t) off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return LISA_ERR;
        buf += k;
        n -= (size_t) k;
        off += (uint64_t) k;
    }
    return LISA_OK;
}

/* Walks the records of fd from 0 and returns the end of the last whole
 * one. */
static uint64_t
s_scan(int fd, uint64_t size)
{
    uint64_t off = 0;
    uint8_t *buf = NULL;
    size_t cap = 0;
    while (off + BRK_SPANLOG_HEADER <= size) {
        uint8_t h[BRK_SPANLOG_HEADER];
        if (s_pread_all(fd, h, sizeof h, off) != LISA_OK ||
            s_get32(h) != S_MAGIC)
            break;
        uint32_t len = s_get32(h + 4);
        if (len > BRK_SPANLOG_MAX_RECORD ||
            off + BRK_SPANLOG_HEADER + len > size)
            break;
        if (len > cap) {
            lisa_free(&buf);
            cap = len;
            buf = lisa_malloc(cap);
        }
        if (s_pread_all(fd, buf, len, off + BRK_SPANLOG_HEADER) != LISA_OK ||
            s_record_crc(h + 4, buf, len) != s_get32(h + 8))
            break;
        off += BRK_SPANLOG_HEADER + len;
    }
    lisa_free(&buf);
    return off;
}

/* Opens (creating) segment n as the current one, at offset `end`. */
static lisa_rc_t
s_open_segment(brk_spanlog_t *self, uint32_t n, bool create)
{
    char path[4200];
    s_path(self, n, path, sizeof path);
    int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0640);
    if (fd < 0) {
        lisa_log_error("spanlog: cannot open '%s': %s", path, strerror(errno));
        return LISA_ERR;
    }
    if (create && self->durable && s_fsync_dir(self->dir) != LISA_OK) {
        lisa_log_error("spanlog: cannot sync '%s': %s", self->dir,
                       strerror(errno));
        close(fd);
        return LISA_ERR;
    }
    pthread_mutex_lock(&self->mu);
    while (self->syncing)
        pthread_cond_wait(&self->cv, &self->mu);
    int old = self->fd;
    self->fd = fd;
    self->segment = n;
    self->on_file = 0;
    pthread_mutex_unlock(&self->mu);
    if (old >= 0)
        close(old);
    return LISA_OK;
}

/* Writes the kept records of the writer's buffer to the file now. */
static lisa_rc_t
s_write_out(brk_spanlog_t *self)
{
    size_t n = (size_t) (self->end - self->wbase);
    if (!n)
        return LISA_OK;
    if (s_pwrite_all(self->fd, self->wbuf, n, self->wbase) != LISA_OK) {
        lisa_log_error("spanlog: write to segment %08" PRIx32 ": %s",
                       self->segment, strerror(errno));
        /* the records' rows are rolled back by the failed commit */
        self->end = self->wbase;
        return LISA_ERR;
    }
    self->wbase = self->end;
    pthread_mutex_lock(&self->mu);
    if (self->end > self->on_file)
        self->on_file = self->end;
    pthread_mutex_unlock(&self->mu);
    return LISA_OK;
}

/* Writer's side: waits for a running sync, then writes what was handed
 * over and not written yet. */
static lisa_rc_t
s_drain(brk_spanlog_t *self)
{
    lisa_rc_t rc = LISA_OK;
    pthread_mutex_lock(&self->mu);
    while (self->syncing)
        pthread_cond_wait(&self->cv, &self->mu);
    if (self->broken) {
        rc = LISA_ERR;
    } else if (self->pend_len) {
        if (s_pwrite_all(self->fd, self->pend, self->pend_len,
                         self->pend_base) != LISA_OK) {
            lisa_log_error("spanlog: write to segment %08" PRIx32 ": %s",
                           self->segment, strerror(errno));
            self->broken = true;
            rc = LISA_ERR;
        } else {
            self->on_file = self->pend_base + self->pend_len;
        }
        self->pend_len = 0;
    }
    pthread_mutex_unlock(&self->mu);
    return rc;
}

/* ---------------------------------------------------------------- */
/* API                                                              */

brk_spanlog_t *
brk_spanlog_open(const char *dir, uint64_t segment_max, bool durable)
{
    brk_spanlog_t *self = lisa_calloc(1, sizeof *self);
    size_t n = strlen(dir) + 8;
    self->dir = lisa_malloc(n);
    snprintf(self->dir, n, "%s/spans", dir);
    self->segment_max = segment_max ? segment_max : 1;
    self->durable = durable;
    self->fd = -1;
    self->rd_fd = -1;
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    if (mkdir(self->dir, 0750) != 0 && errno != EEXIST) {
        lisa_log_error("spanlog: cannot create '%s': %s", self->dir,
                       strerror(errno));
        goto fail;
    }
    DIR *d = opendir(self->dir);
    if (!d) {
        lisa_log_error("spanlog: cannot list '%s': %s", self->dir,
                       strerror(errno));
        goto fail;
    }
    uint32_t last = 0;
    bool any = false;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint32_t s;
        if (s_parse_name(e->d_name, &s) && (!any || s > last)) {
            last = s;
            any = true;
        }
    }
    closedir(d);
    if (s_open_segment(self, any ? last : 1, !any) != LISA_OK)
        goto fail;
    struct stat stt;
    if (fstat(self->fd, &stt) != 0)
        goto fail;
    uint64_t size = (uint64_t) stt.st_size;
    self->end = s_scan(self->fd, size);
    self->wbase = self->end;
    self->on_file = self->end;
    if (self->end < size) {
        self->truncated = size - self->end;
        lisa_log_warn("spanlog: segment %08" PRIx32 ": cut %" PRIu64
                      " bytes of torn or unfinished records at offset %" PRIu64,
                      self->segment, self->truncated, self->end);
        if (ftruncate(self->fd, (off_t) self->end) != 0 ||
            (durable && fdatasync(self->fd) != 0)) {
            lisa_log_error("spanlog: cannot truncate segment %08" PRIx32 ": %s",
                           self->segment, strerror(errno));
            goto fail;
        }
    }
    return self;
fail:
    brk_spanlog_close(&self);
    return NULL;
}

void
brk_spanlog_close(brk_spanlog_t **pself)
{
    if (!pself || !*pself)
        return;
    brk_spanlog_t *self = *pself;
    if (self->fd >= 0) {
        if (s_drain(self) != LISA_OK || s_write_out(self) != LISA_OK)
            lisa_log_warn("spanlog: kept records lost at close");
        close(self->fd);
    }
    lisa_free(&self->wbuf);
    lisa_free(&self->pend);
    lisa_free(&self->spare);
    pthread_cond_destroy(&self->cv);
    if (self->rd_fd >= 0)
        close(self->rd_fd);
    pthread_mutex_destroy(&self->mu);
    lisa_free(&self->dir);
    lisa_free(pself);
}

uint32_t
brk_spanlog_segment(const brk_spanlog_t *self)
{
    return self->segment;
}

uint64_t
brk_spanlog_end(const brk_spanlog_t *self)
{
    return self->end;
}

uint64_t
brk_spanlog_truncated(const brk_spanlog_t *self)
{
    return self->truncated;
}

void
brk_spanlog_defer(brk_spanlog_t *self, bool on)
{
    if (!on && s_drain(self) != LISA_OK)
        lisa_log_warn("spanlog: deferred records could not be written");
    self->deferred = on;
}

lisa_rc_t
brk_spanlog_flush(brk_spanlog_t *self)
{
    size_t n = (size_t) (self->end - self->wbase);
    if (!n)
        return LISA_OK;
    if (!self->deferred)
        return s_write_out(self);
    pthread_mutex_lock(&self->mu);
    bool full = self->pend_len + n > S_PEND_MAX;
    pthread_mutex_unlock(&self->mu);
    if (full && s_drain(self) != LISA_OK) {
        self->end = self->wbase;
        return LISA_ERR;
    }
    pthread_mutex_lock(&self->mu);
    if (!self->pend_len) {
        /* hand the buffer over whole; the unkept tail goes with it and is
         * ignored */
        uint8_t *b = self->pend;
        size_t cap = self->pend_cap;
        self->pend = self->wbuf;
        self->pend_cap = self->wcap;
        self->pend_base = self->wbase;
        self->wbuf = b;
        self->wcap = cap;
        if (!self->wbuf && self->spare) {
            self->wbuf = self->spare;
            self->wcap = self->spare_cap;
            self->spare = NULL;
            self->spare_cap = 0;
        }
    } else {
        if (self->pend_len + n > self->pend_cap) {
            size_t cap = self->pend_cap ? self->pend_cap : 1u << 20;
            while (cap < self->pend_len + n)
                cap *= 2;
            self->pend = lisa_realloc(self->pend, cap);
            self->pend_cap = cap;
        }
        memcpy(self->pend + self->pend_len, self->wbuf, n);
    }
    self->pend_len += n;
    pthread_mutex_unlock(&self->mu);
    self->wbase = self->end;
    return LISA_OK;
}

void
brk_spanlog_discard(brk_spanlog_t *self)
{
    self->end = self->wbase;
}

lisa_rc_t
brk_spanlog_write(brk_spanlog_t *self, const uint8_t *data, size_t len,
                  brk_spanlog_ref_t *ref)
{
    if (len > BRK_SPANLOG_MAX_RECORD) {
        lisa_log_error("spanlog: record of %zu bytes is over the bound", len);
        return LISA_TOOLARGE;
    }
    size_t rec = BRK_SPANLOG_HEADER + len;
    if (self->end > 0 && self->end + rec > self->segment_max) {
        /* seal: the old segment is made durable before any record of the
         * new one can be acknowledged */
        if (s_drain(self) != LISA_OK || s_write_out(self) != LISA_OK)
            return LISA_ERR;
        if (self->durable && fdatasync(self->fd) != 0) {
            lisa_log_error("spanlog: fdatasync of segment %08" PRIx32 ": %s",
                           self->segment, strerror(errno));
            return LISA_ERR;
        }
        if (ftruncate(self->fd, (off_t) self->end) != 0)
            lisa_log_warn("spanlog: cannot trim segment %08" PRIx32,
                          self->segment);
        if (s_open_segment(self, self->segment + 1, true) != LISA_OK)
            return LISA_ERR;
        self->end = 0;
        self->wbase = 0;
    }
    size_t at = (size_t) (self->end - self->wbase);
    if (at && at + rec > S_WBUF_MAX) {
        if (brk_spanlog_flush(self) != LISA_OK)
            return LISA_ERR;
        at = 0;
    }
    if (at + rec > self->wcap) {
        size_t cap = self->wcap ? self->wcap : 1u << 20;
        while (cap < at + rec)
            cap *= 2;
        self->wbuf = lisa_realloc(self->wbuf, cap);
        self->wcap = cap;
    }
    uint8_t *h = self->wbuf + at;
    s_put32(h, S_MAGIC);
    s_put32(h + 4, (uint32_t) len);
    if (len)
        memcpy(h + BRK_SPANLOG_HEADER, data, len);
    s_put32(h + 8, s_record_crc(h + 4, h + BRK_SPANLOG_HEADER, len));
    ref->segment = self->segment;
    ref->offset = self->end;
    ref->len = (uint32_t) len;
    return LISA_OK;
}

void
brk_spanlog_keep(brk_spanlog_t *self, const brk_spanlog_ref_t *ref)
{
    if (ref->segment == self->segment && ref->offset == self->end)
        self->end += BRK_SPANLOG_HEADER + ref->len;
}

lisa_rc_t
brk_spanlog_read(brk_spanlog_t *self, const brk_spanlog_ref_t *ref,
                 uint8_t *buf)
{
    if (ref->segment == self->segment && ref->offset >= self->wbase &&
        ref->offset + BRK_SPANLOG_HEADER + ref->len <= self->end) {
        /* kept but not flushed yet */
        const uint8_t *h = self->wbuf + (ref->offset - self->wbase);
        if (s_get32(h) != S_MAGIC || s_get32(h + 4) != ref->len ||
            s_record_crc(h + 4, h + BRK_SPANLOG_HEADER, ref->len) !=
                s_get32(h + 8)) {
            lisa_log_error("spanlog: buffered record at %08" PRIx32 ":%" PRIu64
                           " is damaged",
                           ref->segment, ref->offset);
            return LISA_ERR;
        }
        memcpy(buf, h + BRK_SPANLOG_HEADER, ref->len);
        return LISA_OK;
    }
    if (ref->segment == self->segment) {
        /* handed over but maybe not written yet */
        pthread_mutex_lock(&self->mu);
        bool written =
            ref->offset + BRK_SPANLOG_HEADER + ref->len <= self->on_file;
        pthread_mutex_unlock(&self->mu);
        if (!written && s_drain(self) != LISA_OK)
            return LISA_ERR;
    }
    if (self->rd_fd < 0 || self->rd_segment != ref->segment) {
        if (self->rd_fd >= 0)
            close(self->rd_fd);
        char path[4200];
        s_path(self, ref->segment, path, sizeof path);
        self->rd_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (self->rd_fd < 0) {
            lisa_log_error("spanlog: cannot open '%s': %s", path,
                           strerror(errno));
            return LISA_ERR;
        }
        self->rd_segment = ref->segment;
    }
    uint8_t h[BRK_SPANLOG_HEADER];
    if (s_pread_all(self->rd_fd, h, sizeof h, ref->offset) != LISA_OK ||
        s_pread_all(self->rd_fd, buf, ref->len,
                    ref->offset + BRK_SPANLOG_HEADER) != LISA_OK ||
        s_get32(h) != S_MAGIC || s_get32(h + 4) != ref->len ||
        s_record_crc(h + 4, buf, ref->len) != s_get32(h + 8)) {
        lisa_log_error("spanlog: record at %08" PRIx32 ":%" PRIu64
                       " is missing or damaged",
                       ref->segment, ref->offset);
        return LISA_ERR;
    }
    return LISA_OK;
}

lisa_rc_t
brk_spanlog_sync(brk_spanlog_t *self)
{
    /* one sync at a time; the descriptor stays open while it runs */
    pthread_mutex_lock(&self->mu);
    while (self->syncing)
        pthread_cond_wait(&self->cv, &self->mu);
    if (self->broken) {
        pthread_mutex_unlock(&self->mu);
        return LISA_ERR;
    }
    self->syncing = true;
    int fd = self->fd;
    uint8_t *out = self->pend;
    size_t out_len = self->pend_len, out_cap = self->pend_cap;
    uint64_t out_base = self->pend_base;
    if (out_len) {
        /* take the handed-over records; the writer goes on in the spare */
        self->pend = self->spare;
        self->pend_cap = self->spare_cap;
        self->spare = NULL;
        self->spare_cap = 0;
        self->pend_len = 0;
    }
    pthread_mutex_unlock(&self->mu);
    lisa_rc_t wrc =
        out_len ? s_pwrite_all(fd, out, out_len, out_base) : LISA_OK;
    int werr = errno;
    int rc = 0;
    if (wrc == LISA_OK)
        while ((rc = fdatasync(fd)) != 0 && errno == EINTR)
            ;
    int err = errno;
    pthread_mutex_lock(&self->mu);
    if (out_len) {
        if (!self->spare) {
            self->spare = out;
            self->spare_cap = out_cap;
        } else {
            lisa_free(&out);
        }
        if (wrc == LISA_OK && out_base + out_len > self->on_file)
            self->on_file = out_base + out_len;
    }
    if (wrc != LISA_OK)
        self->broken = true;
    self->syncing = false;
    pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
    if (wrc != LISA_OK) {
        lisa_log_error("spanlog: write to segment: %s", strerror(werr));
        return LISA_ERR;
    }
    if (rc != 0) {
        lisa_log_error("spanlog: fdatasync: %s", strerror(err));
        return LISA_ERR;
    }
    return LISA_OK;
}

size_t
brk_spanlog_drop(brk_spanlog_t *self, bool (*live)(uint32_t, void *), void *arg)
{
    DIR *d = opendir(self->dir);
    if (!d)
        return 0;
    size_t dropped = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint32_t s;
        if (!s_parse_name(e->d_name, &s) || s >= self->segment || live(s, arg))
            continue;
        if (self->rd_fd >= 0 && self->rd_segment == s) {
            close(self->rd_fd);
            self->rd_fd = -1;
        }
        char path[4200];
        s_path(self, s, path, sizeof path);
        if (unlink(path) == 0) {
            dropped++;
            lisa_log_info(
                "spanlog: deleted segment %08" PRIx32 " (no span left)", s);
        }
    }
    closedir(d);
    return dropped;
}
