#!/usr/bin/env bash
# Checks the Helm chart charts/quiver; prints TAP lines ("ok N - ..." / "not ok N - ...").
#   helm lint (default values, and with keys set);
#   helm template for several value sets, each validated by kubeconform -strict against
#   the Kubernetes schemas (a negative case shows kubeconform rejects a bad field);
#   the rendered objects have what the deployment needs (test/helm/inspect.py);
#   the start script gives pod 0 --uri only and the others --bootstrap to pod 0;
#   the preStop drain hook (its script, the grace period check, the RBAC objects of the
#   scale-in check, none of them when drain.enabled=false; --remove on a scale-in with the
#   volume claims deleted with the pod; with tls.enabled HTTPS with the mounted CA and the
#   pod's name, the api key from the container's environment);
#   the rendered config.yaml is valid for Quiver's own configuration loader.
# Tools come from scripts/install-helm-tools.sh (.ci/run runs it).
set -uo pipefail
cd "$(dirname "$0")/../.."
TOOLS=$PWD/.tools
HELM=$TOOLS/bin/helm
KUBECONFORM=$TOOLS/bin/kubeconform
SCHEMAS=${K8S_SCHEMAS:-$TOOLS/k8s-schemas/v1.35.0}
CHART=charts/quiver
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && sed 's/^/#   /' <<<"$2"; }
check() { # check "<description>" command...
  local what=$1; shift
  local out
  if out=$("$@" 2>&1); then ok "$what"; else notok "$what" "$out"; fi
}

if [ ! -x "$HELM" ] || [ ! -x "$KUBECONFORM" ] || [ ! -d "$SCHEMAS" ]; then
  notok "helm, kubeconform and the Kubernetes schemas are in .tools/ (run scripts/install-helm-tools.sh)"
  exit 1
fi

conform() { "$KUBECONFORM" -strict -summary -schema-location "$SCHEMAS/{{ .ResourceKind }}{{ .KindSuffix }}.json" "$@"; }

check "helm lint (default values)" "$HELM" lint --strict "$CHART"
check "helm lint (api keys set)" "$HELM" lint --strict "$CHART" --set apiKey=secret,readOnlyApiKey=reader

declare -A SETS=(
  [default]=""
  [keys]="--set apiKey=secret --set readOnlyApiKey=reader"
  [nodrain]="--set drain.enabled=false"
  [keep]="--set drain.removeOnScaleIn=false"
  [tls]="--set tls.enabled=true --set tls.secretName=quiver-tls --set apiKey=secret"
  [always]="--set drain.onlyOnScaleIn=false --set drain.timeoutSeconds=600 --set terminationGracePeriodSeconds=700 --set drain.method=snapshot"
  [five]="--set replicaCount=5 --set existingSecret=mine --set persistence.storageClassName=fast --set-json config={\"log_level\":\"DEBUG\",\"storage\":{\"collection\":{\"replication_factor\":2}}} --set-json resources={\"limits\":{\"memory\":\"4Gi\"}}"
)
for name in default keys five nodrain always keep tls; do
  # shellcheck disable=SC2086
  if out=$("$HELM" template rel "$CHART" ${SETS[$name]} 2>&1 >"$WORK/$name.yaml"); then
    ok "helm template ($name)"
    check "kubeconform -strict ($name)" conform "$WORK/$name.yaml"
    check "rendered objects fit the deployment ($name)" python3 test/helm/inspect.py "$WORK/$name.yaml" "$name"
  else
    notok "helm template ($name)" "$out"
  fi
done

# Negative case: kubeconform must reject an unknown field and a wrong type.
sed 's/^  serviceName:/  serviceNamez:/' "$WORK/default.yaml" >"$WORK/bad1.yaml"
sed 's/^  replicas: 3$/  replicas: "three"/' "$WORK/default.yaml" >"$WORK/bad2.yaml"
if ! cmp -s "$WORK/default.yaml" "$WORK/bad1.yaml" && ! conform "$WORK/bad1.yaml" >/dev/null 2>&1 \
  && ! cmp -s "$WORK/default.yaml" "$WORK/bad2.yaml" && ! conform "$WORK/bad2.yaml" >/dev/null 2>&1; then
  ok "kubeconform rejects a StatefulSet with an unknown field or a wrongly typed one"
else
  notok "kubeconform rejects a StatefulSet with an unknown field or a wrongly typed one"
fi

# The start script: pod 0 founds, the others join through pod 0.
python3 test/helm/inspect.py "$WORK/default.yaml" start.sh >"$WORK/start.sh"
run_start() {
  env -i PATH="$PATH" HOSTNAME="$1" HEADLESS_SERVICE=rel-quiver-headless POD_NAMESPACE=ns CLUSTER_DOMAIN=cluster.local \
    P2P_PORT=6335 STATEFULSET_NAME=rel-quiver QUIVER_COMMAND=echo sh "$WORK/start.sh"
}
want0="--config-path /quiver/etc/config.yaml --uri http://rel-quiver-0.rel-quiver-headless.ns.svc.cluster.local:6335"
want2="--config-path /quiver/etc/config.yaml --uri http://rel-quiver-2.rel-quiver-headless.ns.svc.cluster.local:6335 --bootstrap http://rel-quiver-0.rel-quiver-headless.ns.svc.cluster.local:6335"
got0=$(run_start rel-quiver-0)
got2=$(run_start rel-quiver-2)
if [ "$got0" = "$want0" ]; then ok "start script: pod 0 gets --uri only"; else notok "start script: pod 0 gets --uri only" "got:  $got0"$'\n'"want: $want0"; fi
if [ "$got2" = "$want2" ]; then ok "start script: pod 2 gets --uri and --bootstrap to pod 0"; else notok "start script: pod 2 gets --bootstrap to pod 0" "got:  $got2"$'\n'"want: $want2"; fi

# The preStop hook's script: drains the pod's own peer through localhost, only on a
# scale-in unless drain.onlyOnScaleIn=false; the grace period must exceed the drain's timeout.
python3 test/helm/inspect.py "$WORK/default.yaml" prestop.sh >"$WORK/prestop.sh"
python3 test/helm/inspect.py "$WORK/always.yaml" prestop.sh >"$WORK/prestop-always.sh"
wantp="drain --url http://localhost:6333 --timeout 1800 --if-scaled-in --remove"
wanta="drain --url http://localhost:6333 --timeout 600 --method snapshot"
gotp=$(env -i PATH="$PATH" QUIVER_COMMAND=echo sh "$WORK/prestop.sh")
gota=$(env -i PATH="$PATH" QUIVER_COMMAND=echo sh "$WORK/prestop-always.sh")
if [ "$gotp" = "$wantp" ]; then ok "preStop script: drains this peer on a scale-in only, and removes it"; else notok "preStop script: drains this peer on a scale-in only, and removes it" "got:  $gotp"$'\n'"want: $wantp"; fi
if [ "$gota" = "$wanta" ]; then ok "preStop script (onlyOnScaleIn=false): drains on every stop"; else notok "preStop script (onlyOnScaleIn=false): drains on every stop" "got:  $gota"$'\n'"want: $wanta"; fi
# With tls.enabled: HTTPS to localhost, the certificate checked against the mounted CA for
# the pod's DNS name (or tls.serverName); the api key from the environment as without TLS.
python3 test/helm/inspect.py "$WORK/tls.yaml" prestop.sh >"$WORK/prestop-tls.sh"
wantt="drain --url https://localhost:6333 --ca-cert /quiver/tls/ca.crt --tls-server-name rel-quiver-2.rel-quiver-headless.ns.svc.cluster.local --timeout 1800 --if-scaled-in --remove"
gott=$(env -i PATH="$PATH" QUIVER_COMMAND=echo HOSTNAME=rel-quiver-2 HEADLESS_SERVICE=rel-quiver-headless POD_NAMESPACE=ns CLUSTER_DOMAIN=cluster.local sh "$WORK/prestop-tls.sh")
if [ "$gott" = "$wantt" ]; then ok "preStop script (tls.enabled): HTTPS with the mounted CA, checked for the pod's name"; else notok "preStop script (tls.enabled): HTTPS with the mounted CA" "got:  $gott"$'\n'"want: $wantt"; fi
"$HELM" template rel "$CHART" --set tls.enabled=true --set tls.secretName=s --set tls.serverName=quiver.example.com >"$WORK/tls-name.yaml" 2>&1
python3 test/helm/inspect.py "$WORK/tls-name.yaml" prestop.sh >"$WORK/prestop-tls-name.sh" 2>&1
gotn=$(env -i PATH="$PATH" QUIVER_COMMAND=echo HOSTNAME=rel-quiver-2 sh "$WORK/prestop-tls-name.sh")
if grep -q -- "--tls-server-name quiver.example.com " <<<"$gotn"; then ok "preStop script: tls.serverName replaces the pod's name"; else notok "preStop script: tls.serverName replaces the pod's name" "$gotn"; fi
# The hook's api key: the rendered script run with the container's variable reaches the CLI.
printf '#!/bin/sh\necho "key=$SERVICE__SERVICE__API_KEY"\n' >"$WORK/show-key.sh"
gotk=$(env -i PATH="$PATH" QUIVER_COMMAND="sh $WORK/show-key.sh" SERVICE__SERVICE__API_KEY=secret HOSTNAME=rel-quiver-2 sh "$WORK/prestop-tls.sh")
if [ "$gotk" = "key=secret" ]; then ok "preStop script: the hook's command sees the api key of the container's environment"; else notok "preStop script: the hook's command sees the api key" "$gotk"; fi
for bad in "--set tls.enabled=true|tls.enabled needs tls.secretName" "--set tls.enabled=true --set tls.secretName=s --set config.service.verify_https_client_certificate=true|kubelet's HTTPS probes present no client certificate"; do
  args=${bad%%|*}; want=${bad#*|}
  # shellcheck disable=SC2086
  if out=$("$HELM" template rel "$CHART" $args 2>&1); then notok "helm template refuses: $want" "it rendered"
  elif grep -q "$want" <<<"$out"; then ok "helm template refuses: $want"
  else notok "helm template refuses: $want" "$out"; fi
done
if out=$("$HELM" template rel "$CHART" --set drain.timeoutSeconds=600 --set terminationGracePeriodSeconds=600 2>&1); then
  notok "helm template refuses a grace period not larger than drain.timeoutSeconds" "it rendered"
elif grep -q "terminationGracePeriodSeconds must be larger than drain.timeoutSeconds" <<<"$out"; then
  ok "helm template refuses a grace period not larger than drain.timeoutSeconds"
else
  notok "helm template refuses a grace period not larger than drain.timeoutSeconds" "$out"
fi
if out=$("$HELM" template rel "$CHART" --set drain.method=fast 2>&1); then
  notok "helm template refuses an unknown drain.method" "it rendered"
elif grep -q "drain.method must be" <<<"$out"; then
  ok "helm template refuses an unknown drain.method"
else
  notok "helm template refuses an unknown drain.method" "$out"
fi

# The rendered config.yaml loads in Quiver's configuration loader (no unknown key, valid values).
for name in default five; do
  python3 test/helm/inspect.py "$WORK/$name.yaml" config.yaml >"$WORK/$name-config.yaml"
  check "config.yaml of the chart ($name) is valid for Quiver" node -e '
    const { loadConfig } = require("./dist/ts/config");
    const c = loadConfig({ configPath: process.argv[1], env: {}, cwd: process.cwd() });
    if (!c.cluster.enabled || c.storage.storage_path !== "/quiver/storage") throw new Error("cluster mode or storage path not set");
  ' "$WORK/$name-config.yaml"
done

echo "1..$n"
