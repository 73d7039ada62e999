"""make demo-prometheus, shortened to a day of two nodes: a real Prometheus loaded by promtool, one
replay --prometheus over it, the summary by namespace, and the HTML report seen in headless Chromium."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from scripts.stack import HEADLESS_CHROMIUM
from tests.conftest import REPO, require_tool

NAMESPACES = ("research", "platform", "notebooks", "vision")


@pytest.mark.slow
def test_a_day_of_two_nodes_is_diagnosed_by_namespace_and_the_report_renders(tmp_path):
    require_tool("prometheus"), require_tool("promtool")
    chromium = require_tool("chromium")
    run = subprocess.run(
        [sys.executable, "scripts/demo_prometheus.py", "--days", "1", "--nodes", "2", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    text = run.stdout
    assert "by namespace" in text
    for namespace in NAMESPACES:
        assert f"namespace {namespace}:" in text
    assert re.search(r"namespace notebooks: .*idle .*verdicts idle_allocated", text)
    assert re.search(r"namespace vision: .*throttled", text)
    unheld = text.partition("namespace (no pod)")[2].partition("\nnext steps")[0]
    assert "idle_allocated" not in unheld  # the roll-up's GPUs no pod held (the runbooks' lines follow it)

    report = tmp_path / "fleet-report.html"
    dom = subprocess.run(
        [
            chromium,
            *HEADLESS_CHROMIUM,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "Uncaught" not in dom.stderr
    table = dom.stdout.split('id="namespaces"', 1)[1].split("</table>", 1)[0]
    for namespace in NAMESPACES:
        assert f"namespace {namespace}" in table
    assert "data-rendered=" in dom.stdout  # the page's script drew its charts
