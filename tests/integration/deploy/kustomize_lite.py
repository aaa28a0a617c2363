"""A small kustomize renderer for lisa's k8s/ tree (tests only).

It renders the subset of the Kustomization format that k8s/ uses, with the
same results as `kubectl kustomize`, so the overlays can be validated on a
machine without kubectl:

  resources            files (multi-document YAML) and folders holding a
                       kustomization.yaml, rendered depth first
  configMapGenerator   `files` (key=path or path) and `literals`, with
                       generatorOptions.disableNameSuffixHash: true only
  patches              inline `patch` or `path`, with a `target`
                       (kind/name) or without; a YAML list is a JSON 6902
                       patch, a mapping a strategic-merge patch (including
                       `$patch: delete` of a whole object)
  namespace            set on every namespaced object and on ServiceAccount
                       subjects of (Cluster)RoleBindings
  labels               `pairs` added to every object's metadata.labels
  images               name -> newName / newTag / digest in every
                       container and initContainer list
  replicas             name -> count of Deployments and StatefulSets

Anything else in a kustomization is refused with an error naming the field,
so the renderer can never silently differ from kustomize.
"""
import copy
import os

import yaml

_KNOWN = {
    "apiVersion", "kind", "resources", "configMapGenerator",
    "generatorOptions", "patches", "namespace", "labels", "images",
    "replicas",
}
_CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume",
    "StorageClass", "CustomResourceDefinition", "PriorityClass",
}


class KustomizeError(Exception):
    """The kustomization uses something this renderer does not support."""


def _load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _kfile(folder):
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        p = os.path.join(folder, name)
        if os.path.isfile(p):
            return p
    raise KustomizeError(f"{folder}: no kustomization.yaml")


def _key(obj):
    md = obj.get("metadata", {})
    return (obj.get("kind"), md.get("namespace"), md.get("name"))


def _matches(obj, target):
    if not target:
        return True
    for field, value in target.items():
        if field == "kind" and obj.get("kind") != value:
            return False
        if field == "name" and obj.get("metadata", {}).get("name") != value:
            return False
        if field == "namespace" and \
                obj.get("metadata", {}).get("namespace") != value:
            return False
        if field not in ("kind", "name", "namespace", "group", "version"):
            raise KustomizeError(f"patch target field '{field}'")
    return True


def _pointer(path):
    if not path.startswith("/"):
        raise KustomizeError(f"JSON pointer '{path}'")
    return [p.replace("~1", "/").replace("~0", "~")
            for p in path[1:].split("/")]


def _json6902(obj, ops):
    for op in ops:
        parts = _pointer(op["path"])
        parent = obj
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        kind = op["op"]
        if kind in ("replace", "add"):
            value = copy.deepcopy(op["value"])
            if isinstance(parent, list):
                if last == "-":
                    parent.append(value)
                elif kind == "add":
                    parent.insert(int(last), value)
                else:
                    parent[int(last)] = value
            else:
                if kind == "replace" and last not in parent:
                    raise KustomizeError(f"replace of missing {op['path']}")
                parent[last] = value
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]
        else:
            raise KustomizeError(f"JSON patch op '{kind}'")


def _smp(base, patch):
    """Strategic merge: maps merge, lists of named maps merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = _smp(out[k], v)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and patch and \
            all(isinstance(x, dict) and "name" in x for x in base + patch):
        out = [copy.deepcopy(x) for x in base]
        for item in patch:
            for i, cur in enumerate(out):
                if cur["name"] == item["name"]:
                    out[i] = _smp(cur, item)
                    break
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def _set_images(node, images):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("containers", "initContainers") and isinstance(v, list):
                for c in v:
                    if isinstance(c, dict) and "image" in c:
                        c["image"] = _new_image(c["image"], images)
            else:
                _set_images(v, images)
    elif isinstance(node, list):
        for v in node:
            _set_images(v, images)


def _new_image(image, images):
    name, tag, digest = image, None, None
    if "@" in name:
        name, digest = name.split("@", 1)
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    for im in images:
        if im["name"] != name:
            continue
        unknown = set(im) - {"name", "newName", "newTag", "digest"}
        if unknown:
            raise KustomizeError(f"images field(s) {sorted(unknown)}")
        name = im.get("newName", name)
        if "digest" in im:
            return f"{name}@{im['digest']}"
        tag = im.get("newTag", tag)
        break
    out = name
    if tag:
        out += ":" + str(tag)
    if digest:
        out += "@" + digest
    return out


def _generate_configmaps(folder, kust):
    opts = kust.get("generatorOptions", {})
    out = []
    for gen in kust.get("configMapGenerator", []):
        if not opts.get("disableNameSuffixHash"):
            raise KustomizeError("configMapGenerator needs "
                                 "generatorOptions.disableNameSuffixHash")
        data = {}
        for spec in gen.get("files", []):
            key, _, rel = spec.partition("=")
            if not rel:
                key, rel = os.path.basename(spec), spec
            with open(os.path.join(folder, rel), encoding="utf-8") as f:
                data[key] = f.read()
        for spec in gen.get("literals", []):
            key, _, value = spec.partition("=")
            data[key] = value
        unknown = set(gen) - {"name", "files", "literals"}
        if unknown:
            raise KustomizeError(f"configMapGenerator field(s) "
                                 f"{sorted(unknown)}")
        out.append({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": gen["name"]}, "data": data})
    return out


def render(folder):
    """Renders the kustomization in `folder`; returns a list of objects."""
    folder = os.path.abspath(folder)
    with open(_kfile(folder), encoding="utf-8") as f:
        kust = yaml.safe_load(f) or {}
    unknown = set(kust) - _KNOWN
    if unknown:
        raise KustomizeError(f"{folder}: unsupported field(s) "
                             f"{sorted(unknown)}")
    objs = []
    for res in kust.get("resources", []):
        path = os.path.join(folder, res)
        objs.extend(render(path) if os.path.isdir(path) else _load_docs(path))
    objs.extend(_generate_configmaps(folder, kust))
    seen = set()
    for o in objs:
        if _key(o) in seen:
            raise KustomizeError(f"{folder}: duplicate object {_key(o)}")
        seen.add(_key(o))

    for p in kust.get("patches", []):
        if "patch" in p:
            body = yaml.safe_load(p["patch"])
        else:
            with open(os.path.join(folder, p["path"]), encoding="utf-8") as f:
                body = yaml.safe_load(f)
        target = p.get("target")
        if isinstance(body, dict) and not target:
            target = {"kind": body.get("kind"),
                      "name": body.get("metadata", {}).get("name")}
        hits = [o for o in objs if _matches(o, target)]
        if not hits:
            raise KustomizeError(f"{folder}: patch target {target} "
                                 f"matches nothing")
        for o in hits:
            if isinstance(body, list):
                _json6902(o, body)
            elif body.get("$patch") == "delete":
                objs.remove(o)
            else:
                merged = _smp(o, body)
                o.clear()
                o.update(merged)

    ns = kust.get("namespace")
    if ns:
        for o in objs:
            if o.get("kind") not in _CLUSTER_SCOPED:
                o.setdefault("metadata", {})["namespace"] = ns
            if o.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
                for s in o.get("subjects", []):
                    if s.get("kind") == "ServiceAccount":
                        s["namespace"] = ns
    for lab in kust.get("labels", []):
        unknown = set(lab) - {"pairs"}
        if unknown:
            raise KustomizeError(f"labels field(s) {sorted(unknown)}")
        for o in objs:
            md = o.setdefault("metadata", {})
            md.setdefault("labels", {}).update(lab["pairs"])
    if kust.get("images"):
        for o in objs:
            _set_images(o, kust["images"])
    for rep in kust.get("replicas", []):
        for o in objs:
            if o.get("kind") in ("Deployment", "StatefulSet") and \
                    o["metadata"]["name"] == rep["name"]:
                o["spec"]["replicas"] = rep["count"]
    return objs


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: kustomize_lite.py FOLDER")
    yaml.safe_dump_all(render(sys.argv[1]), sys.stdout, sort_keys=True)
