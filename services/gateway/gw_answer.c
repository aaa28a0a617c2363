/*
 * gw_answer: answering and counting inbound requests (see the header).
 */
#include "gw_answer.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *
s_status_label(unsigned status)
{
    static char buf[8][8];
    static unsigned k;
    char *b = buf[k++ % 8];
    snprintf(b, 8, "%u", status);
    return b;
}

void
gw_answer_count(gw_metrics_t *m, const char *route, unsigned status,
                int64_t t0_us)
{
    char labels[96];
    size_t rn = strnlen(route, 60);
    /* route="R",code="NNN" and route="R", without printf (every call) */
    memcpy(labels, "route=\"", 7);
    memcpy(labels + 7, route, rn);
    size_t at = 7 + rn;
    labels[at++] = '"';
    if (status >= 100 && status < 1000) {
        memcpy(labels + at, ",code=\"", 7);
        at += 7;
        labels[at++] = (char) ('0' + status / 100);
        labels[at++] = (char) ('0' + status / 10 % 10);
        labels[at++] = (char) ('0' + status % 10);
        labels[at++] = '"';
        labels[at] = '\0';
    } else
        snprintf(labels + at, sizeof labels - at, ",code=\"%s\"",
                 s_status_label(status));
    gw_metrics_add(m, "lisa_gateway_requests_total", labels, 1);
    labels[8 + rn] = '\0';
    gw_metrics_observe(m, "lisa_gateway_request_seconds", labels,
                       (double) (zclock_usecs() - t0_us) / 1e6);
}

void
gw_answer_json(gw_metrics_t *m, const gw_req_t *r, unsigned status,
               const char *body, size_t len)
{
    (void) lisa_http_req_respond(r->req, status, "application/json", body, len);
    gw_answer_count(m, r->route, status, r->t0_us);
}

void
gw_answer_err(gw_metrics_t *m, uint64_t retry_after_s, const gw_req_t *r,
              const gw_err_t *err)
{
    if (err->status == 429 || err->status == 503) {
        char ra[24];
        snprintf(ra, sizeof ra, "%llu", (unsigned long long) retry_after_s);
        lisa_http_req_add_header(r->req, "Retry-After", ra);
    }
    char *body = gw_err_body(err);
    gw_answer_json(m, r, (unsigned) err->status, body, strlen(body));
    free(body);
}

/* Maps a broker reply code to an HTTP status. */
static int
s_code_status(int code)
{
    switch (code) {
    case LISA__CODE__CODE_OK:
        return 200;
    case LISA__CODE__CODE_INVALID:
        return 400;
    case LISA__CODE__CODE_NOT_FOUND:
        return 404;
    case LISA__CODE__CODE_CONFLICT:
        return 409;
    case LISA__CODE__CODE_TIMEOUT:
        return 504;
    case LISA__CODE__CODE_BUSY:
        return 429;
    case LISA__CODE__CODE_UNAVAILABLE:
        return 503;
    case LISA__CODE__CODE_UNAUTHORIZED:
        return 403;
    case LISA__CODE__CODE_TOO_LARGE:
        return 413;
    default:
        return 502;
    }
}

void
gw_answer_broker_err(gw_metrics_t *m, const char *what, lisa_rc_t rc,
                     const Lisa__Reply *rep, gw_err_t *err)
{
    char labels[64];
    snprintf(labels, sizeof labels, "request=\"%s\"", what);
    gw_metrics_add(m, "lisa_gateway_broker_errors_total", labels, 1);
    if (rc != LISA_OK || !rep)
        gw_err_set(err, LISA_UNAVAILABLE, 503, "server_error",
                   "broker_unavailable", NULL,
                   "the broker did not answer %s (%s); retry later", what,
                   lisa_rc_str(rc));
    else
        gw_err_set(err, LISA_ERR, s_code_status(rep->code),
                   rep->code == LISA__CODE__CODE_UNAUTHORIZED
                       ? "permission_error"
                       : "invalid_request_error",
                   "broker_error", NULL, "%s: %s", what,
                   rep->error && rep->error[0] ? rep->error : "refused");
}
