"""The node checks, live: the same gathering and checks as ``doctor``, on a thread of their own.

The cheap checks run every ``doctor.fast_interval_seconds``, the costly ones (P2P matrix, kubelet, runtime
bundles) every ``doctor.slow_interval_seconds``; the first round runs them all. Each round replaces the
published tuple of results in one assignment, so the sampler (and through its snapshot, the scrape) only
ever reads a finished round and never waits for NVML.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType

from exporter.config.settings import Settings
from exporter.doctor.checks import CHECKS, run_checks
from exporter.doctor.facts import SIM_CLOCK, ClockFacts
from exporter.doctor.gather import PodSources, gather, kernel_clock
from exporter.doctor.model import Result
from exporter.policy import thresholds as th
from exporter.sources.registry import Inputs, Registration, Round, Schedule, register

log = logging.getLogger(__name__)

XidCounts = Callable[[], dict[int, dict[int, int]] | None]


class NodeChecker:
    def __init__(
        self,
        nvml: ModuleType | None,
        sys_root: str,
        proc_root: str,
        pods: PodSources | None,
        xids: XidCounts | None = None,
        expected_gpus: int | None = None,
        process_owners: bool | None = None,
        clock: Callable[[], ClockFacts | None] = kernel_clock,
        monotonic: Callable[[], float] = time.monotonic,
        fast_s: float = th.DOCTOR_FAST_INTERVAL.value,
        slow_s: float = th.DOCTOR_SLOW_INTERVAL.value,
    ) -> None:
        self.nvml, self.sys_root, self.proc_root, self.pods = nvml, sys_root, proc_root, pods
        self.xids, self.expected_gpus, self.clock = xids, expected_gpus, clock
        self.process_owners = process_owners
        self.monotonic, self.fast_s, self.slow_s = monotonic, fast_s, slow_s
        self.latest: tuple[Result, ...] = ()  # replaced whole by each round: readers need no lock
        self.last_run: dict[str, float] = {}  # check -> wall time of its last result
        # how the last round went (last_round): booked as gpu_exporter_source_up{source="node_checks"}
        self.ok, self.duration_s = True, 0.0
        self.collected_t: float | None = None  # wall time of the last finished round
        self._results: dict[str, Result] = {}
        self._next_slow = float("-inf")
        self._p2p: dict[tuple[int, int, str], bool] | None = None  # the last slow round's P2P matrix
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def for_settings(
        cls,
        settings: Settings,
        nvml: ModuleType | None,
        host_options: dict[str, object],
        xids: XidCounts | None = None,
    ) -> NodeChecker:
        """The checker of a running exporter: its roots, its kubelet socket, the simulator's clock."""
        statvfs = host_options.get("statvfs")
        pods = PodSources(
            settings.pod_resources_socket,
            str(host_options.get("host_root", settings.host_root)),
            **({"statvfs": statvfs} if statvfs else {}),  # type: ignore[arg-type]
        )
        return cls(
            nvml,
            str(host_options.get("sys_root", settings.sys_root)),
            str(host_options.get("proc_root", settings.proc_root)),
            pods,
            xids=xids,
            expected_gpus=settings.expected_gpus or None,
            process_owners=settings.process_owners,
            clock=(lambda: SIM_CLOCK) if settings.simulate else kernel_clock,
        )

    def run_once(self, slow: bool | None = None) -> tuple[Result, ...]:
        """One round: the slow checks too when they are due (or ``slow`` says so); publishes and returns."""
        now = self.monotonic()
        slow = now >= self._next_slow if slow is None else slow
        if slow:
            self._next_slow = now + self.slow_s
        facts = gather(
            self.nvml,
            self.sys_root,
            self.proc_root,
            self.pods,
            want_slow=slow,
            expected_gpus=self.expected_gpus,
            clock=self.clock,
            xids=self.xids,
            process_owners=self.process_owners,
        )
        if slow:
            self._p2p = facts.nvml.p2p
        elif facts.nvml.usable and self._p2p is not None:
            # the fabric check reads NVLink P2P where the driver has no fabric state (A100): the last
            # slow round's matrix, at most a slow interval old, keeps it from flapping between rounds
            facts = replace(facts, nvml=replace(facts.nvml, p2p=self._p2p))
        names = [name for name, check in CHECKS.items() if slow or not check.slow]
        stamp = time.time()
        for result in run_checks(facts, names):
            self._results[result.check] = result
            self.last_run[result.check] = stamp
        self.latest = tuple(self._results[n] for n in CHECKS if n in self._results)
        self.ok, self.collected_t, self.duration_s = True, stamp, self.monotonic() - now
        return self.latest

    def last_round(self) -> Round | None:
        """How the last round went (None before the first): booked as the ``node_checks`` source."""
        if self.collected_t is None:
            return None
        return Round(self.ok, self.collected_t, self.duration_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="node-checks", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # a broken round must not end the checks: report and go on
                log.exception("node checks failed")
                self.ok = False
            self._stop.wait(self.fast_s)


def _build(inputs: Inputs) -> NodeChecker:
    return NodeChecker.for_settings(inputs.settings, inputs.nvml, inputs.host(), xids=inputs.xids)


# its own thread: the cheap checks every doctor.fast_interval_seconds, the costly ones less often
REGISTRATION = register(
    Registration[tuple[Result, ...]]("node_checks", Schedule.OWN_THREAD, tuple[Result, ...], _build)
)
