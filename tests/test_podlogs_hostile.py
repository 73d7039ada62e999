"""A pod's log is written by whoever runs the pod: no line may cost the parser more than linear time, and
none may delay a scrape. Every pattern is run on generated lines of the shapes that make backtracking
patterns slow (long runs after a keyword, a pattern's head repeated with its tail never coming), at two
lengths: the longer must not cost much more than twice the shorter, and neither more than a few
milliseconds. End to end, the exporter keeps answering scrapes fast while such lines pour into a
simulated pod's log, and stops at once on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from bench.podlogs import cri_records, hostile_lines
from exporter.podlogs import logparse as lp
from scripts.stack import free_port
from tests.conftest import REPO
from tests.e2e.test_http import families, wait_ready
from tests.timing import HANG_GUARD_S, assert_within, timed

SHORT, LONG = 40 << 10, 80 << 10  # characters: the second twice the first, beyond the joined-line bound


def _every_regex() -> dict[str, re.Pattern[str]]:
    """Each regex the parser runs on log text, named."""
    found: dict[str, re.Pattern[str]] = {f"progress:{p.name}": p.regex for p in lp.PATTERNS}
    found |= {f"error:{s.item}": s.regex for s in lp.ERROR_SIGNS}
    found |= {f"bad:{name}": regex for name, (regex, _, _) in lp.KNOWN_BAD.items()}
    found |= {f"workload:{w.hint.evidence}": w.regex for w in lp.WORKLOAD_LINES}
    found |= {name: v for name, v in vars(lp).items() if isinstance(v, re.Pattern)}
    return found


REGEXES = _every_regex()


def _cpu(fn, *args) -> float:  # type: ignore[no-untyped-def]
    """The least of three runs' CPU seconds: a busy machine adds to one run, not to all."""
    best = float("inf")
    for _ in range(3):
        started = time.thread_time()
        fn(*args)
        best = min(best, time.thread_time() - started)
    return best


def test_the_table_reaches_every_regex():
    assert len(REGEXES) >= 40  # the progress table, the error signs, known-bad and workload lines, helpers


@pytest.mark.parametrize("shape", sorted(hostile_lines(64)))
def test_every_pattern_is_linear_in_a_hostile_line(shape):
    """Raw, without the window the parser cuts: each regex alone is linear in the line's length."""
    short, long = hostile_lines(SHORT)[shape], hostile_lines(LONG)[shape]
    slow = {}
    for name, regex in REGEXES.items():
        t_short, t_long = _cpu(regex.search, short), _cpu(regex.search, long)
        # 3x for twice the input, with 2 ms for timer noise on tiny figures; a quadratic pattern is 4x
        # and takes seconds here
        if t_long > 0.02 or t_long > 3 * t_short + 0.002:
            slow[name] = (round(t_short, 4), round(t_long, 4))
    assert not slow, slow


@pytest.mark.parametrize("shape", sorted(hostile_lines(64)))
def test_the_parser_takes_milliseconds_on_a_hostile_containerd_line(shape):
    """The attack as the source sees it: one 64 KiB line in four P records and an F."""
    records = cri_records(hostile_lines((64 << 10) + 1)[shape])
    assert [r.split(" ", 3)[2] for r in records] == ["P", "P", "P", "P", "F"]
    assert _cpu(lambda: lp.LogState().feed_cri(records)) < 0.05
    assert _cpu(lp.match_progress, "".join(r.split(" ", 3)[3] for r in records)) < 0.05


# ---- the exporter under a flood of hostile lines ---------------------------------------------------------


def _pod_log(tmp: Path, timeout: float = 20.0) -> Path:
    """The simulated training pod's container log, once the simulator has written it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(tmp.glob("gbe-sim-host-*/pods/ml_llm-train-0_*/trainer/0.log"))
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no simulated pod log under {tmp}")


def _hostile_records(n: int) -> list[str]:
    """The n-th write: a 64 KiB line of repeated NCCL WARN and two other hostile shapes in turn, as
    containerd writes them (four P records and an F each), stamped now. About 200 KB: three a second
    stay below what the source reads of a log in one pass, so each line is parsed, none skipped."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    lines = hostile_lines((64 << 10) + 1)
    others = sorted(set(lines) - {"nccl_warn"})
    out = cri_records(lines["nccl_warn"], stamp)
    for shape in (others[(2 * n) % len(others)], others[(2 * n + 1) % len(others)]):
        out += cri_records(lines[shape], stamp)
    return out


SCRAPES = 100  # scrapes of the quiet pod, then as many while it logs hostile lines
SCRAPE_TIMES = 10  # how much slower than the quiet pod's a scrape beside the parser may be


@pytest.mark.slow
def test_scrapes_stay_fast_while_a_pod_logs_hostile_lines_and_sigterm_stops_at_once(tmp_path):
    port = free_port()
    args = ["--simulate", "healthy", "--sim-gpus", "2", "--pod-logs", "on", "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", *args, "--listen-address", "127.0.0.1"],
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _, start_s = timed(lambda: wait_ready(url))  # the baseline of a stop: a start, here and now
        log = _pod_log(tmp_path)
        latencies: list[float] = []
        rounds = 0
        with httpx.Client(timeout=120) as client:

            def scrape() -> float:
                response, took = timed(lambda: client.get(url + "/metrics"))
                assert response.status_code == 200
                time.sleep(0.02)
                return took

            quiet = sorted(scrape() for _ in range(SCRAPES))  # the baseline: scrapes of the quiet pod
            next_write = time.monotonic()
            for _ in range(SCRAPES):
                if time.monotonic() >= next_write:  # three hostile lines three times a second
                    with log.open("a") as f:
                        f.write("\n".join(_hostile_records(rounds)) + "\n")
                    rounds += 1
                    next_write += 1 / 3
                latencies.append(scrape())
            # every NCCL WARN line was read: the parser got through all of them
            deadline = time.monotonic() + HANG_GUARD_S
            while time.monotonic() < deadline:
                found = families(client.get(url + "/metrics").text).get("gpu_pod_nccl_warnings", [])
                warnings = [s for s in found if s.name.endswith("_total")]
                if warnings and warnings[0].value >= rounds:
                    break
                time.sleep(0.2)
            assert warnings and warnings[0].value >= rounds, (warnings, rounds)
        assert rounds >= 2, "the scrapes ended before the pod wrote twice"
        # a scrape serves the last snapshot: the parser's work beside it slows it no more than a busy
        # machine does (a parser in its way, or one backtracking, held scrapes for seconds)
        latencies.sort()
        p95 = latencies[int(len(latencies) * 0.95)]
        assert_within(p95, quiet[int(len(quiet) * 0.95)], SCRAPE_TIMES, "p95 of scrapes beside hostile lines")
        assert_within(latencies[-1], quiet[-1], SCRAPE_TIMES, "the slowest scrape beside hostile lines")
        # SIGTERM, with lines still arriving: stopped before a start would have ended
        with log.open("a") as f:
            f.write("\n".join(_hostile_records(rounds)) + "\n")
        proc.send_signal(signal.SIGTERM)
        (out, _), stop_s = timed(lambda: proc.communicate(timeout=600))
        assert proc.returncode == 0, out
        assert_within(stop_s, start_s, 1, "SIGTERM with hostile lines arriving")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
