"""bench/detection.py's scoring on hand-made episodes: what counts as detected, paged, held and false."""

from __future__ import annotations

import gzip
import json

import pytest

from bench.detection import (
    KINDS,
    Judged,
    Label,
    Verdict,
    alert_for,
    find_traces,
    held_share,
    ledger_error,
    load_labels,
    score_label,
    score_trace,
    shortfalls,
    trace_name,
)

FOR = {"data_starvation": 120.0, "comm_bound": 300.0, "shm_exhaustion": 60.0}
END = 900.0  # the trace's last sample
STARVED = Label("3", "data_starvation", 200.0, 900.0)


def test_a_verdict_held_through_the_label_pages_after_its_for():
    s = score_label("t", STARVED, [Verdict("3", "data_starvation", 230.0, None)], FOR, END)
    assert (s.detected, s.paged, s.ttd, s.ttp) == (True, True, 30.0, 150.0)
    assert s.held == pytest.approx(670 / 700)


def test_time_to_resolve_is_from_the_labels_end_to_the_last_verdicts_end():
    ended = Label("3", "data_starvation", 200.0, 600.0)
    s = score_label("t", ended, [Verdict("3", "data_starvation", 230.0, 645.0)], FOR, END)
    assert s.ttr == 45.0
    early = score_label("t", ended, [Verdict("3", "data_starvation", 230.0, 590.0)], FOR, END)
    assert early.ttr == 0.0
    still_on = score_label("t", ended, [Verdict("3", "data_starvation", 230.0, None)], FOR, END)
    assert still_on.ttr == END - 600.0  # never resolved: counted to the trace's end
    to_the_end = score_label("t", STARVED, [Verdict("3", "data_starvation", 230.0, None)], FOR, END)
    assert to_the_end.ttr is None  # the label lasts as long as the trace


def test_onset_and_end_errors_are_what_the_episode_says_of_its_loss_against_the_label():
    ended = Label("3", "data_starvation", 200.0, 600.0)
    told = Verdict("3", "data_starvation", 230.0, 690.0, onset=195.0, stop=610.0)
    s = score_label("t", ended, [told], FOR, END)
    assert (s.onset_err, s.end_err) == (-5.0, 10.0)  # signed: early onset, late end
    assert (s.ttd, s.ttp, s.ttr) == (30.0, 150.0, 90.0)  # paging is judged on the verdict, as before
    untold = score_label("t", ended, [Verdict("3", "data_starvation", 230.0, 645.0)], FOR, END)
    assert (untold.onset_err, untold.end_err) == (30.0, 45.0)  # no onset said: when it fired, resolved
    # still on when the trace ended, with its loss stopped before: the end it says
    still_on = Verdict("3", "data_starvation", 230.0, None, onset=200.0, stop=620.0)
    assert score_label("t", ended, [still_on], FOR, END).end_err == 20.0


def test_a_verdict_that_flaps_off_before_its_for_does_not_page():
    flapping = [Verdict("3", "data_starvation", t, t + 100.0) for t in (220.0, 330.0, 440.0, 550.0)]
    s = score_label("t", STARVED, flapping, FOR, END)
    assert s.detected and not s.paged and s.ttp is None and s.ttd == 20.0
    assert s.held == pytest.approx(400 / 700)


def test_one_unbroken_episode_among_flaps_pages_from_its_own_firing():
    verdicts = [Verdict("3", "data_starvation", 220.0, 300.0), Verdict("3", "data_starvation", 310.0, None)]
    s = score_label("t", STARVED, verdicts, FOR, END)
    assert s.paged and s.ttd == 20.0 and s.ttp == 310.0 + 120.0 - 200.0


def test_a_verdict_on_another_gpu_or_of_another_kind_is_missed_and_false():
    verdicts = [Verdict("2", "data_starvation", 230.0, None), Verdict("3", "comm_bound", 230.0, None)]
    score = score_trace("t", [STARVED], verdicts, FOR, END)
    (episode,) = score.episodes
    assert not episode.detected and not episode.paged and episode.held == 0.0 and episode.ttd is None
    assert [f.verdict for f in score.false] == verdicts and all(f.paged for f in score.false)


def test_a_kind_in_the_labels_kinds_list_counts_and_pages_with_the_labels_for():
    label = Label.from_json(
        {
            "gpu": 0,
            "kind": "data_starvation",
            "start": 200,
            "end": 900,
            "kinds": ["data_starvation", "checkpoint_stall"],
        }
    )
    assert label.accepted == ("data_starvation", "checkpoint_stall")
    stall = [Verdict("0", "checkpoint_stall", 250.0, 380.0)]  # a kind the registry lacks: the label's `for`
    score = score_trace("t", [label], stall, FOR, END)
    assert score.episodes[0].paged and score.episodes[0].ttp == 170.0 and score.false == []
    assert not score_label("t", label, [Verdict("0", "checkpoint_stall", 250.0, 360.0)], FOR, END).paged
    only_kind = Label.from_json({"gpu": "0", "kind": "data_starvation", "start": 200, "end": 900})
    assert only_kind.accepted == ("data_starvation",)
    assert not score_label("t", only_kind, stall, FOR, END).detected


def test_a_label_shorter_than_the_for_pages_when_held_to_its_end():
    shm = Label("0", "shm_exhaustion", 564.0, 610.5)
    held = score_label("t", shm, [Verdict("0", "shm_exhaustion", 570.0, 611.0)], FOR, END)
    assert held.paged and held.held == pytest.approx(40.5 / 46.5) and held.ttp == 570.0 + 60.0 - 564.0
    dropped = score_label("t", shm, [Verdict("0", "shm_exhaustion", 570.0, 600.0)], FOR, END)
    assert dropped.detected and not dropped.paged


def test_a_label_is_cut_at_the_traces_last_sample():
    idle = Label("0", "idle_allocated", 0.0, 900.0)
    s = score_label(
        "t", idle, [Verdict("0", "idle_allocated", 300.0, None)], {"idle_allocated": 600.0}, 899.0
    )
    assert s.paged and s.held == pytest.approx(599 / 899)


def test_a_verdict_on_before_the_label_detects_at_once():
    s = score_label("t", STARVED, [Verdict("3", "data_starvation", 100.0, None)], FOR, END)
    assert (s.ttd, s.ttp, s.held) == (0.0, 20.0, 1.0)
    early = score_label("t", STARVED, [Verdict("3", "data_starvation", 0.0, None)], FOR, END)
    assert early.ttp == 0.0


def test_held_share_counts_overlapping_verdicts_once():
    verdicts = [
        Verdict("3", "data_starvation", 150.0, 400.0),
        Verdict("3", "data_starvation", 300.0, 500.0),
        Verdict("3", "data_starvation", 800.0, None),
    ]
    assert held_share(STARVED, verdicts, END) == pytest.approx((300 + 100) / 700)
    assert held_share(STARVED, [Verdict("3", "data_starvation", 0.0, 100.0)], END) == 0.0


def test_false_verdicts_page_only_when_on_for_their_alerts_for():
    verdicts = [
        Verdict("0", "data_starvation", 100.0, 219.0),  # flaps off a second early
        Verdict("1", "data_starvation", 100.0, 220.0),
        Verdict("2", "comm_bound", 700.0, None),  # 200 s to the trace's end, for is 300 s
    ]
    false = score_trace("healthy", [], verdicts, FOR, END).false
    assert [(f.verdict.gpu, f.paged) for f in false] == [("0", False), ("1", True), ("2", False)]
    assert str(false[1]) == "healthy GPU 1 data_starvation at 100 s (paged)"


def test_the_for_comes_from_the_alert_of_each_kind():
    for_s = alert_for()
    assert set(for_s) == set(KINDS)
    assert all(for_s[name] == kind.policy.for_.value for name, kind in KINDS.items())


def test_ledger_error_is_the_worst_gpu_and_state_in_points():
    ledger = {"0": {"computing": 60.0, "input_wait": 40.0}, "1": {"computing": 100.0}}
    truth = {"0": {"computing": 0.63, "input_wait": 0.37}, "1": {"computing": 0.99, "idle": 0.01}}
    worst = ledger_error(ledger, truth)
    assert (
        worst.points == pytest.approx(3.0) and worst.gpu == "0" and worst.state in {"computing", "input_wait"}
    )
    missing = ledger_error({}, {"2": {"computing": 1.0}})  # a GPU the replay never saw
    assert missing.points == pytest.approx(100.0) and missing.gpu == "2"
    assert ledger_error({"0": {"computing": 5.0}}, {"0": {"computing": 1.0}}).points == 0.0


def test_targets_need_every_page_held_share_no_false_verdict_and_a_close_ledger():
    good = score_trace("t", [STARVED], [Verdict("3", "data_starvation", 200.0, None)], FOR, END)
    assert shortfalls([good], 4.9) == []
    assert shortfalls([good], 5.1) == ["ledger off by 5.1 points"]
    late = score_trace("t", [STARVED], [Verdict("3", "data_starvation", 300.0, None)], FOR, END)
    assert shortfalls([late], 0.0) == ["1 held < 90 %"]
    false = score_trace("t", [], [Verdict("3", "data_starvation", 300.0, 310.0)], FOR, END)
    assert shortfalls([false], 0.0) == ["1 false verdicts (0 paged)"]
    missed = score_trace("t", [STARVED], [], FOR, END)
    assert shortfalls([missed], 0.0) == ["1 of 1 episodes not paged", "1 held < 90 %"]


def test_traces_are_found_plain_or_gzipped_with_their_labels(tmp_path):
    labels = {"labels": [{"gpu": "1", "kind": "comm_bound", "start": 5, "end": 9}], "ledger_truth": {"1": {}}}
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(b"timestamp, utilization.gpu [%]\n"))
    (tmp_path / "a.labels.json").write_text(json.dumps(labels))
    (tmp_path / "b.csv").write_text("timestamp, utilization.gpu [%]\n")
    (tmp_path / "b.labels.json").write_text(json.dumps({"labels": []}))
    (tmp_path / "unlabelled.csv").write_text("timestamp\n")
    found = find_traces(tmp_path)
    assert [p.name for p in found] == ["a.csv.gz", "b.csv"] and [trace_name(p) for p in found] == ["a", "b"]
    assert load_labels(found[0]) == ([Label("1", "comm_bound", 5.0, 9.0)], {"1": {}}, Judged())
    assert load_labels(found[1]) == ([], {}, Judged())


def test_real_trace_labels_take_kinds_alone_a_false_window_and_ignored_kinds(tmp_path):
    """The real traces' labels: accepted kinds without a main kind; verdicts outside ``fp_window`` or of an
    ignored kind are not false."""
    raw = {
        "labels": [{"gpu": "0", "kinds": ["data_starvation", "idle_allocated"], "start": 60, "end": 600}],
        "fp_window": [100, 500],
        "ignore_kinds": ["power_throttle"],
    }
    (tmp_path / "r.csv").write_text("timestamp, utilization.gpu [%]\n")
    (tmp_path / "r.labels.json").write_text(json.dumps(raw))
    labels, truth, judged = load_labels(tmp_path / "r.csv")
    assert labels == [Label("0", "data_starvation", 60.0, 600.0, ("data_starvation", "idle_allocated"))]
    assert truth == {} and judged == Judged((100.0, 500.0), ("power_throttle",))
    verdicts = [
        Verdict("0", "idle_allocated", 300.0, None),  # accepted by the label
        Verdict("1", "comm_bound", 20.0, 90.0),  # before the false window: not judged
        Verdict("1", "power_throttle", 200.0, 400.0),  # an ignored kind
        Verdict("2", "comm_hang", 450.0, 700.0),  # overlaps the window: false, and paged
    ]
    score = score_trace("r", labels, verdicts, FOR, 700.0, judged)
    assert score.episodes[0].paged
    assert [(f.verdict.gpu, f.verdict.kind, f.paged) for f in score.false] == [("2", "comm_hang", True)]


def test_a_verdict_whose_loss_began_in_an_allowed_stretch_is_not_false(tmp_path):
    """``allowed``: stretches where the named kinds may fire or not. A verdict of such a kind on that GPU
    whose loss began inside one is neither missed nor false, even if it resolved a little after (a
    verdict resolves after its loss ends); one of another kind, GPU or onset still counts."""
    raw = {
        "labels": [],
        "allowed": [{"gpu": "0", "kinds": ["data_starvation"], "start": 0, "end": 332}],
    }
    (tmp_path / "r.csv").write_text("timestamp, utilization.gpu [%]\n")
    (tmp_path / "r.labels.json").write_text(json.dumps(raw))
    labels, _, judged = load_labels(tmp_path / "r.csv")
    assert judged.allowed == (Label("0", "data_starvation", 0.0, 332.0, ("data_starvation",)),)
    verdicts = [
        Verdict("0", "data_starvation", 88.0, 424.0, onset=46.0, stop=335.0),  # allowed
        Verdict("1", "data_starvation", 88.0, 424.0, onset=46.0, stop=335.0),  # another GPU
        Verdict("0", "comm_bound", 88.0, 424.0, onset=46.0, stop=335.0),  # another kind
        Verdict("0", "data_starvation", 400.0, 600.0, onset=340.0, stop=560.0),  # began after it
    ]
    score = score_trace("r", labels, verdicts, FOR, 700.0, judged)
    assert [(f.verdict.gpu, f.verdict.kind, f.verdict.began) for f in score.false] == [
        ("1", "data_starvation", 46.0),
        ("0", "comm_bound", 46.0),
        ("0", "data_starvation", 340.0),
    ]
