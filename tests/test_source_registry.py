"""The source registry: every source declared once, built from Settings, and booked by the poller in the
same two families whatever its schedule (polled, per GPU, its own thread, pushed)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest

from exporter.app import SOURCE_MODULES
from exporter.collect.poller import Poller
from exporter.collect.sampler import Sampler
from exporter.config.settings import Settings
from exporter.serve.metrics import Renderer
from exporter.sources.errors import ErrorCounter
from exporter.sources.progress import ProgressError, ProgressStore
from exporter.sources.registry import (
    REGISTRY,
    Inputs,
    Registration,
    Round,
    Schedule,
    build_sources,
    register,
)

SCHEDULES = {
    "nvml": Schedule.PER_GPU,
    "host": Schedule.POLLED,
    "kubelet": Schedule.POLLED,
    "processes": Schedule.POLLED,
    "podlogs": Schedule.OWN_THREAD,
    "node_checks": Schedule.OWN_THREAD,
    "progress": Schedule.PUSHED,
}


def test_every_source_of_the_application_is_registered_with_its_schedule():
    assert len(SOURCE_MODULES) == len(SCHEDULES)
    assert {name: entry.schedule for name, entry in REGISTRY.items()} == SCHEDULES
    # only the sources started on the sampler's cadence are judged by the stale-collection alert
    judged = {"nvml", "host", "kubelet", "processes"}
    assert {n for n, e in REGISTRY.items() if e.schedule.stale_judged} == judged


def test_settings_decide_which_sources_are_built(tmp_path):
    settings = Settings(pod_resources_socket="")
    assert set(build_sources(Inputs(settings, ErrorCounter()))) == {"host", "node_checks"}
    on = replace(
        settings, pod_resources_socket=str(tmp_path / "k.sock"), pod_logs=str(tmp_path), progress_api=True
    )
    built = build_sources(Inputs(on, ErrorCounter()))
    assert set(built) == {"host", "kubelet", "podlogs", "progress", "node_checks"}  # no NVML module: no nvml
    assert isinstance(built["progress"], ProgressStore)


def test_a_name_is_registered_once():
    host = REGISTRY["host"]
    assert register(host) is host  # the same declaration again (a module imported twice) is harmless
    with pytest.raises(ValueError, match="registered twice"):
        register(Registration("host", Schedule.POLLED, object, lambda inputs: None))


def test_an_unregistered_source_is_refused_by_the_sampler():
    with pytest.raises(KeyError, match="no source 'infiniband'"):
        Sampler(Settings(), ErrorCounter(), {"infiniband": object()})


def report(pod: str, step: int) -> bytes:
    return json.dumps({"namespace": "ml", "pod": pod, "step": step}).encode()


def test_pushed_progress_is_up_while_its_last_report_was_accepted(clock):
    store = ProgressStore(clock)
    sampler = Sampler(Settings(), ErrorCounter(), {"progress": store}, clock=clock)
    assert "progress" not in sampler.cycle(wait_s=0).source_up  # no report yet: nothing to book
    store.allowed = None  # any pod, as before the kubelet names the GPU pods
    store.report(report("train-0", 1))
    snap = sampler.cycle(wait_s=0)
    assert snap.source_up["progress"] and 0 <= snap.source_durations["progress"] < 1
    with pytest.raises(ProgressError):
        store.report(b"not json")
    snap = sampler.cycle(wait_s=0)
    assert snap.source_up == {"progress": False}
    text = Renderer().render(snap)[0].decode()
    assert 'gpu_exporter_source_up{source="progress"} 0' in text
    # a job pushes when it likes: its silence is not a stale collection
    assert 'gpu_exporter_last_collect_timestamp_seconds{source="progress"}' not in text


def test_a_round_of_its_own_books_success_and_duration_but_no_success_time(clock):
    poller = Poller(ErrorCounter(), clock, clock)
    poller.observe_round("node_checks", None)
    assert poller.books.up == {}  # before the first round
    poller.observe_round("node_checks", Round(False, clock(), 0.25))
    assert poller.books.up == {"node_checks": False} and poller.books.durations == {"node_checks": 0.25}
    poller.observe("host", True, 0.01)
    assert poller.books.last_success == {"host": clock()}


def test_a_failed_pass_of_the_pod_logs_books_them_down(tmp_path):
    from exporter.sources.podlogs import PodLogSource

    errors = ErrorCounter()
    source = PodLogSource(str(tmp_path), errors, sys_root=str(tmp_path))
    source.poll()
    assert source.last_round() is not None and source.last_round().ok

    def broken() -> None:
        source._stop.set()  # one pass of the thread's loop
        raise RuntimeError("bug")

    source.poll = broken  # type: ignore[method-assign]
    source._loop()
    last = source.last_round()
    assert last is not None and not last.ok and errors.snapshot()[("podlogs", "InternalError")] == 1


@pytest.fixture
def infiniband():
    """A source registered the way a new one would be (removed again after the test)."""
    entry = register(
        Registration[dict](
            "infiniband", Schedule.POLLED, dict, lambda inputs: None, interval=lambda settings: 0.0
        )
    )
    try:
        yield entry
    finally:
        del REGISTRY[entry.name]


class Ports:
    def __init__(self) -> None:
        self.calls, self.fail, self.hang = 0, False, threading.Event()  # hang: set lets a call return

    def collect(self) -> dict:
        self.calls += 1
        if self.fail:
            raise OSError("no /sys/class/infiniband")
        if not self.hang.is_set():
            self.hang.wait(5.0)  # held until the test lets it go
        return {"mlx5_0/1": 12345}


def test_a_new_polled_source_is_wired_booked_and_published_from_its_registration(infiniband, clock):
    ports, errors = Ports(), ErrorCounter()
    ports.hang.set()
    sampler = Sampler(replace(Settings(), collect_timeout_s=0.2), errors, {"infiniband": ports}, clock=clock)
    snap = sampler.cycle(wait_s=1.0)
    assert snap.readings == {"infiniband": {"mlx5_0/1": 12345}}
    assert snap.source_up == {"infiniband": True} and snap.last_success == {"infiniband": clock()}
    ports.fail = True
    snap = sampler.cycle(wait_s=1.0)
    assert snap.source_up == {"infiniband": False} and errors.snapshot()[("infiniband", "InternalError")] == 1
    assert snap.readings == {}  # a failed attempt leaves no value behind
    ports.fail = False
    assert sampler.cycle(wait_s=1.0).readings == {"infiniband": {"mlx5_0/1": 12345}}
    ports.hang.clear()  # the next call hangs: counted once, never started twice, its reading dropped
    for _ in range(3):
        snap = sampler.cycle(wait_s=0.3)
    assert ports.calls == 4 and errors.snapshot()[("infiniband", "CollectTimeout")] == 1
    assert snap.source_up == {"infiniband": False} and snap.readings == {}
    ports.hang.set()


def test_the_metric_docs_list_every_registered_source():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    table = doc.split("### Source health", 1)[1].split("\n\n")[2]
    rows = {line.split("|")[1].strip().strip("`") for line in table.splitlines()[2:]}
    assert rows == set(REGISTRY)
