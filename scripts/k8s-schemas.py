#!/usr/bin/env python3
"""Writes standalone Kubernetes JSON schemas for kubeconform from the kubernetes-validate
wheel (PyPI), which ships the schemas of each Kubernetes version split into one file per
kind plus a shared `_definitions.json`. kubeconform needs each kind's schema to stand
alone, so the shared definitions are copied into it under `$defs` and the references
rewritten to point there.

Usage: k8s-schemas.py <wheel> <kubernetes version, e.g. 1.35.0> <output dir> <kind file>...
Writes <output dir>/<kind file> (e.g. statefulset-apps-v1.json) for each kind file named.
"""
import json
import os
import sys
import zipfile

REF = "/api/_definitions.json#"


def rewrite(node):
    if isinstance(node, dict):
        return {k: (v.replace(REF, "#", 1) if k == "$ref" and isinstance(v, str) else rewrite(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [rewrite(v) for v in node]
    return node


def main():
    wheel, version, out, *kinds = sys.argv[1:]
    prefix = f"kubernetes_validate/kubernetes-json-schema/v{version}-local-strict/"
    z = zipfile.ZipFile(wheel)
    defs = json.loads(z.read(prefix + "_definitions.json"))["$defs"]
    os.makedirs(out, exist_ok=True)
    for kind in kinds:
        schema = json.loads(z.read(prefix + kind))
        schema.pop("$id", None)
        schema["$defs"] = defs
        with open(os.path.join(out, kind), "w") as f:
            json.dump(rewrite(schema), f)
    print(f"wrote {len(kinds)} standalone schemas of Kubernetes {version} to {out}")


if __name__ == "__main__":
    main()
