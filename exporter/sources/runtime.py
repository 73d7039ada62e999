"""Pod identity of the node's shared-memory mounts, read from the container runtime's bundle files.

containerd (``/run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json``) and CRI-O
(``/run/containers/storage/overlay-containers/<id>/userdata/config.json``) write each sandbox's and
container's OCI spec with the pod's namespace, name and UID as annotations; a container's spec also says
what is mounted at its ``/dev/shm``. No API server access is needed: only these files, read-only.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

BUNDLE_DIRS = (
    "/run/containerd/io.containerd.runtime.v2.task/k8s.io",  # <id>/config.json
    "/run/containers/storage/overlay-containers",  # <id>/userdata/config.json
)
EMPTY_DIR = re.compile(r"/pods/([0-9a-fA-F-]{36})/volumes/kubernetes\.io~empty-dir/([^/]+)$")
SANDBOX_SHM = re.compile(
    r"(?:/io\.containerd\.grpc\.v1\.cri/sandboxes|/overlay-containers)/([0-9a-f]{12,64})(?:/userdata)?/shm$"
)

CONTAINERD = {
    "type": "io.kubernetes.cri.container-type",
    "sandbox": "io.kubernetes.cri.sandbox-id",
    "namespace": "io.kubernetes.cri.sandbox-namespace",
    "pod": "io.kubernetes.cri.sandbox-name",
    "uid": "io.kubernetes.cri.sandbox-uid",
}
CRIO = {
    "type": "io.kubernetes.cri-o.ContainerType",
    "sandbox": "io.kubernetes.cri-o.SandboxID",
    "namespace": "io.kubernetes.pod.namespace",
    "pod": "io.kubernetes.pod.name",
    "uid": "io.kubernetes.pod.uid",
}


@dataclass
class Sandbox:
    id: str
    namespace: str
    pod: str
    uid: str
    dev_shm: set[str] = field(default_factory=set)  # what the pod's containers mount at /dev/shm


@dataclass(frozen=True)
class PodIndex:
    by_sandbox: dict[str, Sandbox]
    by_uid: dict[str, Sandbox]

    def owner(self, mountpoint: str) -> tuple[str, str, str] | None:
        """(namespace, pod, volume) of a pod's memory-backed mount; volume "dev-shm" for the sandbox's."""
        if match := EMPTY_DIR.search(mountpoint):
            sandbox = self.by_uid.get(match.group(1))
            return (sandbox.namespace, sandbox.pod, match.group(2)) if sandbox else ("", "", match.group(2))
        if match := SANDBOX_SHM.search(mountpoint):
            sandbox = self.by_sandbox.get(match.group(1))
            return (sandbox.namespace, sandbox.pod, "dev-shm") if sandbox else None
        return None


def is_pod_mount(mountpoint: str) -> bool:
    return bool(EMPTY_DIR.search(mountpoint) or SANDBOX_SHM.search(mountpoint))


# Kubernetes' longest name (a pod's; a namespace or container is 63): an annotation longer is not a
# name the runtime was given, and is read as absent rather than become a label value
MAX_NAME_CHARS = 253


def _spec(path: Path) -> dict | None:
    """A bundle's OCI spec, or None: a bundle being created or torn down is skipped this round, and so
    is one that is not a spec (a hostile host's or a runtime bug's file costs that bundle only)."""
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return spec if isinstance(spec, dict) else None


def annotations(spec: dict) -> dict[str, str]:
    """The spec's annotations that can be names: strings of at most MAX_NAME_CHARS."""
    notes = spec.get("annotations")
    if not isinstance(notes, dict):
        return {}
    return {k: v for k, v in notes.items() if isinstance(v, str) and len(v) <= MAX_NAME_CHARS}


def read_annotations(path: Path) -> dict[str, str] | None:
    """``annotations`` of the spec at ``path``; None where there is no readable spec."""
    spec = _spec(path)
    return None if spec is None else annotations(spec)


def _shm_sources(spec: dict) -> set[str]:
    """What the container's spec mounts at /dev/shm."""
    mounts = spec.get("mounts")
    if not isinstance(mounts, list):
        return set()
    return {
        m["source"]
        for m in mounts
        if isinstance(m, dict) and m.get("destination") == "/dev/shm" and isinstance(m.get("source"), str)
    }


def scan(host_root: str = "/", bundle_dirs: tuple[str, ...] = BUNDLE_DIRS) -> PodIndex:
    sandboxes: dict[str, Sandbox] = {}
    containers: list[tuple[str, set[str]]] = []
    for bundle_dir in bundle_dirs:
        root = Path(host_root, bundle_dir.lstrip("/"))
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        for entry in entries:
            spec = _spec(root / entry / "config.json") or _spec(root / entry / "userdata" / "config.json")
            if not spec:
                continue
            notes = annotations(spec)
            keys = CONTAINERD if CONTAINERD["type"] in notes else CRIO
            kind = notes.get(keys["type"])
            if kind == "sandbox" and notes.get(keys["namespace"]) and notes.get(keys["pod"]):
                sandboxes[entry] = Sandbox(
                    entry, notes[keys["namespace"]], notes[keys["pod"]], notes.get(keys["uid"], "")
                )
            elif kind == "container" and notes.get(keys["sandbox"]):
                containers.append((notes[keys["sandbox"]], _shm_sources(spec)))
    for sandbox_id, shm in containers:
        if sandbox_id in sandboxes:
            sandboxes[sandbox_id].dev_shm |= {s for s in shm if s}
    return PodIndex(sandboxes, {s.uid: s for s in sandboxes.values() if s.uid})
