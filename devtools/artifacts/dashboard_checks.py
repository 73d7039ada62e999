"""Structural checks for dashboard JSON: what Grafana would accept silently but a user would trip over.

``problems(board)`` lists every finding as a sentence; an empty list means the dashboard passes. The
checks work on plain JSON so they apply to the generated files and to any copy a user edited.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

PANEL_TYPES = frozenset({"timeseries", "stat", "state-timeline", "heatmap", "table", "bargauge", "row"})
GRID_COLUMNS = 24
DATASOURCE = "${datasource}"

_VAR_REF = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
_RANGE_FUNC = re.compile(r"\b(rate|irate|increase|delta|deriv|\w+_over_time)\s*\(")
_RANGE_SELECTOR = re.compile(r"\[([^\]]+)\]")
_BUILTIN_VARS = frozenset({"__rate_interval", "__interval", "__range", "__all_variables", "datasource"})


def panels(board: dict) -> Iterator[dict]:
    """Every panel, including those nested in collapsed rows."""
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def _overlaps(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def _grid(board: dict) -> list[str]:
    found, placed = [], []
    for panel in panels(board):
        pos = panel.get("gridPos")
        name = f"panel {panel.get('id')} ({panel.get('title')!r})"
        if not pos or any(not isinstance(pos.get(k), int) for k in ("x", "y", "w", "h")):
            found.append(f"{name} has no complete gridPos")
            continue
        if pos["w"] <= 0 or pos["h"] <= 0 or pos["x"] < 0 or pos["x"] + pos["w"] > GRID_COLUMNS:
            found.append(f"{name} lies outside the {GRID_COLUMNS}-column grid: {pos}")
        for other_name, other in placed:
            if _overlaps(pos, other):
                found.append(f"{name} overlaps {other_name}")
        placed.append((name, pos))
    return found


def _variables(board: dict) -> tuple[set[str], list[str]]:
    found, names = [], set()
    variables = board.get("templating", {}).get("list", [])
    ds = [v for v in variables if v.get("type") == "datasource"]
    if not any(v.get("name") == "datasource" and v.get("query") == "prometheus" for v in ds):
        found.append("no `datasource` variable of type prometheus")
    for var in variables:
        names.add(var.get("name", ""))
        if var.get("type") != "query":
            continue
        if (var.get("datasource") or {}).get("uid") != DATASOURCE:
            found.append(f"variable {var.get('name')} does not query {DATASOURCE}")
        if not str(var.get("query", "")).startswith("label_values("):
            found.append(f"variable {var.get('name')} is not a label_values() query")
    return names, found


def _refs(text: str) -> set[str]:
    return {a or b for a, b in _VAR_REF.findall(text)}


def _targets(panel: dict, name: str, variables: set[str]) -> tuple[set[str], list[str]]:
    found, used = [], set()
    targets = panel.get("targets", [])
    if not targets:
        found.append(f"{name} has no query")
    for target in targets:
        if (target.get("datasource") or {}).get("uid") != DATASOURCE:
            found.append(f"{name} query {target.get('refId')} is not on {DATASOURCE}")
        expr = target.get("expr", "")
        if not expr:
            found.append(f"{name} query {target.get('refId')} has no expression")
        refs = _refs(expr) | _refs(target.get("legendFormat", ""))
        used |= refs
        for ref in sorted(refs - variables - _BUILTIN_VARS):
            found.append(f"{name} uses undefined variable ${ref}")
        if _RANGE_FUNC.search(expr):
            for window in _RANGE_SELECTOR.findall(expr):
                if window == "$__range" and target.get("instant"):
                    continue  # one value over the dashboard's whole range, e.g. increase(...[$__range])
                if window == "$__range":
                    found.append(f"{name} query {target.get('refId')} uses [$__range] in a range query")
                elif window != "$__rate_interval":
                    found.append(f"{name} uses a fixed range [{window}] instead of $__rate_interval")
    return used, found


def problems(board: dict) -> list[str]:
    """Every structural problem of one dashboard (empty when it passes)."""
    found: list[str] = []
    for key in ("uid", "title", "tags"):
        if not board.get(key):
            found.append(f"dashboard has no {key}")
    variables, var_problems = _variables(board)
    found += var_problems
    used: set[str] = set()
    for query_var in board.get("templating", {}).get("list", []):
        used |= _refs(str(query_var.get("query", "")))
    ids = [p.get("id") for p in panels(board)]
    for dup in sorted({i for i in ids if ids.count(i) > 1}, key=str):
        found.append(f"panel id {dup} is used more than once")
    found += _grid(board)
    for panel in panels(board):
        name = f"panel {panel.get('id')} ({panel.get('title')!r})"
        kind = panel.get("type")
        if kind not in PANEL_TYPES:
            found.append(f"{name} has type {kind!r}, not one of {sorted(PANEL_TYPES)}")
        if not panel.get("title"):
            found.append(f"{name} has no title")
        if kind == "row":
            continue
        if not panel.get("description"):
            found.append(f"{name} has no description")
        if not panel.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            found.append(f"{name} has no unit")
        if (panel.get("datasource") or {}).get("uid") != DATASOURCE:
            found.append(f"{name} is not on {DATASOURCE}")
        refs, target_problems = _targets(panel, name, variables)
        used |= refs
        if panel.get("repeat"):  # one copy of the panel per value of a variable
            used.add(panel["repeat"])
            if panel["repeat"] not in variables:
                found.append(f"{name} repeats over undefined variable ${panel['repeat']}")
        found += target_problems
    for unused in sorted(variables - used - {"datasource"}):
        found.append(f"variable ${unused} is never used")
    return found
