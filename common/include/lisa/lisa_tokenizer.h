/*
 * lisa_tokenizer: Hugging Face tokenizer.json, byte-level BPE flavour.
 *
 * The trainer learns from token ids and the gateway builds prompts from
 * token ids, so lisa must tokenize exactly like the `tokenizers` library
 * that produced the model's data: one id off and a trajectory no longer
 * matches what the engine sampled. This module loads a tokenizer.json of
 * the family Qwen2/Qwen3 (and GPT-2 style byte-level BPE) use and
 * reproduces its pipeline:
 *
 *   added tokens (leftmost-longest, matched before anything else)
 *   -> NFC normalizer -> Split pre-tokenizer (PCRE2, Unicode properties)
 *   -> ByteLevel bytes -> BPE merges by rank (leftmost pair first)
 *
 * and the ByteLevel decoder (bytes joined, invalid UTF-8 replaced by
 * U+FFFD per maximal invalid subpart, as Rust's from_utf8_lossy does).
 *
 * Encode has one switch, allow_special: when false, tokens flagged
 * `special` (<|im_start|>, <|endoftext|>, ...) are encoded as plain text,
 * as HF does with split_special_tokens; non-special added tokens such as
 * <tool_call> are always single tokens.
 *
 * The same loader serves the tiny byte-level tokenizer of the toy model
 * (tests/fixtures/byte-tokenizer: 256 byte tokens, no merges, a few
 * special tokens).
 *
 * A tokenizer is immutable after loading except for an internal word
 * cache, which is locked: one tokenizer may be shared by threads.
 */
#ifndef LISA_TOKENIZER_H
#define LISA_TOKENIZER_H

#include "lisa/lisa_ids.h"
#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lisa_tokenizer_t lisa_tokenizer_t;

/* Largest tokenizer.json accepted. */
#define LISA_TOKENIZER_MAX_FILE (64u * 1024u * 1024u)
/* Largest chat_template kept from tokenizer_config.json. */
#define LISA_TOKENIZER_MAX_CHAT_TEMPLATE (1u << 20)
/* Largest text one encode call accepts. */
#define LISA_TOKENIZER_MAX_TEXT (256u * 1024u * 1024u)

/* Decode flags. */
#define LISA_DECODE_SKIP_SPECIAL 1u /* drop tokens flagged `special` */
#define LISA_DECODE_STRICT       2u /* unknown id: LISA_INVALID (HF skips) */

/* Loads dir/tokenizer.json, and the eos token named by
 * dir/tokenizer_config.json when that file exists. NULL (logged) on
 * error: missing file, malformed JSON, an unsupported pipeline part. */
lisa_tokenizer_t *lisa_tokenizer_new_from_dir(const char *dir);

/* Loads one tokenizer.json file. NULL (logged) on error. */
lisa_tokenizer_t *lisa_tokenizer_new_from_file(const char *path);

/* Loads a tokenizer.json held in memory. NULL (logged) on error. */
lisa_tokenizer_t *lisa_tokenizer_new_from_json(const char *json, size_t len);

/* Frees the tokenizer and sets *p to NULL; safe on NULL and twice. */
void lisa_tokenizer_destroy(lisa_tokenizer_t **p);

/* Encodes text[0..len) and appends the ids to `out`. LISA_INVALID when the
 * text is not valid UTF-8, LISA_TOOLARGE when len exceeds
 * LISA_TOKENIZER_MAX_TEXT or the ids exceed out's bound. On error `out`
 * is left as it was on entry. */
lisa_rc_t lisa_tokenizer_encode(lisa_tokenizer_t *self, const char *text,
                                size_t len, bool allow_special,
                                lisa_ids_t *out) LISA_NODISCARD;

/* Decodes ids[0..n) into a new NUL-terminated UTF-8 string *text (length
 * in *len, may be NULL), owned by the caller. `flags` is a mix of
 * LISA_DECODE_*. Unknown ids are skipped (as HF does) unless
 * LISA_DECODE_STRICT, which makes them LISA_INVALID. */
lisa_rc_t lisa_tokenizer_decode(const lisa_tokenizer_t *self,
                                const int32_t *ids, size_t n, unsigned flags,
                                char **text, size_t *len) LISA_NODISCARD;

/* The token's spelling in the vocabulary (byte-level form for BPE tokens,
 * content for added tokens); NULL for an unknown id. Borrowed. */
const char *lisa_tokenizer_id_to_token(const lisa_tokenizer_t *self,
                                       int32_t id);

/* The raw bytes a token decodes to (*len set); NULL for an unknown id.
 * Borrowed; not NUL-terminated in general. */
const uint8_t *lisa_tokenizer_token_bytes(const lisa_tokenizer_t *self,
                                          int32_t id, size_t *len);

/* Id of a token given its vocabulary spelling (as id_to_token returns
 * it), or -1. */
int32_t lisa_tokenizer_token_to_id(const lisa_tokenizer_t *self,
                                   const char *token);

/* Number of ids: highest id + 1 (Qwen3: 151669). Ids below it without a
 * token (none in Qwen3) are unknown. */
size_t lisa_tokenizer_vocab_size(const lisa_tokenizer_t *self);

/* True when id is an added token flagged `special`. */
bool lisa_tokenizer_is_special(const lisa_tokenizer_t *self, int32_t id);

/* True when id is an added token (special or not). */
bool lisa_tokenizer_is_added(const lisa_tokenizer_t *self, int32_t id);

/* End-of-sequence id: the config's eos_token when loaded from a directory
 * with tokenizer_config.json, else <|im_end|>, else <|endoftext|>; -1
 * when none exists. */
int32_t lisa_tokenizer_eos_id(const lisa_tokenizer_t *self);

/* The chat template (Jinja source) of the directory's
 * tokenizer_config.json, else of its chat_template.jinja, borrowed; NULL
 * when there is none (or the tokenizer did not come from a directory).
 * lisa_chat_template_detect names the renderer for it. */
const char *lisa_tokenizer_chat_template(const lisa_tokenizer_t *self);

/* Ids of <|im_start|>, <|im_end|>, <|endoftext|>; -1 when absent. */
int32_t lisa_tokenizer_im_start_id(const lisa_tokenizer_t *self);
int32_t lisa_tokenizer_im_end_id(const lisa_tokenizer_t *self);
int32_t lisa_tokenizer_endoftext_id(const lisa_tokenizer_t *self);

#endif
