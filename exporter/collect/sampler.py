"""The sampler schedules the sources, feeds the analysis and publishes snapshots (it also groups GPUs
into jobs by pod and passes each job's last sign of life to the next cycle's points).

Each cycle starts what is due (the NVML session's per-GPU calls, the host, the kubelet; each on a daemon
thread of its own, see ``exporter.collect.poller``), waits a bounded time, hands every new reading to the
analysis once, and publishes the immutable ``Snapshot`` that ``exporter.collect.snapshot.build`` makes of the
analyzer's result. The HTTP path only ever reads ``Sampler.snapshot``: a hung driver never reaches it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from exporter.analysis.engine import Analyzer, VerdictEvent
from exporter.analysis.pods import gpu_owners
from exporter.analysis.points import GpuPoint, HostPoint, host_point, live_points
from exporter.analysis.result import analyze
from exporter.collect.job_signals import JobSignals
from exporter.collect.nvml_session import NvmlSession
from exporter.collect.pod_assignments import PodAssignments
from exporter.collect.poller import Every, Outcome, Poller, run_every
from exporter.collect.snapshot import EMPTY_SNAPSHOT, GpuView, Snapshot, Sources, build
from exporter.config.settings import Settings
from exporter.sources.errors import ErrorCounter
from exporter.sources.host import HostSource
from exporter.sources.kubelet import PodResourcesSource
from exporter.sources.nvml import NvmlSource
from exporter.sources.podlogs import PodLogSource
from exporter.sources.progress import ProgressStore
from exporter.sources.readings import GpuIdentity, GpuReading, HostReading

__all__ = ["EMPTY_SNAPSHOT", "GpuView", "Sampler", "Snapshot"]
log = logging.getLogger(__name__)


class Sampler:
    def __init__(
        self,
        settings: Settings,
        errors: ErrorCounter,
        host: HostSource | None,
        nvml: NvmlSource | None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        kubelet: PodResourcesSource | None = None,
        podlogs: PodLogSource | None = None,
        progress: ProgressStore | None = None,
    ) -> None:
        self.settings, self.errors, self.clock, self.monotonic = settings, errors, clock, monotonic
        self.poller = Poller(errors, clock, monotonic)
        self.session = NvmlSession(nvml, settings, errors, self.poller) if nvml is not None else None
        self.host = host
        if host is not None:  # every cycle, never two at once
            self.poller.add(Every("host", 0.0, settings.collect_timeout_s, host.collect))
        self._host_reading: HostReading | None = None
        self._host_done = False
        self.pods: PodAssignments | None = None
        self.kubelet = kubelet
        self.job = JobSignals(podlogs, progress, self.poller)  # the job's own word about its progress
        self.analyzer = Analyzer(window_s=settings.window_s)  # owns the windows of points
        self.checker: object | None = None  # the node doctor's NodeChecker (own thread); read, never run here
        self.events: list[VerdictEvent] = []  # verdict changes of the last cycle
        self.gpu_listeners: list[Callable[[GpuIdentity, list[GpuPoint]], None]] = []  # the trace recorder
        self.host_listeners: list[Callable[[HostPoint], None]] = []
        self._snapshot, self._seq, self._ready = EMPTY_SNAPSHOT, 0, False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def kubelet(self) -> PodResourcesSource | None:
        return self.pods.kubelet if self.pods is not None else None

    @kubelet.setter
    def kubelet(self, source: PodResourcesSource | None) -> None:
        self.poller.remove("kubelet")
        self.pods = None
        if source is not None:
            s = self.settings
            self.pods = PodAssignments(
                source, self.poller, s.pod_resources_interval_s, s.collect_timeout_s, self.clock
            )

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def start(self) -> None:
        args = (self.settings.interval_s, self.cycle, self._stop, self.monotonic, self.errors)
        self._thread = threading.Thread(target=run_every, args=args, name="sampler", daemon=True)
        self._thread.start()
        self.job.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.interval_s * 2 + 1)
        if self.session is not None:
            self.session.close(wait_s=1.0)
        if self.pods is not None:
            self.pods.close()
        self.job.stop()

    def cycle(self, wait_s: float | None = None) -> Snapshot:
        """One collection round: start what is due, wait a bounded time, take what came, publish."""
        mono = self.monotonic()
        if self.session is not None:
            self.session.schedule(mono)
        if self.pods is not None:
            self.pods.schedule(mono)
        self.poller.start_due(mono)
        self._wait(mono + (wait_s if wait_s is not None else self.settings.interval_s * 0.8))
        self._take(self.monotonic())
        return self._publish()

    def _wait(self, deadline: float) -> None:
        pending = self.poller.pending() + (self.session.pending() if self.session else [])
        for call in pending + (self.pods.pending() if self.pods else []):
            remaining = deadline - self.monotonic()
            if remaining <= 0:
                return
            call.done.wait(remaining)

    # ---- readings into the analysis, once ----------------------------------------------------

    def _take(self, mono: float) -> None:
        if self.session is not None:
            harvest = self.session.harvest(mono)
            for index in harvest.returned:
                self.analyzer.reset(str(index))
            for reading, prev in harvest.readings:
                self._feed(reading, prev, harvest.p2p)
        outcomes: dict[str, Outcome] = {o.source: o for o in self.poller.harvest()}
        if "host" in outcomes:
            self._host_done = True
            if outcomes["host"].ok:
                prev, self._host_reading = self._host_reading, outcomes["host"].reading  # type: ignore[assignment]
                point = host_point(self._host_reading, prev)  # type: ignore[arg-type]
                self.analyzer.add_host_point(point)
                for listener in self.host_listeners:
                    listener(point)
        if self.pods is not None:
            self.pods.take(outcomes.get("kubelet"), mono)
        if self.session is not None:
            self.session.check_timeouts()
        if "host" in self.poller.overdue():
            self._host_reading = None  # stale host data is not reported

    def _feed(self, reading: GpuReading, prev: GpuReading | None, p2p: dict) -> None:
        gpu, last = str(reading.identity.index), self.job.last_sign.get(reading.identity.index)
        points = live_points(reading, prev, p2p, last)
        self.analyzer.set_identity(gpu, reading.identity.name, reading.temp_slowdown_c)
        self.analyzer.add_gpu_points(gpu, points)
        for listener in self.gpu_listeners:
            listener(reading.identity, points)

    def _publish(self) -> Snapshot:
        now, session = self.clock(), self.session
        slots = session.slots if session is not None else {}
        assignments = self.pods.current if self.pods is not None else ()
        owners, held = gpu_owners(
            assignments,
            [(i, s.device.identity.uuid, s.reading.mig_uuids if s.reading else ()) for i, s in slots.items()],
        )
        # the GPUs of one pod are one job; GPUs no pod is known to hold are taken as one job (as in replay)
        for index in slots:
            ref = owners.get(index)
            self.analyzer.set_group(str(index), f"{ref.namespace}/{ref.pod}" if ref else "node")
        up = [str(i) for i, slot in slots.items() if slot.status == "ok"]
        result = analyze(self.analyzer, now, up, self.settings.window_s)
        self.events = result.events
        for e in self.events:
            log.log(logging.WARNING if e.state == "firing" else logging.INFO, "%s", e.describe())
        if not self._ready:
            nvml_settled = session is None or session.settled
            self._ready = nvml_settled and (self.host is None or self._host_done)
        pod_logs = self.job.update(frozenset((a.ref.namespace, a.ref.pod) for a in assignments), owners)
        self.poller.observe_thread("node_checks", self.checker)
        src = Sources(
            nvml_up=session is not None and session.up,
            driver=dict(session.nvml.driver) if session is not None else {},
            gpus=session.states() if session is not None else [],
            xids=session.xids() if session is not None else {},
            p2p=session.p2p if session is not None else {},
            host=self._host_reading,
            assignments=assignments,
            assignment_t=self.pods.t if self.pods is not None else None,
            owners=owners,
            held=held,
            books=self.poller.books,
            errors=self.errors.snapshot(),
            node_checks=getattr(self.checker, "latest", ()),
            pod_logs=pod_logs,
        )
        self._seq += 1
        self._snapshot = build(self._seq, now, self._ready, src, result)
        return self._snapshot
