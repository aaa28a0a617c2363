/*
 * lisa_curve: the process's bus identity and the deployment's key set.
 *
 * The identity is process-wide on purpose: a process plays one role on
 * the bus (a gateway, a trainer rank, an operator's command), and its
 * broker sockets are made in several modules (lisa_rpc, event
 * subscribers, the reward worker's DEALER) that should not each carry key
 * paths around. It is set once at start, before any socket is made, and
 * only read afterwards.
 */
#include "lisa/lisa_curve.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

/* czmq builds "<file>_secret" in a 256-byte buffer: stay below it. */
#define S_MAX_PATH 240u

static const struct {
    lisa_role_t role;
    const char *name;
} s_roles[LISA_ROLES] = {
    {LISA_ROLE_CONTROLLER, "controller"}, {LISA_ROLE_GATEWAY, "gateway"},
    {LISA_ROLE_TRAINER, "trainer"},       {LISA_ROLE_REWARD, "reward"},
    {LISA_ROLE_OPERATOR, "operator"},
};

static struct {
    zcert_t *cert;
    char broker_key[41]; /* Z85 */
} s_id;

lisa_role_t
lisa_curve_role_at(size_t i)
{
    return i < LISA_ROLES ? s_roles[i].role : LISA_ROLE_NONE;
}

const char *
lisa_curve_role_name(lisa_role_t role)
{
    for (size_t i = 0; i < LISA_ROLES; i++)
        if (s_roles[i].role == role)
            return s_roles[i].name;
    return "none";
}

lisa_role_t
lisa_curve_role_parse(const char *name)
{
    for (size_t i = 0; name && i < LISA_ROLES; i++)
        if (strcmp(s_roles[i].name, name) == 0)
            return s_roles[i].role;
    return LISA_ROLE_NONE;
}

static bool
s_zero(const byte *key)
{
    for (size_t i = 0; i < 32; i++)
        if (key[i])
            return false;
    return true;
}

/* Loads a certificate file; NULL with a reason when it holds no usable
 * key (a secret one when `secret`). */
static zcert_t *
s_load(const char *path, bool secret, char *err, size_t errlen)
{
    if (strlen(path) >= S_MAX_PATH) {
        lisa_errf(err, errlen, "key file path longer than %u bytes",
                  S_MAX_PATH);
        return NULL;
    }
    struct stat st;
    errno = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        lisa_errf(err, errlen, "key file '%s': %s", path,
                  errno ? strerror(errno) : "not a regular file");
        return NULL;
    }
    zcert_t *cert = zcert_load(path);
    if (!cert || s_zero(zcert_public_key(cert)) ||
        (secret && s_zero(zcert_secret_key(cert)))) {
        lisa_errf(err, errlen, "key file '%s' holds no %s key", path,
                  secret ? "secret" : "public");
        zcert_destroy(&cert);
        return NULL;
    }
    return cert;
}

lisa_rc_t
lisa_curve_use(const char *cert_file, const char *broker_cert_file, char *err,
               size_t errlen)
{
    bool mine = cert_file && *cert_file;
    bool theirs = broker_cert_file && *broker_cert_file;
    lisa_curve_forget();
    if (!mine && !theirs)
        return LISA_OK;
    if (!mine || !theirs) {
        lisa_errf(err, errlen,
                  "CURVE needs both this service's certificate and the "
                  "broker's public certificate");
        return LISA_INVALID;
    }
    if (!zsys_has_curve()) {
        lisa_errf(err, errlen, "libzmq was built without CURVE");
        return LISA_INVALID;
    }
    zcert_t *cert = s_load(cert_file, true, err, errlen);
    if (!cert)
        return LISA_INVALID;
    zcert_t *broker = s_load(broker_cert_file, false, err, errlen);
    if (!broker) {
        zcert_destroy(&cert);
        return LISA_INVALID;
    }
    snprintf(s_id.broker_key, sizeof s_id.broker_key, "%s",
             zcert_public_txt(broker));
    zcert_destroy(&broker);
    s_id.cert = cert;
    return LISA_OK;
}

bool
lisa_curve_enabled(void)
{
    return s_id.cert != NULL;
}

void
lisa_curve_client(zsock_t *sock)
{
    if (!s_id.cert || !sock)
        return;
    zcert_apply(s_id.cert, sock);
    zsock_set_curve_serverkey(sock, s_id.broker_key);
}

void
lisa_curve_forget(void)
{
    zcert_destroy(&s_id.cert);
    memset(s_id.broker_key, 0, sizeof s_id.broker_key);
}

/* Saves one certificate: `secret` to <dir>/<name>.cert_secret (and the
 * public half beside it, for the broker's own pair), the public half with
 * the role to <dir>/clients/<name>.cert for a client. */
static lisa_rc_t
s_save(zcert_t *cert, const char *dir, const char *name, bool broker, char *err,
       size_t errlen)
{
    char path[S_MAX_PATH];
    int rc;
    zsys_file_mode_private();
    if (broker) {
        snprintf(path, sizeof path, "%s/%s.cert", dir, name);
        rc = zcert_save(cert, path);
    } else {
        zcert_set_meta(cert, "role", "%s", name);
        snprintf(path, sizeof path, "%s/%s.cert_secret", dir, name);
        rc = zcert_save_secret(cert, path);
        if (rc == 0) {
            snprintf(path, sizeof path, "%s/clients/%s.cert", dir, name);
            zsys_file_mode_default();
            rc = zcert_save_public(cert, path);
        }
    }
    zsys_file_mode_default();
    if (rc != 0) {
        lisa_errf(err, errlen, "cannot write '%s': %s", path, strerror(errno));
        return LISA_ERR;
    }
    return LISA_OK;
}

lisa_rc_t
lisa_curve_keygen(const char *dir, char *err, size_t errlen)
{
    if (!dir || !*dir || strlen(dir) > S_MAX_PATH - 40) {
        lisa_errf(err, errlen, "key directory path empty or too long");
        return LISA_INVALID;
    }
    char clients[S_MAX_PATH];
    snprintf(clients, sizeof clients, "%s/clients", dir);
    if (zsys_dir_create("%s", dir) != 0 ||
        zsys_dir_create("%s", clients) != 0) {
        lisa_errf(err, errlen, "cannot create '%s': %s", clients,
                  strerror(errno));
        return LISA_ERR;
    }
    zcert_t *broker = zcert_new();
    lisa_rc_t rc =
        broker ? s_save(broker, dir, "broker", true, err, errlen) : LISA_ERR;
    zcert_destroy(&broker);
    for (size_t i = 0; i < LISA_ROLES && rc == LISA_OK; i++) {
        zcert_t *cert = zcert_new();
        rc = cert ? s_save(cert, dir, s_roles[i].name, false, err, errlen)
                  : LISA_ERR;
        zcert_destroy(&cert);
    }
    if (rc == LISA_ERR && err && !*err)
        lisa_errf(err, errlen, "cannot make a key pair");
    return rc;
}
