"""The sampler schedules the sources, feeds the analysis and publishes snapshots (it also groups GPUs
into jobs by pod and passes each job's last sign of life to the next cycle's points).

The sources come built, by their registered names (``exporter.sources.registry``); each is wired by its
schedule: a polled one is handed to the poller, NVML's to the session, a threaded one is started and
stopped with the sampler, and every one that is not polled is booked from its ``last_round()``. Each
cycle starts what is due (the NVML session's chain of per-GPU reads, the host, the kubelet; each on a
worker thread of its own, see ``exporter.collect.poller``), waits a bounded time, hands every new reading
to the analysis once, and publishes the immutable ``Snapshot`` that ``exporter.collect.snapshot.build``
makes of the analyzer's result. The HTTP path only ever reads ``Sampler.snapshot``: a hung driver never
reaches it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from exporter.analysis.engine import Analyzer, VerdictEvent
from exporter.analysis.mig import gpu_util, instance_points, instance_share, split_gpu_instances
from exporter.analysis.pods import booked_to_server, gpu_owners, pod_uses, share_point, sharing_pods
from exporter.analysis.points import GpuPoint, HostPoint, gpu_points, host_point, p2p_failures
from exporter.analysis.result import Result, analyze
from exporter.analysis.workload import Workload
from exporter.collect.job_signals import JobSignals
from exporter.collect.nvml_session import NvmlSession
from exporter.collect.pod_assignments import PodAssignments
from exporter.collect.poller import Every, Outcome, Poller, run_every
from exporter.collect.snapshot import EMPTY_SNAPSHOT, GpuView, Snapshot, Sources, build
from exporter.config.settings import Settings
from exporter.podlogs.logparse import WorkloadHint
from exporter.podlogs.workload import image_hint, process_hint
from exporter.policy.thresholds import LEDGER_STALE, SERVER_LOAD_FRESH
from exporter.sources.errors import ErrorCounter
from exporter.sources.kubelet import Assignment, PodRef, PodResourcesSource
from exporter.sources.processes import ProcessOwner, ProcessOwners
from exporter.sources.readings import GpuIdentity, GpuReading, HostReading, MigReading
from exporter.sources.registry import Reports, Schedule, Threaded, registration

__all__ = ["EMPTY_SNAPSHOT", "GpuView", "Sampler", "Snapshot"]
log = logging.getLogger(__name__)


class Sampler:
    def __init__(
        self,
        settings: Settings,
        errors: ErrorCounter,
        sources: Mapping[str, object | None],
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.errors, self.clock, self.monotonic = settings, errors, clock, monotonic
        self.poller = Poller(errors, clock, monotonic)
        self.sources: dict[str, object] = {}  # by registered name, as wired
        self.session: NvmlSession | None = None
        self.pods: PodAssignments | None = None
        self._own: dict[str, Reports] = {}  # threads of their own and pushed sources: booked each cycle
        self._host_reading: HostReading | None = None
        self._readings: dict[str, object] = {}  # every polled source's latest reading, published as is
        self._host_done = False
        self._p2p_table: object = None  # the P2P table whose failed peers per GPU are in _p2p_failed
        self._p2p_failed: dict[int, int] = {}
        self._wanted_pids: set[int] | None = None  # the PIDs last handed to the process owners
        self.job = JobSignals()  # the job's own word about its progress
        self.analyzer = Analyzer(window_s=settings.window_s)  # owns the windows of points
        self.events: list[VerdictEvent] = []  # verdict changes of the last cycle
        self.gpu_listeners: list[Callable[[GpuIdentity, list[GpuPoint]], None]] = []  # the trace recorder
        self.host_listeners: list[Callable[[HostPoint], None]] = []
        # GPUs shared by pods (time-slicing, MPS): each pod's share is an entity of the analysis, fed from
        # the processes' slow reads (see _split)
        self._per_process: set[int] = set()  # GPUs whose driver has given per-process utilization
        self._server_booked: set[int] = set()  # GPUs whose MPS server had SM time of its own
        self._fed: dict[int, object] = {}  # GPU -> the processes reading its pods were last fed from
        self._waited: dict[int, object] = {}  # GPU -> a reading held back a cycle for its owners
        self._entities: set[str] = set()
        self._split_pods: dict[int, list[tuple[str, str]]] = {}  # GPU -> the pods it was split among
        self._mig_fed: dict[int, object] = {}  # GPU -> the reading its MIG instances were last fed from
        self._mig_entities: set[str] = set()
        self._mig_last: dict[int, list[tuple[str, str, str, MigReading]]] = {}  # the last cycle's instances
        self._snapshot, self._seq, self._ready = EMPTY_SNAPSHOT, 0, False
        # the last cycle's inputs of build(), made into the snapshot when someone reads it: scraped every
        # 15-60 s, a snapshot built every second would be thrown away unread nearly every time
        self._unbuilt: tuple[int, float, bool, Sources, Result] | None = None
        self._build_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for name, source in sources.items():
            self.attach(name, source)

    def attach(self, name: str, source: object | None) -> None:
        """Wire a registered source by its schedule, in place of any of that name (None: take it away)."""
        entry, s = registration(name), self.settings
        self.poller.remove(name)
        self.poller.books.intervals.pop(name, None)
        self._own.pop(name, None)
        self.sources.pop(name, None)
        self._readings.pop(name, None)
        if name == "kubelet":
            self.pods = None
        if name == "nvml":
            self.session = None
        if source is None:
            return
        self.sources[name] = source
        if entry.schedule.stale_judged:  # started on the sampler's cycle, never more often
            self.poller.books.intervals[name] = max(entry.interval(s), s.interval_s)
        if entry.schedule is Schedule.POLLED:  # never two calls of one source at once
            self.poller.add(Every(name, entry.interval(s), entry.timeout(s), source.collect))  # type: ignore[attr-defined]
        elif entry.schedule is Schedule.PER_GPU:
            self.session = NvmlSession(source, s, self.errors, self.poller)  # type: ignore[arg-type]
        else:
            self._own[name] = source  # type: ignore[assignment]
        if name == "kubelet":  # its answer is held for the pod labels' grace period
            self.pods = PodAssignments(source, self.poller, entry.interval(s), self.clock)  # type: ignore[arg-type]

    @property
    def host(self) -> object | None:
        return self.sources.get("host")

    @property
    def kubelet(self) -> PodResourcesSource | None:
        return self.pods.kubelet if self.pods is not None else None

    @kubelet.setter
    def kubelet(self, source: PodResourcesSource | None) -> None:
        self.attach("kubelet", source)

    @property
    def checker(self) -> object | None:
        return self.sources.get("node_checks")

    @checker.setter
    def checker(self, checker: object | None) -> None:
        self.attach("node_checks", checker)

    def _threads(self) -> list[Threaded]:
        return [
            s  # type: ignore[misc]
            for name, s in self._own.items()
            if registration(name).schedule is Schedule.OWN_THREAD and isinstance(s, Threaded)
        ]

    @property
    def snapshot(self) -> Snapshot:
        """The latest cycle's snapshot (built on its first read)."""
        with self._build_lock:
            if self._unbuilt is not None:
                self._snapshot, self._unbuilt = build(*self._unbuilt), None
            return self._snapshot

    def start(self) -> None:
        args = (self.settings.interval_s, self.turn, self._stop, self.monotonic, self.errors)
        self._thread = threading.Thread(target=run_every, args=args, name="sampler", daemon=True)
        self._thread.start()
        for source in self._threads():
            source.start()

    def stop(self) -> None:
        for source in self._threads():  # first: the node checks call NVML, which the session closes
            source.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.interval_s * 2 + 1)
        if self.session is not None:
            self.session.close(wait_s=1.0)
        if self.pods is not None:
            self.pods.close()

    def cycle(self, wait_s: float | None = None) -> Snapshot:
        """One collection round (``turn``), and its snapshot."""
        self.turn(wait_s)
        return self.snapshot

    def turn(self, wait_s: float | None = None) -> None:
        """One collection round: start what is due, wait a bounded time, take what came, publish."""
        mono = self.monotonic()
        if self.session is not None:
            self.session.schedule(mono)
        if self.pods is not None:
            self.pods.schedule(mono)
        self.poller.start_due(mono)
        self._wait(mono + (wait_s if wait_s is not None else self.settings.interval_s * 0.8))
        self._take(self.monotonic())
        self._publish()

    def _wait(self, deadline: float) -> None:
        """Until every call started is done, or the deadline. The newest first: the GPUs' turns run one
        after another on one thread, so waiting for the last one first wakes this thread once, not once a
        GPU (the same calls are done when it returns, in whichever order they were waited for)."""
        pending = self.poller.pending() + (self.session.pending() if self.session else [])
        for call in reversed(pending + (self.pods.pending() if self.pods else [])):
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
            if harvest.p2p is not self._p2p_table:  # a new P2P table (every few minutes): count afresh
                self._p2p_table, self._p2p_failed = harvest.p2p, p2p_failures(harvest.p2p)
            failed = self._p2p_failed
            for reading, prev in harvest.readings:
                self._feed(reading, prev, failed.get(reading.identity.index))
            self._want_processes()
        outcomes: dict[str, Outcome] = {o.source: o for o in self.poller.harvest()}
        for name, outcome in outcomes.items():  # current only while its last attempt succeeded
            if outcome.ok:
                self._readings[name] = outcome.reading
            else:
                self._readings.pop(name, None)
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
        for name in self.poller.overdue():  # stale data is not reported
            self._readings.pop(name, None)
            if name == "host":
                self._host_reading = None

    def _want_processes(self) -> None:
        """The PIDs the driver lists now go to the process-owner source for its next round."""
        source = self.sources.get("processes")
        if source is None or self.session is None:
            return
        pids = {
            p.pid
            for slot in self.session.slots.values()
            if slot.reading and slot.reading.processes
            for p in slot.reading.processes
        }
        if pids != self._wanted_pids:  # the driver listed another set: its owners are read next cycle
            self._wanted_pids = pids
            source.want(pids)  # type: ignore[attr-defined]
            self.poller.delay("processes", self.monotonic())

    def _feed(self, reading: GpuReading, prev: GpuReading | None, p2p_failed: int | None) -> None:
        index = reading.identity.index
        gpu, last = str(index), self.job.last_sign.get(index)
        seen = self.job.server_load.get(index)
        fresh = seen is not None and reading.t - seen[0] <= SERVER_LOAD_FRESH.value
        load = (float(seen[1].running), float(seen[1].waiting)) if fresh and seen else None
        points = gpu_points(reading, prev, p2p_failed, last, load)
        if reading.migs and all(p.util is None for p in points):  # MIG mode: no utilization of the GPU
            points = [replace(p, util=gpu_util(reading.migs)) for p in points]
        self.analyzer.set_identity(gpu, reading.identity.name, reading.temp_slowdown_c)
        self.analyzer.add_gpu_points(gpu, points)
        for listener in self.gpu_listeners:
            listener(reading.identity, points)

    def _group(self, slots: Mapping[int, object], owners: Mapping[int, PodRef], split: set[int]) -> None:
        """The GPUs of one pod are one job; GPUs no pod is known to hold are taken as one job (as in
        replay); a GPU pods share or cut into MIG instances is a job of its own (its pods' shares and its
        instances are in theirs). Each job's class hint, strongest first: what its pod's log says it is,
        what its processes run, the image its container was started from, what its pod is called."""
        hints: dict[str, Workload | None] = {}
        for index, slot in slots.items():
            ref = owners.get(index)
            group = f"{ref.namespace}/{ref.pod}" if ref else f"{index}/shared" if index in split else "node"
            self.analyzer.set_group(str(index), group)
            hint = self.job.workload.get(index)
            if hint is None or hint.source == "name":  # what it runs says more than what it is called,
                hint = self._process_hint(slot) or self._image_hint(ref) or hint  # and what was shipped too
            if hint is not None or group not in hints:
                hints[group] = Workload(hint.kind, hint.source, hint.evidence) if hint else None
        self.analyzer.set_workloads(hints)

    def _process_hint(self, slot: object) -> WorkloadHint | None:
        """What the GPU's processes' commands say it runs (``tritonserver``, ``ollama``, ``torchrun``,
        ``jupyter-lab``): read only where the process-owner source runs (processOwners.enabled)."""
        found = self._readings.get("processes")
        reading = getattr(slot, "reading", None)
        if not isinstance(found, ProcessOwners) or reading is None or not reading.processes:
            return None
        for process in reading.processes:
            owner = found.owners.get(process.pid)
            hint = process_hint(owner.command) if owner is not None and owner.command else None
            if hint is not None:
                return hint
        return None

    def _image_hint(self, ref: PodRef | None) -> WorkloadHint | None:
        """What the image of the GPU's container says it runs (``vllm/vllm-openai``,
        ``nvcr.io/nvidia/tritonserver``); for a pod whose GPU container is not named, the first of its
        containers' images that says anything. From the runtime's bundles, as the host source last read
        them."""
        images = self._host_reading.pod_images if self._host_reading is not None else {}
        if ref is None or not images:
            return None
        if ref.container:
            image = images.get((ref.namespace, ref.pod, ref.container))
            return image_hint(image) if image else None
        for (namespace, pod, _), image in sorted(images.items()):
            if (namespace, pod) == (ref.namespace, ref.pod) and (hint := image_hint(image)) is not None:
                return hint
        return None

    def _split(
        self, slots: Mapping[int, object], held: Mapping[int, list[tuple[Assignment, str]]]
    ) -> dict[int, list[tuple[str, str, str]]]:
        """GPUs two or more pods hold (time-slicing replicas, MPS) are split once the driver gives
        per-process utilization and the host's /proc the processes' pods: each pod's share is an entity,
        ``<gpu>/<namespace>/<pod>``, fed a point at each processes read. Returns GPU -> (entity, namespace,
        pod) of the split GPUs; the entities of pods that left are forgotten."""
        found = self._readings.get("processes")
        owners = found.owners if isinstance(found, ProcessOwners) else None
        stale_s = self.settings.slow_interval_s + LEDGER_STALE.value  # a point stands for its slow read
        out: dict[int, list[tuple[str, str, str]]] = {}
        for index, slot in slots.items():
            r = slot.reading  # type: ignore[attr-defined]
            pods = sharing_pods(held.get(index, ()))
            split, kept = self._split_state(index, r, pods, owners)
            self.analyzer.set_split(str(index), split or kept)
            if not (split or kept):
                self._split_pods.pop(index, None)
                continue
            self._split_pods[index] = pods
            entities = out[index] = [(f"{index}/{ns}/{pod}", ns, pod) for ns, pod in pods]
            for entity, ns, pod in entities:
                self.analyzer.set_share(entity, 1 / len(pods), stale_s)
                self.analyzer.set_group(entity, f"{ns}/{pod}")
            if not kept:
                self._feed_shares(index, r, pods, owners, entities)  # type: ignore[arg-type]
        now = {entity for entities in out.values() for entity, _, _ in entities}
        for entity in self._entities - now:
            self.analyzer.forget(entity)
        self._entities = now
        return out

    def _split_state(
        self, index: int, r: GpuReading | None, pods: list[tuple[str, str]], owners: object
    ) -> tuple[bool, bool]:
        """Is the GPU split among its pods this cycle, and is that split only kept (a read failed)?"""
        procs = r.processes if r is not None else None
        if procs and any(p.sm_util is not None for p in procs):
            self._per_process.add(index)
        if procs and owners is not None and booked_to_server(procs, owners):  # type: ignore[arg-type]
            self._server_booked.add(index)  # MPS before Volta: the clients' kernels are the server's
        split = len(pods) >= 2 and owners is not None and procs is not None and index in self._per_process
        split = split and index not in self._server_booked  # judged as one GPU from then on
        # a read that failed this cycle (the GPU's, or the owners') keeps the split it had, unfed: the
        # pods' ledgers go on rather than start again from zero
        unread = r is None or procs is None or owners is None
        kept = unread and len(pods) >= 2 and self._split_pods.get(index) == pods
        return split, kept

    def _feed_shares(
        self,
        index: int,
        r: GpuReading,
        pods: list[tuple[str, str]],
        owners: Mapping[int, ProcessOwner],
        entities: list[tuple[str, str, str]],
    ) -> None:
        """Each pod's point from a processes read not fed yet (new PIDs wait one round for their owners)."""
        procs = r.processes
        if procs is None or procs is self._fed.get(index):
            return  # no new processes read since
        if any(p.pid not in owners for p in procs) and self._waited.get(index) is not procs:
            self._waited[index] = procs  # the owners of new PIDs come with the next round: wait once
            return
        self._fed[index] = procs
        for use, (entity, _, _) in zip(pod_uses(procs, owners, pods), entities, strict=True):
            self.analyzer.add_gpu_points(entity, [share_point(r.t, use, len(pods), r.mem_total_bytes)])

    def _mig(
        self, slots: Mapping[int, object], held: Mapping[int, list[tuple[Assignment, str]]]
    ) -> dict[int, list[tuple[str, str, str, MigReading]]]:
        """GPUs in MIG mode: each MIG device is an entity, ``<gpu>/mig<gpu instance>`` (``.<compute
        instance>`` after it where its GPU instance is split into several), booked at its compute slices'
        share of the GPU's wall time (all given out: the instances sum to the GPU), judged for the pod's
        kinds on its own point (its GPM SM activity, its memory; NVML gives no utilization per instance) in
        the group of the pod holding it. Returns GPU -> (entity, namespace, pod, reading)."""
        out: dict[int, list[tuple[str, str, str, MigReading]]] = {}
        for index, slot in slots.items():
            r = slot.reading  # type: ignore[attr-defined]
            if r is None and index in self._mig_last:
                out[index] = self._mig_last[
                    index
                ]  # a failed read (no reading): its instances stay as they were
                continue
            if r is None or not r.migs:
                continue
            self.analyzer.set_split(str(index), True)
            pods = {mig: a.ref for a, mig in held.get(index, ()) if mig}
            entities = out[index] = []
            split = split_gpu_instances(r.migs)
            for m in r.migs:
                ci = f".{m.compute_instance}" if m.gpu_instance in split else ""
                entity, ref = f"{index}/mig{m.gpu_instance}{ci}", pods.get(m.uuid)
                self.analyzer.set_share(entity, instance_share(m, len(r.migs)), LEDGER_STALE.value)
                self.analyzer.set_group(entity, f"{ref.namespace}/{ref.pod}" if ref else entity)
                entities.append((entity, ref.namespace if ref else "", ref.pod if ref else "", m))
            if self._mig_fed.get(index) is r:
                continue  # not collected since
            self._mig_fed[index] = r
            for (entity, _, _, _), point in zip(entities, instance_points(r.t, r.migs, pods), strict=True):
                self.analyzer.add_gpu_points(entity, [point])
        now = {entity for entities in out.values() for entity, _, _, _ in entities}
        for entity in self._mig_entities - now:  # repartitioned, or MIG mode off
            self.analyzer.forget(entity)
        self._mig_entities, self._mig_last = now, out
        return out

    def _publish(self) -> None:
        now, session = self.clock(), self.session
        slots = session.slots if session is not None else {}
        assignments = self.pods.current if self.pods is not None else ()
        owners, held = gpu_owners(
            assignments,
            [(i, s.device.identity.uuid, s.reading.mig_uuids if s.reading else ()) for i, s in slots.items()],
        )
        shares = self._split(slots, held)
        migs = self._mig(slots, held)
        self._group(slots, owners, set(shares) | set(migs))
        up = [str(i) for i, slot in slots.items() if slot.status == "ok"]
        up += [entity for i in up for entity, _, _ in shares.get(int(i), ())]
        up += [entity for i in up if "/" not in i for entity, _, _, _ in migs.get(int(i), ())]
        result = analyze(self.analyzer, now, up, self.settings.window_s)
        self.events = result.events
        for e in self.events:
            log.log(logging.WARNING if e.state == "firing" else logging.INFO, "%s", e.describe())
        if not self._ready:
            nvml_settled = session is None or session.settled
            self._ready = nvml_settled and (self.host is None or self._host_done)
        pod_logs = self.job.update(
            self.sources.get("podlogs"),  # type: ignore[arg-type]
            self.sources.get("progress"),  # type: ignore[arg-type]
            frozenset((a.ref.namespace, a.ref.pod) for a in assignments),
            owners,
        )
        for name, source in self._own.items():  # the sources the poller does not start
            self.poller.observe_round(name, source.last_round())
        src = Sources(
            nvml_up=session is not None and session.up,
            driver=dict(session.nvml.driver) if session is not None else {},
            gpus=session.states() if session is not None else [],
            xids=session.xids() if session is not None else {},
            p2p=session.p2p if session is not None else {},
            host=self._host_reading,
            readings=dict(self._readings),
            assignments=assignments,
            assignment_t=self.pods.t if self.pods is not None else None,
            owners=owners,
            held=held,
            books=self.poller.books.copy(),  # as of this cycle, whenever the snapshot is built
            errors=self.errors.snapshot(),
            node_checks=getattr(self.checker, "latest", ()),
            pod_logs=pod_logs,
            shares=shares,
            migs=migs,
        )
        self._seq += 1
        with self._build_lock:
            self._unbuilt = (self._seq, now, self._ready, src, result)
