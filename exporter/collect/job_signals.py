"""The job's own word about its progress: pod logs (on a thread of their own) and progress reports.

Each cycle the sampler hands over the two sources (either may be off) and which pods hold GPUs; this
takes their latest view and remembers, per GPU, when its job last showed a sign of life (the
``log_silent_s`` column of its points), the newest load its inference server logged, and what kind of
work its pod runs (from the log, else from the pod's and container's names). Their books are the
sampler's, like every source's.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.podlogs.logparse import ServerLoad, WorkloadHint
from exporter.podlogs.workload import name_hint
from exporter.sources.kubelet import PodRef
from exporter.sources.podlogs import PodLogSource, PodLogsView
from exporter.sources.progress import ProgressStore, merged


class JobSignals:
    def __init__(self) -> None:
        self.last_sign: dict[int, float] = {}  # GPU index -> wall time of its job's newest sign of life
        # GPU index -> (time of the line, load) of the newest load line its pod's inference server logged
        self.server_load: dict[int, tuple[float, ServerLoad]] = {}
        self.workload: dict[int, WorkloadHint] = {}  # GPU index -> what its pod runs, where anything says

    def update(
        self,
        podlogs: PodLogSource | None,
        progress: ProgressStore | None,
        gpu_pods: frozenset[tuple[str, str]],
        owners: Mapping[int, PodRef],
    ) -> PodLogsView | None:
        """Hand the pod list to the log source and the progress store; take their latest numbers."""
        view = self._take(podlogs, progress, gpu_pods)
        self.last_sign, self.server_load, self.workload = {}, {}, {}
        for index, ref in owners.items():
            self._note(index, ref, view)
        return view

    @staticmethod
    def _take(
        podlogs: PodLogSource | None, progress: ProgressStore | None, gpu_pods: frozenset[tuple[str, str]]
    ) -> PodLogsView | None:
        if podlogs is None and progress is None:
            return None
        if podlogs is not None:
            podlogs.set_pods(gpu_pods)
        if progress is not None:
            progress.forget_except(gpu_pods)
        return merged(podlogs.view if podlogs else None, progress.view() if progress else {})

    def _note(self, index: int, ref: PodRef, view: PodLogsView | None) -> None:
        """One GPU's signals; the names speak only where the logs say nothing of the workload (or are off)."""
        hint = None
        if view is not None:
            last = view.last_line(ref.namespace, ref.pod)
            if last is not None:
                self.last_sign[index] = last
            load = view.server_load(ref.namespace, ref.pod)
            if load is not None:
                self.server_load[index] = load
            hint = view.workload(ref.namespace, ref.pod)
        hint = hint or name_hint(ref.pod, ref.container)
        if hint is not None:
            self.workload[index] = hint
