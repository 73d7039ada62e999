"""The progress store: bounded pods, only GPU pods once they are known, seconds per step from reports."""

from __future__ import annotations

import json

import pytest

from exporter.policy.thresholds import PROGRESS_MAX_PODS
from exporter.sources.progress import ProgressError, ProgressStore


def body(pod: str, step: int, namespace: str = "ml") -> bytes:
    return json.dumps({"namespace": namespace, "pod": pod, "step": step}).encode()


def test_pods_are_bounded_and_forgotten_when_they_hold_no_gpu():
    now = [100.0]
    store = ProgressStore(clock=lambda: now[0])
    n = int(PROGRESS_MAX_PODS.value)
    for i in range(n):
        store.report(body(f"p-{i}", 1))
    with pytest.raises(ProgressError) as exc:
        store.report(body("one-more", 1))
    assert exc.value.status == 429 and store.refused == 1
    store.report(body("p-0", 2))  # a known pod still reports
    store.forget_except(frozenset({("ml", "p-0")}))
    assert list(store.view()) == [("ml", "p-0")]
    with pytest.raises(ProgressError) as exc:
        store.report(body("p-1", 3))
    assert exc.value.status == 404


def test_seconds_per_step_from_successive_reports():
    now = [100.0]
    store = ProgressStore(clock=lambda: now[0])
    store.report(body("p", 10))
    now[0] = 112.0
    store.report(body("p", 16))
    got = store.view()[("ml", "p")]
    assert (got.step, got.t, got.step_seconds) == (16, 112.0, 2.0)
