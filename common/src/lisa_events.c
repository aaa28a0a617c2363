/*
 * lisa_events: the broker's events off a SUB socket (see lisa_events.h).
 */
#include "lisa/lisa_events.h"

#include "lisa/lisa_curve.h"

zsock_t *
lisa_events_sub(const char *endpoint, const char *topic)
{
    /* the identity before connecting: the handshake uses it */
    zsock_t *sub = zsock_new(ZMQ_SUB);
    if (!sub)
        return NULL;
    lisa_curve_client(sub);
    zsock_set_subscribe(sub, topic);
    if (zsock_connect(sub, "%s", endpoint) != 0)
        zsock_destroy(&sub);
    return sub;
}

size_t
lisa_events_drain(zsock_t *sub, lisa_events_fn *fn, void *arg,
                  lisa_codec_stats_t *stats)
{
    size_t n = 0;
    for (int i = 0; i < LISA_EVENTS_BATCH && (zsock_events(sub) & ZMQ_POLLIN);
         i++) {
        zmsg_t *m = zmsg_recv(sub);
        if (!m)
            break;
        zframe_t *topic = zmsg_pop(m);
        zframe_t *body = zmsg_pop(m);
        ProtobufCMessage *msg = NULL;
        if (body && lisa_codec_decode_frame(&lisa__event__descriptor, body,
                                            LISA_MAX_EVENT_FRAME, stats, &msg,
                                            NULL) == LISA_OK) {
            fn(arg, (const Lisa__Event *) msg);
            n++;
        }
        lisa_codec_free(&msg);
        zframe_destroy(&topic);
        zframe_destroy(&body);
        zmsg_destroy(&m);
    }
    return n;
}
