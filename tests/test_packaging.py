"""The image recipe agrees with the chart and the package: same command, port and pinned dependencies,
and the pinned set installs and runs (the Dockerfile's steps, in a fresh virtual environment)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from urllib.request import urlopen

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from scripts.stack import free_port, wait_http
from tests.conftest import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
CHART = REPO / "helm" / "gpu-bottleneck-exporter"


def instructions(name: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.+)$", DOCKERFILE, re.M)]


def pins() -> dict[str, str]:
    found = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            found[canonicalize_name(name)] = version
    return found


def chart_container() -> tuple[list[str], list[str], int]:
    template = (CHART / "templates" / "daemonset.yaml").read_text()
    command = json.loads(re.search(r"command: (\[.*\])", template).group(1))
    first_arg = re.search(r"args:\n\s+- (\w+)", template).group(1)
    port = yaml.safe_load((CHART / "values.yaml").read_text())["exporter"]["port"]
    return command, [first_arg], port


def test_image_runs_what_the_chart_runs():
    command, args, port = chart_container()
    assert json.loads(instructions("ENTRYPOINT")[-1]) == command
    assert json.loads(instructions("CMD")[-1]) == args
    assert instructions("EXPOSE")[-1] == str(port)


def test_image_is_multi_stage_and_non_root():
    assert len(instructions("FROM")) >= 2
    user = instructions("USER")[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0  # numeric, so runAsNonRoot can verify it
    assert "-r requirements.lock" in DOCKERFILE and "--no-deps ." in DOCKERFILE


def test_lock_pins_every_runtime_dependency_within_its_range():
    locked = pins()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"]:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is not in requirements.lock"
        assert req.specifier.contains(locked[name]), f"{req.name}=={locked[name]} is outside {req.specifier}"


@pytest.mark.slow
def test_the_pinned_set_installs_and_serves(tmp_path: Path):
    """What the Dockerfile's build stage does, then the container's command on a simulated node."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "-r", str(REPO / "requirements.lock")], check=True, timeout=600)
    src = tmp_path / "src"  # what the Dockerfile copies, so the build leaves nothing in the checkout
    shutil.copytree(REPO / "exporter", src / "exporter", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    subprocess.run([*pip, "install", "--no-deps", str(src)], check=True, timeout=600)
    check = subprocess.run([*pip, "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    port = free_port()
    exe = str(venv / "bin" / "gpu-bottleneck-exporter")
    proc = subprocess.Popen(
        [
            exe,
            "serve",
            "--simulate",
            "healthy",
            "--sim-gpus",
            "1",
            "--port",
            str(port),
            "--listen-address",
            "127.0.0.1",
        ],
        cwd=tmp_path,  # not the checkout: the installed package alone
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", proc=proc)
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert b"gpu_utilization_ratio{" in r.read()
    finally:
        proc.terminate()
        assert proc.wait(15) == 0


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_runtime_module_imports_the_development_tools():
    """The artifact generators need the dev extra and the checkout: the installed package must not."""
    offenders = [
        f"{path.relative_to(REPO)} imports {name}"
        for path in sorted((REPO / "exporter").rglob("*.py"))
        for name in _imported_modules(path)
        if name == "devtools" or name.startswith("devtools.")
    ]
    assert offenders == []


def test_the_wheel_ships_the_runtime_package_only(tmp_path: Path):
    """A wheel built from the checkout's sources (development tools beside them) holds exporter/ alone."""
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__")
    for name in ("exporter", "devtools"):
        shutil.copytree(REPO / name, src / name, ignore=skip)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    out = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
        timeout=300,
    )
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"exporter"}
    assert "exporter/collect/sampler.py" in names and "exporter/offline/report_assets/" in "".join(names)
    assert not [name for name in names if "artifacts" in name.split("/")]
