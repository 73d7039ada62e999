"""How long a step may take, as a multiple of a baseline measured in the same test on the same machine.

A busy machine (a shared CI runner, two cores and a build beside the tests) slows a step and its baseline
alike, so no test bounds a duration by a fixed number of seconds (tests/test_timing_rules.py keeps it so).
Speed itself is measured in bench/, one command each, printing figures."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the seconds it took."""
    started = time.monotonic()
    value = fn()
    return value, time.monotonic() - started


def pace(fn: Callable[[], object], repeat: int = 3) -> float:
    """The slowest of ``repeat`` runs of ``fn``: what the step costs on this machine now."""
    return max(timed(fn)[1] for _ in range(repeat))


def assert_within(seconds: float, baseline: float, times: float, what: str) -> None:
    """``seconds`` under ``times`` the ``baseline`` (both measured in this run)."""
    if os.environ.get("GBE_TEST_TIMING"):  # the figures, to see the margin a bound leaves
        print(f"timing: {what}: {seconds:.3f} s, {seconds / baseline:.1f} x the baseline {baseline:.3f} s")
    assert seconds < baseline * times, (
        f"{what}: {seconds:.3f} s, over {times:g} x the baseline of {baseline:.3f} s measured beside it"
    )


HANG_GUARD_S = 120.0  # how long a call may block before a test says it hangs: a guard, not a speed


def returns(fn: Callable[[], T], what: str) -> T:
    """``fn()``, run where a hang fails the test instead of stopping the suite: for a call that must not
    block on what the test holds (a hung read, a call that never returns), whatever the machine's pace."""
    import threading

    out: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), f"{what}: still blocked after {HANG_GUARD_S:g} s"
    if errors:
        raise errors[0]
    return out[0]
