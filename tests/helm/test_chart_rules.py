"""The PrometheusRule the chart renders: the same rules as alerts/, passing the same promtool suite,
with every value that tunes them; and the monitors' relabelings, applied by a real Prometheus."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from devtools.artifacts import alerts, cost_rules, recording
from scripts.stack import PrometheusApi, free_port, start_exporter, tool, wait_http
from tests.conftest import REPO, require_tool
from tests.helm.chart import CHART, one, render

RULE_TESTS = sorted((REPO / "alerts" / "tests").glob("*.test.yml"))


def rendered_groups(sets: dict[str, str] | None = None) -> list[dict]:
    docs = render(sets={"prometheusRule.enabled": "true", **(sets or {})})
    return one(docs, "PrometheusRule")["spec"]["groups"]


def rules_by_name(groups: list[dict]) -> dict[str, dict]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_rendered_rules_equal_the_rule_file():
    shipped = yaml.safe_load((REPO / "alerts" / "gpu-bottleneck-exporter.rules.yml").read_text())
    assert rendered_groups() == shipped["groups"]


def test_rendered_rules_pass_the_promtool_suite(tmp_path):
    promtool = require_tool("promtool")
    rules = tmp_path / "rendered.rules.yml"
    rules.write_text(yaml.safe_dump({"groups": rendered_groups()}, sort_keys=False))
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    rules_found = len(alerts.ALERTS) + len(recording.RECORDS) + len(cost_rules.RECORDS)
    assert f"SUCCESS: {rules_found} rules found" in check.stdout
    suites = []
    for path in RULE_TESTS:  # the same tests, pointed at the rendered rules
        suite = yaml.safe_load(path.read_text())
        suite["rule_files"] = [str(rules)]
        (tmp_path / path.name).write_text(yaml.safe_dump(suite, sort_keys=False))
        suites.append(str(tmp_path / path.name))
    result = subprocess.run([promtool, "test", "rules", *suites], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_overriding_a_threshold_changes_the_rendered_rule():
    rules = rules_by_name(
        rendered_groups(
            {"prometheusRule.thresholds.shmWarning": "0.8", "prometheusRule.thresholds.tempHot": "85"}
        )
    )
    assert "> 0.8 and" in rules["GpuShmNearlyFull"]["expr"]
    assert "> 0.9" not in rules["GpuShmNearlyFull"]["expr"]
    assert re.search(r"> 85\b", rules["GpuTemperatureHigh"]["expr"]), rules["GpuTemperatureHigh"]["expr"]


def test_large_thresholds_render_as_plain_integers():
    rules = rules_by_name(rendered_groups({"prometheusRule.thresholds.idleMemoryBytes": "2147483648"}))
    assert "> 2147483648" in rules["GpuUtilizationLow"]["expr"]


def test_for_severity_enabled_labels_and_runbooks_are_values():
    groups = rendered_groups(
        {
            "prometheusRule.rules.GpuCommHang.for": "5m",
            "prometheusRule.rules.GpuCommHang.severity": "warning",
            "prometheusRule.rules.GpuUtilizationLow.enabled": "false",
            "prometheusRule.alertLabels.team": "ml-infra",
            "prometheusRule.runbookBaseUrl": "https://wiki.example.com/gpu/",
        }
    )
    rules = rules_by_name(groups)
    assert rules["GpuCommHang"]["for"] == "5m"
    assert rules["GpuCommHang"]["labels"] == {"severity": "warning", "team": "ml-infra"}
    assert "GpuUtilizationLow" not in rules
    assert len(rules) == len(alerts.ALERTS) - 1
    assert (
        rules["GpuDataStarvation"]["annotations"]["runbook_url"]
        == "https://wiki.example.com/gpu/GpuDataStarvation.md"
    )


def test_the_runbook_base_is_one_setting_shared_with_the_rules_file():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["prometheusRule"]["runbookBaseUrl"] == alerts.RUNBOOK_BASE
    rules = rules_by_name(rendered_groups())
    for alert in alerts.ALERTS:
        assert rules[alert.name]["annotations"]["runbook_url"] == alert.runbook()


def test_a_group_with_every_rule_off_disappears():
    members = [a.name for a in alerts.ALERTS if a.group == "gpu-bottleneck-verdicts"]
    groups = rendered_groups({f"prometheusRule.rules.{name}.enabled": "false" for name in members})
    assert "gpu-bottleneck-verdicts" not in [g["name"] for g in groups]
    assert all(g["rules"] for g in groups)


def test_the_rules_name_the_job_the_monitors_set():
    docs = render(
        sets={
            "prometheusRule.enabled": "true",
            "serviceMonitor.enabled": "true",
            "nameOverride": "gpu-exporter",
        }
    )
    rules = rules_by_name(one(docs, "PrometheusRule")["spec"]["groups"])
    service = one(docs, "Service")
    assert one(docs, "ServiceMonitor")["spec"]["jobLabel"] == "app.kubernetes.io/name"
    job = service["metadata"]["labels"]["app.kubernetes.io/name"]
    assert job == "gpu-exporter"
    assert rules["GpuExporterDown"]["expr"] == f'up{{job="{job}"}} == 0'
    custom = rules_by_name(rendered_groups({"prometheusRule.job": "gpu"}))
    assert custom["GpuExporterAbsent"]["expr"] == 'absent(up{job="gpu"})'


def _snake(key: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), key)


def prometheus_relabel_configs(relabelings: list[dict]) -> list[dict]:
    """The operator's RelabelConfig as Prometheus's relabel_config (camelCase -> snake_case)."""
    return [{_snake(k): v for k, v in r.items()} for r in relabelings]


@pytest.mark.slow
def test_relabelings_keep_the_exporters_pod_labels_in_a_real_prometheus(tmp_path: Path):
    """A target carrying what the operator's service discovery gives it (the exporter pod's own namespace,
    pod and container, and its node as a meta label), relabelled as the chart's ServiceMonitor says, next
    to the same target without the chart's relabelings: only the first keeps `pod` as the GPU's pod."""
    prometheus = tool("prometheus") or require_tool("prometheus")
    monitor = one(render(sets={"serviceMonitor.enabled": "true"}), "ServiceMonitor")
    relabel = prometheus_relabel_configs(monitor["spec"]["endpoints"][0]["relabelings"])
    port, prom_port = free_port(), free_port()
    exporter = start_exporter(["--simulate", "healthy", "--sim-gpus", "2", "--interval", "0.5"], port)
    discovered = {
        "namespace": "monitoring",
        "pod": "gbe-gpu-bottleneck-exporter-x7k2p",
        "container": "exporter",
        "service": "gbe-gpu-bottleneck-exporter",
        "endpoint": "metrics",
        "__meta_kubernetes_pod_node_name": "gpu-node-7",
    }
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "chart",
                "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": discovered}],
                "relabel_configs": relabel,
            },
            {
                "job_name": "plain",
                "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": discovered}],
            },
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prom = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz")
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", proc=prom)
        api = PrometheusApi(prom_port)
        deadline, chart, plain = time.monotonic() + 60, [], []
        while time.monotonic() < deadline and not (chart and plain):
            chart = api.query('gpu_utilization_ratio{job="chart"}')
            plain = api.query('gpu_utilization_ratio{job="plain"}')
            time.sleep(1)
        assert chart and plain
        for series in chart:
            labels = series["metric"]
            assert labels["namespace"] == "ml" and labels["pod"] == "llm-train-0", labels
            assert labels["container"] == "trainer" and labels["node"] == "gpu-node-7"
            assert not any(k.startswith("exported_") for k in labels), labels
            assert "service" not in labels and "endpoint" not in labels
        host = api.query('gpu_node_cpu_iowait_ratio{job="chart"}')[0]["metric"]
        assert "pod" not in host and "namespace" not in host  # node series name no pod at all
        for series in plain:  # what users of a plain monitor get: the GPU's pod renamed
            assert series["metric"]["exported_pod"] == "llm-train-0"
            assert series["metric"]["pod"] == "gbe-gpu-bottleneck-exporter-x7k2p"
    finally:
        prom.terminate()
        exporter.terminate()
        prom.wait(15)
        exporter.wait(15)


def test_the_job_labels_come_from_the_chart_value():
    """prometheusRule.jobLabels, in order, as kube-state-metrics spells them: the first a pod carries wins."""
    groups = rendered_groups({"prometheusRule.jobLabels": "{example.com/team-job,app.kubernetes.io/name}"})
    (info,) = [r for g in groups for r in g["rules"] if r.get("record") == recording.INFO]
    wanted = recording.job_info_expr(("example.com/team-job", "app.kubernetes.io/name"))
    assert info["expr"] == wanted.replace("$$", "$")  # the generator escapes $ for its templates
    assert "label_example_com_team_job" in info["expr"]


# ---- sharded by node: the node-level groups on the shards, the job groups in a global ruler -----------


def _groups_of(docs: list[dict]) -> dict[str, list[dict]]:
    return {d["metadata"]["name"]: d["spec"]["groups"] for d in docs if d["kind"] == "PrometheusRule"}


def test_scope_node_and_global_render_the_rule_file_split_in_two():
    shipped = yaml.safe_load((REPO / "alerts" / "gpu-bottleneck-exporter.rules.yml").read_text())["groups"]
    node = rendered_groups({"prometheusRule.scope": "node"})
    glob = rendered_groups({"prometheusRule.scope": "global"})
    assert node == alerts.groups(scope="node") and glob == alerts.groups(scope="global")
    assert sorted(g["name"] for g in node + glob) == sorted(g["name"] for g in shipped)
    assert [g["name"] for g in glob] == [
        "gpu-bottleneck-job-recording",
        "gpu-bottleneck-job-cost",
        "gpu-bottleneck-job-verdicts",
        "gpu-bottleneck-jobs",
    ]
    # the global ruler's rules read kube-state-metrics and the shards' recorded series, never a raw
    # per-GPU series but the comm verdicts it silences
    recorded_on_shards = {r["record"] for g in node for r in g["rules"] if "record" in r}
    for group in glob:
        for rule in group["rules"]:
            names = set(re.findall(r"\b([a-z_]+:[a-z_0-9]+:[a-z_0-9]+|[a-z_]+)\s*[{(\[]?", rule["expr"]))
            raw = {n for n in names if n.startswith("gpu_") and n != "gpu_bottleneck"}
            assert not raw, (rule.get("record") or rule.get("alert"), raw)
    assert {"node_namespace_pod_state:gpu_time_seconds:rate5m", recording.POD_KINDS} <= recorded_on_shards
    # a shard's rules never read what only the global ruler records
    global_records = {r["record"] for g in glob for r in g["rules"] if "record" in r}
    for group in node:
        for rule in group["rules"]:
            assert not [r for r in global_records if r in rule["expr"]], rule


def test_scope_split_renders_two_rules_labelled_for_their_rulers():
    docs = render(
        sets={
            "prometheusRule.enabled": "true",
            "prometheusRule.scope": "split",
            "prometheusRule.additionalLabels.release": "shards",
            "prometheusRule.globalRuler.additionalLabels.ruler": "global",
        }
    )
    groups = _groups_of(docs)
    assert set(groups) == {"gbe-gpu-bottleneck-exporter", "gbe-gpu-bottleneck-exporter-global"}
    assert groups["gbe-gpu-bottleneck-exporter"] == alerts.groups(scope="node")
    assert groups["gbe-gpu-bottleneck-exporter-global"] == alerts.groups(scope="global")
    labels = {d["metadata"]["name"]: d["metadata"]["labels"] for d in docs if d["kind"] == "PrometheusRule"}
    assert labels["gbe-gpu-bottleneck-exporter"]["release"] == "shards"
    assert "ruler" not in labels["gbe-gpu-bottleneck-exporter"]
    assert labels["gbe-gpu-bottleneck-exporter-global"]["ruler"] == "global"
    assert "release" not in labels["gbe-gpu-bottleneck-exporter-global"]


def test_the_sharded_setup_renders_what_docs_scale_shows():
    """ci/sharded-values.yaml is the example of docs/scale.md: one rule document per ruler, each carrying
    the label its selector matches."""
    values = yaml.safe_load((CHART / "ci" / "sharded-values.yaml").read_text())
    doc = (REPO / "docs" / "scale.md").read_text()
    shown = yaml.safe_load(doc.split("```yaml\n", 1)[1].split("```", 1)[0])
    assert shown["prometheusRule"] == values["prometheusRule"]
    docs = render(CHART / "ci" / "sharded-values.yaml")
    labels = {d["metadata"]["name"]: d["metadata"]["labels"] for d in docs if d["kind"] == "PrometheusRule"}
    assert labels["gbe-gpu-bottleneck-exporter"]["role"] == "shard"
    assert labels["gbe-gpu-bottleneck-exporter-global"]["role"] == "global-ruler"
    assert _groups_of(docs)["gbe-gpu-bottleneck-exporter-global"] == alerts.groups(scope="global")


def test_an_unknown_scope_is_refused():
    from tests.helm.chart import render_error

    assert "scope" in render_error(sets={"prometheusRule.enabled": "true", "prometheusRule.scope": "shard"})
