/*
 * lisa_codec: the one place where protobuf frames are packed and unpacked.
 *
 * protobuf-c's unpack already rejects truncated varints, lengths that run
 * past the buffer and wire-type mismatches; what it cannot know is that a
 * structurally valid frame belongs to another envelope type, or speaks
 * another protocol version. Both are checked here by looking the envelope's
 * `version` field and `body` oneof up in its descriptor, so the same code
 * serves every envelope type without per-type switch statements.
 */
#include "lisa/lisa_codec.h"

#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#include <stdbool.h>
#include <string.h>

/* The field descriptor named `name` of `desc`, or NULL. */
static const ProtobufCFieldDescriptor *
s_field(const ProtobufCMessageDescriptor *desc, const char *name)
{
    return protobuf_c_message_descriptor_get_field_by_name(desc, name);
}

/* Reads a uint32 field by descriptor; 0 when absent. */
static uint32_t
s_get_u32(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    uint32_t v;
    memcpy(&v, (const char *) m + f->offset, sizeof v);
    return v;
}

/* True when the envelope's body oneof is set (or it has no oneof). */
static int
s_has_body(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    int has_oneof = 0;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
            continue;
        has_oneof = 1;
        uint32_t which;
        memcpy(&which, (const char *) m + f->quantifier_offset, sizeof which);
        if (which == f->id)
            return 1;
    }
    return !has_oneof;
}

/* True when every string field of m, at any depth, is valid UTF-8 (what
 * proto3 promises and what other protobuf runtimes refuse to parse
 * otherwise); *bad names the first field that is not. */
static bool
s_utf8_ok(const ProtobufCMessage *m, const char **bad)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING &&
            f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *at = (const char *) m + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which;
            memcpy(&which, (const char *) m + f->quantifier_offset,
                   sizeof which);
            if (which != f->id)
                continue;
        }
        size_t n = 1;
        void *const *items = (void *const *) (const void *) at;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            memcpy(&n, (const char *) m + f->quantifier_offset, sizeof n);
            memcpy(&items, at, sizeof items);
        }
        for (size_t k = 0; k < n; k++) {
            const void *v = items[k];
            if (!v)
                continue;
            if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (!s_utf8_ok(v, bad))
                    return false;
            } else if (!lisa_utf8_valid(v, strlen(v))) {
                *bad = f->name;
                return false;
            }
        }
    }
    return true;
}

bool
lisa_codec_utf8_ok(const ProtobufCMessage *msg, const char **field)
{
    const char *dummy = NULL;
    return s_utf8_ok(msg, field ? field : &dummy);
}

lisa_rc_t
lisa_codec_decode(const ProtobufCMessageDescriptor *desc, const void *data,
                  size_t len, size_t max_len, lisa_codec_stats_t *stats,
                  ProtobufCMessage **out, const char **why)
{
    lisa_codec_stats_t dummy;
    if (!stats)
        stats = &dummy;
    const char *dummy_why;
    if (!why)
        why = &dummy_why;
    *out = NULL;
    if (len > max_len) {
        stats->too_large++;
        *why = "frame exceeds the size limit";
        return LISA_TOOLARGE;
    }
    if (len > 0 && !data) {
        stats->malformed++;
        *why = "no frame data";
        return LISA_INVALID;
    }
    ProtobufCMessage *m =
        protobuf_c_message_unpack(desc, NULL, len, (const uint8_t *) data);
    if (!m) {
        stats->malformed++;
        *why = "frame is not a valid protobuf message of the expected type";
        return LISA_INVALID;
    }
    const ProtobufCFieldDescriptor *vf = s_field(desc, "version");
    if (vf && s_get_u32(m, vf) != LISA_PROTOCOL_VERSION) {
        protobuf_c_message_free_unpacked(m, NULL);
        stats->bad_version++;
        *why = "unsupported protocol version";
        return LISA_UNSUPPORTED;
    }
    if (!s_has_body(m)) {
        protobuf_c_message_free_unpacked(m, NULL);
        stats->wrong_type++;
        *why = "message has no body of a known type for this socket";
        return LISA_UNSUPPORTED;
    }
    if (!lisa_codec_utf8_ok(m, NULL)) {
        protobuf_c_message_free_unpacked(m, NULL);
        stats->malformed++;
        *why = "a string field is not valid UTF-8";
        return LISA_INVALID;
    }
    stats->ok++;
    *why = "ok";
    *out = m;
    return LISA_OK;
}

lisa_rc_t
lisa_codec_decode_frame(const ProtobufCMessageDescriptor *desc, zframe_t *frame,
                        size_t max_len, lisa_codec_stats_t *stats,
                        ProtobufCMessage **out, const char **why)
{
    if (!frame) {
        *out = NULL;
        if (stats)
            stats->bad_shape++;
        if (why)
            *why = "missing frame";
        return LISA_INVALID;
    }
    return lisa_codec_decode(desc, zframe_data(frame), zframe_size(frame),
                             max_len, stats, out, why);
}

void
lisa_codec_free(ProtobufCMessage **msg)
{
    if (msg && *msg) {
        protobuf_c_message_free_unpacked(*msg, NULL);
        *msg = NULL;
    }
}

zframe_t *
lisa_codec_encode(ProtobufCMessage *msg)
{
    const ProtobufCFieldDescriptor *vf = s_field(msg->descriptor, "version");
    if (vf) {
        uint32_t v = LISA_PROTOCOL_VERSION;
        memcpy((char *) msg + vf->offset, &v, sizeof v);
    }
    size_t n = protobuf_c_message_get_packed_size(msg);
    zframe_t *f = zframe_new(NULL, n);
    if (!f) {
        /* zframe_new only fails on allocation; treat like lisa_malloc. */
        (void) lisa_malloc((size_t) -1);
    }
    protobuf_c_message_pack(msg, zframe_data(f));
    return f;
}

void
lisa_codec_append(zmsg_t *zmsg, ProtobufCMessage *msg)
{
    zframe_t *f = lisa_codec_encode(msg);
    zmsg_append(zmsg, &f);
}

lisa_rc_t
lisa_codec_send(void *sock, const char *topic, ProtobufCMessage *msg)
{
    zmsg_t *zmsg = zmsg_new();
    if (topic)
        zmsg_addstr(zmsg, topic);
    lisa_codec_append(zmsg, msg);
    if (zmsg_send(&zmsg, sock) != 0) {
        zmsg_destroy(&zmsg);
        return LISA_ERR;
    }
    return LISA_OK;
}

void
lisa_codec_stats_add(lisa_codec_stats_t *a, const lisa_codec_stats_t *b)
{
    a->ok += b->ok;
    a->too_large += b->too_large;
    a->malformed += b->malformed;
    a->bad_version += b->bad_version;
    a->wrong_type += b->wrong_type;
    a->bad_shape += b->bad_shape;
}

uint64_t
lisa_codec_stats_refused(const lisa_codec_stats_t *s)
{
    return s->too_large + s->malformed + s->bad_version + s->wrong_type +
           s->bad_shape;
}
