"""The job's own word about its progress: pod logs (on a thread of their own) and progress reports.

Each cycle the sampler hands over which pods hold GPUs; this takes their latest view and remembers, per
GPU, when its job last showed a sign of life (the ``log_silent_s`` column of its points).
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.collect.poller import Poller
from exporter.sources.kubelet import PodRef
from exporter.sources.podlogs import PodLogSource, PodLogsView
from exporter.sources.progress import ProgressStore, merged

SOURCE = "podlogs"


class JobSignals:
    def __init__(self, podlogs: PodLogSource | None, progress: ProgressStore | None, poller: Poller) -> None:
        self.podlogs, self.progress, self.poller = podlogs, progress, poller
        self.last_sign: dict[int, float] = {}  # GPU index -> wall time of its job's newest sign of life

    def start(self) -> None:
        if self.podlogs is not None:
            self.podlogs.start()

    def stop(self) -> None:
        if self.podlogs is not None:
            self.podlogs.stop()

    def update(
        self, gpu_pods: frozenset[tuple[str, str]], owners: Mapping[int, PodRef]
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
        if self.podlogs is not None and view is not None:
            self.poller.observe_thread(SOURCE, view)
        self.last_sign = {}
        for index, ref in owners.items():
            last = view.last_line(ref.namespace, ref.pod) if view is not None else None
            if last is not None:
                self.last_sign[index] = last
        return view
