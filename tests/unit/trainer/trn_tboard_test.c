/*
 * trn_tboard tests: the events file is read back frame by frame (length,
 * masked CRC of the length, payload, masked CRC of the payload) and each
 * payload decoded with protobuf-c: first the file version, then one event
 * per write with its step and scalars. The CRC-32C is checked against the
 * published check value and the iSCSI test vectors (RFC 3720, B.4).
 * The first test is the usage example.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include "lisa/lisa_mem.h"
#include "tensorboard.pb-c.h"
#include "trn_tboard.h"

#include <criterion/criterion.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t
s_le(const unsigned char *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* Reads the frames of path; returns the decoded events (count in *n). */
static Lisa__Tboard__Event **
s_read(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    Lisa__Tboard__Event **ev = calloc(64, sizeof *ev);
    *n = 0;
    unsigned char h[12];
    while (fread(h, 1, 12, f) == 12) {
        uint64_t len = s_le(h, 8);
        cr_assert_eq(s_le(h + 8, 4), trn_tboard_mask(trn_tboard_crc32c(h, 8)));
        cr_assert_lt(len, 1u << 20);
        unsigned char *d = malloc(len + 4);
        cr_assert_eq(fread(d, 1, len + 4, f), len + 4);
        cr_assert_eq(s_le(d + len, 4),
                     trn_tboard_mask(trn_tboard_crc32c(d, len)));
        cr_assert_lt(*n, 64);
        ev[*n] = lisa__tboard__event__unpack(NULL, len, d);
        cr_assert(ev[*n]);
        (*n)++;
        free(d);
    }
    fclose(f);
    return ev;
}

static void
s_free(Lisa__Tboard__Event **ev, size_t n)
{
    for (size_t i = 0; i < n; i++)
        lisa__tboard__event__free_unpacked(ev[i], NULL);
    free(ev);
}

static char s_dir[64];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/trn_tboard_test.XXXXXX");
    cr_assert(mkdtemp(s_dir));
}

static int
s_rm(const char *p, const struct stat *st, int fl, struct FTW *ftw)
{
    (void) st;
    (void) fl;
    (void) ftw;
    return remove(p);
}

static void
s_teardown(void)
{
    nftw(s_dir, s_rm, 8, FTW_DEPTH | FTW_PHYS);
}

Test(trn_tboard, usage, .init = s_setup, .fini = s_teardown)
{
    char dir[128], err[256];
    snprintf(dir, sizeof dir, "%s/a/tensorboard", s_dir); /* parents made */
    trn_tboard_t *tb = trn_tboard_new(dir, err, sizeof err);
    cr_assert(tb, "%s", err);
    const char *path = trn_tboard_path(tb);
    cr_assert(strncmp(path, dir, strlen(dir)) == 0);
    cr_assert(strstr(path, "/events.out.tfevents."), "%s", path);
    cr_assert_eq(trn_tboard_add(tb, "reward/mean", 0.5), LISA_OK);
    cr_assert_eq(trn_tboard_add(tb, "actor/entropy", 0.032488462960191547),
                 LISA_OK);
    cr_assert_eq(trn_tboard_add(tb, "rollouts/failed", 0), LISA_OK);
    cr_assert_eq(trn_tboard_write(tb, 7), LISA_OK);
    cr_assert_eq(trn_tboard_write(tb, 8), LISA_OK); /* nothing queued */
    cr_assert_eq(trn_tboard_add(tb, "reward/mean", 0.75), LISA_OK);
    cr_assert_eq(trn_tboard_write(tb, 9), LISA_OK);
    /* flushed: readable while the writer is open */
    size_t n = 0;
    Lisa__Tboard__Event **ev = s_read(path, &n);
    cr_assert_eq(n, 3);
    cr_assert_eq(ev[0]->what_case, LISA__TBOARD__EVENT__WHAT_FILE_VERSION);
    cr_assert_str_eq(ev[0]->file_version, "brain.Event:2");
    cr_assert_gt(ev[0]->wall_time, 1.6e9);
    cr_assert_eq(ev[1]->what_case, LISA__TBOARD__EVENT__WHAT_SUMMARY);
    cr_assert_eq(ev[1]->step, 7);
    cr_assert_geq(ev[1]->wall_time, ev[0]->wall_time);
    const Lisa__Tboard__Summary *s = ev[1]->summary;
    cr_assert_eq(s->n_value, 3);
    cr_assert_str_eq(s->value[0]->tag, "reward/mean");
    cr_assert_eq(s->value[0]->simple_value, 0.5f);
    cr_assert_str_eq(s->value[1]->tag, "actor/entropy");
    cr_assert_eq(s->value[1]->simple_value, (float) 0.032488462960191547);
    /* a zero is present (the oneof is set), not left out */
    cr_assert_eq(s->value[2]->value_case,
                 LISA__TBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
    cr_assert_eq(s->value[2]->simple_value, 0.0f);
    cr_assert_eq(ev[2]->step, 9);
    cr_assert_eq(ev[2]->summary->n_value, 1);
    cr_assert_eq(ev[2]->summary->value[0]->simple_value, 0.75f);
    s_free(ev, n);
    trn_tboard_destroy(&tb);
    cr_assert_null(tb);
    trn_tboard_destroy(&tb);
}

Test(trn_tboard, crc32c_known_vectors)
{
    cr_assert_eq(trn_tboard_crc32c("", 0), 0u);
    cr_assert_eq(trn_tboard_crc32c("123456789", 9), 0xe3069283u);
    unsigned char b[32];
    memset(b, 0, sizeof b);
    cr_assert_eq(trn_tboard_crc32c(b, 32), 0x8a9136aau);
    memset(b, 0xff, sizeof b);
    cr_assert_eq(trn_tboard_crc32c(b, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char) i;
    cr_assert_eq(trn_tboard_crc32c(b, 32), 0x46dd794eu);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char) (31 - i);
    cr_assert_eq(trn_tboard_crc32c(b, 32), 0x113fdb5cu);
    /* the mask: rotate right by 15, add the constant */
    cr_assert_eq(trn_tboard_mask(0), 0xa282ead8u);
    cr_assert_eq(trn_tboard_mask(0x00008000u), 0xa282ead9u);
    cr_assert_eq(trn_tboard_mask(0x00000001u), 0xa282ead8u + 0x20000u);
}

Test(trn_tboard, bad_values_are_refused, .init = s_setup, .fini = s_teardown)
{
    char err[256];
    trn_tboard_t *tb = trn_tboard_new(s_dir, err, sizeof err);
    cr_assert(tb, "%s", err);
    cr_assert_eq(trn_tboard_add(tb, "", 1), LISA_INVALID);
    cr_assert_eq(trn_tboard_add(tb, NULL, 1), LISA_INVALID);
    cr_assert_eq(trn_tboard_add(tb, "x", NAN), LISA_INVALID);
    cr_assert_eq(trn_tboard_add(tb, "x", INFINITY), LISA_INVALID);
    char tag[TRN_TBOARD_MAX_TAG + 2];
    memset(tag, 'a', sizeof tag - 1);
    tag[sizeof tag - 1] = '\0';
    cr_assert_eq(trn_tboard_add(tb, tag, 1), LISA_INVALID);
    tag[TRN_TBOARD_MAX_TAG] = '\0';
    cr_assert_eq(trn_tboard_add(tb, tag, 1), LISA_OK);
    for (size_t i = 1; i < TRN_TBOARD_MAX_VALUES; i++)
        cr_assert_eq(trn_tboard_add(tb, "y", (double) i), LISA_OK);
    cr_assert_eq(trn_tboard_add(tb, "z", 1), LISA_TOOLARGE);
    cr_assert_eq(trn_tboard_write(tb, 1), LISA_OK);
    cr_assert_eq(trn_tboard_add(tb, "z", 1), LISA_OK); /* queue emptied */
    trn_tboard_destroy(&tb);
}

Test(trn_tboard, two_writers_in_one_folder_get_two_files, .init = s_setup,
     .fini = s_teardown)
{
    char err[256];
    trn_tboard_t *a = trn_tboard_new(s_dir, err, sizeof err);
    trn_tboard_t *b = trn_tboard_new(s_dir, err, sizeof err);
    cr_assert(a && b, "%s", err);
    cr_assert_str_neq(trn_tboard_path(a), trn_tboard_path(b));
    trn_tboard_destroy(&a);
    trn_tboard_destroy(&b);
    /* a folder that cannot be made is an error, not a crash */
    char bad[128];
    snprintf(bad, sizeof bad, "%s/file", s_dir);
    FILE *f = fopen(bad, "w");
    cr_assert(f);
    fclose(f);
    char sub[160];
    snprintf(sub, sizeof sub, "%s/below", bad);
    cr_assert_null(trn_tboard_new(sub, err, sizeof err));
    cr_assert(strstr(err, "cannot create"), "%s", err);
}
