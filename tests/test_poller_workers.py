"""Calls run on long-lived workers: a finished worker takes the next call, a hung one never does."""

from __future__ import annotations

import threading
import time

from exporter.collect.poller import Call, Workers
from tests.timing import HANG_GUARD_S


def _call(workers: Workers, fn, *args) -> Call:
    return Call(fn, *args, name="test-call", monotonic=time.monotonic, workers=workers)


def _this_thread() -> threading.Thread:
    return threading.current_thread()


def test_a_finished_worker_takes_the_next_call_instead_of_a_new_thread():
    workers = Workers()
    first = _call(workers, _this_thread)
    assert first.done.wait(5)
    for _ in range(50):  # the worker goes back to the idle list just after it sets done
        if workers._idle:
            break
        time.sleep(0.01)
    second = _call(workers, _this_thread)
    assert second.done.wait(5)
    assert second.result is first.result
    assert second.error is None


def test_a_hung_call_keeps_its_worker_and_the_next_call_gets_another():
    workers = Workers()
    release = threading.Event()
    hung = _call(workers, release.wait)
    other = _call(workers, _this_thread)
    assert other.done.wait(5), "a call waited behind a hung one"
    assert not hung.done.is_set()
    assert hung.overdue(0.0) and not hung.overdue(0.0)  # counted once
    assert other.result is not None
    release.set()
    assert hung.done.wait(5) and hung.result is True


def test_an_exception_is_handed_back_and_the_worker_lives_on():
    workers = Workers()

    def boom() -> None:
        raise RuntimeError("driver went away")

    failed = _call(workers, boom)
    assert failed.done.wait(5)
    assert isinstance(failed.error, RuntimeError) and failed.result is None
    for _ in range(50):
        if workers._idle:
            break
        time.sleep(0.01)
    after = _call(workers, lambda: 7)
    assert after.done.wait(5) and after.result == 7


def test_idle_workers_beyond_the_bound_exit():
    workers = Workers(keep_idle=2)
    release, started = threading.Event(), []

    def hold() -> None:
        started.append(threading.current_thread())
        release.wait()

    calls = [_call(workers, hold) for _ in range(5)]
    deadline = time.monotonic() + HANG_GUARD_S
    while len(started) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(set(started)) == 5  # five calls at once: five workers
    release.set()
    assert all(c.done.wait(5) for c in calls)
    while sum(t.is_alive() for t in started) > 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(workers._idle) == 2
    assert sum(t.is_alive() for t in started) == 2


def test_a_chain_runs_its_turns_in_order_on_one_thread_and_skips_withdrawn_ones():
    from exporter.collect.poller import Turn, run_chain

    seen: list[tuple[str, int]] = []

    def note(name: str) -> str:
        seen.append((name, threading.get_ident()))
        return name

    turns = [Turn(note, name, monotonic=time.monotonic) for name in "abcd"]
    assert turns[2].withdraw()  # not started: taken back
    assert turns[2].elapsed == 0.0 and not turns[2].overdue(0.0)
    workers = Workers()
    chain = _call(workers, run_chain, turns)
    assert chain.done.wait(5)
    assert [name for name, _ in seen] == ["a", "b", "d"]
    assert len({ident for _, ident in seen}) == 1
    assert [t.result for t in turns] == ["a", "b", None, "d"]
    assert not turns[2].done.is_set()
    assert not turns[0].withdraw()  # it ran: it cannot be taken back


def test_a_turn_waiting_behind_a_hung_one_is_not_running_until_it_starts():
    from exporter.collect.poller import Turn, run_chain

    release = threading.Event()
    hung = Turn(release.wait, monotonic=time.monotonic)
    waiting = Turn(_this_thread, monotonic=time.monotonic)
    _call(Workers(), run_chain, [hung, waiting])
    for _ in range(100):
        if hung.started is not None:
            break
        time.sleep(0.01)
    time.sleep(0.05)
    assert hung.overdue(0.01)  # the hung one runs past its limit...
    assert not waiting.overdue(0.0) and waiting.elapsed == 0.0  # ...the one behind it has not started
    assert waiting.withdraw()
    release.set()
    assert hung.done.wait(5)
    time.sleep(0.05)
    assert not waiting.done.is_set()  # withdrawn: the chain skipped it
