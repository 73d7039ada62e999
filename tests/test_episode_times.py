"""An episode is told by when its loss happened, not when its verdict fired: replay's episodes start at
the onset of the evidence and end when it cleared, on the trace's wall clock; live, the onset of each
firing verdict is exported for the alerts to quote."""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from exporter.analysis.ledger import Lost, loss_began, loss_ended
from exporter.offline.replay import wall
from exporter.offline.traces import TraceWriter
from exporter.serve.metrics import SINCE, Renderer
from tests.analysis.synth import HOST_OK, IDLE, NCCL_SPIN, WORKING, run, steady, switch
from tests.conftest import step
from tests.test_metrics import samples_by_name

REPO = Path(__file__).resolve().parent.parent
T0 = calendar.timegm((2026, 3, 1, 10, 0, 0))  # 10:00:00 UTC
STARVED_FROM, STARVED_UNTIL = 240.0, 420.0  # 10:04:00 to 10:07:00


def _starving(t: float) -> bool:
    """Rank 1 waits for its input one second in three while it starves (a third of its time)."""
    return STARVED_FROM <= t < STARVED_UNTIL and t % 3 >= 2


def _two_gpu_log(path: Path) -> None:
    """Ten minutes of a two-GPU data-parallel job sampled every second: rank 1 starves from 10:04:00 to
    10:07:00, and rank 0 waits for it in NCCL meanwhile."""
    with path.open("w") as stream:
        writer = TraceWriter(stream)
        for k in range(600):
            t = float(k)
            writer.host(replace(HOST_OK, t=T0 + t, core_busy_max=0.99 if _starving(t) else 0.6))
            rank0 = NCCL_SPIN if _starving(t) else WORKING
            rank1 = IDLE if _starving(t) else WORKING
            writer.gpu("0", "NVIDIA H100 80GB HBM3", replace(rank0, t=T0 + t))
            writer.gpu("1", "NVIDIA H100 80GB HBM3", replace(rank1, t=T0 + t))


def _seconds(text: str) -> float:
    """RFC 3339 in UTC, as replay writes it, to Unix seconds."""
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text.removesuffix("Z")).replace(tzinfo=UTC).timestamp()


@pytest.mark.slow
def test_replay_tells_a_starvation_by_when_it_happened_on_the_wall_clock(tmp_path):
    path = tmp_path / "two_gpus.csv"
    _two_gpu_log(path)
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(path), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    summary = lines[-1]
    assert summary["start_time"] == "2026-03-01T10:00:00Z"
    (episode,) = summary["verdicts"]  # one episode: the starving rank's, none for the rank waiting on it
    assert (episode["gpu"], episode["kind"]) == ("1", "data_starvation")
    assert abs(_seconds(episode["start_time"]) - (T0 + STARVED_FROM)) <= 20
    assert abs(_seconds(episode["end_time"]) - (T0 + STARVED_UNTIL)) <= 30
    assert abs(episode["start"] - STARVED_FROM) <= 20 and abs(episode["end"] - STARVED_UNTIL) <= 30
    # the verdict fired after its hold and resolved after its resolve time: both beside the loss
    assert episode["start"] < episode["fired"] < episode["end"] < episode["resolved"]
    assert _seconds(episode["fired_time"]) == T0 + episode["fired"]
    assert _seconds(episode["resolved_time"]) == T0 + episode["resolved"]
    events = [x for x in lines if x["event"] == "verdict"]
    assert [(e["gpu"], e["state"]) for e in events] == [("1", "firing"), ("1", "resolved")]
    firing, resolved = events
    assert firing["since_time"] == episode["start_time"] and firing["time"] == episode["fired_time"]
    assert resolved["until_time"] == episode["end_time"] and resolved["time"] == episode["resolved_time"]
    text = subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    clock = datetime.fromtimestamp(T0 + episode["start"], tz=UTC).strftime("%H:%M:%S")
    assert f"GPU 1: data_starvation from {episode['start']:.0f} s ({clock}) to" in text
    assert f"verdict from {episode['fired']:.0f} s" in text


def test_a_log_without_times_is_on_the_clock_only_where_start_places_it():
    """Samples placed by --period carry trace seconds only (no invented date) unless --start says when."""
    log = REPO / "tests" / "data" / "trace_formats" / "dcgmi_dmon_h100.log"

    def start_time(*args: str) -> str | None:
        done = subprocess.run(
            [sys.executable, "-m", "exporter", "replay", str(log), "--json", "--period", "1", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])["start_time"]

    assert start_time() is None
    assert start_time("--start", "2026-11-24T10:00:00") == "2026-11-24T10:00:00Z"


def test_the_onset_is_the_first_wait_of_the_rhythm_not_the_firing():
    """A rank that starts waiting for its input at 100 s: the verdict fires tens of seconds later (its
    evidence builds over half a minute, then holds), and says the loss began at 100 s."""
    starving = switch(100.0, steady(WORKING), lambda t: IDLE if t % 3 >= 2 else WORKING)
    result = run({"0": starving}, 240.0, dt=1.0)
    (fired,) = result.fired("data_starvation")
    assert fired.t > 120
    assert fired.since is not None and abs(fired.since - 100.0) <= 3
    assert f"its loss began {fired.t - fired.since:.0f} s ago" in fired.describe()  # the live log line
    state = result.states["0"]["data_starvation"]
    assert state.firing and state.since == fired.since


def test_the_end_is_when_the_evidence_cleared_not_when_the_verdict_resolved():
    starving = switch(
        100.0, steady(WORKING), switch(200.0, lambda t: IDLE if t % 3 >= 2 else WORKING, steady(WORKING))
    )
    result = run({"0": starving}, 400.0, dt=1.0)
    (resolved,) = [e for e in result.events if e.kind == "data_starvation" and e.state == "resolved"]
    assert resolved.t > 250  # the resolve time and the evidence window's lag
    assert resolved.until is not None and abs(resolved.until - 200.0) <= 3
    assert resolved.since is not None and abs(resolved.since - 100.0) <= 3


def test_an_idle_gpu_is_idle_since_its_last_kernel():
    """The idle verdict fires after the idle horizon; its loss began at the last kernel."""
    result = run({"0": switch(60.0, steady(WORKING), steady(IDLE))}, 420.0, dt=1.0)
    (fired,) = result.fired("idle_allocated")
    assert fired.t >= 360 and fired.since is not None and abs(fired.since - 60.0) <= 2


def _ticks(losses: list[float], start: float = 0.0) -> list[Lost]:
    return [Lost(start + i + 1.0, 1.0, lost) for i, lost in enumerate(losses)]


def test_the_run_begins_after_the_last_clean_half_minute():
    # a healthy stretch with one blip long before, then a third of each second-triple lost from 60 s
    losses = [0.0] * 60 + [0.0, 0.0, 1.0] * 20
    losses[10] = 1.0
    ticks = _ticks(losses)
    assert loss_began(ticks, clean_at=66.0, first_t=0.0, window_s=30.0) == 62.0
    # never clean since the record began: the loss began with it (or with the job's first work)
    assert loss_began(ticks, clean_at=None, first_t=0.0, window_s=30.0) == 0.0
    assert loss_began(ticks, clean_at=None, first_t=0.0, window_s=30.0, floor=12.0) == 12.0
    # nothing lost since the clean judgement: the ledger does not tell
    assert loss_began(_ticks([0.0] * 90), clean_at=60.0, first_t=0.0, window_s=30.0) is None


def test_the_loss_ends_with_its_last_lossy_stretch():
    losses = [0.0, 0.0, 1.0] * 20 + [0.0] * 60
    ticks = _ticks(losses)
    assert loss_ended(ticks, dirty_at=80.0) == 60.0
    assert loss_ended(ticks, dirty_at=None) is None


def test_the_firing_verdict_exports_when_its_loss_began(make_node, make_sampler, clock):
    began = clock()
    sampler, _ = make_sampler(make_node("data_starvation"))
    snap = step(sampler, clock, cycles=90)
    body, _ = Renderer().render(snap)
    since = samples_by_name(body)[SINCE]
    assert len(since) == 1  # one series per firing verdict, none for the verdicts at rest
    (series,) = since
    firing = [x for x in samples_by_name(body)["gpu_bottleneck"] if x.value == 1]
    (verdict,) = firing
    assert series.labels == verdict.labels  # joins the verdict's series one to one
    assert began <= series.value < clock()
    state = snap.gpus[3].verdicts["data_starvation"]
    assert state.firing and state.since == series.value


def test_wall_clock_times_are_rfc3339_utc_to_the_tenth():
    assert wall(T0, 240.0) == "2026-03-01T10:04:00Z"
    assert wall(T0, 0.3) == "2026-03-01T10:00:00.3Z"  # (not 0.2999...)
    assert wall(T0, 59.96) == "2026-03-01T10:01:00Z"
    assert wall(None, 240.0) is None and wall(T0, None) is None
