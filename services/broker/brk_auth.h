/*
 * brk_auth: who is on the other end of a broker socket.
 *
 * With CURVE on (the default) every broker socket is a CURVE server with
 * the broker's key pair, and a czmq zauth actor admits only clients whose
 * public certificate is in the configured directory: a client without a
 * listed key completes no handshake and so gets nothing. Each admitted
 * message carries its sender's public key (ZeroMQ's "User-Id" property,
 * set by the authenticator, never by the peer); this module maps it to
 * the role written in that key's certificate, and the server checks the
 * role against what each request type allows.
 *
 * With CURVE off (only when configured explicitly, for tests and
 * single-user experiments) sockets are plain and every sender has every
 * role.
 */
#ifndef BRK_AUTH_H
#define BRK_AUTH_H

#include "brk_config.h"
#include "lisa/lisa_curve.h"

#include <czmq.h>
#include <stdbool.h>

typedef struct brk_auth_t brk_auth_t;

/* Starts the authenticator and loads the broker's certificate and the
 * clients' public certificates named by cfg (curve, curve_cert,
 * curve_clients). NULL, with the reason logged, when CURVE is on and a
 * file is missing or bad, no client certificate has a role, or libzmq
 * has no CURVE. */
brk_auth_t *brk_auth_new(const brk_config_t *cfg);

/* Stops the authenticator. Accepts NULL; sets *self to NULL. */
void brk_auth_destroy(brk_auth_t **self);

/* True when CURVE is on. */
bool brk_auth_curve(const brk_auth_t *self);

/* Makes `sock` a CURVE server with the broker's keys (before binding);
 * nothing when CURVE is off. */
void brk_auth_server(const brk_auth_t *self, zsock_t *sock);

/* The role of the sender of `frame` (a frame as received from a broker
 * socket): LISA_ROLE_ALL when CURVE is off, LISA_ROLE_NONE when the key
 * has no known role. */
lisa_role_t brk_auth_role(const brk_auth_t *self, zframe_t *frame);

/* Number of client keys with a role. */
size_t brk_auth_keys(const brk_auth_t *self);

#endif
