"""Verdicts are judged every VERDICT_INTERVAL while the ledger takes every second."""

from __future__ import annotations

import itertools
from dataclasses import replace

from exporter.analysis.engine import Analyzer
from exporter.policy.thresholds import EVAL_INTERVAL, VERDICT_INTERVAL
from tests.analysis.synth import NCCL_SPIN, WORKING, run, steady, switch

STEPS_PER_JUDGEMENT = round(VERDICT_INTERVAL.value / EVAL_INTERVAL.value)


def _feed(analyzer: Analyzer, gpus: list[str], t: float) -> None:
    for gpu in gpus:
        analyzer.add_gpu_points(gpu, [replace(WORKING, t=t - 0.5), replace(WORKING, t=t)])


def _spy(analyzer: Analyzer) -> list[float]:
    """The times the analyzer judged its verdicts at (its detectors ran)."""
    judged: list[float] = []
    inner = analyzer._decide

    def decide(now, chosen, evidence):  # type: ignore[no-untyped-def]
        judged.append(now)
        return inner(now, chosen, evidence)

    analyzer._decide = decide  # type: ignore[method-assign]
    return judged


def test_verdicts_are_judged_every_interval_and_stand_between() -> None:
    assert STEPS_PER_JUDGEMENT >= 2  # otherwise there is nothing to test
    analyzer = Analyzer()
    judged = _spy(analyzer)
    results = []
    for k in range(1, 9):
        _feed(analyzer, ["0", "1"], float(k))
        results.append(analyzer.evaluate(float(k)))
    assert judged == [float(k) for k in range(1, 9, STEPS_PER_JUDGEMENT)]
    for k, (states, events) in enumerate(results, start=1):
        assert set(states) == {"0", "1"}
        if k not in judged:  # the last judgement's verdicts, no new events
            assert states is results[k - 2][0] and events == []


def test_the_ledger_takes_every_second_between_judgements() -> None:
    analyzer = Analyzer()
    for k in range(1, 8):
        _feed(analyzer, ["0"], float(k))
        analyzer.evaluate(float(k))
        counted = sum(analyzer.ledger("0").totals.values())
        assert abs(counted - k) < 1e-6  # every second, judged or not
    assert analyzer.ledger("0").totals["computing"] > 6.9


def test_a_gpu_that_comes_or_goes_or_returns_is_judged_at_once() -> None:
    analyzer = Analyzer()
    judged = _spy(analyzer)
    _feed(analyzer, ["0", "1"], 1.0)
    analyzer.evaluate(1.0, ["0", "1"])
    _feed(analyzer, ["0", "1"], 2.0)
    states, _ = analyzer.evaluate(2.0, ["0"])  # GPU 1 is down: judged now, without it
    assert judged == [1.0, 2.0] and set(states) == {"0"}
    _feed(analyzer, ["0", "1"], 3.0)
    states, _ = analyzer.evaluate(3.0, ["0", "1"])  # back
    assert judged == [1.0, 2.0, 3.0] and set(states) == {"0", "1"}
    analyzer.reset("1")  # it came back after being lost: its window starts over
    _feed(analyzer, ["0", "1"], 4.0)
    analyzer.evaluate(4.0, ["0", "1"])
    assert judged == [1.0, 2.0, 3.0, 4.0]
    _feed(analyzer, ["0", "1"], 3.5)
    analyzer.evaluate(3.5, ["0", "1"])  # a clock that stepped back: judged again
    assert judged[-1] == 3.5


def test_a_live_clock_jitter_does_not_skip_or_double_a_judgement() -> None:
    analyzer = Analyzer()
    judged = _spy(analyzer)
    t = 100.0
    steps = (1.0, 0.97, 1.04, 0.99, 1.02, 0.98, 1.01, 1.0, 0.96, 1.03, 1.0, 0.99)
    for step in steps:
        t += step
        _feed(analyzer, ["0"], t)
        analyzer.evaluate(t)
    gaps = [b - a for a, b in itertools.pairwise(judged)]
    every = VERDICT_INTERVAL.value
    assert len(judged) == len(steps) // STEPS_PER_JUDGEMENT
    assert all(every - 0.1 < g < every + 0.2 for g in gaps)


def test_a_hang_still_fires_and_stays_on_at_the_judging_cadence() -> None:
    """The cadence moves a verdict by less than one interval, and a firing verdict stays on."""
    shapes = {g: switch(120.0, steady(WORKING), steady(NCCL_SPIN)) for g in ("0", "1")}
    result = run(shapes, 600.0)
    first = result.first("comm_hang")
    assert first is not None and first > 120.0
    fired = [e for e in result.events if e.kind == "comm_hang"]
    assert all(e.state == "firing" for e in fired)  # never resolved while the hang lasts
    assert result.states["0"]["comm_hang"].firing and result.states["1"]["comm_hang"].firing
