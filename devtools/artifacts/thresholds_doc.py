"""docs/thresholds.md: the threshold table as a page."""

from __future__ import annotations

import json
from pathlib import Path

from exporter.policy.thresholds import (
    ALERT_POLICIES,
    BOARD_POWER_W,
    COST_CURRENCY,
    COST_DEFAULT_PRICE,
    CRITICAL_XIDS,
    GPU_HOUR_PRICES,
    POWER_FLOOR_TO_CEILING,
    Choice,
    Threshold,
    choices,
    table,
)

# what moving each number does to the detection results (bench/sensitivity.py writes it)
SENSITIVITY = Path(__file__).resolve().parents[2] / "bench" / "sensitivity.json"
CLASSES = ("load-bearing", "fragile", "dead", "unread", "not judged")

UNITS = {
    "ratio": "",
    "celsius": " °C",
    "seconds": " s",
    "bytes": " B",
    "bytes_per_second": " B/s",
    "count": "",
    "per_minute": " /min",
    "celsius_per_second": " °C/s",
    "watts": " W",
    "per_gpu_hour": f" {COST_CURRENCY.value} per GPU-hour",
}


def _value(value: float, unit: str) -> str:
    if unit == "ratio":
        return f"{value * 100:g} %"
    if unit == "bytes" and value >= 1 << 20:
        return f"{value / (1 << 30):g} GiB" if value >= 1 << 30 else f"{value / (1 << 20):g} MiB"
    if unit == "bytes_per_second":
        return f"{value / 1e6:g} MB/s"
    return f"{value:g}{UNITS.get(unit, ' ' + unit)}"


def _entry(entry: Threshold | Choice) -> str:
    return entry.value if isinstance(entry, Choice) else _value(entry.value, entry.unit)


def sensitivity() -> dict[str, str]:
    """Each measured key's class and what moving it does; a key the stored results do not class is not
    measured."""
    if not SENSITIVITY.exists():
        return {}
    keys = json.loads(SENSITIVITY.read_text()).get("keys", {})
    return {key: _moved(entry) for key, entry in keys.items() if entry.get("class") in CLASSES}


def _effect(e: dict) -> list[str]:
    """What one move changed, most telling first."""
    said = [
        f"{e[name]} {one if e[name] == 1 else many}"
        for name, one, many in (
            ("pages_lost", "page lost", "pages lost"),
            ("pages_gained", "page gained", "pages gained"),
            ("false_added", "false page added", "false pages added"),
            ("false_removed", "false page removed", "false pages removed"),
            ("errors", "replay refused", "replays refused"),
        )
        if e.get(name)
    ]
    if e.get("causes_changed"):
        said.append(f"the cause named changes on {e['causes_changed']} traces")
    if e.get("crossed_ledger_target"):
        said.append("a ledger crosses 5 points")
    for name, what in (
        ("onset_shift_s", "detection"),
        ("to_page_shift_s", "time to page"),
        ("said_shift_s", "the loss's stated start or end"),
        ("resolve_shift_s", "time to resolve"),
    ):
        if e.get(name, 0) >= 0.05:
            said.append(f"{what} moves {e[name]:.0f} s")
    if e.get("held_points", 0) >= 0.05:
        said.append(f"held share moves {e['held_points']:.1f} points")
    if abs(e.get("ledger_points", 0)) >= 0.05:
        said.append(f"ledger {e['ledger_points']:+.1f} points")
    if not said and e.get("false_verdicts"):
        said.append(f"{e['false_verdicts']:+d} false verdicts")
    return said


def _moves(entry: dict, move: str, label: str) -> str:
    """``label`` with what each of ``move``'s changes did (``down``/``up`` by value), or ""."""
    parts = []
    for e in entry.get(move, []):
        said = _effect(e)
        if said:
            way = "down" if e["value"] < entry["value"] else "up"
            parts.append(f"{way}: {', '.join(said[:3])}")
    return f"{label} {'; '.join(parts)}" if parts else ""


def _moved(entry: dict) -> str:
    """The sensitivity cell: the class, and what the moves that changed something did."""
    cls = entry["class"]
    said = [_moves(entry, "quarter", "a quarter")]
    if cls == "fragile":
        said.append(_moves(entry, "tenth", "a tenth"))
    if cls == "dead" and "half" in entry:
        said.append(_moves(entry, "half", "a half") or "inert at a half")
    said = [s for s in said if s]
    return f"{cls} ({'; '.join(said)})" if said else cls


def _class(key: str, classes: dict[str, str]) -> str:
    return classes.get(key, "not measured")


def render() -> str:
    lines = [
        "# Threshold table",
        "",
        "<!-- generated from exporter/policy/thresholds/ by `make artifacts`; do not edit -->",
        "",
        "Every number the detectors, the alert rules, the dashboards and the Helm chart use, with the",
        "reason it has that value. The source is `exporter/policy/thresholds/`; this page, the alert",
        "rules, the dashboard thresholds and the chart's values are generated from it.",
        "",
        "The sensitivity column says what moving a number does to the detection results over the labelled",
        "example traces, the simulator's scenarios recorded as traces, and every example thinned to one",
        "sample per 30 s (`bench/sensitivity.py`, its results in `bench/sensitivity.json`), and what",
        "the moves that changed something did: **load-bearing**, a quarter either way changes a result (a",
        "page, a false page, when an episode is detected, paged or resolved, when it says its loss began",
        "or ended, its held share, the cause it names, a ledger error); **fragile**, a tenth either way",
        "already flips a page or a false page; **dead**, a quarter either way changes nothing (then a half",
        "either way says whether it acts on the examples at all, with a wide margin, or is inert there);",
        "**unread**, no replay of the examples reads it; **not judged**, read, but outside what the",
        "detection results compare (a bound on what a trace's row may claim or on a window's points, which",
        "the hardening and fault tests probe; a price, which the cost tests do); *not measured*, not probed",
        "(a number only the live exporter or the generators read, or one not measured yet).",
        "",
    ]
    classes = sensitivity()
    policies = {p.for_.key for p in ALERT_POLICIES.values()} | {
        p.severity.key for p in ALERT_POLICIES.values()
    }
    areas: dict[str, list] = {}
    for entry in [*table().values(), *choices().values()]:
        if entry.key not in policies:
            areas.setdefault(entry.key.split(".")[0], []).append(entry)
    for area, entries in areas.items():
        lines += [f"## {area}", "", "| key | value | sensitivity | why |", "|---|---|---|---|"]
        lines += [f"| `{e.key}` | {_entry(e)} | {_class(e.key, classes)} | {e.reason} |" for e in entries]
        lines.append("")
    lines += [
        "## alert",
        "",
        "How long each alert's condition must hold before it fires (`alert.<Alert>.for_seconds`) and how",
        "loud it is (`alert.<Alert>.severity`): the [alert rules](alerts.md) and the chart's",
        "`prometheusRule.rules` defaults.",
        "",
        "| alert | for | severity | sensitivity of the for | why |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| [{name}](runbooks/{name}.md) | {p.for_text} | {p.severity.value} | "
        f"{_class(p.for_.key, classes)} | {p.for_.reason} |"
        for name, p in ALERT_POLICIES.items()
    ]
    lines.append("")
    lines += ["## Critical XID codes", "", "| XID | meaning |", "|---|---|"]
    lines += [f"| {xid} | {text} |" for xid, text in CRITICAL_XIDS.items()]
    lines += [
        "",
        "## Board power table",
        "",
        "A GPU's power envelope runs from its idle floor to its ceiling. The ceiling is the enforced power "
        "limit, else the default limit, else this table's TDP (logs without a power limit column; live, "
        "NVML's default limit is used), else the most the GPU was seen drawing busy, raised to "
        f"{POWER_FLOOR_TO_CEILING.value:g} times its idle floor. The floor is the lowest draw the GPU showed "
        "with no kernel resident, else this table's idle draw. Matched on the name, longest match first, "
        "ignoring case.",
        "",
        "| board (name contains) | default power limit | idle draw |",
        "|---|---|---|",
    ]
    lines += [
        f"| {name} | {tdp:g} W | {f'{idle:g} W' if idle else '-'} |"
        for name, (tdp, idle) in BOARD_POWER_W.items()
    ]
    lines += [
        "",
        "## GPU-hour prices",
        "",
        "What `--price` starts from (the chart's `cost.pricePerGpuHour`), to price the time ledger: see",
        "[cost](cost.md). **Examples of on-demand prices, not quotes**: set what your GPUs cost you. Matched",
        "on the NVML name, longest match first, ignoring case; any other model costs "
        f"{COST_DEFAULT_PRICE.value:g} {COST_CURRENCY.value} (`{COST_DEFAULT_PRICE.key}`).",
        "",
        f"| board (name contains) | {COST_CURRENCY.value} per GPU-hour | key |",
        "|---|---|---|",
    ]
    lines += [f"| {model} | {t.value:g} | `{t.key}` |" for model, t in GPU_HOUR_PRICES.items()]
    return "\n".join(lines) + "\n"
