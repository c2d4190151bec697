#!/usr/bin/env bash
# Installs what test/helm/check.sh needs into .tools/ (idempotent; each tool is skipped
# when its pinned version is already there):
#   helm and kubeconform, built from the Go module proxy with `go install`;
#   Kubernetes JSON schemas for kubeconform, from the kubernetes-validate wheel on PyPI
#   (GitHub, where kubeconform normally downloads them, is not reachable from CI).
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0
KUBERNETES_VALIDATE_VERSION=1.37.0
KUBERNETES_VERSION=1.35.0
KINDS=(statefulset-apps-v1.json service-v1.json configmap-v1.json secret-v1.json poddisruptionbudget-policy-v1.json
  serviceaccount-v1.json role-rbac-v1.json rolebinding-rbac-v1.json)

TOOLS=$PWD/.tools
BIN=$TOOLS/bin
mkdir -p "$BIN"
PATH=$PATH:/usr/local/go/bin

if [ ! -f "$BIN/.helm-$HELM_VERSION" ] || [ ! -x "$BIN/helm" ]; then
  echo "== go install helm $HELM_VERSION"
  GOBIN=$BIN go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  touch "$BIN/.helm-$HELM_VERSION"
fi
if [ ! -f "$BIN/.kubeconform-$KUBECONFORM_VERSION" ] || [ ! -x "$BIN/kubeconform" ]; then
  echo "== go install kubeconform $KUBECONFORM_VERSION"
  GOBIN=$BIN go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
  touch "$BIN/.kubeconform-$KUBECONFORM_VERSION"
fi
SCHEMAS=$TOOLS/k8s-schemas/v$KUBERNETES_VERSION
missing_kind=0
for k in "${KINDS[@]}"; do [ -f "$SCHEMAS/$k" ] || missing_kind=1; done
if [ ! -f "$SCHEMAS/.from-kubernetes-validate-$KUBERNETES_VALIDATE_VERSION" ] || [ "$missing_kind" = 1 ]; then
  echo "== Kubernetes $KUBERNETES_VERSION schemas from kubernetes-validate $KUBERNETES_VALIDATE_VERSION (PyPI)"
  mkdir -p "$TOOLS/wheels"
  [ -f "$TOOLS/wheels/kubernetes_validate-$KUBERNETES_VALIDATE_VERSION-py3-none-any.whl" ] || python3 -m pip download --disable-pip-version-check --no-input --quiet --no-deps \
    -d "$TOOLS/wheels" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  python3 scripts/k8s-schemas.py "$TOOLS/wheels/kubernetes_validate-$KUBERNETES_VALIDATE_VERSION-py3-none-any.whl" \
    "$KUBERNETES_VERSION" "$SCHEMAS" "${KINDS[@]}"
  touch "$SCHEMAS/.from-kubernetes-validate-$KUBERNETES_VALIDATE_VERSION"
fi
echo "helm, kubeconform and Kubernetes $KUBERNETES_VERSION schemas are in .tools/"
