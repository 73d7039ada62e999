"""Files generated from the threshold table (and the code's own definitions). Never edit them by hand:
run ``python -m devtools.artifacts`` (``make artifacts``); a test fails when one is stale."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def artifacts() -> dict[str, Callable[[], str]]:
    """Repository-relative path -> the function producing the file's content. Imported when asked for:
    the demo imports the alert rules' module alone, without the Grafana SDK the dashboards need."""
    from devtools.artifacts import (
        alerts,
        chart,
        dashboards,
        dashboards_doc,
        detection_doc,
        doctor_doc,
        metrics_doc,
        thresholds_doc,
        verdicts_doc,
    )

    return {
        "docs/thresholds.md": thresholds_doc.render,
        "docs/detection.md": detection_doc.render,
        "alerts/gpu-bottleneck-exporter.rules.yml": alerts.render,
        "docs/alerts.md": alerts.render_doc,
        **{path: dashboards.renderer(path) for path in dashboards.DASHBOARDS},
        "docs/dashboards.md": dashboards_doc.render,
        "docs/doctor.md": doctor_doc.render,
        metrics_doc.DOC: metrics_doc.render,
        verdicts_doc.TROUBLESHOOTING: verdicts_doc.render_troubleshooting,
        **chart.FILES,
    }


def __getattr__(name: str) -> object:
    if name == "ARTIFACTS":  # the table, built on first use
        return artifacts()
    raise AttributeError(name)


def generate(root: Path) -> list[str]:
    """Write every artifact under ``root``; return the paths that changed."""
    changed = []
    for rel, render in artifacts().items():
        path = root / rel
        content = render()
        if not path.exists() or path.read_text() != content:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            changed.append(rel)
    return changed


def stale(root: Path) -> list[str]:
    """Artifacts whose file differs from what the code would generate now."""
    return [
        rel
        for rel, render in artifacts().items()
        if not (root / rel).exists() or (root / rel).read_text() != render()
    ]
