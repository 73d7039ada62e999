"""Pod identity of the node's shared-memory mounts, read from the container runtime's bundle files.

containerd (``/run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json``) and CRI-O
(``/run/containers/storage/overlay-containers/<id>/userdata/config.json``) write each sandbox's and
container's OCI spec with the pod's namespace, name and UID as annotations; a container's spec also says
what is mounted at its ``/dev/shm``, and its name and image (what the workload class reads when nothing
stronger says it). No API server access is needed: only these files, read-only, each read to a bound
(``runtime.spec_max_bytes``) without following a link or waiting on a FIFO. A file that cannot be read or
is not a spec costs its bundle only, until the file changes, and is counted once
(``gpu_exporter_collect_errors_total``, source ``host``); a bundle gone between the listing and the read is
not an error (a container ended).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from exporter.podlogs.workload import IMAGE_REF_CHARS, image_path
from exporter.policy.thresholds import RUNTIME_MAX_BUNDLES, RUNTIME_SPEC_BYTES
from exporter.sources.errors import ErrorCounter

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
    "container": "io.kubernetes.cri.container-name",
    "image": "io.kubernetes.cri.image-name",  # the image as the pod spec names it
}
CRIO = {
    "type": "io.kubernetes.cri-o.ContainerType",
    "sandbox": "io.kubernetes.cri-o.SandboxID",
    "namespace": "io.kubernetes.pod.namespace",
    "pod": "io.kubernetes.pod.name",
    "uid": "io.kubernetes.pod.uid",
    "container": "io.kubernetes.container.name",
    "image": "io.kubernetes.cri-o.ImageName",  # the image as pulled, its registry spelled out
}
SOURCE = "host"  # the errors are the host source's, which reads the bundles
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO never blocks the open
# a bundle being created or torn down, or the other runtime's layout tried: not an error
_ABSENT = (errno.ENOENT, errno.ENOTDIR)


class OncePerPath:
    """Counts each (error, path) once: a bad bundle stays bad scan after scan, and one counted every few
    seconds would read as a stream of new errors. Remembers at most ``bound`` of them, then starts
    over (a node with that many bad bundles is counted again, not forgotten)."""

    def __init__(self, errors: ErrorCounter, bound: int = int(RUNTIME_MAX_BUNDLES.value)) -> None:
        self.errors = errors
        self.bound = bound
        self._seen: set[tuple[str, str]] = set()

    def inc(self, source: str, error: str, detail: str = "", n: int = 1) -> None:
        if (error, detail) in self._seen:
            return
        if len(self._seen) >= self.bound:
            self._seen.clear()
        self._seen.add((error, detail))
        self.errors.inc(source, error, detail, n)


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
    # (namespace, pod, container) -> the container's image reference, for the pods' containers that
    # name a valid one (a pod's sandbox has no image of its own)
    images: dict[tuple[str, str, str], str] = field(default_factory=dict)

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


class _Unreadable(Exception):
    """A bundle file that is there but cannot be taken as a spec; its args[0] is the counted name."""


def _read(path: Path) -> bytes:
    """The file's bytes, at most RUNTIME_SPEC_BYTES of a regular file; raises OSError or _Unreadable."""
    fd = os.open(path, _FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Unreadable("NotARegularFile")
        limit, data = int(RUNTIME_SPEC_BYTES.value), b""
        while len(data) <= limit:  # a short read of a regular file is rare, but allowed
            more = os.read(fd, limit + 1 - len(data))
            if not more:
                break
            data += more
        if len(data) > limit:
            raise _Unreadable("TooLarge")
        return data
    finally:
        os.close(fd)


def read_spec(path: Path, errors: ErrorCounter | OncePerPath | None = None) -> dict | None:
    """A bundle's OCI spec, or None: a bundle being created or torn down is skipped this round, and so
    is one that is not a spec (a hostile host's or a runtime bug's file costs that bundle only; counted
    where ``errors`` is given)."""
    try:
        data = _read(path)
        if not data:
            return None  # being written: the runtime writes a spec before it starts the container
        spec = json.loads(data)
    except OSError as exc:
        if exc.errno not in _ABSENT and errors is not None:
            errors.inc(SOURCE, type(exc).__name__, str(path))
        return None
    except _Unreadable as exc:
        if errors is not None:
            errors.inc(SOURCE, f"RuntimeSpec{exc.args[0]}", str(path))
        return None
    except (ValueError, RecursionError):
        if errors is not None:
            errors.inc(SOURCE, "ParseError", str(path))
        return None
    if not isinstance(spec, dict):
        if errors is not None:
            errors.inc(SOURCE, "ParseError", str(path))
        return None
    return spec


def annotations(spec: dict) -> dict[str, str]:
    """The spec's annotations that can be names: strings of at most MAX_NAME_CHARS."""
    notes = spec.get("annotations")
    if not isinstance(notes, dict):
        return {}
    return {k: v for k, v in notes.items() if isinstance(v, str) and len(v) <= MAX_NAME_CHARS}


def read_annotations(path: Path) -> dict[str, str] | None:
    """``annotations`` of the spec at ``path``; None where there is no readable spec."""
    spec = read_spec(path)
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


def _image(spec: dict, key: str, errors: ErrorCounter | OncePerPath | None, path: Path) -> str:
    """The container's image reference; "" where none is given, or where the annotation is no reference
    (too long, characters no registry allows: counted, never a label or a class)."""
    notes = spec.get("annotations")
    value = notes.get(key) if isinstance(notes, dict) else None
    if value is None or value == "":
        return ""
    if isinstance(value, str) and len(value) <= IMAGE_REF_CHARS and image_path(value) is not None:
        return value
    if errors is not None:
        errors.inc(SOURCE, "BadImageAnnotation", str(path))
    return ""


@dataclass(frozen=True)
class _Bundle:
    """What a scan keeps of one bundle's spec: a sandbox's pod, or a container's sandbox, name, image
    and /dev/shm. A container's own annotations name its pod too (CRI-O and containerd both do)."""

    kind: str  # sandbox | container
    sandbox: str  # a container's sandbox
    namespace: str
    pod: str
    uid: str
    name: str  # a container's name
    image: str
    shm: frozenset[str]


# path -> (the file's identity when read: inode, mtime, size; what was kept of it, None for no spec).
# A runtime writes a spec once, so a scan re-reads only the bundles that are new or were rewritten:
# parsing a few hundred 30 KiB specs (seccomp profiles, environments) every scan would cost tens of ms.
BundleCache = dict[str, tuple[tuple[int, int, int], "_Bundle | None"]]


def _summary(spec: dict, entry: str, errors: ErrorCounter | OncePerPath | None, path: Path) -> _Bundle | None:
    notes = annotations(spec)
    keys = CONTAINERD if CONTAINERD["type"] in notes else CRIO
    kind = notes.get(keys["type"])
    if kind == "sandbox" and notes.get(keys["namespace"]) and notes.get(keys["pod"]):
        return _Bundle(
            "sandbox",
            entry,
            notes[keys["namespace"]],
            notes[keys["pod"]],
            notes.get(keys["uid"], ""),
            "",
            "",
            frozenset(),
        )
    if kind == "container" and notes.get(keys["sandbox"]):
        return _Bundle(
            "container",
            notes[keys["sandbox"]],
            notes.get(keys["namespace"], ""),
            notes.get(keys["pod"], ""),
            "",
            notes.get(keys["container"], ""),
            _image(spec, keys["image"], errors, path),
            frozenset(s for s in _shm_sources(spec) if s),
        )
    return None


def _bundle(
    entry_dir: Path, errors: ErrorCounter | OncePerPath | None, cache: BundleCache, seen: BundleCache
) -> _Bundle | None:
    """One bundle's summary: containerd's spec, else CRI-O's (under userdata/); from ``cache`` where the
    file is the one read before. What was read goes into ``seen``."""
    for path in (entry_dir / "config.json", entry_dir / "userdata" / "config.json"):
        try:
            st = os.lstat(path)
        except OSError as exc:
            if exc.errno in _ABSENT:
                continue
            if errors is not None:
                errors.inc(SOURCE, type(exc).__name__, str(path))
            return None
        key, name = (st.st_ino, st.st_mtime_ns, st.st_size), str(path)
        cached = cache.get(name)
        if cached is not None and cached[0] == key:
            seen[name] = cached
            return cached[1]
        spec = read_spec(path, errors)
        found = _summary(spec, entry_dir.name, errors, path) if spec else None
        if spec is not None or st.st_size > 0:  # an empty file is being written: read it again next scan
            seen[name] = (key, found)
        return found
    return None


def _entries(root: Path, errors: ErrorCounter | OncePerPath | None) -> list[str]:
    """The bundle IDs under ``root``, at most RUNTIME_MAX_BUNDLES of them (the rest counted); none where
    this runtime is not on the node."""
    try:
        entries = sorted(os.listdir(root))
    except OSError as exc:
        if exc.errno not in _ABSENT and errors is not None:
            errors.inc(SOURCE, type(exc).__name__, str(root))
        return []
    bound = int(RUNTIME_MAX_BUNDLES.value)
    if len(entries) > bound and errors is not None:
        errors.inc(SOURCE, "RuntimeBundlesSkipped", str(root), n=len(entries) - bound)
    return entries[:bound]


def scan(
    host_root: str = "/",
    bundle_dirs: tuple[str, ...] = BUNDLE_DIRS,
    errors: ErrorCounter | OncePerPath | None = None,
    cache: BundleCache | None = None,
) -> PodIndex:
    """The pods the runtime's bundles name. With ``cache`` (kept by the caller from scan to scan) a
    bundle already read is not read again while its file is unchanged; the cache keeps only the
    bundles there now."""
    before = cache if cache is not None else {}
    seen: BundleCache = {}
    sandboxes: dict[str, Sandbox] = {}
    containers: list[_Bundle] = []
    for bundle_dir in bundle_dirs:
        root = Path(host_root, bundle_dir.lstrip("/"))
        for entry in _entries(root, errors):
            found = _bundle(root / entry, errors, before, seen)
            if found is not None and found.kind == "sandbox":
                sandboxes[entry] = Sandbox(entry, found.namespace, found.pod, found.uid)
            elif found is not None:
                containers.append(found)
    if cache is not None:
        cache.clear()
        cache.update(seen)
    images: dict[tuple[str, str, str], str] = {}
    for c in containers:
        sandbox = sandboxes.get(c.sandbox)
        if sandbox is not None:
            sandbox.dev_shm |= c.shm
        namespace, pod = (sandbox.namespace, sandbox.pod) if sandbox else (c.namespace, c.pod)
        if c.image and namespace and pod and c.name:
            images[(namespace, pod, c.name)] = c.image
    return PodIndex(sandboxes, {s.uid: s for s in sandboxes.values() if s.uid}, images)
