"""Per-pod shared memory: a constructed kubelet pods tree with real tmpfs mounts (where the test may
mount them) and runtime bundle files; the same tree with a fake statvfs otherwise. The containers'
images from the same bundles, containerd's and CRI-O's layouts, and what a hostile or broken bundle
costs: that bundle only, counted once."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.analysis.pods import default_shm
from exporter.sources import runtime
from exporter.sources.errors import ErrorCounter
from exporter.sources.host import HostSource

UID_A, UID_B = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-9999-aaaaaaaaaaaa"
SB_A, SB_B = "a" * 64, "b" * 64
DSHM_A = f"/var/lib/kubelet/pods/{UID_A}/volumes/kubernetes.io~empty-dir/dshm"
SHM_B = f"/run/containerd/io.containerd.grpc.v1.cri/sandboxes/{SB_B}/shm"
TOKEN_A = f"/var/lib/kubelet/pods/{UID_A}/volumes/kubernetes.io~projected/kube-api-access-x"


def bundles(host: Path) -> None:
    tasks = host / "run/containerd/io.containerd.runtime.v2.task/k8s.io"
    for sb, uid, ns, name, shm in (
        (SB_A, UID_A, "ml", "train-0", DSHM_A),
        (SB_B, UID_B, "ml", "train-1", SHM_B),
    ):
        notes = {
            "io.kubernetes.cri.sandbox-id": sb,
            "io.kubernetes.cri.sandbox-uid": uid,
            "io.kubernetes.cri.sandbox-namespace": ns,
            "io.kubernetes.cri.sandbox-name": name,
        }
        (tasks / sb).mkdir(parents=True)
        (tasks / sb / "config.json").write_text(
            json.dumps({"annotations": notes | {"io.kubernetes.cri.container-type": "sandbox"}})
        )
        (tasks / sb[::-1][:40]).mkdir()
        (tasks / sb[::-1][:40] / "config.json").write_text(
            json.dumps(
                {
                    "annotations": notes | {"io.kubernetes.cri.container-type": "container"},
                    "mounts": [
                        {"destination": "/dev/shm", "source": shm},
                        {"destination": "/data", "source": "/x"},
                    ],
                }
            )
        )
    crio = host / "run/containers/storage/overlay-containers" / ("c" * 64) / "userdata"
    crio.mkdir(parents=True)
    crio.joinpath("config.json").write_text(
        json.dumps(
            {
                "annotations": {
                    "io.kubernetes.cri-o.ContainerType": "sandbox",
                    "io.kubernetes.pod.namespace": "batch",
                    "io.kubernetes.pod.name": "crio-pod",
                    "io.kubernetes.pod.uid": "u-3",
                }
            }
        )
    )
    (tasks / "half-written").mkdir()
    (tasks / "half-written" / "config.json").write_text("{")


def proc_tree(root: Path) -> str:
    proc = root / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "stat").write_text("cpu  1 0 1 10 0 0 0 0\ncpu0 1 0 1 10 0 0 0 0\n")
    (proc / "diskstats").write_text("")
    mounts = [
        f"tmpfs {DSHM_A} tmpfs rw 0 0",
        f"tmpfs {SHM_B} tmpfs rw 0 0",
        f"tmpfs {TOKEN_A} tmpfs rw 0 0",
        "tmpfs /run/containers/storage/overlay-containers/" + "c" * 64 + "/userdata/shm tmpfs rw 0 0",
    ]
    (proc / "1" / "mounts").write_text("\n".join(mounts) + "\n")
    return str(proc)


def test_index_reads_containerd_and_crio_bundles(tmp_path):
    bundles(tmp_path)
    index = runtime.scan(str(tmp_path))
    assert index.owner(DSHM_A) == ("ml", "train-0", "dshm")
    assert index.owner(SHM_B) == ("ml", "train-1", "dev-shm")
    assert index.owner("/run/containers/storage/overlay-containers/" + "c" * 64 + "/userdata/shm") == (
        "batch",
        "crio-pod",
        "dev-shm",
    )
    assert index.by_sandbox[SB_A].dev_shm == {DSHM_A} and index.by_sandbox[SB_B].dev_shm == {SHM_B}
    assert index.owner(
        f"/var/lib/kubelet/pods/{'0' * 8}-0000-4000-8000-{'0' * 12}/volumes/kubernetes.io~empty-dir/v"
    ) == ("", "", "v")  # a pod the runtime does not know (yet): the volume is still reported


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000,
        json.dumps({"annotations": [1, 2]}),
        json.dumps([1]),
        json.dumps({"annotations": {"io.kubernetes.cri.container-type": "container"}, "mounts": [1, "x"]}),
        json.dumps({"annotations": {"io.kubernetes.cri.container-type": {"a": 1}}}),
    ],
)
def test_a_malformed_bundle_costs_only_that_bundle(tmp_path, text):
    bundles(tmp_path)
    bad = tmp_path / "run/containerd/io.containerd.runtime.v2.task/k8s.io" / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(text)
    index = runtime.scan(str(tmp_path))
    assert index.owner(DSHM_A) == ("ml", "train-0", "dshm") and index.owner(SHM_B) == (
        "ml",
        "train-1",
        "dev-shm",
    )


def test_a_name_longer_than_kubernetes_allows_is_read_as_absent(tmp_path):
    tasks = tmp_path / "run/containerd/io.containerd.runtime.v2.task/k8s.io"
    (tasks / SB_A).mkdir(parents=True)
    notes = {
        "io.kubernetes.cri.container-type": "sandbox",
        "io.kubernetes.cri.sandbox-uid": UID_A,
        "io.kubernetes.cri.sandbox-namespace": "n" * 200_000,
        "io.kubernetes.cri.sandbox-name": "train-0",
    }
    (tasks / SB_A / "config.json").write_text(json.dumps({"annotations": notes}))
    assert runtime.scan(str(tmp_path)).by_sandbox == {}  # no namespace: not a sandbox it can name
    assert runtime.annotations({"annotations": notes}) == {
        k: v for k, v in notes.items() if len(v) <= runtime.MAX_NAME_CHARS
    }


def _statvfs_fixture(sizes: dict[str, tuple[int, int]], host: Path):
    def statvfs(path: str) -> os.statvfs_result:
        rel = "/" + os.path.relpath(path, host)
        if rel not in sizes:
            raise FileNotFoundError(path)  # a mount this container cannot see
        size, used = sizes[rel]
        return os.statvfs_result((4096, 4096, size // 4096, (size - used) // 4096, 0, 0, 0, 0, 0, 255))

    return statvfs


def test_pod_shm_volumes_labelled_and_the_default_flagged_on_fixtures(tmp_path):
    host = tmp_path / "host"
    bundles(host)
    sizes = {"/dev/shm": (64 << 30, 0), DSHM_A: (64 << 30, 1 << 30), SHM_B: (64 << 20, 1 << 20)}
    source = HostSource(
        ErrorCounter(),
        proc_root=proc_tree(tmp_path),
        host_root=str(host),
        statvfs=_statvfs_fixture(sizes, host),
    )
    r = source.collect()
    labelled = {(s.namespace, s.pod, s.volume): s.size_bytes for s in r.shm}
    assert labelled == {
        ("", "", ""): 64 << 30,
        ("ml", "train-0", "dshm"): 64 << 30,
        ("ml", "train-1", "dev-shm"): 64 << 20,
    }
    flags = default_shm([("ml", "train-0"), ("ml", "train-1")], r.shm, r.pod_dev_shm)
    assert flags == {("ml", "train-0"): False, ("ml", "train-1"): True}


@pytest.fixture
def tmpfs(tmp_path):
    """Mount real tmpfs file systems under the tree, where this machine lets the test."""
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        )
        if result.returncode != 0:
            pytest.skip(
                f"cannot mount tmpfs here ({result.stderr.decode().strip()}); covered by the fixture test"
            )
        mounted.append(path)

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", str(path)], check=False)


def test_pod_shm_on_real_tmpfs_mounts(tmp_path, tmpfs):
    host = tmp_path / "host"
    bundles(host)
    tmpfs(host / DSHM_A.lstrip("/"), "32m")
    tmpfs(host / SHM_B.lstrip("/"), "64m")
    (host / "dev/shm").mkdir(parents=True)
    tmpfs(host / "dev/shm", "16m")
    (host / DSHM_A.lstrip("/") / "batch").write_bytes(b"\0" * (8 << 20))  # a worker's shared batch
    r = HostSource(ErrorCounter(), proc_root=proc_tree(tmp_path), host_root=str(host)).collect()
    by_volume = {(s.pod, s.volume): s for s in r.shm}
    assert by_volume[("train-0", "dshm")].size_bytes == 32 << 20
    assert by_volume[("train-0", "dshm")].used_bytes >= 8 << 20
    assert by_volume[("train-1", "dev-shm")].size_bytes == 64 << 20
    assert default_shm([("ml", "train-0"), ("ml", "train-1")], r.shm, r.pod_dev_shm) == {
        ("ml", "train-0"): True,  # a 32 MiB volume is no better than the default
        ("ml", "train-1"): True,
    }


# ---- the containers' images -------------------------------------------------------------------------

TASKS = "run/containerd/io.containerd.runtime.v2.task/k8s.io"
CRIO_DIR = "run/containers/storage/overlay-containers"
VLLM = "docker.io/vllm/vllm-openai:v0.6.3"
TRITON = "nvcr.io/nvidia/tritonserver:24.05-py3"


def _write(path: Path, spec: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return path


def _containerd_container(host: Path, bundle: str, name: str, image: object, sandbox: str = SB_A) -> Path:
    notes = {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.sandbox-id": sandbox,
        "io.kubernetes.cri.sandbox-namespace": "ml",
        "io.kubernetes.cri.sandbox-name": "train-0",
        "io.kubernetes.cri.container-name": name,
        "io.kubernetes.cri.image-name": image,
    }
    return _write(host / TASKS / bundle / "config.json", {"annotations": notes, "mounts": []})


def _crio(host: Path) -> None:
    """A CRI-O pod as CRI-O lays it out: its sandbox's and its container's specs under userdata/, the
    container naming its sandbox, its own name and the image as pulled."""
    sandbox, container = "d" * 64, "e" * 64
    pod = {
        "io.kubernetes.pod.namespace": "serve",
        "io.kubernetes.pod.name": "api-7",
        "io.kubernetes.pod.uid": "u-9",
    }
    _write(
        host / CRIO_DIR / sandbox / "userdata/config.json",
        {"annotations": pod | {"io.kubernetes.cri-o.ContainerType": "sandbox"}},
    )
    _write(
        host / CRIO_DIR / container / "userdata/config.json",
        {
            "annotations": pod
            | {
                "io.kubernetes.cri-o.ContainerType": "container",
                "io.kubernetes.cri-o.SandboxID": sandbox,
                "io.kubernetes.container.name": "server",
                "io.kubernetes.cri-o.ImageName": TRITON,
            }
        },
    )


def test_images_of_containerd_and_crio_containers(tmp_path):
    bundles(tmp_path)
    _containerd_container(tmp_path, "f" * 64, "engine", VLLM)
    _crio(tmp_path)
    errors = ErrorCounter()
    index = runtime.scan(str(tmp_path), errors=errors)
    assert index.images == {("ml", "train-0", "engine"): VLLM, ("serve", "api-7", "server"): TRITON}
    assert errors.snapshot() == {("host", "ParseError"): 1}  # the fixture's half-written bundle


def test_a_container_whose_sandbox_is_gone_still_names_its_pod(tmp_path):
    """A container bundle read before its sandbox's (or a sandbox torn down first): its own annotations
    name its pod."""
    _containerd_container(tmp_path, "f" * 64, "engine", VLLM, sandbox="9" * 64)
    assert runtime.scan(str(tmp_path)).images == {("ml", "train-0", "engine"): VLLM}


@pytest.mark.parametrize(
    "image",
    [
        "x" * 600,  # longer than any reference
        "vllm/vllm-openai:v1\nINFO fake line",
        'vllm/vllm-openai"} 1\ngpu_fake{a="b',  # exposition text
        "VLLM/VLLM-OPENAI",  # no registry takes capitals in a path
        "vllm//vllm-openai",
        "../../etc/passwd",
        ["vllm/vllm-openai"],
        {"a": 1},
        7,
    ],
)
def test_a_hostile_image_annotation_is_counted_and_never_kept(tmp_path, image):
    bundles(tmp_path)
    _containerd_container(tmp_path, "f" * 64, "engine", image)
    errors = ErrorCounter()
    index = runtime.scan(str(tmp_path), errors=errors)
    assert index.images == {}
    assert errors.snapshot().get(("host", "BadImageAnnotation")) == 1
    assert index.owner(DSHM_A) == ("ml", "train-0", "dshm")  # the rest of the node is read as before


def test_an_oversize_spec_a_fifo_and_a_link_are_skipped_and_counted(tmp_path):
    bundles(tmp_path)
    limit = int(runtime.RUNTIME_SPEC_BYTES.value)
    big = {"annotations": {"io.kubernetes.cri.container-type": "container"}, "pad": "x" * limit}
    _write(tmp_path / TASKS / "big" / "config.json", big)
    (tmp_path / TASKS / "fifo").mkdir()
    os.mkfifo(tmp_path / TASKS / "fifo" / "config.json")  # opening it for reading must not wait
    (tmp_path / TASKS / "link").mkdir()
    (tmp_path / TASKS / "link" / "config.json").symlink_to("/dev/zero")
    (tmp_path / TASKS / "dir" / "config.json").mkdir(parents=True)
    _containerd_container(tmp_path, "f" * 64, "engine", VLLM)
    errors = ErrorCounter()
    index = runtime.scan(str(tmp_path), errors=errors)
    assert index.images == {("ml", "train-0", "engine"): VLLM}
    counted = errors.snapshot()
    assert counted[("host", "RuntimeSpecTooLarge")] == 1
    assert counted[("host", "RuntimeSpecNotARegularFile")] == 2  # the FIFO and the directory
    assert counted[("host", "OSError")] == 1  # the link: O_NOFOLLOW refuses it (ELOOP)


def test_missing_runtime_directories_are_no_error(tmp_path):
    errors = ErrorCounter()
    index = runtime.scan(str(tmp_path), errors=errors)
    assert (index.by_sandbox, index.images, errors.snapshot()) == ({}, {}, {})


def test_the_bundle_bound_is_counted(tmp_path, monkeypatch):
    """Past the bound the rest of a directory waits for the next scan (the bound made small to show it)."""
    monkeypatch.setattr(runtime, "RUNTIME_MAX_BUNDLES", replace(runtime.RUNTIME_MAX_BUNDLES, value=3.0))
    for k in range(5):
        _containerd_container(tmp_path, f"{k:064x}", f"c{k}", VLLM)
    errors = ErrorCounter()
    index = runtime.scan(str(tmp_path), errors=errors)
    assert len(index.images) == 3 and errors.snapshot() == {("host", "RuntimeBundlesSkipped"): 2}


def test_the_host_source_counts_a_bad_bundle_once_and_serves_the_images(tmp_path):
    host = tmp_path / "host"
    bundles(host)
    _containerd_container(host, "f" * 64, "engine", VLLM)
    _containerd_container(host, "e" * 64, "sidecar", "Bad Image")
    now = [0.0]
    errors = ErrorCounter()
    source = HostSource(
        errors,
        proc_root=proc_tree(tmp_path),
        host_root=str(host),
        clock=lambda: now[0],
        pod_index_every_s=10.0,
    )
    for t in (0.0, 1.0, 11.0, 22.0):  # three scans
        now[0] = t
        reading = source.collect()
    assert reading.pod_images == {("ml", "train-0", "engine"): VLLM}
    counted = errors.snapshot()
    assert counted[("host", "BadImageAnnotation")] == 1 and counted[("host", "ParseError")] == 1


def test_a_scan_reads_again_only_the_bundles_that_changed(tmp_path):
    bundles(tmp_path)
    engine = _containerd_container(tmp_path, "f" * 64, "engine", VLLM)
    cache: runtime.BundleCache = {}
    errors = ErrorCounter()
    assert runtime.scan(str(tmp_path), errors=errors, cache=cache).images == {
        ("ml", "train-0", "engine"): VLLM
    }
    first = dict(cache)
    runtime.scan(str(tmp_path), errors=errors, cache=cache)
    assert cache.keys() == first.keys() and all(cache[k] is first[k] for k in first)  # nothing parsed again
    _containerd_container(tmp_path, "f" * 64, "engine", TRITON)  # the container was re-created
    os.utime(engine, ns=(1, 1))  # even within the same clock tick: another mtime
    (tmp_path / TASKS / SB_B / "config.json").unlink()  # a sandbox went
    index = runtime.scan(str(tmp_path), errors=errors, cache=cache)
    assert index.images == {("ml", "train-0", "engine"): TRITON}
    assert SB_B not in index.by_sandbox and str(tmp_path / TASKS / SB_B / "config.json") not in cache
    assert errors.snapshot() == {("host", "ParseError"): 1}  # the half-written fixture: read once


def test_scan_cost_on_a_busy_node(tmp_path, monkeypatch):
    """300 containers with 34 KiB specs (a seccomp profile, 100 variables): the first scan parses them
    all, the next ones only stat them (counted, not timed: 2.8 ms a scan against 47 ms parsing all)."""
    seccomp = {"syscalls": [{"names": [f"sys{i}" for i in range(400)], "action": "SCMP_ACT_ALLOW"}] * 8}
    for k in range(300):
        path = _containerd_container(tmp_path, f"{k:064x}", f"c{k}", VLLM)
        spec = json.loads(path.read_text()) | {"linux": {"seccomp": seccomp}}
        path.write_text(json.dumps(spec | {"process": {"env": [f"K{i}=v{i}" for i in range(100)]}}))
    cache: runtime.BundleCache = {}
    parsed: list[int] = []
    loads = runtime.json.loads
    monkeypatch.setattr(runtime.json, "loads", lambda data, *a, **k: parsed.append(1) or loads(data, *a, **k))
    runtime.scan(str(tmp_path), cache=cache)
    assert len(parsed) >= 300  # the first scan parses every spec...
    parsed.clear()
    for _ in range(10):
        index = runtime.scan(str(tmp_path), cache=cache)
    assert len(index.images) == 300
    assert parsed == []  # ...the next ones none: an unchanged file is not read again
