"""comm_hang with the job's own word: a log that stops while every rank sits in a quiet collective is a
hang confirmed early (cause no_progress); lines still flowing at the same NVML picture are not a hang;
no log signal is today's NVML-only behaviour. The same in replay, from a trace's progress column."""

from __future__ import annotations

import io
from dataclasses import replace

from exporter.offline.replay import replay
from exporter.offline.traces import TraceWriter
from exporter.policy.thresholds import HANG_FIRE, HANG_NO_PROGRESS_FIRE, PROGRESS_SILENCE
from tests.analysis.synth import IDLE, NCCL_SPIN, WORKING, Shape, run, steady, switch

ONSET = 60.0


def logging_until(stop: float | None, shape: Shape) -> Shape:
    """The shape with the job's log: a line every second until ``stop`` (None: never stops)."""

    def at(t: float):
        last = t - (t % 1.0) if stop is None or t < stop else stop
        return replace(shape(t), log_silent_s=t - last)

    return at


HUNG = switch(ONSET, steady(WORKING), steady(NCCL_SPIN))


def test_a_hang_whose_log_stops_is_confirmed_early_with_cause_no_progress():
    with_log = run({str(g): logging_until(ONSET, HUNG) for g in range(4)}, 300)
    without = run({str(g): HUNG for g in range(4)}, 300)
    fired = with_log.fired("comm_hang")
    assert sorted(e.gpu for e in fired) == ["0", "1", "2", "3"]
    assert {e.cause for e in fired} == {"no_progress"}
    first, nvml_only = with_log.first("comm_hang"), without.first("comm_hang")
    assert first is not None and nvml_only is not None
    assert (
        ONSET + PROGRESS_SILENCE.value + HANG_NO_PROGRESS_FIRE.value
        <= first
        <= ONSET + 2 * PROGRESS_SILENCE.value
    )
    assert nvml_only >= ONSET + HANG_FIRE.value > first - ONSET
    assert {e.cause for e in without.fired("comm_hang")} == {"all_ranks"}


def test_lines_flowing_at_the_same_nvml_picture_is_not_a_hang():
    r = run({str(g): logging_until(None, HUNG) for g in range(4)}, 420)
    assert r.fired("comm_hang") == []
    assert max(s["comm_hang"].score for s in r.states.values()) < 0.3


def test_a_firing_hang_resolves_when_the_log_moves_again():
    revived = logging_until(None, HUNG)
    stopped = logging_until(ONSET, HUNG)
    shape = switch(200, stopped, lambda t: revived(t))
    r = run({str(g): shape for g in range(2)}, 260)
    assert r.first("comm_hang") is not None
    resolved = [e for e in r.events if e.kind == "comm_hang" and e.state == "resolved"]
    assert resolved and min(e.t for e in resolved) < 230


def test_a_silent_log_while_one_rank_is_off_kernel_is_not_confirmed_early():
    spin = logging_until(ONSET, HUNG)
    saving = logging_until(ONSET, switch(ONSET, steady(WORKING), steady(IDLE)))
    r = run({"0": saving, "1": spin, "2": spin}, 240)
    assert r.fired("comm_hang") == []  # the peers wait for the saving rank: only the long wait counts


def test_replay_reads_the_progress_column(tmp_path):
    out = io.StringIO()
    writer = TraceWriter(out)
    shape = logging_until(ONSET, HUNG)
    for k in range(1, 5 * 240 + 1):
        for g in range(2):
            writer.gpu(str(g), "NVIDIA H100 80GB HBM3", replace(shape(k * 0.2), t=1790000000.0 + k * 0.2))
    assert "progress.log_silent [s]" in out.getvalue().splitlines()[0]
    trace = tmp_path / "hung.csv"
    trace.write_text(out.getvalue())
    hangs = [e for e in replay(trace).events if e.kind == "comm_hang" and e.state == "firing"]
    assert hangs and {e.cause for e in hangs} == {"no_progress"}
    assert min(e.t for e in hangs) <= ONSET + 2 * PROGRESS_SILENCE.value
