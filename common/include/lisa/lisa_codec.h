/*
 * lisa_codec: protobuf over ZeroMQ, with bounds.
 *
 * Every frame that arrives from the network is untrusted. Decoding checks,
 * in order: the size bound, that protobuf-c can parse it, the protocol
 * version, and that the envelope carries a body of its own type (each
 * envelope numbers its bodies in a range of its own, so a valid frame of
 * another envelope type decodes with no body and is refused). Each refusal
 * is an error value, a reason string and a counter; never a crash.
 *
 * Encoding stamps the version, so callers only fill in the body.
 */
#ifndef LISA_CODEC_H
#define LISA_CODEC_H

#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LISA_PROTOCOL_VERSION 1u

/* Default bounds of one frame per socket kind (services may configure). */
#define LISA_MAX_RPC_FRAME    (16u * 1024u * 1024u)
#define LISA_MAX_SPAN_FRAME   (8u * 1024u * 1024u)
#define LISA_MAX_EVENT_FRAME  (1u * 1024u * 1024u)
#define LISA_MAX_WORKER_FRAME (16u * 1024u * 1024u)

/* Counters of decode outcomes; one per socket, owned by its caller. */
typedef struct {
    uint64_t ok;          /* frames decoded */
    uint64_t too_large;   /* over the bound */
    uint64_t malformed;   /* not parseable as the envelope */
    uint64_t bad_version; /* parseable, other protocol version */
    uint64_t wrong_type;  /* parseable, no body of this envelope type */
    uint64_t bad_shape;   /* wrong number of frames in a message */
} lisa_codec_stats_t;

/* Decodes `len` bytes as envelope `desc` into *out (free with
 * lisa_codec_free). `max_len` bounds the frame. On failure *out is NULL,
 * the matching counter in `stats` (may be NULL) is bumped and *why (may be
 * NULL) points at a static reason. Returns LISA_OK, LISA_TOOLARGE,
 * LISA_INVALID or LISA_UNSUPPORTED. */
lisa_rc_t lisa_codec_decode(const ProtobufCMessageDescriptor *desc,
                            const void *data, size_t len, size_t max_len,
                            lisa_codec_stats_t *stats, ProtobufCMessage **out,
                            const char **why) LISA_NODISCARD;

/* Same as lisa_codec_decode for a czmq frame (NULL frame: LISA_INVALID). */
lisa_rc_t lisa_codec_decode_frame(const ProtobufCMessageDescriptor *desc,
                                  zframe_t *frame, size_t max_len,
                                  lisa_codec_stats_t *stats,
                                  ProtobufCMessage **out,
                                  const char **why) LISA_NODISCARD;

/* Frees a decoded message and sets *msg to NULL; safe on NULL. */
void lisa_codec_free(ProtobufCMessage **msg);

/* True when every string field of msg, at any depth, is valid UTF-8 (the
 * decoders check it; other protobuf runtimes refuse such frames). On false
 * *field (when not NULL) names the first bad field. */
bool lisa_codec_utf8_ok(const ProtobufCMessage *msg, const char **field);

/* Stamps the envelope's version field (if it has one) and packs `msg` into
 * a new frame, owned by the caller. */
zframe_t *lisa_codec_encode(ProtobufCMessage *msg);

/* Packs `msg` and appends it to `zmsg` as a frame. */
void lisa_codec_append(zmsg_t *zmsg, ProtobufCMessage *msg);

/* Sends `msg` on `sock`, preceded by a `topic` frame when topic is not NULL.
 * Returns LISA_OK or LISA_ERR (socket error, e.g. HWM in non-blocking). */
lisa_rc_t lisa_codec_send(void *sock, const char *topic,
                          ProtobufCMessage *msg) LISA_NODISCARD;

/* Adds `b` into `a` (for aggregating per-socket counters). */
void lisa_codec_stats_add(lisa_codec_stats_t *a, const lisa_codec_stats_t *b);

/* Total refused frames in `s`. */
uint64_t lisa_codec_stats_refused(const lisa_codec_stats_t *s);

#endif
