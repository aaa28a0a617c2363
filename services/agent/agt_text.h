/*
 * agt_text: bounded strings and the observation-shaping rules of the agent.
 *
 * Everything a tool shows the model passes through here: a command's
 * output is cut to its first and last lines (the recipe keeps 40 + 40 when
 * there are more than 80) and then to a byte cap, which the recipe lacks
 * (one huge line used to flood the context); file views are numbered like
 * `cat -n` and clipped at a character count with a note that tells the
 * model how to look further. agt_sb_t is a growable string with a hard
 * maximum, so no input can make it grow without bound.
 */
#ifndef AGT_TEXT_H
#define AGT_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* A growable NUL-terminated string with a hard maximum (value type). */
typedef struct {
    char *data;     /* NUL-terminated; NULL until the first append */
    size_t len;     /* bytes used, without the NUL */
    size_t cap;     /* bytes allocated */
    size_t max;     /* appends beyond this many bytes are dropped */
    bool truncated; /* some append was cut by `max` */
} agt_sb_t;

/* Starts an empty builder that holds at most `max` bytes. */
void agt_sb_init(agt_sb_t *sb, size_t max);
/* Appends n bytes (cut at the maximum, setting `truncated`). */
void agt_sb_add(agt_sb_t *sb, const char *s, size_t n);
/* Appends a NUL-terminated string. */
void agt_sb_puts(agt_sb_t *sb, const char *s);
/* Appends formatted text (cut at the maximum). */
void agt_sb_printf(agt_sb_t *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Returns the string (never NULL; "" when empty) and resets the builder;
 * the caller frees it. */
char *agt_sb_take(agt_sb_t *sb);
/* Frees the contents; safe twice. */
void agt_sb_free(agt_sb_t *sb);

/* Number of lines in s[0..len) (a last line without '\n' counts). */
size_t agt_text_count_lines(const char *s, size_t len);

/* When s has more than head + tail lines, returns its first `head` and last
 * `tail` lines around a divider line; otherwise a copy. Caller frees. */
char *agt_text_cut_lines(const char *s, size_t len, unsigned head,
                         unsigned tail);

/* When s is longer than max bytes, returns its first and last max/2 bytes
 * (cut on UTF-8 character boundaries) around a divider that names the
 * number of bytes left out; otherwise a copy. Caller frees. */
char *agt_text_cap_bytes(const char *s, size_t len, size_t max);

/* Numbers lines `cat -n` style ("%6ld\t<line>\n"), the first one `first`.
 * Output holds at most `max` bytes. Caller frees. */
char *agt_text_number(const char *s, size_t len, long first, size_t max);

/* When s is longer than max characters (bytes), returns its first max
 * bytes followed by the clipping note; otherwise a copy. Caller frees. */
char *agt_text_clip(const char *s, size_t max);

/* Copy of s[0..len) that is valid UTF-8 with no NUL bytes: every invalid
 * sequence and every NUL becomes '?'. JSON strings need this. */
char *agt_text_utf8_clean(const char *s, size_t len);

/* The note appended by agt_text_clip. */
extern const char *const AGT_TEXT_CLIP_NOTE;

#endif
