"""What each picture in docs/img was drawn from: docs/img/pictures.json records, per picture, the
sha256 of the PNG and of each source file it was drawn from (the dashboard JSON or the replay report's
code, the example it shows, the script that drew it). The drawing scripts write the record; the test
(tests/test_pictures.py) fails when a source has changed since, so a picture is redrawn with what it
shows, never left to drift.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMG = REPO / "docs" / "img"
RECORD = IMG / "pictures.json"

_DASHBOARD_SCRIPT = "scripts/dashboard_pictures.py"
_REPORT_SCRIPT = "scripts/report_picture.py"

# picture -> (the command that redraws it, the files it is drawn from, repository-relative)
PICTURES: dict[str, tuple[str, list[str]]] = {
    **{
        f"dashboard-{name}.png": (
            f"python {_DASHBOARD_SCRIPT}",
            [f"dashboards/gpu-bottleneck-{name}.json", _DASHBOARD_SCRIPT],
        )
        for name in ("fleet", "node", "job")
    },
    "replay-report.png": (
        f"python {_REPORT_SCRIPT}",
        [
            "exporter/offline/report.py",
            "exporter/offline/report_assets/report.js",
            "exporter/offline/report_assets/report.css",
            "examples/traces/starvation_h100x8.csv.gz",
            _REPORT_SCRIPT,
        ],
    ),
}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load() -> dict[str, dict]:
    return json.loads(RECORD.read_text()) if RECORD.exists() else {}


def record(picture: Path) -> None:
    """Note that ``picture`` (in docs/img) was drawn just now from its sources as they are."""
    _, sources = PICTURES[picture.name]
    entries = load()
    entries[picture.name] = {
        "png_sha256": digest(picture),
        "drawn_from": {source: digest(REPO / source) for source in sources},
    }
    RECORD.write_text(json.dumps(dict(sorted(entries.items())), indent=2) + "\n")


def problems() -> list[str]:
    """Why a picture no longer shows what ships: one line each, with the command that redraws it."""
    entries = load()
    found = []
    drawn = {p.name for p in IMG.glob("*.png")}
    for name in sorted(drawn - set(PICTURES)):
        found.append(f"docs/img/{name}: no entry in scripts/picture_sources.py says what it is drawn from")
    for name, (command, sources) in PICTURES.items():
        entry = entries.get(name)
        if name not in drawn or entry is None:
            found.append(f"docs/img/{name}: not drawn or not recorded; run `{command}`")
            continue
        if entry["png_sha256"] != digest(IMG / name):
            found.append(f"docs/img/{name} changed without its record; run `{command}`")
        changed = [s for s in sources if entry["drawn_from"].get(s) != digest(REPO / s)]
        if changed or set(entry["drawn_from"]) != set(sources):
            older = ", ".join(changed) or "source list"
            found.append(f"docs/img/{name} was drawn from an older {older}; run `{command}`")
    return found
