/*
 * trn_traj: span chains -> training sequences, through lisa_spanseq (see
 * trn_traj.h).
 */
#include "trn_traj.h"

#include "lisa/lisa_log.h"

#include <stdio.h>

lisa_rc_t
trn_traj_build(Lisa__Span *const *spans, size_t n, size_t expected,
               size_t max_len, trn_traj_t *out, char *err, size_t errlen)
{
    char why[256] = "";
    lisa_rc_t rc =
        lisa_spanseq_build(spans, n, expected, max_len, out, why, sizeof why);
    if (rc != LISA_OK) {
        lisa_log_warn("traj: %s", why);
        if (err && errlen)
            snprintf(err, errlen, "%s", why);
    }
    return rc;
}

void
trn_traj_free(trn_traj_t *t)
{
    lisa_spanseq_free(t);
}
