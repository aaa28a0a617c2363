/*
 * agt_gateway: libcurl easy, JSON in and out, bounded bodies.
 */
#include "agt_gateway.h"

#include "agt_text.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct agt_gateway {
    CURL *curl;
    char *base;
    char *socket;
    char *auth;
    size_t max_reply;
};

long
agt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long) ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

agt_gateway_t *
agt_gateway_new(const agt_gateway_cfg_t *cfg)
{
    if (!cfg || !cfg->token || !cfg->max_reply_bytes)
        return NULL;
    bool sock = cfg->unix_socket && *cfg->unix_socket;
    if (!sock && (!cfg->base_url || !*cfg->base_url))
        return NULL;
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    agt_gateway_t *gw = lisa_calloc(1, sizeof *gw);
    gw->curl = c;
    const char *base =
        cfg->base_url && *cfg->base_url ? cfg->base_url : "http://localhost";
    gw->base = lisa_strdup(base);
    size_t bl = strlen(gw->base);
    while (bl > 0 && gw->base[bl - 1] == '/')
        gw->base[--bl] = '\0';
    gw->socket = sock ? lisa_strdup(cfg->unix_socket) : NULL;
    size_t n = strlen(cfg->token) + 32;
    gw->auth = lisa_malloc(n);
    snprintf(gw->auth, n, "Authorization: Bearer %s", cfg->token);
    gw->max_reply = cfg->max_reply_bytes;
    return gw;
}

void
agt_gateway_destroy(agt_gateway_t **gw)
{
    if (!gw || !*gw)
        return;
    curl_easy_cleanup((*gw)->curl);
    lisa_free(&(*gw)->base);
    lisa_free(&(*gw)->socket);
    if ((*gw)->auth) {
        memset((*gw)->auth, 0, strlen((*gw)->auth));
        lisa_free(&(*gw)->auth);
    }
    lisa_free(gw);
}

void
agt_reply_clear(agt_reply_t *rep)
{
    if (!rep)
        return;
    json_decref(rep->body);
    rep->body = NULL;
}

static size_t
s_on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    agt_sb_t *sb = ud;
    size_t n = size * nmemb;
    agt_sb_add(sb, ptr, n);
    /* Returning less than n makes curl abort the transfer. */
    return sb->truncated ? 0 : n;
}

/* Status code -> return code. */
static lisa_rc_t
s_rc_of_status(long st)
{
    static const struct {
        long lo, hi;
        lisa_rc_t rc;
    } map[] = {
        {200, 299, LISA_OK},           {401, 401, LISA_UNAUTHORIZED},
        {403, 403, LISA_UNAUTHORIZED}, {404, 404, LISA_NOTFOUND},
        {408, 408, LISA_UNAVAILABLE},  {409, 410, LISA_CONFLICT},
        {413, 413, LISA_TOOLARGE},     {429, 429, LISA_UNAVAILABLE},
        {400, 499, LISA_INVALID},      {500, 599, LISA_UNAVAILABLE},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (st >= map[i].lo && st <= map[i].hi)
            return map[i].rc;
    return LISA_UNAVAILABLE;
}

lisa_rc_t
agt_gateway_call(agt_gateway_t *gw, const char *method, const char *path,
                 json_t *body, unsigned turn, long timeout_ms, agt_reply_t *rep)
{
    memset(rep, 0, sizeof *rep);
    lisa_rc_t rc = LISA_OK;
    char *url = NULL, *payload = NULL;
    struct curl_slist *hdr = NULL;
    agt_sb_t sb;
    agt_sb_init(&sb, gw->max_reply);
    CURL *c = gw->curl;
    curl_easy_reset(c);

    size_t n = strlen(gw->base) + strlen(path) + 1;
    url = lisa_malloc(n);
    snprintf(url, n, "%s%s", gw->base, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (gw->socket)
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, gw->socket);
    hdr = curl_slist_append(hdr, gw->auth);
    hdr = curl_slist_append(hdr, "Accept: application/json");
    char turn_hdr[48];
    if (turn) {
        snprintf(turn_hdr, sizeof turn_hdr, "X-Lisa-Turn: %u", turn);
        hdr = curl_slist_append(hdr, turn_hdr);
    }
    if (body) {
        payload = json_dumps(body, JSON_COMPACT);
        if (!payload) {
            snprintf(rep->error, sizeof rep->error, "cannot encode body");
            rc = LISA_ERR;
            goto out;
        }
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t) strlen(payload));
    }
    if (strcmp(method, "POST") == 0 && !body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "{}");
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
    }
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sb);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     timeout_ms > 0 && timeout_ms < 10000 ? timeout_ms
                                                          : 10000L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");

    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK) {
        if (sb.truncated) {
            snprintf(rep->error, sizeof rep->error,
                     "answer larger than %zu bytes", gw->max_reply);
            rc = LISA_TOOLARGE;
        } else {
            snprintf(rep->error, sizeof rep->error, "%s",
                     curl_easy_strerror(cc));
            rc = cc == CURLE_OPERATION_TIMEDOUT ? LISA_TIMEOUT
                                                : LISA_UNAVAILABLE;
        }
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &rep->status);
    rc = s_rc_of_status(rep->status);
    if (sb.len) {
        json_error_t jerr;
        json_t *j = json_loadb(sb.data, sb.len, 0, &jerr);
        if (json_is_object(j)) {
            rep->body = j;
        } else {
            json_decref(j);
            if (rc == LISA_OK) {
                snprintf(rep->error, sizeof rep->error,
                         "answer is not a JSON object");
                rc = LISA_INVALID;
                goto out;
            }
        }
    } else if (rc == LISA_OK) {
        rep->body = json_object();
    }
    if (rc != LISA_OK) {
        json_t *e = json_object_get(rep->body, "error");
        const char *msg = json_string_value(json_object_get(e, "message"));
        const char *code = json_string_value(json_object_get(e, "code"));
        snprintf(rep->error, sizeof rep->error, "HTTP %ld: %.200s", rep->status,
                 msg ? msg : "(no message)");
        snprintf(rep->err_code, sizeof rep->err_code, "%s", code ? code : "");
    }
out:
    curl_slist_free_all(hdr);
    free(payload); /* json_dumps allocates with malloc */
    lisa_free(&url);
    agt_sb_free(&sb);
    return rc;
}

lisa_rc_t
agt_gateway_call_retry(agt_gateway_t *gw, const char *method, const char *path,
                       json_t *body, unsigned turn, long timeout_ms,
                       unsigned attempts, long deadline_ms,
                       const atomic_bool *cancel, agt_reply_t *rep)
{
    long backoff = 250;
    lisa_rc_t rc = LISA_UNAVAILABLE;
    memset(rep, 0, sizeof *rep);
    for (unsigned i = 0; i < (attempts ? attempts : 1); i++) {
        long t = timeout_ms;
        if (deadline_ms) {
            long left = deadline_ms - agt_now_ms();
            if (left <= 0) {
                if (i == 0)
                    snprintf(rep->error, sizeof rep->error,
                             "deadline passed before the call");
                return i == 0 ? LISA_TIMEOUT : rc;
            }
            if (left < t)
                t = left;
        }
        if (i > 0)
            agt_reply_clear(rep);
        rc = agt_gateway_call(gw, method, path, body, turn, t, rep);
        if (rc != LISA_UNAVAILABLE && rc != LISA_TIMEOUT)
            return rc;
        if (i + 1 >= attempts)
            break;
        lisa_log_warn("gateway %s %s: %s (try %u of %u)", method, path,
                      rep->error, i + 1, attempts);
        long sleep_until = agt_now_ms() + backoff;
        if (deadline_ms && sleep_until > deadline_ms)
            break;
        while (agt_now_ms() < sleep_until) {
            if (cancel && atomic_load(cancel))
                return rc;
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        backoff = backoff * 2 > 8000 ? 8000 : backoff * 2;
    }
    return rc;
}
