/*
 * rwd_porter: the Porter stemmer, in the variant rouge-score uses.
 *
 * ROUGE-L with stemming must give the same partial credit as the Python
 * reference (rouge-score 0.1.2, which uses NLTK's PorterStemmer in its
 * default NLTK_EXTENSIONS mode). That mode differs from Porter's 1980
 * paper in a few places: a pool of irregular forms (skies, dying, news,
 * ...), "ies"/"ied" on four-letter words, a stricter Step 1c, the extra
 * Step 2 rules "alli" (recursive), "fulli" and "logi", "bli" -> "ble"
 * instead of "abli" -> "able", and a two-letter *o condition. This module
 * implements that variant from the algorithm's description.
 *
 * Words are lowercase ASCII letters and digits (rouge's tokens); digits
 * count as consonants. Every step is linear in the word's length.
 */
#ifndef RWD_PORTER_H
#define RWD_PORTER_H

#include <stddef.h>

/* Stems w[0..len) in place; w must have room for len + 2 bytes (a step may
 * append one letter). Returns the new length; w is not NUL-terminated. */
size_t rwd_porter_stem(char *w, size_t len);

#endif
