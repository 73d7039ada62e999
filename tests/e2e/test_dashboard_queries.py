"""Every query of every dashboard, run against a real Prometheus that scrapes simulated nodes in the
starvation, hang, thermal and shm scenarios: each returns series, and those series carry the labels
its legend names. The dashboards' variables are resolved the way Grafana does, through the label API."""

from __future__ import annotations

import json
import re
import time

import pytest

from devtools.artifacts import alerts, dashboards
from devtools.artifacts.dashboard_checks import panels
from scripts.stack import Stack, simulated_fleet
from tests.conftest import REPO, require_tool

SCENARIOS = {
    "sim-starvation": "data_starvation:gpus=1",
    "sim-hang": "comm_hang",
    "sim-thermal": "thermal_throttle:gpus=1",
    "sim-shm": "shm_exhaustion:fill=40,shm_gib=16",
    "sim-shared": "time_slicing",  # the shared-GPU table: a pod's share (the MIG rows are the same query)
}
RATE_INTERVAL = "30s"  # what Grafana would pick for a short range at a 1 s scrape interval
RANGE = "3600s"  # $__range as Grafana writes it for Prometheus on a one-hour dashboard
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?(\w+)\)$")


def substitute(text: str, values: dict[str, str]) -> str:
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):  # $gpu before $g
        text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return text


def variable_choices(stack: Stack, board: dict) -> list[dict[str, str]]:
    """Every combination of single-valued variables (each value the label API offers); multi-valued
    ones take their "All" value, as a user who opens the dashboard first sees it."""
    combos: list[dict[str, str]] = [{}]
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = LABEL_VALUES.match(var["query"])
        assert match, var["query"]
        selector, label = match.groups()
        grown = []
        for combo in combos:
            offered = stack.label_values(label, substitute(selector, combo) if selector else None)
            assert offered, f"variable {var['name']} offers no value for {combo}"
            if var.get("multi") and var.get("includeAll"):
                grown.append({**combo, var["name"]: var["allValue"]})
            else:
                grown += [{**combo, var["name"]: value} for value in offered]
        combos = grown
    return combos


def run_target(stack: Stack, target: dict, combos: list[dict[str, str]]) -> list[dict]:
    series = []
    for combo in combos:
        expr = substitute(target["expr"], {**combo, "__rate_interval": RATE_INTERVAL, "__range": RANGE})
        if target.get("instant"):
            series += stack.query(expr)
        else:
            series += stack.query_range(expr, seconds=60)
    return series


def missing_series(stack: Stack) -> list[str]:
    """The queries that return nothing yet, or whose series lack a label their legend uses."""
    missing = []
    for path in dashboards.DASHBOARDS:
        board = json.loads((REPO / path).read_text())
        combos = variable_choices(stack, board)
        for panel in panels(board):
            for target in panel.get("targets", []):
                where = f"{board['uid']} / {panel['title']} / {target['refId']}"
                series = run_target(stack, target, combos)
                if not series:
                    missing.append(f"{where}: no series")
                    continue
                wanted = set(LEGEND_LABEL.findall(target.get("legendFormat", "")))
                for s in series:
                    if not wanted <= s["metric"].keys():
                        missing.append(f"{where}: series {s['metric']} lacks {wanted - s['metric'].keys()}")
                        break
    return missing


def verdict_codes(stack: Stack) -> dict[tuple[str, str], int]:
    """What the fleet state timeline shows now, per (node, gpu)."""
    result = stack.query(dashboards.verdict_code(', node=~".*"', "node, gpu"))
    return {(s["metric"]["node"], s["metric"]["gpu"]): int(float(s["value"][1])) for s in result}


def code(kind: str) -> int:
    return next(c.value for c in dashboards.VERDICT_CODES if c.name == kind)


def at_now(stack: Stack, expr: str, by: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    """An instant query with the rate interval the dashboards would get, keyed by the ``by`` labels."""
    result = stack.query(substitute(expr, {"__rate_interval": RATE_INTERVAL}))
    return {tuple(s["metric"][k] for k in by): float(s["value"][1]) for s in result}


def input_wait_shows(stack: Stack) -> bool:
    """The starving rank's ledger has more input wait than a rank of the same job that is fed."""
    shares = at_now(stack, dashboards.ledger_share('node="sim-starvation"', "gpu"), ("gpu", "state"))
    return shares.get(("1", "input_wait"), 0.0) > shares.get(("0", "input_wait"), 0.0)


@pytest.mark.slow
def test_every_panel_query_returns_series_with_its_legend_labels(tmp_path):
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    rules = tmp_path / "rules.yml"
    rules.write_text(alerts.render(for_override="0s"))  # the "Firing alerts" panel reads ALERTS
    # targets labelled node=<scenario node>, as the chart's monitors label them
    with simulated_fleet(tmp_path, rules, SCENARIOS, label="node") as (stack, _):
        expected = {
            ("sim-starvation", "1"): code("data_starvation"),
            ("sim-thermal", "1"): code("thermal_throttle"),
            ("sim-starvation", "0"): 0,
        }
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            codes = verdict_codes(stack)
            shm_shown = any(c == code("shm_exhaustion") for (n, _), c in codes.items() if n == "sim-shm")
            if (
                all(codes.get(k) == v for k, v in expected.items())
                and shm_shown
                and input_wait_shows(stack)
                and not missing_series(stack)
            ):
                break
            time.sleep(3)
        assert missing_series(stack) == []
        codes = verdict_codes(stack)
        for key, value in expected.items():
            assert codes.get(key) == value, (key, codes)
        assert any(c == code("shm_exhaustion") for (n, _), c in codes.items() if n == "sim-shm"), codes
        # the ledger panels: shares add up to one per node, the timeline shows only ledger codes
        shares = at_now(stack, dashboards.ledger_share('node=~".*"', "node"), ("node", "state"))
        for node in SCENARIOS:
            total = sum(v for (n, _), v in shares.items() if n == node)
            assert abs(total - 1) < 1e-9, (node, shares)
        ledger_codes = {c.value for c in dashboards.LEDGER_CODES}
        for node in SCENARIOS:
            shown = at_now(stack, dashboards.ledger_code(f'node="{node}"', "gpu"), ("gpu",))
            assert shown and set(shown.values()) <= ledger_codes, (node, shown)
        # the starving rank computes about half of each interval: its row reads its loss, as its verdict
        starving_row = at_now(stack, dashboards.ledger_code('node="sim-starvation"', "gpu"), ("gpu",))
        input_code = next(c.value for c in dashboards.LEDGER_CODES if c.name == "input_wait")
        assert starving_row.get(("1",)) == input_code, starving_row
        assert input_wait_shows(stack)
        fleet = json.loads((REPO / "dashboards/gpu-bottleneck-fleet.json").read_text())
        offenders = next(p for p in panels(fleet) if p["title"] == "Worst offenders")["targets"][0]
        rows = stack.query(substitute(offenders["expr"], {"node": ".*"}))
        starving = [r["metric"] for r in rows if r["metric"].get("kind") == "data_starvation"]
        assert starving and starving[0]["namespace"] == "ml" and starving[0]["pod"] == "llm-train-0"
        assert starving[0]["node"] == "sim-starvation" and starving[0]["cause"] == "cpu"


def test_variable_substitution_matches_grafana_syntax():
    assert (
        substitute('x{node="$node", gpu=~"${gpu}"}', {"node": "n1", "gpu": ".*"}) == 'x{node="n1", gpu=~".*"}'
    )
    assert substitute("$gpu $g", {"g": "a", "gpu": "b"}) == "b a"
