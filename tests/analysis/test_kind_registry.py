"""A verdict kind is its registry entry: the engine, replay, the report and the alert and doc generators
take all they know of a kind from exporter/analysis/kinds.py and name none themselves."""

from __future__ import annotations

import re

from exporter.analysis.kinds import KINDS, JobCause
from tests.conftest import REPO

READERS = (
    "exporter/analysis/engine.py",
    "exporter/offline/replay.py",
    "exporter/offline/report.py",
    "devtools/artifacts/alerts.py",
    "devtools/artifacts/dashboards.py",
    "devtools/artifacts/recording.py",
    "devtools/artifacts/verdicts_doc.py",
    "devtools/artifacts/metrics_doc.py",
)


def test_no_reader_names_a_kind():
    for path in READERS:
        source = (REPO / path).read_text()
        named = [k for k in KINDS if re.search(rf"\b{k}\b", source)]
        assert named == [], f"{path} names {named}: give the entry an attribute instead"


def test_job_roles_are_consistent():
    for kind in KINDS.values():
        roles = [kind.holds_peers_back, kind.job_event is not None, kind.peer_fault is not None]
        assert sum(roles) <= 1, f"{kind.name}: one job-level role at most (the engine applies the first)"
        if kind.peer_fault is not None:
            assert kind.peer_fault.cause in kind.causes
            assert set(kind.peer_fault.peer_causes) <= set(kind.causes)
        if kind.job_event is not None:
            causes = {kind.job_event.every_rank.cause, kind.job_event.some_ranks.cause}
            assert causes | {kind.job_event.confirmed.cause} <= set(kind.causes)
        assert set(kind.routine) <= set(kind.causes)
    # a straggler is found only if some kind holds its peers back
    if any(k.explained_by is JobCause.STRAGGLER for k in KINDS.values()):
        assert any(k.holds_peers_back for k in KINDS.values())


def test_every_kind_has_its_texts():
    for kind in KINDS.values():
        assert kind.inputs.needs and kind.inputs.series, kind.name
        if kind.text is not None:
            assert kind.text.summary.endswith(".") and kind.text.description.startswith(" ")
            assert not kind.text.cause or kind.text.cause in kind.labelled_causes
