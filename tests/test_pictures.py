"""The pictures in docs/ show what ships: each was drawn from the dashboard JSON or the replay report's
code as they are now (docs/img/pictures.json, written by the scripts that draw them)."""

from __future__ import annotations

import copy
import re

from scripts import picture_sources


def test_every_picture_was_drawn_from_the_sources_as_they_are():
    assert picture_sources.problems() == []


def test_a_source_changed_since_names_the_picture_and_the_command_that_redraws_it(monkeypatch):
    record = picture_sources.load()
    changed = copy.deepcopy(record)
    changed["dashboard-node.png"]["drawn_from"]["dashboards/gpu-bottleneck-node.json"] = "0" * 64
    monkeypatch.setattr(picture_sources, "load", lambda: changed)
    assert picture_sources.problems() == [
        "docs/img/dashboard-node.png was drawn from an older dashboards/gpu-bottleneck-node.json; "
        "run `python scripts/dashboard_pictures.py`"
    ]


def test_a_picture_replaced_by_hand_is_caught(monkeypatch):
    changed = copy.deepcopy(picture_sources.load())
    changed["replay-report.png"]["png_sha256"] = "0" * 64
    monkeypatch.setattr(picture_sources, "load", lambda: changed)
    assert picture_sources.problems() == [
        "docs/img/replay-report.png changed without its record; run `python scripts/report_picture.py`"
    ]


def test_every_picture_the_docs_show_is_recorded():
    docs = picture_sources.REPO / "docs"
    shown = {
        name for page in docs.glob("*.md") for name in re.findall(r"\]\(img/([^)]+\.png)\)", page.read_text())
    }
    assert shown and shown <= set(picture_sources.PICTURES)
