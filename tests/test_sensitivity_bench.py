"""bench/sensitivity.py: which values a threshold is moved to, how moves are classed, and that a moved
value reaches the analysis (even a value the analysis copied when it was imported)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.sensitivity import (
    QUARTER,
    TENTH,
    Effect,
    _baseline,
    _pool,
    _probe,
    classify,
    effect,
    moved,
    moves,
)
from exporter.policy.thresholds import STARVATION_FIRE, Threshold, table

REPO = Path(__file__).resolve().parents[1]
# one small labelled trace: a server starved by its CPU, paged as data starvation
SMALL = REPO / "examples" / "traces" / "workloads" / "w03_h100_serving_queued_cpu.csv.gz"


def _t(value: float, unit: str) -> Threshold:
    return Threshold("test.key", value, unit, "a test entry")


def test_a_quarter_and_a_tenth_either_way():
    assert moves(_t(60.0, "seconds"), QUARTER) == [45.0, 75.0]
    assert moves(_t(60.0, "seconds"), TENTH) == [54.0, 66.0]
    assert moves(_t(0.0, "seconds"), QUARTER) == []  # nothing is a quarter away from zero


def test_a_count_moves_to_whole_numbers_at_least_one_away():
    assert moves(_t(3.0, "count"), QUARTER) == [2.0, 4.0]
    assert moves(_t(1.0, "count"), QUARTER) == [0.0, 2.0]
    assert moves(_t(3.0, "count"), TENTH) == []  # no whole number within a tenth of 3
    assert moves(_t(300.0, "count"), TENTH) == [270.0, 330.0]


def test_a_ratio_moves_up_at_most_halfway_to_one():
    assert moves(_t(0.4, "ratio"), QUARTER) == [0.3, 0.5]
    assert moves(_t(0.95, "ratio"), QUARTER) == [0.7125, 0.975]
    assert moves(_t(1.0, "ratio"), QUARTER) == [0.75]


def test_a_moved_value_is_the_registry_entry_itself_and_comes_back():
    before = STARVATION_FIRE.value
    with pytest.raises(RuntimeError), moved({STARVATION_FIRE.key: before * 2}):
        assert STARVATION_FIRE.value == table()[STARVATION_FIRE.key].value == before * 2
        raise RuntimeError("the block fails")
    assert STARVATION_FIRE.value == before


def _effect(**changed: object) -> Effect:
    e = Effect(1.0)
    for name, value in changed.items():
        setattr(e, name, value)
    return e


def test_classes():
    assert classify([_effect(), _effect()], []) == "dead"
    assert classify([_effect(onset_shift_s=3.0, changed=["t"]), _effect()], [_effect()]) == "load-bearing"
    flipped = _effect(false_added=1, changed=["t"])
    assert classify([_effect(pages_lost=1, changed=["t"])], [flipped]) == "fragile"
    # a tenth that only shifts an onset is no flip
    assert classify([_effect(pages_lost=1)], [_effect(onset_shift_s=3.0, changed=["t"])]) == "load-bearing"


def test_a_moved_value_reaches_the_analysis_on_a_small_trace():
    """The starvation verdict's fire time is copied into its kind when the analysis is imported: moved in
    a fresh process before that import, it moves when the episode is detected; unmoved, nothing moves."""
    key, value, trace = STARVATION_FIRE.key, STARVATION_FIRE.value, str(SMALL)
    with _pool(2) as pool:
        base_job = pool.submit(_baseline, [trace])
        same_job = pool.submit(_probe, key, value, [trace])
        later_job = pool.submit(_probe, key, value * 4, [trace])
        imported, found = base_job.result()
        same, later = same_job.result(), later_job.result()
    assert key in imported  # read while the analysis was imported, not only while it ran
    base = {"traces": found}
    assert found[trace]["outcome"]["paged"]  # the episode pages as it is
    assert not effect(value, base, same).changes
    moved_effect = effect(value * 4, base, later)
    assert moved_effect.changes and moved_effect.onset_shift_s > 0
    assert moved_effect.changed == ["w03_h100_serving_queued_cpu"]


def test_a_probe_from_the_kept_rows_judges_as_one_from_the_file():
    """The baseline keeps each trace's rows; a probe judging them finds what reading the file finds, and a
    threshold the reading itself read is probed from the file."""
    import shutil
    import uuid

    from bench.sensitivity import ROWS_CACHE, fresh_for, not_judged, rows_file

    key, value, trace = STARVATION_FIRE.key, STARVATION_FIRE.value, str(SMALL)
    mark = f"test{uuid.uuid4().hex}"
    try:
        with _pool(2) as pool:
            _, found = pool.submit(_baseline, [trace], mark).result()
            assert rows_file(trace, mark).exists()
            kept = pool.submit(_probe, key, value * 4, [trace], mark).result()
            read = pool.submit(_probe, key, value * 4, [trace]).result()
    finally:
        shutil.rmtree(ROWS_CACHE / mark[:12], ignore_errors=True)
    assert kept == read and kept[trace]["paged"]
    assert kept[trace]["onset"] != found[trace]["outcome"]["onset"]  # the moved value reached it
    # the reading reads the gap length: a probe of it reads the file again
    assert "replay.gap_periods" in found[trace]["parse_reads"]
    assert fresh_for({"traces": found}, "replay.gap_periods") == [trace]
    assert fresh_for({"traces": found}, key) == []
    assert not_judged("replay.bound.power_max_watts") and not_judged("cost.price.h100_sxm")
    assert not not_judged(key)
    assert not_judged("analysis.window_max_points_per_second")


def test_an_effect_compares_when_an_episode_says_its_loss_ended_and_its_held_share():
    """A move that only ends an episode later (a resolve time), or only changes the cause an episode names,
    is a change, not a dead number."""
    from bench.sensitivity import _compare

    base = {
        "paged": ["0:a"],
        "onset": {"0:a": 30.0},
        "to_page": {"0:a": 90.0},
        "said_onset": {"0:a": 0.0},
        "said_end": {"0:a": 10.0},
        "to_resolve": {"0:a": 60.0},
        "held": {"0:a": 95.0},
        "causes": [],
        "false": [],
        "false_pages": [],
        "ledger": None,
        "error": "",
    }
    later = {**base, "said_end": {"0:a": 40.0}, "to_resolve": {"0:a": 90.0}, "held": {"0:a": 96.5}}
    e = Effect(1.0)
    _compare(e, "t", base, later)
    assert e.changes and not e.flips
    assert (e.said_shift_s, e.resolve_shift_s, e.held_points) == (30.0, 30.0, 1.5)
    same = Effect(1.0)
    _compare(same, "t", base, dict(base))
    assert not same.changes
    # an episode that names another cause (the host's I/O pressure instead of a pinned core) changes it
    named = Effect(1.0)
    _compare(
        named,
        "t",
        {**base, "causes": ["3 data_starvation cpu"]},
        {**base, "causes": ["3 data_starvation io"]},
    )
    assert named.changes and named.causes_changed == 1 and not named.flips


def test_the_extra_sets_replay_as_labelled(tmp_path):
    """A simulator scenario recorded by the exporter's own sampler replays to the verdict its labels name,
    and a thinned copy of an example keeps one row per GPU and step, its labels without the ledger truth."""
    import gzip
    import json

    from bench.detection import judge_ours
    from bench.extra_sets import Recorded, record, thin

    spec = Recorded("nvlink_down", "nvlink_down:onset=30", (("nvlink_degraded", (2,), 30.0, 240.0),), 4, 240)
    path = record(spec, tmp_path)
    labels = json.loads((tmp_path / "nvlink_down.labels.json").read_text())["labels"]
    assert labels == [{"gpu": "2", "kind": "nvlink_degraded", "start": 30.0, "end": 240.0}]
    score, _ = judge_ours(path)
    assert [e.paged for e in score.episodes] == [True] and not score.false

    thinned = thin(SMALL, tmp_path, step=30.0)
    rows = gzip.decompress(thinned.read_bytes()).decode().splitlines()[1:]
    original = gzip.decompress(SMALL.read_bytes()).decode().splitlines()[1:]
    assert 0 < len(rows) <= len(original) // 20
    copied = json.loads((tmp_path / "w03_h100_serving_queued_cpu.labels.json").read_text())
    assert copied["labels"] and "ledger_truth" not in copied


def test_the_docs_say_what_each_move_did():
    from devtools.artifacts.thresholds_doc import _moved

    quiet = {"value": 0.5, "pages_lost": 0, "changed": []}
    lost = {**quiet, "value": 0.375, "pages_lost": 2, "onset_shift_s": 12.0, "changed": ["t"]}
    assert _moved({"class": "load-bearing", "value": 0.5, "quarter": [lost, {**quiet, "value": 0.625}]}) == (
        "load-bearing (a quarter down: 2 pages lost, detection moves 12 s)"
    )
    dead = {"class": "dead", "value": 0.5, "quarter": [quiet, quiet], "half": [quiet, quiet]}
    assert _moved(dead) == "dead (inert at a half)"
    wide = {**dead, "half": [{**quiet, "value": 0.75, "false_added": 1, "changed": ["t"]}]}
    assert _moved(wide) == "dead (a half up: 1 false page added)"
    assert _moved({"class": "unread", "value": 1.0}) == "unread"
