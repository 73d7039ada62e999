"""The generated dashboards: typed round-trip through grafana-foundation-sdk, structural checks, the
panels the issue asks for, and threshold lines that come from the threshold table."""

from __future__ import annotations

import copy
import dataclasses
import json
import warnings

import pytest

from exporter import thresholds as th
from exporter.artifacts import dashboards
from exporter.artifacts.dashboard_checks import panels, problems
from tests.conftest import REPO

warnings.filterwarnings("ignore", category=DeprecationWarning, module="grafana_foundation_sdk")
from grafana_foundation_sdk.cog.encoder import JSONEncoder  # noqa: E402
from grafana_foundation_sdk.cog.plugins import register_default_plugins  # noqa: E402
from grafana_foundation_sdk.models.dashboard import Dashboard  # noqa: E402

register_default_plugins()  # panel options and queries decode into their typed models, not dicts

FILES = sorted(dashboards.DASHBOARDS)


def load(path: str) -> dict:
    return json.loads((REPO / path).read_text())


def round_trip(board: dict) -> dict:
    return json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))


def by_title(board: dict) -> dict[str, dict]:
    return {p["title"]: p for p in panels(board)}


def step_values(panel: dict) -> list[float]:
    steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
    return [s["value"] for s in steps if s["value"] is not None]


@pytest.mark.parametrize("path", FILES)
def test_round_trips_through_the_typed_models_unchanged(path):
    board = load(path)
    assert round_trip(board) == board


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p["options"].__setitem__("legnd", {}),
        lambda p: p["fieldConfig"]["defaults"]["custom"].__setitem__("lineWidht", 2),
        lambda p: p["targets"][0].__setitem__("exprr", "up"),
        lambda p: p.__setitem__("titel", "x"),
    ],
    ids=["options", "custom", "query", "panel"],
)
def test_round_trip_exposes_a_misspelt_key(mutate):
    board = load("dashboards/gpu-bottleneck-node.json")
    broken = copy.deepcopy(board)
    mutate(next(p for p in broken["panels"] if p["type"] == "timeseries"))
    assert round_trip(broken) != broken


@pytest.mark.parametrize("path", FILES)
def test_passes_structural_checks(path):
    assert problems(load(path)) == []


def test_structural_checks_catch_each_kind_of_mistake():
    board = load("dashboards/gpu-bottleneck-node.json")
    broken = copy.deepcopy(board)
    ps = [p for p in broken["panels"] if p["type"] == "timeseries"]
    ps[0]["id"] = ps[1]["id"]
    ps[1]["gridPos"] = dict(ps[2]["gridPos"])
    ps[2]["type"] = "graph"
    del ps[3]["fieldConfig"]["defaults"]["unit"]
    ps[4]["targets"][0]["datasource"] = {"type": "prometheus", "uid": "prometheus"}
    ps[5]["targets"][0]["expr"] = 'rate(gpu_pcie_bytes_total{node="$nod"}[5m])'
    found = "\n".join(problems(broken))
    for words in (
        "used more than once",
        "overlaps",
        "'graph'",
        "has no unit",
        "not on ${datasource}",
        "undefined variable $nod",
        "fixed range [5m]",
    ):
        assert words in found, found


def test_dashboards_have_stable_uids_and_shared_tags():
    uids = {path: load(path)["uid"] for path in FILES}
    assert uids == {
        "dashboards/gpu-bottleneck-fleet.json": "gbe-fleet",
        "dashboards/gpu-bottleneck-job.json": "gbe-job",
        "dashboards/gpu-bottleneck-node.json": "gbe-node",
    }
    for path in FILES:
        assert "gpu-bottleneck-exporter" in load(path)["tags"]


def test_variables_are_chained_label_values():
    variables = {v["name"]: v for v in load("dashboards/gpu-bottleneck-node.json")["templating"]["list"]}
    assert variables["node"]["query"] == "label_values(gpu_info, node)"
    assert variables["gpu"]["query"] == 'label_values(gpu_info{node="$node"}, gpu)'
    assert variables["gpu"]["multi"] and variables["gpu"]["includeAll"]
    job = {v["name"]: v for v in load("dashboards/gpu-bottleneck-job.json")["templating"]["list"]}
    assert job["pod"]["query"] == 'label_values(gpu_pod_info{namespace="$namespace"}, pod)'


def test_fleet_overview_answers_what_where_and_since_when():
    panes = by_title(load("dashboards/gpu-bottleneck-fleet.json"))
    for title in ("Starving GPUs", "Hung GPUs", "Throttled GPUs", "Idle allocated GPUs"):
        assert panes[title]["type"] == "stat"
    timeline = panes["Verdict by node and GPU"]
    assert timeline["type"] == "state-timeline"
    texts = {m["text"] for m in timeline["fieldConfig"]["defaults"]["mappings"][0]["options"].values()}
    assert {"starving", "hung", "thermal", "shm full", "ok"} <= texts
    assert panes["Worst offenders"]["type"] == "table"
    assert "namespace" in panes["Worst offenders"]["transformations"][0]["options"]["indexByName"]
    assert panes["Starvation score"]["type"] == "heatmap"
    assert "ALERTS" in panes["Firing alerts"]["targets"][0]["expr"]


def test_verdict_codes_rank_every_verdict_word():
    words = {kind for kind, _, _ in dashboards.VERDICT_CODES if kind}
    assert words == {
        "data_starvation", "comm_hang", "thermal_throttle", "power_throttle", "shm_exhaustion",
        "idle_allocated", "nvlink_degraded",
    }  # fmt: skip
    expr = dashboards.verdict_code("", "gpu")
    for code, (kind, _, _) in enumerate(dashboards.VERDICT_CODES):
        if kind:
            assert f'gpu_bottleneck{{kind="{kind}"}} * {code}' in expr


def test_node_detail_draws_the_threshold_table_lines():
    panes = by_title(load("dashboards/gpu-bottleneck-node.json"))
    assert step_values(panes["GPU utilization (window min / mean / max)"]) == [th.UTIL_SUSPICION.value]
    assert step_values(panes["Temperature"]) == [th.TEMP_HOT.value]
    assert "gpu_temperature_slowdown_celsius" in panes["Temperature"]["targets"][1]["expr"]
    assert step_values(panes["Shared memory used"]) == [th.SHM_WARNING.value, th.SHM_CRITICAL.value, 1.0]
    assert step_values(panes["Power over TDP"]) == [th.POWER_LOW.value]
    assert step_values(panes["I/O wait and busiest core"]) == [th.IOWAIT_HIGH.value, th.CORE_PINNED.value]
    assert panes["Clock-event reasons"]["type"] == "state-timeline"
    assert panes["NVLink state per link"]["type"] == "state-timeline"
    for title in ("Utilization", "Power and thermal", "Interconnect", "Node", "Exporter"):
        assert panes[title]["type"] == "row"


@pytest.mark.parametrize("path", FILES)
def test_every_reference_line_is_a_threshold_table_value(path):
    table_values = {t.value for t in th.table().values()}
    for panel in panels(load(path)):
        if panel["type"] in ("timeseries", "table"):
            for value in step_values(panel):
                assert value in table_values, (panel["title"], value)


def test_changing_the_table_moves_the_lines(monkeypatch):
    monkeypatch.setattr(th, "TEMP_HOT", dataclasses.replace(th.TEMP_HOT, value=77.0))
    monkeypatch.setattr(th, "SHM_WARNING", dataclasses.replace(th.SHM_WARNING, value=0.85))
    board = json.loads(dashboards.to_json(dashboards.node()))
    panes = by_title(board)
    assert step_values(panes["Temperature"]) == [77.0]
    assert step_values(panes["Shared memory used"])[0] == 0.85


def test_job_view_puts_the_pods_gpus_side_by_side():
    board = load("dashboards/gpu-bottleneck-job.json")
    panes = by_title(board)
    assert panes["Verdict by GPU"]["type"] == "state-timeline"
    for title in ("Utilization", "Idle share", "Verdict scores", "Power over TDP"):
        target = panes[title]["targets"][0]
        assert 'namespace="$namespace", pod=~"$pod"' in target["expr"]
        assert "{{node}}" in target["legendFormat"] and "{{gpu}}" in target["legendFormat"]
