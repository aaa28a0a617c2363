/*
 * rwd_iftext: the text primitives the instruction checkers count with.
 *
 * IFEval and IFBench are written in Python; their checks count words with
 * `re.findall(r"\w+")`, split fields with `str.split()`, strip
 * `string.punctuation` and compare with `str.lower()`. These helpers give
 * the same answers on UTF-8 text: whitespace is Python's `str.isspace` set,
 * `\w` is exact on ASCII and, outside it, every code point except the
 * punctuation, symbol, combining-mark and space blocks; case folding is
 * ASCII only (the
 * recipe's prompts and ids are English). Sentences are split by a rule
 * that approximates NLTK's Punkt model, which lisa does not ship: a
 * terminator, closing quotes, whitespace; after an abbreviation, an
 * initial, a number or an ellipsis Punkt's orthographic test on the next
 * word decides, with "a common word capitalized" standing for what Punkt
 * learned; words as NLTK's word_tokenize splits them are re-derived
 * from its Treebank rules (punctuation split off, contractions such as
 * "n't" and "'s" separated, a sentence's final period alone). All
 * functions are pure and bounded by their input.
 */
#ifndef RWD_IFTEXT_H
#define RWD_IFTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A span of a text: offset and length in bytes. */
typedef struct {
    size_t off;
    size_t len;
} rwd_span_t;

/* Code point at s[i] (i < n); *len gets its byte length. An invalid byte
 * reads as U+FFFD of length 1. */
uint32_t rwd_iftext_cp(const char *s, size_t n, size_t i, size_t *len);

/* Python str.isspace for one code point. */
bool rwd_iftext_is_space(uint32_t cp);

/* Python re `\w` for one code point (approximated outside ASCII). */
bool rwd_iftext_is_word(uint32_t cp);

/* One of Python's string.punctuation (32 ASCII characters). */
bool rwd_iftext_is_punct(int c);

/* Python re `\b` at byte i of s[0..n). */
bool rwd_iftext_boundary(const char *s, size_t n, size_t i);

/* Number of `\w+` runs in s[0..n). */
size_t rwd_iftext_count_words(const char *s, size_t n);

/* Python str.split(): the next whitespace-separated field at or after
 * *pos; false at the end. *pos moves past the field. */
bool rwd_iftext_field(const char *s, size_t n, size_t *pos, rwd_span_t *f);

/* Python str.strip() on the span (Unicode whitespace). */
void rwd_iftext_strip(const char *s, rwd_span_t *sp);

/* Strips string.punctuation (and spaces when `space`) from both ends. */
void rwd_iftext_strip_punct(const char *s, rwd_span_t *sp, bool space);

/* Whether w[0..wl) equals one of the n strings of `sorted` (in strcmp
 * order); binary search. */
bool rwd_iftext_in_sorted(const char *const *sorted, size_t n, const char *w,
                          size_t wl);

/* Whether lower-case w[0..wl) is one of NLTK's English stopwords. */
bool rwd_iftext_is_stopword(const char *w, size_t wl);

/* ASCII case-insensitive equality of two byte strings. */
bool rwd_iftext_eq_nocase(const char *a, size_t an, const char *b, size_t bn);

/* First ASCII case-insensitive occurrence of needle in hay at or after
 * `from`; SIZE_MAX when none. An empty needle matches at `from`. */
size_t rwd_iftext_find_nocase(const char *hay, size_t n, size_t from,
                              const char *needle, size_t nl);

/* Up to `max` sentences of s[0..n) into out; returns how many were found
 * (may exceed max: the count is exact, the spans stop at max). */
size_t rwd_iftext_sentences(const char *s, size_t n, rwd_span_t *out,
                            size_t max);

/* Every sentence of s[0..n): a new array (the caller frees it with
 * lisa_free; never NULL), *count of them. */
rwd_span_t *rwd_iftext_sentences_new(const char *s, size_t n, size_t *count);

/* The lines of s[0..n) as Python's s.split("\n") makes them (n + 1 of
 * them for n newlines, empty ones kept, no newline in any): a new array
 * (the caller frees it with lisa_free; never NULL), *count of them. */
rwd_span_t *rwd_iftext_lines_new(const char *s, size_t n, size_t *count);

/* Case of one code point (ASCII, Latin-1, Latin Extended-A and Additional,
 * Greek, Cyrillic; other scripts are uncased): 1 upper, -1 lower, 0 none. */
int rwd_iftext_case(uint32_t cp);

/* Lower case of cp over the same ranges; other code points unchanged. */
uint32_t rwd_iftext_lower(uint32_t cp);

/* Python str.isupper() (upper > 0) or str.islower() (upper == 0): at least
 * one cased character and none of the other case. */
bool rwd_iftext_is_cased(const char *s, size_t n, bool upper);

/* One token of NLTK's word_tokenize (Treebank rules): a span of the text;
 * `quote` is '`' for an opening double quote (NLTK's ``), '\'' for a
 * closing one (NLTK's ''), 0 otherwise. */
typedef struct {
    size_t off;
    size_t len;
    char quote;
} rwd_token_t;

/* Up to `max` word_tokenize tokens of s[0..n) into out (NULL: count
 * only); returns how many there are. Sentences are split first, as NLTK
 * does, so a sentence's final period is its own token. */
size_t rwd_iftext_tokens(const char *s, size_t n, rwd_token_t *out, size_t max);

/* Every token of s[0..n): a new array (the caller frees it with lisa_free;
 * never NULL), *count of them. */
rwd_token_t *rwd_iftext_tokens_new(const char *s, size_t n, size_t *count);

#endif
