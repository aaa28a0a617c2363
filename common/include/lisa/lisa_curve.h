/*
 * lisa_curve: the bus's keys. Every socket to the broker speaks ZeroMQ
 * CURVE; each role (controller, gateway, trainer, reward, operator) has its
 * own key pair, and the broker authorises each request by the role of the
 * key that sent it.
 *
 * Key files are czmq zcert files (ZPL text, Z85 keys). A client's public
 * certificate carries its role as metadata ("role = gateway"); the broker
 * reads the roles from the public certificates it is given and trusts no
 * role a peer claims for itself.
 *
 * A process has one bus identity: lisa_curve_use loads it once at start
 * (from the service's config), and every broker socket the process makes
 * afterwards applies it with lisa_curve_client before connecting. Without
 * an identity sockets stay plain, which a CURVE broker refuses.
 *
 * lisa_curve_keygen writes a key set for one deployment:
 *   DIR/broker.cert, DIR/broker.cert_secret   the broker's pair
 *   DIR/<role>.cert_secret                    each role's secret certificate
 *   DIR/clients/<role>.cert                   each role's public certificate
 * The broker gets broker.cert_secret and the clients/ directory; a service
 * of role R gets R.cert_secret and broker.cert.
 */
#ifndef LISA_CURVE_H
#define LISA_CURVE_H

#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>

/* The roles, as bits so that a permission is a mask of them. */
typedef enum {
    LISA_ROLE_NONE = 0,
    LISA_ROLE_CONTROLLER = 1u << 0,
    LISA_ROLE_GATEWAY = 1u << 1,
    LISA_ROLE_TRAINER = 1u << 2,
    LISA_ROLE_REWARD = 1u << 3,
    LISA_ROLE_OPERATOR = 1u << 4,
    LISA_ROLE_ALL = (1u << 5) - 1
} lisa_role_t;

/* Number of roles, and the role of index i (0 <= i < LISA_ROLES). */
#define LISA_ROLES 5u
lisa_role_t lisa_curve_role_at(size_t i);

/* "controller", "gateway", "trainer", "reward" or "operator"; "none" for
 * LISA_ROLE_NONE or a mask of several roles. Never NULL. */
const char *lisa_curve_role_name(lisa_role_t role);

/* The role named `name`; LISA_ROLE_NONE when unknown or NULL. */
lisa_role_t lisa_curve_role_parse(const char *name);

/* Sets this process's bus identity: `cert_file` is its secret certificate
 * (zcert, with both keys) and `broker_cert_file` the broker's public one.
 * Both empty (or NULL): no identity, sockets stay plain. Returns LISA_OK,
 * or LISA_INVALID with a reason when only one is given or a file is
 * missing, unreadable or holds no key. */
lisa_rc_t lisa_curve_use(const char *cert_file, const char *broker_cert_file,
                         char *err, size_t errlen) LISA_NODISCARD;

/* True when lisa_curve_use has set an identity. */
bool lisa_curve_enabled(void);

/* Makes `sock` a CURVE client with this process's identity; call before
 * connecting. Nothing when no identity is set. */
void lisa_curve_client(zsock_t *sock);

/* Drops the identity (later sockets are plain). */
void lisa_curve_forget(void);

/* Writes a fresh key set into `dir` (created when missing; existing files
 * of the set are replaced). Secret files are readable by the owner only.
 * Returns LISA_OK or LISA_ERR with a reason. */
lisa_rc_t lisa_curve_keygen(const char *dir, char *err,
                            size_t errlen) LISA_NODISCARD;

#endif
