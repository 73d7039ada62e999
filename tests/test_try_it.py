"""The README's "Try it" lines, run exactly as written in a fresh copy of the project: a virtual
environment, pip, and replay on the example trace; no root, no GPU, no tool beyond Python."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# what `pip install -e .` reads, and the trace the second line replays
PROJECT_FILES = ("pyproject.toml", "README.md", "LICENSE", "examples/traces/starvation_h100x8.csv.gz")


def try_it_lines() -> list[str]:
    """The first shell block of README.md's "Try it" section, comments and all (bash reads them)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "no shell block in README.md's Try it section"
    return block.group(1).strip().splitlines()


def test_the_try_it_block_is_a_python_only_path():
    """pip and the replay: nothing that needs root, apt or make."""
    lines = try_it_lines()
    assert any("pip install" in line for line in lines), lines
    assert any("gpu-bottleneck-exporter replay examples/traces/" in line for line in lines), lines
    assert not any(re.search(r"\b(sudo|apt-get|apt|make)\b", line.split("#")[0]) for line in lines), lines


@pytest.mark.slow
def test_the_try_it_lines_run_as_written(tmp_path):
    project = tmp_path / "project"
    for name in PROJECT_FILES:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, project / name)
    shutil.copytree(REPO / "exporter", project / "exporter", ignore=shutil.ignore_patterns("__pycache__"))
    script = "set -euo pipefail\n" + "\n".join(try_it_lines()) + "\n"
    # `python3` as the reader has it: this interpreter's (a virtual environment's python3 makes one too)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=project,
        env={**os.environ, "PATH": path, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        capture_output=True,
        text=True,
        timeout=1800,  # only keeps a broken registry from hanging the suite
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "examples/traces/starvation_h100x8.csv.gz: 8 GPU(s)" in out, out[-3000:]
    assert re.search(r"GPU 3: data_starvation from \d+ s", out), out[-3000:]
    assert "Traceback" not in result.stderr
