"""docs/thresholds.md: the threshold table as a page."""

from __future__ import annotations

from exporter.thresholds import BOARD_TDP_W, CRITICAL_XIDS, table

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
}


def _value(value: float, unit: str) -> str:
    if unit == "ratio":
        return f"{value * 100:g} %"
    if unit == "bytes" and value >= 1 << 20:
        return f"{value / (1 << 30):g} GiB" if value >= 1 << 30 else f"{value / (1 << 20):g} MiB"
    if unit == "bytes_per_second":
        return f"{value / 1e6:g} MB/s"
    return f"{value:g}{UNITS.get(unit, ' ' + unit)}"


def render() -> str:
    lines = [
        "# Threshold table",
        "",
        "<!-- generated from exporter/thresholds.py by `make artifacts`; do not edit -->",
        "",
        "Every number the detectors, the alert rules, the dashboards and the Helm chart use, with the",
        "reason it has that value. The source is `exporter/thresholds.py`; this page, the alert rules, the",
        "dashboard thresholds and the chart's values are generated from it.",
        "",
    ]
    areas: dict[str, list] = {}
    for entry in table().values():
        areas.setdefault(entry.key.split(".")[0], []).append(entry)
    for area, entries in areas.items():
        lines += [f"## {area}", "", "| key | value | why |", "|---|---|---|"]
        lines += [f"| `{e.key}` | {_value(e.value, e.unit)} | {e.reason} |" for e in entries]
        lines.append("")
    lines += ["## Critical XID codes", "", "| XID | meaning |", "|---|---|"]
    lines += [f"| {xid} | {text} |" for xid, text in CRITICAL_XIDS.items()]
    lines += [
        "",
        "## Board TDP fallback",
        "",
        "Used only for logs without a power limit column; live, NVML's default limit is used.",
        "",
        "| board (name contains) | default power limit |",
        "|---|---|",
    ]
    lines += [f"| {name} | {watts:g} W |" for name, watts in BOARD_TDP_W.items()]
    return "\n".join(lines) + "\n"
