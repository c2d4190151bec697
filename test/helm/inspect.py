#!/usr/bin/env python3
"""Reads manifests rendered by `helm template`.

inspect.py <file> <value set>   checks what the deployment needs; prints problems, exits 1 on any
inspect.py <file> start.sh      prints the ConfigMap's start script
inspect.py <file> config.yaml   prints the ConfigMap's config.yaml
inspect.py <file> prestop.sh    prints the ConfigMap's preStop script
"""
import sys

import yaml


def main():
    path, what = sys.argv[1], sys.argv[2]
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    if what in ("start.sh", "config.yaml", "prestop.sh"):
        sys.stdout.write(by_kind["ConfigMap"][0]["data"][what])
        return 0
    problems = []

    def need(cond, msg):
        if not cond:
            problems.append(msg)

    sts = by_kind.get("StatefulSet", [None])[0]
    need(sts is not None, "no StatefulSet")
    services = by_kind.get("Service", [])
    headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
    need(len(headless) == 1, "exactly one headless Service")
    if sts and headless:
        spec = sts["spec"]
        need(spec["serviceName"] == headless[0]["metadata"]["name"], "StatefulSet serviceName is the headless Service")
        need(headless[0]["spec"].get("publishNotReadyAddresses") is True, "headless Service publishes not-ready peers")
        need({p["port"] for p in headless[0]["spec"]["ports"]} == {6333, 6334, 6335}, "headless Service has the REST, gRPC and p2p ports")
        want_replicas = 5 if what == "five" else 3
        need(spec["replicas"] == want_replicas, f"replicas {want_replicas}")
        pod = spec["template"]["spec"]
        c = pod["containers"][0]
        need({p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 6333, "grpc": 6334, "p2p": 6335}, "container ports http 6333, grpc 6334, p2p 6335")
        cfg = yaml.safe_load(by_kind["ConfigMap"][0]["data"]["config.yaml"])
        need(cfg["service"].get("grpc_port") == 6334, "config.yaml sets service.grpc_port to the container's grpc port")
        need(c["readinessProbe"]["httpGet"]["path"] == "/readyz", "readiness on /readyz")
        need(c["livenessProbe"]["httpGet"]["path"] == "/livez", "liveness on /livez")
        sp = c.get("startupProbe", {})
        need(sp.get("httpGet", {}).get("path") == "/livez", "startup probe on /livez")
        need(sp.get("periodSeconds", 0) * sp.get("failureThreshold", 0) >= 120 + 60, "startup probe allows the bootstrap timeout (120 s) plus loading time")
        claims = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
        need(claims == {"storage", "snapshots"}, "volume claims for storage and snapshots")
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        need(mounts.get("storage") == "/quiver/storage" and mounts.get("snapshots") == "/quiver/snapshots", "volumes mounted where config.yaml points")
        env = {e["name"]: e for e in c["env"]}
        secret_name = "mine" if what == "five" else "rel-quiver"
        for key, var in (("api-key", "SERVICE__SERVICE__API_KEY"), ("read-only-api-key", "SERVICE__SERVICE__READ_ONLY_API_KEY")):
            ref = env.get(var, {}).get("valueFrom", {}).get("secretKeyRef", {})
            need(ref.get("name") == secret_name and ref.get("key") == key, f"{var} from Secret {secret_name} key {key}")
        need(c["command"] == ["/bin/sh", "/quiver/etc/start.sh"], "started through the start script")
        need(spec.get("podManagementPolicy") == "Parallel", "pods start in parallel")
        # The drain before a pod stops (scale-in).
        drain = what != "nodrain"
        only_scale_in = what not in ("nodrain", "always")
        hook = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        cm = by_kind["ConfigMap"][0]["data"]
        if drain:
            need(hook == ["/bin/sh", "/quiver/etc/prestop.sh"], "preStop hook runs the drain script")
            need("prestop.sh" in cm and " drain " in cm["prestop.sh"], "ConfigMap holds the drain script")
            timeout = int(cm["prestop.sh"].split("--timeout ")[1].split()[0])
            need(pod.get("terminationGracePeriodSeconds", 30) > timeout, "grace period longer than the drain's timeout")
            need(("--if-scaled-in" in cm["prestop.sh"]) == only_scale_in, "drain only on scale-in unless drain.onlyOnScaleIn=false")
            remove = only_scale_in and what != "keep"
            need(("--remove" in cm["prestop.sh"]) == remove, "a scaled-in peer is removed from the cluster unless drain.removeOnScaleIn=false (never without the scale-in check)")
            policy = spec.get("persistentVolumeClaimRetentionPolicy")
            want_policy = {"whenScaled": "Delete", "whenDeleted": "Retain"} if remove else None
            need(policy == want_policy, f"volume claim retention {want_policy} (a removed peer's volume goes with it)")
        else:
            need(hook is None and "prestop.sh" not in cm, "no preStop hook when drain.enabled=false")
        # HTTPS (tls.enabled): the Secret mounted where config.yaml points, probes over
        # HTTPS, the preStop hook over HTTPS with the mounted CA.
        tls = what == "tls"
        cfg_tls = yaml.safe_load(cm["config.yaml"])
        vols = {v["name"]: v for v in pod["volumes"]}
        need(cfg_tls["service"].get("enable_tls", False) == tls, f"service.enable_tls is {tls}")
        for probe in ("readinessProbe", "startupProbe", "livenessProbe"):
            need(c[probe]["httpGet"].get("scheme", "HTTP") == ("HTTPS" if tls else "HTTP"), f"{probe} over {'HTTPS' if tls else 'HTTP'}")
        if tls:
            need(cfg_tls.get("tls") == {"cert": "/quiver/tls/tls.crt", "key": "/quiver/tls/tls.key", "ca_cert": "/quiver/tls/ca.crt"}, "config.yaml's tls paths are in the mounted Secret")
            need(vols.get("tls", {}).get("secret", {}).get("secretName") == "quiver-tls" and mounts.get("tls") == "/quiver/tls", "the TLS Secret mounted at /quiver/tls")
            need('--url "https://localhost:6333" --ca-cert /quiver/tls/ca.crt --tls-server-name' in cm.get("prestop.sh", ""), "the preStop hook speaks HTTPS with the mounted CA")
        else:
            need("tls" not in vols and "tls" not in mounts and "https:" not in cm.get("prestop.sh", ""), "no TLS volume, the hook over HTTP")
        # The hook runs in the container: the api key reaches it through the container's environment.
        need("SERVICE__SERVICE__API_KEY" in env, "the api key is in the environment the preStop hook runs in")
        sa_name = sts["metadata"]["name"]
        if only_scale_in:
            need(pod.get("serviceAccountName") == sa_name, "pods run as the chart's ServiceAccount (scale-in check)")
            sas = by_kind.get("ServiceAccount", [])
            need(len(sas) == 1 and sas[0]["metadata"]["name"] == sa_name, "a ServiceAccount for the scale-in check")
            roles = by_kind.get("Role", [])
            need(len(roles) == 1 and roles[0]["rules"] == [{"apiGroups": ["apps"], "resources": ["statefulsets"], "resourceNames": [sa_name], "verbs": ["get"]}], "a Role that may get this StatefulSet only")
            rbs = by_kind.get("RoleBinding", [])
            need(len(rbs) == 1 and rbs[0]["roleRef"]["name"] == roles[0]["metadata"]["name"] if roles else False, "a RoleBinding to that Role")
            need(len(rbs) == 1 and rbs[0]["subjects"][0]["name"] == sa_name, "bound to the pods' ServiceAccount")
        else:
            need("serviceAccountName" not in pod and not by_kind.get("Role") and not by_kind.get("RoleBinding") and not by_kind.get("ServiceAccount"), "no Kubernetes API access without the scale-in check")
    clients = [s for s in services if s["spec"].get("clusterIP") != "None"]
    need(len(clients) == 1 and {(p["name"], p["port"], p["targetPort"]) for p in clients[0]["spec"]["ports"]} == {("http", 6333, "http"), ("grpc", 6334, "grpc")}, "client Service exposes http 6333 and grpc 6334")
    pdb = by_kind.get("PodDisruptionBudget", [None])[0]
    need(pdb is not None and pdb["spec"].get("maxUnavailable") == 1, "PodDisruptionBudget with maxUnavailable 1")
    secrets = by_kind.get("Secret", [])
    if what == "keys":
        need(len(secrets) == 1 and set(secrets[0]["data"]) == {"api-key", "read-only-api-key"}, "Secret holds both keys")
    if what == "five":
        need(secrets == [], "no Secret rendered when existingSecret is given")
        cfg = yaml.safe_load(by_kind["ConfigMap"][0]["data"]["config.yaml"])
        need(cfg.get("log_level") == "DEBUG" and cfg["storage"]["collection"]["replication_factor"] == 2 and cfg["cluster"]["enabled"] is True, "values.config merged over the chart's settings")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
