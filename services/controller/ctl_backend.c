/*
 * ctl_backend: helpers shared by the backends.
 */
#include "ctl_backend.h"

#include "lisa/lisa_mem.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void
ctl_backend_name(const char *rollout_id, unsigned attempt,
                 char out[CTL_NAME_MAX])
{
    char suffix[16];
    snprintf(suffix, sizeof suffix, "-a%u", attempt);
    char body[CTL_NAME_MAX];
    size_t n = 0;
    const char *p = rollout_id ? rollout_id : "";
    for (; *p && n < sizeof body - 1; p++) {
        char c = *p;
        if (c >= 'A' && c <= 'Z')
            c = (char) (c - 'A' + 'a');
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            c = '-';
        body[n++] = c;
    }
    body[n] = '\0';
    size_t room = CTL_NAME_MAX - 1 - strlen("lisa-") - strlen(suffix);
    if (strlen(rollout_id ? rollout_id : "") > room) {
        /* FNV-1a of the whole id keeps cut names distinct. */
        uint32_t h = 2166136261u;
        for (p = rollout_id; *p; p++)
            h = (h ^ (uint8_t) *p) * 16777619u;
        snprintf(body + room - 9, 10, "-%08x", h);
    }
    size_t bl = strlen(body), sl = strlen(suffix);
    if (5 + bl + sl > CTL_NAME_MAX - 1)
        bl = CTL_NAME_MAX - 1 - 5 - sl;
    memcpy(out, "lisa-", 5);
    memcpy(out + 5, body, bl);
    memcpy(out + 5 + bl, suffix, sl + 1);
}

char *
ctl_backend_escape(const char *s)
{
    size_t n = strlen(s);
    char *out = lisa_malloc(3 * n + 1);
    size_t o = 0;
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
            c == '~') {
            out[o++] = (char) c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return out;
}
