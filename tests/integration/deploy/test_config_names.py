"""The settings compose/ and k8s/ pass are settings the services know.

Every LISA_* environment variable that compose.yaml, compose.host.yaml or
a Kubernetes manifest gives a container must be one the container's binary
lists in its --help (which each service prints from its config table), so a
renamed or misspelt setting fails here instead of being silently ignored
at run time. Binaries not built in this tree are skipped by name.
"""
import glob
import os
import re
import subprocess

import pytest
import yaml

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                  "..", "..", "..")))
BIN = os.path.join(os.environ.get("LISA_BINARY_DIR", ""), "bin")
BINARIES = ["lisa-broker", "lisa-gateway", "lisa-controller", "lisa-reward",
            "lisa-trainer", "lisa-agent"]
# Read by the images or the runtime, not by a config table.
NOT_CONFIG = {"HOME"}
# Read by liblisa itself in every service (lisa_log: the log level).
COMMON = {"LISA_LOG_LEVEL"}


def _binary_of(command):
    """The lisa-* binary a container command runs (also through bash -c)."""
    for word in command or []:
        for m in re.finditer(r"(lisa-[a-z]+)", str(word)):
            if m.group(1) in BINARIES:
                return m.group(1)
    return None


def _uses():
    """{binary: {env var: [where]}} over compose/ and k8s/."""
    uses = {}

    def add(binary, names, where):
        for n in names:
            if n.startswith("LISA_") and n not in NOT_CONFIG:
                uses.setdefault(binary, {}).setdefault(n, []).append(where)

    base = os.path.join(SRC, "compose", "compose.yaml")
    with open(base, encoding="utf-8") as f:
        services = yaml.safe_load(f)["services"]
    binary_of = {}
    for name, svc in services.items():
        b = _binary_of(svc.get("command")) or \
            ("lisa-trainer" if name.startswith("trainer") else None)
        binary_of[name] = b
        if b:
            add(b, (svc.get("environment") or {}).keys(), f"compose:{name}")
    with open(os.path.join(SRC, "compose", "compose.host.yaml"),
              encoding="utf-8") as f:
        for name, svc in yaml.safe_load(f)["services"].items():
            assert name in services, f"compose.host.yaml: unknown {name}"
            if binary_of.get(name):
                add(binary_of[name], (svc.get("environment") or {}).keys(),
                    f"compose.host:{name}")
    for path in glob.glob(os.path.join(SRC, "k8s", "**", "*.yaml"),
                          recursive=True):
        if path.endswith("kustomization.yaml"):
            continue
        with open(path, encoding="utf-8") as f:
            for obj in yaml.safe_load_all(f):
                if not obj or obj.get("kind") not in (
                        "Deployment", "StatefulSet", "Job"):
                    continue
                for c in obj["spec"]["template"]["spec"]["containers"]:
                    b = _binary_of(c.get("command"))
                    if b:
                        add(b, [e["name"] for e in c.get("env", [])],
                            f"{os.path.relpath(path, SRC)}:{c['name']}")
    return uses


def _help(binary):
    exe = os.path.join(BIN, binary)
    if not os.access(exe, os.X_OK):
        pytest.skip(f"{binary} is not built in this tree")
    text = ""
    for args in (["--help"], ["worker", "--help"]):
        r = subprocess.run([exe] + args, capture_output=True, text=True,
                           timeout=30)
        text += r.stdout + r.stderr
    return set(re.findall(r"\bLISA_[A-Z0-9_]+\b", text)) | COMMON


def test_usage_every_service_is_configured_somewhere():
    uses = _uses()
    for b in ("lisa-broker", "lisa-gateway", "lisa-controller",
              "lisa-reward", "lisa-trainer", "lisa-agent"):
        assert uses.get(b), f"no LISA_* settings found for {b}"
    # Compose gives the controller its Docker backend, k8s its k8s backend.
    where = uses["lisa-controller"]["LISA_CTL_BACKEND"]
    assert any(w.startswith("compose:") for w in where)
    assert any(w.startswith("k8s/") for w in where)


@pytest.mark.parametrize("binary", BINARIES)
def test_settings_exist_in_the_config_table(binary):
    used = _uses().get(binary, {})
    known = _help(binary)
    assert known - COMMON, f"{binary} --help lists no LISA_* variables"
    unknown = {n: w for n, w in used.items() if n not in known}
    assert not unknown, f"{binary} does not know: {unknown}"
