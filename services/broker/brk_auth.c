/*
 * brk_auth: the CURVE server side and the key -> role map. See brk_auth.h.
 *
 * The authenticator (zauth) and this module read the same directory of
 * public certificates: zauth decides who may connect at all, the map
 * decides what a connected key may ask for. The map is read once at
 * start; a certificate added later is admitted by zauth but has no role
 * until the broker restarts, so it can do nothing.
 */
#include "brk_auth.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <stdint.h>
#include <string.h>

struct brk_auth_t {
    bool curve;
    zactor_t *zauth;
    zcert_t *cert;  /* the broker's pair */
    zhashx_t *keys; /* Z85 public key -> role (as a pointer) */
};

/* Reads every certificate under `dir` into the key map. */
static lisa_rc_t
s_read_clients(brk_auth_t *self, const char *dir)
{
    zdir_t *d = zdir_new(dir, NULL);
    if (!d) {
        lisa_log_error("curve_clients '%s' is not a readable directory", dir);
        return LISA_INVALID;
    }
    zfile_t **files = zdir_flatten(d);
    for (size_t i = 0; files && files[i]; i++) {
        const char *path = zfile_filename(files[i], NULL);
        size_t n = strlen(path);
        /* czmq prefers "<name>_secret" when it exists: read that pair once */
        if (n > 7 && strcmp(path + n - 7, "_secret") == 0)
            continue;
        zcert_t *cert = zcert_load(path);
        const char *name = cert ? zcert_meta(cert, "role") : NULL;
        lisa_role_t role = lisa_curve_role_parse(name);
        if (role == LISA_ROLE_NONE)
            lisa_log_warn("client certificate '%s' has no known role "
                          "(metadata role = controller, gateway, trainer, "
                          "reward or operator): its key may do nothing",
                          path);
        else
            zhashx_update(self->keys, zcert_public_txt(cert),
                          (void *) (uintptr_t) role);
        zcert_destroy(&cert);
    }
    zdir_flatten_free(&files);
    zdir_destroy(&d);
    if (zhashx_size(self->keys) == 0) {
        lisa_log_error("curve_clients '%s' holds no client certificate with "
                       "a role",
                       dir);
        return LISA_INVALID;
    }
    return LISA_OK;
}

static lisa_rc_t
s_start(brk_auth_t *self, const brk_config_t *cfg)
{
    if (!zsys_has_curve()) {
        lisa_log_error("libzmq has no CURVE; the broker cannot start with "
                       "curve = on");
        return LISA_ERR;
    }
    if (!*cfg->curve_cert || !*cfg->curve_clients) {
        lisa_log_error(
            "curve = on needs curve_cert (the broker's secret certificate) "
            "and curve_clients (a directory of client certificates); make "
            "them with 'lisa keys DIR', or set curve = off to run an "
            "unauthenticated bus");
        return LISA_INVALID;
    }
    char err[256] = "";
    /* the broker's pair: lisa_curve_use reads and checks it the way a
     * client's is read; the broker keeps its own copy */
    if (lisa_curve_use(cfg->curve_cert, cfg->curve_cert, err, sizeof err) !=
        LISA_OK) {
        lisa_log_error("curve_cert: %s", err);
        return LISA_INVALID;
    }
    lisa_curve_forget();
    self->cert = zcert_load(cfg->curve_cert);
    self->keys = zhashx_new();
    if (!self->cert || !self->keys ||
        s_read_clients(self, cfg->curve_clients) != LISA_OK)
        return LISA_INVALID;
    self->zauth = zactor_new(zauth, NULL);
    if (!self->zauth)
        return LISA_ERR;
    zstr_sendx(self->zauth, "CURVE", cfg->curve_clients, NULL);
    if (zsock_wait(self->zauth) != 0)
        return LISA_ERR;
    return LISA_OK;
}

brk_auth_t *
brk_auth_new(const brk_config_t *cfg)
{
    brk_auth_t *self = lisa_calloc(1, sizeof *self);
    if (strcmp(cfg->curve, "off") == 0) {
        lisa_log_warn("curve = off: the bus is unauthenticated; anything "
                      "that reaches the broker's ports may do anything");
        return self;
    }
    self->curve = true;
    if (s_start(self, cfg) != LISA_OK)
        brk_auth_destroy(&self);
    return self;
}

void
brk_auth_destroy(brk_auth_t **pself)
{
    if (!pself || !*pself)
        return;
    brk_auth_t *self = *pself;
    zactor_destroy(&self->zauth);
    zcert_destroy(&self->cert);
    zhashx_destroy(&self->keys);
    lisa_free(pself);
}

bool
brk_auth_curve(const brk_auth_t *self)
{
    return self->curve;
}

void
brk_auth_server(const brk_auth_t *self, zsock_t *sock)
{
    if (!self->curve)
        return;
    zcert_apply(self->cert, sock);
    zsock_set_curve_server(sock, 1);
    zsock_set_zap_domain(sock, "lisa");
}

lisa_role_t
brk_auth_role(const brk_auth_t *self, zframe_t *frame)
{
    if (!self->curve)
        return LISA_ROLE_ALL;
    const char *key = frame ? zframe_meta(frame, "User-Id") : NULL;
    if (!key)
        return LISA_ROLE_NONE;
    return (lisa_role_t) (uintptr_t) zhashx_lookup(self->keys, key);
}

size_t
brk_auth_keys(const brk_auth_t *self)
{
    return self->keys ? zhashx_size(self->keys) : 0;
}
