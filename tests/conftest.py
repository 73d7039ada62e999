from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

import pytest

from exporter.collect.sampler import Sampler
from exporter.config.settings import Settings
from exporter.sim import Capabilities, SimulatedNode
from exporter.sources.errors import ErrorCounter
from exporter.sources.host import HostSource
from exporter.sources.kubelet import PodResourcesSource
from exporter.sources.nvml import NvmlSource
from exporter.sources.processes import ProcessSource

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "traces"  # the labelled example traces (NAME.csv.gz + NAME.labels.json)
T0 = 1_790_000_000.0


class ManualClock:
    """Wall time that moves only when a test says so."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def _missing(what: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required in CI but was not found; `make test` installs it")
    pytest.skip(f"{what} not installed (`make test` installs it)")


def real_nvml_present() -> bool:
    """A real NVIDIA driver on this machine (tests that need none skip there)."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# What a shell gives a command it starts in the foreground of a terminal. Started otherwise (`nohup`, `&` in
# a script), the suite runs with SIGINT and SIGQUIT ignored, and a child inherits an ignored signal through
# exec: a test's Ctrl-C (SIGINT) would not reach it.
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT)


def default_signals() -> None:
    """``preexec_fn`` for a child a test interrupts as a terminal would: the signals a background start
    ignores back to their defaults, so the test passes however the suite was started."""
    for number in TERMINAL_SIGNALS:
        signal.signal(number, signal.SIG_DFL)


def run_replay(path: Path | str, *args: str) -> subprocess.CompletedProcess:
    """The real ``replay`` command on a file, as a user runs it. The timeout only keeps a regression from
    hanging the suite; it is not what is tested."""
    return subprocess.run(
        [sys.executable, "-m", "exporter", "replay", str(path), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def require_tool(name: str) -> str:
    """A tool the test needs: a failure in CI, a skip on a developer machine without it."""
    beside_python = Path(sys.executable).parent / name  # the venv's, when pytest runs unactivated
    path = (
        shutil.which(name)
        or (str(beside_python) if beside_python.exists() else None)
        or (str(REPO / ".tools" / "bin" / name) if (REPO / ".tools/bin" / name).exists() else None)
    )
    if path:
        return path
    _missing(name)


def require_path(path: Path, what: str) -> Path:
    """Installed files the test needs (under .tools): like require_tool."""
    if not path.exists():
        _missing(what)
    return path


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_node(clock: ManualClock) -> Iterator:
    """Build simulated nodes installed into pynvml; closed after the test."""
    nodes: list[SimulatedNode] = []

    def make(
        scenario: str = "healthy", n_gpus: int = 8, capabilities: Capabilities | None = None, **kw
    ) -> SimulatedNode:
        node = SimulatedNode(scenario, n_gpus=n_gpus, clock=clock, capabilities=capabilities, **kw)
        node.install()
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.close()


class RefreshingHostSource(HostSource):
    """Rewrites the simulated /proc before reading it, as the simulator's refresh thread does in a demo."""

    def __init__(self, node: SimulatedNode, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.node = node

    def collect(self):
        self.node.host.refresh()
        return super().collect()


FAST = Settings(
    interval_s=1.0,
    collect_timeout_s=0.5,
    lost_gpu_retry_s=0.0,
    nvml_retry_initial_s=0.0,
    nvml_retry_max_s=0.0,
    slow_interval_s=5.0,
    p2p_interval_s=30.0,
)


@pytest.fixture
def make_sampler(clock: ManualClock, make_node) -> Iterator:
    """A sampler over a simulated node, stepped by hand: ``step()`` advances the clock then cycles."""

    samplers: list[Sampler] = []

    def make(
        node: SimulatedNode, settings: Settings = FAST, pods: bool = False, **overrides
    ) -> tuple[Sampler, ErrorCounter]:
        settings = replace(settings, **overrides)
        errors = ErrorCounter()
        host = RefreshingHostSource(node, errors, clock=clock, **node.host_options())  # type: ignore[arg-type]
        nvml = NvmlSource.configured(node.install(), errors, settings, clock=clock)
        kubelet = PodResourcesSource(errors, node.kubelet_socket, timeout_s=0.5) if pods else None
        opts = node.host_options()
        processes = ProcessSource(errors, str(opts["proc_root"]), str(opts["host_root"]))
        sources = {"host": host, "nvml": nvml, "kubelet": kubelet, "processes": processes}
        sampler = Sampler(settings, errors, sources, clock=clock)
        samplers.append(sampler)
        return sampler, errors

    yield make
    for sampler in samplers:  # stops event watchers before the next test installs another node
        sampler.stop()


def step(sampler: Sampler, clock: ManualClock, seconds: float = 1.0, cycles: int = 1, wait_s: float = 2.0):
    """Advance simulated time and run sampler cycles; returns the last snapshot."""
    snap = None
    for _ in range(cycles):
        clock.advance(seconds)
        snap = sampler.cycle(wait_s=wait_s)
    return snap


# The demo's whole tour (tests/test_demo.py) is twelve minutes of wall time, nearly all of it waiting for
# alerts: it starts as soon as it is collected and runs beside the rest of the suite; its test runs last
# and reads what the tour printed.
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    from tests.test_demo import TOUR_TEST

    tour = [item for item in items if item.name == TOUR_TEST]
    if tour:
        items[:] = [item for item in items if item.name != TOUR_TEST] + tour


def pytest_collection_finish(session: pytest.Session) -> None:
    from tests.test_demo import TOUR_TEST, start_tour

    if session.config.option.collectonly:
        return
    wanted = any(item.name == TOUR_TEST for item in session.items)
    if wanted and shutil.which("prometheus") and shutil.which("prometheus-alertmanager"):
        session.config.demo_tour = start_tour()  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session) -> None:
    tour = getattr(session.config, "demo_tour", None)
    if tour is not None:
        tour.close()


def assert_generated(main, folder: Path, tmp_path: Path) -> None:
    """A generator's ``main([OUT])`` writes exactly the files checked in under ``folder`` (its README
    aside), byte for byte: a generated set is never stale."""
    assert main([str(tmp_path)]) == 0
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(p.name for p in folder.iterdir() if p.name != "README.md")
    for name in made:
        assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), f"stale: {name}"
