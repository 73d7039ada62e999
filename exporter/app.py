"""The application object: wires settings, sources, sampler and renderer. It is the only mutable state
of a running exporter; everything else is passed down from here."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import ModuleType

from exporter.config import Settings
from exporter.doctor.live import NodeChecker
from exporter.errors import ErrorCounter
from exporter.metrics import Family, Renderer
from exporter.sampler import Sampler, Snapshot
from exporter.sources.host import HostSource
from exporter.sources.kubelet import PodResourcesSource
from exporter.sources.nvml import NvmlSource
from exporter.sources.podlogs import PodLogSource
from exporter.sources.progress import ProgressStore

log = logging.getLogger(__name__)


def real_nvml() -> ModuleType | None:
    """The nvidia-ml-py module; None (with a warning) if the bindings are not installed."""
    try:
        import pynvml
    except ImportError:
        log.warning("nvidia-ml-py is not installed: GPU metrics are off")
        return None
    return pynvml


def pod_log_source(settings: Settings, errors: ErrorCounter, sys_root: str) -> PodLogSource | None:
    """The pod-log source when --pod-logs names a directory, with the user's patterns first."""
    if not settings.pod_logs:
        return None
    from exporter.logparse import PATTERNS, load_patterns

    extra = ()
    if settings.log_patterns:
        with open(settings.log_patterns, encoding="utf-8") as f:
            extra = load_patterns(f.read())
    return PodLogSource(settings.pod_logs, errors, extra + PATTERNS, sys_root=sys_root)


class Application:
    def __init__(
        self,
        settings: Settings,
        nvml_module: ModuleType | None,
        host_options: dict[str, object] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.errors = ErrorCounter()
        options: dict[str, object] = {
            "proc_root": settings.proc_root,
            "sys_root": settings.sys_root,
            "host_root": settings.host_root,
            "shm_paths": settings.shm_paths,
        } | (host_options or {})
        host = HostSource(self.errors, clock=clock, **options)  # type: ignore[arg-type]
        nvml = (
            NvmlSource(nvml_module, self.errors, clock=clock, slow_interval_s=settings.slow_interval_s)
            if nvml_module is not None
            else None
        )
        kubelet = (
            PodResourcesSource(self.errors, settings.pod_resources_socket)
            if settings.pod_resources_socket
            else None
        )
        self.progress = ProgressStore(clock) if settings.progress_api else None
        self.sampler = Sampler(
            settings,
            self.errors,
            host,
            nvml,
            clock=clock,
            kubelet=kubelet,
            podlogs=pod_log_source(settings, self.errors, str(options["sys_root"])),
            progress=self.progress,
        )
        # the node doctor's checks, on their own thread; the sampler publishes their latest results
        self.checker = NodeChecker.for_settings(settings, nvml_module, options, xids=self._xids)
        self.sampler.checker = self.checker
        self.renderer = Renderer(settings.detail)
        self.server_families: Callable[[], list[Family]] | None = None  # set by the HTTP server
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            self.sampler.start()
            self.checker.start()

    def stop(self) -> None:
        if self._started:
            self._started = False
            self.checker.stop()
            self.sampler.stop()

    def _xids(self) -> dict[int, dict[int, int]] | None:
        """XIDs counted since the exporter started, for the node checks (None while NVML is down)."""
        snap = self.sampler.snapshot
        return {view.index: dict(view.xids) for view in snap.gpus} if snap.nvml_up else None

    @property
    def snapshot(self) -> Snapshot:
        return self.sampler.snapshot

    def metrics(self, openmetrics: bool = False, gzipped: bool = False) -> tuple[bytes, str]:
        return self.renderer.render(
            self.sampler.snapshot, openmetrics=openmetrics, gzipped=gzipped, extra=self.server_families
        )
