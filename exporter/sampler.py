"""The sampler schedules the sources, feeds the analysis and publishes snapshots; it decides nothing else.

Each cycle starts what is due (the NVML session's per-GPU calls, the host, the kubelet; each on a daemon
thread of its own, see ``exporter.poller``), waits a bounded time, hands every new reading to the
analysis once, and publishes the immutable ``Snapshot`` that ``exporter.snapshot.build`` makes of the
analyzer's result. The HTTP path only ever reads ``Sampler.snapshot``: a hung driver never reaches it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from exporter.analysis.engine import Analyzer, VerdictEvent
from exporter.analysis.pods import gpu_owners
from exporter.analysis.points import GpuPoint, HostPoint, gpu_points, host_point
from exporter.analysis.result import analyze
from exporter.config import Settings
from exporter.errors import ErrorCounter
from exporter.nvml_session import GpuSlot, NvmlSession
from exporter.pod_assignments import PodAssignments
from exporter.poller import Every, Outcome, Poller
from exporter.snapshot import EMPTY_SNAPSHOT, GpuState, GpuView, Snapshot, Sources, build
from exporter.sources.host import HostSource
from exporter.sources.kubelet import PodResourcesSource
from exporter.sources.nvml import NvmlSource
from exporter.sources.podlogs import PodLogSource, PodLogsView
from exporter.sources.progress import ProgressStore, merged
from exporter.sources.readings import GpuIdentity, HostReading

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
        self.nvml = nvml
        self.session = NvmlSession(nvml, settings, errors, self.poller) if nvml is not None else None
        self.host = host
        if host is not None:  # every cycle, never two at once
            self.poller.add(Every("host", 0.0, settings.collect_timeout_s, host.collect))
        self._host_reading: HostReading | None = None
        self._host_done = False
        self.pods: PodAssignments | None = None
        self.kubelet = kubelet
        self.podlogs, self.progress = podlogs, progress  # the job's own word, on threads of their own
        self._progress_t: dict[int, float] = {}  # GPU index -> wall time of its job's newest sign of life
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

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()
        if self.podlogs is not None:
            self.podlogs.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.interval_s * 2 + 1)
        if self.session is not None:
            self.session.close(wait_s=1.0)
        if self.pods is not None:
            self.pods.close()
        if self.podlogs is not None:
            self.podlogs.stop()

    def _loop(self) -> None:
        interval = self.settings.interval_s
        next_t = self.monotonic()
        while not self._stop.is_set():
            try:
                self.cycle()
            except Exception:
                log.exception("sampler cycle failed")
                self.errors.inc("sampler", "InternalError")
            next_t += interval
            delay = next_t - self.monotonic()
            if delay < 0:  # fell behind: skip the missed cycles instead of bursting
                next_t, delay = self.monotonic(), 0.0
            self._stop.wait(delay)

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
            for slot, prev in harvest.readings:
                self._gpu_reading(slot, prev)
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

    def _gpu_reading(self, slot: GpuSlot, prev: object) -> None:
        reading, index = slot.reading, slot.device.index
        assert reading is not None
        failed = [ok for (a, _, cap), ok in self.session.p2p.items() if a == index and cap == "nvlink"]  # type: ignore[union-attr]
        points = gpu_points(reading, prev, p2p_failed=failed.count(False) if failed else None)  # type: ignore[arg-type]
        if index in self._progress_t:
            last = self._progress_t[index]
            points = [replace(p, log_silent_s=max(0.0, p.t - last)) for p in points]
        self.analyzer.set_identity(str(index), reading.identity.name, reading.temp_slowdown_c)
        self.analyzer.add_gpu_points(str(index), points)
        for listener in self.gpu_listeners:
            listener(reading.identity, points)

    # ---- publication -------------------------------------------------------------------------

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
            cause = f", cause {e.cause}" if e.cause else ""
            level = logging.WARNING if e.state == "firing" else logging.INFO
            log.log(level, "GPU %s: %s %s (score %.2f%s)", e.gpu, e.kind, e.state, e.score, cause)
        if not self._ready:
            nvml_settled = session is None or (
                session.attempted and all(s.status != "pending" for s in slots.values())
            )
            self._ready = nvml_settled and (self.host is None or self._host_done)
        gpu_pods = frozenset((a.ref.namespace, a.ref.pod) for a in assignments)
        pod_logs = self._pod_logs(gpu_pods, owners)
        src = Sources(
            nvml_up=session is not None and session.up,
            driver=dict(self.nvml.driver) if self.nvml else {},
            gpus=[
                GpuState(i, s.device.identity, s.status, s.reading, s.collected_t) for i, s in slots.items()
            ],
            xids=session.xids() if session is not None else {},
            p2p=session.p2p if session is not None else {},
            host=self._host_reading,
            assignments=assignments,
            assignment_t=self.pods.t if self.pods is not None else None,
            owners=owners,
            held=held,
            durations=self.poller.durations,
            last_success=self.poller.last_success,
            up=self.poller.up,
            errors=self.errors.snapshot(),
            node_checks=getattr(self.checker, "latest", ()),
            pod_logs=pod_logs,
        )
        self._seq += 1
        self._snapshot = build(self._seq, now, self._ready, src, result)
        return self._snapshot

    def _pod_logs(self, gpu_pods: frozenset[tuple[str, str]], owners: dict) -> PodLogsView | None:
        """Hand the pod list to the log source and the progress store; take their latest numbers."""
        if self.podlogs is None and self.progress is None:
            return None
        if self.podlogs is not None:
            self.podlogs.set_pods(gpu_pods)
        if self.progress is not None:
            self.progress.forget_except(gpu_pods)
        view = merged(
            self.podlogs.view if self.podlogs else None, self.progress.view() if self.progress else {}
        )
        if self.podlogs is not None and view is not None and view.collected_t is not None:
            self.poller.observe("podlogs", True, view.duration_s or 0.0, view.collected_t)
        self._progress_t = {}
        for index, ref in owners.items():
            last = view.last_line(ref.namespace, ref.pod) if view is not None else None
            if last is not None:
                self._progress_t[index] = last
        return view
