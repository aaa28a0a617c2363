/*
 * ctl_k8s_job_json: the Job the k8s backend creates, built without an API
 * server. The first test is the usage example; the others hold the Job to
 * the isolation docs/deploy.md promises (the schema itself is checked by
 * the deploy tests through `lisa-controller --print-job`).
 */
#include "ctl_backend.h"
#include "ctl_k8s.h"
#include "lisa/lisa_clock.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static ctl_spec_t
s_spec(char name[CTL_NAME_MAX], uint64_t now)
{
    ctl_backend_name("R_7", 2, name);
    ctl_spec_t sp = {.name = name,
                     .controller_id = "ctl-a",
                     .run_id = "run/1",
                     .rollout_id = "R_7",
                     .attempt = 2,
                     .token = "tok",
                     .created_ms = now,
                     .deadline_ms = now + 120000,
                     .cpu_millis = 500,
                     .memory_bytes = 1u << 30,
                     .pids = 64,
                     .disk_bytes = 1u << 20};
    return sp;
}

static const ctl_k8s_cfg_t s_cfg = {.controller_id = "ctl-a",
                                    .image = "lisa-sandbox:dev",
                                    .gateway_url = "http://gw:7180",
                                    .ttl_s = 60};

Test(ctl_k8s, usage)
{
    char name[CTL_NAME_MAX];
    ctl_spec_t sp = s_spec(name, lisa_clock_wall_ms());
    char *text = ctl_k8s_job_json(&s_cfg, &sp);
    cr_assert_not_null(text);
    json_t *job = json_loads(text, 0, NULL);
    free(text);
    cr_assert_not_null(job);
    cr_assert_str_eq(json_string_value(json_object_get(job, "kind")), "Job");
    json_t *meta = json_object_get(job, "metadata");
    cr_assert_str_eq(json_string_value(json_object_get(meta, "name")),
                     "lisa-r-7-a2");
    json_t *spec = json_object_get(job, "spec");
    cr_assert_eq(json_integer_value(json_object_get(spec, "backoffLimit")), 0);
    cr_assert_eq(
        json_integer_value(json_object_get(spec, "ttlSecondsAfterFinished")),
        60);
    json_int_t active =
        json_integer_value(json_object_get(spec, "activeDeadlineSeconds"));
    cr_assert(active >= 119 && active <= 121, "%lld", (long long) active);
    json_decref(job);
}

Test(ctl_k8s, pod_is_isolated)
{
    char name[CTL_NAME_MAX];
    ctl_spec_t sp = s_spec(name, lisa_clock_wall_ms());
    char *text = ctl_k8s_job_json(&s_cfg, &sp);
    json_t *job = json_loads(text, 0, NULL);
    free(text);
    json_t *pod = json_object_get(
        json_object_get(json_object_get(job, "spec"), "template"), "spec");
    cr_assert(
        json_is_false(json_object_get(pod, "automountServiceAccountToken")));
    cr_assert(json_is_false(json_object_get(pod, "enableServiceLinks")));
    cr_assert_str_eq(json_string_value(json_object_get(pod, "restartPolicy")),
                     "Never");
    json_t *c = json_array_get(json_object_get(pod, "containers"), 0);
    json_t *sc = json_object_get(c, "securityContext");
    cr_assert(json_is_true(json_object_get(sc, "readOnlyRootFilesystem")));
    cr_assert(json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
    cr_assert_str_eq(
        json_string_value(json_array_get(
            json_object_get(json_object_get(sc, "capabilities"), "drop"), 0)),
        "ALL");
    json_t *lim = json_object_get(json_object_get(c, "resources"), "limits");
    cr_assert_str_eq(json_string_value(json_object_get(lim, "cpu")), "500m");
    cr_assert_str_eq(json_string_value(json_object_get(lim, "memory")),
                     "1073741824");
    /* The agent gets the gateway URL and its token, nothing else secret. */
    json_t *env = json_object_get(c, "env");
    size_t i;
    json_t *e;
    int seen = 0;
    json_array_foreach(env, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        const char *v = json_string_value(json_object_get(e, "value"));
        if (strcmp(n, "LISA_GATEWAY_URL") == 0)
            seen += strcmp(v, "http://gw:7180") == 0;
        if (strcmp(n, "LISA_ATTEMPT_TOKEN") == 0)
            seen += strcmp(v, "tok") == 0;
    }
    cr_assert_eq(seen, 2);
    /* Label values are legal: '/' in the run id became '-'. */
    json_t *labels =
        json_object_get(json_object_get(job, "metadata"), "labels");
    cr_assert_str_eq(json_string_value(json_object_get(labels, "lisa/run")),
                     "run-1");
    /* The NetworkPolicy lisa-sandbox selects the pods by their component. */
    json_t *pl = json_object_get(
        json_object_get(
            json_object_get(json_object_get(job, "spec"), "template"),
            "metadata"),
        "labels");
    cr_assert_str_eq(
        json_string_value(json_object_get(pl, "app.kubernetes.io/component")),
        "sandbox");
    /* An eviction fails the Job at once (the broker retries). */
    json_t *rule = json_array_get(
        json_object_get(
            json_object_get(json_object_get(job, "spec"), "podFailurePolicy"),
            "rules"),
        0);
    cr_assert_str_eq(json_string_value(json_object_get(rule, "action")),
                     "FailJob");
    json_decref(job);
}

Test(ctl_k8s, missing_gateway_or_image_is_refused)
{
    char name[CTL_NAME_MAX];
    ctl_spec_t sp = s_spec(name, lisa_clock_wall_ms());
    ctl_k8s_cfg_t c = s_cfg;
    c.gateway_url = "";
    cr_assert_null(ctl_k8s_job_json(&c, &sp));
    c = s_cfg;
    c.image = NULL;
    cr_assert_null(ctl_k8s_job_json(&c, &sp));
    cr_assert_null(ctl_k8s_job_json(NULL, &sp));
    cr_assert_null(ctl_k8s_job_json(&s_cfg, NULL));
}

Test(ctl_k8s, packages_mode_names_the_proxy)
{
    char name[CTL_NAME_MAX];
    ctl_spec_t sp = s_spec(name, lisa_clock_wall_ms());
    ctl_k8s_cfg_t cfg = s_cfg;
    cfg.proxy_url = "http://gw:7181";
    char *text = ctl_k8s_job_json(&cfg, &sp);
    json_t *job = json_loads(text, 0, NULL);
    free(text);
    json_t *pod = json_object_get(
        json_object_get(json_object_get(job, "spec"), "template"), "spec");
    json_t *env = json_object_get(
        json_array_get(json_object_get(pod, "containers"), 0), "env");
    size_t i;
    json_t *e;
    int seen = 0;
    json_array_foreach(env, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        const char *v = json_string_value(json_object_get(e, "value"));
        if (strcmp(n, "LISA_SANDBOX_NETWORK") == 0)
            seen += strcmp(v, "packages") == 0;
        if (strcmp(n, "LISA_PROXY_URL") == 0)
            seen += strcmp(v, "http://gw:7181") == 0;
    }
    cr_assert_eq(seen, 2);
    json_decref(job);
    /* without a proxy the sandbox is told nothing of one */
    text = ctl_k8s_job_json(&s_cfg, &sp);
    cr_assert_null(strstr(text, "LISA_PROXY_URL"));
    cr_assert_null(strstr(text, "LISA_SANDBOX_NETWORK"));
    free(text);
}
