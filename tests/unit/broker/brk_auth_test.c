/*
 * brk_auth tests: a key set from lisa_curve_keygen, the broker's side of
 * CURVE on a real ROUTER, clients with each role's identity. The first
 * test is the usage example.
 */
#include "brk_auth.h"
#include "lisa/lisa_curve.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static char s_dir[64];
static char s_cert[128], s_clients[128];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/brk_auth_test.XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
    zsys_init();
    zsys_set_logstream(NULL);
    char err[256] = "";
    cr_assert_eq(lisa_curve_keygen(s_dir, err, sizeof err), LISA_OK, "%s", err);
    snprintf(s_cert, sizeof s_cert, "%s/broker.cert_secret", s_dir);
    snprintf(s_clients, sizeof s_clients, "%s/clients", s_dir);
}

static void
s_teardown(void)
{
    lisa_curve_forget();
    zdir_t *d = zdir_new(s_dir, NULL);
    if (d)
        zdir_remove(d, true);
    zdir_destroy(&d);
}

static brk_config_t
s_cfg(const char *curve, const char *cert, const char *clients)
{
    brk_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.curve = (char *) (uintptr_t) curve;
    cfg.curve_cert = (char *) (uintptr_t) cert;
    cfg.curve_clients = (char *) (uintptr_t) clients;
    return cfg;
}

/* Sends one frame as `role` (NULL: plain) to the server and returns the
 * role the broker sees, or -1 when nothing arrives within `ms`. */
static int
s_role_seen(brk_auth_t *auth, zsock_t *server, int port, const char *role,
            int ms)
{
    char err[256] = "", mine[160], broker[160];
    if (role) {
        snprintf(mine, sizeof mine, "%s/%s.cert_secret", s_dir, role);
        snprintf(broker, sizeof broker, "%s/broker.cert", s_dir);
        cr_assert_eq(lisa_curve_use(mine, broker, err, sizeof err), LISA_OK,
                     "%s", err);
    } else {
        lisa_curve_forget();
    }
    zsock_t *client = zsock_new(ZMQ_DEALER);
    lisa_curve_client(client);
    zsock_connect(client, "tcp://127.0.0.1:%d", port);
    zstr_send(client, "hi");
    zsock_set_rcvtimeo(server, ms);
    zmsg_t *m = zmsg_recv(server);
    int seen = m ? (int) brk_auth_role(auth, zmsg_last(m)) : -1;
    zmsg_destroy(&m);
    zsock_destroy(&client);
    return seen;
}

static zsock_t *
s_server(brk_auth_t *auth, int *port)
{
    zsock_t *s = zsock_new(ZMQ_ROUTER);
    brk_auth_server(auth, s);
    *port = zsock_bind(s, "tcp://127.0.0.1:*");
    cr_assert_gt(*port, 0);
    return s;
}

TestSuite(brk_auth, .init = s_setup, .fini = s_teardown);

Test(brk_auth, usage_each_key_has_its_role)
{
    brk_config_t cfg = s_cfg("on", s_cert, s_clients);
    brk_auth_t *auth = brk_auth_new(&cfg);
    cr_assert_not_null(auth);
    cr_assert(brk_auth_curve(auth));
    cr_assert_eq(brk_auth_keys(auth), LISA_ROLES);
    int port = 0;
    zsock_t *server = s_server(auth, &port);
    for (size_t i = 0; i < LISA_ROLES; i++) {
        lisa_role_t r = lisa_curve_role_at(i);
        cr_assert_eq(
            s_role_seen(auth, server, port, lisa_curve_role_name(r), 5000),
            (int) r, "%s", lisa_curve_role_name(r));
    }
    /* a plain client is not heard at all */
    cr_assert_eq(s_role_seen(auth, server, port, NULL, 500), -1);
    zsock_destroy(&server);
    brk_auth_destroy(&auth);
    brk_auth_destroy(&auth);
}

Test(brk_auth, curve_off_is_plain_and_every_role)
{
    brk_config_t cfg = s_cfg("off", "", "");
    brk_auth_t *auth = brk_auth_new(&cfg);
    cr_assert_not_null(auth);
    cr_assert_not(brk_auth_curve(auth));
    int port = 0;
    zsock_t *server = s_server(auth, &port);
    cr_assert_eq(s_role_seen(auth, server, port, NULL, 5000),
                 (int) LISA_ROLE_ALL);
    zsock_destroy(&server);
    brk_auth_destroy(&auth);
}

Test(brk_auth, refuses_to_start_without_keys)
{
    brk_config_t none = s_cfg("on", "", "");
    cr_assert_null(brk_auth_new(&none));
    brk_config_t no_clients = s_cfg("on", s_cert, "");
    cr_assert_null(brk_auth_new(&no_clients));
    char missing[160];
    snprintf(missing, sizeof missing, "%s/nowhere", s_dir);
    brk_config_t bad_dir = s_cfg("on", s_cert, missing);
    cr_assert_null(brk_auth_new(&bad_dir));
    /* a public certificate is not the broker's pair */
    char pub[160];
    snprintf(pub, sizeof pub, "%s/clients/gateway.cert", s_dir);
    brk_config_t public_only = s_cfg("on", pub, s_clients);
    cr_assert_null(brk_auth_new(&public_only));
    /* a directory of certificates none of which has a role */
    char empty[160];
    snprintf(empty, sizeof empty, "%s/norole", s_dir);
    zsys_dir_create("%s", empty);
    zcert_t *c = zcert_new();
    char path[200];
    snprintf(path, sizeof path, "%s/x.cert", empty);
    zcert_save_public(c, path);
    zcert_destroy(&c);
    brk_config_t norole = s_cfg("on", s_cert, empty);
    cr_assert_null(brk_auth_new(&norole));
}

Test(brk_auth, a_key_without_a_known_role_may_do_nothing)
{
    /* an admitted key whose certificate names no known role */
    zcert_t *c = zcert_new();
    zcert_set_meta(c, "role", "admin");
    char path[200];
    snprintf(path, sizeof path, "%s/clients/admin.cert", s_dir);
    zcert_save_public(c, path);
    snprintf(path, sizeof path, "%s/admin.cert_secret", s_dir);
    zcert_save_secret(c, path);
    zcert_destroy(&c);
    brk_config_t cfg = s_cfg("on", s_cert, s_clients);
    brk_auth_t *auth = brk_auth_new(&cfg);
    cr_assert_not_null(auth);
    cr_assert_eq(brk_auth_keys(auth), LISA_ROLES);
    int port = 0;
    zsock_t *server = s_server(auth, &port);
    cr_assert_eq(s_role_seen(auth, server, port, "admin", 5000),
                 (int) LISA_ROLE_NONE);
    cr_assert_eq(s_role_seen(auth, server, port, "reward", 5000),
                 (int) LISA_ROLE_REWARD);
    zsock_destroy(&server);
    brk_auth_destroy(&auth);
}
