"""The job's own word about its progress: pod logs (on a thread of their own) and progress reports.

Each cycle the sampler hands over the two sources (either may be off) and which pods hold GPUs; this
takes their latest view and remembers, per GPU, when its job last showed a sign of life (the
``log_silent_s`` column of its points). Their books are the sampler's, like every source's.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.sources.kubelet import PodRef
from exporter.sources.podlogs import PodLogSource, PodLogsView
from exporter.sources.progress import ProgressStore, merged


class JobSignals:
    def __init__(self) -> None:
        self.last_sign: dict[int, float] = {}  # GPU index -> wall time of its job's newest sign of life

    def update(
        self,
        podlogs: PodLogSource | None,
        progress: ProgressStore | None,
        gpu_pods: frozenset[tuple[str, str]],
        owners: Mapping[int, PodRef],
    ) -> PodLogsView | None:
        """Hand the pod list to the log source and the progress store; take their latest numbers."""
        if podlogs is None and progress is None:
            return None
        if podlogs is not None:
            podlogs.set_pods(gpu_pods)
        if progress is not None:
            progress.forget_except(gpu_pods)
        view = merged(podlogs.view if podlogs else None, progress.view() if progress else {})
        self.last_sign = {}
        for index, ref in owners.items():
            last = view.last_line(ref.namespace, ref.pod) if view is not None else None
            if last is not None:
                self.last_sign[index] = last
        return view
