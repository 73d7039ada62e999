"""Each platform's driver preset (`driver.platform`) and the critical priority class, rendered by the real
helm: strictly valid Kubernetes, and mounting what that platform needs for NVML to be found."""

from __future__ import annotations

import pytest

from devtools.artifacts.chart import DRIVER_PLATFORMS
from tests.helm.chart import container, core_problems, env, one, render
from tests.helm.test_chart_defaults import notes

# what each platform needs: the RuntimeClass, the node path mounted (its hostPath type), where it is
# mounted, with which propagation, and the loader's search path
EXPECTED = {
    "generic": (None, None, None, None, None, None),
    "runtime-class": ("nvidia", None, None, None, None, None),
    "gpu-operator": (
        "nvidia",
        "/run/nvidia/driver",
        "DirectoryOrCreate",  # the driver container mounts onto it later (HostToContainer shows it)
        "/host/driver",
        "HostToContainer",
        "/host/driver/usr/lib64:/host/driver/usr/lib/x86_64-linux-gnu:/host/driver/usr/lib/aarch64-linux-gnu",
    ),
    "gke-cos": (None, "/home/kubernetes/bin/nvidia", "Directory", "/host/driver", None, "/host/driver/lib64"),
    "eks-al2": (
        None,
        "/usr/lib64/libnvidia-ml.so.1",
        "File",
        "/host/driver/lib64/libnvidia-ml.so.1",
        None,
        "/host/driver/lib64",
    ),
    "eks-bottlerocket": (None, "/usr/lib/nvidia/tesla", "Directory", "/host/driver", None, "/host/driver"),
}


def _pod(docs: list[dict]) -> dict:
    return one(docs, "DaemonSet")["spec"]["template"]["spec"]


def _driver(docs: list[dict]) -> tuple[dict | None, dict | None]:
    volume = next((v for v in _pod(docs)["volumes"] if v["name"] == "nvidia-driver"), None)
    mount = next((m for m in container(docs)["volumeMounts"] if m["name"] == "nvidia-driver"), None)
    return volume, mount


def test_every_platform_has_its_expectation():
    assert set(EXPECTED) == set(DRIVER_PLATFORMS)


@pytest.mark.parametrize("platform", DRIVER_PLATFORMS)
def test_each_platform_renders_valid_and_mounts_what_it_needs(platform):
    docs = render(sets={"driver.platform": platform})
    assert core_problems(docs) == []
    runtime, host_path, kind, mount_path, propagation, library_path = EXPECTED[platform]
    assert _pod(docs).get("runtimeClassName") == runtime
    volume, mount = _driver(docs)
    variables = env(docs)
    assert variables["NVIDIA_VISIBLE_DEVICES"] == "all"  # the runtimes that inject NVML read it
    if host_path is None:
        assert volume is None and mount is None and "LD_LIBRARY_PATH" not in variables
        return
    assert volume["hostPath"] == {"path": host_path, "type": kind}
    assert mount["mountPath"] == mount_path and mount["readOnly"] is True
    assert mount.get("mountPropagation") == propagation
    assert variables["LD_LIBRARY_PATH"] == library_path
    # every directory the loader searches lies in what is mounted (or holds the one file mounted)
    for directory in library_path.split(":"):
        assert directory.startswith(mount_path) or mount_path == f"{directory}/libnvidia-ml.so.1"


@pytest.mark.parametrize(
    ("platform", "said"),
    [
        ("generic", "the node's default runtime, when it is the NVIDIA runtime (driver.platform=generic;"),
        (
            "gke-cos",
            "the node's /home/kubernetes/bin/nvidia, mounted at /host/driver (driver.platform=gke-cos;",
        ),
        ("runtime-class", "RuntimeClass nvidia (driver.platform=runtime-class;"),
    ],
)
def test_the_notes_say_how_nvml_reaches_the_pod_and_how_to_check(platform, said, tmp_path):
    text = notes(tmp_path, operator=True, sets={"driver.platform": platform})
    assert f"NVML (libnvidia-ml.so.1) for a pod that requests no GPU: {said}" in text
    assert "-c exporter -- gpu-bottleneck-exporter doctor" in text


def test_a_directory_of_your_own_and_a_runtime_class_override_the_preset():
    docs = render(
        sets={
            "driver.platform": "gke-cos",
            "driver.hostPath": "/opt/nvidia/current",
            "driver.libDirs": "{lib,lib64}",
            "runtimeClassName": "nvidia-cdi",
        }
    )
    assert core_problems(docs) == []
    volume, mount = _driver(docs)
    assert volume["hostPath"] == {"path": "/opt/nvidia/current", "type": "Directory"}
    assert mount["mountPath"] == "/host/driver"
    assert env(docs)["LD_LIBRARY_PATH"] == "/host/driver/lib:/host/driver/lib64"
    assert _pod(docs)["runtimeClassName"] == "nvidia-cdi"


# ---- the critical priority class outside kube-system ------------------------------------------------------


def _quota(docs: list[dict]) -> dict | None:
    found = [d for d in docs if d["kind"] == "ResourceQuota"]
    assert len(found) <= 1
    return found[0] if found else None


def test_the_default_priority_class_comes_with_the_quota_that_admits_it():
    docs = render()
    assert core_problems(docs) == []
    assert _pod(docs)["priorityClassName"] == "system-node-critical"
    quota = _quota(docs)
    assert quota["metadata"]["namespace"] == one(docs, "DaemonSet")["metadata"]["namespace"] == "monitoring"
    assert quota["spec"]["hard"] == {"pods": "10000"}
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == [
        {"operator": "In", "scopeName": "PriorityClass", "values": ["system-node-critical"]}
    ]


@pytest.mark.parametrize(
    ("sets", "priority"),
    [
        ({"namespaceOverride": "kube-system"}, "system-node-critical"),  # kube-system admits it as it is
        ({"criticalPodsQuota.enabled": "false"}, "system-node-critical"),
        ({"priorityClassName": "gpu-monitoring"}, "gpu-monitoring"),  # a class of your own needs no quota
        ({"priorityClassName": ""}, None),
    ],
    ids=["kube-system", "quota-off", "own-class", "no-class"],
)
def test_no_quota_where_none_is_needed(sets, priority):
    docs = render(sets=sets)
    assert core_problems(docs) == []
    assert _quota(docs) is None
    assert _pod(docs).get("priorityClassName") == priority


def test_the_quota_follows_the_critical_class_and_its_size():
    docs = render(sets={"priorityClassName": "system-cluster-critical", "criticalPodsQuota.pods": "64"})
    quota = _quota(docs)
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["system-cluster-critical"]
    assert quota["spec"]["hard"] == {"pods": "64"}
