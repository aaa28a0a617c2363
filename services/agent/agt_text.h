/*
 * agt_text: bounded strings and the observation-shaping rules of the agent.
 *
 * Everything a tool shows the model passes through here: a command's
 * output is cut to its first and last lines (the recipe keeps 40 + 40 when
 * there are more than 80) and then to a byte cap, which the recipe lacks
 * (one huge line used to flood the context); file views are numbered like
 * `cat -n` and clipped at a character count with a note that tells the
 * model how to look further. Text is built in common's lisa_buf_t with
 * its maximum set and `cut` on (LISA_BUF_CUT), so no input can make it
 * grow without bound and an overlong output is clipped, not refused.
 */
#ifndef AGT_TEXT_H
#define AGT_TEXT_H

#include "lisa/lisa_buf.h"

#include <stdbool.h>
#include <stddef.h>

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

/* The note appended by agt_text_clip. */
extern const char *const AGT_TEXT_CLIP_NOTE;

#endif
