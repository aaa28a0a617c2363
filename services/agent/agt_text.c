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
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(len + 128);
    lisa_buf_put(&sb, s, h);
    lisa_buf_printf(&sb,
                    "<Observation truncated in middle for saving context: "
                    "%zu lines left out>\n",
                    lines - head - tail);
    lisa_buf_put(&sb, s + t, len - t);
    return lisa_buf_take(&sb);
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
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(max + 128);
    lisa_buf_put(&sb, s, h);
    lisa_buf_printf(&sb,
                    "\n<Observation truncated in middle for saving context: "
                    "%zu bytes left out>\n",
                    t - h);
    lisa_buf_put(&sb, s + t, len - t);
    return lisa_buf_take(&sb);
}

char *
agt_text_number(const char *s, size_t len, long first, size_t max)
{
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(max);
    size_t i = 0;
    long n = first;
    while (i < len && !sb.full) {
        const char *nl = memchr(s + i, '\n', len - i);
        size_t end = nl ? (size_t) (nl - s) : len;
        lisa_buf_printf(&sb, "%6ld\t", n++);
        lisa_buf_put(&sb, s + i, end - i);
        lisa_buf_put(&sb, "\n", 1);
        i = end + 1;
    }
    return lisa_buf_take(&sb);
}

char *
agt_text_clip(const char *s, size_t max)
{
    size_t len = strlen(s);
    if (len <= max)
        return lisa_strndup(s, len);
    size_t h = s_utf8_back(s, max);
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(h + strlen(AGT_TEXT_CLIP_NOTE) + 2);
    lisa_buf_put(&sb, s, h);
    lisa_buf_puts(&sb, "\n");
    lisa_buf_puts(&sb, AGT_TEXT_CLIP_NOTE);
    return lisa_buf_take(&sb);
}
