"""The alert rules: valid for promtool, unit-tested alert by alert, conventional, each with a runbook."""

from __future__ import annotations

import re
import subprocess

import yaml

from exporter.artifacts import alerts
from tests.conftest import REPO, require_tool

RULES = REPO / "alerts" / "gpu-bottleneck-exporter.rules.yml"
TESTS = sorted((REPO / "alerts" / "tests").glob("*.test.yml"))


def test_promtool_checks_the_rules():
    promtool = require_tool("promtool")
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts.ALERTS)} rules found" in result.stdout


def test_promtool_unit_tests_pass():
    promtool = require_tool("promtool")
    result = subprocess.run([promtool, "test", "rules", *map(str, TESTS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _tested() -> tuple[set[str], set[str]]:
    fires, silent = set(), set()
    for path in TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    return fires, silent


def test_every_alert_is_unit_tested_firing_and_silent():
    fires, silent = _tested()
    names = {a.name for a in alerts.ALERTS}
    assert names - fires == set(), "alerts without a test where they fire"
    assert names - silent == set(), "alerts without a test where they stay silent"


def test_conventions():
    data = yaml.safe_load(RULES.read_text())
    for group in data["groups"]:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", group["name"]), group["name"]
        for rule in group["rules"]:
            assert re.fullmatch(r"Gpu[A-Z][A-Za-z0-9]+", rule["alert"]), rule["alert"]
            assert rule["labels"]["severity"] in ("critical", "warning", "info")
            assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
            assert "{{" in rule["annotations"]["description"] or rule["alert"] == "GpuExporterAbsent"


def test_every_alert_has_a_runbook_for_the_night_shift():
    for alert in alerts.ALERTS:
        page = REPO / "docs" / "runbooks" / f"{alert.name}.md"
        assert page.exists(), page
        text = page.read_text()
        assert text.startswith(f"# {alert.name}") and f"**Severity:** {alert.severity}" in text
        assert "## What it means" in text and "## Confirm" in text and "```" in text
        assert alert.runbook().endswith(f"docs/runbooks/{alert.name}.md")


def test_thresholds_come_from_the_table():
    from exporter import thresholds as th

    text = RULES.read_text()
    assert f"> {th.SHM_WARNING.value:g}" in text and f"> {th.SHM_CRITICAL.value:g}" in text
    assert f"> {th.TEMP_HOT.value:g}" in text and f"< {th.UTIL_SUSPICION.value:g}" in text
    overridden = alerts.expression(
        next(a for a in alerts.ALERTS if a.name == "GpuShmFull"), {"shm_critical": "0.5"}
    )
    assert overridden.endswith("> 0.5")
