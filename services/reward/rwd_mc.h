/*
 * rwd_mc: multiple-choice answers (chem, biomed, single- and multi-answer
 * reading comprehension).
 *
 * Single answer follows the recipe: a case-insensitive exact match of the
 * whole answer first; otherwise the chosen letter is extracted, trying in
 * order `"answer": "X"`, `Answer: X`, "answer/choice is X", `\boxed{X}`,
 * the last standalone capital letter, and the first character. Unlike the
 * recipe, the standalone-letter rule skips letters that are part of a word
 * made with '/', '-', '&', '\'' or dots ("N/A", "T-cell", "Q&A", "U.S.A.")
 * and the pronoun "I" before a lowercase word, so "N/A" is not "A".
 *
 * Multi-answer (a comma in the reference) scores the F1 of the letter sets.
 * Every scan is one linear pass; no regex engine is involved.
 */
#ifndef RWD_MC_H
#define RWD_MC_H

#include <stddef.h>
#include <stdint.h>

/* Extracts the chosen letter ('A'..'Z') from an answer, or 0 when there is
 * none; *rule (may be NULL) names the rule that matched (static string:
 * "json", "answer_colon", "answer_is", "boxed", "last_capital",
 * "first_char", "none"). */
char rwd_mc_extract(const char *s, size_t len, const char **rule);

/* Single-answer score (0 or 1) of `answer` against reference `gt`;
 * *rule and *letter (may be NULL) report the rule ("exact" for the exact
 * match) and the extracted letter. */
double rwd_mc_score(const char *answer, size_t alen, const char *gt,
                    size_t glen, const char **rule, char *letter);

/* Letter set of a multi-answer text as a bit mask (bit 0 = 'A'); *rule
 * (may be NULL) names where the letters were read. */
uint32_t rwd_mc_letters(const char *s, size_t len, const char **rule);

/* F1 of the predicted letter set against the reference set. *pred and *ref
 * (may be NULL) get the masks. */
double rwd_mc_f1(const char *answer, size_t alen, const char *gt, size_t glen,
                 const char **rule, uint32_t *pred, uint32_t *ref);

#endif
