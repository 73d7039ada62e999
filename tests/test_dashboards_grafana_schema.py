"""Every generated dashboard against Grafana's own published dashboard schema (the ``@grafana/schema``
types of the oldest and newest Grafana release the project supports), and the check's teeth: it refuses a
misspelt key, a wrong type and a missing required field where Grafana's schema does."""

from __future__ import annotations

import copy
import json

import pytest

from devtools.artifacts import dashboards
from devtools.artifacts.dashboard_checks import panels
from tests import grafana_schema
from tests.conftest import REPO

BOARDS = {path: json.loads((REPO / path).read_text()) for path in sorted(dashboards.DASHBOARDS)}


@pytest.mark.parametrize("version", grafana_schema.VERSIONS)
def test_every_dashboard_validates_against_grafanas_schema(version, tmp_path):
    assert grafana_schema.problems(BOARDS, version, tmp_path) == []


def test_the_chart_ships_the_same_dashboards():
    for path, board in BOARDS.items():
        shipped = REPO / "helm" / "gpu-bottleneck-exporter" / path
        assert json.loads(shipped.read_text()) == board


def _first(board: dict, kind: str) -> dict:
    return next(p for p in panels(board) if p["type"] == kind)


@pytest.mark.parametrize(
    ("mutate", "word"),
    [
        (lambda b: b.__setitem__("refreshh", "30s"), "refreshh"),
        (
            lambda b: _first(b, "timeseries")["options"]["legend"].__setitem__("placment", "bottom"),
            "placment",
        ),
        (
            lambda b: _first(b, "timeseries")["fieldConfig"]["defaults"]["custom"].__setitem__(
                "lineWidth", "2"
            ),
            "lineWidth",
        ),
        (lambda b: _first(b, "stat")["options"].__setitem__("colorMode", "rainbow"), "colorMode"),
        (lambda b: _first(b, "table")["fieldConfig"]["defaults"]["custom"].pop("cellOptions"), "cellOptions"),
        (lambda b: b["templating"]["list"][0].pop("type"), "type"),
    ],
    ids=["dashboard-key", "panel-option", "field-type", "enum-value", "required-field", "variable-type"],
)
def test_the_check_refuses_what_grafanas_schema_refuses(mutate, word, tmp_path):
    board = copy.deepcopy(BOARDS["dashboards/gpu-bottleneck-fleet.json"])
    mutate(board)
    found = grafana_schema.problems({"fleet": board}, grafana_schema.VERSIONS[-1], tmp_path)
    assert len(found) == 1 and word in found[0], found
