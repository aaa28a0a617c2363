"""Kubernetes manifests of k8s/ against the Kubernetes OpenAPI schema.

Every manifest file and every rendered overlay (local, production,
multinode) is validated offline with kubernetes-validate in strict mode
(unknown fields are errors) for the oldest and the newest Kubernetes
version we support. The sandbox Job template, which the controller's k8s
backend fills in per attempt, is checked for the properties the sandbox's
isolation depends on; where `lisa-controller` can print the Job it would
create, that Job is validated the same way.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

sys.path.insert(0, os.path.dirname(__file__))
import kustomize_lite  # noqa: E402

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                  "..", "..", "..")))
BIN = os.path.join(os.environ.get("LISA_BINARY_DIR", ""), "bin")
K8S = os.path.join(SRC, "k8s")
# Oldest supported (podFailurePolicy GA, Job success tracking) and newest.
VERSIONS = ["1.31.0", kubernetes_validate.latest_version()]
OVERLAYS = ["local", "production", "multinode"]


def _manifest_files():
    out = []
    for p in sorted(glob.glob(os.path.join(K8S, "**", "*.yaml"),
                              recursive=True)):
        if os.path.basename(p) != "kustomization.yaml":
            out.append(p)
    return out


def _docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _validate(obj, version):
    # Raises ValidationError with the path of the first bad field.
    kubernetes_validate.validate(obj, version, strict=True)


def _by(objs, kind, name):
    hits = [o for o in objs
            if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} objects"
    return hits[0]


def _pod_specs(objs):
    for o in objs:
        spec = o.get("spec", {})
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield o, spec["template"]["spec"]


def test_usage_render_and_validate_an_overlay():
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", "local"))
    kinds = {o["kind"] for o in objs}
    assert {"Namespace", "StatefulSet", "Deployment", "Job", "Role",
            "NetworkPolicy"} <= kinds
    for o in objs:
        _validate(o, VERSIONS[0])


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_file_validates(version):
    files = _manifest_files()
    assert len(files) >= 10, files
    n = 0
    for path in files:
        for obj in _docs(path):
            try:
                _validate(obj, version)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{os.path.relpath(path, SRC)}: "
                            f"{obj['kind']}/{obj['metadata']['name']}: {e}")
            n += 1
    assert n >= 15


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_overlay_validates(overlay, version):
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", overlay))
    assert objs
    for obj in objs:
        try:
            _validate(obj, version)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{overlay}: {obj['kind']}/"
                        f"{obj['metadata']['name']}: {e}")
    # One namespace for everything namespaced, and it is the overlay's own.
    nss = {o["metadata"].get("namespace") for o in objs
           if o["kind"] != "Namespace"}
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"]
    assert len(nss) == 1 and nss == set(names), (nss, names)


def test_validator_rejects_what_kubernetes_rejects():
    # The oracle is live: a misspelt field, a wrong type and a Job without
    # a template all fail, so the passes above mean something.
    job = _docs(os.path.join(K8S, "base", "sandbox-job-template.yaml"))[0]
    bad = yaml.safe_load(yaml.safe_dump(job))
    bad["spec"]["backofLimit"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(bad, VERSIONS[0])
    bad = yaml.safe_load(yaml.safe_dump(job))
    bad["spec"]["activeDeadlineSeconds"] = "thirty minutes"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(bad, VERSIONS[0])
    bad = yaml.safe_load(yaml.safe_dump(job))
    del bad["spec"]["template"]
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(bad, VERSIONS[0])


def _check_sandbox_job(job):
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] > 0
    assert spec["ttlSecondsAfterFinished"] >= 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    labels = spec["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "sandbox"
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert not sc.get("privileged")
        lim = c["resources"]["limits"]
        assert "cpu" in lim and "memory" in lim
        env = {e["name"] for e in c.get("env", [])}
        # Only the gateway endpoint and the attempt token reach a sandbox.
        assert "LISA_ATTEMPT_TOKEN" in env
        assert not [e for e in env if "BROKER" in e or e == "LISA_TOKEN_KEY"]


def test_sandbox_job_template_isolation():
    job = _docs(os.path.join(K8S, "base", "sandbox-job-template.yaml"))[0]
    _check_sandbox_job(job)
    # The rendered ConfigMap carries the same template to the controller.
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", "production"))
    cm = _by(objs, "ConfigMap", "lisa-sandbox-job")
    in_cm = yaml.safe_load(cm["data"]["job.yaml"])
    assert in_cm == job
    for v in VERSIONS:
        _validate(in_cm, v)


def test_network_policy_lets_sandboxes_reach_only_the_gateway():
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", "production"))
    pol = _by(objs, "NetworkPolicy", "lisa-sandbox")
    job = yaml.safe_load(_by(objs, "ConfigMap",
                             "lisa-sandbox-job")["data"]["job.yaml"])
    sel = pol["spec"]["podSelector"]["matchLabels"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in sel.items())
    assert set(pol["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert pol["spec"]["ingress"] == []
    gw = _by(objs, "Deployment", "lisa-gateway")
    gw_labels = gw["spec"]["template"]["metadata"]["labels"]
    gw_port = gw["spec"]["template"]["spec"]["containers"][0]["ports"][0]
    reach = []
    for rule in pol["spec"]["egress"]:
        ports = {(p["protocol"], p["port"]) for p in rule["ports"]}
        for peer in rule["to"]:
            if "namespaceSelector" in peer:
                # Cluster DNS only, so the gateway's name resolves.
                assert peer["podSelector"]["matchLabels"] == {
                    "k8s-app": "kube-dns"}
                assert ports <= {("UDP", 53), ("TCP", 53)}
            else:
                want = peer["podSelector"]["matchLabels"]
                assert all(gw_labels.get(k) == v for k, v in want.items())
                assert ports == {("TCP", gw_port["containerPort"])}
                reach.append("gateway")
                # No other workload carries the gateway's selector labels.
                for o, _ in _pod_specs(objs):
                    tl = o["spec"]["template"]["metadata"]["labels"]
                    if o is not gw:
                        assert not all(tl.get(k) == v
                                       for k, v in want.items()), o
    assert reach == ["gateway"]


def test_controller_rbac_is_jobs_and_pods_in_one_namespace():
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", "production"))
    assert not [o for o in objs if o["kind"].startswith("Cluster")]
    role = _by(objs, "Role", "lisa-controller")
    for rule in role["rules"]:
        assert set(rule["resources"]) <= {"jobs", "pods", "pods/log"}
        assert "*" not in rule["verbs"] and "escalate" not in rule["verbs"]
    binding = _by(objs, "RoleBinding", "lisa-controller")
    ns = role["metadata"]["namespace"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "Role", "name": "lisa-controller"}
    assert binding["subjects"] == [{"kind": "ServiceAccount",
                                    "name": "lisa-controller",
                                    "namespace": ns}]
    ctl = _by(objs, "Deployment", "lisa-controller")
    assert ctl["spec"]["template"]["spec"]["serviceAccountName"] == \
        "lisa-controller"
    # Every other workload runs without an API token.
    for o, pod in _pod_specs(objs):
        if o is not ctl:
            assert pod.get("automountServiceAccountToken") is False, \
                o["metadata"]["name"]


def test_every_pod_runs_as_non_root_with_limits():
    for overlay in OVERLAYS:
        objs = kustomize_lite.render(os.path.join(K8S, "overlays", overlay))
        for o, pod in _pod_specs(objs):
            assert pod["securityContext"]["runAsNonRoot"] is True
            for c in pod["containers"]:
                assert c["securityContext"]["allowPrivilegeEscalation"] is \
                    False
                assert c["resources"]["limits"]["memory"]


def test_production_meets_restricted_pod_security():
    """The production namespace enforces the `restricted` level; every pod
    (and the sandbox Job the controller creates) must pass it."""
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", "production"))
    ns = _by(objs, "Namespace", "lisa")
    assert ns["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] == "restricted"
    job = yaml.safe_load(_by(objs, "ConfigMap",
                             "lisa-sandbox-job")["data"]["job.yaml"])
    pods = [(o["metadata"]["name"], pod) for o, pod in _pod_specs(objs)]
    pods.append(("sandbox", job["spec"]["template"]["spec"]))
    allowed = {"configMap", "emptyDir", "persistentVolumeClaim", "secret",
               "projected", "downwardAPI", "csi", "ephemeral", "name"}
    for name, pod in pods:
        sc = pod["securityContext"]
        assert sc["runAsNonRoot"] is True, name
        assert sc["seccompProfile"]["type"] == "RuntimeDefault", name
        for k in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(k), (name, k)
        for v in pod.get("volumes", []):
            assert set(v) <= allowed, (name, v)
        for c in pod["containers"]:
            csc = c["securityContext"]
            assert csc["allowPrivilegeEscalation"] is False, name
            assert csc["capabilities"]["drop"] == ["ALL"], name
            assert not csc.get("capabilities", {}).get("add"), name
            assert not csc.get("privileged"), name
            assert not c.get("ports") or all(
                "hostPort" not in p for p in c["ports"]), name


def test_broker_store_is_on_a_persistent_volume():
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", "production"))
    sts = _by(objs, "StatefulSet", "lisa-broker")
    claim = sts["spec"]["volumeClaimTemplates"][0]
    mounts = {m["name"]: m["mountPath"] for m in
              sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in
           sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert mounts[claim["metadata"]["name"]] == env["LISA_BROKER_DATA"]
    assert sts["spec"]["replicas"] == 1


def _trainer_container(objs):
    job = _by(objs, "Job", "lisa-trainer")
    return job, job["spec"]["template"]["spec"]["containers"][0]


def test_trainer_jobs_gpus_and_ranks():
    prod = kustomize_lite.render(os.path.join(K8S, "overlays", "production"))
    job, c = _trainer_container(prod)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert "completionMode" not in job["spec"]

    multi = kustomize_lite.render(os.path.join(K8S, "overlays", "multinode"))
    job, c = _trainer_container(multi)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] >= 2
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    env = {e["name"]: e for e in c["env"]}
    rank = env["LISA_TRN_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    # The annotation Kubernetes sets to JOB_COMPLETION_INDEX.
    assert "batch.kubernetes.io/job-completion-index" in rank
    assert int(env["LISA_TRN_WORLD"]["value"]) == 4 * spec["completions"]
    svc = _by(multi, "Service", "lisa-trainer")
    assert job["spec"]["template"]["spec"]["subdomain"] == \
        svc["metadata"]["name"]
    assert svc["spec"]["clusterIP"] == "None"

    local = kustomize_lite.render(os.path.join(K8S, "overlays", "local"))
    job, c = _trainer_container(local)
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LISA_TRN_BACKEND"] == "cpu" and env["LISA_TRN_WORLD"] == "1"


def test_production_images_are_pinned_registry_images():
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", "production"))
    for o, pod in _pod_specs(objs):
        for c in pod["containers"]:
            name, _, tag = c["image"].rpartition(":")
            assert "/" in name and tag and tag != "latest", c["image"]
    ctl = _by(objs, "Deployment", "lisa-controller")
    env = {e["name"]: e.get("value") for e in
           ctl["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LISA_CTL_IMAGE"].startswith("registry.example.com/")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renderer_agrees_with_kubectl_kustomize(overlay):
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl is not installed: the renderer is checked "
                    "against kustomize only where kubectl exists")
    out = subprocess.run([kubectl, "kustomize",
                          os.path.join(K8S, "overlays", overlay)],
                         capture_output=True, text=True, timeout=60,
                         check=True).stdout
    real = {kustomize_lite._key(o): o
            for o in yaml.safe_load_all(out) if o}
    mine = {kustomize_lite._key(o): o
            for o in kustomize_lite.render(
                os.path.join(K8S, "overlays", overlay))}
    assert mine == real


def test_controller_rendered_job_validates(tmp_path):
    ctl = os.path.join(BIN, "lisa-controller")
    if not os.access(ctl, os.X_OK):
        pytest.skip("lisa-controller is not built")
    helptext = subprocess.run([ctl, "--help"], capture_output=True,
                              text=True, timeout=30)
    assert "--print-job" in helptext.stdout + helptext.stderr
    out = subprocess.run([ctl, "--backend=k8s", "--k8s-namespace=lisa",
                          "--gateway-url=http://lisa-gateway:7180",
                          "--image=lisa-sandbox:dev", "--print-job"],
                         capture_output=True, text=True, timeout=30,
                         check=True).stdout
    job = yaml.safe_load(out)
    for v in VERSIONS:
        _validate(job, v)
    _check_sandbox_job(job)
    # The NetworkPolicy selects the pods the controller really makes, and
    # the template documents the same labels and failure policy.
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", "production"))
    sel = _by(objs, "NetworkPolicy",
              "lisa-sandbox")["spec"]["podSelector"]["matchLabels"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in sel.items()), (sel, labels)
    tmpl = _docs(os.path.join(K8S, "base", "sandbox-job-template.yaml"))[0]
    assert set(tmpl["metadata"]["labels"]) == set(job["metadata"]["labels"])
    assert tmpl["spec"]["podFailurePolicy"] == job["spec"]["podFailurePolicy"]
    # Settings reach the Job: limits, TTL, image, deadline.
    out = subprocess.run([ctl, "--backend=k8s", "--print-job",
                          "--gateway-url=http://gw:7180", "--image=img:1",
                          "--cpu-millis=250", "--memory-bytes=64MiB",
                          "--k8s-ttl-s=30", "--deadline-ms=90s"],
                         capture_output=True, text=True, timeout=30,
                         check=True).stdout
    job = yaml.safe_load(out)
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "img:1"
    assert c["resources"]["limits"]["cpu"] == "250m"
    assert c["resources"]["limits"]["memory"] == str(64 << 20)
    assert job["spec"]["ttlSecondsAfterFinished"] == 30
    assert 89 <= job["spec"]["activeDeadlineSeconds"] <= 91
    # Without a gateway URL the backend cannot work: an error, no Job.
    r = subprocess.run([ctl, "--backend=k8s", "--print-job"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and not r.stdout.strip()


# Which workload is which role on the bus, and the env of its key files.
CURVE_ROLES = {
    ("Deployment", "lisa-controller"): ("controller", "LISA_CTL"),
    ("Deployment", "lisa-gateway"): ("gateway", "LISA_GW"),
    ("Deployment", "lisa-reward"): ("reward", "LISA_REWARD"),
    ("Job", "lisa-trainer"): ("trainer", "LISA_TRN"),
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_mounts_only_its_own_bus_key(overlay):
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", overlay))
    seen = set()
    for o, spec in _pod_specs(objs):
        key = (o["kind"], o["metadata"]["name"])
        secrets = {v["secret"]["secretName"]: v["name"]
                   for v in spec.get("volumes", []) if "secret" in v}
        curve = {s for s in secrets if s.startswith("lisa-curve-")}
        c = spec["containers"][0]
        env = {e["name"]: e.get("value") for e in c["env"]}
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        if key == ("StatefulSet", "lisa-broker"):
            assert curve == {"lisa-curve-broker", "lisa-curve-clients"}
            assert env["LISA_BROKER_CURVE"] == "on"
            assert env["LISA_BROKER_CURVE_CERT"] == \
                mounts[secrets["lisa-curve-broker"]] + "/broker.cert_secret"
            assert env["LISA_BROKER_CURVE_CLIENTS"] == \
                mounts[secrets["lisa-curve-clients"]]
            seen.add("broker")
        elif key in CURVE_ROLES:
            role, prefix = CURVE_ROLES[key]
            assert curve == {f"lisa-curve-{role}"}, (key, curve)
            where = mounts[secrets[f"lisa-curve-{role}"]]
            assert env[f"{prefix}_CURVE_CERT"] == f"{where}/{role}.cert_secret"
            assert env[f"{prefix}_BROKER_CERT"] == f"{where}/broker.cert"
            seen.add(role)
        else:
            assert not curve, (key, curve)
    assert seen == {"broker", "controller", "gateway", "reward", "trainer"}


def _allowed_from(pol, port):
    """The app.kubernetes.io/name values a policy admits on `port`."""
    names = set()
    for rule in pol["spec"]["ingress"]:
        ports = rule.get("ports")
        if ports and not any(p["port"] <= port <= p.get("endPort", p["port"])
                             for p in ports):
            continue
        for peer in rule["from"]:
            sel = peer["podSelector"]
            if "matchLabels" in sel:
                names.add(sel["matchLabels"]["app.kubernetes.io/name"])
            for e in sel.get("matchExpressions", []):
                assert e["key"] == "app.kubernetes.io/name"
                assert e["operator"] == "In"
                names.update(e["values"])
    return names


def test_network_policies_for_the_broker_and_the_trainer():
    objs = kustomize_lite.render(os.path.join(K8S, "overlays", "production"))
    brk = _by(objs, "NetworkPolicy", "lisa-broker")
    assert brk["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "lisa-broker"}
    rpc = {"lisa-controller", "lisa-gateway", "lisa-trainer"}
    assert _allowed_from(brk, 7100) == rpc
    assert _allowed_from(brk, 7101) == {"lisa-gateway"}
    assert _allowed_from(brk, 7102) == rpc
    assert _allowed_from(brk, 7103) == {"lisa-reward"}
    trn = _by(objs, "NetworkPolicy", "lisa-trainer")
    # engines: the gateway (and the other ranks); bootstrap and NCCL: ranks
    assert _allowed_from(trn, 7200) == {"lisa-gateway", "lisa-trainer"}
    assert _allowed_from(trn, 7203) == {"lisa-gateway", "lisa-trainer"}
    assert _allowed_from(trn, 7300) == {"lisa-trainer"}
    assert _allowed_from(trn, 40000) == {"lisa-trainer"}
    # the policies select the pods the workloads really make
    for name in ("lisa-broker", "lisa-trainer"):
        o = [x for x, _ in _pod_specs(objs)
             if x["metadata"]["name"] == name][0]
        labels = o["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == name
RECIPE_IN_IMAGE = "/usr/local/share/lisa/recipes/llm-in-sandbox.conf"


def test_trainers_run_the_recipe(tmp_path):
    """The production and multi-node trainers run the LLM-in-Sandbox recipe
    (examples/recipes/llm-in-sandbox.conf, which the images ship at the
    path their --config names, and which the trainer accepts); the local
    overlay's toy run does not."""
    for overlay in ("production", "multinode"):
        objs = kustomize_lite.render(os.path.join(K8S, "overlays", overlay))
        _, c = _trainer_container(objs)
        cmd = c["command"]
        assert cmd[:2] == ["lisa-trainer", "train"], cmd
        assert cmd[cmd.index("--config") + 1] == RECIPE_IN_IMAGE, cmd
    _, c = _trainer_container(
        kustomize_lite.render(os.path.join(K8S, "overlays", "local")))
    assert c["command"] == ["lisa-trainer", "train"]
    for df in ("lisa.Dockerfile", "trainer-cuda.Dockerfile"):
        text = open(os.path.join(SRC, "docker", df)).read()
        assert ("COPY --from=build /src/examples/recipes/ "
                + os.path.dirname(RECIPE_IN_IMAGE) + "/") in text, df
    # the trainer takes the recipe as the Job gives it: --config, then its
    # environment (here the toy model and eight toy prompts)
    trainer = os.path.join(BIN, "lisa-trainer")
    recipe = os.path.join(SRC, "examples", "recipes", "llm-in-sandbox.conf")
    data = tmp_path / "train_verl.json"
    data.write_text(json.dumps([{
        "prompt": [{"role": "user", "content": "q%d" % i}],
        "data_source": "math", "reward_model": {"ground_truth": "1"},
        "extra_info": {"id": "q%d" % i, "problem_statement": "q%d" % i}}
        for i in range(8)]))
    env = dict(os.environ, LISA_TRN_MODEL=os.path.join(SRC, "models", "toy"),
               LISA_TRN_DATA=str(data))
    r = subprocess.run([trainer, "check", "--config", recipe], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert "check: the settings and the data are good" in out, out[-3000:]
    assert "rloo" in out, out[-3000:]
