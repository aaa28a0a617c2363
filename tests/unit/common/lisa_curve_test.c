/*
 * lisa_curve tests: a key set from lisa_curve_keygen, and real ZeroMQ
 * CURVE sockets with czmq's zauth as the server's authenticator. The
 * first test is the usage example.
 */
#include "lisa/lisa_curve.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char s_dir[64];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/lisa_curve_test.XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
    zsys_init();
    zsys_set_logstream(NULL);
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

static void
s_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", s_dir, name);
}

/* A CURVE server with the key set's broker pair that admits the keys in
 * clients/ (zauth must outlive it). */
static zsock_t *
s_server(zactor_t **auth, int *port)
{
    char path[128];
    *auth = zactor_new(zauth, NULL);
    s_path(path, sizeof path, "clients");
    zstr_sendx(*auth, "CURVE", path, NULL);
    zsock_wait(*auth);
    s_path(path, sizeof path, "broker.cert_secret");
    zcert_t *cert = zcert_load(path);
    cr_assert_not_null(cert);
    zsock_t *s = zsock_new(ZMQ_ROUTER);
    zcert_apply(cert, s);
    zsock_set_curve_server(s, 1);
    *port = zsock_bind(s, "tcp://127.0.0.1:*");
    cr_assert_gt(*port, 0);
    zcert_destroy(&cert);
    return s;
}

/* The User-Id of the first message the server gets within `ms`, or "". */
static void
s_recv_user(zsock_t *server, int ms, char *out, size_t n)
{
    out[0] = '\0';
    zsock_set_rcvtimeo(server, ms);
    zmsg_t *m = zmsg_recv(server);
    if (!m)
        return;
    const char *u = zframe_meta(zmsg_last(m), "User-Id");
    snprintf(out, n, "%s", u ? u : "");
    zmsg_destroy(&m);
}

TestSuite(lisa_curve, .init = s_setup, .fini = s_teardown);

Test(lisa_curve, usage_keygen_use_and_connect)
{
    char err[256] = "", mine[128], broker[128];
    cr_assert_eq(lisa_curve_keygen(s_dir, err, sizeof err), LISA_OK, "%s", err);
    s_path(mine, sizeof mine, "gateway.cert_secret");
    s_path(broker, sizeof broker, "broker.cert");
    cr_assert_eq(lisa_curve_use(mine, broker, err, sizeof err), LISA_OK, "%s",
                 err);
    cr_assert(lisa_curve_enabled());

    zactor_t *auth = NULL;
    int port = 0;
    zsock_t *server = s_server(&auth, &port);
    zsock_t *client = zsock_new(ZMQ_DEALER);
    lisa_curve_client(client);
    cr_assert_eq(zsock_connect(client, "tcp://127.0.0.1:%d", port), 0);
    zstr_send(client, "hello");
    char user[64];
    s_recv_user(server, 5000, user, sizeof user);
    zcert_t *gw = zcert_load(mine);
    cr_assert_str_eq(user, zcert_public_txt(gw));
    zcert_destroy(&gw);
    zsock_destroy(&client);
    zsock_destroy(&server);
    zactor_destroy(&auth);
}

Test(lisa_curve, a_plain_or_unlisted_client_gets_through_to_nobody)
{
    char err[256] = "", path[128];
    cr_assert_eq(lisa_curve_keygen(s_dir, err, sizeof err), LISA_OK);
    zactor_t *auth = NULL;
    int port = 0;
    zsock_t *server = s_server(&auth, &port);
    /* no identity: a plain socket */
    zsock_t *plain = zsock_new(ZMQ_DEALER);
    lisa_curve_client(plain);
    zsock_connect(plain, "tcp://127.0.0.1:%d", port);
    zstr_send(plain, "hello");
    /* a CURVE key that clients/ does not list */
    zcert_t *stranger = zcert_new();
    zsock_t *other = zsock_new(ZMQ_DEALER);
    zcert_apply(stranger, other);
    s_path(path, sizeof path, "broker.cert");
    zcert_t *b = zcert_load(path);
    zsock_set_curve_serverkey(other, zcert_public_txt(b));
    zsock_connect(other, "tcp://127.0.0.1:%d", port);
    zstr_send(other, "hello");
    zsock_set_rcvtimeo(server, 700);
    zmsg_t *m = zmsg_recv(server);
    cr_assert_null(m, "a message got through");
    zcert_destroy(&b);
    zcert_destroy(&stranger);
    zsock_destroy(&plain);
    zsock_destroy(&other);
    zsock_destroy(&server);
    zactor_destroy(&auth);
}

Test(lisa_curve, key_set_layout_roles_and_modes)
{
    char err[256] = "", path[128];
    cr_assert_eq(lisa_curve_keygen(s_dir, err, sizeof err), LISA_OK);
    struct stat st;
    for (size_t i = 0; i < LISA_ROLES; i++) {
        const char *role = lisa_curve_role_name(lisa_curve_role_at(i));
        char name[64];
        snprintf(name, sizeof name, "clients/%s.cert", role);
        s_path(path, sizeof path, name);
        zcert_t *pub = zcert_load(path);
        cr_assert_not_null(pub, "%s", path);
        cr_assert_str_eq(zcert_meta(pub, "role"), role);
        snprintf(name, sizeof name, "%s.cert_secret", role);
        s_path(path, sizeof path, name);
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(st.st_mode & 077, 0, "%s is %o", path, st.st_mode);
        zcert_t *sec = zcert_load(path);
        cr_assert_str_eq(zcert_public_txt(sec), zcert_public_txt(pub));
        zcert_destroy(&pub);
        zcert_destroy(&sec);
    }
    s_path(path, sizeof path, "broker.cert_secret");
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 077, 0);
}

Test(lisa_curve, role_names)
{
    for (size_t i = 0; i < LISA_ROLES; i++) {
        lisa_role_t r = lisa_curve_role_at(i);
        cr_assert_eq(lisa_curve_role_parse(lisa_curve_role_name(r)), r);
    }
    cr_assert_eq(lisa_curve_role_parse("admin"), LISA_ROLE_NONE);
    cr_assert_eq(lisa_curve_role_parse(NULL), LISA_ROLE_NONE);
    cr_assert_eq(lisa_curve_role_at(LISA_ROLES), LISA_ROLE_NONE);
    cr_assert_str_eq(lisa_curve_role_name(LISA_ROLE_ALL), "none");
}

Test(lisa_curve, bad_identities_are_refused_with_a_reason)
{
    char err[256] = "", mine[128], broker[128];
    cr_assert_eq(lisa_curve_use(NULL, "", err, sizeof err), LISA_OK);
    cr_assert_not(lisa_curve_enabled());
    cr_assert_eq(lisa_curve_keygen(s_dir, err, sizeof err), LISA_OK);
    s_path(mine, sizeof mine, "trainer.cert_secret");
    s_path(broker, sizeof broker, "broker.cert");
    cr_assert_eq(lisa_curve_use(mine, "", err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "both"), "%s", err);
    cr_assert_eq(lisa_curve_use("", broker, err, sizeof err), LISA_INVALID);
    /* a missing file, a public certificate as one's own, garbage */
    s_path(mine, sizeof mine, "nope.cert_secret");
    cr_assert_eq(lisa_curve_use(mine, broker, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "nope.cert_secret"), "%s", err);
    s_path(mine, sizeof mine, "clients/trainer.cert");
    cr_assert_eq(lisa_curve_use(mine, broker, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "no secret key"), "%s", err);
    s_path(mine, sizeof mine, "junk");
    FILE *f = fopen(mine, "w");
    fputs("curve\n    public-key = \"short\"\n", f);
    fclose(f);
    cr_assert_eq(lisa_curve_use(mine, broker, err, sizeof err), LISA_INVALID);
    cr_assert_eq(lisa_curve_use(broker, mine, err, sizeof err), LISA_INVALID);
    cr_assert_not(lisa_curve_enabled());
    /* a directory is not a key file */
    cr_assert_eq(lisa_curve_use(s_dir, broker, err, sizeof err), LISA_INVALID);
    char longp[300];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    cr_assert_eq(lisa_curve_use(longp, broker, err, sizeof err), LISA_INVALID);
    cr_assert_eq(lisa_curve_keygen(longp, err, sizeof err), LISA_INVALID);
}
