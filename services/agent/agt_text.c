/*
 * agt_text: string builder and truncation. All cuts keep valid UTF-8 when
 * the input was valid UTF-8: byte cuts move back to a character start.
 */
#include "agt_text.h"

#include "lisa/lisa_mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *const AGT_TEXT_CLIP_NOTE =
    "<response clipped><NOTE>Only the first part of this output is shown to "
    "save context. Search the file with `grep -n` (execute_bash) to find "
    "the line numbers you need, then view that range with view_range."
    "</NOTE>";

void
agt_sb_init(agt_sb_t *sb, size_t max)
{
    memset(sb, 0, sizeof *sb);
    sb->max = max;
}

static void
s_reserve(agt_sb_t *sb, size_t extra)
{
    size_t need = sb->len + extra + 1;
    if (need <= sb->cap)
        return;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < need)
        cap *= 2;
    sb->data = lisa_realloc(sb->data, cap);
    sb->cap = cap;
}

void
agt_sb_add(agt_sb_t *sb, const char *s, size_t n)
{
    if (sb->len + n > sb->max) {
        n = sb->max > sb->len ? sb->max - sb->len : 0;
        sb->truncated = true;
    }
    s_reserve(sb, n);
    if (n)
        memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

void
agt_sb_puts(agt_sb_t *sb, const char *s)
{
    agt_sb_add(sb, s, strlen(s));
}

void
agt_sb_printf(agt_sb_t *sb, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t) n < sizeof small) {
        agt_sb_add(sb, small, (size_t) n);
        return;
    }
    char *big = lisa_malloc((size_t) n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t) n + 1, fmt, ap);
    va_end(ap);
    agt_sb_add(sb, big, (size_t) n);
    lisa_free(&big);
}

char *
agt_sb_take(agt_sb_t *sb)
{
    char *s = sb->data ? sb->data : lisa_strdup("");
    sb->data = NULL;
    sb->len = sb->cap = 0;
    return s;
}

void
agt_sb_free(agt_sb_t *sb)
{
    lisa_free(&sb->data);
    sb->len = sb->cap = 0;
}

size_t
agt_text_count_lines(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] == '\n')
            n++;
    if (len && s[len - 1] != '\n')
        n++;
    return n;
}

char *
agt_text_cut_lines(const char *s, size_t len, unsigned head, unsigned tail)
{
    size_t lines = agt_text_count_lines(s, len);
    if (lines <= (size_t) head + tail)
        return lisa_strndup(s, len);
    /* End of the head: just after the head-th newline. */
    size_t h = 0;
    for (unsigned seen = 0; h < len && seen < head; h++)
        if (s[h] == '\n')
            seen++;
    /* Start of the tail: after the newline that precedes the last `tail`
     * lines (a missing final newline still ends a line). */
    size_t t = len;
    unsigned need = tail + (s[len - 1] == '\n' ? 1u : 0u);
    unsigned seen = 0;
    while (t > 0) {
        if (s[t - 1] == '\n' && ++seen == need)
            break;
        t--;
    }
    if (tail == 0)
        t = len;
    agt_sb_t sb;
    agt_sb_init(&sb, len + 128);
    agt_sb_add(&sb, s, h);
    agt_sb_printf(&sb,
                  "<Observation truncated in middle for saving context: "
                  "%zu lines left out>\n",
                  lines - head - tail);
    agt_sb_add(&sb, s + t, len - t);
    return agt_sb_take(&sb);
}

/* Moves a cut position back to the start of a UTF-8 character. */
static size_t
s_utf8_back(const char *s, size_t pos)
{
    while (pos > 0 && ((unsigned char) s[pos] & 0xC0) == 0x80)
        pos--;
    return pos;
}

char *
agt_text_cap_bytes(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return lisa_strndup(s, len);
    size_t h = s_utf8_back(s, max / 2);
    size_t t = s_utf8_back(s, len - max / 2);
    if (t < h)
        t = h;
    agt_sb_t sb;
    agt_sb_init(&sb, max + 128);
    agt_sb_add(&sb, s, h);
    agt_sb_printf(&sb,
                  "\n<Observation truncated in middle for saving context: "
                  "%zu bytes left out>\n",
                  t - h);
    agt_sb_add(&sb, s + t, len - t);
    return agt_sb_take(&sb);
}

char *
agt_text_number(const char *s, size_t len, long first, size_t max)
{
    agt_sb_t sb;
    agt_sb_init(&sb, max);
    size_t i = 0;
    long n = first;
    while (i < len && !sb.truncated) {
        const char *nl = memchr(s + i, '\n', len - i);
        size_t end = nl ? (size_t) (nl - s) : len;
        agt_sb_printf(&sb, "%6ld\t", n++);
        agt_sb_add(&sb, s + i, end - i);
        agt_sb_add(&sb, "\n", 1);
        i = end + 1;
    }
    return agt_sb_take(&sb);
}

char *
agt_text_clip(const char *s, size_t max)
{
    size_t len = strlen(s);
    if (len <= max)
        return lisa_strndup(s, len);
    size_t h = s_utf8_back(s, max);
    agt_sb_t sb;
    agt_sb_init(&sb, h + strlen(AGT_TEXT_CLIP_NOTE) + 2);
    agt_sb_add(&sb, s, h);
    agt_sb_puts(&sb, "\n");
    agt_sb_puts(&sb, AGT_TEXT_CLIP_NOTE);
    return agt_sb_take(&sb);
}

/* Length of the valid UTF-8 sequence at s (0 when invalid). */
static size_t
s_utf8_seq(const unsigned char *s, size_t left)
{
    unsigned char c = s[0];
    size_t n;
    unsigned min;
    unsigned cp;
    if (c < 0x80)
        return c ? 1 : 0;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1Fu;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0Fu;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07u;
        min = 0x10000;
    } else {
        return 0;
    }
    if (left < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

char *
agt_text_utf8_clean(const char *s, size_t len)
{
    char *out = lisa_malloc(len + 1);
    const unsigned char *u = (const unsigned char *) s;
    size_t i = 0, o = 0;
    while (i < len) {
        size_t n = s_utf8_seq(u + i, len - i);
        if (n == 0) {
            out[o++] = '?';
            i++;
            continue;
        }
        memcpy(out + o, s + i, n);
        o += n;
        i += n;
    }
    out[o] = '\0';
    return out;
}
