"""The sampler: collects every source in the background, keeps windows of points, publishes snapshots.

Each cycle starts one call per GPU (and one for the host) on its own daemon thread, waits a bounded
time, and publishes an immutable ``Snapshot`` from whatever finished. A GPU whose call is still running
after the collection timeout is reported down and counted (``CollectTimeout``); it gets no second call
until the first returns, so a hung driver never piles up threads, never delays the other GPUs, and can
never reach the HTTP path, which only ever reads ``Sampler.snapshot``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from exporter.analysis.engine import Analyzer, KindState, VerdictEvent
from exporter.analysis.pods import default_shm, gpu_owners
from exporter.analysis.points import GpuPoint, HostPoint, gpu_points, host_point
from exporter.analysis.window import Stats, fraction_below, summarize
from exporter.config import Settings
from exporter.errors import ErrorCounter
from exporter.sources.host import HostSource
from exporter.sources.kubelet import Assignment, PodRef, PodResourcesSource
from exporter.sources.nvml import Device, GpuLost, GpuReadFailed, NvmlSource, SessionError, error_name
from exporter.sources.nvml_events import XidWatcher
from exporter.sources.podlogs import PodLogSource, PodLogsView
from exporter.sources.progress import ProgressStore, merged
from exporter.sources.readings import GpuIdentity, GpuReading, HostReading
from exporter.thresholds import (
    KUBELET_SOCKET_RECOUNT,
    KUBELET_SOCKET_WATCH,
    POD_LABEL_GRACE,
    UTIL_IDLE_LINE,
)

log = logging.getLogger(__name__)


class Call:
    """A function running on its own daemon thread, so that a hung driver call blocks nothing."""

    def __init__(
        self, fn: Callable[..., object], *args: object, name: str, monotonic: Callable[[], float]
    ) -> None:
        self._mono = monotonic
        self.started = monotonic()
        self.finished: float | None = None
        self.result: object = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.timed_out = False
        threading.Thread(target=self._run, args=(fn, args), name=name, daemon=True).start()

    def _run(self, fn: Callable[..., object], args: tuple[object, ...]) -> None:
        try:
            self.result = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the sampler thread
            self.error = exc
        finally:
            self.finished = self._mono()
            self.done.set()

    @property
    def elapsed(self) -> float:
        return (self.finished if self.finished is not None else self._mono()) - self.started


@dataclass(frozen=True)
class GpuView:
    """One GPU in a snapshot. ``reading`` and the window fields are None unless the GPU is up."""

    index: int
    identity: GpuIdentity
    status: str  # ok, pending, lost, timeout, error, nvml_down
    reading: GpuReading | None = None
    util_window: Stats | None = None
    power_window: Stats | None = None
    idle_fraction: float | None = None
    xids: dict[int, int] = field(default_factory=dict)
    p2p: dict[tuple[int, str], bool] = field(default_factory=dict)  # (peer index, capability) -> OK
    verdicts: dict[str, KindState] = field(default_factory=dict)  # kind -> score, firing, cause
    ledger: dict[str, float] = field(default_factory=dict)  # state -> seconds of this GPU's time so far
    pod: PodRef | None = None  # the container holding the whole GPU, when exactly one does
    assignments: tuple[
        tuple[Assignment, str], ...
    ] = ()  # every device of it the kubelet gave out (, MIG UUID)
    collected_t: float | None = None  # wall time of its last successful collection (kept while down)

    @property
    def up(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Snapshot:
    seq: int
    t: float
    ready: bool
    nvml_up: bool
    driver: dict[str, str]
    gpus: tuple[GpuView, ...]
    host: HostReading | None
    host_window: dict[str, Stats]
    durations: dict[str, float]
    last_success: dict[str, float]
    errors: dict[tuple[str, str], int]
    pod_shm_default: dict[tuple[str, str], bool] = field(default_factory=dict)  # (ns, pod) of GPU pods
    pod_assignment_t: float | None = None  # wall time of the kubelet answer the pod labels come from
    node_checks: tuple = ()  # the node doctor's latest results (exporter.doctor.model.Result)
    pod_logs: PodLogsView | None = None  # what the GPU pods' logs (and progress reports) say; None: off


EMPTY_SNAPSHOT = Snapshot(0, 0.0, False, False, {}, (), None, {}, {}, {}, {})


@dataclass(eq=False)
class GpuSlot:
    device: Device
    status: str = "pending"
    reading: GpuReading | None = None
    call: Call | None = None
    call_kind: str = ""
    next_reprobe: float = 0.0
    collected_t: float | None = None


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
        self.settings = settings
        # the job's own word (pod logs on their own thread, progress reports): GPU index -> newest sign
        self.podlogs, self.progress = podlogs, progress
        self._progress_t: dict[int, float] = {}
        self.kubelet = kubelet
        self._kubelet_call: Call | None = None
        self._next_kubelet = 0.0
        self._assignments: tuple[Assignment, ...] = ()
        self._assignments_t: float | None = None  # when the kubelet gave them (wall time)
        self._assignments_mono = 0.0  # the same on the monotonic clock, for the grace period
        self._kubelet_ok = False  # did the last List answer
        self._socket_watch: Call | None = None  # looks for a missing PodResources socket
        self._next_socket_watch = 0.0
        self.errors = errors
        self.host = host
        self.nvml = nvml
        self.clock = clock
        self.monotonic = monotonic
        self._snapshot = EMPTY_SNAPSHOT
        self._seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # NVML session
        self._state = "down"  # down, opening, up
        self._open_call: Call | None = None
        self._next_open = 0.0
        self._backoff = settings.nvml_retry_initial_s
        self._last_open_error = ""
        self._nvml_attempted = False
        self._slots: dict[int, GpuSlot] = {}
        self._watcher: XidWatcher | None = None
        self._xid_lock = threading.Lock()
        self._xids: dict[int, Counter[int]] = {}
        self._p2p_call: Call | None = None
        self._next_p2p = 0.0
        self._p2p: dict[tuple[int, int, str], bool] = {}
        # host
        self._host_call: Call | None = None
        self._host_reading: HostReading | None = None
        self._host_done = False
        # the analysis owns the windows of points: window statistics and verdicts come from it
        self.analyzer = Analyzer(window_s=settings.window_s)
        self.checker: object | None = None  # the node doctor's NodeChecker (own thread); read, never run here
        self.events: list[VerdictEvent] = []  # verdict changes of the last cycle
        # self-metrics
        self._durations: dict[str, float] = {}
        self._last_success: dict[str, float] = {}
        self._ready = False
        # listeners get every new point (the trace recorder)
        self.gpu_listeners: list[Callable[[GpuIdentity, list[GpuPoint]], None]] = []
        self.host_listeners: list[Callable[[HostPoint], None]] = []

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
        self._close_session(wait_s=1.0)
        if self.kubelet is not None:
            self.kubelet.close()
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
        """One collection round: start calls, wait a bounded time, publish a snapshot."""
        mono = self.monotonic()
        self._schedule_nvml(mono)
        self._schedule_host()
        self._schedule_kubelet(mono)
        self._wait(mono + (wait_s if wait_s is not None else self.settings.interval_s * 0.8))
        self._harvest()
        self._check_timeouts()
        return self._publish()

    # ---- scheduling --------------------------------------------------------------------------

    def _call(self, fn: Callable[..., object], *args: object, name: str) -> Call:
        return Call(fn, *args, name=name, monotonic=self.monotonic)

    def _schedule_nvml(self, mono: float) -> None:
        if self.nvml is None:
            return
        if self._state == "down" and mono >= self._next_open and self._open_call is None:
            self._open_call = self._call(self.nvml.open, name="nvml-open")
            self._state = "opening"
        if self._state != "up":
            return
        for slot in self._slots.values():
            if slot.call is not None:
                continue
            if slot.device.lost:
                if mono >= slot.next_reprobe:
                    slot.call, slot.call_kind = (
                        self._call(self.nvml.reprobe, slot.device, name="nvml-reprobe"),
                        "reprobe",
                    )
            else:
                slot.call, slot.call_kind = (
                    self._call(self.nvml.collect, slot.device, name="nvml-collect"),
                    "collect",
                )
        if self._p2p_call is None and mono >= self._next_p2p and len(self._slots) > 1:
            devices = [s.device for s in self._slots.values()]
            self._p2p_call = self._call(self.nvml.collect_p2p, devices, name="nvml-p2p")
            self._next_p2p = mono + self.settings.p2p_interval_s

    def _schedule_host(self) -> None:
        if self.host is not None and self._host_call is None:
            self._host_call = self._call(self.host.collect, name="host-collect")

    def _schedule_kubelet(self, mono: float) -> None:
        if self.kubelet is not None and self.kubelet.missing and self._kubelet_call is None:
            self._watch_socket(mono)
        if self.kubelet is not None and self._kubelet_call is None and mono >= self._next_kubelet:
            self._kubelet_call = self._call(self.kubelet.collect, name="kubelet-list")
            self._next_kubelet = mono + self.settings.pod_resources_interval_s

    def _watch_socket(self, mono: float) -> None:
        """While the socket is missing, look for it every second so that labels return within seconds."""
        watch = self._socket_watch
        if watch is not None and watch.done.is_set():
            self._socket_watch = None
            if watch.result is True:  # it is back: ask the kubelet now
                self.kubelet.missing = False  # type: ignore[union-attr]
                self._next_kubelet = mono
                return
        if self._socket_watch is None and mono >= self._next_socket_watch:
            path = self.kubelet.socket_path  # type: ignore[union-attr]
            self._socket_watch = self._call(os.path.exists, path, name="kubelet-socket")
            self._next_socket_watch = mono + KUBELET_SOCKET_WATCH.value

    def _kubelet_failed(self) -> None:
        """The kubelet did not answer: the last assignment stays for the grace period, then goes."""
        self._kubelet_ok = False
        self._expire_assignments()

    def _expire_assignments(self) -> None:
        age = self.monotonic() - self._assignments_mono
        if not self._kubelet_ok and self._assignments_t is not None and age > POD_LABEL_GRACE.value:
            log.info("no kubelet answer for %.0f s: pod labels dropped", age)
            self._assignments, self._assignments_t = (), None

    def _harvest_kubelet(self, mono: float) -> None:
        self._expire_assignments()
        call = self._kubelet_call
        if call is None or not call.done.is_set():
            return
        self._kubelet_call = None
        if call.error is not None:
            self.errors.inc("kubelet", "InternalError", repr(call.error))
            self._kubelet_failed()
        elif call.result is None:  # the kubelet could not say: the last answer holds for a grace period
            self._kubelet_failed()
            if self.kubelet is not None and self.kubelet.missing:  # not a kubelet node, or restarting:
                # counted once a minute; _watch_socket brings it back within seconds of its return
                self._next_kubelet = mono + max(
                    KUBELET_SOCKET_RECOUNT.value, self.settings.pod_resources_interval_s
                )
        else:
            self._assignments = call.result  # type: ignore[assignment]
            self._assignments_t, self._kubelet_ok = self.clock(), True
            self._assignments_mono = self.monotonic()
            self._durations["kubelet"] = call.elapsed
            self._last_success["kubelet"] = self.clock()

    def _pending(self) -> list[Call]:
        calls = [self._open_call, self._host_call, self._p2p_call, self._kubelet_call, self._socket_watch]
        calls += [s.call for s in self._slots.values()]
        return [c for c in calls if c is not None and not c.done.is_set()]

    def _wait(self, deadline: float) -> None:
        for call in self._pending():
            remaining = deadline - self.monotonic()
            if remaining <= 0:
                return
            call.done.wait(remaining)

    # ---- results -----------------------------------------------------------------------------

    def _harvest(self) -> None:
        mono = self.monotonic()
        if self._open_call is not None and self._open_call.done.is_set():
            call, self._open_call = self._open_call, None
            self._nvml_attempted = True
            if call.error is not None:
                self._open_failed(call.error, mono)
            else:
                self._open_succeeded(call.result, mono)  # type: ignore[arg-type]
        session_lost = False
        nvml_times = []
        for slot in self._slots.values():
            call = slot.call
            if call is None or not call.done.is_set():
                continue
            slot.call = None
            if isinstance(call.error, SessionError):
                session_lost = True
            elif slot.call_kind == "reprobe":
                self._reprobed(slot, call, mono)
            elif isinstance(call.error, GpuReadFailed):  # this GPU only; its collection is retried
                if slot.status != "error":
                    log.warning(
                        "GPU %d does not answer (%s); the others keep reporting",
                        slot.device.index,
                        call.error,
                    )
                slot.status, slot.reading = "error", None
            elif isinstance(call.error, GpuLost):
                slot.device.lost, slot.status, slot.reading = True, "lost", None
                slot.next_reprobe = mono + self.settings.lost_gpu_retry_s
                log.warning(
                    "GPU %d is lost (%s); the other GPUs keep reporting", slot.device.index, call.error
                )
            elif call.error is not None:
                self.errors.inc("nvml", "InternalError", repr(call.error))
                log.error("collecting GPU %d failed", slot.device.index, exc_info=call.error)
                slot.status = "error"
            else:
                self._collected(slot, call.result)  # type: ignore[arg-type]
                nvml_times.append(call.elapsed)
        if nvml_times:
            self._durations["nvml"] = max(nvml_times)
            self._last_success["nvml"] = self.clock()
        if self._p2p_call is not None and self._p2p_call.done.is_set():
            call, self._p2p_call = self._p2p_call, None
            if isinstance(call.error, SessionError):
                session_lost = True
            elif call.error is None:
                self._p2p = call.result  # type: ignore[assignment]
        if session_lost:
            self._session_lost(mono)
        self._harvest_host()
        self._harvest_kubelet(mono)

    def _collected(self, slot: GpuSlot, reading: GpuReading) -> None:
        prev, slot.reading, slot.status = slot.reading, reading, "ok"
        slot.collected_t = reading.t
        index = slot.device.index
        failed = [ok for (a, _, cap), ok in self._p2p.items() if a == index and cap == "nvlink"]
        points = gpu_points(reading, prev, p2p_failed=failed.count(False) if failed else None)
        if index in self._progress_t:
            last = self._progress_t[index]
            points = [replace(p, log_silent_s=max(0.0, p.t - last)) for p in points]
        gpu = str(index)
        self.analyzer.set_identity(gpu, reading.identity.name, reading.temp_slowdown_c)
        self.analyzer.add_gpu_points(gpu, points)
        for listener in self.gpu_listeners:
            listener(reading.identity, points)

    def _reprobed(self, slot: GpuSlot, call: Call, mono: float) -> None:
        device = call.result if call.error is None else slot.device
        if isinstance(device, Device) and not device.lost:
            log.info("GPU %d answers again", device.index)
            slot.device, slot.status = device, "pending"
            self.analyzer.reset(str(device.index))
        else:
            slot.next_reprobe = mono + self.settings.lost_gpu_retry_s

    def _harvest_host(self) -> None:
        call = self._host_call
        if call is None or not call.done.is_set():
            return
        self._host_call = None
        self._host_done = True
        if call.error is not None:
            self.errors.inc("host", "InternalError", repr(call.error))
            log.error("host collection failed", exc_info=call.error)
            return
        prev, self._host_reading = self._host_reading, call.result  # type: ignore[assignment]
        point = host_point(self._host_reading, prev)  # type: ignore[arg-type]
        self.analyzer.add_host_point(point)
        for listener in self.host_listeners:
            listener(point)
        self._durations["host"] = call.elapsed
        self._last_success["host"] = self.clock()

    def _check_timeouts(self) -> None:
        limit = self.settings.collect_timeout_s
        for slot in self._slots.values():
            call = slot.call
            if call is not None and not call.done.is_set() and call.elapsed > limit and not call.timed_out:
                call.timed_out = True
                slot.status = "timeout"
                self.errors.inc("nvml", "CollectTimeout", f"GPU {slot.device.index}: a call has not returned")
        calls = (("nvml", self._open_call), ("nvml", self._p2p_call), ("host", self._host_call))
        for source, call in (*calls, ("kubelet", self._kubelet_call)):
            if call is not None and not call.done.is_set() and call.elapsed > limit and not call.timed_out:
                call.timed_out = True
                self.errors.inc(source, "CollectTimeout", "a call has not returned")
                if source == "host":
                    self._host_reading = None  # stale host data is not reported

    # ---- NVML session ------------------------------------------------------------------------

    def _open_succeeded(self, devices: list[Device], mono: float) -> None:
        if not devices:
            self._retry_later("NoGpus", "NVML found no GPUs", mono)
            self._call(self.nvml.close, name="nvml-close")  # type: ignore[union-attr]
            return
        self._state = "up"
        self._backoff = self.settings.nvml_retry_initial_s
        self._last_open_error = ""
        before, self._slots = self._slots, {}
        for dev in devices:
            slot = GpuSlot(device=dev)
            old = before.get(dev.index)
            if old is not None and old.device.identity.uuid == dev.identity.uuid:
                slot.collected_t = old.collected_t  # the age of its data outlives a session restart
            if dev.lost:
                slot.status, slot.next_reprobe = "lost", mono + self.settings.lost_gpu_retry_s
            self._slots[dev.index] = slot
        self._next_p2p = mono
        self._watcher = XidWatcher(self.nvml.N, devices, self.errors, self._on_xid)  # type: ignore[union-attr]
        self._watcher.start()
        log.info(
            "NVML up: %d GPU(s), driver %s, CUDA %s",
            len(devices),
            self.nvml.driver.get("driver_version", "?"),  # type: ignore[union-attr]
            self.nvml.driver.get("cuda_version", "?"),  # type: ignore[union-attr]
        )

    def _open_failed(self, error: BaseException, mono: float) -> None:
        name = error_name(error, self.nvml.N) if self.nvml else type(error).__name__
        self.errors.inc("nvml", name, "nvmlInit", level=logging.DEBUG)  # _retry_later's warning says it
        self._retry_later(name, str(error), mono)
        self._call(self.nvml.close, name="nvml-close")  # type: ignore[union-attr]

    def _retry_later(self, name: str, detail: str, mono: float) -> None:
        if name != self._last_open_error:
            log.warning(
                "NVML is not usable (%s: %s): serving host and exporter metrics only; retrying in %.0f s, "
                "backing off to %.0f s",
                name,
                detail,
                self._backoff,
                self.settings.nvml_retry_max_s,
            )
            self._last_open_error = name
        self._state = "down"
        self._next_open = mono + self._backoff
        self._backoff = min(self._backoff * 2, self.settings.nvml_retry_max_s)

    def _session_lost(self, mono: float) -> None:
        log.warning("the NVML session is gone (driver unloaded or mismatched); re-initialising with backoff")
        self._close_session(wait_s=0.0)
        for slot in self._slots.values():
            slot.status, slot.reading, slot.call = "nvml_down", None, None
        self._state = "down"
        self._last_open_error = ""
        self._next_open = mono + self._backoff
        self._backoff = min(self._backoff * 2, self.settings.nvml_retry_max_s)

    def _close_session(self, wait_s: float) -> None:
        if self._watcher is not None:
            self._watcher.stop(timeout=wait_s)
            self._watcher = None
        if self.nvml is not None and self._state == "up":
            close = self._call(self.nvml.close, [s.device for s in self._slots.values()], name="nvml-close")
            close.done.wait(wait_s)

    def _on_xid(self, index: int, xid: int) -> None:
        with self._xid_lock:
            self._xids.setdefault(index, Counter())[xid] += 1

    # ---- snapshot ----------------------------------------------------------------------------

    def _publish(self) -> Snapshot:
        now = self.clock()
        with self._xid_lock:
            xids = {i: dict(c) for i, c in self._xids.items()}
        owners, held = gpu_owners(
            self._assignments,
            [
                (i, s.device.identity.uuid, s.reading.mig_uuids if s.reading else ())
                for i, s in self._slots.items()
            ],
        )
        # the GPUs of one pod are one job; GPUs no pod is known to hold are taken as one job (as in replay)
        for index in self._slots:
            ref = owners.get(index)
            self.analyzer.set_group(str(index), f"{ref.namespace}/{ref.pod}" if ref else "node")
        up = [str(i) for i, slot in self._slots.items() if slot.status == "ok"]
        verdicts, self.events = self.analyzer.evaluate(now, up)
        for event in self.events:
            log.log(
                logging.WARNING if event.state == "firing" else logging.INFO,
                "GPU %s: %s %s (score %.2f%s)",
                event.gpu,
                event.kind,
                event.state,
                event.score,
                f", cause {event.cause}" if event.cause else "",
            )
        views = []
        for index in sorted(self._slots):
            slot = self._slots[index]
            is_up = slot.status == "ok"
            # the analyzer keeps at least its evidence window; the exported statistics cover --window
            recent = [p for p in self.analyzer.window(str(index)) if p.t > now - self.settings.window_s]
            # a window is current only while its signal is: a failed read does not leave its window behind
            has_util = is_up and slot.reading is not None and slot.reading.util is not None
            has_power = is_up and slot.reading is not None and slot.reading.power_w is not None
            util = [p.util for p in recent if p.util is not None] if has_util else []
            views.append(
                GpuView(
                    index=index,
                    identity=slot.device.identity,
                    status=slot.status,
                    reading=slot.reading if is_up else None,
                    util_window=summarize(util),
                    power_window=summarize([p.power_w for p in recent if p.power_w is not None])
                    if has_power
                    else None,
                    idle_fraction=fraction_below(util, UTIL_IDLE_LINE.value),
                    xids=xids.get(index, {}),
                    p2p={(b, cap): ok for (a, b, cap), ok in self._p2p.items() if a == index},
                    verdicts=verdicts.get(str(index), {}),
                    ledger=dict(self.analyzer.ledger(str(index)).totals),
                    pod=owners.get(index),
                    assignments=tuple(held.get(index, ())),
                    collected_t=slot.collected_t,
                )
            )
        host_recent = [p for p in self.analyzer.host_window if p.t > now - self.settings.window_s]
        host_window = {
            name: stats
            for name in ("iowait", "core_busy_max")
            if (stats := summarize([v for p in host_recent if (v := getattr(p, name)) is not None]))
            is not None
        }
        if not self._ready:
            nvml_settled = self.nvml is None or (
                self._nvml_attempted and all(s.status != "pending" for s in self._slots.values())
            )
            self._ready = nvml_settled and (self.host is None or self._host_done)
        gpu_pods = {(a.ref.namespace, a.ref.pod) for a in self._assignments}
        host = self._host_reading
        if host is not None:  # a pod's own /dev/shm is worth a series only when the pod holds GPUs
            shm = tuple(s for s in host.shm if s.volume != "dev-shm" or (s.namespace, s.pod) in gpu_pods)
            host = replace(host, shm=shm)
        shm_default = default_shm(gpu_pods, host.shm, host.pod_dev_shm) if host is not None else {}
        pod_logs = self._progress_signals(frozenset(gpu_pods), owners)
        self._seq += 1
        self._snapshot = Snapshot(
            seq=self._seq,
            t=now,
            ready=self._ready,
            nvml_up=self._state == "up",
            driver=dict(self.nvml.driver) if self.nvml else {},
            gpus=tuple(views),
            host=host,
            host_window=host_window,
            durations=dict(self._durations),
            last_success=dict(self._last_success),
            errors=self.errors.snapshot(),
            pod_shm_default=shm_default,
            pod_assignment_t=self._assignments_t,
            node_checks=getattr(self.checker, "latest", ()),
            pod_logs=pod_logs,
        )
        return self._snapshot

    def _progress_signals(
        self, gpu_pods: frozenset[tuple[str, str]], owners: dict[int, PodRef]
    ) -> PodLogsView | None:
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
            self._durations["podlogs"] = view.duration_s or 0.0
            self._last_success["podlogs"] = view.collected_t
        self._progress_t = {}
        for index, ref in owners.items():
            last = view.last_line(ref.namespace, ref.pod) if view is not None else None
            if last is not None:
                self._progress_t[index] = last
        return view
