"""`doctor` says where it found NVML (the library file it loaded), or in one line that the node has no
NVIDIA device: through the simulator's library, and through the real bindings on a machine whose loader
finds no driver (or a file that is not NVIDIA's, put on LD_LIBRARY_PATH the way the chart's driver
presets put the node's driver)."""

from __future__ import annotations

import _ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from exporter.cli import main
from exporter.doctor.checks import run_checks
from exporter.doctor.gather import PodSources, gather
from exporter.doctor.render import report
from tests.conftest import REPO, real_nvml_present


def _cpu_node_sys(tmp_path: Path) -> Path:
    """A /sys whose PCI bus holds an Intel bridge and no NVIDIA GPU."""
    sys_root = tmp_path / "sys"
    device = sys_root / "bus/pci/devices/0000:00:1f.0"
    device.mkdir(parents=True, exist_ok=True)
    (device / "vendor").write_text("0x8086\n")
    (device / "class").write_text("0x060100\n")
    return sys_root


def test_the_simulated_node_names_the_library_it_loaded(capsys):
    assert main(["doctor", "--simulate", "healthy"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        r"NVML: the simulator's libnvidia-ml \(8 simulated GPUs\) \(driver [0-9.]+\)", lines[1]
    )
    assert lines[2].startswith("CHECK ")
    assert main(["doctor", "--simulate", "healthy", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nvml"]["library"] == "the simulator's libnvidia-ml (8 simulated GPUs)"
    assert doc["nvml"]["error"] is None and doc["no_nvidia_device"] is False


def test_a_gpu_node_without_the_library_says_why_above_the_table(make_node):
    node = make_node(library_present=False)
    facts = gather(node.install(), node.host.sys_root, node.host.proc_root, None)
    text = report(facts, run_checks(facts), "gpu-node")
    second = text.splitlines()[1]
    assert second.startswith(
        "NVML: not loaded (no libnvidia-ml.so.1 on the library path: no NVIDIA driver here); "
        "8 NVIDIA GPU(s) on the PCI bus: every check but the driver's needs it."
    )
    assert "driver.platform" in second
    assert text.rstrip().endswith("1 fail (driver), 0 warn, 0 pass, 12 skipped: exit 2")


def test_a_node_with_no_nvidia_device_is_one_line(make_node, tmp_path):
    node = make_node(library_present=False)
    pods = PodSources(node.kubelet_socket, node.host.host_root, statvfs=node.host.statvfs)
    facts = gather(node.install(), str(_cpu_node_sys(tmp_path)), node.host.proc_root, pods)
    text = report(facts, run_checks(facts), "cpu-node")
    assert text == (
        "node doctor: cpu-node: no NVIDIA device on this node (the PCI bus lists no NVIDIA GPU; NVML: no "
        "libnvidia-ml.so.1 on the library path: no NVIDIA driver here); nothing to check: exit 0"
    )
    # told the node has GPUs, it is not "no device": the driver's check fails in the table
    expecting = gather(
        node.install(), str(_cpu_node_sys(tmp_path)), node.host.proc_root, None, expected_gpus=8
    )
    table = report(expecting, run_checks(expecting), "gpu-node")
    assert "no NVIDIA device" not in table and table.rstrip().endswith(": exit 2")


def _doctor(sys_root: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    """The real command in a process of its own (the loader reads LD_LIBRARY_PATH when it starts)."""
    command = [sys.executable, "-m", "exporter", "doctor", "--sys-root", str(sys_root)]
    return subprocess.run(
        [*command, "--pod-resources-socket", "", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )


def test_the_library_found_on_the_library_path_is_named(tmp_path):
    """A driver directory put on LD_LIBRARY_PATH (as the chart's presets do) wins over the system's: here
    it holds a shared object that is not NVIDIA's, so the real bindings load it and nvmlInit finds none of
    its entry points, whether or not this machine has a driver."""
    driver = tmp_path / "driver" / "lib64"
    driver.mkdir(parents=True)
    shutil.copy(_ctypes.__file__, driver / "libnvidia-ml.so.1")
    result = _doctor(_cpu_node_sys(tmp_path), {"LD_LIBRARY_PATH": str(driver)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"node doctor: {os.uname().nodename}: no NVIDIA device on this node (the PCI bus lists no NVIDIA "
        f"GPU; NVML: {driver}/libnvidia-ml.so.1: it lacks NVML's entry points (not NVIDIA's library, or "
        "one too old)); nothing to check: exit 0"
    )
    doc = json.loads(_doctor(_cpu_node_sys(tmp_path), {"LD_LIBRARY_PATH": str(driver)}, "--json").stdout)
    assert doc["nvml"] == {
        "library": f"{driver}/libnvidia-ml.so.1",
        "error": "FunctionNotFound",
        "driver_version": None,
    }
    assert doc["no_nvidia_device"] is True and doc["exit_code"] == 0


def test_this_machine_through_the_real_bindings(tmp_path):
    """No driver here: one line, no table. With a driver (a GPU machine), the file the loader mapped."""
    result = _doctor(_cpu_node_sys(tmp_path), {})
    if real_nvml_present():
        second = result.stdout.splitlines()[1]
        assert re.match(r"NVML: /\S*libnvidia-ml\.so[.0-9]*", second), result.stdout
    else:
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("\n") == 1 and "skipped" not in result.stdout
        assert "no NVIDIA device on this node" in result.stdout
        assert "no libnvidia-ml.so.1 on the library path" in result.stdout
