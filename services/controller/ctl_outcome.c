/*
 * ctl_outcome: the exit-code table (agent codes from agt_exit.h).
 */
#include "ctl_outcome.h"

#include <stddef.h>

static const struct {
    int code;
    bool report;
    Lisa__FailureKind kind;
    const char *why;
} s_codes[] = {
    {0, false, LISA__FAILURE_KIND__FAILURE_NONE, "agent posted its result"},
    {1, true, LISA__FAILURE_KIND__FAILURE_INFRA, "agent internal error"},
    {2, true, LISA__FAILURE_KIND__FAILURE_INFRA, "agent misconfigured"},
    {3, true, LISA__FAILURE_KIND__FAILURE_INFRA,
     "agent could not reach the "
     "gateway"},
    {4, true, LISA__FAILURE_KIND__FAILURE_INFRA, "gateway refused the token"},
    {5, true, LISA__FAILURE_KIND__FAILURE_AGENT, "task malformed or unsafe"},
    {6, true, LISA__FAILURE_KIND__FAILURE_SANDBOX,
     "agent could not write "
     "the testbed"},
    {7, true, LISA__FAILURE_KIND__FAILURE_INFRA, "model calls kept failing"},
    {8, true, LISA__FAILURE_KIND__FAILURE_INFRA,
     "agent could not post its "
     "result"},
    {9, false, LISA__FAILURE_KIND__FAILURE_NONE, "attempt cancelled"},
    {10, false, LISA__FAILURE_KIND__FAILURE_NONE,
     "agent posted an error "
     "result"},
    {126, true, LISA__FAILURE_KIND__FAILURE_SANDBOX, "agent not executable"},
    {127, true, LISA__FAILURE_KIND__FAILURE_SANDBOX, "agent not found"},
};

ctl_outcome_t
ctl_outcome_of(const ctl_sandbox_t *sb)
{
    ctl_outcome_t o = {true, LISA__FAILURE_KIND__FAILURE_SANDBOX,
                       "sandbox failed"};
    if (sb->oom) {
        o.kind = LISA__FAILURE_KIND__FAILURE_OOM;
        o.why = "sandbox hit its memory limit";
        return o;
    }
    if (sb->deadline_exceeded) {
        o.kind = LISA__FAILURE_KIND__FAILURE_DEADLINE;
        o.why = "sandbox ran past its deadline";
        return o;
    }
    if (sb->exit_code < 0) {
        o.why = "sandbox ended while nobody watched (exit unknown)";
        return o;
    }
    for (size_t i = 0; i < sizeof s_codes / sizeof s_codes[0]; i++) {
        if (s_codes[i].code == sb->exit_code) {
            o.report = s_codes[i].report;
            o.kind = s_codes[i].kind;
            o.why = s_codes[i].why;
            return o;
        }
    }
    o.why = sb->exit_code > 128 ? "sandbox killed by a signal"
                                : "agent exited with an unknown code";
    return o;
}
