"""docs/metrics.md's "Readings" table, generated from the signal catalog (exporter/policy/catalog.py). The
rest of the page is written by hand around the ``@generated-begin readings`` / ``@generated-end`` markers,
but for the verdict rows (verdicts_doc.py)."""

from __future__ import annotations

import re

from devtools.artifacts import verdicts_doc
from devtools.artifacts.chart import REPO, _replace_block
from exporter.policy import catalog

DOC = "docs/metrics.md"
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _type(signal: catalog.Signal) -> str:
    return "counter" if signal.kind == "counter" else "gauge"


def _labels(signals: list[catalog.Signal]) -> str:
    """`sensor` = `gpu`, `memory`; values a detail category adds are said so."""
    by_name: dict[str, list[tuple[str, str | None]]] = {}
    for s in signals:
        for name, value in _LABEL.findall(s.label):
            values = by_name.setdefault(name, [])
            if value not in [v for v, _ in values]:  # a value shared by several signals, once
                values.append((value, s.detail))
    cells = []
    for name, values in by_name.items():
        always = [f"`{v}`" for v, d in values if d is None]
        later = [(v, d) for v, d in values if d is not None]
        text = f"`{name}` = " + ", ".join(always or [f"`{v}`" for v, _ in later])
        if always and later:
            text += f"; with *detail: {later[0][1]}* also " + ", ".join(f"`{v}`" for v, _ in later)
        cells.append(text)
    return "; ".join(cells)


def _row(signals: list[catalog.Signal]) -> str:
    first = signals[0]
    sources = list(dict.fromkeys(s.nvml for s in signals if s.nvml))
    source = "; ".join(sources)
    details = {s.detail for s in signals}
    if None not in details:
        source = f"*detail: {first.detail}.* {source}"
    return (
        f"| `{catalog.family_name(first)}` | {_type(first)} | {first.unit} | {_labels(signals)} | {source} |"
    )


def block() -> str:
    families: dict[str, list[catalog.Signal]] = {}
    for s in catalog.SIGNALS:
        if s.metric is not None:
            families.setdefault(s.metric, []).append(s)
    lines = ["| name | type | unit | labels | source |", "|---|---|---|---|---|"]
    lines += [_row(signals) for signals in families.values()]
    return "\n".join(lines) + "\n"


def render() -> str:
    text = verdicts_doc.metrics_rows((REPO / DOC).read_text())
    return _replace_block(text, "readings", block(), comment="<!--")
