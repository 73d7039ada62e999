"""Calls run on reused worker threads, and a hung call still blocks nothing."""

from __future__ import annotations

import threading
import time

from exporter.poller import Call


def _call(fn, name="test-call") -> Call:
    return Call(fn, name=name, monotonic=time.monotonic)


def test_a_finished_call_leaves_its_thread_for_the_next():
    first = _call(threading.get_ident)
    assert first.done.wait(5)
    time.sleep(0.05)  # the worker goes back to waiting after setting done
    second = _call(threading.get_ident, name="other-call")
    assert second.done.wait(5)
    assert second.result == first.result
    assert second.error is None


def test_a_hung_call_does_not_hold_up_the_next_one():
    release = threading.Event()
    hung = _call(lambda: release.wait(30))
    try:
        quick = _call(lambda: threading.current_thread().name, name="quick-call")
        assert quick.done.wait(5), "the second call waited behind the hung one"
        assert quick.result == "quick-call"  # the thread is named after the call it runs
        assert not hung.done.is_set()
    finally:
        release.set()
    assert hung.done.wait(5)


def test_an_exception_is_handed_over_and_the_worker_survives():
    def boom() -> None:
        raise RuntimeError("driver said no")

    failed = _call(boom)
    assert failed.done.wait(5)
    assert isinstance(failed.error, RuntimeError)
    after = _call(lambda: 42)
    assert after.done.wait(5)
    assert after.result == 42
