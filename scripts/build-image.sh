#!/usr/bin/env bash
# Builds the exporter's OCI image without a Docker engine and without pulling a base image from a
# container registry: a minimal Debian bookworm root filesystem (mmdebstrap) with Debian's Python 3.11,
# the locked requirements and the exporter installed into /opt/venv exactly as the Dockerfile's build
# stage does, packed as one layer by umoci with the Dockerfile's entrypoint, command, user, port and
# environment. Then, with --check, runs the image (podman; runc or crun on umoci's runtime bundle where
# podman cannot) as `serve --simulate` and scrapes /metrics.
#
#   scripts/build-image.sh [--check] [--out DIR]
#
# Needs root, network access to the Debian archive and to PyPI, and mmdebstrap and umoci (with --check
# also podman, runc or crun): `apt-get install mmdebstrap umoci podman runc`. The result is an OCI image
# layout at DIR (default build/image/oci), tag = pyproject.toml's version; `skopeo copy
# oci:DIR:TAG docker://REGISTRY/...:TAG` pushes it. The released image is built from the Dockerfile
# (python:3.11-slim-bookworm base) by the release workflow; this one differs only in its Python build
# (Debian's python3.11 instead of the python image's).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/build/image"
check=false
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=true ;;
    --out) out=$2; shift ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-image: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

say() { echo "build-image: $*" >&2; }
die() { say "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap and chroot)"
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || die "needs $tool: apt-get install mmdebstrap umoci"
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml" | head -1)
[ -n "$version" ] || die "no version in pyproject.toml"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
started=$(date +%s)

work=$(mktemp -d)
cleanup() {
  if [ -n "${container:-}" ]; then podman rm -f -t 2 "$container" >/dev/null 2>&1 || true; fi
  if [ -n "${bundle_id:-}" ]; then "$runtime" delete -f "$bundle_id" >/dev/null 2>&1 || true; fi
  # the pulled image under every name podman gave it (it names an oci: pull after the layout's path)
  if [ -n "${image_id:-}" ]; then podman rmi -f "$image_id" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The base: Debian bookworm (with its security updates), Python 3.11 and venv, nothing else.
say "rootfs: Debian bookworm minbase + python3-venv (mmdebstrap)"
rootfs="$work/rootfs"
mmdebstrap --quiet --variant=minbase --include=python3-venv,ca-certificates \
  --aptopt='Acquire::Retries "3"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  bookworm "$rootfs" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main"

# 2. The Dockerfile's build stage, inside that root: a venv with the locked requirements, then the
# package without its dependencies, then pip check. The sources are copied in and removed after.
say "venv: requirements.lock and the exporter into /opt/venv"
src="$rootfs/tmp/src"
mkdir -p "$src"
cp -r "$root/requirements.lock" "$root/pyproject.toml" "$root/README.md" "$root/LICENSE" "$root/exporter" "$src/"
find "$src" -name __pycache__ -prune -exec rm -rf {} +
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
# the host's CA bundle, for a network whose TLS is re-signed on the way (pip would refuse it otherwise)
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/tmp/host-ca.crt"
in_root() {
  chroot "$rootfs" /usr/bin/env -i PATH=/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/tmp/host-ca.crt "$@"
}
in_root python3 -m venv /opt/venv
in_root pip install --quiet --no-compile -r /tmp/src/requirements.lock
in_root pip install --quiet --no-compile --no-deps /tmp/src
in_root pip check
rm -rf "$src" "$rootfs/tmp/host-ca.crt" "$rootfs"/tmp/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*
: >"$rootfs/etc/resolv.conf"
find "$rootfs/opt/venv" -name __pycache__ -prune -exec rm -rf {} +

# 3. The image: one layer, the Dockerfile's runtime settings.
say "image: OCI layout $out/oci, tag $version (umoci)"
rm -rf "$out/oci"
mkdir -p "$out"
tar --numeric-owner --xattrs -C "$rootfs" -cf "$work/layer.tar" .
umoci init --layout "$out/oci"
umoci new --image "$out/oci:$version"
umoci raw add-layer --image "$out/oci:$version" "$work/layer.tar"
umoci config --image "$out/oci:$version" \
  --config.user 65532:65532 \
  --config.entrypoint gpu-bottleneck-exporter --config.cmd serve \
  --config.exposedports 9612/tcp \
  --config.env PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.title=gpu-bottleneck-exporter" \
  --history.created_by "scripts/build-image.sh"
umoci gc --layout "$out/oci"
size=$(du -sm "$out/oci" | cut -f1)
say "built $out/oci:$version (${size} MiB compressed) in $(($(date +%s) - started)) s"

$check || exit 0

# 4. Run it as a container runtime would: the image's own entrypoint, user and environment, the
# simulated node, then one scrape of /metrics.
port=${CHECK_PORT:-19612}
args=(serve --simulate healthy --sim-gpus 2 --listen-address 127.0.0.1 --port "$port")
scrape() {
  local deadline=$(($(date +%s) + 60))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if python3 - "$port" <<'EOF' 2>/dev/null; then
import sys, urllib.request
port = sys.argv[1]
urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).read()
body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
assert 'gpu_utilization_ratio{' in body, "no gpu_utilization_ratio series"
info = [line for line in body.splitlines() if line.startswith("gpu_exporter_build_info")]
print(info[0] if info else "(no build info)")
EOF
      return 0
    fi
    sleep 1
  done
  return 1
}

# Where the runtime cannot raise resource limits (no CAP_SYS_RESOURCE, as in some VMs and CI
# sandboxes), the container gets the caller's open-files limit and a modest process limit instead of
# the engine's defaults; crun refuses hosts with cgroup v1 and v2 mixed, so podman uses runc if present.
nofile=$(ulimit -Hn)
if [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ]; then nofile=65536; fi
limits=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)
ran=""
if command -v podman >/dev/null; then
  runtime=()
  if command -v runc >/dev/null; then runtime=(--runtime runc); fi
  image_ref="localhost/gpu-bottleneck-exporter:$version"
  if image_id=$(podman pull -q "oci:$out/oci:$version" 2>"$work/podman.err"); then
    podman tag "$image_id" "$image_ref" 2>>"$work/podman.err" || true
  fi
  if podman image exists "$image_ref" \
    && container=$(podman "${runtime[@]}" run -d "${limits[@]}" --network host "$image_ref" "${args[@]}" 2>>"$work/podman.err") \
    && scrape; then
    say "podman ${runtime[*]} run ${limits[*]} --network host $image_ref ${args[*]}"
    ran=podman
  else
    if [ -n "${container:-}" ]; then podman logs "$container" >>"$work/podman.err" 2>&1 || true; fi
    say "podman could not run it here: $(tail -3 "$work/podman.err" | tr '\n' ' ')"
  fi
fi
if [ -z "$ran" ]; then
  runtime=$(command -v runc || command -v crun) || die "needs podman, runc or crun to run the image"
  bundle="$work/bundle"
  umoci unpack --image "$out/oci:$version" "$bundle" >/dev/null
  # the image's runtime config (umoci's), on the host's network so the check can scrape it
  python3 - "$bundle/config.json" "${args[@]}" <<'EOF'
import json, sys
path, args = sys.argv[1], sys.argv[2:]
config = json.load(open(path))
config["process"]["terminal"] = False
config["process"]["args"] = config["process"]["args"][:1] + args
config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n["type"] != "network"]
json.dump(config, open(path, "w"))
EOF
  bundle_id="gbe-image-check-$$"
  "$runtime" run --detach --bundle "$bundle" "$bundle_id" >/dev/null
  say "$(basename "$runtime") run (umoci's runtime bundle) ${args[*]}"
  scrape || die "the container did not serve /metrics"
  ran=$(basename "$runtime")
fi
say "image runs ($ran): /metrics served; $(($(date +%s) - started)) s in all"
