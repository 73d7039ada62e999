"""The generated dashboards: typed round-trip through grafana-foundation-sdk, structural checks, the
panels the issue asks for, and threshold lines that come from the threshold table."""

from __future__ import annotations

import copy
import dataclasses
import json
import warnings

import pytest

from devtools.artifacts import dashboards, recording
from devtools.artifacts.dashboard_checks import panels, problems
from exporter.analysis.kinds import KINDS, NAMES
from exporter.analysis.ledger import STATES
from exporter.policy import thresholds as th
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
    """Through the SDK's typed models and back, less the SDK defaults Grafana's schema does not know."""
    return dashboards.grafana_schema_clean(
        json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))
    )


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
    ps[6]["targets"][0]["expr"] = 'increase(gpu_pcie_bytes_total{node="$node"}[$__range])'
    ps[7]["repeat"] = "rack"
    found = "\n".join(problems(broken))
    for words in (
        "used more than once",
        "overlaps",
        "'graph'",
        "has no unit",
        "not on ${datasource}",
        "undefined variable $nod",
        "fixed range [5m]",
        "[$__range] in a range query",
        "repeats over undefined variable $rack",
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
    assert panes["Input-wait share"]["type"] == "heatmap"
    assert "ALERTS" in panes["Firing alerts"]["targets"][0]["expr"]


def test_verdict_codes_come_from_the_registry():
    codes = {c.name: c for c in dashboards.VERDICT_CODES}
    assert codes.pop("") == (0, "", "ok", "green")
    assert set(codes) == set(NAMES)
    for name, kind in KINDS.items():
        assert codes[name] == (kind.rank, name, kind.label, kind.colour)
    assert codes["comm_bound"].text == "comm-bound"
    expr = dashboards.verdict_code("", "gpu")
    for c in dashboards.VERDICT_CODES[1:]:
        assert f'gpu_bottleneck{{kind="{c.name}"}} * {c.value}' in expr
    assert expr.startswith("max by (gpu) (")  # the most serious verdict wins
    # the recorded per-GPU worst verdict uses the same codes
    recorded = recording.worst_verdict_expr()
    for c in dashboards.VERDICT_CODES[1:]:
        assert f'gpu_bottleneck{{kind="{c.name}"}} * {c.value}' in recorded


@pytest.mark.parametrize("path", FILES)
def test_every_verdict_timeline_maps_every_kind(path):
    timelines = [p for p in panels(load(path)) if "gpu_bottleneck" in json.dumps(p.get("targets", []))]
    timelines = [p for p in timelines if p["type"] == "state-timeline"]
    assert timelines
    for panel in timelines:
        options = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]
        assert {o["text"] for o in options.values()} == {c.text for c in dashboards.VERDICT_CODES}
        assert options[str(KINDS["comm_bound"].rank)]["text"] == "comm-bound"


def test_verdict_ranks_must_be_distinct(monkeypatch):
    clash = dataclasses.replace(KINDS["comm_bound"], rank=KINDS["comm_hang"].rank)
    monkeypatch.setattr(dashboards, "KINDS", {**KINDS, "comm_bound": clash})
    with pytest.raises(ValueError, match="distinct"):
        dashboards._verdict_codes()


def test_a_new_kind_reaches_the_dashboards_without_an_edit(monkeypatch):
    new = dataclasses.replace(KINDS["nvlink_degraded"], name="pcie_degraded", label="PCIe degraded", rank=10)
    monkeypatch.setattr(dashboards, "KINDS", {**KINDS, new.name: new})
    monkeypatch.setattr(dashboards, "VERDICT_CODES", dashboards._verdict_codes())
    monkeypatch.setattr(recording, "KINDS", {**KINDS, new.name: new})
    panes = by_title(json.loads(dashboards.to_json(dashboards.fleet())))
    timeline = panes["Verdict by node and GPU"]
    assert timeline["fieldConfig"]["defaults"]["mappings"][0]["options"]["10"]["text"] == "PCIe degraded"
    assert recording.WORST in timeline["targets"][0]["expr"]  # the recorded worst verdict, which...
    assert 'kind="pcie_degraded"} * 10' in recording.worst_verdict_expr()  # ...ranks the new kind
    assert "pcie_degraded" in panes["Other verdicts"]["targets"][0]["expr"]


def test_fleet_stats_count_every_kind_once():
    panes = by_title(load("dashboards/gpu-bottleneck-fleet.json"))
    counted: list[str] = []
    for title, _, kinds in dashboards.verdict_stats():
        expr = panes[title]["targets"][0]["expr"]
        assert panes[title]["type"] == "stat"
        assert f'kind=~"{"|".join(kinds)}"' in expr
        counted += kinds
    assert sorted(counted) == sorted(NAMES)
    assert 'kind=~"comm_bound"' in panes["Comm-bound GPUs"]["targets"][0]["expr"]
    assert 'kind=~"thermal_throttle|power_throttle"' in panes["Throttled GPUs"]["targets"][0]["expr"]


def test_ledger_states_have_one_style_each():
    assert tuple(dashboards.LEDGER_STYLE) == STATES
    assert [c.name for c in dashboards.LEDGER_CODES] == list(STATES)
    assert len({c.value for c in dashboards.LEDGER_CODES}) == len(STATES)
    assert 0 not in {c.value for c in dashboards.LEDGER_CODES}  # no state reads as "no data"
    colours = {state: colour for state, (_, colour) in dashboards.LEDGER_STYLE.items()}
    assert colours["computing"] == "green" and colours["input_wait"] == "red"
    assert colours["stalled"] == "dark-red" and colours["idle"] == "blue" and colours["free"] == "gray"


def state_colours(panel: dict) -> dict[str, str]:
    """Each state's fixed colour, from the panel's by-name overrides."""
    found = {}
    for override in panel["fieldConfig"].get("overrides", []):
        assert override["matcher"]["id"] == "byName"
        for prop in override["properties"]:
            if prop["id"] == "color":
                found[override["matcher"]["options"]] = prop["value"]["fixedColor"]
    return found


def assert_share_panel(panel: dict, selector: str, by: str, recorded: str = "") -> None:
    """A stacked share of the ledger's states: from the raw counters, or from a recorded rate (the
    recording rules' per-node or per-pod rates), or a recorded share itself for a per-node panel."""
    assert panel["type"] == "timeseries"
    defaults = panel["fieldConfig"]["defaults"]
    assert defaults["unit"] == "percentunit" and (defaults["min"], defaults["max"]) == (0, 1)
    assert defaults["custom"]["stacking"]["mode"] == "normal"
    (target,) = panel["targets"]
    rate = f"rate(gpu_time_seconds_total{{{selector}}}[$__rate_interval])"
    if recorded.endswith(":share5m"):
        assert target["expr"] == f"{recorded}{{{selector}}}"
    elif recorded:
        rate = f"{recorded}{{{selector}}}"
        assert target["expr"] == f"sum by (state) ({rate}) / ignoring (state) group_left sum ({rate})"
    else:
        keys = f"{by}, state" if by else "state"
        total = f"sum by ({by}) ({rate})" if by else f"sum ({rate})"
        assert target["expr"] == f"sum by ({keys}) ({rate}) / ignoring (state) group_left {total}"
    assert target["legendFormat"] == "{{state}}"
    assert state_colours(panel) == {s: colour for s, (_, colour) in dashboards.LEDGER_STYLE.items()}


def assert_hours_panel(panel: dict, selector: str) -> None:
    assert panel["type"] == "bargauge"
    assert panel["fieldConfig"]["defaults"]["unit"] == "h"
    (target,) = panel["targets"]
    assert target["instant"] is True
    assert target["expr"] == (
        f"sort_desc(sum by (state) (increase(gpu_time_seconds_total{{{selector}}}[$__range])) / 3600)"
    )
    assert target["legendFormat"] == "{{state}}"
    assert state_colours(panel) == {s: colour for s, (_, colour) in dashboards.LEDGER_STYLE.items()}


def test_fleet_shows_where_gpu_time_goes():
    panes = by_title(load("dashboards/gpu-bottleneck-fleet.json"))
    assert panes["Where GPU time goes"]["type"] == "row"
    assert_share_panel(panes["Share of GPU time by state"], 'node=~"$node"', "", recording.NODE_RATE)
    per_node = panes["Share of GPU time by state on $node"]
    assert_share_panel(per_node, 'node=~"$node"', "node", recording.NODE_SHARE)
    assert per_node["repeat"] == "node"
    assert_hours_panel(panes["GPU-hours by state"], 'node=~"$node"')


def test_job_view_shows_where_the_jobs_gpu_time_goes():
    panes = by_title(load("dashboards/gpu-bottleneck-job.json"))
    selector = 'namespace="$namespace", pod=~"$pod"'
    assert_share_panel(panes["Where the job's GPU time goes"], selector, "", recording.POD_RATE)
    assert_hours_panel(panes["Job GPU-hours by state"], selector)


def test_node_detail_draws_a_ledger_timeline_per_gpu():
    panes = by_title(load("dashboards/gpu-bottleneck-node.json"))
    assert_share_panel(panes["Share of GPU time by state"], 'node="$node", gpu=~"$gpu"', "")
    timeline = panes["Where each GPU's time goes"]
    assert timeline["type"] == "state-timeline"
    (target,) = timeline["targets"]
    # the largest loss where the interval lost the coverage share, else the largest state
    assert target["legendFormat"] == "GPU {{gpu}}" and target["expr"].startswith("(max by (gpu) (")
    assert f" >= {th.COVERAGE_SHARE.value:g})) or max by (gpu) (" in target["expr"]
    assert 'rate(gpu_time_seconds_total{node="$node", gpu=~"$gpu"}[$__rate_interval])' in target["expr"]
    options = timeline["fieldConfig"]["defaults"]["mappings"][0]["options"]
    for c in dashboards.LEDGER_CODES:
        assert f'label_replace(vector({c.value}), "state", "{c.name}", "", "")' in target["expr"]
        assert (options[str(c.value)]["text"], options[str(c.value)]["color"]) == (c.text, c.colour)


def test_node_detail_draws_the_threshold_table_lines():
    panes = by_title(load("dashboards/gpu-bottleneck-node.json"))
    assert step_values(panes["GPU utilization (window min / mean / max)"]) == [th.UTIL_SUSPICION.value]
    assert step_values(panes["Temperature"]) == [th.TEMP_HOT.value]
    assert "gpu_temperature_slowdown_celsius" in panes["Temperature"]["targets"][1]["expr"]
    assert step_values(panes["Shared memory used"]) == [th.SHM_WARNING.value, th.SHM_CRITICAL.value, 1.0]
    assert step_values(panes["Power over TDP"]) == [th.POWER_LOW.value]
    assert step_values(panes["I/O wait and busiest core"]) == [th.IOWAIT_HIGH.value, th.CORE_PINNED.value]
    assert 'state=~"throttled"' in panes["Throttled share"]["targets"][0]["expr"]
    assert "gpu_nvlink_links_expected" in panes["NVLinks up"]["targets"][1]["expr"]
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
    for title in ("Utilization", "Idle share", "Time lost per GPU", "Power over TDP"):
        target = panes[title]["targets"][0]
        assert 'namespace="$namespace", pod=~"$pod"' in target["expr"]
        assert "{{node}}" in target["legendFormat"] and "{{gpu}}" in target["legendFormat"]


@pytest.mark.parametrize(
    ("path", "selector"),
    [
        ("dashboards/gpu-bottleneck-node.json", 'node="$node", gpu=~"$gpu"'),
        ("dashboards/gpu-bottleneck-job.json", 'namespace="$namespace", pod=~"$pod"'),
    ],
)
def test_shared_gpus_get_a_row_per_pod_and_mig_instance(path, selector):
    table = by_title(load(path))["Shared GPUs: each pod's and MIG instance's time"]
    assert table["type"] == "table"
    (target,) = table["targets"]
    assert target["instant"] and target["format"] == "table"
    for metric in ("gpu_pod_time_seconds_total", "gpu_mig_time_seconds_total"):
        assert f'increase({metric}{{{selector}, state!="free"}}[$__range])' in target["expr"]
    assert "by (node, gpu, namespace, pod, mig_instance, mig_compute_instance, mig_profile)" in target["expr"]
    # a pod or instance that lost nothing reads 0, not a missing row
    assert target["expr"].count("* 0") == 2
