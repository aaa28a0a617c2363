/*
 * rwd_iflang: which language a response is written in, for IFEval's
 * `language:response_language` and the `change_case:english_*` checks.
 *
 * The reference asks `langdetect` (a naive Bayes model over character
 * n-gram profiles of 55 languages). lisa ships no model: it decides by
 * script first (Hangul is Korean, kana Japanese, Thai, Hebrew, Greek and
 * the Indic scripts name their language), then, inside the scripts several
 * languages share (Latin, Cyrillic, Arabic, Devanagari), by the language
 * whose most frequent function words and distinctive letters occur most
 * often. On running text of a sentence or more this agrees with langdetect
 * for the languages IFEval asks for; on a few words either may guess.
 * Pure and bounded: at most the first RWD_IFLANG_MAX_WORDS words count.
 */
#ifndef RWD_IFLANG_H
#define RWD_IFLANG_H

#include <stddef.h>

#define RWD_IFLANG_MAX_WORDS 4096u

/* langdetect's code for the language of s[0..n) ("en", "zh-cn", ...), or
 * NULL when the text has no letter (where langdetect raises "no
 * features"). Static string. */
const char *rwd_iflang_detect(const char *s, size_t n);

#endif
