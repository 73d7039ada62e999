"""The alert rules: valid for promtool, unit-tested alert by alert, conventional, each with a runbook."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from devtools.artifacts import alerts, cost_rules, recording
from tests.conftest import REPO, require_tool

RULES = REPO / "alerts" / "gpu-bottleneck-exporter.rules.yml"
TESTS = sorted((REPO / "alerts" / "tests").glob("*.test.yml"))


def test_promtool_checks_the_rules():
    promtool = require_tool("promtool")
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    rules = len(alerts.ALERTS) + len(recording.RECORDS) + len(cost_rules.RECORDS)
    assert f"SUCCESS: {rules} rules found" in result.stdout


def test_vmalert_parses_the_same_file_as_metricsql(tmp_path):
    """The global ruler of a sharded setup (docs/scale.md) reads the same file: vmalert's check parses
    every expression as MetricsQL and every annotation template; a broken expression fails it."""
    vmalert = require_tool("vmalert")

    def check(path) -> subprocess.CompletedProcess:
        return subprocess.run([vmalert, f"-rule={path}", "-dryRun"], capture_output=True, text=True)

    result = check(RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(RULES.read_text().replace("sum by (", "sum by ((", 1))
    result = check(broken)
    assert result.returncode != 0 and "invalid expression" in result.stdout + result.stderr


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
            if "record" in rule:  # level:metric:operations
                assert re.fullmatch(r"[a-z_]+:gpu[a-z_]*:[a-z0-9_]+", rule["record"]), rule["record"]
                continue
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
    from exporter.policy import thresholds as th

    text = RULES.read_text()
    assert f"> {th.SHM_WARNING.value:g}" in text and f"> {th.SHM_CRITICAL.value:g}" in text
    assert f"> {th.TEMP_HOT.value:g}" in text and f"< {th.UTIL_SUSPICION.value:g}" in text
    overridden = alerts.expression(
        next(a for a in alerts.ALERTS if a.name == "GpuShmFull"), {"shm_critical": "0.5"}
    )
    assert overridden.endswith("> 0.5")


# ---- one place per kind, one place per number ---------------------------------------------------------


def test_every_alert_takes_for_and_severity_from_the_threshold_table():
    from exporter.policy import thresholds as th

    assert [a.name for a in alerts.ALERTS] == list(dict.fromkeys(a.name for a in alerts.ALERTS))
    assert {a.name for a in alerts.ALERTS} == set(th.ALERT_POLICIES), "an alert without a policy, or back"
    rules = {
        r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r
    }
    for name, policy in th.ALERT_POLICIES.items():
        assert rules[name]["labels"]["severity"] == policy.severity.value
        assert rules[name].get("for", "0s") == policy.for_text
        assert policy.severity.value in th.SEVERITIES
    source = (REPO / "devtools" / "artifacts" / "alerts.py").read_text()
    typed = re.findall(r'"(critical|warning|info|[0-9]*[1-9][0-9]*[smh])"', source)  # 0s: no `for`
    assert typed == [], f"alerts.py types a severity or a `for` itself: {typed}"


def test_every_kind_of_the_registry_pages_and_verdict_alerts_come_from_it():
    from exporter.analysis.kinds import KINDS

    by_name = {a.name: a for a in alerts.ALERTS}
    for kind in KINDS.values():
        assert kind.alert in by_name, f"{kind.name}: its alert {kind.alert} is not in the rules"
        if kind.text is not None:
            a = by_name[kind.alert]
            # a comm verdict is silent while the job rules blame a pod on another node (recording.py):
            # it reads the job's evidence, so its group runs where the job rules do
            explained = kind.explained_by is not None
            assert a.group == (alerts.JOB_VERDICT_GROUP if explained else alerts.VERDICT_GROUP)
            verdict = a.expr.removesuffix(alerts._unless_explained(kind))
            assert verdict.startswith(f'gpu_bottleneck{{kind="{kind.name}"') and verdict.endswith("} == 1")
            assert (a.for_, a.severity) == (kind.policy.for_text, kind.policy.severity.value)
    groups = (alerts.VERDICT_GROUP, alerts.JOB_VERDICT_GROUP)
    verdict_rules = [a.name for a in alerts.ALERTS if a.group in groups]
    assert verdict_rules == [k.alert for k in KINDS.values() if k.text is not None]
    assert by_name["GpuPowerCapped"].expr == (
        'gpu_bottleneck{kind="power_throttle", cause="cap_below_default"} == 1'
    )
    assert by_name["GpuCommBound"].severity == "warning" and by_name["GpuCommBound"].for_ == "2m"


# numbers a PromQL expression may type itself: nothing and one (`== 0`, `== 1`, `> 0`)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_PLACEHOLDER = re.compile(r"\$\{\w+\}")
_RANGE = re.compile(r"\[[0-9]+[smhdwy]\]")
_PER_MINUTE = re.compile(r"\*\s*60(?![\w.])")  # a per-second rate as a per-minute one
_NUMBER = re.compile(r"(?<![\w.])(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?(?![\w.])", re.I)


def bare_numbers(expr: str) -> list[str]:
    """Numbers typed into an expression rather than named as ``${placeholders}`` (label values,
    range durations and the seconds of a minute aside)."""
    text = _PER_MINUTE.sub(" ", _RANGE.sub("[]", _PLACEHOLDER.sub(" ", _STRING.sub('""', expr))))
    return [n for n in _NUMBER.findall(text) if n not in ("0", "1")]


def test_no_bare_number_in_an_alert_expression():
    found = {a.name: hits for a in alerts.ALERTS if (hits := bare_numbers(a.expr))}
    assert found == {}, f"name these in exporter/policy/thresholds/ and alerts.PARAMS: {found}"
    for a in alerts.ALERTS:  # and every placeholder is a threshold of the table
        assert set(_PLACEHOLDER.findall(a.expr)) <= {f"${{{k}}}" for k in alerts.PARAMS} | {"${job}"}


def test_the_number_check_sees_a_bare_number_and_accepts_named_ones():
    assert bare_numbers('x{stat="mean"} > 0.5') == ["0.5"]
    assert bare_numbers("increase(x[5m]) > 5 * ${rate}") == ["5"]
    assert bare_numbers("x > 1e9 and y < .2") == ["1e9", ".2"]
    assert bare_numbers('x{xid=~"46|79"} == 1 and rate(y[10m]) * 60 > ${n} and z == 0') == []
    assert bare_numbers('gpu_nvlink_up == 0 and up{job="${job}"} > ${busy_util}') == []


def _fires_when(name: str) -> str:
    text = (REPO / "docs" / "runbooks" / f"{name}.md").read_text()
    head = text.split("\n\n")[1]  # the line under the title
    assert "**Fires when:**" in head, f"{name}: the runbook does not say when it fires"
    return " ".join(head.split("**Fires when:**", 1)[1].split())


def test_runbooks_state_the_alerts_for():
    for a in alerts.ALERTS:
        seconds = int(a.policy.for_.value)
        said = _fires_when(a.name)
        if seconds == 0:
            continue
        if seconds % 60:
            pattern = rf"\b{seconds} seconds\b"
        elif seconds == 60:
            pattern = r"\b(a|one) (more )?minute\b"
        else:
            pattern = rf"\b{seconds // 60} (more )?minutes\b"
        assert re.search(pattern, said), f"{a.name} holds for {a.for_}; its runbook says: {said}"


def test_the_threshold_page_lists_every_policy_word():
    from exporter.policy import thresholds as th

    page = (REPO / "docs" / "thresholds.md").read_text()
    for name, policy in th.ALERT_POLICIES.items():
        assert f"| [{name}](runbooks/{name}.md) | {policy.for_text} | {policy.severity.value} |" in page
    policies = {p.severity.key for p in th.ALERT_POLICIES.values()}
    for key, choice in th.choices().items():
        assert key in policies or f"| `{key}` | {choice.value} |" in page


def test_the_readmes_count_the_rules():
    n = len(alerts.ALERTS)
    assert f"holds {n} alert\nrules" in (REPO / "docs" / "overview.md").read_text()
    assert f"the {n} alerts of" in (REPO / "helm" / "gpu-bottleneck-exporter" / "README.md").read_text()


def test_the_rules_file_with_runbooks_on_a_site_of_your_own(capsys):
    assert alerts.main(["--runbook-base-url", "https://wiki.example.com/gpu/"]) == 0
    rules = [r for g in yaml.safe_load(capsys.readouterr().out)["groups"] for r in g["rules"] if "alert" in r]
    assert len(rules) == len(alerts.ALERTS)
    for rule in rules:
        assert rule["annotations"]["runbook_url"] == f"https://wiki.example.com/gpu/{rule['alert']}.md"
    assert alerts.main([]) == 0  # without the flag: the shipped file, byte for byte
    assert capsys.readouterr().out == (REPO / "alerts" / "gpu-bottleneck-exporter.rules.yml").read_text()


def test_a_runbook_base_without_its_slash_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        alerts.main(["--runbook-base-url", "https://wiki.example.com/gpu"])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith("--runbook-base-url must end with '/': 'https://wiki.example.com/gpu'")
    )
